/**
 * A small adapter that runs Effect programs as `bun:test` tests.
 *
 * `effect.it` provides `TestContext` (TestClock, TestRandom) and a Scope;
 * `effect.live` keeps the real clock for tests of real processes and sockets.
 * Both silence the logger unless COHORT_TEST_LOGS is set, so a failing test
 * prints its assertion, not the supervisor's chatter.
 */
import { test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import type * as Scope from "effect/Scope"
import * as TestContext from "effect/TestContext"

type Body<A, E> = () => Effect.Effect<A, E, Scope.Scope>

const logging = process.env.COHORT_TEST_LOGS ? Logger.pretty : Logger.minimumLogLevel(LogLevel.None)

const run = <A, E>(body: Body<A, E>, withTestContext: boolean): Promise<A> => {
  const scoped = Effect.scoped(Effect.suspend(body)).pipe(Effect.provide(logging))
  return Effect.runPromise(withTestContext ? Effect.provide(scoped, TestContext.TestContext) : scoped)
}

export const effect = {
  /** With TestClock: time moves only through `TestClock.adjust`. */
  it: <A, E>(name: string, body: Body<A, E>, timeout?: number) =>
    test(name, () => run(body, true).then(() => undefined), timeout),
  /** With the real clock. */
  live: <A, E>(name: string, body: Body<A, E>, timeout?: number) =>
    test(name, () => run(body, false).then(() => undefined), timeout)
}

/** Poll a condition until it holds (tests wait for conditions, never for a fixed time). */
export const eventually = <E, R>(
  check: Effect.Effect<boolean, E, R>,
  what: string,
  timeoutMs = 4_000
): Effect.Effect<void, E, R> =>
  Effect.gen(function*() {
    const deadline = performance.now() + timeoutMs
    while (!(yield* check)) {
      if (performance.now() > deadline) return yield* Effect.dieMessage(`timed out waiting for: ${what}`)
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
    }
  })
