/**
 * Stop signals (see `signals.ts`) listened for as long as a Scope lives, with
 * Effect reactions: the library's `handleSignals`, and test supervisors.
 */
import * as Effect from "effect/Effect"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import { listenForStops } from "./signals.ts"
import type { StopRequest, StopSignal } from "./StopRequests.ts"

export const onStops = <R>(
  stop: (request: StopRequest) => Effect.Effect<void, never, R>,
  insist: (signal: StopSignal) => Effect.Effect<void, never, R>
): Effect.Effect<void, never, Scope.Scope | R> =>
  Effect.gen(function*() {
    // Signals arrive outside any fiber: each reaction runs on this Scope's runtime.
    const runFork = Runtime.runFork(yield* Effect.runtime<R>())
    yield* Effect.acquireRelease(
      Effect.sync(() => listenForStops({ stop: (request) => runFork(stop(request)), insist: (signal) => runFork(insist(signal)) })),
      (unlisten) => Effect.sync(unlisten)
    )
  })
