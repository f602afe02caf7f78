/**
 * The run's environment: what every phase of a run reads and nothing changes
 * once the run has started. The salt and how hosts are admitted, the
 * deadlines scaled to the network, the grace and heartbeat bounds of the
 * failure policy, the checkpoint a `--resume` continues from, and the run's
 * journal, where everything that happens is recorded, and the status board
 * that serves it (the page, /metrics; `--events` and the terminal read the
 * journal too).
 *
 * It also claims the run's place among this checkout's runs (RunRegistry):
 * a run whose checkpoint another live run writes is refused here, before
 * any agent starts. And it says what a user would otherwise learn too late:
 * that a checkpoint on disk will be replaced by this run's first save (no
 * `--resume`), and that a `max_failure` count above the world can never trip.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import * as Agent from "../../agent/Agent.ts"
import { graceOf } from "../../kernel/Shutdown.ts"
import { isCoordinated } from "../../config/Job.ts"
import { deadlines, netTimeoutScale, scaled } from "../../config/NetTimeouts.ts"
import { newSalt, startToken } from "../../wire/Keys.ts"
import { type Admission, admission as admissionFor } from "../../wire/Trust.ts"
import * as CheckpointFile from "../training/CheckpointFile.ts"
import { checkpointPath, LaunchInputError, type Plan, windowRules } from "./Plan.ts"
import * as LastLines from "../hosts/LastLines.ts"
import * as Metrics from "../view/Metrics.ts"
import * as RunRegistry from "./RunRegistry.ts"
import * as RunJournal from "../view/RunJournal.ts"
import type { RunEvent } from "../view/RunView.ts"
import * as StatusBoard from "../view/StatusBoard.ts"
import { dashboardPage } from "../view/dashboard/page.ts"
import type { LaunchOptions } from "./LaunchOptions.ts"
import * as WireCounters from "../../wire/WireCounters.ts"

export interface RunEnv {
  readonly plan: Plan
  /** This run's id among the checkout's runs (`<name>-<pid>`), and its entry there. */
  readonly runId: string
  readonly registration: RunRegistry.Registration
  readonly options: LaunchOptions
  readonly output: Agent.OutputSink
  /** Each rank's last lines of output, for the failure rules' `log` (kept by `output`). */
  readonly lastLines: (rank: number) => ReadonlyArray<string>
  /** A rank's last lines on stderr: what its failure signature is read from. */
  readonly lastErrors: (rank: number) => ReadonlyArray<string>
  readonly salt: Uint8Array
  readonly admission: Admission
  /** `POST /start`'s bearer token. */
  readonly startToken: string
  /** The network's timeout scale (`COHORT_NET_TIMEOUT_SCALE`), applied to every deadline below. */
  readonly scale: number
  readonly handshakeMs: number
  /** `failure_policy.grace`, read once (`Shutdown.graceOf`): every margin around it comes from `Shutdown.margins`. */
  readonly grace: Duration.Duration
  readonly heartbeatTimeoutMs: number
  /** The checkpoint this run resumes from (`--resume`). */
  readonly resumed: CheckpointFile.CheckpointRecord | undefined
  readonly openedAt: number
  /** The ranks' all-reduce latencies, for /metrics. */
  readonly latency: Metrics.LatencyHistogram
  readonly journal: RunJournal.RunJournal
  /** The status page, /state.json, /metrics and `POST /start`: the mux's HTTP owner. */
  readonly board: StatusBoard.StatusBoard
  readonly record: (event: RunEvent) => Effect.Effect<void>
  /** The phase the status page shows. */
  readonly phase: Effect.Effect<StatusBoard.Phase>
  /** Enter a phase: the page, `onPhase` and the journal are told. */
  readonly enter: (phase: StatusBoard.Phase) => Effect.Effect<void>
}

const defaultOutput: Agent.OutputSink = (line, stream) => {
  ;(stream === "stdout" ? process.stdout : process.stderr).write(`${line}\n`)
}

