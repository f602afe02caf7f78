/**
 * The Coordinator: epochs, liveness and elastic membership for the ranks of
 * an `entry:` job.
 *
 * - Epochs: once every live rank has attached, each epoch's samples are
 *   split across the live ranks (`EpochLedger.plan`): equally for `cpu_sync`
 *   and `nccl`, by measured throughput for `cpu_cadence` and `cpu_async`
 *   after the first epoch. Progress reports fill the ledger; when every
 *   sample is done the epoch ends and the next one starts.
 * - Liveness: ranks beat every second, and so does the coordinator toward
 *   them. A rank silent for the heartbeat timeout (and not exiting) is lost:
 *   the supervisor is told and the rank is killed. Child exits reported by
 *   the agents arrive much sooner and take the same path (`ranksDead`).
 * - The death chain, once per rank: mark it dead in the ledger, hand its
 *   unprocessed samples to the survivors (`EpochExtend`), then, if the
 *   failure policy's limit is crossed or no rank is left, write the
 *   consensus checkpoint and tell every survivor to stop.
 * - Checkpoints: the first state offered for an epoch is the consensus (the
 *   ranks' parameters are averaged, so they agree); it is written atomically
 *   to `job.checkpoint`, and a `--resume` run starts after its epoch.
 * - Growth: ranks that join the formed cohort (`join`) wait, attached, for
 *   the next epoch boundary. There they enter (`onEnter`, before any order of
 *   the new epoch leaves), the epoch is split over the grown cohort, and each
 *   newcomer is welcomed with the consensus of the epoch just ended: when the
 *   job saves checkpoints, its welcome waits for that epoch's (at most a
 *   heartbeat timeout), so it never starts from older weights than the others.
 *   No rank is given work before the epoch it entered at.
 */
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Actor from "../Actor.ts"
import type { Job } from "../../config/ClusterConfig.ts"
import { beatEveryMs } from "../../config/FailurePolicy.ts"
import {
  CheckpointSaved,
  CoordinatorBeat,
  type CoordinatorOrder,
  EpochEnd,
  EpochExtend,
  EpochStart,
  type RankReport,
  Stop,
  TrainingDone,
  Welcome
} from "../../wire/CoordinatorMessages.ts"
import type { LatencyCounts } from "../../wire/LatencyBuckets.ts"
import * as CheckpointFile from "./CheckpointFile.ts"
import * as Ledger from "./EpochLedger.ts"
import type { RunEvent } from "./RunView.ts"

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
  readonly loseRanks: (ranks: ReadonlyArray<number>, reason: string) => Effect.Effect<void>
  /** Has the failure policy's limit been reached with `dead` ranks lost? */
  readonly limitReached: (dead: number) => boolean
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

type CoordinatorMessage = Data.TaggedEnum<{
  Report: { readonly rank: number; readonly report: RankReport }
  CohortFormed: {}
  RanksDead: { readonly ranks: ReadonlyArray<number>; readonly cause: string }
  StopOrdered: { readonly ranks: ReadonlyArray<number> }
  Joined: { readonly ranks: ReadonlyArray<number> }
  ExitedCleanly: { readonly rank: number }
  Tick: {}
}>
const CoordinatorMessage = Data.taggedEnum<CoordinatorMessage>()

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
  /** The epoch of the consensus checkpoint on disk for this run (written by it, or resumed from), if any. */
  readonly checkpointEpoch: Effect.Effect<number | undefined>
}

/**
 * How long a clean exit waits for the rank's last reports before it is judged: they come up the relay's link,
 * the exit up the agent's, and either may arrive first.
 */
const LAST_WORDS_MS = 1_000

/** Progress goes to the journal (and so the terminal and the page) no more often than this. */
const PROGRESS_EVERY_MS = 500

