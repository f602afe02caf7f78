/**
 * The join channel's messages. The join connection stays open after
 * admission as the host's control link: `WorldFormed` and `Abort` go down it,
 * `RankExited` comes up it, and its EOF means the host is gone.
 */
import * as Schema from "effect/Schema"

/** An agent asks to join: who it is and what it brings. */
export class Hello extends Schema.TaggedClass<Hello>()("Hello", {
  host: Schema.NonEmptyString,
  /** Device indices on that host (GPU ordinals, or CPU slots). */
  devices: Schema.Array(Schema.Int.pipe(Schema.nonNegative())),
  deviceLabels: Schema.Array(Schema.String),
  /** The agent's process id on its host, for status and cleanup. */
  pid: Schema.Int,
  /** cohort's version on the agent: skew is refused. */
  version: Schema.String
}) {}

/** Admitted: these global ranks are the host's. */
export class Accept extends Schema.TaggedClass<Accept>()("Accept", {
  ranks: Schema.Array(Schema.Int.pipe(Schema.nonNegative())),
  /** Only under open admission: the run's salt, 32 hex digits. */
  saltHex: Schema.optional(Schema.String),
  /** How long the agent should wait for the world to form. */
  formationWaitMs: Schema.Int.pipe(Schema.nonNegative())
}) {}

export class Reject extends Schema.TaggedClass<Reject>()("Reject", {
  reason: Schema.String
}) {}

export class WorldFormed extends Schema.TaggedClass<WorldFormed>()("WorldFormed", {
  worldSize: Schema.Int.pipe(Schema.positive()),
  hosts: Schema.Array(Schema.Struct({ host: Schema.String, ranks: Schema.Array(Schema.Int) }))
}) {}

export class RankExited extends Schema.TaggedClass<RankExited>()("RankExited", {
  rank: Schema.Int.pipe(Schema.nonNegative()),
  code: Schema.NullOr(Schema.Int),
  signal: Schema.NullOr(Schema.String)
}) {}

export class Abort extends Schema.TaggedClass<Abort>()("Abort", {
  reason: Schema.String
}) {}

/** In kind order: a message's kind byte is its index here, so never reorder, only append. */
export const JoinMessage = Schema.Union(Hello, Accept, Reject, WorldFormed, RankExited, Abort)
export type JoinMessage = typeof JoinMessage.Type
