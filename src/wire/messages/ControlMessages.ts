/**
 * The control channel's messages. Each host's relay dials it once the world
 * has formed and registers the ranks it serves. The link then carries the
 * ranks' reports to the coordinator and its orders back (tagged by rank),
 * and the host's folded tensors to the controller and their average back.
 * Its EOF tells the relay the run is over.
 */
import * as Schema from "effect/Schema"
import { CoordinatorOrder, RelayedReport } from "./CoordinatorMessages.ts"
import * as Codec from "../Codec.ts"

const Count = Schema.Int.pipe(Schema.nonNegative())

export class RelayHello extends Schema.TaggedClass<RelayHello>()("RelayHello", {
  host: Schema.NonEmptyString,
  ranks: Schema.Array(Count)
}) {}

export class RelayAccepted extends Schema.TaggedClass<RelayAccepted>()("RelayAccepted", {}) {}

export class RelayRejected extends Schema.TaggedClass<RelayRejected>()("RelayRejected", {
  reason: Schema.String
}) {}

/** A rank's report, for the coordinator, or its process group's rendezvous (the launcher routes each). */
export class FromRank extends Schema.TaggedClass<FromRank>()("FromRank", {
  rank: Count,
  report: RelayedReport
}) {}

export class ToRanks extends Schema.TaggedClass<ToRanks>()("ToRanks", {
  ranks: Schema.Array(Count),
  order: CoordinatorOrder
}) {}

/** `sync` is a `ctx.sync` round: averaged, then through the controller's model root (outer optimizer). */
export const ReduceOp = Schema.Literal("sum", "avg", "sync")

/**
 * A host's contribution to one reduction round: the sum of its active ranks'
 * (weighted) tensors, their summed weight and how many ranks contributed.
 * `data` is little-endian f32.
 */
export class HostFold extends Schema.TaggedClass<HostFold>()("HostFold", {
  op: ReduceOp,
  weight: Schema.Number,
  ranks: Count,
  /** The epoch the round belongs to: a host that joined at epoch E takes part in rounds of E on. */
  epoch: Count,
  data: Schema.Uint8ArrayFromSelf
}) {}

/**
 * Every live rank of the host is waiting for work: leave the controller's
 * round until the next HostFold. `afterEpoch` is the last epoch end the relay
 * had passed on: a HostIdle from before an epoch's end is stale and ignored.
 */
export class HostIdle extends Schema.TaggedClass<HostIdle>()("HostIdle", { afterEpoch: Count }) {}

/** The round's result for every host, or why the round failed. */
export class Reduced extends Schema.TaggedClass<Reduced>()("Reduced", {
  data: Schema.Uint8ArrayFromSelf,
  failure: Schema.optional(Schema.String)
}) {}

/** A rank's `cpu_async` exchange with the controller's centre variable: no barrier, no round. */
export class ElasticPush extends Schema.TaggedClass<ElasticPush>()("ElasticPush", {
  rank: Count,
  data: Schema.Uint8ArrayFromSelf
}) {}

/** The rank's new parameters after its exchange, or why there are none. */
export class ElasticPulled extends Schema.TaggedClass<ElasticPulled>()("ElasticPulled", {
  rank: Count,
  data: Schema.Uint8ArrayFromSelf,
  failure: Schema.optional(Schema.String)
}) {}

/** The launcher is alive: sent down a relay link that has carried nothing else for about a second. */
export class LauncherBeat extends Schema.TaggedClass<LauncherBeat>()("LauncherBeat", {}) {}

/**
 * The host's ranks that are beating: every beat interval (`beatEveryMs`), every rank of the host heard from
 * lately, in one frame instead of one `FromRank` `Heartbeat` per rank per second.
 */
export class HostBeats extends Schema.TaggedClass<HostBeats>()("HostBeats", {
  ranks: Schema.Array(Count)
}) {}

/**
 * The world grew: `ranks` take part in reduction rounds of epoch `fromEpoch`
 * on. A relay that finished its rounds alone (the only host) sends those
 * rounds up from then, and a relay holding one of `ranks` (a restarted rank
 * under its new number) waits for it in its rounds from then.
 */
export class WorldGrown extends Schema.TaggedClass<WorldGrown>()("WorldGrown", {
  worldSize: Count,
  fromEpoch: Count,
  ranks: Schema.Array(Count)
}) {}

/** In kind order: append only. */
export const ControlMessage = Schema.Union(
  RelayHello,
  RelayAccepted,
  RelayRejected,
  FromRank,
  ToRanks,
  HostFold,
  HostIdle,
  Reduced,
  ElasticPush,
  ElasticPulled,
  LauncherBeat,
  HostBeats,
  WorldGrown
)
export type ControlMessage = typeof ControlMessage.Type

/** The control channel's messages on the wire. */
export const controlCodec = Codec.make("control", ControlMessage)
