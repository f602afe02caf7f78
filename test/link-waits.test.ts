/**
 * What a link's owner waits on without a fiber of its own, over real sockets (127.0.0.1, port 0):
 * `receiveWithin` (a message within a deadline, or a handshake error naming what never came; no
 * racing fibers) and `whenEnded` (told once when the link ends, at once if it has; stoppable). The
 * listener reads the magic and accepts as the mux does. Deadlines are literals here, small, and only
 * ever bounds.
 */
import { describe, expect } from "bun:test"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Schema from "effect/Schema"
import { magic } from "../src/wire/Channel.ts"
import * as Codec from "../src/wire/Codec.ts"
import { newSalt } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import { listenForConnections } from "./support/connections.ts"
import { effect, eventually } from "./support/effect.ts"
import { parked } from "./support/fibers.ts"

class Ping extends Schema.TaggedClass<Ping>()("Ping", { n: Schema.Int }) {}
const codec = Codec.make("control", Schema.Union(Ping))

/** A dialer and the listener that read the magic as the mux does, then accepted. */
const pair = Effect.gen(function*() {
  const salt = newSalt()
  const server = yield* listenForConnections
  const dialing = yield* Effect.fork(Link.dial({ host: "127.0.0.1", port: server.port, channel: "control", salt, inbound: codec, outbound: codec }))
  const connection = yield* server.next
  expect(yield* Effect.promise(() => connection.take(magic.control.length, 5_000))).toEqual(magic.control)
  const listener = yield* Link.accept(connection, { channel: "control", keyFor: Link.unnamedKey(salt), inbound: codec, outbound: codec })
  const dialer = yield* Fiber.join(dialing)
  return { dialer, listener }
})

describe("receiveWithin", () => {
  effect.live("a message sent later comes within the deadline; one already waiting comes at once", () =>
    Effect.gen(function*() {
      const { dialer, listener } = yield* pair
      const waiting = yield* Effect.fork(listener.receiveWithin(5_000, "a ping"))
      // Sent once the reader waits, not after a guessed pause: sent earlier, it would be the one already waiting.
      yield* parked(waiting, "the reader waiting for a ping")
      yield* dialer.send(new Ping({ n: 1 }))
      expect(yield* Fiber.join(waiting)).toEqual(new Ping({ n: 1 }))
      yield* dialer.send(new Ping({ n: 2 }))
      yield* eventually(Effect.map(listener.backlog, (backlog) => backlog.messages === 1), "the second ping in the inbox")
      expect(yield* listener.receiveWithin(1, "a ping")).toEqual(new Ping({ n: 2 }))
    }).pipe(Effect.scoped))

  effect.live("nothing within the deadline: a handshake error that says what never came; the link still works", () =>
    Effect.gen(function*() {
      const { dialer, listener } = yield* pair
      const started = performance.now()
      const late = yield* Effect.either(listener.receiveWithin(60, "a Hello"))
      expect(performance.now() - started).toBeGreaterThanOrEqual(55)
      expect(Either.isLeft(late) && late.left.reason === "handshake" && late.left.detail === "no a Hello within 60 ms").toBe(true)
      // The wait left nothing behind: the next message goes to the next reader.
      yield* dialer.send(new Ping({ n: 3 }))
      expect(yield* listener.receiveWithin(5_000, "a ping")).toEqual(new Ping({ n: 3 }))
    }).pipe(Effect.scoped))

  effect.live("the link ending while a reader waits fails the wait with the ending, not the deadline", () =>
    Effect.gen(function*() {
      const { dialer, listener } = yield* pair
      const waiting = yield* Effect.fork(listener.receiveWithin(5_000, "a ping"))
      // Aborted once the reader waits: aborted earlier, the wait would find the link ended and not be woken.
      yield* parked(waiting, "the reader waiting for a ping")
      yield* dialer.abort("gone")
      const ended = yield* Effect.either(Fiber.join(waiting))
      expect(Either.isLeft(ended) && ended.left.reason).toBe("closed")
    }).pipe(Effect.scoped))
})

describe("whenEnded", () => {
  effect.live("told once when the peer goes, with the ending; at once when already ended; a stopped watch is not told", () =>
    Effect.gen(function*() {
      const { dialer, listener } = yield* pair
      const told: Array<string> = []
      listener.whenEnded((ended) => told.push(`first: ${ended.reason}`))
      const stop = listener.whenEnded(() => told.push("stopped"))
      stop()
      // A message in the inbox does not hold the news back.
      yield* dialer.send(new Ping({ n: 4 }))
      yield* dialer.close
      yield* eventually(Effect.sync(() => told.length > 0), "the watch told")
      listener.whenEnded((ended) => told.push(`late: ${ended.reason}`))
      expect(told).toEqual(["first: closed", "late: closed"])
      // The message sent before the close is still there for the owner.
      expect(yield* listener.receive).toEqual(new Ping({ n: 4 }))
    }).pipe(Effect.scoped))
})

describe("Connection.takeNow", () => {
  effect.live("what has arrived and is parked, n bytes at a time, in order; nothing while short or while a receiver reads", () =>
    Effect.gen(function*() {
      const server = yield* listenForConnections
      const client = yield* Effect.promise(() => Bun.connect({ hostname: "127.0.0.1", port: server.port, socket: { data: () => {} } }))
      yield* Effect.addFinalizer(() => Effect.sync(() => client.end()))
      client.write("abcdefghij")
      const connection = yield* server.next
      const text = (bytes: Uint8Array | "closed" | "timeout" | undefined) => (bytes instanceof Uint8Array ? new TextDecoder().decode(bytes) : bytes)
      expect(text(yield* Effect.promise(() => connection.take(4, 5_000)))).toBe("abcd")
      // Sent in one write and read past the four: the rest is parked already.
      expect(text(connection.takeNow(7))).toBeUndefined()
      expect(text(connection.takeNow(6))).toBe("efghij")
      client.write("klmnop")
      let three: Uint8Array | undefined
      yield* eventually(Effect.sync(() => (three = connection.takeNow(3)) !== undefined), "three bytes parked")
      expect(text(three)).toBe("klm")
      expect(connection.takeNow(4)).toBeUndefined()
      expect(text(connection.takeNow(3))).toBe("nop")
      client.write("q")
      const seen: Array<string> = []
      connection.receive({ data: (bytes) => seen.push(new TextDecoder().decode(bytes)), close: () => {} })
      yield* eventually(Effect.sync(() => seen.join("") === "q"), "a receiver gets what follows")
      expect(connection.takeNow(0)).toBeUndefined()
    }).pipe(Effect.scoped))
})
