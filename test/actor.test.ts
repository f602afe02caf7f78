import { describe, expect } from "bun:test"
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberStatus from "effect/FiberStatus"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Request from "effect/Request"
import * as Scope from "effect/Scope"
import * as TestClock from "effect/TestClock"
import * as Actor from "../src/kernel/Actor.ts"
import { fromActor } from "../src/kernel/ActorChild.ts"
import { ChildExit } from "../src/kernel/ChildExit.ts"
import { effect, eventually } from "./support/effect.ts"

// ---------------------------------------------------------------------------
// A small vocabulary shared by the tests.

class DivideByZero extends Data.TaggedError("DivideByZero")<{ readonly total: number }> {}

/** Adds `n` to the total and replies with the new total. */
class Add extends Request.TaggedClass("Add")<number, never, { readonly n: number }> {}
/** Replies with the current total. */
class Get extends Request.TaggedClass("Get")<number, never, {}> {}
/** Divides the total; fails with DivideByZero when `by` is 0. */
class Divide extends Request.TaggedClass("Divide")<number, DivideByZero, { readonly by: number }> {}
/** A plain tagged value (not a Request): `ask` replies void. */
type Reset = { readonly _tag: "Reset" }

type Calc = Add | Get | Divide | Reset

const calculator = (name = "calc") =>
  Effect.gen(function*() {
    const total = yield* Ref.make(0)
    const ref = yield* Actor.spawn<Calc, never>({
      name,
      handlers: {
        Add: ({ n }) => Ref.updateAndGet(total, (t) => t + n),
        Get: () => Ref.get(total),
        Divide: ({ by }) =>
          Effect.flatMap(Ref.get(total), (t) =>
            by === 0 ? Effect.fail(new DivideByZero({ total: t })) : Ref.updateAndGet(total, (x) => x / by)),
        Reset: () => Ref.set(total, 0)
      }
    })
    return ref
  })

const stopped = (actor: string) => new Actor.ActorStopped({ actor })

/** Some(exit) once the fiber is done, None while it runs. */
const isDone = <A, E>(fiber: Fiber.Fiber<A, E>) => Effect.map(Fiber.poll(fiber), Option.isSome)

/** Waits until a forked fiber is parked (waiting on a Deferred, the mailbox, ...). */
const suspended = <A, E>(fiber: Fiber.RuntimeFiber<A, E>, what: string) =>
  eventually(Effect.map(Fiber.status(fiber), FiberStatus.isSuspended), what)

/**
 * Whether the fiber finishes within `ms` of real time. Used where a correct
 * actor completes at once and a broken one leaves the fiber hanging forever.
 */
const settlesWithin = <A, E>(fiber: Fiber.Fiber<A, E>, ms = 250) =>
  eventually(isDone(fiber), "fiber settles", ms).pipe(
    Effect.as(true),
    Effect.catchAllDefect(() => Effect.succeed(false))
  )

/** An actor still serving has not exited: `await` has not completed. */
const stillRunning = <M extends Actor.Message>(ref: Actor.ActorRef<M>) =>
  Effect.gen(function*() {
    const waiter = yield* Effect.fork(ref.await)
    yield* Effect.yieldNow()
    const done = yield* isDone(waiter)
    yield* Fiber.interrupt(waiter)
    return !done
  })

// A "workbench" actor: it records what it handles, can be held on a gate,
// can crash, and can acquire resources into its own Scope.

class Record extends Request.TaggedClass("Record")<string, never, { readonly label: string }> {}
/** Signals `started`, then waits for `gate` before replying. */
class Hold extends Request.TaggedClass("Hold")<string, never, { readonly label: string }> {}
/** Signals `started`, waits for `gate`, then dies with `Error(reason)`. */
class Crash extends Request.TaggedClass("Crash")<never, never, { readonly reason: string }> {}
/** Throws inside Effect.sync. */
class Throw extends Request.TaggedClass("Throw")<never, never, { readonly reason: string }> {}
/** Acquires a resource into the actor's Scope and returns. */
class Acquire extends Request.TaggedClass("Acquire")<void, never, { readonly label: string }> {}
/** Signals `started` and never finishes; logs its interruption. */
class Forever extends Request.TaggedClass("Forever")<never, never, {}> {}

