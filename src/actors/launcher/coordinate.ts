/**
 * The coordinator's policy, as one pure function: epochs, liveness and elastic
 * membership for the ranks of an `entry:` job.
 *
 * `coordinate(state, event)` returns the instructions the Coordinator actor
 * must carry out, in order, and the next state. Every event carries the time
 * it was heard (`at`); nothing here reads a clock, writes a file or sends a
 * message, so the same events always give the same instructions. That is what
 * lets the table and property tests drive it event by event.
 *
 * - Epochs: once every live rank has attached, each epoch's samples are
 *   split across the live ranks (`EpochLedger.plan`): equally for `cpu_sync`
 *   and `nccl`, by measured throughput for `cpu_cadence` and `cpu_async`
 *   after the first epoch. Progress reports fill the ledger; when every
 *   sample is done the epoch ends and the next one starts.
 * - Liveness: ranks beat every second, and so does the coordinator toward
 *   them (`Tick`). A rank silent for the heartbeat timeout (and not exiting)
 *   is lost: the supervisor is told and the rank is killed. Child exits
 *   reported by the agents arrive much sooner and take the same path
 *   (`RanksDead`).
 * - The death chain, once per rank: mark it dead in the ledger, hand its
 *   unprocessed samples to the survivors (`EpochExtend`), then, if no rank is
 *   left, write the consensus checkpoint and tell every survivor to stop. The
 *   failure policy's limit is not judged here: the kernel's `decide` judges it
 *   and the launcher says so (`StopRun`), which ends the same way.
 * - Checkpoints: when an epoch ends, its members vote on its consensus
 *   (`CheckpointBallot`): each offers its state once, and the state that a
 *   majority of them offered, digest for digest, is the consensus (the ranks
 *   hold one model between them, so honest ones agree). An offer of any other
 *   epoch (one under way, one to come, one long past), from a rank that is not
 *   a member, or a member's second, is refused and said once per rank: no
 *   single rank can plant a state in a world of two or more. The consensus is
 *   written atomically to `job.checkpoint`, and a `--resume` run starts after
 *   its epoch. The write is the actor's (`WriteCheckpoint`); what became of it
 *   comes back as `CheckpointWritten`, since a stop's `Stop` says whether it
 *   was saved, and a checkpoint written goes to the journal (`checkpoint`, for
 *   `--events`).
 * - The mid-epoch cut: a `cpu_sync` run stopped mid-epoch (`StopRun`) keeps
 *   what was done. The survivors are asked (`OfferCut`) for their state at
 *   their next step boundary, with the samples done and the rounds they took
 *   part in (`CutOffer`); once each has answered or gone, the state of the one
 *   with the most rounds is written with the epoch's coverage (`settleCut`),
 *   and `--resume` plans only the rest of that epoch (`Ledger.planRest`).
 *   Why that state matches that coverage: a round waits for every rank that is
 *   not waiting for work, so while every survivor is steady (never waited),
 *   every round of the epoch had every survivor still training in it, and the
 *   last one to stop took part in all of them; each rank stops at a boundary,
 *   where its reported samples are exactly those it contributed. When that
 *   cannot be shown (a survivor waited for work, began the epoch late, left
 *   without an answer, or the job has no `ctx.checkpoint.provide`) the stop
 *   keeps the last epoch's consensus and says why. `cpu_cadence` and
 *   `cpu_async` ranks step alone between syncs, so no rank holds the others'
 *   steps at an arbitrary boundary, and `nccl` rounds are the job's own: those
 *   stop at the epoch boundary, as before. A dead rank's last batch may be in
 *   the state without having been reported: the resumed run does it again,
 *   the same one-batch tolerance as a death's redistribution.
 * - Growth: ranks that join the formed cohort (`Joined`) wait, attached, for
 *   the next epoch boundary. There they enter (`Enter`, before any order of
 *   the new epoch leaves), the epoch is split over the grown cohort, and each
 *   newcomer is welcomed with the consensus of the epoch just ended: its
 *   welcome waits for that epoch's vote to be over (at most a heartbeat
 *   timeout), so it never starts from older weights than the others when the
 *   members agree on newer ones.
 *   No rank is given work before the epoch it entered at.
 *
 * Sets and maps of ranks that change with every beat, attach or report are
 * persistent (`HashSet`, `HashMap`): a relay's beats cost what they touch, not
 * a copy of 8,000 ranks. Those whose order is part of the behaviour (who is
 * welcomed first, the order metrics are averaged in) are insertion-ordered
 * `Map`s, copied when they change, like the EpochLedger's.
 */
import type { Cause } from "../FailureRules.ts"
import { createHash } from "node:crypto"
import * as Data from "effect/Data"
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import * as Option from "effect/Option"
import type { Mutable } from "effect/Types"
import type { Job } from "../../config/ClusterConfig.ts"
import { beatEveryMs } from "../../config/Heartbeat.ts"
import {
  CheckpointSaved,
  CoordinatorBeat,
  type CoordinatorOrder,
  type CutOffer,
  EpochEnd,
  EpochExtend,
  EpochStart,
  Group,
  OfferCut,
  type RankReport,
  Stop,
  TrainingDone,
  Welcome
} from "../../wire/CoordinatorMessages.ts"
import type { LatencyCounts } from "../../wire/LatencyBuckets.ts"
import * as Ballots from "./CheckpointBallot.ts"
import { type Coverage, describeCoverage, type SaveReason } from "./CheckpointFile.ts"
import * as Ledger from "./EpochLedger.ts"
import * as Groups from "./ProcessGroups.ts"
import type { RunEvent } from "./RunView.ts"

/** Progress goes to the journal (and so the terminal and the page) no more often than this. */
export const PROGRESS_EVERY_MS = 500

export type CoordinatorEvent = Data.TaggedEnum<{
  /** A rank's report, its beats included. */
  Reported: { readonly rank: number; readonly report: RankReport; readonly at: number }
  /** Ranks heard beating (a relay's `HostBeats`). */
  Beats: { readonly ranks: ReadonlyArray<number>; readonly at: number }
  /** Every rank runs user code: from now on a rank that never attaches is as silent as one that stopped beating. */
  CohortFormed: { readonly at: number }
  /** The death chain for ranks the supervisor reports dead; ranks already dead or never in the run change nothing. */
  RanksDead: { readonly ranks: ReadonlyArray<number>; readonly cause: string; readonly at: number }
  /** Cohort is stopping these ranks (the supervisor's order): their leaving early is not a loss. */
  StopOrdered: { readonly ranks: ReadonlyArray<number>; readonly at: number }
  /** Ranks new to the run joined the formed cohort: they enter at the next epoch boundary. */
  Joined: { readonly ranks: ReadonlyArray<number>; readonly at: number }
  /** The rank's process exited with status 0, and its last reports have had time to arrive. */
  ExitedCleanly: { readonly rank: number; readonly at: number }
  /** A beat interval went by: beat down, judge silence, stop waits that have lasted too long. */
  Tick: { readonly at: number }
  /** The failure policy's limit is crossed (the kernel's `decide` judged it): save the consensus and stop the survivors. */
  StopRun: { readonly why: string; readonly at: number }
  /**
   * The run was asked to stop (Ctrl-C, SIGTERM, the caller's interrupt) before the supervisor stops the ranks: a
   * `cpu_sync` run mid-epoch keeps what was done, as a stop at the limit does (the mid-epoch cut).
   */
  Interrupted: { readonly why: string; readonly at: number }
  /** What became of a `WriteCheckpoint` (of its `epoch`, for its `reason`, mid-epoch with its `coverage`): `failure` says why it was not written. */
  CheckpointWritten: {
    readonly epoch: number
    readonly reason: SaveReason
    readonly coverage?: Coverage | undefined
    readonly failure: string | undefined
    readonly at: number
  }
  /** The run is ending (its ranks are gone): a cut still waiting for answers settles with those it has. */
  Ending: { readonly at: number }
}>
export const CoordinatorEvent = Data.taggedEnum<CoordinatorEvent>()

