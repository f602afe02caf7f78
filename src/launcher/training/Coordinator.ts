/**
 * The Coordinator: an actor that carries out what `coordinate` tells it, for
 * the ranks of an `entry:` job (epochs, liveness, checkpoints, growth: see
 * coordinate.ts).
 *
 * It holds no policy of its own. Everything it hears (a rank's report, a
 * relay's beats, a death, a join, its own beat interval) is stamped with the
 * time it was heard (`Clock`, so a `TestClock` drives it in tests) and goes
 * through its mailbox into the pure `coordinate`; the instructions that come
 * back are executed here, in order: orders sent, lines logged, the journal
 * told, the consensus checkpoint written. A write's outcome goes back into
 * `coordinate` before the next instruction, so a stop's `Stop` can say
 * whether the checkpoint was saved (and a written one is journalled).
 */
import type { Cause } from "../../kernel/policy/FailureRules.ts"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import * as Request from "effect/Request"
import type * as Scope from "effect/Scope"
import * as Machine from "../../kernel/Machine.ts"
import type { Job } from "../../config/ClusterConfig.ts"
import { beatEveryMs } from "../../config/Heartbeat.ts"
import { type CoordinatorOrder, Progress, type RankReport } from "../../wire/messages/CoordinatorMessages.ts"
import { boundedMetrics, droppedLine } from "../../wire/ReportedMetrics.ts"
import type { LatencyCounts } from "../../wire/LatencyBuckets.ts"
import * as CheckpointFile from "./CheckpointFile.ts"
import { coordinate, CoordinatorEvent, type CoordinatorState, initialState, Instruction, unfinishedTraining } from "./coordinate.ts"
import type * as Ledger from "./EpochLedger.ts"
import type { RunEvent } from "../view/RunView.ts"
import { PROGRESS_EVERY_MS } from "./coordinate/telemetry.ts"
import * as SurvivorsStep from "./SurvivorsStep.ts"

export interface CoordinatorOptions {
  readonly run: string
  /** The world's ranks. */
  readonly ranks: ReadonlyArray<number>
  readonly job: Job
  readonly heartbeatTimeoutMs: number
  readonly checkpointPath: string
  /** The checkpoint this run resumes from. */
  readonly resume: CheckpointFile.CheckpointRecord | undefined
  readonly send: (ranks: ReadonlyArray<number>, order: CoordinatorOrder) => Effect.Effect<void>
  /** Declare ranks dead that went silent (the supervisor counts them, their processes are killed). */
  readonly loseRanks: (ranks: ReadonlyArray<number>, reason: string, cause: Cause, diedAt: ReadonlyArray<number>, fatal: boolean) => Effect.Effect<void>
  /** Every epoch is done: the ranks now leave on their own. */
  readonly drained: Effect.Effect<void>
  /** The controller's model root as StateJson text, saved with every checkpoint. */
  readonly rootState: () => string | undefined
  /** Told training's progress (at most every PROGRESS_EVERY_MS), each epoch's end and each checkpoint written (the run's journal). */
  readonly onEvent?: (event: RunEvent) => Effect.Effect<void>
  /** Told each rank's all-reduce latencies as its progress reports bring them (/metrics). */
  readonly onLatency?: (counts: LatencyCounts) => void
  /** Told when survivors hold a dead rank's redistributed work (benchmarks, tests). */
  readonly onRedistributed?: (dead: number, extensions: ReadonlyMap<number, ReadonlyArray<Ledger.SampleRange>>) => void
  /** Joined ranks enter the cohort at `epoch`: told before any order of that epoch is sent (the data plane widens its rounds). */
  readonly onEnter?: (ranks: ReadonlyArray<number>, epoch: number) => Effect.Effect<void>
}

