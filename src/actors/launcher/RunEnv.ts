/**
 * The run's environment: what every phase of a run reads and nothing changes
 * once the run has started. The salt and how hosts are admitted, the
 * deadlines scaled to the network, the grace and heartbeat bounds of the
 * failure policy, the checkpoint a `--resume` continues from, and the run's
 * journal, where everything that happens is recorded, and the status board
 * that serves it (the page, /metrics; `--events` and the terminal read the
 * journal too).
 */
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import * as Agent from "../agent/Agent.ts"
import { deviceTag } from "../agent/Devices.ts"
import type { RankDevice } from "../rank/RankContext.ts"
import { deadlines, netTimeoutScale, scaled } from "../../config/NetTimeouts.ts"
import { newSalt, startToken } from "../../wire/Keys.ts"
import { type Admission, admission as admissionFor } from "../../wire/Trust.ts"
import * as CheckpointFile from "./CheckpointFile.ts"
import { checkpointPath, LaunchInputError, type Plan } from "./Plan.ts"
import * as Metrics from "./Metrics.ts"
import * as RunJournal from "./RunJournal.ts"
import type { RunEvent } from "./RunView.ts"
import * as StatusBoard from "./StatusBoard.ts"
import { dashboardPage } from "./dashboard/page.ts"
import type { LaunchOptions } from "./LaunchOptions.ts"
import * as WireCounters from "../../wire/WireCounters.ts"

export interface RunEnv {
  readonly plan: Plan
  readonly options: LaunchOptions
  readonly output: Agent.OutputSink
  readonly salt: Uint8Array
  readonly admission: Admission
  /** `POST /start`'s bearer token. */
  readonly startToken: string
  /** The network's timeout scale (`COHORT_NET_TIMEOUT_SCALE`), applied to every deadline below. */
  readonly scale: number
  readonly handshakeMs: number
  readonly graceMs: number
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
  /** A host's device label by slot, as the plan knows it ("?" for a slot it does not). */
  readonly deviceLabel: (host: string, slot: number) => string
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
    const scale = yield* Effect.try({
      try: () => netTimeoutScale(),
      catch: (error) => new LaunchInputError({ problems: [(error as Error).message] })
    })
    const admission = admissionFor({ bindAddress: plan.bindAddress, openAdmission: config.controller.join.openAdmission })
    if (admission.mode === "open" && admission.warning !== undefined) yield* Effect.logWarning(admission.warning)
    const resumed = options.resume === true
      ? yield* CheckpointFile.read(checkpointPath(config)).pipe(Effect.mapError((error) => new LaunchInputError({ problems: [error.message] })))
      : undefined
    if (resumed !== undefined) yield* Effect.logInfo(`resuming from ${checkpointPath(config)}: epoch ${resumed.epoch} of run ${resumed.run} (saved: ${resumed.reason})`)

    const salt = newSalt()
    const token = startToken(salt)
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
      onEvent: (event, state) => Effect.zipRight(board.publish(state), Effect.sync(() => options.onEvent?.(event, state)))
    })
    const record = (event: RunEvent) => journal.record(event)
    const phase = yield* Ref.make<StatusBoard.Phase>("waiting")
    const openedAt = Date.now()
    yield* record({
      event: "run_started",
      at: openedAt,
      run: config.name,
      hosts: plan.hosts.map(({ devices, worker }) => ({ host: worker.host, ranks: devices.devices.length }))
    })
    return {
      plan,
      options,
      output: options.output ?? defaultOutput,
      salt,
      admission,
      startToken: token,
      scale,
      handshakeMs: scaled(deadlines.handshakeMs, scale),
      graceMs: config.failurePolicy.grace,
      heartbeatTimeoutMs: scaled(config.failurePolicy.heartbeatTimeout, scale),
      resumed,
      openedAt,
      latency,
      journal,
      board,
      record,
      phase: Ref.get(phase),
      enter: (next) =>
        Effect.zipRight(Ref.set(phase, next), Effect.zipRight(Effect.sync(() => options.onPhase?.(next)), record({ event: "phase", at: Date.now(), phase: next }))),
      deviceLabel: deviceLabels(plan)
    }
  })

/** Each host's device labels by slot, looked up by host name ("?" for a slot the plan does not know). */
const deviceLabels = (plan: Plan): (host: string, slot: number) => string => {
  const byHost = new Map<string, ReadonlyArray<RankDevice>>()
  for (const { devices, worker } of plan.hosts) if (!byHost.has(worker.host)) byHost.set(worker.host, devices.devices)
  return (host, slot) => {
    const device = byHost.get(host)?.[slot]
    return device === undefined ? "?" : deviceTag(device)
  }
}