export type Instruction = Data.TaggedEnum<{
  /** Send an order to these ranks. */
  Send: { readonly ranks: ReadonlyArray<number>; readonly order: CoordinatorOrder }
  /** A line for the operator. */
  Log: { readonly level: "info" | "warning" | "error"; readonly message: string }
  /** Record an event in the run's journal. */
  Journal: { readonly event: RunEvent }
  /** A rank's all-reduce latencies, as its progress report brought them (/metrics). */
  Latencies: { readonly counts: LatencyCounts }
  /** A dead rank's unprocessed samples now belong to these survivors (benchmarks, tests). */
  Redistributed: { readonly dead: number; readonly extensions: ReadonlyMap<number, ReadonlyArray<Ledger.SampleRange>> }
  /** Joined ranks enter the cohort at `epoch`: comes before any order of that epoch (the data plane widens its rounds). */
  Enter: { readonly ranks: ReadonlyArray<number>; readonly epoch: number }
  /** Declare ranks lost that went silent or left with work (the supervisor counts them, their processes are killed). */
  /**
   * `cause` for the failure rules: silence is `heartbeat`, a return with work left an `exit`. `diedAt`, rank
   * by rank: its last beat (silence), when it went (a return): the deaths' moments, for the time to detect them.
   */
  LoseRanks: {
    readonly ranks: ReadonlyArray<number>
    readonly reason: string
    readonly cause: Cause
    readonly diedAt: ReadonlyArray<number>
    /** Not a death but the job's mistake (a rank that never attached): the run fails with it, whatever the policy. */
    readonly fatal?: boolean | undefined
  }
  /** Every epoch is done: the ranks now leave on their own. */
  Drained: {}
  /**
   * Write the consensus checkpoint (the actor adds the run's name and the controller's model root), then
   * step `CheckpointWritten` before carrying out any instruction after this one.
   */
  WriteCheckpoint: {
    readonly epoch: number
    readonly state: string
    readonly reason: SaveReason
    /** Every rank the run has had. */
    readonly world: number
    /** The dead, ascending. */
    readonly dead: ReadonlyArray<number>
    /** A state taken mid-epoch: the epoch after `epoch`, and the samples of it the state holds. */
    readonly coverage?: Coverage | undefined
    readonly at: number
  }
}>
export const Instruction = Data.taggedEnum<Instruction>()

/** What the run fixed before the first event. */
export interface CoordinatorSettings {
  readonly job: Pick<Job, "backend" | "datasetSize" | "epochs"> & Partial<Pick<Job, "program">>
  /** The world's ranks at formation. */
  readonly ranks: ReadonlyArray<number>
  readonly heartbeatTimeoutMs: number
  /** Where the actor writes the checkpoint: named in the stop's line. */
  readonly checkpointPath: string
  /** The checkpoint this run resumes from (mid-epoch when it has a coverage). */
  readonly resume: Saved | undefined
}

/** A consensus: the state after `epoch`, or inside the epoch after it when it has a `coverage`. */
export interface Saved {
  readonly epoch: number
  readonly state: string
  readonly coverage?: Coverage | undefined
}

/** A mid-epoch cut under way: the stop waits for the survivors' states. */
export interface Cut {
  /** Why the run stops, and the reason its checkpoint is saved for. */
  readonly why: string
  readonly reason: SaveReason
  readonly epoch: number
  readonly since: number
  /** The survivors asked, ascending. */
  readonly asked: ReadonlyArray<number>
  /** Those of them yet to answer or go. */
  readonly waiting: HashSet.HashSet<number>
  readonly offers: ReadonlyMap<number, CutOffer>
}

/** Who is in the run. */
export interface Members {
  /** Ranks that train or will: the world, newcomers once they enter, dead ranks that attached again. */
  readonly alive: HashSet.HashSet<number>
  /** Every rank the run has had: the world at formation and every rank that joined since. */
  readonly everyone: HashSet.HashSet<number>
  /** Ranks that have attached (dead ones stay counted: only `alive` says who is in). */
  readonly attached: HashSet.HashSet<number>
}

/** Liveness: who was heard when. */
export interface Liveness {
  readonly lastSeen: HashMap.HashMap<number, number>
  /** Since when ranks that never attached count as silent. */
  readonly formedAt: number | undefined
  /** Ranks that said they are leaving (`Exiting`): they are neither beaten nor watched. */
  readonly exiting: HashSet.HashSet<number>
}

/** The death chain: who is dead, whose leaving is no loss, and whether the run is stopping. */
export interface Deaths {
  readonly dead: HashSet.HashSet<number>
  /** Ranks cohort itself is stopping (or restarting): their leaving is no loss. */
  readonly ordered: HashSet.HashSet<number>
  /** The run is stopping: every rank was lost, or the failure policy's limit was crossed. Nothing is replanned. */
  readonly stopping: boolean
}

/** Checkpoint consensus. */
export interface Consensus {
  /** The latest epoch's consensus: the state a majority of its members offered (or --resume's, mid-epoch with its coverage). */
  readonly latest: Saved | undefined
  /** The vote on the consensus of the epoch that ended last in this run (over or not); undefined before any has. */
  readonly ballot: Ballots.Ballot | undefined
  /** Ranks whose refused offer has been said: each is said once. */
  readonly refused: HashSet.HashSet<number>
  /** The epoch of the checkpoint on disk for this run (written by it, or resumed from): what `--resume` would continue after. */
  readonly written: number | undefined
  /** A stop whose `Stop` waits for its checkpoint's write, to say whether it was saved: why it stops. */
  readonly stopAwaitingWrite: string | undefined
  /** A stop mid-epoch waiting for the survivors' states. */
  readonly cut: Cut | undefined
}

/** A rank that joined the formed cohort and has not entered yet. */
export interface Joiner {
  /** Its silence counts from then. */
  readonly since: number
  readonly attached: boolean
}

/** A rank that entered and whose welcome waits for the consensus of the epoch before `epoch` (since `at`). */
export interface Newcomer {
  readonly epoch: number
  readonly at: number
}

/** Growth: ranks on their way in. */
export interface Growth {
  /** Joined, not yet entered, in the order they joined. */
  readonly joining: ReadonlyMap<number, Joiner>
  /** Entered, not yet welcomed, in the order they entered. */
  readonly unwelcomed: ReadonlyMap<number, Newcomer>
  /** Samples of the current epoch that no live rank holds (every member died): the next joiner to attach takes them. */
  readonly stranded: ReadonlyArray<Ledger.SampleRange>
  /** Since when samples have been stranded: joiners get a few beats to attach before those that have take over. */
  readonly strandedSince: number | undefined
}

/** The epoch under way, and what the last ones measured. */
export interface Epochs {
  readonly ledger: Ledger.EpochLedger | undefined
  readonly startedAt: number
  /** Every epoch is done. */
  readonly finished: boolean
  /** Samples per second of each rank in the last epoch it finished. */
  readonly throughput: ReadonlyMap<number, number>
  /** When each rank last reported progress in this epoch. */
  readonly lastProgressAt: HashMap.HashMap<number, number>
  /** A rank that attached again mid-epoch (restarted) reports progress over its remainder: this much was done before. */
  readonly doneBefore: HashMap.HashMap<number, number>
  /** Ranks that began this epoch after its start (restarted, or a rescue): their weights miss its earlier rounds. */
  readonly lateStarters: HashSet.HashSet<number>
  /** Each rank's latest metrics in this epoch, in the order they first reported: the live view's figures. */
  readonly metrics: ReadonlyMap<number, Readonly<Record<string, number>>>
  /**
   * Every report of this epoch summed, by metric, in the order the metrics first came: the epoch's figures
   * (a rank's latest is one batch's, and one batch's loss is noise).
   */
  readonly sums: ReadonlyMap<string, MetricSum>
}