type Work = Record | Hold | Crash | Throw | Acquire | Forever

const workbench = (name: string, capacity?: number) =>
  Effect.gen(function*() {
    const log = yield* Ref.make<ReadonlyArray<string>>([])
    const gate = yield* Deferred.make<void>()
    const started = yield* Deferred.make<void>()
    const note = (line: string) => Ref.update(log, (lines) => [...lines, line])
    const ref = yield* Actor.spawn<Work, Scope.Scope>({
      name,
      ...(capacity === undefined ? {} : { capacity }),
      handlers: {
        Record: ({ label }) => Effect.as(note(label), label),
        Hold: ({ label }) =>
          Effect.gen(function*() {
            yield* note(`hold ${label}`)
            yield* Deferred.succeed(started, undefined)
            yield* Deferred.await(gate)
            yield* note(`release ${label}`)
            return label
          }),
        Crash: ({ reason }) =>
          Effect.gen(function*() {
            yield* Deferred.succeed(started, undefined)
            yield* Deferred.await(gate)
            return yield* Effect.die(new Error(reason))
          }),
        Throw: ({ reason }) =>
          Effect.sync((): never => {
            throw new Error(reason)
          }),
        Acquire: ({ label }) =>
          Effect.asVoid(Effect.acquireRelease(note(`acquire ${label}`), () => note(`release ${label}`))),
        Forever: () =>
          Effect.zipRight(Deferred.succeed(started, undefined), Effect.never).pipe(
            Effect.onInterrupt(() => note("handler interrupted"))
          )
      }
    })
    return { ref, log: Ref.get(log), gate: Deferred.succeed(gate, undefined), started: Deferred.await(started) }
  })

// ---------------------------------------------------------------------------

describe("Actor: typed requests", () => {
  effect.it("ask returns each handler's typed reply; a plain tagged message replies void", () =>
    Effect.gen(function*() {
      const ref = yield* calculator()
      expect(yield* ref.ask(new Add({ n: 2 }))).toBe(2)
      expect(yield* ref.ask(new Add({ n: 3 }))).toBe(5)
      expect(yield* ref.ask(new Divide({ by: 5 }))).toBe(1)
      expect(yield* ref.ask(new Get())).toBe(1)
      expect(yield* ref.ask({ _tag: "Reset" })).toBeUndefined()
      expect(yield* ref.ask(new Get())).toBe(0)
    }))

  effect.it("a typed failure goes back to the asker as that error, and the actor keeps serving", () =>
    Effect.gen(function*() {
      const ref = yield* calculator()
      yield* ref.ask(new Add({ n: 10 }))
      const failed = yield* Effect.either(ref.ask(new Divide({ by: 0 })))
      expect(failed).toEqual(Either.left(new DivideByZero({ total: 10 })))
      // The error arrives typed: catchTag sees it by its tag.
      const caught = yield* ref.ask(new Divide({ by: 0 })).pipe(
        Effect.catchTag("DivideByZero", (e) => Effect.succeed(`caught at ${e.total}`))
      )
      expect(caught).toBe("caught at 10")
      expect(yield* Effect.either(ref.ask(new Divide({ by: 2 })))).toEqual(Either.right(5))
      expect(yield* ref.ask(new Add({ n: 1 }))).toBe(6)
      expect(yield* stillRunning(ref)).toBe(true)
    }))

  effect.it("a typed failure after a plain tell does not end the actor", () =>
    Effect.gen(function*() {
      const ref = yield* calculator()
      yield* ref.tell(new Add({ n: 4 }))
      yield* ref.tell(new Divide({ by: 0 }))
      yield* ref.tell(new Add({ n: 1 }))
      expect(yield* Effect.either(ref.ask(new Get()))).toEqual(Either.right(5))
      expect(yield* stillRunning(ref)).toBe(true)
      expect(yield* Effect.either(ref.tell(new Add({ n: 1 })))).toEqual(Either.right(undefined))
      expect(yield* ref.ask(new Get())).toBe(6)
    }))
})

