/**
 * The rendezvous channel (backend `nccl`): how every rank gets the same NCCL
 * unique id. Each rank dials in and joins; for each generation of the
 * membership, the launcher asks one rank (the generator) for a fresh id and
 * hands it, with the members in ascending global order, to every member.
 * When membership changes (a death, a restart), the launcher tells the
 * members to drop their communicator (`Reform`) and a new generation follows.
 */
import * as Schema from "effect/Schema"
import * as Codec from "./Codec.ts"

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

/** Every member builds its communicator: its NCCL rank is its position in `members`. */
export class Ready extends Schema.TaggedClass<Ready>()("Ready", {
  generation: Generation,
  id: UniqueId,
  members: Schema.Array(Rank)
}) {}

/** Membership changed: abort the communicator of `generation`; the next `Ready` brings its successor. */
export class Reform extends Schema.TaggedClass<Reform>()("Reform", { generation: Generation, reason: Schema.String }) {}

/** In kind order: append only. */
export const RendezvousMessage = Schema.Union(Join, ProvideId, IdProvided, IdFailed, Ready, Reform)
export type RendezvousMessage = typeof RendezvousMessage.Type

/** The rendezvous channel's messages on the wire. */
export const rendezvousCodec = Codec.make("rendezvous", RendezvousMessage)