/** A metric's reports in an epoch: their total and how many there were. */
export interface MetricSum {
  readonly total: number
  readonly count: number
}

/** What the journal was told of progress: the rate is taken between two tellings. */
export interface ProgressTold {
  /** Samples of the epochs finished in this run. */
  readonly samplesBefore: number
  readonly last: { readonly at: number; readonly samples: number } | undefined
}

export interface CoordinatorState {
  readonly settings: CoordinatorSettings
  readonly members: Members
  readonly liveness: Liveness
  readonly deaths: Deaths
  readonly consensus: Consensus
  readonly growth: Growth
  readonly epochs: Epochs
  readonly progress: ProgressTold
  /** The ranks' own process groups (ranks that attached with a store): the generation announced and its members. */
  readonly groups: Groups.ProcessGroups
}

/**
 * Why a run whose ranks all ended has not trained what it planned, if it has not: asked when every rank has
 * ended without a failure, so that such a run never says "completed". A coordinated job whose ranks ended with
 * no epoch left to train (or none planned) has nothing missing. None of them attached: its script never joined
 * (the Python client's cohort.init()); else they ended with an epoch under way or not begun.
 */
export const unfinishedTraining = (state: CoordinatorState): string | undefined => {
  const { epochs, members, settings } = state
  if (epochs.finished || settings.job.datasetSize === 0 || settings.job.epochs <= (settings.resume?.epoch ?? 0)) return undefined
  if (HashSet.size(members.attached) === 0) {
    return settings.job.program?._tag === "Command"
      ? "every rank ended without attaching, so nothing trained: a command: job with job.dataset_size is coordinated, and its script must join it " +
        "(call cohort.init() before training), or drop job.dataset_size to run the command as torchrun would"
      : "every rank ended without attaching, so nothing trained"
  }
  const under = epochs.ledger?.epoch
  return `every rank ended before training was done (${under === undefined ? "no epoch began" : `epoch ${under} of ${settings.job.epochs} under way`})`
}

export const initialState = (settings: CoordinatorSettings): CoordinatorState => ({
  settings,
  members: { alive: HashSet.fromIterable(settings.ranks), everyone: HashSet.fromIterable(settings.ranks), attached: HashSet.empty() },
  liveness: { lastSeen: HashMap.empty(), formedAt: undefined, exiting: HashSet.empty() },
  deaths: { dead: HashSet.empty(), ordered: HashSet.empty(), stopping: false },
  consensus: { latest: settings.resume, ballot: undefined, refused: HashSet.empty(), written: settings.resume?.epoch, stopAwaitingWrite: undefined, cut: undefined },
  growth: { joining: new Map(), unwelcomed: new Map(), stranded: [], strandedSince: undefined },
  epochs: {
    ledger: undefined,
    startedAt: 0,
    finished: false,
    throughput: new Map(),
    lastProgressAt: HashMap.empty(),
    doneBefore: HashMap.empty(),
    lateStarters: HashSet.empty(),
    metrics: new Map(),
    sums: new Map()
  },
  progress: { samplesBefore: 0, last: undefined },
  groups: Groups.noGroups
})

/** The first epoch this run trains: the one after --resume's (the one it is inside of, for a mid-epoch one), or 1. */
const firstEpochOf = (settings: CoordinatorSettings): number => settings.resume?.coverage?.epoch ?? (settings.resume?.epoch ?? 0) + 1

/** One step of coordination. */
export const coordinate = (
  state: CoordinatorState,
  event: CoordinatorEvent
): readonly [ReadonlyArray<Instruction>, CoordinatorState] => {
  const step = new Step(state, event.at)
  CoordinatorEvent.$match(event, {
    Reported: ({ rank, report }) => step.reported(rank, report),
    Beats: ({ ranks }) => step.beats(ranks),
    CohortFormed: () => step.cohortFormed(),
    RanksDead: ({ cause, ranks }) => step.markDead(ranks, cause),
    StopOrdered: ({ ranks }) => step.stopOrdered(ranks),
    Joined: ({ ranks }) => step.joined(ranks),
    ExitedCleanly: ({ rank }) => step.exitedCleanly(rank),
    Tick: () => step.tick(),
    StopRun: ({ why }) => step.stopRun(why),
    Interrupted: ({ why }) => step.interrupted(why),
    CheckpointWritten: ({ coverage, epoch, failure, reason }) => step.checkpointWritten(epoch, reason, coverage, failure),
    Ending: () => step.ending()
  })
  step.announceGroup()
  return [step.instructions, step.result()]
}

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

/** `sums` with one more report added. */
const addReport = (sums: ReadonlyMap<string, MetricSum>, metrics: Readonly<Record<string, number>>): ReadonlyMap<string, MetricSum> => {
  const next = new Map(sums)
  for (const [name, value] of Object.entries(metrics)) {
    const sum = next.get(name)
    next.set(name, { total: (sum?.total ?? 0) + value, count: (sum?.count ?? 0) + 1 })
  }
  return next
}

/** Each metric's mean over the epoch's reports. */
const epochMeans = (sums: ReadonlyMap<string, MetricSum>): Record<string, number> =>
  Object.fromEntries([...sums].map(([name, { count, total }]) => [name, total / count]))

/** "; loss 0.123 (mean of the epoch's reports)" from the epoch's sums. */
const summariseMetrics = (sums: ReadonlyMap<string, MetricSum>): string => {
  const means = Object.entries(epochMeans(sums))
  if (means.length === 0) return ""
  return `; ${means.map(([name, mean]) => `${name} ${mean.toPrecision(4)}`).join(", ")} (mean of the epoch's reports)`
}

const ascending = (ranks: Iterable<number>): Array<number> => [...ranks].sort((a, b) => a - b)

const valueOf = <V>(map: HashMap.HashMap<number, V>, rank: number): V | undefined => Option.getOrUndefined(HashMap.get(map, rank))

/**
 * The scratch of one `coordinate` call: shallow copies of the state's parts, whose fields are replaced (never
 * written through: the collections are persistent or copied), so the input state is never changed.
 */
class Step {
  readonly instructions: Array<Instruction> = []
  private readonly settings: CoordinatorSettings
  private readonly members: Mutable<Members>
  private readonly liveness: Mutable<Liveness>
  private readonly deaths: Mutable<Deaths>
  private readonly consensus: Mutable<Consensus>
  private readonly growth: Mutable<Growth>
  private readonly epochs: Mutable<Epochs>
  private readonly progress: Mutable<ProgressTold>
  private groups: Groups.ProcessGroups

  constructor(private readonly before: CoordinatorState, private readonly at: number) {
    this.settings = before.settings
    this.members = { ...before.members }
    this.liveness = { ...before.liveness }
    this.deaths = { ...before.deaths }
    this.consensus = { ...before.consensus }
    this.growth = { ...before.growth }
    this.epochs = { ...before.epochs }
    this.progress = { ...before.progress }
    this.groups = before.groups
  }

  result(): CoordinatorState {
    return {
      settings: this.settings,
      members: this.members,
      liveness: this.liveness,
      deaths: this.deaths,
      consensus: this.consensus,
      growth: this.growth,
      epochs: this.epochs,
      progress: this.progress,
      groups: this.groups
    }
  }

  // -------------------------------------------------------------------------
  // Events
  // -------------------------------------------------------------------------