describe("Actor: one message at a time, in mailbox order", () => {
  effect.it("told messages are handled in the order they were sent", () =>
    Effect.gen(function*() {
      const { ref, log } = yield* workbench("order")
      const labels = Array.from({ length: 20 }, (_, i) => `m${i}`)
      yield* Effect.forEach(labels, (label) => ref.tell(new Record({ label })), { discard: true })
      yield* ref.ask(new Record({ label: "last" }))
      expect(yield* log).toEqual([...labels, "last"])
    }))

  effect.it("concurrent asks from several fibers are served strictly one after another", () =>
    Effect.gen(function*() {
      const log = yield* Ref.make<ReadonlyArray<string>>([])
      const counter = yield* Ref.make(0)
      // A slow read-modify-write: were two handlers ever interleaved, both would
      // read the same value and reply the same number.
      const ref = yield* Actor.spawn<Record, never>({
        name: "slow-counter",
        handlers: {
          Record: ({ label }) =>
            Effect.gen(function*() {
              yield* Ref.update(log, (l) => [...l, `start ${label}`])
              const before = yield* Ref.get(counter)
              yield* Effect.sleep("10 millis")
              yield* Ref.set(counter, before + 1)
              yield* Ref.update(log, (l) => [...l, `end ${label}`])
              return `${label}=${before + 1}`
            })
        }
      })
      const labels = ["a", "b", "c", "d", "e"]
      const askers: Array<Fiber.RuntimeFiber<string, Actor.ActorStopped>> = []
      for (const label of labels) askers.push(yield* Effect.fork(ref.ask(new Record({ label }))))
      const all = Fiber.joinAll(askers)

      // Each handler sleeps 10ms of TestClock time: served one by one, the last
      // reply needs 50ms; run concurrently, all would be done after 10ms.
      for (let step = 1; step <= labels.length; step++) {
        expect({ step, done: yield* isDone(askers[askers.length - 1]!) }).toEqual({ step, done: false })
        yield* TestClock.adjust("10 millis")
        yield* eventually(isDone(askers[step - 1]!), `asker ${step} answered`)
      }
      expect(yield* all).toEqual(["a=1", "b=2", "c=3", "d=4", "e=5"])
      expect(yield* Ref.get(log)).toEqual(labels.flatMap((l) => [`start ${l}`, `end ${l}`]))
      expect(yield* Ref.get(counter)).toBe(5)
    }))
})

describe("Actor: bounded mailbox", () => {
  effect.it("a full mailbox makes tell wait for room, and no message is lost", () =>
    Effect.gen(function*() {
      const { ref, log, gate, started } = yield* workbench("bounded", 2)
      // The handler holds the first message; the next two fill the mailbox.
      yield* ref.tell(new Hold({ label: "h" }))
      yield* started
      yield* ref.tell(new Record({ label: "1" }))
      yield* ref.tell(new Record({ label: "2" }))
      const third = yield* Effect.fork(ref.tell(new Record({ label: "3" })))
      yield* suspended(third, "the tell into a full mailbox is parked")
      // Time is no help: only room in the mailbox lets it through.
      yield* TestClock.adjust("1 hour")
      expect(yield* Fiber.poll(third)).toEqual(Option.none())
      expect(yield* log).toEqual(["hold h"])

      yield* gate
      expect(yield* Fiber.join(third)).toBeUndefined()
      expect(yield* ref.ask(new Record({ label: "4" }))).toBe("4")
      expect(yield* log).toEqual(["hold h", "release h", "1", "2", "3", "4"])
    }))
})