/** Prepare a run. `onStart` arms an operator start (the join gate's, once it exists). */
export const prepare = (
  plan: Plan,
  options: LaunchOptions,
  onStart: () => Effect.Effect<StatusBoard.StartOutcome>
): Effect.Effect<RunEnv, LaunchInputError, Scope.Scope> =>
  Effect.gen(function*() {
    const { config } = plan
    const grace = graceOf(config.failurePolicy)
    const scale = yield* Effect.try({
      try: () => netTimeoutScale(),
      catch: (error) => new LaunchInputError({ problems: [(error as Error).message] })
    })
    const admission = admissionFor({ bindAddress: plan.bindAddress, openAdmission: config.controller.join.openAdmission })
    if (admission.mode === "open" && admission.warning !== undefined) yield* Effect.logWarning(admission.warning)
    const salt = newSalt()
    const token = startToken(salt)
    const openedAt = Date.now()
    const checkpoint = checkpointPath(config)
    // Only a coordinator writes checkpoints: a plain command job (torchrun-style) claims none.
    const writesCheckpoints = isCoordinated(config.job)
    // Before the checkpoint is read or any agent starts: a second run of the file must not take it over.
    const registration = yield* RunRegistry.claim({
      run: config.name,
      checkpoint: writesCheckpoints ? checkpoint : undefined,
      startedAt: openedAt,
      startToken: token
    }).pipe(
      Effect.mapError((taken) => new LaunchInputError({ problems: [taken.message] }))
    )
    const resumed = options.resume === true
      ? yield* CheckpointFile.readToResume(checkpoint, config.job.datasetSize).pipe(Effect.mapError((error) => new LaunchInputError({ problems: [error.message] })))
      : undefined
    if (resumed !== undefined) yield* Effect.logInfo(CheckpointFile.resumingLine(checkpoint, resumed))
    else if (writesCheckpoints) yield* warnOfCheckpoint(checkpoint)
    for (const warning of unreachableLimits(plan)) yield* Effect.logWarning(warning)

    const latency = Metrics.latencyHistogram()
    const board: StatusBoard.StatusBoard = yield* StatusBoard.make({
      startToken: token,
      requestDeadlineMs: scaled(deadlines.httpRequestMs, scale),
      onStart,
      page: dashboardPage,
      metrics: () => Effect.map(journal.state, (state) => Metrics.render(state, latency, WireCounters.snapshot()))
    })
    const journal: RunJournal.RunJournal = yield* RunJournal.make({
      run: config.name,
      eventsFile: options.eventsFile,
      append: options.resume === true,
      onEvent: (event, state) => Effect.zipRight(board.publish(state), Effect.sync(() => options.onEvent?.(event, state)))
    })
    const record = (event: RunEvent) => journal.record(event)
    const phase = yield* Ref.make<StatusBoard.Phase>("waiting")
    yield* record({
      event: "run_started",
      at: openedAt,
      run: config.name,
      id: registration.id,
      // A host resolving `devices: all` there counts 0 until its join says.
      hosts: plan.hosts.map(({ devices, worker }) => ({ host: worker.host, ranks: devices?.devices.length ?? 0 })),
      join: { quorum: windowRules(plan).minRanks, start: config.controller.join.start }
    })
    // Every rank's line passes here, whichever way it came: its last ones are kept for the rules' `log`.
    const kept = LastLines.make(options.output ?? defaultOutput)
    return {
      plan,
      runId: registration.id,
      registration,
      options,
      output: kept.output,
      lastLines: kept.of,
      lastErrors: kept.errorsOf,
      salt,
      admission,
      startToken: token,
      scale,
      handshakeMs: scaled(deadlines.handshakeMs, scale),
      grace,
      heartbeatTimeoutMs: scaled(config.failurePolicy.heartbeatTimeout, scale),
      resumed,
      openedAt,
      latency,
      journal,
      board,
      record,
      phase: Ref.get(phase),
      enter: (next) =>
        Effect.zipRight(Ref.set(phase, next), Effect.zipRight(Effect.sync(() => options.onPhase?.(next)), record({ event: "phase", at: Date.now(), phase: next })))
    }
  })

/**
 * A run without `--resume` starts from scratch, and its first save replaces the checkpoint on disk, whatever
 * epoch that one had reached: said at the start, while the user can still stop and resume instead. (Keeping
 * the old file aside was the other choice: it would copy the weights on every run and still keep only one
 * generation, so a second run without --resume would lose them all the same; a line at the start loses nothing
 * silently.)
 */
const warnOfCheckpoint = (path: string): Effect.Effect<void> =>
  Effect.flatMap(CheckpointFile.peek(path), (found) => {
    if (found._tag === "Absent") return Effect.void
    if (found._tag === "Unreadable") return Effect.logWarning(`${path} exists but ${found.reason}: this run will replace it when it saves`)
    const { record } = found
    return Effect.logWarning(
      `a checkpoint of epoch ${record.epoch} exists at ${path} (run ${record.run}, saved ${record.savedAt}): ` +
        `--resume to continue from it; this run will replace it when it saves`
    )
  })

/**
 * Warnings for elastic `max_failure` counts that can never trip: a count is of dead ranks, and a count of the
 * whole world or more is only reached when every rank is lost, which fails the run as such. A world that may
 * grow (`after_formation: accept`) has room up to `max_ranks`, if the file sets one.
 */
export const unreachableLimits = (plan: Pick<Plan, "world" | "config">): ReadonlyArray<string> => {
  const { join } = plan.config.controller
  const strategy = plan.config.failurePolicy.strategy
  const most = join.afterFormation === "accept" ? join.maxRanks : plan.world
  if (most === undefined) return []
  const phases = [["before_formation", strategy.beforeFormation], ["after_formation", strategy.afterFormation]] as const
  return phases.flatMap(([phase, policy]) => {
    // A percentage is of the world, so it never asks for more than the world holds.
    if (policy._tag !== "Elastic" || policy.maxFailure?._tag !== "Count") return []
    const limit = policy.maxFailure.n
    // The death that would reach it is the last rank's: "every rank was lost" is said instead.
    if (limit < most) return []
    const world = join.afterFormation === "accept" ? `a run of at most ${most} rank(s) (controller.join.max_ranks)` : `a world of ${most} rank(s)`
    return [
      `failure_policy.${phase}.elastic.max_failure: ${limit} can never trip in ${world}: the run fails only when every rank is lost; ` +
      `lower it (a count of dead ranks, or a percentage like 25%), or leave it out to tolerate any partial loss`
    ]
  })
}