  reported(rank: number, report: RankReport): void {
    // A rank given up for silence and then restarted (restart policy) comes back: the next epochs count on it again.
    if (report._tag === "Attach" && HashSet.has(this.deaths.dead, rank) && !this.deaths.stopping && !this.epochs.finished) {
      this.deaths.dead = HashSet.remove(this.deaths.dead, rank)
      this.members.alive = HashSet.add(this.members.alive, rank)
      this.liveness.exiting = HashSet.remove(this.liveness.exiting, rank)
    }
    // Kept whatever becomes of the attach: a joiner is in its group once it enters.
    if (report._tag === "Attach" && report.groups === true && HashSet.has(this.members.everyone, rank)) {
      this.groups = Groups.keeping(this.groups, rank)
    }
    const waiting = this.growth.joining.get(rank)
    if (waiting !== undefined) return this.joinerReported(rank, waiting, report)
    if (!this.isAlive(rank)) return
    this.heard(rank)
    switch (report._tag) {
      case "Attach":
        return this.attached(rank)
      case "Progress":
        return this.progressed(rank, report)
      case "CheckpointSave":
        this.checkpointOffered(rank, report.epoch, report.state)
        // Answered whatever became of it: the rank's save returns (a refusal is the operator's to read, not its).
        return this.send([rank], new CheckpointSaved({ epoch: report.epoch }))
      case "CutOffer":
        return this.cutOffered(rank, report)
      case "Exiting": {
        this.liveness.exiting = HashSet.add(this.liveness.exiting, rank)
        // Gone without a word more: a cut waiting for it has all it will get from it.
        this.answered(rank)
        // A member leaving has offered whatever checkpoint it would: the vote waits for it no longer.
        this.abstained(rank)
        return this.leftWithWork(rank, "returned")
      }
      case "Heartbeat":
        return
    }
  }

  beats(ranks: ReadonlyArray<number>): void {
    // A beat from a rank that is neither in nor on its way in is ignored.
    for (const rank of ranks) if (this.isAlive(rank) || this.growth.joining.has(rank)) this.heard(rank)
  }

  cohortFormed(): void {
    this.liveness.formedAt ??= this.at
  }

  stopOrdered(ranks: ReadonlyArray<number>): void {
    for (const rank of ranks) this.deaths.ordered = HashSet.add(this.deaths.ordered, rank)
  }

  joined(ranks: ReadonlyArray<number>): void {
    const joining = new Map(this.growth.joining)
    for (const rank of ranks) {
      // Rank numbers are never reused: one the run has had is not joining.
      if (HashSet.has(this.members.everyone, rank)) continue
      this.members.everyone = HashSet.add(this.members.everyone, rank)
      joining.set(rank, { since: this.at, attached: false })
    }
    this.growth.joining = joining
  }

  exitedCleanly(rank: number): void {
    this.answered(rank)
    this.abstained(rank)
    // Its last reports had their chance to arrive: one that said it was leaving (`Exiting`) was judged then.
    if (HashSet.has(this.liveness.exiting, rank) || !this.isAlive(rank)) return
    if (this.scriptMustAttach() && !HashSet.has(this.members.attached, rank) && !this.epochs.finished && !this.deaths.stopping && !HashSet.has(this.deaths.ordered, rank)) {
      // A script that never joined its coordinator (no cohort.init()) and ended: nothing of the plan was trained by it.
      this.neverAttached([rank], "exited with status 0 without attaching")
      return
    }
    this.leftWithWork(rank, "exited with status 0")
  }

  /**
   * Whether the job's ranks attach only if their script says so: a `command:` job with a plan (the Python client's
   * cohort.init()). An `entry:` rank attaches by itself before the user's code runs; one that never does is silent.
   */
  private scriptMustAttach(): boolean {
    return this.settings.job.program?._tag === "Command" && this.settings.job.datasetSize > 0
  }

  /**
   * Ranks of a coordinated job (job.dataset_size) that never attached: the job's script does not speak to cohort.
   * The run fails, saying what to add: nothing would train, and a run that trained nothing must not say completed.
   */
  private neverAttached(ranks: ReadonlyArray<number>, how: string): void {
    const reason = `${how}: a command: job with job.dataset_size is coordinated, and its script must join it ` +
      "(call cohort.init() before training), or drop job.dataset_size to run the command as torchrun would"
    this.instructions.push(Instruction.LoseRanks({ ranks, reason, cause: "exit", diedAt: ranks.map(() => this.at), fatal: true }))
    this.markDead(ranks, reason)
  }

  stopRun(why: string): void {
    // Once training is done the ranks leave on their own: there is nothing left to save them from.
    if (this.epochs.finished || this.deaths.stopping) return
    if (!this.beginCut(why, "max_failure_exceeded")) this.saveAndStop(why, "max_failure_exceeded")
  }

  /**
   * Asked to stop from outside: a cut when one can be had; otherwise nothing changes here (the supervisor stops
   * the ranks, and the consensus already on disk is what is kept).
   */
  interrupted(why: string): void {
    if (this.epochs.finished || this.deaths.stopping) return
    this.beginCut(why, "interrupted")
  }

  ending(): void {
    if (this.consensus.cut !== undefined) this.settleCut()
  }

  checkpointWritten(epoch: number, reason: SaveReason, coverage: Coverage | undefined, failure: string | undefined): void {
    if (failure === undefined) {
      this.consensus.written = epoch
      this.instructions.push(Instruction.Journal({ event: { event: "checkpoint", at: this.at, epoch, path: this.settings.checkpointPath, reason } }))
    } else this.log("error", failure)
    // The actor answers a write before anything else runs: a stop waiting now waits for this write.
    const why = this.consensus.stopAwaitingWrite
    if (why === undefined) return
    this.consensus.stopAwaitingWrite = undefined
    this.announceStop(why, failure === undefined ? { epoch, coverage } : undefined, failure === undefined ? undefined : epoch)
  }

  /**
   * After every step: when the members of the ranks' process group changed (a death, a restarted rank back, newcomers
   * entering), the new generation goes to its members. Not before every live rank has attached (the first group is
   * the formed cohort's), and not once the run is ending: ranks that leave then form nothing.
   */
  announceGroup(): void {
    if (this.groups.keepers.size === 0 || this.deaths.stopping || this.epochs.finished) return
    // Only who is in, attached, leaving or keeps groups decides the group: a step that changed none of them (a beat,
    // a progress report: nearly every step) changed no group. The collections are replaced, never written through.
    const { before } = this
    const unchanged = before.members.alive === this.members.alive && before.members.attached === this.members.attached &&
      before.liveness.exiting === this.liveness.exiting && before.groups === this.groups
    if (unchanged || !this.everyLiveAttached()) return
    const { exiting } = this.liveness
    const group = Groups.nextGroup(this.groups, this.live().filter((rank) => !HashSet.has(exiting, rank)))
    if (group === undefined) return
    this.groups = Groups.announced(this.groups, group)
    this.send(group.members, new Group({ generation: group.generation, members: group.members }))
  }

  // -------------------------------------------------------------------------
  // Liveness
  // -------------------------------------------------------------------------

