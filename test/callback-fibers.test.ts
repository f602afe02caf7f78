/**
 * Fibers started from callbacks belong to their owner's scope: a defect in
 * one is reported as the owner's failure (once, to ActorFailures), a typed
 * failure stays with the callback and hides no later defect, a promise
 * rejects with its error, and closing the scope interrupts what still runs.
 */
import { describe, expect } from "bun:test"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { ActorFailures, describeDefect } from "../src/kernel/Actor.ts"
import * as CallbackFibers from "../src/kernel/CallbackFibers.ts"
import { effect, eventually } from "./support/effect.ts"

/** Callback fibers for `owner` in a scope of their own, with the failures they report. */
const owned = (owner: string) =>
  Effect.gen(function*() {
    const reported: Array<{ actor: string; defect: string }> = []
    const scope = yield* Scope.make()
    const callbacks = yield* CallbackFibers.make(owner).pipe(
      Scope.extend(scope),
      Effect.provideService(ActorFailures, { report: (actor, cause) => Effect.sync(() => reported.push({ actor, defect: describeDefect(cause) })) })
    )
    return { callbacks, reported, close: Scope.close(scope, Exit.void) }
  })

describe("CallbackFibers", () => {
  effect.live("a defect in a callback is the owner's failure, reported with its name", () =>
    Effect.gen(function*() {
      const { callbacks, reported } = yield* owned("port mux")
      callbacks.fork(Effect.dieMessage("boom"))
      yield* eventually(Effect.sync(() => reported.length === 1), "the defect reported")
      expect(reported).toEqual([{ actor: "port mux", defect: "boom" }])
    }))

  effect.live("a typed failure stays with its callback, and a defect after it is still seen", () =>
    Effect.gen(function*() {
      const { callbacks, reported } = yield* owned("agent")
      callbacks.fork(Effect.fail("the peer went away"))
      const rejected = yield* Effect.promise(() => callbacks.promise(Effect.fail("no metrics")).then(() => "resolved", (error) => `rejected: ${String(error)}`))
      expect(rejected).toBe("rejected: no metrics")
      expect(yield* Effect.promise(() => callbacks.promise(Effect.succeed(42)))).toBe(42)
      expect(reported).toEqual([])
      callbacks.fork(Effect.die(new Error("later")))
      yield* eventually(Effect.sync(() => reported.length === 1), "the later defect reported")
      expect(reported).toEqual([{ actor: "agent", defect: "later" }])
    }))

  effect.live("closing the owner's scope interrupts what its callbacks still run, and reports nothing", () =>
    Effect.gen(function*() {
      const { callbacks, close, reported } = yield* owned("status board")
      let interrupted = false
      callbacks.fork(Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => (interrupted = true)))))
      yield* Effect.yieldNow()
      yield* close
      expect(interrupted).toBe(true)
      expect(reported).toEqual([])
    }))
})
