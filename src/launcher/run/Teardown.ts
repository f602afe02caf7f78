/**
 * The end of a run: the verdict is said at once, to everyone who reads the
 * run; then every host is told, the agents are given their grace to leave,
 * and whatever did not leave on another host is ended there (the cleanup,
 * shown as such while it lasts); and the verdict becomes the run's result
 * (the final line, the exit status, each rank's exits, the cohort's
 * inventory, the checkpoint `--resume` continues from).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as HashSet from "effect/HashSet"
import { margins } from "../../kernel/Shutdown.ts"
import { sayHostsOnce } from "../../kernel/policy/SecondaryDeaths.ts"
import { describeVerdict, exitCode, type Loss, type Verdict } from "../../kernel/policy/Verdict.ts"
import { Abort, RunEnded } from "../../wire/messages/JoinMessages.ts"
import type * as ControlGate from "../front/ControlGate.ts"
import type { Outcome, RunResult } from "./LaunchOptions.ts"
import { inventoryOf, rankRecords } from "../membership/Membership.ts"
import * as CheckpointFile from "../training/CheckpointFile.ts"
import type { MembershipOwner } from "../membership/MembershipOwner.ts"
import { checkpointPath, sshWorkers } from "./Plan.ts"
import { cleanupHosts } from "../hosts/RemoteCleanup.ts"
import type { RunEnv } from "./RunEnv.ts"
import * as RecoveryFigures from "../view/RecoveryFigures.ts"
import * as RunView from "../view/RunView.ts"

/** What is left to do once the verdict is out, in words for the status page and `--events`, and the doing of it. */
export interface CleanUp {
  readonly detail: string
  readonly run: Effect.Effect<void>
}

/**
 * The end of a run that formed: tell every host the run is over, close the relays' links, wait (each agent
 * has the grace) for the agents to leave, and end whatever did not leave on another host.
 */
export const endRun = (
  env: RunEnv,
  membership: MembershipOwner,
  control: ControlGate.ControlGate,
  agents: ReadonlyArray<Fiber.RuntimeFiber<void>>,
  verdict: Verdict
): CleanUp => {
  // A host given up on is not cleaned up after (asked again once the agents have left: one may be given up meanwhile).
  const remote = () => sshWorkers(env.plan).filter((worker) => !HashSet.has(membership.snapshot().gone, worker.host))
  const hosts = remote().map((worker) => worker.host)
  const wait = margins(env.grace).teardown
  return {
    detail: `telling the hosts the run is over and waiting up to ${Duration.toSeconds(wait)} s for ${agents.length} agent(s) to leave` +
      (hosts.length === 0 ? "" : `, then ending what is left on ${hosts.join(", ")}`),
    run: Effect.gen(function*() {
      const ending = verdict._tag === "Failed" ? new Abort({ reason: verdict.message }) : new RunEnded({ verdict: describeVerdict(verdict) })
      yield* Effect.forEach(membership.links(), (link) => Effect.ignore(link.send(ending)), { discard: true })
      yield* control.closeAll
      // The agents stop their relays and leave; each has the grace period (and the teardown's margin) to do so.
      yield* Effect.forEach(agents, (agent) => Effect.timeout(Fiber.await(agent), wait), { discard: true }).pipe(Effect.ignore)
      yield* cleanupHosts(remote(), env.plan.config.name)
    })
  }
}

/** The end of a run whose world never formed: what its ssh hosts started is ended there. */
export const endUnformed = (env: RunEnv): CleanUp | undefined => {
  const remote = sshWorkers(env.plan)
  return remote.length === 0
    ? undefined
    : { detail: `ending what is left on ${remote.map((worker) => worker.host).join(", ")}`, run: cleanupHosts(remote, env.plan.config.name) }
}

/** What the end of a run reads of its environment. */
export type EndingEnv = Pick<RunEnv, "plan" | "enter" | "record"> & {
  readonly board: Pick<RunEnv["board"], "endStreams">
  /** The run's view, for the recovery figures in the result (absent: none given). */
  readonly journal?: Pick<RunEnv["journal"], "state">
}

export interface Ending {
  readonly verdict: Verdict
  readonly membership: MembershipOwner | undefined
  /** What is left to do after the verdict; undefined: nothing. */
  readonly cleanUp: CleanUp | undefined
  /** The epoch of the consensus checkpoint on disk, if the run has one: asked once the cleanup is done. */
  readonly checkpointEpoch: Effect.Effect<number | undefined>
  readonly port: number
}