  tick(): void {
    const { at } = this
    const timeout = this.settings.heartbeatTimeoutMs
    // A survivor that neither answers nor goes within a heartbeat timeout is not waited for longer.
    const { cut } = this.consensus
    if (cut !== undefined && at - cut.since > timeout) this.settleCut()
    if (this.growth.unwelcomed.size > 0) this.welcomeNewcomers((newcomer) => at - newcomer.at > timeout)
    const { strandedSince } = this.growth
    if (HashSet.size(this.members.alive) === 0 && strandedSince !== undefined && at - strandedSince > 2 * beatEveryMs(timeout)) {
      this.rescue("no member was left", true)
    }
    const { attached } = this.members
    const { exiting, formedAt } = this.liveness
    const beating = this.live().filter((rank) => HashSet.has(attached, rank) && !HashSet.has(exiting, rank))
    if (beating.length > 0) this.send(beating, new CoordinatorBeat())
    // Ranks that never attached count from the cohort's formation; joined ones from their joining.
    const watched = formedAt === undefined ? [...beating] : this.live().filter((rank) => !HashSet.has(exiting, rank))
    for (const [rank, { since }] of this.growth.joining) {
      watched.push(rank)
      if (!HashMap.has(this.liveness.lastSeen, rank)) this.liveness.lastSeen = HashMap.set(this.liveness.lastSeen, rank, since)
    }
    const { lastSeen } = this.liveness
    const silent = watched.filter((rank) => at - (valueOf(lastSeen, rank) ?? formedAt ?? at) > timeout)
    if (silent.length === 0) return
    // Ranks of the formed world that never attached nor beat: their script does not speak to cohort (no cohort.init()).
    const unheard = silent.filter((rank) => !HashSet.has(attached, rank) && !HashMap.has(lastSeen, rank) && !this.growth.joining.has(rank))
    if (unheard.length > 0 && this.scriptMustAttach()) {
      return this.neverAttached(unheard, `never attached within ${(timeout / 1000).toFixed(1)} s of the cohort's formation`)
    }
    const reason = `no heartbeat for ${(timeout / 1000).toFixed(1)} s`
    this.instructions.push(Instruction.LoseRanks({ ranks: silent, reason, cause: "heartbeat", diedAt: silent.map((rank) => valueOf(lastSeen, rank) ?? formedAt ?? at) }))
    this.markDead(silent, reason)
  }

  // -------------------------------------------------------------------------
  // The death chain
  // -------------------------------------------------------------------------

  markDead(ranks: ReadonlyArray<number>, cause: string): void {
    for (const rank of ranks) {
      if (HashSet.has(this.deaths.dead, rank) || !HashSet.has(this.members.everyone, rank)) continue
      this.deaths.dead = HashSet.add(this.deaths.dead, rank)
      this.members.alive = HashSet.remove(this.members.alive, rank)
      this.growth.joining = without(this.growth.joining, rank)
      this.growth.unwelcomed = without(this.growth.unwelcomed, rank)
      this.answered(rank)
      this.leftTheVote(rank)
      const { ledger } = this.epochs
      if (ledger === undefined || this.epochs.finished || this.deaths.stopping) continue
      const { extensions, ledger: next, orphaned } = Ledger.markDead(ledger, rank)
      this.epochs.ledger = next
      if (orphaned.length > 0) {
        this.growth.stranded = [...this.growth.stranded, ...orphaned]
        this.growth.strandedSince ??= this.at
      }
      for (const [survivor, ranges] of extensions) this.send([survivor], new EpochExtend({ epoch: next.epoch, ranges }))
      this.instructions.push(Instruction.Redistributed({ dead: rank, extensions }))
      const moved = Ledger.lengthOf([...extensions.values()].flat())
      if (moved > 0) {
        this.log(
          "warning",
          `rank ${rank} lost (${cause}): ${moved} unprocessed sample(s) of epoch ${next.epoch} handed to rank(s) ${[...extensions.keys()].join(", ")}`
        )
      }
    }
    if (this.deaths.stopping || this.epochs.finished) return
    if (HashSet.size(this.members.alive) === 0 && this.growth.joining.size === 0) return this.saveAndStop(`every rank was lost`, "all_ranks_lost")
    if (HashSet.size(this.members.alive) === 0) {
      this.log("warning", `every member was lost (${cause}); rank(s) ${[...this.growth.joining.keys()].join(", ")} that joined carry on once they attach`)
      return this.rescue(cause, false)
    }
    const { ledger } = this.epochs
    if (ledger !== undefined && Ledger.isComplete(ledger)) this.endEpoch()
  }

  /** A rank that returns (or exits) with work left, unasked, is lost like a dead one: its samples go to the survivors. */
  private leftWithWork(rank: number, how: string): void {
    const { ledger } = this.epochs
    if (ledger === undefined) return
    const left = Ledger.lengthOf(Ledger.remainder(ledger, rank))
    if (left === 0 || this.epochs.finished || this.deaths.stopping || HashSet.has(this.deaths.ordered, rank) || HashSet.has(this.deaths.dead, rank)) return
    const reason = `${how} with ${left} sample(s) of epoch ${ledger.epoch} left`
    this.instructions.push(Instruction.LoseRanks({ ranks: [rank], reason, cause: "exit", diedAt: [this.at] }))
    this.markDead([rank], reason)
  }

  /** The end of the chain: the consensus is saved (when there is one) and every survivor is told to stop. */
  private saveAndStop(why: string, reason: SaveReason): void {
    if (this.deaths.stopping) return
    this.deaths.stopping = true
    this.saveLatest(why, reason)
  }

  /** The latest consensus saved (when there is one), then the stop told. */
  private saveLatest(why: string, reason: SaveReason): void {
    if (this.writeCheckpoint(reason)) this.consensus.stopAwaitingWrite = why
    else this.announceStop(why, undefined)
  }

  /**
   * `saved`: the checkpoint just written for this stop, if one was (mid-epoch: with its coverage); `unwritten`:
   * the epoch of the one whose write failed (the error is said just before), which is not "none to write".
   */
  private announceStop(why: string, saved: { readonly epoch: number; readonly coverage: Coverage | undefined } | undefined, unwritten?: number): void {
    const { checkpointPath } = this.settings
    this.log(
      "error",
      unwritten !== undefined
        ? `${why}: the consensus checkpoint of epoch ${unwritten} could not be written to ${checkpointPath} (the error above): nothing new to resume from`
        : saved === undefined
        ? `${why}: no consensus checkpoint to write (no rank had saved one)`
        : saved.coverage === undefined
        ? `${why}: consensus checkpoint of epoch ${saved.epoch} written to ${checkpointPath}; resume with --resume`
        : `${why}: consensus checkpoint written to ${checkpointPath}, resuming ${describeCoverage(saved.coverage)}; resume with --resume`
    )
    this.send(this.live(), new Stop({ reason: why, saved: saved !== undefined }))
  }

  // -------------------------------------------------------------------------
  // The mid-epoch cut
  // -------------------------------------------------------------------------

  /** Ask the survivors for their state at their next step boundary; false when no cut can be had (see the header). */
  private beginCut(why: string, reason: SaveReason): boolean {
    const { ledger } = this.epochs
    if (this.settings.job.backend !== "cpu_sync" || ledger === undefined) return false
    const { attached } = this.members
    const asked = this.live().filter((rank) => HashSet.has(attached, rank) && ledger.assigned.has(rank) && !HashSet.has(this.liveness.exiting, rank))
    if (asked.length === 0) return false
    this.deaths.stopping = true
    this.consensus.cut = { why, reason, epoch: ledger.epoch, since: this.at, asked, waiting: HashSet.fromIterable(asked), offers: new Map() }
    this.log(
      "info",
      `${why}: asking rank(s) ${asked.join(", ")} for their state at their next step, to keep epoch ${ledger.epoch}'s ` +
        `${Ledger.doneCount(ledger).toLocaleString("en-US")} sample(s) done`
    )
    this.send(asked, new OfferCut({ epoch: ledger.epoch }))
    return true
  }

  /** A survivor's state and work at its boundary. Offers no cut asked for (or of another epoch) are not kept. */
  private cutOffered(rank: number, offer: CutOffer): void {
    const { cut } = this.consensus
    if (cut === undefined || offer.epoch !== cut.epoch || !HashSet.has(cut.waiting, rank)) return
    this.consensus.cut = { ...cut, offers: new Map(cut.offers).set(rank, offer) }
    this.answered(rank)
  }

  /** A survivor asked for its cut answered, exited or died: once none is left to wait for, the cut settles. */
  private answered(rank: number): void {
    const { cut } = this.consensus
    if (cut === undefined || !HashSet.has(cut.waiting, rank)) return
    const waiting = HashSet.remove(cut.waiting, rank)
    this.consensus.cut = { ...cut, waiting }
    if (HashSet.size(waiting) === 0) this.settleCut()
  }