export interface Coordinator {
  readonly report: (rank: number, report: RankReport) => Effect.Effect<void>
  /** Ranks heard beating (a relay's `HostBeats`). */
  readonly beats: (ranks: ReadonlyArray<number>) => Effect.Effect<void>
  /** The death chain for ranks the supervisor reports dead (idempotent). */
  readonly ranksDead: (ranks: ReadonlyArray<number>, cause: string) => Effect.Effect<void>
  /** Every rank runs user code: from now on a rank that never attaches is as silent as one that stopped beating. */
  readonly cohortFormed: Effect.Effect<void>
  /** Cohort is stopping these ranks (the supervisor's order): their leaving early is not a loss. */
  readonly stopOrdered: (ranks: ReadonlyArray<number>) => Effect.Effect<void>
  /** Ranks new to the run joined the formed cohort: they enter at the next epoch boundary. */
  readonly join: (ranks: ReadonlyArray<number>) => Effect.Effect<void>
  /**
   * The rank's process exited with status 0. One that left without saying so (`process.exit(0)` mid-epoch
   * sends no `Exiting`) and still had samples is lost now, not at the heartbeat timeout.
   */
  readonly exitedCleanly: (rank: number) => Effect.Effect<void>
  /**
   * The failure policy's limit is crossed (the kernel's `decide` judged it): the consensus checkpoint is written
   * (reason `max_failure_exceeded`) and every survivor is told to stop, with `why` as the reason. Once the run is
   * stopping, or training is done, it changes nothing.
   */
  readonly stopRun: (why: string) => Effect.Effect<void>
  /**
   * The run is asked to stop (Ctrl-C, SIGTERM), told before the supervisor stops the ranks: a `cpu_sync` run
   * mid-epoch asks them for their state at their next step (reason `interrupted`) and says what it kept.
   */
  readonly interrupted: (why: string) => Effect.Effect<void>
  /** The epoch of the consensus checkpoint on disk for this run (written by it, or resumed from), if any, once everything told before has been handled. */
  readonly checkpointEpoch: Effect.Effect<number | undefined>
  /** Why training is not done though every rank has ended, if it is not (`coordinate.unfinishedTraining`). */
  readonly unfinished: Effect.Effect<string | undefined>
}

/** What the coordinator hears from outside; `CheckpointWritten` comes only from its own writes, `Ending` from `Settled`. */
type Heard = Exclude<CoordinatorEvent, { readonly _tag: "CheckpointWritten" | "Ending" }>

/**
 * Asked at the run's end: the epoch on disk once everything told before has been handled. Through the
 * mailbox, not a read of the state: a `stopRun` still queued (its checkpoint not yet written) when the last
 * rank exits would otherwise be lost with the launcher. A mid-epoch cut still waiting for a survivor's answer
 * settles first (`Ending`): no answer will come now.
 */
class Settled extends Request.TaggedClass("Settled")<number | undefined, never, {}> {}

/** Whether a mid-epoch cut still waits for answers, once everything told before has been handled. */
class CutWaiting extends Request.TaggedClass("CutWaiting")<boolean, never, {}> {}

/**
 * How long a clean exit waits for the rank's last reports before it is judged: they come up the relay's link,
 * the exit up the agent's, and either may arrive first.
 */
const LAST_WORDS_MS = 1_000