describe("Actor: defects end the actor", () => {
  effect.it("the asker of the crashing message gets ActorStopped, later tell/ask fail, await shows the defect", () =>
    Effect.gen(function*() {
      const { ref, gate, started } = yield* workbench("crasher")
      const asker = yield* Effect.fork(ref.ask(new Crash({ reason: "boom" })))
      yield* started
      yield* gate
      expect(yield* Effect.either(Fiber.join(asker))).toEqual(Either.left(stopped("crasher")))

      const exit = yield* ref.await
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isFailure(exit)) {
        expect(Cause.isDie(exit.cause)).toBe(true)
        expect(Cause.isInterrupted(exit.cause)).toBe(false)
        expect(Cause.defects(exit.cause).pipe((d) => [...d])).toEqual([new Error("boom")])
        expect(Option.map(Cause.dieOption(exit.cause), (e) => (e as Error).message)).toEqual(Option.some("boom"))
      }
      expect(yield* Effect.either(ref.tell(new Record({ label: "after" })))).toEqual(Either.left(stopped("crasher")))
      expect(yield* Effect.either(ref.ask(new Record({ label: "after" })))).toEqual(Either.left(stopped("crasher")))
    }))

  effect.it("a throw inside Effect.sync is a defect too", () =>
    Effect.gen(function*() {
      const { ref, log } = yield* workbench("thrower")
      yield* ref.tell(new Record({ label: "before" }))
      expect(yield* Effect.either(ref.ask(new Throw({ reason: "sync threw" })))).toEqual(
        Either.left(stopped("thrower"))
      )
      const exit = yield* ref.await
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      if (Exit.isFailure(exit)) {
        expect([...Cause.defects(exit.cause)].map((e) => (e as Error).message)).toEqual(["sync threw"])
      }
      expect(yield* Effect.either(ref.ask(new Record({ label: "after" })))).toEqual(Either.left(stopped("thrower")))
      expect(yield* log).toEqual(["before"])
    }))

  effect.it("every asker still queued behind the crashing message gets ActorStopped (does not hang)", () =>
    Effect.gen(function*() {
      const { ref, log, gate, started } = yield* workbench("crash-queue")
      const crashing = yield* Effect.fork(ref.ask(new Crash({ reason: "boom" })))
      yield* started
      const queued = [
        yield* Effect.fork(ref.ask(new Record({ label: "q1" }))),
        yield* Effect.fork(ref.ask(new Record({ label: "q2" })))
      ]
      for (const fiber of queued) yield* suspended(fiber, "queued asker waits for its reply")
      yield* gate
      expect(yield* Effect.either(Fiber.join(crashing))).toEqual(Either.left(stopped("crash-queue")))
      yield* ref.await
      expect(yield* Effect.forEach(queued, (f) => settlesWithin(f))).toEqual([true, true])
      expect(yield* Effect.forEach(queued, (f) => Effect.either(Fiber.join(f)))).toEqual([
        Either.left(stopped("crash-queue")),
        Either.left(stopped("crash-queue"))
      ])
      expect(yield* log).toEqual([])
    }))
})