  /** Write the most advanced survivor's state with the epoch's coverage, or, when they do not agree with it, the last epoch's consensus. */
  private settleCut(): void {
    const cut = this.consensus.cut!
    this.consensus.cut = undefined
    const ledger = this.epochs.ledger!
    const problem = this.cutProblem(cut, ledger)
    if (problem !== undefined) {
      const { latest } = this.consensus
      this.log(
        "warning",
        `epoch ${cut.epoch}'s progress cannot be kept (${problem}): ` +
          (latest === undefined ? "--resume would start from the beginning" : `the checkpoint keeps the consensus of epoch ${latest.epoch}`)
      )
      return this.saveLatest(cut.why, cut.reason)
    }
    // The most rounds: the last survivor to stop, whose state holds every round of the epoch (lowest rank on a tie).
    const [, chosen] = [...cut.offers].sort(([a, x], [b, y]) => y.rounds - x.rounds || a - b)[0]!
    this.instructions.push(Instruction.WriteCheckpoint({
      epoch: cut.epoch - 1,
      state: chosen.state!,
      reason: cut.reason,
      world: HashSet.size(this.members.everyone),
      dead: ascending(this.deaths.dead),
      coverage: { epoch: cut.epoch, datasetSize: ledger.datasetSize, done: Ledger.covered(ledger) },
      at: this.at
    }))
    this.consensus.stopAwaitingWrite = cut.why
  }

  /** Why the survivors' answers do not show a state that holds exactly the epoch's done samples, if they do not. */
  private cutProblem(cut: Cut, ledger: Ledger.EpochLedger): string | undefined {
    if (ledger.epoch !== cut.epoch) return `epoch ${cut.epoch} ended meanwhile`
    for (const rank of cut.asked) {
      const offer = cut.offers.get(rank)
      if (offer === undefined) return `rank ${rank} stopped without offering its state`
      if (offer.state === undefined) return `rank ${rank}'s job offers no state between steps (ctx.checkpoint.provide)`
      if (HashSet.has(this.epochs.lateStarters, rank)) return `rank ${rank} began the epoch part-way, from an older state`
      if (!offer.steady) return `rank ${rank} waited for work, so its weights miss the others' last rounds`
      const reported = (ledger.done.get(rank) ?? 0) - (valueOf(this.epochs.doneBefore, rank) ?? 0)
      if (offer.done !== reported) return `rank ${rank} offered a state after ${offer.done} sample(s), but reported ${reported}`
    }
    return undefined
  }

  // -------------------------------------------------------------------------
  // Checkpoint consensus
  // -------------------------------------------------------------------------

  /** The vote on the epoch that just ended: its members are the ranks alive at its end that trained it (see CheckpointBallot). */
  private openBallot(ended: Ledger.EpochLedger): void {
    const before = this.consensus.ballot
    // An epoch ends only once its members have all begun it, so a vote still open here waits for no one alive.
    if (before !== undefined && !Ballots.isOver(before)) this.ballotClosed({ ...before, closed: true })
    const alive = ascending([...ended.assigned.keys()].filter((rank) => this.isAlive(rank)))
    const whole = alive.filter((rank) => !ended.dead.has(rank) && !HashSet.has(this.epochs.lateStarters, rank))
    // Every member began part-way (a rescue): they are all there is.
    const voters = whole.length > 0 ? whole : alive
    this.consensus.ballot = Ballots.open(ended.epoch, voters, alive)
  }

  /** A rank's `CheckpointSave`: counted when it is a member's first for the epoch just ended, refused (and said once) otherwise. */
  private checkpointOffered(rank: number, epoch: number, state: string): void {
    const offered = Ballots.offer(this.consensus.ballot, rank, epoch, digestOf(state), state)
    if (offered._tag === "Refused") return this.refuse(rank, epoch, offered.why)
    if (offered._tag === "Repeated") return
    this.consensus.ballot = offered.ballot
    this.judgeBallot()
  }

  /** A member began the next epoch, or is leaving, without offering: the vote waits for it no longer. */
  private abstained(rank: number): void {
    const { ballot } = this.consensus
    if (ballot === undefined || Ballots.isOver(ballot) || !HashSet.has(ballot.waiting, rank)) return
    this.consensus.ballot = Ballots.abstain(ballot, rank)
    this.judgeBallot()
  }

  /** A member died: if it had not offered, the majority is of those left. */
  private leftTheVote(rank: number): void {
    const { ballot } = this.consensus
    if (ballot === undefined || Ballots.isOver(ballot)) return
    this.consensus.ballot = Ballots.died(ballot, rank)
    this.judgeBallot()
  }

  private judgeBallot(): void {
    const verdict = Ballots.verdict(this.consensus.ballot!)
    if (verdict._tag === "Open") return
    if (verdict._tag === "Closed") return this.ballotClosed(verdict.ballot)
    const { ballot } = verdict
    this.consensus.ballot = ballot
    this.consensus.latest = { epoch: ballot.epoch, state: verdict.state }
    for (const rank of verdict.dissenters) this.refuse(rank, ballot.epoch, Ballots.disagreement(ballot))
    this.writeCheckpoint("checkpoint")
    this.welcomeNewcomers(() => false)
  }

  /** The vote is over without a majority: the consensus stays the epoch before's, and the operator is told why when anyone offered. */
  private ballotClosed(ballot: Ballots.Ballot): void {
    this.consensus.ballot = ballot
    if (HashMap.size(ballot.offers) > 0) {
      const { latest } = this.consensus
      const fix = Ballots.abstainers(ballot) > 0
        ? "save on every rank: the consensus needs a majority of the epoch's members"
        : this.settings.job.backend === "cpu_cadence" || this.settings.job.backend === "cpu_async"
        ? `${this.settings.job.backend} ranks train apart between syncs: average the state over the ranks before saving it (as examples/train.ts does)`
        : "the members' states should be equal: a rank that offers another is not in step, or not honest"
      this.log(
        "warning",
        `epoch ${ballot.epoch} has no consensus checkpoint: no state was offered by a majority (${Ballots.majorityOf(ballot)}) of its ` +
          `${HashSet.size(ballot.voters)} member(s) (${Ballots.describeOffers(ballot)}); ${fix}; ` +
          (latest === undefined ? "--resume would start from the beginning" : `the checkpoint stays at epoch ${latest.epoch}`)
      )
    }
    this.welcomeNewcomers(() => false)
  }

  /** A refused offer, said once per rank (a rank that keeps offering is not said again). */
  private refuse(rank: number, epoch: number, why: string): void {
    if (HashSet.has(this.consensus.refused, rank)) return
    this.consensus.refused = HashSet.add(this.consensus.refused, rank)
    this.log("warning", `rank ${rank}'s checkpoint of epoch ${epoch} is refused: ${why}`)
  }

  /** Whether the vote on `epoch`'s consensus is over (or there is none to wait for): a newcomer waits for no more. */
  private voteOver(epoch: number): boolean {
    const { ballot } = this.consensus
    return ballot === undefined || ballot.epoch !== epoch || Ballots.isOver(ballot)
  }

  /** Ask for the consensus to be written; false when there is none to write. */
  private writeCheckpoint(reason: SaveReason): boolean {
    const { latest } = this.consensus
    if (latest === undefined) return false
    this.instructions.push(Instruction.WriteCheckpoint({
      epoch: latest.epoch,
      state: latest.state,
      reason,
      world: HashSet.size(this.members.everyone),
      dead: ascending(this.deaths.dead),
      // --resume's mid-epoch state, not yet replaced by a newer consensus, still holds exactly its coverage.
      ...(latest.coverage === undefined ? {} : { coverage: latest.coverage }),
      at: this.at
    }))
    return true
  }

