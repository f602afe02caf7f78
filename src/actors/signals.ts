/**
 * Process signals as events, for the lifetime of a Scope.
 *
 * The launcher turns SIGTERM, SIGINT and SIGHUP into an orderly stop of its
 * supervision tree instead of dying with children still running; a second
 * signal of the same kind while stopping is the operator insisting, and is
 * passed to `onRepeat`.
 */
import * as Effect from "effect/Effect"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"

export const onSignals = <R>(
  signals: ReadonlyArray<NodeJS.Signals>,
  onFirst: (signal: NodeJS.Signals) => Effect.Effect<void, never, R>,
  onRepeat: (signal: NodeJS.Signals) => Effect.Effect<void, never, R> = () => Effect.void
): Effect.Effect<void, never, Scope.Scope | R> =>
  Effect.gen(function*() {
    const runFork = Runtime.runFork(yield* Effect.runtime<R>())
    let seen = false
    const listener = (signal: NodeJS.Signals) => {
      runFork(seen ? onRepeat(signal) : onFirst(signal))
      seen = true
    }
    yield* Effect.acquireRelease(
      Effect.sync(() => signals.forEach((signal) => process.on(signal, listener))),
      () => Effect.sync(() => signals.forEach((signal) => process.off(signal, listener)))
    )
  })
