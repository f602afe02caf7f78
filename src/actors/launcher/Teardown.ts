/**
 * The end of a run: every host is told, the agents are given their grace to
 * leave, whatever did not leave on another host is ended there, and the
 * verdict becomes the run's result (the final line, the exit status, each
 * rank's exits, the checkpoint `--resume` continues from).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as HashSet from "effect/HashSet"
import { describeVerdict, exitCode, type Verdict } from "../Verdict.ts"
import { Abort, RunEnded } from "../../wire/JoinMessages.ts"
import type * as ControlGate from "./ControlGate.ts"
import type { Outcome, RunResult } from "./LaunchOptions.ts"
import { rankRecords } from "./Membership.ts"
import type { MembershipOwner } from "./MembershipOwner.ts"
import { checkpointPath, sshWorkers } from "./Plan.ts"
import { cleanupHosts } from "./RemoteCleanup.ts"
import type { RunEnv } from "./RunEnv.ts"

/** Tell every host the run is over, close the relays' links, and wait (each agent has the grace) for the agents to leave. */
export const endRun = (
  env: RunEnv,
  membership: MembershipOwner,
  control: ControlGate.ControlGate,
  agents: ReadonlyArray<Fiber.RuntimeFiber<void>>,
  verdict: Verdict
): Effect.Effect<void> =>
  Effect.gen(function*() {
    const ending = verdict._tag === "Failed" ? new Abort({ reason: verdict.message }) : new RunEnded({ verdict: describeVerdict(verdict) })
    yield* Effect.forEach(membership.links(), (link) => Effect.ignore(link.send(ending)), { discard: true })
    yield* control.closeAll
    // The agents stop their relays and leave; each has the grace period to do so.
    yield* Effect.forEach(agents, (agent) => Effect.timeout(Fiber.await(agent), Duration.millis(env.graceMs + 1_000)), { discard: true }).pipe(Effect.ignore)
    // Whatever did not leave on another host is ended there (a host given up on is not waited for).
    const { gone } = membership.snapshot()
    yield* cleanupHosts(sshWorkers(env.plan).filter((worker) => !HashSet.has(gone, worker.host)), env.plan.config.name)
  })

export interface Ending {
  readonly verdict: Verdict
  readonly membership: MembershipOwner | undefined
  /** The epoch of the consensus checkpoint on disk, if the run has one. */
  readonly checkpointEpoch: number | undefined
  readonly port: number
}

/** The run's result; the live pages see the verdict before the port closes under them. */
export const finish = (env: RunEnv, { checkpointEpoch, membership, port, verdict }: Ending): Effect.Effect<RunResult> =>
  Effect.gen(function*() {
    const { config } = env.plan
    const state = membership?.snapshot()
    const lost = state?.lost ?? []
    const summary = describeVerdict(verdict, lost)
    yield* env.enter(verdict._tag === "Completed" ? "done" : "failed")
    const code = exitCode(verdict)
    const outcome: Outcome = verdict._tag === "Failed"
      ? (verdict.kind === "aborted" ? "interrupted" : "failed")
      : verdict.dead > 0 ? "degraded" : "completed"
    yield* env.record({ event: "verdict", at: Date.now(), outcome, exitCode: code, summary })
    yield* env.board.endStreams
    return {
      run: config.name,
      outcome,
      exitCode: code,
      summary,
      rootCause: verdict._tag === "Failed" ? verdict.message : undefined,
      // Every rank the run has had (the declared world if it never formed).
      world: state?.world ?? env.plan.world,
      lost,
      ranks: state === undefined ? [] : rankRecords(state).map(([rank, record]) => ({
        rank,
        host: record.host,
        device: record.device,
        pid: record.pid,
        exits: record.exits
      })),
      port,
      checkpoint: checkpointEpoch === undefined ? undefined : { path: checkpointPath(config), epoch: checkpointEpoch }
    }
  })
