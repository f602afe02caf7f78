/**
 * The restart strategy and its backoff, in a module of their own: a failure rule's `restart` action
 * is this same strategy (`FailureRules`), and the strategies' union (`Strategy`) holds both.
 *
 * Durations are whole milliseconds: the pure policy never touches `Duration`
 * objects, only numbers it can compare and add.
 */
import * as Schema from "effect/Schema"
import { MAX_DURATION_MS } from "../../config/reading/Duration.ts"

/** A non-negative whole number of milliseconds, at most a week (what a cluster file may write). */
export const Millis = Schema.Int.pipe(Schema.between(0, MAX_DURATION_MS))
export type Millis = typeof Millis.Type

/** Delay before the n-th restart: `min(max, initial × factor^n)`, then ± `jitter` of itself, never above `max`. */
export class Backoff extends Schema.Class<Backoff>("Backoff")(
  Schema.Struct({
    initial: Millis,
    max: Millis,
    factor: Schema.Number.pipe(Schema.between(1, 100)),
    jitter: Schema.Number.pipe(Schema.between(0, 1))
  }).pipe(Schema.filter((backoff) => backoff.max >= backoff.initial || "backoff max must be ≥ initial"))
) {}

/**
 * Restart the failed child (`scope: "one"`) or the whole group (`"all"`) after
 * the backoff. More than `maxRestarts` restarts inside any sliding `within`
 * window escalates: the run fails, naming the child and the count.
 *
 * The window is (now − within, now]: a restart exactly `within` ago has left
 * it. (OTP's supervisor still counts that one; the difference is one
 * millisecond, and an open edge lets `within: 1s, max_restarts: 1` restart a
 * child that crashes once a second for ever.) The backoff's attempt number is
 * the child's own restarts in the window under `scope: "one"`, the group's
 * under `"all"`.
 */
export class Restart extends Schema.TaggedClass<Restart>()("Restart", {
  maxRestarts: Schema.Int.pipe(Schema.between(0, 1_000)),
  within: Millis.pipe(Schema.greaterThan(0)),
  backoff: Backoff,
  scope: Schema.Literal("one", "all")
}) {}

