/**
 * The coordinator's state: what the run fixed before the first event (`CoordinatorSettings`), and one slice
 * per concern, each owned by one sub-reducer in this folder (step.ts says how they share a step).
 *
 * Sets and maps of ranks that change with every beat, attach or report are persistent (`HashSet`, `HashMap`):
 * a relay's beats cost what they touch, not a copy of 8,000 ranks. Those whose order is part of the behaviour
 * (who is welcomed first, the order metrics are averaged in) are insertion-ordered `Map`s, copied when they
 * change, like the EpochLedger's.
 */
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import type { Job } from "../../../config/ClusterConfig.ts"
import type { CutOffer } from "../../../wire/messages/CoordinatorMessages.ts"
import type * as Ballots from "../CheckpointBallot.ts"
import type { Coverage, SaveReason } from "../CheckpointFile.ts"
import type * as Ledger from "../EpochLedger.ts"
import * as Groups from "../ProcessGroups.ts"

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
export const firstEpochOf = (settings: CoordinatorSettings): number => settings.resume?.coverage?.epoch ?? (settings.resume?.epoch ?? 0) + 1

/**
 * Whether the job's ranks attach only if their script says so: a `command:` job with a plan (the Python client's
 * cohort.init()). An `entry:` rank attaches by itself before the user's code runs; one that never does is silent.
 */
export const scriptMustAttach = (settings: CoordinatorSettings): boolean =>
  settings.job.program?._tag === "Command" && settings.job.datasetSize > 0
