/**
 * The rendezvous channel (backend `nccl`): how every rank gets the same NCCL
 * unique id. Each rank dials in and joins; for each generation of the
 * membership, the launcher asks one rank (the generator) for a fresh id and
 * hands it, with the members in ascending global order, to every member.
 * When membership changes (a death, a restart), the launcher tells the
 * members to drop their communicator (`Reform`) and a new generation follows.
 * When the new generation is the old one less the dead, `Ready` says so
 * (`shrinkOf`), and the survivors may shrink the old communicator instead.
 */
import * as Schema from "effect/Schema"
import * as Codec from "../Codec.ts"

const Rank = Schema.Int.pipe(Schema.nonNegative())
const Generation = Schema.Int.pipe(Schema.nonNegative())
/** ncclUniqueId: 128 opaque bytes. */
const UniqueId = Schema.Uint8ArrayFromSelf.pipe(Schema.filter((id) => id.length === 128 || "a unique id has 128 bytes"))

/** A rank asks for a communicator. */
export class Join extends Schema.TaggedClass<Join>()("Join", { rank: Rank, incarnation: Schema.Int.pipe(Schema.nonNegative()) }) {}

/** The launcher asks the generator rank for a fresh id. */
export class ProvideId extends Schema.TaggedClass<ProvideId>()("ProvideId", { generation: Generation }) {}

export class IdProvided extends Schema.TaggedClass<IdProvided>()("IdProvided", { generation: Generation, id: UniqueId }) {}

/** The generator could not make an id (NCCL missing, …): the run cannot form. */
export class IdFailed extends Schema.TaggedClass<IdFailed>()("IdFailed", { generation: Generation, reason: Schema.String }) {}

/**
 * A generation that is an earlier one less the members that left, each survivor the same process as
 * then: its members may shrink that generation's communicator (ncclCommShrink) instead of building
 * one from `id`. `left` are global ranks, ascending.
 */
export const ShrinkOf = Schema.Struct({ generation: Generation, left: Schema.Array(Rank).pipe(Schema.minItems(1)) })
export type ShrinkOf = typeof ShrinkOf.Type

/**
 * Every member builds its communicator: its NCCL rank is its position in `members`. With `shrinkOf`, a
 * member may shrink that generation's communicator instead; `id` is always there, for a member that
 * cannot shrink (no parent communicator, an NCCL before 2.27, a shrink that failed).
 */
export class Ready extends Schema.TaggedClass<Ready>()("Ready", {
  generation: Generation,
  id: UniqueId,
  members: Schema.Array(Rank),
  shrinkOf: Schema.optional(ShrinkOf)
}) {}

/** Membership changed: abort the communicator of `generation`; the next `Ready` brings its successor. */
export class Reform extends Schema.TaggedClass<Reform>()("Reform", { generation: Generation, reason: Schema.String }) {}

/** In kind order: append only. */
export const RendezvousMessage = Schema.Union(Join, ProvideId, IdProvided, IdFailed, Ready, Reform)
export type RendezvousMessage = typeof RendezvousMessage.Type

/** The rendezvous channel's messages on the wire. */
export const rendezvousCodec = Codec.make("rendezvous", RendezvousMessage)
