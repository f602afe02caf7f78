/**
 * Fibers started from outside Effect (socket, IPC and signal callbacks), with
 * an owner. They run in the caller's scope, in a `FiberSet` that is
 * interrupted with it, so none outlives its owner. The first one to die of a
 * defect is reported as the owner's failure (to `ActorFailures` where the run
 * has it, the run's root cause then; as an error line otherwise), never lost.
 * This is @effect/platform's socket-server pattern: a runtime captured in
 * the owner's scope instead of `Runtime.runFork` on a bare runtime.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberSet from "effect/FiberSet"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { ActorFailures, describeDefect } from "./Actor.ts"

export interface CallbackFibers<R> {
  /** Start `effect` from a callback; it belongs to the owner's scope. */
  readonly fork: <A, E>(effect: Effect.Effect<A, E, R>) => void
  /** The same, for a callback that needs the result as a Promise (an HTTP handler). */
  readonly promise: <A, E>(effect: Effect.Effect<A, E, R>) => Promise<A>
}

export const make = <R = never>(owner: string): Effect.Effect<CallbackFibers<R>, never, Scope.Scope | R> =>
  Effect.gen(function*() {
    const fibers = yield* FiberSet.make<unknown, unknown>()
    const failures = yield* Effect.serviceOption(ActorFailures)
    yield* Effect.forkScoped(FiberSet.join(fibers).pipe(
      Effect.catchAllCause((cause) => {
        // Only defects are the owner's failure: a callback's own errors are its business, and interruption is the scope closing.
        if (!Cause.isDie(cause)) return Effect.void
        return Option.isSome(failures) ? failures.value.report(owner, cause) : Effect.logError(`the ${owner} failed: ${describeDefect(cause)}`)
      })
    ))
    const run = yield* FiberSet.runtime(fibers)<R>()
    const runPromise = yield* FiberSet.runtimePromise(fibers)<R>()
    // A callback's typed failure stays with the callback (it is ignored, or rejects the promise): in the set it
    // would complete the set's join, and a later defect would go unseen.
    return {
      fork: (effect) => void run(Effect.ignore(effect)),
      promise: <A, E>(effect: Effect.Effect<A, E, R>): Promise<A> =>
        (runPromise(Effect.either(effect)) as Promise<Either.Either<A, E>>).then((result) =>
          Either.isRight(result) ? result.right : Promise.reject(result.left)
        )
    }
  })