/**
 * The verdict, then the cleanup, then the run's result. The verdict is said (the final phase, the verdict
 * event) the moment it is known: the cleanup can take the agents' grace and a remote pass per host, and a
 * status read in it must see how the run ended, not a stale phase. The cleanup is shown as such meanwhile,
 * and the live pages see its end before the port closes under them.
 */
export const end = (env: EndingEnv, { checkpointEpoch, cleanUp, membership, port, verdict }: Ending): Effect.Effect<RunResult> =>
  Effect.gen(function*() {
    const { config } = env.plan
    const lost = membership?.snapshot().lost ?? []
    const view = env.journal === undefined ? undefined : yield* env.journal.state
    const summary = describeVerdict(verdict, lossesToSay(lost, view))
    yield* env.enter(verdict._tag === "Completed" ? "done" : "failed")
    // A run that completed with ranks lost exits as the file asks (degraded_exit, 0 by default): CI may need to see it.
    const code = verdict._tag === "Completed" && verdict.dead > 0 ? config.failurePolicy.degradedExit : exitCode(verdict)
    const outcome: Outcome = verdict._tag === "Failed"
      ? (verdict.kind === "aborted" ? "interrupted" : "failed")
      : verdict.dead > 0 ? "degraded" : "completed"
    yield* env.record({ event: "verdict", at: Date.now(), outcome, exitCode: code, summary })
    if (cleanUp !== undefined) {
      yield* env.record({ event: "cleanup_started", at: Date.now(), detail: cleanUp.detail })
      yield* cleanUp.run
      yield* env.record({ event: "cleanup_done", at: Date.now() })
    }
    const epoch = yield* checkpointEpoch
    // A mid-epoch checkpoint says where it resumes (`epoch 2 at 14,336 of 24,000 samples done`), not only its last whole epoch.
    const resumes = epoch === undefined
      ? undefined
      : yield* Effect.match(CheckpointFile.read(checkpointPath(config)), {
        onFailure: () => undefined,
        onSuccess: (record) => (record.coverage === undefined ? undefined : CheckpointFile.describeCoverage(record.coverage))
      })
    const later = env.journal === undefined ? undefined : yield* env.journal.state
    yield* env.board.endStreams
    // Read after the cleanup: a rank's last exit may come in while its agent leaves.
    const state = membership?.snapshot()
    return {
      run: config.name,
      outcome,
      exitCode: code,
      summary,
      rootCause: verdict._tag === "Failed" ? verdict.message : undefined,
      // Every rank the run has had (the declared world if it never formed).
      world: state?.world ?? env.plan.world ?? env.plan.knownRanks,
      lost,
      ranks: state === undefined ? [] : rankRecords(state).map(([rank, record]) => ({
        rank,
        host: record.host,
        device: record.device,
        pid: record.pid,
        exits: record.exits
      })),
      inventory: state === undefined ? [] : inventoryOf(state),
      port,
      checkpoint: epoch === undefined ? undefined : { path: checkpointPath(config), epoch, ...(resumes === undefined ? {} : { resumes }) },
      recovery: later === undefined ? undefined : {
        deaths: (later.recovery ?? RecoveryFigures.empty).deaths,
        effectiveTraining: RunView.effectiveTrainingAt(later)
      }
    }
  })

/**
 * The losses a DEGRADED verdict names: those the policy reported (membership's), then those it counted without
 * a report (a rank given up for silence, one that returned with work left), as the journal has them, each
 * once, a lost host's ranks said once (`sayHostsOnce`) with why the host went. A rank given up and then
 * restarted, or replaced by a new number, was not lost.
 */
export const lossesToSay = (reported: ReadonlyArray<Loss>, view: Pick<RunView.RunState, "deaths" | "ranks" | "hosts"> | undefined): ReadonlyArray<Loss> => {
  const said = new Set(reported.flatMap((loss) => loss.ranks))
  const unreported = (view?.deaths ?? []).filter((death) => {
    const rank = view?.ranks.find((status) => status.rank === death.rank)
    if (said.has(death.rank) || rank === undefined || rank.state !== "dead" || rank.replacedBy !== undefined) return false
    said.add(death.rank)
    return true
  })
  const all = [...reported.map((loss) => ({ ranks: loss.ranks, what: loss.cause })), ...unreported.map((death) => ({ ranks: [death.rank], what: death.cause }))]
  // A host's ranks may have ended with its link before its session said why it went: the host's own reason is said.
  const goneFor = (host: string) => view?.hosts.find((entry) => entry.host === host && entry.state === "gone")?.reason ?? undefined
  return sayHostsOnce(all, goneFor).map(({ ranks, what }) => ({ ranks, cause: what }))
}