describe("Actor: stop and interrupt", () => {
  effect.it("stop lets queued messages finish, refuses new ones, then ends with a Success exit", () =>
    Effect.gen(function*() {
      const { ref, log, gate, started } = yield* workbench("stopper")
      const held = yield* Effect.fork(ref.ask(new Hold({ label: "h" })))
      yield* started
      yield* ref.tell(new Record({ label: "1" }))
      const queuedAsk = yield* Effect.fork(ref.ask(new Record({ label: "2" })))
      yield* suspended(queuedAsk, "queued asker waits")
      yield* ref.stop
      expect(yield* Effect.either(ref.tell(new Record({ label: "late" })))).toEqual(Either.left(stopped("stopper")))
      expect(yield* Effect.either(ref.ask(new Record({ label: "late" })))).toEqual(Either.left(stopped("stopper")))
      expect(yield* stillRunning(ref)).toBe(true)

      yield* gate
      expect(yield* Fiber.join(held)).toBe("h")
      expect(yield* Fiber.join(queuedAsk)).toBe("2")
      expect(yield* ref.await).toEqual(Exit.void)
      expect(yield* log).toEqual(["hold h", "release h", "1", "2"])
    }))

  effect.it("stop on an idle actor ends it with a Success exit", () =>
    Effect.gen(function*() {
      const ref = yield* calculator("idle")
      yield* ref.stop
      expect(yield* ref.await).toEqual(Exit.void)
      expect(yield* Effect.either(ref.ask(new Get()))).toEqual(Either.left(stopped("idle")))
    }))

  effect.it("interrupt ends the actor at once: the message in hand's asker gets ActorStopped, nothing queued runs", () =>
    Effect.gen(function*() {
      const { ref, log, started } = yield* workbench("interrupted")
      const held = yield* Effect.fork(ref.ask(new Hold({ label: "h" })))
      yield* started
      yield* ref.tell(new Record({ label: "queued" }))
      yield* ref.interrupt
      const exit = yield* ref.await
      expect(Exit.isInterrupted(exit)).toBe(true)
      if (Exit.isFailure(exit)) expect(Cause.isInterruptedOnly(exit.cause)).toBe(true)
      expect(yield* Effect.either(Fiber.join(held))).toEqual(Either.left(stopped("interrupted")))
      expect(yield* Effect.either(ref.tell(new Record({ label: "late" })))).toEqual(Either.left(stopped("interrupted")))
      expect(yield* log).toEqual(["hold h"])
    }))

  effect.it("interrupt fails askers still queued in the mailbox with ActorStopped (does not hang)", () =>
    Effect.gen(function*() {
      const { ref, log, started } = yield* workbench("interrupt-queue")
      const held = yield* Effect.fork(ref.ask(new Hold({ label: "h" })))
      yield* started
      const queued = yield* Effect.fork(ref.ask(new Record({ label: "queued" })))
      yield* suspended(queued, "queued asker waits")
      yield* ref.interrupt
      expect(yield* Effect.either(Fiber.join(held))).toEqual(Either.left(stopped("interrupt-queue")))
      expect({ queuedAskerAnswered: yield* settlesWithin(queued) }).toEqual({ queuedAskerAnswered: true })
      expect(yield* Effect.either(Fiber.join(queued))).toEqual(Either.left(stopped("interrupt-queue")))
      expect(yield* log).toEqual(["hold h"])
    }))

  effect.it("an ask parked on a full mailbox gets ActorStopped when the actor is interrupted", () =>
    Effect.gen(function*() {
      const { ref, log, started } = yield* workbench("parked", 1)
      yield* ref.tell(new Hold({ label: "h" }))
      yield* started
      yield* ref.tell(new Record({ label: "fills" }))
      const parked = yield* Effect.fork(ref.ask(new Record({ label: "parked" })))
      yield* suspended(parked, "ask parked on a full mailbox")
      yield* ref.interrupt
      expect({ parkedAskerAnswered: yield* settlesWithin(parked) }).toEqual({ parkedAskerAnswered: true })
      expect(yield* Effect.either(Fiber.join(parked))).toEqual(Either.left(stopped("parked")))
      expect(yield* log).toEqual(["hold h"])
    }))
})

describe("Actor: scope and resources", () => {
  effect.it("what a handler acquires outlives the handler and is released after the actor's fiber, when the scope closes", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const { ref, log, started } = yield* Scope.extend(workbench("resources"), scope)
      yield* ref.ask(new Acquire({ label: "a" }))
      yield* ref.ask(new Acquire({ label: "b" }))
      // The handlers have returned; nothing is released.
      expect(yield* log).toEqual(["acquire a", "acquire b"])
      expect(yield* ref.ask(new Record({ label: "still serving" }))).toBe("still serving")

      yield* ref.tell(new Forever())
      yield* started
      expect(yield* log).toEqual(["acquire a", "acquire b", "still serving"])
      yield* Scope.close(scope, Exit.void)
      // The fiber is interrupted first, then the actor's Scope releases in reverse order.
      expect(yield* log).toEqual([
        "acquire a",
        "acquire b",
        "still serving",
        "handler interrupted",
        "release b",
        "release a"
      ])
      expect(Exit.isInterrupted(yield* ref.await)).toBe(true)
    }))

  effect.it("closing the Scope fails askers still queued in the mailbox with ActorStopped (does not hang)", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const { ref, log, started } = yield* Scope.extend(workbench("scope-queue"), scope)
      const held = yield* Effect.fork(ref.ask(new Hold({ label: "h" })))
      yield* started
      const queued = yield* Effect.fork(ref.ask(new Record({ label: "queued" })))
      yield* suspended(queued, "queued asker waits")
      yield* Scope.close(scope, Exit.void)
      expect(yield* Effect.either(Fiber.join(held))).toEqual(Either.left(stopped("scope-queue")))
      expect({ queuedAskerAnswered: yield* settlesWithin(queued) }).toEqual({ queuedAskerAnswered: true })
      expect(yield* Effect.either(Fiber.join(queued))).toEqual(Either.left(stopped("scope-queue")))
      expect(yield* log).toEqual(["hold h"])
    }))

  effect.it("closing the Scope the actor was spawned in stops the actor", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const ref = yield* Scope.extend(calculator("scoped"), scope)
      expect(yield* ref.ask(new Add({ n: 1 }))).toBe(1)
      yield* Scope.close(scope, Exit.void)
      const exit = yield* ref.await
      expect(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)).toBe(true)
      expect(yield* Effect.either(ref.tell(new Add({ n: 1 })))).toEqual(Either.left(stopped("scoped")))
      expect(yield* Effect.either(ref.ask(new Get()))).toEqual(Either.left(stopped("scoped")))
    }))
})

