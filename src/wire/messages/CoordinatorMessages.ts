/**
 * What ranks and the coordinator say to each other. A rank writes these as
 * plain JSON objects to its relay (ranks load no Schema); the relay checks
 * them against these schemas and carries them over the control channel,
 * tagged with the rank (`FromRank`, `ToRanks` in ControlMessages).
 */
import * as Schema from "effect/Schema"
import { ALLREDUCE_BUCKETS_S } from "../LatencyBuckets.ts"

const Count = Schema.Int.pipe(Schema.nonNegative())

export const SampleRange = Schema.Struct({ start: Count, end: Count })
export type SampleRange = typeof SampleRange.Type

// Rank → coordinator.

/**
 * The rank is connected and ready for plans. `groups`: it keeps its own process group's members in step (the
 * Python client, torch.distributed), and is sent `Group` orders; the group's rendezvous goes through the
 * coordinator's store (`StoreCall`), never through a port of the rank's own.
 */
export class Attach extends Schema.TaggedClass<Attach>()("Attach", {
  groups: Schema.optional(Schema.Boolean)
}) {}
export class Heartbeat extends Schema.TaggedClass<Heartbeat>()("Heartbeat", {}) {}
/** The rank's all-reduce calls since its previous report: a count per bucket (LatencyBuckets) and their total seconds. */
export const LatencyCounts = Schema.Struct({
  counts: Schema.Array(Count).pipe(Schema.itemsCount(ALLREDUCE_BUCKETS_S.length + 1)),
  sum: Schema.Number.pipe(Schema.nonNegative())
})
export type LatencyCounts = typeof LatencyCounts.Type

/** Cumulative: `done` samples of this epoch's plan (in plan order) are processed. */
export class Progress extends Schema.TaggedClass<Progress>()("Progress", {
  epoch: Count,
  done: Count,
  /**
   * Shown with the run's progress. Any record is taken, so that one bad name never costs the report its `done`
   * (the epoch would never end): what is shown is bounded apart (wire/ReportedMetrics.ts).
   */
  metrics: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Number })),
  allreduce: Schema.optional(LatencyCounts)
}) {}
/** The consensus state after `epoch`, as StateJson text. */
export class CheckpointSave extends Schema.TaggedClass<CheckpointSave>()("CheckpointSave", {
  epoch: Count,
  state: Schema.String
}) {}
/** The rank is ending on purpose: its silence from now on is not a death. */
export class Exiting extends Schema.TaggedClass<Exiting>()("Exiting", {}) {}

/**
 * The rank's side of a mid-epoch cut (`cpu_sync`), given at a step boundary once asked (`OfferCut`) or stopped:
 * its state now (absent when the job registered no `ctx.checkpoint.provide`), the `done` samples of its plan
 * it has learnt from, how many reductions it took part in this epoch (`rounds`), and whether it took part in
 * every round since the epoch began (`steady`: it never waited for work). It trains no further.
 */
export class CutOffer extends Schema.TaggedClass<CutOffer>()("CutOffer", {
  epoch: Count,
  done: Count,
  rounds: Count,
  steady: Schema.Boolean,
  state: Schema.optional(Schema.String)
}) {}

// The process group's rendezvous (rank → launcher, and its answer): torch.distributed's Store, kept by the launcher.

/** A store key: what torch.distributed and gloo name their rendezvous entries (`cohort/<generation>/…`). */
const StoreKey = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(1_024))
/** A store value, base64 (gloo's addresses, NCCL's unique id, torch's counters): small. */
const StoreValue = Schema.String.pipe(Schema.maxLength(1_400_000))

export const StoreOp = Schema.Literal("set", "get", "add", "compare_set", "wait", "check", "delete_key", "num_keys")
export type StoreOp = typeof StoreOp.Type

/**
 * One call on generation `generation`'s store, numbered `id` by the rank (its answer carries the number). `keys`
 * holds the key (`wait` and `check`: the keys); `value` is `set`'s value and `compare_set`'s desired one,
 * `expected` `compare_set`'s expected one, `amount` `add`'s. `get` and `wait` are answered once their keys exist.
 */
export class StoreCall extends Schema.TaggedClass<StoreCall>()("StoreCall", {
  generation: Schema.Int.pipe(Schema.positive()),
  id: Count,
  op: StoreOp,
  keys: Schema.Array(StoreKey).pipe(Schema.maxItems(256)),
  value: Schema.optional(StoreValue),
  expected: Schema.optional(StoreValue),
  amount: Schema.optional(Schema.Int)
}) {}