export const make = (options: CoordinatorOptions): Effect.Effect<Coordinator, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { job } = options
    const scope = yield* Effect.scope
    const lastEpoch = job.epochs
    const alive = new Set(options.ranks)
    /** Every rank the run has had: the world at formation and every rank that joined since. */
    const everyone = new Set(options.ranks)
    /** Joined, not yet entered: since when (their silence counts from then), and whether they have attached. */
    const joining = new Map<number, { readonly since: number; attached: boolean }>()
    /** Entered newcomers whose welcome waits for the consensus of the epoch before `epoch` (since `at`). */
    const unwelcomed = new Map<number, { readonly epoch: number; readonly at: number }>()
    /** Samples of the current epoch that no live rank holds (every member died): the next joiner to attach takes them. */
    let stranded: ReadonlyArray<Ledger.SampleRange> = []
    /** Since when samples have been stranded: joiners get a few beats to attach before those that have take over. */
    let strandedSince: number | undefined
    const dead = new Set<number>()
    const attached = new Set<number>()
    const exiting = new Set<number>()
    /** Ranks cohort itself is stopping (or restarting): their leaving is no loss. */
    const ordered = new Set<number>()
    const lastSeen = new Map<number, number>()
    const metrics = new Map<number, Readonly<Record<string, number>>>()
    /** Samples per second of each rank in the last finished epoch. */
    const throughput = new Map<number, number>()
    const lastProgressAt = new Map<number, number>()
    /** A rank that attached again mid-epoch (restarted) reports progress over its remainder: this much was done before. */
    const doneBefore = new Map<number, number>()
    let formedAt: number | undefined
    let ledger: Ledger.EpochLedger | undefined
    let epochStartedAt = 0
    let finished = false
    let stopping = false
    let consensus: { epoch: number; state: string } | undefined = options.resume === undefined
      ? undefined
      : { epoch: options.resume.epoch, state: options.resume.state }
    const firstEpoch = (options.resume?.epoch ?? 0) + 1
    const live = () => [...alive].sort((a, b) => a - b)
    // Asked at every Attach: with fewer attached than alive, one is surely missing (no sort, no scan).
    const everyLiveAttached = () => attached.size >= alive.size && [...alive].every((each) => attached.has(each))
    const now = Clock.currentTimeMillis
    const tell = options.onEvent ?? (() => Effect.void)
    /** Samples of the epochs finished in this run, and the last progress told: the rate is taken between two of them. */
    let samplesBefore = 0
    let lastTold: { at: number; samples: number } | undefined
    const tellProgress = (force: boolean) =>
      Effect.gen(function*() {
        if (ledger === undefined) return
        const at = yield* now
        if (!force && lastTold !== undefined && at - lastTold.at < PROGRESS_EVERY_MS) return
        const done = [...ledger.done.values()].reduce((sum, count) => sum + count, 0)
        const samples = samplesBefore + done
        const samplesPerSec = lastTold !== undefined && at > lastTold.at ? ((samples - lastTold.samples) * 1000) / (at - lastTold.at) : null
        lastTold = { at, samples }
        yield* tell({
          event: "progress",
          at,
          epoch: ledger.epoch,
          epochs: lastEpoch,
          samplesDone: done,
          datasetSize: ledger.datasetSize,
          samplesPerSec,
          metrics: averageMetrics(metrics)
        })
      })

    /** The epoch of the last checkpoint this run wrote (or resumed from): what `--resume` would continue after. */
    let written: number | undefined = options.resume?.epoch
    const writeCheckpoint = (reason: CheckpointFile.SaveReason) =>
      consensus === undefined
        ? Effect.succeed(false)
        : CheckpointFile.write(options.checkpointPath, {
          version: 1,
          run: options.run,
          epoch: consensus.epoch,
          reason,
          savedAt: new Date().toISOString(),
          world: everyone.size,
          dead: [...dead].sort((a, b) => a - b),
          state: consensus.state,
          root: options.rootState()
        }).pipe(
          Effect.zipRight(Effect.sync(() => (written = consensus!.epoch))),
          Effect.as(true),
          Effect.catchAll((error) => Effect.as(Effect.logError(error.message), false))
        )

    const startEpoch = (epoch: number) =>
      Effect.gen(function*() {
        if (epoch > lastEpoch) {
          finished = true
          yield* Effect.logInfo(`training done: ${lastEpoch} epoch(s)`)
          yield* options.send(live(), new TrainingDone())
          // Joined ranks that never entered leave too, holding the final consensus like everyone else.
          for (const [rank, waiting] of joining) if (waiting.attached) yield* dismiss(rank)
          return yield* options.drained
        }
        const weighted = (job.backend === "cpu_cadence" || job.backend === "cpu_async") &&
          live().every((rank) => (throughput.get(rank) ?? 0) > 0)
        const entering = yield* enter(epoch)
        ledger = Ledger.plan(epoch, job.datasetSize, live(), weighted ? new Map(live().map((rank) => [rank, throughput.get(rank)!])) : undefined)
        epochStartedAt = yield* now
        lastProgressAt.clear()
        doneBefore.clear()
        metrics.clear()
        for (const rank of live()) {
          if (!entering.has(rank)) yield* options.send([rank], new EpochStart({ epoch, ranges: ledger.assigned.get(rank) ?? [] }))
        }
        yield* welcomeNewcomers(() => false)
      })

    /**
     * The boundary of `epoch`: every joined rank that has attached becomes a member (its work is planned with
     * the others'). The weighted split needs a throughput for every rank, so an epoch a newcomer enters is split
     * equally. Returns the ranks that entered.
     */
    const enter = (epoch: number) =>
      Effect.gen(function*() {
        const at = yield* now
        const entering = new Set([...joining].flatMap(([rank, { attached: ready }]) => (ready ? [rank] : [])))
        if (entering.size === 0) return entering
        for (const rank of entering) {
          joining.delete(rank)
          alive.add(rank)
          attached.add(rank)
          lastSeen.set(rank, at)
          unwelcomed.set(rank, { epoch, at })
        }
        const ranks = [...entering].sort((a, b) => a - b)
        yield* Effect.logInfo(`rank(s) ${ranks.join(", ")} enter the cohort at epoch ${epoch}: ${alive.size} rank(s) train it`)
        yield* options.onEnter?.(ranks, epoch) ?? Effect.void
        return entering
      })

    /**
     * Newcomers start from the consensus of the epoch before theirs. A job that saves checkpoints offers it
     * after that epoch's last collective, a moment after the boundary: the welcome waits for it. It stops
     * waiting (`stopWaiting`) once a member has begun the newcomer's epoch without offering one (a rank offers
     * its checkpoint before it begins the next epoch), or past a heartbeat timeout; it then goes with the
     * latest consensus there is.
     */
    const welcomeNewcomers = (stopWaiting: (entry: { readonly epoch: number; readonly at: number }) => boolean) =>
      Effect.gen(function*() {
        for (const [rank, entry] of unwelcomed) {
          const { at, epoch } = entry
          // At the first epoch every rank starts from the same place (--resume's checkpoint, or nothing).
          const current = epoch <= firstEpoch || (consensus !== undefined && consensus.epoch >= epoch - 1)
          if (!current && !stopWaiting(entry)) continue
          unwelcomed.delete(rank)
          if (!alive.has(rank)) continue
          if (!current) {
            yield* Effect.logWarning(
              consensus === undefined
                ? `rank ${rank} starts epoch ${epoch} from its own initial state: the job has offered no checkpoint (ctx.checkpoint.save) to start it from`
                : `rank ${rank} starts epoch ${epoch} from the consensus of epoch ${consensus.epoch}: none newer came within ${(yield* now) - at} ms`
            )
          }
          // An epoch that ended meanwhile (the newcomer's share was empty) is not its to start: it starts at the current one.
          const first = ledger?.epoch ?? lastEpoch + 1
          yield* options.send([rank], new Welcome({ firstEpoch: first, ...(consensus === undefined ? {} : { checkpoint: consensus.state }) }))
          if (ledger !== undefined && ledger.epoch === epoch) yield* options.send([rank], new EpochStart({ epoch, ranges: ledger.assigned.get(rank) ?? [] }))
          else if (stopping) yield* options.send([rank], new Stop({ reason: "the run is stopping", saved: false }))
          else if (finished) yield* options.send([rank], new TrainingDone())
        }
      })

    const endEpoch = Effect.gen(function*() {
      const finishedLedger = ledger!
      ledger = undefined
      const took = (yield* now) - epochStartedAt
      for (const [rank, done] of finishedLedger.done) {
        const at = lastProgressAt.get(rank)
        if (at !== undefined && at > epochStartedAt && done > 0) throughput.set(rank, done / ((at - epochStartedAt) / 1000))
      }
      const shown = summariseMetrics(metrics)
      yield* tellProgress(true)
      samplesBefore += finishedLedger.datasetSize
      yield* tell({
        event: "epoch_done",
        at: yield* now,
        epoch: finishedLedger.epoch,
        epochs: lastEpoch,
        seconds: took / 1000,
        samples: finishedLedger.datasetSize,
        metrics: averageMetrics(metrics)
      })
      yield* Effect.logInfo(
        `epoch ${finishedLedger.epoch}/${lastEpoch} done in ${(took / 1000).toFixed(1)} s: ${finishedLedger.datasetSize} samples ` +
          `(${[...finishedLedger.done].sort(([a], [b]) => a - b).map(([rank, done]) => `r${rank} ${done}`).join(", ")})${shown}`
      )
      yield* options.send(live(), new EpochEnd({ epoch: finishedLedger.epoch }))
      yield* startEpoch(finishedLedger.epoch + 1)
    })

    const saveAndStop = (why: string, reason: CheckpointFile.SaveReason) =>
      Effect.gen(function*() {
        if (stopping) return
        stopping = true
        const saved = yield* writeCheckpoint(reason)
        yield* saved
          ? Effect.logError(`${why}: consensus checkpoint of epoch ${consensus!.epoch} written to ${options.checkpointPath}; resume with --resume`)
          : Effect.logError(`${why}: no consensus checkpoint to write (no rank had saved one)`)
        yield* options.send(live(), new Stop({ reason: why, saved }))
      })

    const markDead = (ranks: ReadonlyArray<number>, cause: string) =>
      Effect.gen(function*() {
        for (const rank of ranks) {
          if (dead.has(rank) || !everyone.has(rank)) continue
          dead.add(rank)
          alive.delete(rank)
          joining.delete(rank)
          unwelcomed.delete(rank)
          if (ledger === undefined || finished || stopping) continue
          const { extensions, ledger: next, orphaned } = Ledger.markDead(ledger, rank)
          ledger = next
          if (orphaned.length > 0) {
            stranded = [...stranded, ...orphaned]
            strandedSince ??= yield* now
          }
          for (const [survivor, ranges] of extensions) yield* options.send([survivor], new EpochExtend({ epoch: next.epoch, ranges }))
          options.onRedistributed?.(rank, extensions)
          const moved = [...extensions.values()].flat().reduce((sum, range) => sum + range.end - range.start, 0)
          if (moved > 0) {
            yield* Effect.logWarning(
              `rank ${rank} lost (${cause}): ${moved} unprocessed sample(s) of epoch ${next.epoch} handed to rank(s) ${[...extensions.keys()].join(", ")}`
            )
          }
        }
        if (stopping || finished) return
        if (alive.size === 0 && joining.size === 0) return yield* saveAndStop(`every rank was lost`, "all_ranks_lost")
        if (alive.size === 0) {
          yield* Effect.logWarning(`every member was lost (${cause}); rank(s) ${[...joining.keys()].join(", ")} that joined carry on once they attach`)
          return yield* rescue(cause, false)
        }
        if (options.limitReached(dead.size)) {
          return yield* saveAndStop(`max_failure exceeded (${dead.size}/${everyone.size} ranks lost)`, "max_failure_exceeded")
        }
        if (ledger !== undefined && Ledger.isComplete(ledger)) yield* endEpoch
      })

    /**
     * The last member died mid-epoch while joined ranks wait for the boundary: rather than lose the run, they
     * enter now and take over what is left of the epoch. Once every joiner has attached, or (`force`) a few
     * beats after the work was stranded with whichever have: a whole group restarting (`scope: all`) comes
     * back together, and one rank should not carry the epoch alone.
     */
    const rescue = (cause: string, force: boolean) =>
      Effect.gen(function*() {
        if (ledger === undefined || stranded.length === 0 || stopping || finished) return
        if (!force && [...joining.values()].some((waiting) => !waiting.attached)) return
        const epoch = ledger.epoch
        const entering = yield* enter(epoch)
        if (entering.size === 0) return
        const orphaned = stranded
        stranded = []
        strandedSince = undefined
        ledger = Ledger.adopt(ledger, [...entering], orphaned).ledger
        yield* Effect.logWarning(`every member was lost (${cause}): rank(s) ${[...entering].join(", ")} enter at once and take epoch ${epoch}'s remaining ${Ledger.lengthOf(orphaned)} sample(s)`)
        // No member is left to offer a newer consensus: they start from the latest there is.
        yield* welcomeNewcomers(() => true)
      })

    const onReport = (rank: number, report: RankReport) =>
      Effect.gen(function*() {
        // A rank given up for silence and then restarted (restart policy) comes back: the next epochs count on it again.
        if (report._tag === "Attach" && dead.has(rank) && !stopping && !finished) {
          dead.delete(rank)
          alive.add(rank)
          exiting.delete(rank)
        }
        const waiting = joining.get(rank)
        if (waiting !== undefined) return yield* onJoinerReport(rank, waiting, report)
        if (!alive.has(rank)) return
        lastSeen.set(rank, yield* now)
        switch (report._tag) {
          case "Attach": {
            attached.add(rank)
            ordered.delete(rank)
            // A rank (re)starting mid-run continues from the latest consensus; at the start, from --resume's.
            const checkpoint = ledger !== undefined ? consensus?.state : options.resume?.state
            yield* options.send([rank], new Welcome({ firstEpoch: ledger?.epoch ?? firstEpoch, ...(checkpoint === undefined ? {} : { checkpoint }) }))
            if (ledger !== undefined) {
              // A late (or restarted) rank: what is left of its plan.
              doneBefore.set(rank, ledger.done.get(rank) ?? 0)
              yield* options.send([rank], new EpochStart({ epoch: ledger.epoch, ranges: Ledger.remainder(ledger, rank) }))
            } else if (!finished && !stopping && job.datasetSize > 0 && everyLiveAttached()) {
              yield* startEpoch(firstEpoch)
            }
            return
          }
          case "Progress": {
            // A member at work in a newcomer's epoch has offered whatever checkpoint it would before it.
            if (unwelcomed.size > 0 && !unwelcomed.has(rank)) yield* welcomeNewcomers((entry) => report.epoch >= entry.epoch)
            if (report.metrics !== undefined) metrics.set(rank, report.metrics)
            if (report.allreduce !== undefined) options.onLatency?.(report.allreduce)
            if (ledger === undefined || report.epoch !== ledger.epoch) return
            const { clipped, ledger: next } = Ledger.report(ledger, rank, report.done + (doneBefore.get(rank) ?? 0))
            ledger = next
            lastProgressAt.set(rank, yield* now)
            if (clipped) yield* Effect.logWarning(`rank ${rank} reported ${report.done} samples done in epoch ${next.epoch}, more than the ${Ledger.assignedCount(next, rank)} it was given`)
            if (Ledger.isComplete(next)) yield* endEpoch
            else yield* tellProgress(false)
            return
          }
          case "CheckpointSave": {
            if (consensus === undefined || report.epoch > consensus.epoch) {
              consensus = { epoch: report.epoch, state: report.state }
              yield* writeCheckpoint("checkpoint")
              yield* welcomeNewcomers(() => false)
            }
            return yield* options.send([rank], new CheckpointSaved({ epoch: report.epoch }))
          }
          case "Exiting": {
            exiting.add(rank)
            // A member leaving has offered whatever checkpoint it would: newcomers waiting for one stop waiting.
            if (unwelcomed.size > 0) yield* welcomeNewcomers(() => true)
            return yield* leftWithWork(rank, "returned")
          }
          case "Heartbeat":
            return
        }
      })

    /** A rank that returns (or exits) with work left, unasked, is lost like a dead one: its samples go to the survivors. */
    const leftWithWork = (rank: number, how: string) =>
      Effect.gen(function*() {
        const left = ledger === undefined ? 0 : Ledger.lengthOf(Ledger.remainder(ledger, rank))
        if (left === 0 || finished || stopping || ordered.has(rank) || dead.has(rank)) return
        const reason = `${how} with ${left} sample(s) of epoch ${ledger!.epoch} left`
        yield* options.loseRanks([rank], reason)
        yield* markDead([rank], reason)
      })

    /**
     * A joined rank before its boundary: its Attach is held (no plan, no welcome) until the epoch it enters at; if
     * training is over or stopping it is told so at once. Its beats keep it alive meanwhile.
     */
    const onJoinerReport = (rank: number, waiting: { readonly since: number; attached: boolean }, report: RankReport) =>
      Effect.gen(function*() {
        lastSeen.set(rank, yield* now)
        if (report._tag !== "Attach") return
        waiting.attached = true
        if (finished || stopping) return yield* dismiss(rank)
        // Before the first epoch has started, the first epoch is the next boundary.
        if (ledger === undefined && job.datasetSize > 0 && everyLiveAttached() && alive.size > 0) yield* startEpoch(firstEpoch)
        // Every member died mid-epoch: the joiners take over rather than wait for a boundary no one will reach.
        if (alive.size === 0) yield* rescue("no member was left", false)
      })

    /**
     * A joined rank too late for any epoch: it is told there is none, and holds the final consensus like the
     * members (the welcome waits for the last epoch's, as any newcomer's does for the epoch before its first).
     */
    const dismiss = (rank: number) =>
      Effect.gen(function*() {
        joining.delete(rank)
        alive.add(rank)
        attached.add(rank)
        unwelcomed.set(rank, { epoch: lastEpoch + 1, at: yield* now })
        yield* welcomeNewcomers(() => stopping)
      })

    const tick = Effect.gen(function*() {
      const at = yield* now
      if (unwelcomed.size > 0) yield* welcomeNewcomers((entry) => at - entry.at > options.heartbeatTimeoutMs)
      if (alive.size === 0 && strandedSince !== undefined && at - strandedSince > 2 * beatEveryMs(options.heartbeatTimeoutMs)) {
        yield* rescue("no member was left", true)
      }
      const beating = live().filter((rank) => attached.has(rank) && !exiting.has(rank))
      if (beating.length > 0) yield* options.send(beating, new CoordinatorBeat())
      // Ranks that never attached count from the cohort's formation; joined ones from their joining.
      const watched = formedAt === undefined ? beating : live().filter((rank) => !exiting.has(rank))
      for (const [rank, { since }] of joining) {
        watched.push(rank)
        if (!lastSeen.has(rank)) lastSeen.set(rank, since)
      }
      const silent = watched.filter((rank) => at - (lastSeen.get(rank) ?? formedAt ?? at) > options.heartbeatTimeoutMs)
      if (silent.length === 0) return
      const reason = `no heartbeat for ${(options.heartbeatTimeoutMs / 1000).toFixed(1)} s`
      yield* options.loseRanks(silent, reason)
      yield* markDead(silent, reason)
    })

    const actor = yield* Actor.spawn<CoordinatorMessage, Scope.Scope>({
      name: "coordinator",
      handlers: {
        Report: ({ rank, report }) => onReport(rank, report),
        CohortFormed: () => Effect.flatMap(now, (at) => Effect.sync(() => (formedAt ??= at))),
        RanksDead: ({ cause, ranks }) => markDead(ranks, cause),
        StopOrdered: ({ ranks }) => Effect.sync(() => ranks.forEach((rank) => ordered.add(rank))),
        // Its last reports had their chance to arrive: one that said it was leaving (`Exiting`) was judged then.
        ExitedCleanly: ({ rank }) => exiting.has(rank) || !alive.has(rank) ? Effect.void : leftWithWork(rank, "exited with status 0"),
        Joined: ({ ranks }) =>
          Effect.flatMap(now, (since) =>
            Effect.sync(() => {
              for (const rank of ranks) {
                if (everyone.has(rank)) continue
                everyone.add(rank)
                joining.set(rank, { since, attached: false })
              }
            })),
        Tick: () => tick
      }
    })
    // Beats down, and the silence check, as often as the heartbeat timeout calls for.
    const beatEvery = Duration.millis(beatEveryMs(options.heartbeatTimeoutMs))
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sleep(beatEvery), Effect.ignore(actor.tell(CoordinatorMessage.Tick())))))
    // A heartbeat only moves its rank's last-seen time, and every rank's beat comes each interval: beats are applied
    // here rather than queued through the mailbox. A beat from a rank that is not alive is ignored either way,
    // and `tick` reads the times in one synchronous pass.
    const beats = (ranks: ReadonlyArray<number>) =>
      Effect.map(now, (at) => {
        for (const rank of ranks) if (alive.has(rank) || joining.has(rank)) lastSeen.set(rank, at)
      })
    return {
      report: (rank, report) => report._tag === "Heartbeat" ? beats([rank]) : Effect.ignore(actor.tell(CoordinatorMessage.Report({ rank, report }))),
      beats,
      ranksDead: (ranks, cause) => Effect.ignore(actor.tell(CoordinatorMessage.RanksDead({ ranks, cause }))),
      cohortFormed: Effect.ignore(actor.tell(CoordinatorMessage.CohortFormed())),
      stopOrdered: (ranks) => Effect.ignore(actor.tell(CoordinatorMessage.StopOrdered({ ranks }))),
      join: (ranks) => Effect.ignore(actor.tell(CoordinatorMessage.Joined({ ranks }))),
      checkpointEpoch: Effect.sync(() => written),
      exitedCleanly: (rank) =>
        Effect.asVoid(Effect.forkIn(Effect.zipRight(Effect.sleep(Duration.millis(LAST_WORDS_MS)), Effect.ignore(actor.tell(CoordinatorMessage.ExitedCleanly({ rank })))), scope))
    }
  })

/** Each metric's mean over the ranks' latest reports. */
const averageMetrics = (metrics: ReadonlyMap<number, Readonly<Record<string, number>>>): Record<string, number> => {
  const sums = new Map<string, { total: number; count: number }>()
  for (const values of metrics.values()) {
    for (const [name, value] of Object.entries(values)) {
      const entry = sums.get(name) ?? { total: 0, count: 0 }
      sums.set(name, { total: entry.total + value, count: entry.count + 1 })
    }
  }
  return Object.fromEntries([...sums].map(([name, { count, total }]) => [name, total / count]))
}

/** "; loss 0.123 (mean of the ranks' latest)" from each rank's latest metrics. */
const summariseMetrics = (metrics: ReadonlyMap<number, Readonly<Record<string, number>>>): string => {
  const means = Object.entries(averageMetrics(metrics))
  if (means.length === 0) return ""
  return `; ${means.map(([name, mean]) => `${name} ${mean.toPrecision(4)}`).join(", ")} (mean of the ranks' latest)`
}