describe("ActorChild.fromActor", () => {
  effect.it("exited: a stopped actor exited with code 0", () =>
    Effect.gen(function*() {
      const ref = yield* calculator("child-ok")
      const child = fromActor(ref)
      expect(child.describe).toBe("actor child-ok")
      yield* ref.stop
      expect(yield* child.exited).toEqual(ChildExit.Exited({ code: 0 }))
    }))

  effect.it("exited: a defect is a crash whose detail carries the defect's message", () =>
    Effect.gen(function*() {
      const { ref, gate, started } = yield* workbench("child-crash")
      const child = fromActor(ref)
      yield* ref.tell(new Crash({ reason: "disk on fire" }))
      yield* started
      yield* gate
      const exit = yield* child.exited
      expect(exit._tag).toBe("Crashed")
      if (exit._tag === "Crashed") expect(exit.detail).toContain("disk on fire")
    }))

  effect.it("exited: an interrupted actor was signaled with \"interrupt\"", () =>
    Effect.gen(function*() {
      const ref = yield* calculator("child-int")
      const child = fromActor(ref)
      yield* ref.interrupt
      expect(yield* child.exited).toEqual(ChildExit.Signaled({ signal: "interrupt" }))
    }))

  effect.it("stop(graceful) interrupts a handler that never finishes once the grace has passed", () =>
    Effect.gen(function*() {
      const { ref, log, started } = yield* workbench("child-graceful")
      const child = fromActor(ref)
      yield* ref.tell(new Forever())
      yield* started
      const stopping = yield* Effect.fork(child.stop("graceful", "5 seconds"))
      yield* suspended(stopping, "stop waits for the actor")
      // Graceful first: the mailbox is closed, the handler left alone.
      expect(yield* Effect.either(ref.tell(new Record({ label: "late" })))).toEqual(
        Either.left(stopped("child-graceful"))
      )
      yield* TestClock.adjust("4 seconds")
      expect(yield* Fiber.poll(stopping)).toEqual(Option.none())
      expect(yield* stillRunning(ref)).toBe(true)
      expect(yield* log).toEqual([])

      yield* TestClock.adjust("1 second")
      yield* Fiber.join(stopping)
      expect(yield* log).toEqual(["handler interrupted"])
      expect(yield* child.exited).toEqual(ChildExit.Signaled({ signal: "interrupt" }))
    }))

  effect.it("stop(graceful) on an actor with nothing in hand ends cleanly without waiting the grace", () =>
    Effect.gen(function*() {
      const ref = yield* calculator("child-idle")
      const child = fromActor(ref)
      yield* ref.tell(new Add({ n: 1 }))
      yield* child.stop("graceful", "1 hour")
      expect(yield* child.exited).toEqual(ChildExit.Exited({ code: 0 }))
    }))

  effect.it("stop(kill) interrupts at once, without waiting the grace", () =>
    Effect.gen(function*() {
      const { ref, log, started } = yield* workbench("child-kill")
      const child = fromActor(ref)
      yield* ref.tell(new Forever())
      yield* started
      // No clock adjustment: kill must not wait for the grace.
      yield* child.stop("kill", "1 hour")
      expect(yield* log).toEqual(["handler interrupted"])
      expect(yield* child.exited).toEqual(ChildExit.Signaled({ signal: "interrupt" }))
    }))
})