/** The rank has formed generation `generation`'s groups: its rendezvous is done. */
export class GroupFormed extends Schema.TaggedClass<GroupFormed>()("GroupFormed", {
  generation: Schema.Int.pipe(Schema.positive())
}) {}

/**
 * The answer to the rank's StoreCall `id`: `value` (get, compare_set), `number` (add, num_keys), `flag`
 * (check, delete_key), nothing (set, wait), or `error`: why the call was refused (the rank is not a member, the
 * generation is over, a bound), which the rank raises to torch.
 */
export class StoreAnswer extends Schema.TaggedClass<StoreAnswer>()("StoreAnswer", {
  id: Count,
  value: Schema.optional(StoreValue),
  number: Schema.optional(Schema.Int),
  flag: Schema.optional(Schema.Boolean),
  error: Schema.optional(Schema.String)
}) {}

export const RankReport = Schema.Union(Attach, Heartbeat, Progress, CheckpointSave, Exiting, CutOffer)
export type RankReport = typeof RankReport.Type

/**
 * What a rank may send up besides its coordinator reports: the process group's rendezvous (GroupRendezvous).
 * The relay carries both kinds (`FromRank`); the launcher hands each to its owner.
 */
export const RelayedReport = Schema.Union(RankReport, StoreCall, GroupFormed)
export type RelayedReport = typeof RelayedReport.Type

/** Is this relayed report the rendezvous store's (not the coordinator's)? */
export const isRendezvousReport = (report: RelayedReport): report is StoreCall | GroupFormed =>
  report._tag === "StoreCall" || report._tag === "GroupFormed"

// Coordinator → rank.

/** The answer to Attach: the resumed checkpoint's state (StateJson), if any, and the first epoch. */
export class Welcome extends Schema.TaggedClass<Welcome>()("Welcome", {
  checkpoint: Schema.optional(Schema.String),
  firstEpoch: Count
}) {}
export class EpochStart extends Schema.TaggedClass<EpochStart>()("EpochStart", {
  epoch: Count,
  ranges: Schema.Array(SampleRange)
}) {}
/** More work for this epoch: a dead rank's remainder. */
export class EpochExtend extends Schema.TaggedClass<EpochExtend>()("EpochExtend", {
  epoch: Count,
  ranges: Schema.Array(SampleRange)
}) {}
/** Every sample of the epoch is processed. */
export class EpochEnd extends Schema.TaggedClass<EpochEnd>()("EpochEnd", { epoch: Count }) {}
/** No epochs are left. */
export class TrainingDone extends Schema.TaggedClass<TrainingDone>()("TrainingDone", {}) {}
export class CheckpointSaved extends Schema.TaggedClass<CheckpointSaved>()("CheckpointSaved", { epoch: Count }) {}
export class CoordinatorBeat extends Schema.TaggedClass<CoordinatorBeat>()("CoordinatorBeat", {}) {}
/** Stop now: the run is ending (the consensus checkpoint is already written when `saved`). */
export class Stop extends Schema.TaggedClass<Stop>()("Stop", { reason: Schema.String, saved: Schema.Boolean }) {}

/** The run is stopping mid-`epoch`: at the next step boundary offer your state and done work (`CutOffer`), then train no further. */
export class OfferCut extends Schema.TaggedClass<OfferCut>()("OfferCut", { epoch: Count }) {}

/**
 * The members of the ranks' process group from now on (ranks that attached with `groups`): `generation` counts
 * up with every change (a death, a rank back from a restart, newcomers entering), and `members` are global ranks
 * ascending (a member's rank in the group is its position). Survivors tear the old group down and form this one
 * in-process, meeting at the launcher's store for this generation (`StoreCall`).
 */
export class Group extends Schema.TaggedClass<Group>()("Group", {
  generation: Schema.Int.pipe(Schema.positive()),
  members: Schema.Array(Count)
}) {}

export const CoordinatorOrder = Schema.Union(
  Welcome,
  EpochStart,
  EpochExtend,
  EpochEnd,
  TrainingDone,
  CheckpointSaved,
  CoordinatorBeat,
  Stop,
  OfferCut,
  Group,
  StoreAnswer
)
export type CoordinatorOrder = typeof CoordinatorOrder.Type