  /**
   * Newcomers start from the consensus of the epoch before theirs. A job that saves checkpoints offers it
   * after that epoch's last collective, a moment after the boundary: the welcome waits for the vote. It
   * stops waiting once the vote is over (decided, or every member has offered, begun the newcomer's epoch,
   * left or died: a rank offers its checkpoint before it begins the next epoch), or when `stopWaiting` says
   * so (past a heartbeat timeout); it then goes with the latest consensus there is.
   */
  private welcomeNewcomers(stopWaiting: (newcomer: Newcomer) => boolean): void {
    const waiting = this.growth.unwelcomed
    if (waiting.size === 0) return
    const firstEpoch = firstEpochOf(this.settings)
    const left = new Map(waiting)
    for (const [rank, newcomer] of waiting) {
      const { epoch } = newcomer
      const { latest } = this.consensus
      // At the first epoch every rank starts from the same place (--resume's checkpoint, or nothing).
      const current = epoch <= firstEpoch || (latest !== undefined && latest.epoch >= epoch - 1)
      const over = this.voteOver(epoch - 1)
      if (!current && !over && !stopWaiting(newcomer)) continue
      left.delete(rank)
      if (!this.isAlive(rank)) continue
      if (!current) {
        const { ballot } = this.consensus
        const disagreed = over && ballot?.epoch === epoch - 1 && HashMap.size(ballot.offers) > 0
        this.log(
          "warning",
          disagreed
            ? `rank ${rank} starts epoch ${epoch} from ${latest === undefined ? "its own initial state" : `the consensus of epoch ${latest.epoch}`}: epoch ${epoch - 1}'s members agreed on no checkpoint`
            : latest === undefined
            ? `rank ${rank} starts epoch ${epoch} from its own initial state: the job has offered no checkpoint (ctx.checkpoint.save) to start it from`
            : `rank ${rank} starts epoch ${epoch} from the consensus of epoch ${latest.epoch}: none newer came within ${this.at - newcomer.at} ms`
        )
      }
      const { ledger } = this.epochs
      // An epoch that ended meanwhile (the newcomer's share was empty) is not its to start: it starts at the current one.
      const first = ledger?.epoch ?? this.settings.job.epochs + 1
      this.send([rank], new Welcome({ firstEpoch: first, ...(latest === undefined ? {} : { checkpoint: latest.state }) }))
      if (ledger !== undefined && ledger.epoch === epoch) this.send([rank], new EpochStart({ epoch, ranges: ledger.assigned.get(rank) ?? [] }))
      else if (this.deaths.stopping) this.send([rank], new Stop({ reason: "the run is stopping", saved: false }))
      else if (this.epochs.finished) this.send([rank], new TrainingDone())
    }
    this.growth.unwelcomed = left
  }

  // -------------------------------------------------------------------------
  // Growth
  // -------------------------------------------------------------------------

  /**
   * A joined rank before its boundary: its Attach is held (no plan, no welcome) until the epoch it enters at; if
   * training is over or stopping it is told so at once. Its beats keep it alive meanwhile.
   */
  private joinerReported(rank: number, waiting: Joiner, report: RankReport): void {
    this.heard(rank)
    if (report._tag !== "Attach") return
    this.growth.joining = new Map(this.growth.joining).set(rank, { ...waiting, attached: true })
    if (this.epochs.finished || this.deaths.stopping) return this.dismiss(rank)
    // Before the first epoch has started, the first epoch is the next boundary.
    if (this.epochs.ledger === undefined && this.settings.job.datasetSize > 0 && this.everyLiveAttached() && HashSet.size(this.members.alive) > 0) {
      this.startEpoch(firstEpochOf(this.settings))
    }
    // Every member died mid-epoch: the joiners take over rather than wait for a boundary no one will reach.
    if (HashSet.size(this.members.alive) === 0) this.rescue("no member was left", false)
  }

  /**
   * The boundary of `epoch`: every joined rank that has attached becomes a member (its work is planned with
   * the others'). Returns the ranks that entered, in the order they joined.
   */
  private enter(epoch: number): ReadonlySet<number> {
    const entering = new Set([...this.growth.joining].flatMap(([rank, { attached }]) => (attached ? [rank] : [])))
    if (entering.size === 0) return entering
    const joining = new Map(this.growth.joining)
    const unwelcomed = new Map(this.growth.unwelcomed)
    for (const rank of entering) {
      joining.delete(rank)
      this.members.alive = HashSet.add(this.members.alive, rank)
      this.members.attached = HashSet.add(this.members.attached, rank)
      this.heard(rank)
      unwelcomed.set(rank, { epoch, at: this.at })
    }
    this.growth.joining = joining
    this.growth.unwelcomed = unwelcomed
    const ranks = ascending(entering)
    this.log("info", `rank(s) ${ranks.join(", ")} enter the cohort at epoch ${epoch}: ${HashSet.size(this.members.alive)} rank(s) train it`)
    this.instructions.push(Instruction.Enter({ ranks, epoch }))
    return entering
  }

  /**
   * The last member died mid-epoch while joined ranks wait for the boundary: rather than lose the run, they
   * enter now and take over what is left of the epoch. Once every joiner has attached, or (`force`) a few
   * beats after the work was stranded with whichever have: a whole group restarting (`scope: all`) comes
   * back together, and one rank should not carry the epoch alone.
   */
  private rescue(cause: string, force: boolean): void {
    const { ledger } = this.epochs
    if (ledger === undefined || this.growth.stranded.length === 0 || this.deaths.stopping || this.epochs.finished) return
    if (!force && [...this.growth.joining.values()].some((joiner) => !joiner.attached)) return
    const entering = this.enter(ledger.epoch)
    if (entering.size === 0) return
    const orphaned = this.growth.stranded
    this.growth.stranded = []
    this.growth.strandedSince = undefined
    this.epochs.ledger = Ledger.adopt(ledger, [...entering], orphaned).ledger
    this.epochs.lateStarters = HashSet.union(this.epochs.lateStarters, entering)
    this.log(
      "warning",
      `every member was lost (${cause}): rank(s) ${[...entering].join(", ")} enter at once and take epoch ${ledger.epoch}'s remaining ${Ledger.lengthOf(orphaned)} sample(s)`
    )
    // No member is left to offer a newer consensus: they start from the latest there is.
    this.welcomeNewcomers(() => true)
  }

  /**
   * A joined rank too late for any epoch: it is told there is none, and holds the final consensus like the
   * members (the welcome waits for the last epoch's, as any newcomer's does for the epoch before its first).
   */
  private dismiss(rank: number): void {
    this.growth.joining = without(this.growth.joining, rank)
    this.members.alive = HashSet.add(this.members.alive, rank)
    this.members.attached = HashSet.add(this.members.attached, rank)
    this.growth.unwelcomed = new Map(this.growth.unwelcomed).set(rank, { epoch: this.settings.job.epochs + 1, at: this.at })
    this.welcomeNewcomers(() => this.deaths.stopping)
  }

  // -------------------------------------------------------------------------
  // Epochs
  // -------------------------------------------------------------------------

  private attached(rank: number): void {
    this.members.attached = HashSet.add(this.members.attached, rank)
    this.deaths.ordered = HashSet.remove(this.deaths.ordered, rank)
    const { ledger } = this.epochs
    // A rank (re)starting mid-run continues from the latest consensus; at the start, from --resume's.
    const checkpoint = ledger !== undefined ? this.consensus.latest?.state : this.settings.resume?.state
    this.send([rank], new Welcome({ firstEpoch: ledger?.epoch ?? firstEpochOf(this.settings), ...(checkpoint === undefined ? {} : { checkpoint }) }))
    if (ledger !== undefined) {
      // A late (or restarted) rank: what is left of its plan.
      this.epochs.doneBefore = HashMap.set(this.epochs.doneBefore, rank, ledger.done.get(rank) ?? 0)
      this.epochs.lateStarters = HashSet.add(this.epochs.lateStarters, rank)
      this.send([rank], new EpochStart({ epoch: ledger.epoch, ranges: Ledger.remainder(ledger, rank) }))
    } else if (!this.epochs.finished && !this.deaths.stopping && this.settings.job.datasetSize > 0 && this.everyLiveAttached()) {
      this.startEpoch(firstEpochOf(this.settings))
    }
  }

