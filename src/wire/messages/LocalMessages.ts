/**
 * The messages between a rank and its host's relay, one `LocalFrames` frame
 * each (JSON), as `Schema` unions like every other channel's. `t` names the
 * message. docs/protocol.md describes them for a client in another language.
 *
 * The relay decodes what ranks send with these schemas: a rank runs user code
 * and its messages are checked like a peer's. A rank imports only the types
 * (`import type`): loading effect/Schema would cost every rank's start-up
 * ~0.2 s, and what its own relay sends it needs no checking.
 */
import * as Schema from "effect/Schema"

const Count = Schema.Int.pipe(Schema.nonNegative())

/**
 * First, once: which rank this connection speaks for, the protocol version it speaks (LOCAL_PROTOCOL_VERSION),
 * and whether it can take part in the host's board (small all-reduces in shared memory; `LocalBoard`).
 */
export const LocalHello = Schema.Struct({ t: Schema.Literal("hello"), rank: Count, version: Schema.optional(Count), board: Schema.optional(Schema.Boolean) })

/** `sum`/`avg` for allreduce, `sync` for a model sync round, `elastic` for a `cpu_async` exchange. */
export const RelayOp = Schema.Literal("sum", "avg", "sync", "elastic")
export type RelayOp = typeof RelayOp.Type

/**
 * A collective: `bytes` of f32 (already multiplied by `weight`) at `offset` in the shared-memory segment
 * `seg`. `tensor`: the segment is one of the rank's `ctx.tensor`s, and the result is written back there;
 * otherwise it is the rank's staging segment, and the result comes in the relay's result segment.
 */
export const LocalReduce = Schema.Struct({
  t: Schema.Literal("reduce"),
  op: RelayOp,
  bytes: Count.pipe(Schema.multipleOf(4)),
  weight: Schema.Number,
  epoch: Count,
  seg: Schema.String,
  offset: Count.pipe(Schema.multipleOf(4)),
  tensor: Schema.optional(Schema.Boolean)
})

/** The rank waits for work in `epoch`: it leaves the reduction barrier until its next `reduce`. */
export const LocalIdle = Schema.Struct({ t: Schema.Literal("idle"), epoch: Schema.Number })

/** A report for the coordinator (`CoordinatorMessages.RankReport`, encoded); `Heartbeat`s stay with the relay. */
export const LocalReport = Schema.Struct({ t: Schema.Literal("report"), report: Schema.Object })

export const RankToRelay = Schema.Union(LocalHello, LocalReduce, LocalIdle, LocalReport)
export type RankToRelay = typeof RankToRelay.Type

/** A `reduce` finished: `error`, or the result (in `seg`, the relay's result segment, for a staged buffer). */
export const LocalReduced = Schema.Struct({
  t: Schema.Literal("reduced"),
  bytes: Schema.optional(Count),
  seg: Schema.optional(Schema.String),
  error: Schema.optional(Schema.String)
})

/** An order from the coordinator (`CoordinatorMessages.CoordinatorOrder`, encoded). */
export const LocalOrder = Schema.Struct({ t: Schema.Literal("order"), order: Schema.Object })

/** The relay will not serve this connection (a rank it does not know, or one already connected); it closes. */
export const LocalRefused = Schema.Struct({ t: Schema.Literal("refused"), reason: Schema.String })

/**
 * The answer to a hello that asked for the board: the board's segment and this rank's slot on it. Small `sum`
 * and `avg` all-reduces then go through the board while the relay has it on, and through `reduce` otherwise.
 */
export const LocalBoard = Schema.Struct({ t: Schema.Literal("board"), seg: Schema.String, slot: Count })

export const RelayToRank = Schema.Union(LocalReduced, LocalOrder, LocalRefused, LocalBoard)
export type RelayToRank = typeof RelayToRank.Type
