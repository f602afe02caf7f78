/**
 * What goes into the coordinator's policy and what comes out of it: the events the Coordinator actor steps
 * (each with the time it was heard, `at`) and the instructions it carries out, in order.
 */
import * as Data from "effect/Data"
import type { Cause } from "../../../kernel/policy/FailureRules.ts"
import type { CoordinatorOrder, RankReport } from "../../../wire/messages/CoordinatorMessages.ts"
import type { LatencyCounts } from "../../../wire/LatencyBuckets.ts"
import type { Coverage, SaveReason } from "../CheckpointFile.ts"
import type * as Ledger from "../EpochLedger.ts"
import type { RunEvent } from "../../view/RunView.ts"

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
