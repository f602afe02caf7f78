/**
 * The control channel's messages. Each host's relay dials it once the world
 * has formed and registers the ranks it serves; the link then stays open for
 * the control traffic of later issues (epochs, heartbeats, membership), and
 * its EOF tells the relay the run is over.
 */
import * as Schema from "effect/Schema"

export class RelayHello extends Schema.TaggedClass<RelayHello>()("RelayHello", {
  host: Schema.NonEmptyString,
  ranks: Schema.Array(Schema.Int.pipe(Schema.nonNegative()))
}) {}

export class RelayAccepted extends Schema.TaggedClass<RelayAccepted>()("RelayAccepted", {}) {}

export class RelayRejected extends Schema.TaggedClass<RelayRejected>()("RelayRejected", {
  reason: Schema.String
}) {}

/** In kind order: append only. */
export const ControlMessage = Schema.Union(RelayHello, RelayAccepted, RelayRejected)
export type ControlMessage = typeof ControlMessage.Type