  private progressed(rank: number, report: Extract<RankReport, { readonly _tag: "Progress" }>): void {
    // A member at work in a later epoch has offered whatever checkpoint it would of the one before.
    const { ballot } = this.consensus
    if (ballot !== undefined && report.epoch > ballot.epoch) this.abstained(rank)
    if (report.metrics !== undefined) this.epochs.metrics = new Map(this.epochs.metrics).set(rank, report.metrics)
    if (report.allreduce !== undefined) this.instructions.push(Instruction.Latencies({ counts: report.allreduce }))
    const { ledger } = this.epochs
    if (ledger === undefined || report.epoch !== ledger.epoch) return
    // Only this epoch's reports make its figures: a late one of the epoch before is not of it.
    if (report.metrics !== undefined) this.epochs.sums = addReport(this.epochs.sums, report.metrics)
    const { clipped, ledger: next } = Ledger.report(ledger, rank, report.done + (valueOf(this.epochs.doneBefore, rank) ?? 0))
    this.epochs.ledger = next
    this.epochs.lastProgressAt = HashMap.set(this.epochs.lastProgressAt, rank, this.at)
    if (clipped) {
      this.log("warning", `rank ${rank} reported ${report.done} samples done in epoch ${next.epoch}, more than the ${Ledger.assignedCount(next, rank)} it was given`)
    }
    // A cut under way keeps the epoch open: its coverage is then the whole epoch, and no next one starts.
    if (Ledger.isComplete(next) && this.consensus.cut === undefined) this.endEpoch()
    else this.tellProgress()
  }

  private startEpoch(epoch: number): void {
    const { job } = this.settings
    if (epoch > job.epochs) {
      this.epochs.finished = true
      this.log("info", `training done: ${job.epochs} epoch(s)`)
      this.send(this.live(), new TrainingDone())
      // Joined ranks that never entered leave too, holding the final consensus like everyone else.
      for (const [rank, waiting] of this.growth.joining) if (waiting.attached) this.dismiss(rank)
      this.instructions.push(Instruction.Drained())
      return
    }
    const entering = this.enter(epoch)
    const ranks = this.live()
    const { throughput } = this.epochs
    // The weighted split needs a throughput for every rank that trains the epoch: one a newcomer enters is split equally.
    const weighted = (job.backend === "cpu_cadence" || job.backend === "cpu_async") && ranks.every((rank) => (throughput.get(rank) ?? 0) > 0)
    const resumed = this.settings.resume?.coverage
    // The epoch a mid-epoch checkpoint is inside of: only its rest is planned.
    const ledger = resumed !== undefined && resumed.epoch === epoch
      ? Ledger.planRest(epoch, job.datasetSize, ranks, resumed.done)
      : Ledger.plan(epoch, job.datasetSize, ranks, weighted ? new Map(ranks.map((rank) => [rank, throughput.get(rank)!])) : undefined)
    this.epochs.ledger = ledger
    this.epochs.startedAt = this.at
    this.epochs.lastProgressAt = HashMap.empty()
    this.epochs.doneBefore = HashMap.empty()
    this.epochs.lateStarters = HashSet.empty()
    this.epochs.metrics = new Map()
    this.epochs.sums = new Map()
    if (resumed !== undefined && resumed.epoch === epoch) {
      this.log("info", `epoch ${epoch} resumes at ${Ledger.doneCount(ledger).toLocaleString("en-US")} of ${job.datasetSize.toLocaleString("en-US")} samples done: the rest is split over ${ranks.length} rank(s)`)
    }
    for (const rank of ranks) {
      if (!entering.has(rank)) this.send([rank], new EpochStart({ epoch, ranges: ledger.assigned.get(rank) ?? [] }))
    }
    this.welcomeNewcomers(() => false)
    // A checkpoint taken as the epoch's last sample was done leaves nothing to train: the epoch ends at once.
    if (Ledger.isComplete(ledger)) this.endEpoch()
  }

  private endEpoch(): void {
    const ended = this.epochs.ledger!
    const { lastProgressAt, startedAt, sums } = this.epochs
    this.epochs.ledger = undefined
    const took = this.at - startedAt
    const throughput = new Map(this.epochs.throughput)
    for (const [rank, done] of ended.done) {
      const at = valueOf(lastProgressAt, rank)
      if (at !== undefined && at > startedAt && done > 0) throughput.set(rank, done / ((at - startedAt) / 1000))
    }
    this.epochs.throughput = throughput
    this.progress.samplesBefore += ended.datasetSize
    const { epochs } = this.settings.job
    this.instructions.push(Instruction.Journal({
      event: { event: "epoch_done", at: this.at, epoch: ended.epoch, epochs, seconds: took / 1000, samples: ended.datasetSize, metrics: epochMeans(sums) }
    }))
    this.log(
      "info",
      `epoch ${ended.epoch}/${epochs} done in ${(took / 1000).toFixed(1)} s: ${ended.datasetSize} samples ` +
        `(${[...ended.done].sort(([a], [b]) => a - b).map(([rank, done]) => `r${rank} ${done}`).join(", ")})${summariseMetrics(sums)}`
    )
    this.send(this.live(), new EpochEnd({ epoch: ended.epoch }))
    this.openBallot(ended)
    this.startEpoch(ended.epoch + 1)
  }

  /** Progress of the epoch under way, told at most every PROGRESS_EVERY_MS (its end is told as `epoch_done`). */
  private tellProgress(): void {
    const { ledger } = this.epochs
    if (ledger === undefined) return
    const { at } = this
    const { last } = this.progress
    if (last !== undefined && at - last.at < PROGRESS_EVERY_MS) return
    const done = Ledger.doneCount(ledger)
    const samples = this.progress.samplesBefore + done
    const samplesPerSec = last !== undefined && at > last.at ? ((samples - last.samples) * 1000) / (at - last.at) : null
    this.progress.last = { at, samples }
    this.instructions.push(Instruction.Journal({
      event: {
        event: "progress",
        at,
        epoch: ledger.epoch,
        epochs: this.settings.job.epochs,
        samplesDone: done,
        datasetSize: ledger.datasetSize,
        samplesPerSec,
        metrics: averageMetrics(this.epochs.metrics)
      }
    }))
  }

  // -------------------------------------------------------------------------
  // Small helpers
  // -------------------------------------------------------------------------

  private isAlive(rank: number): boolean {
    return HashSet.has(this.members.alive, rank)
  }

  private heard(rank: number): void {
    this.liveness.lastSeen = HashMap.set(this.liveness.lastSeen, rank, this.at)
  }

  private live(): Array<number> {
    return ascending(this.members.alive)
  }

  // Asked at every Attach: with fewer attached than alive, one is surely missing (no scan).
  private everyLiveAttached(): boolean {
    const { alive, attached } = this.members
    return HashSet.size(attached) >= HashSet.size(alive) && HashSet.every(alive, (rank) => HashSet.has(attached, rank))
  }

  private send(ranks: ReadonlyArray<number>, order: CoordinatorOrder): void {
    this.instructions.push(Instruction.Send({ ranks, order }))
  }

  private log(level: "info" | "warning" | "error", message: string): void {
    this.instructions.push(Instruction.Log({ level, message }))
  }
}

/** `map` without `rank`: the same map when it has no such key. */
const without = <V>(map: ReadonlyMap<number, V>, rank: number): ReadonlyMap<number, V> => {
  if (!map.has(rank)) return map
  const copy = new Map(map)
  copy.delete(rank)
  return copy
}

/** A state's digest: what the vote compares (equal states, equal digests). */
const digestOf = (state: string): string => createHash("sha256").update(state).digest("hex")
