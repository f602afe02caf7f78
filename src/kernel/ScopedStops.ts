/**
 * Stop signals (see `signals.ts`) listened for as long as a Scope lives, with
 * Effect reactions: the library's `handleSignals`, and test supervisors.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as CallbackFibers from "./CallbackFibers.ts"
import { listenForStops } from "./signals.ts"
import type { StopRequest, StopSignal } from "./StopRequests.ts"

export const onStops = <R>(
  stop: (request: StopRequest) => Effect.Effect<void, never, R>,
  insist: (signal: StopSignal) => Effect.Effect<void, never, R>
): Effect.Effect<void, never, Scope.Scope | R> =>
  Effect.gen(function*() {
    // Signals arrive outside any fiber: each reaction is a fiber of this Scope, side by side (an insisting
    // second signal must not wait behind the first's graceful stop), and a defect in one is reported.
    const callbacks = yield* CallbackFibers.make<R>("stop signals")
    yield* Effect.acquireRelease(
      Effect.sync(() => listenForStops({ stop: (request) => callbacks.fork(stop(request)), insist: (signal) => callbacks.fork(insist(signal)) })),
      (unlisten) => Effect.sync(unlisten)
    )
  })
