/**
 * torchrun's restarts, for a world that cannot take a rank back.
 *
 * A `command:` job without `dataset_size` runs its own torch.distributed
 * world, fixed at formation: a rank restarted on its own finds its peers in
 * collectives of a world it is no longer part of, their gloo or NCCL calls
 * fail, and each of them is restarted on its own in turn until the restart
 * intensity runs out. torchrun restarts every worker and they resume from
 * the user's snapshot, which such a job already writes. So here a restart
 * whose `scope` the file leaves out restarts the group (`scope: all`), the
 * word `restart` and `--policy restart:N` included; a file that writes
 * `scope: one` keeps it, with a note saying what it costs.
 *
 * Jobs that take a rank back (an `entry:` job, a command job on the Python
 * client with `dataset_size`) keep per-rank restarts as their default.
 */
import type { ConfigError } from "./reading/ConfigError.ts"
import type { FailurePolicy } from "./FailurePolicy.ts"
import { noteAt } from "./FlodlKeys.ts"
import type { Field } from "./reading/Yaml.ts"
import { Phased, Restart, type Simple } from "../kernel/policy/Strategy.ts"

const phases = ["before_formation", "after_formation"] as const

/** The `scope` key of a phase's restart as written (absent for the word `restart` or a restart without one). */
const scopeOf = (phase: Field): Field => phase.get("restart").get("scope")

const asGroup = (strategy: Simple, scope: Field): Simple =>
  strategy._tag === "Restart" && !scope.present ? new Restart({ ...strategy, scope: "all" }) : strategy

/**
 * `policy` with every restart whose scope the file (`written`: its `failure_policy`) leaves out made a group restart;
 * a `scope: one` it writes is kept and noted.
 */
export const restartsForFixedWorld = (policy: FailurePolicy, written: Field, notes: Array<ConfigError>): FailurePolicy => {
  const strategy = policy.strategy
  for (const phase of phases) {
    const scope = scopeOf(written.get(phase))
    const restart: Simple = phase === "before_formation" ? strategy.beforeFormation : strategy.afterFormation
    if (restart._tag === "Restart" && scope.present && restart.scope === "one") {
      notes.push(noteAt(
        scope,
        scope.anchor ?? null,
        "scope: one restarts a rank on its own into a torch world fixed at formation (a command job without dataset_size): " +
          "its peers' collectives then fail and are restarted one by one; scope: all restarts the group from your snapshot, as torchrun does"
      ))
    }
  }
  const beforeFormation = asGroup(strategy.beforeFormation, scopeOf(written.get("before_formation")))
  const afterFormation = asGroup(strategy.afterFormation, scopeOf(written.get("after_formation")))
  if (beforeFormation === strategy.beforeFormation && afterFormation === strategy.afterFormation) return policy
  return { ...policy, strategy: new Phased({ ...strategy, beforeFormation, afterFormation }) }
}