export const make = (options: CoordinatorOptions): Effect.Effect<Coordinator, never, Scope.Scope> =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    const initial = initialState({
      job: options.job,
      ranks: options.ranks,
      heartbeatTimeoutMs: options.heartbeatTimeoutMs,
      checkpointPath: options.checkpointPath,
      resume: options.resume === undefined
        ? undefined
        : { epoch: options.resume.epoch, state: options.resume.state, ...(options.resume.coverage === undefined ? {} : { coverage: options.resume.coverage }) }
    })
    const journal = options.onEvent ?? (() => Effect.void)
    // Deaths whose survivors have not counted a step since: their recovery is that step (SurvivorsStep).
    const awaitingStep = yield* Ref.make(SurvivorsStep.none)
    // A run stops once at most, so it has one cut at most: done once it has settled.
    const cutSettled = yield* Deferred.make<void>()

    const write = (
      request: Extract<Instruction, { readonly _tag: "WriteCheckpoint" }>,
      step: (event: CoordinatorEvent) => Effect.Effect<void>
    ): Effect.Effect<void> =>
      Effect.suspend(() =>
        CheckpointFile.write(options.checkpointPath, {
          version: 1,
          run: options.run,
          epoch: request.epoch,
          reason: request.reason,
          savedAt: new Date(request.at).toISOString(),
          world: request.world,
          dead: request.dead,
          state: request.state,
          root: options.rootState(),
          ...(request.coverage === undefined ? {} : { coverage: request.coverage })
        })
      ).pipe(
        Effect.match({ onFailure: (error) => error.message, onSuccess: () => undefined }),
        Effect.flatMap((failure) =>
          step(CoordinatorEvent.CheckpointWritten({ epoch: request.epoch, reason: request.reason, coverage: request.coverage, failure, at: request.at }))
        )
      )

    const execute = (instruction: Instruction, step: (event: CoordinatorEvent) => Effect.Effect<void>): Effect.Effect<void> =>
      Instruction.$match(instruction, {
        Send: ({ order, ranks }) => options.send(ranks, order),
        Log: ({ level, message }) =>
          level === "info" ? Effect.logInfo(message) : level === "warning" ? Effect.logWarning(message) : Effect.logError(message),
        Journal: ({ event }) => journal(event),
        Latencies: ({ counts }) => Effect.sync(() => options.onLatency?.(counts)),
        // The survivors hold the dead rank's work from here: the death's recovery, for the recovery figures.
        Redistributed: ({ dead, extensions }) =>
          Effect.zipRight(
            Effect.sync(() => options.onRedistributed?.(dead, extensions)),
            journal({ event: "work_moved", at: Date.now(), rank: dead, survivors: [...extensions.keys()] })
          ),
        Enter: ({ epoch, ranks }) => options.onEnter?.(ranks, epoch) ?? Effect.void,
        LoseRanks: ({ cause, diedAt, fatal, ranks, reason }) => options.loseRanks(ranks, reason, cause, diedAt, fatal === true),
        Drained: () => options.drained,
        // The write's outcome steps the machine again, before the next instruction.
        WriteCheckpoint: (request) => write(request, step)
      })

    const coordinator = yield* Machine.spawn<CoordinatorState, CoordinatorEvent, Instruction, Heard, Settled | CutWaiting>({
      name: "coordinator",
      machine: { initial, step: coordinate },
      events: {
        Reported: true,
        Beats: true,
        CohortFormed: true,
        RanksDead: true,
        StopOrdered: true,
        Joined: true,
        ExitedCleanly: true,
        Tick: true,
        StopRun: true,
        Interrupted: true
      },
      carryOut: execute,
      observe: ({ after, before, effects, event }) =>
        Effect.gen(function*() {
          if (before.consensus.cut !== undefined && after.consensus.cut === undefined) yield* Deferred.succeed(cutSettled, undefined)
          const [stepped, awaiting] = SurvivorsStep.observe(yield* Ref.get(awaitingStep), event, before, effects)
          yield* Ref.set(awaitingStep, awaiting)
          if (stepped !== undefined) yield* journal(stepped)
        }),
      requests: (stepper) => ({
        CutWaiting: () => Effect.sync(() => stepper.current().consensus.cut !== undefined),
        Settled: () =>
          Effect.zipRight(
            Effect.flatMap(Clock.currentTimeMillis, (at) => stepper.step(CoordinatorEvent.Ending({ at }))),
            Effect.sync(() => stepper.current().consensus.written)
          )
      })
    })
    const actor = coordinator.ref
    /** Into the mailbox, stamped with the time it was heard. */
    const hear = (event: (at: number) => Heard): Effect.Effect<void> =>
      Effect.flatMap(Clock.currentTimeMillis, (at) => Effect.ignore(actor.tell(event(at))))

    // Each rank's own metrics, as it last reported them, for the view (the machine averages them for `progress`).
    // Said at most every PROGRESS_EVERY_MS, like progress, and at the next beat after the last report: a metric
    // reported once an epoch's samples are done (a validation accuracy) is shown too.
    const unsaid = new Map<number, Record<string, number>>()
    let saidAt = Number.NEGATIVE_INFINITY
    // Ranks warned of a metric out of bounds: once per rank (its client has warned of each name already).
    const warned = new Set<number>()
    const sayRankMetrics = (at: number): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (unsaid.size === 0 || at - saidAt < PROGRESS_EVERY_MS) return Effect.void
        const ranks = [...unsaid].sort(([a], [b]) => a - b).map(([rank, metrics]) => ({ rank, metrics }))
        unsaid.clear()
        saidAt = at
        return journal({ event: "rank_metrics", at, ranks })
      })
    /** The report with its metrics within what is shown (ReportedMetrics), the rank's figures kept for the view. */
    const bounded = (rank: number, report: RankReport): Effect.Effect<RankReport> => {
      if (report._tag !== "Progress" || report.metrics === undefined) return Effect.succeed(report)
      const { dropped, kept } = boundedMetrics(report.metrics)
      unsaid.set(rank, kept)
      if (dropped.length === 0) return Effect.succeed(report)
      const within = new Progress({ epoch: report.epoch, done: report.done, metrics: kept, ...(report.allreduce === undefined ? {} : { allreduce: report.allreduce }) }, true)
      if (warned.has(rank)) return Effect.succeed(within)
      warned.add(rank)
      return Effect.as(Effect.logWarning(`${droppedLine(`rank ${rank}`, dropped[0]!)} (its other metrics out of bounds are dropped without a word)`), within)
    }

    // Beats down, and the silence check, as often as the heartbeat timeout calls for.
    const beatEvery = Duration.millis(beatEveryMs(options.heartbeatTimeoutMs))
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(
      Effect.sleep(beatEvery),
      Effect.flatMap(Clock.currentTimeMillis, (at) => Effect.zipRight(sayRankMetrics(at), hear(() => CoordinatorEvent.Tick({ at }))))
    )))
    return {
      report: (rank, report) =>
        Effect.flatMap(bounded(rank, report), (within) =>
          within._tag === "Progress" && within.metrics !== undefined
            ? Effect.zipRight(hear((at) => CoordinatorEvent.Reported({ rank, report: within, at })), Effect.flatMap(Clock.currentTimeMillis, sayRankMetrics))
            : hear((at) => CoordinatorEvent.Reported({ rank, report: within, at }))),
      beats: (ranks) => hear((at) => CoordinatorEvent.Beats({ ranks, at })),
      ranksDead: (ranks, cause) => hear((at) => CoordinatorEvent.RanksDead({ ranks, cause, at })),
      cohortFormed: hear((at) => CoordinatorEvent.CohortFormed({ at })),
      stopOrdered: (ranks) => hear((at) => CoordinatorEvent.StopOrdered({ ranks, at })),
      join: (ranks) => hear((at) => CoordinatorEvent.Joined({ ranks, at })),
      stopRun: (why) => hear((at) => CoordinatorEvent.StopRun({ why, at })),
      interrupted: (why) => hear((at) => CoordinatorEvent.Interrupted({ why, at })),
      // A coordinator that has stopped answers from its last state.
      checkpointEpoch: Effect.catchTag(
        Effect.gen(function*() {
          // The ranks' exits come up the agents' links, their last answers up the relays': a cut still waiting
          // gives those a moment (as a clean exit does) before it settles with what it has.
          if (yield* actor.ask(new CutWaiting())) yield* Effect.ignore(Effect.timeout(Deferred.await(cutSettled), Duration.millis(LAST_WORDS_MS)))
          return yield* actor.ask(new Settled())
        }),
        "ActorStopped",
        () => Effect.sync(() => coordinator.current().consensus.written)
      ),
      unfinished: Effect.sync(() => unfinishedTraining(coordinator.current())),
      exitedCleanly: (rank) =>
        Effect.asVoid(Effect.forkIn(Effect.zipRight(Effect.sleep(Duration.millis(LAST_WORDS_MS)), hear((at) => CoordinatorEvent.ExitedCleanly({ rank, at }))), scope))
    }
  })
