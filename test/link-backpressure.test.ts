/**
 * Bounded link inboxes with back-pressure, over real sockets (127.0.0.1, port 0): a peer that sends
 * faster than the owner reads fills the inbox up to its bound, then the link stops reading and TCP
 * holds the peer back; once the owner reads, everything arrives, in order. Endings still reach every
 * reader with the inbox full, a key switch still happens at its frame, and a connection parked before
 * its owner takes it stops reading the same way.
 *
 * Bounds are literals here, never read back from the code. Tests wait for conditions (a state reached,
 * or a count that has stopped moving: `settles`), never for a fixed time.
 */
import { describe, expect } from "bun:test"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { magic } from "../src/wire/Channel.ts"
import * as Codec from "../src/wire/Codec.ts"
import { newSalt, saltFromHex, saltToHex } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import * as WireCounters from "../src/wire/WireCounters.ts"
import { listenForConnections } from "./support/connections.ts"
import { effect, eventually } from "./support/effect.ts"

class Numbered extends Schema.TaggedClass<Numbered>()("Numbered", { index: Schema.Int, padding: Schema.Uint8ArrayFromSelf }) {}
class SwitchKey extends Schema.TaggedClass<SwitchKey>()("SwitchKey", { saltHex: Schema.String }) {}
type TestMessage = Numbered | SwitchKey
// The control channel: nothing on it is sealed, and its frames may be up to 16 MiB.
const codec = Codec.make("control", Schema.Union(Numbered, SwitchKey))

const numbered = (count: number, paddingBytes: number, from = 0) => {
  const padding = new Uint8Array(paddingBytes).fill(0x5a)
  return Array.from({ length: count }, (_, offset) => new Numbered({ index: from + offset, padding }))
}

const listen = listenForConnections

interface PairOptions {
  readonly listenerInbox?: Partial<Link.InboxBound>
  readonly dialerInbox?: Partial<Link.InboxBound>
  readonly rekeyOn?: (message: TestMessage) => Uint8Array | undefined
}

/** Both ends of one control link: the dialer and the listener, which has read the magic as the mux would. */
const pair = (options: PairOptions = {}) =>
  Effect.gen(function*() {
    const salt = newSalt()
    const server = yield* listen
    const dialing = yield* Effect.fork(Link.dial({
      host: "127.0.0.1",
      port: server.port,
      channel: "control",
      salt,
      inbound: codec,
      outbound: codec,
      inbox: options.dialerInbox,
      rekeyOn: options.rekeyOn
    }))
    const connection = yield* server.next
    const channelMagic = yield* Effect.promise(() => connection.take(magic.control.length, 5_000))
    expect(channelMagic).toEqual(magic.control)
    const listener = yield* Link.accept(connection, { channel: "control", keyFor: Link.unnamedKey(salt), inbound: codec, outbound: codec, inbox: options.listenerInbox })
    yield* Effect.addFinalizer(() => listener.close)
    const dialer = yield* Fiber.join(dialing)
    return { dialer, listener }
  })

/** Take `count` messages and give back their indices. */
const indicesOf = (link: Link.Link<TestMessage, TestMessage>, count: number) =>
  Effect.gen(function*() {
    const indices: Array<number | string> = []
    for (let taken = 0; taken < count; taken++) {
      const message = yield* link.receive
      indices.push(message._tag === "Numbered" ? message.index : message._tag)
    }
    return indices
  })

/**
 * Wait until what `read` gives stays the same over `looks` looks 5 ms apart: progress has stopped, not
 * merely stalled for a moment (the kernels' buffers take a while to fill). Held back by TCP it never
 * moves again until the owner reads; something that reads the socket behind the owner's back keeps it
 * moving until everything is through.
 */
const settles = <A>(read: Effect.Effect<A>, looks: number, what: string, timeoutMs = 10_000) =>
  Effect.gen(function*() {
    const deadline = performance.now() + timeoutMs
    let last = yield* read
    let still = 0
    while (still < looks) {
      if (performance.now() > deadline) return yield* Effect.dieMessage(`${what} never settled (last ${last})`)
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
      const now = yield* read
      still = now === last ? still + 1 : 0
      last = now
    }
    return last
  })

const upTo = (count: number, from = 0) => Array.from({ length: count }, (_, offset) => from + offset)

describe("a link's inbox is bounded", () => {
  effect.live("a peer that sends faster than its owner reads is held back by TCP, and every message arrives in order once the owner reads", () =>
    Effect.gen(function*() {
      const { dialer, listener } = yield* pair({ listenerInbox: { messages: 64 } })
      // 64 MiB: more than the inbox, one socket read and both kernels' buffers hold (here the sender stops
      // after 8–10 MiB while nobody reads; tcp_rmem and tcp_wmem allow 32 and 4 MiB at most).
      const total = 16_384
      const messages = numbered(total, 4_096)
      const before = WireCounters.snapshot().get("control")
      let sent = 0
      let takenWhenAllSent = -1
      let taken = 0
      const sending = yield* Effect.fork(Effect.zipRight(
        Effect.forEach(messages, (message) => Effect.tap(dialer.send(message), () => void (sent += 1)), { discard: true }),
        Effect.sync(() => void (takenWhenAllSent = taken))
      ))

      // Held back: the listener has stopped reading with a full inbox, and the dialer's kernel has refused bytes…
      yield* eventually(
        Effect.map(Effect.zip(listener.backlog, dialer.backlog), ([held, sender]) => !held.reading && held.messages === 64 && sender.unsentBytes > 0),
        "the listener stopped reading with its inbox full, and the dialer waits for its kernel"
      )
      // …and stays held back, short of the end, once the kernels' buffers are full, while the owner does not read.
      const settled = yield* settles(Effect.sync(() => sent), 20, "the dialer's count of sent messages")
      expect(settled).toBeLessThan(total)
      expect(Option.isNone(yield* Fiber.poll(sending))).toBe(true)
      const full = yield* listener.backlog
      expect({ messages: full.messages, peakMessages: full.peakMessages, reading: full.reading }).toEqual({ messages: 64, peakMessages: 64, reading: false })
      // What was read past the bound is at most one socket read (Bun 1.4 reads 512 KiB at a time).
      expect(full.undecodedBytes).toBeLessThanOrEqual(1 << 20)
      expect((yield* dialer.backlog).unsentBytes).toBeGreaterThan(0)

      const indices: Array<number> = []
      for (; taken < total;) {
        const message = yield* listener.receive
        taken += 1
        if (message._tag === "Numbered") indices.push(message.index)
        if (taken % 512 === 0) expect((yield* listener.backlog).peakMessages).toBeLessThanOrEqual(64)
      }
      yield* Fiber.join(sending)
      expect(indices).toEqual(upTo(total))
      // The dialer could finish only after the owner had read: its last sends waited for the listener.
      expect(takenWhenAllSent).toBeGreaterThan(0)
      const after = yield* listener.backlog
      expect({ messages: after.messages, bytes: after.bytes, undecodedBytes: after.undecodedBytes, peakMessages: after.peakMessages, reading: after.reading })
        .toEqual({ messages: 0, bytes: 0, undecodedBytes: 0, peakMessages: 64, reading: true })

      // Counters count every frame and byte once, however late it was decoded: what one end sent, the other received.
      const counts = WireCounters.snapshot().get("control")!
      const framesIn = counts.framesIn - (before?.framesIn ?? 0)
      const bytesIn = counts.bytesIn - (before?.bytesIn ?? 0)
      const bytesOut = counts.bytesOut - (before?.bytesOut ?? 0)
      expect({ framesIn, bytesIn }).toEqual({ framesIn: total, bytesIn: bytesOut })
    }), 30_000)

  effect.live("bytes bound the inbox too: frames are decoded while it holds under its bytes, so at most one frame more", () =>
    Effect.gen(function*() {
      // 16 KiB payloads: about 16.5 KiB a frame. Under 64 KiB held after three, so a fourth comes in, and no fifth.
      const { dialer, listener } = yield* pair({ listenerInbox: { messages: 1_000, bytes: 64 << 10 } })
      const total = 400
      const sending = yield* Effect.fork(Effect.forEach(numbered(total, 16 << 10), dialer.send, { discard: true }))
      yield* eventually(Effect.map(listener.backlog, (held) => !held.reading), "the listener stopped reading")
      const full = yield* listener.backlog
      expect(full.messages).toBe(4)
      expect(full.bytes).toBeGreaterThanOrEqual(64 << 10)
      expect(full.bytes).toBeLessThan((64 << 10) + (17 << 10))
      expect(yield* indicesOf(listener, total)).toEqual(upTo(total))
      yield* Fiber.join(sending)
      const after = yield* listener.backlog
      expect(after.peakMessages).toBe(4)
      expect(after.peakBytes).toBeLessThan((64 << 10) + (17 << 10))
    }), 30_000)

  effect.live("by default a control link holds 1,024 messages", () =>
    Effect.gen(function*() {
      const { dialer, listener } = yield* pair()
      const total = 3_000
      yield* Effect.forEach(numbered(total, 8), dialer.send, { discard: true })
      yield* eventually(Effect.map(listener.backlog, (held) => !held.reading && held.messages === 1_024), "the listener stopped reading at 1,024 messages")
      expect(yield* indicesOf(listener, total)).toEqual(upTo(total))
      expect((yield* listener.backlog).peakMessages).toBe(1_024)
    }), 30_000)

  effect.live("a key switch still happens at its frame when the frames after it waited undecoded", () =>
    Effect.gen(function*() {
      const next = newSalt()
      const { dialer, listener } = yield* pair({
        dialerInbox: { messages: 4 },
        rekeyOn: (message) => (message._tag === "SwitchKey" ? saltFromHex(message.saltHex) : undefined)
      })
      // Ten under the first key, the switch, ten under the next: all in the dialer's socket before it reads one.
      yield* Effect.forEach(numbered(10, 8), listener.send, { discard: true })
      yield* listener.send(new SwitchKey({ saltHex: saltToHex(next) }))
      yield* listener.rekey(next)
      yield* Effect.forEach(numbered(10, 8, 10), listener.send, { discard: true })
      yield* eventually(Effect.map(dialer.backlog, (held) => !held.reading && held.messages === 4 && held.undecodedBytes > 0), "the dialer holds 4 and keeps the rest undecoded")
      expect(yield* indicesOf(dialer, 21)).toEqual([...upTo(10), "SwitchKey", ...upTo(10, 10)])
      // Both directions switched: the listener hears the dialer under the new key.
      yield* dialer.send(new Numbered({ index: 99, padding: new Uint8Array(0) }))
      expect(yield* indicesOf(listener, 1)).toEqual([99])
    }), 30_000)
})

describe("endings reach every reader with the inbox full", () => {
  effect.live("a peer that closes while its messages wait: all of them first, then the ending, for every later reader", () =>
    Effect.gen(function*() {
      const { dialer, listener } = yield* pair({ listenerInbox: { messages: 8 } })
      yield* Effect.forEach(numbered(100, 8), dialer.send, { discard: true })
      yield* dialer.close
      yield* eventually(Effect.map(listener.backlog, (held) => !held.reading && held.messages === 8), "the listener stopped reading with 8")
      expect(yield* indicesOf(listener, 100)).toEqual(upTo(100))
      const endings = [yield* Effect.either(listener.receive), yield* Effect.either(listener.receive)]
      expect(endings.map((ending) => Either.isLeft(ending) && ending.left.reason)).toEqual(["closed", "closed"])
    }), 30_000)

  effect.live("an abort with the inbox full: what it held, then the abort's reason, for every later reader", () =>
    Effect.gen(function*() {
      const { dialer, listener } = yield* pair({ listenerInbox: { messages: 8 } })
      yield* Effect.forEach(numbered(100, 8), dialer.send, { discard: true })
      yield* eventually(Effect.map(listener.backlog, (held) => !held.reading && held.messages === 8 && held.undecodedBytes > 0), "the listener stopped reading with 8")
      yield* listener.abort("the test gave up on it")
      expect(yield* indicesOf(listener, 8)).toEqual(upTo(8))
      const endings = [yield* Effect.either(listener.receive), yield* Effect.either(listener.receive)]
      expect(endings.map((ending) => Either.isLeft(ending) && ending.left.detail)).toEqual(["the test gave up on it", "the test gave up on it"])
      expect((yield* listener.backlog).undecodedBytes).toBe(0)
    }), 30_000)

  effect.live("a peer that resets while held back: an unbroken run of its messages, then the ending, for every later reader", () =>
    Effect.gen(function*() {
      const { dialer, listener } = yield* pair({ listenerInbox: { messages: 8 } })
      yield* Effect.forEach(numbered(100, 8), dialer.send, { discard: true })
      yield* eventually(Effect.map(listener.backlog, (held) => !held.reading && held.messages === 8), "the listener stopped reading with 8")
      yield* dialer.abort("the peer vanished")
      // A reset may drop what the kernel still held: a prefix arrives, in order, and nothing after it.
      const indices: Array<number> = []
      let ending = yield* Effect.either(listener.receive)
      while (Either.isRight(ending)) {
        if (ending.right._tag === "Numbered") indices.push(ending.right.index)
        ending = yield* Effect.either(listener.receive)
      }
      expect(indices).toEqual(upTo(indices.length))
      expect(indices.length).toBeGreaterThanOrEqual(8)
      const later = yield* Effect.either(listener.receive)
      expect([ending, later].map((end) => Either.isLeft(end) && end.left.reason)).toEqual(["closed", "closed"])
    }), 30_000)
})

describe("a connection before its owner takes it", () => {
  effect.live("a parked connection stops reading once it holds 64 KiB, and hands every byte over in order", () =>
    Effect.gen(function*() {
      const server = yield* listen
      let drained: () => void = () => {}
      const client = yield* Effect.promise(() =>
        Bun.connect({ hostname: "127.0.0.1", port: server.port, socket: { data: () => {}, drain: () => drained() } })
      )
      yield* Effect.addFinalizer(() => Effect.sync(() => client.end()))
      const connection = yield* server.next
      // 32 MiB, byte i = i mod 251: any loss, duplicate or reordering shows.
      const total = 32 << 20
      const stream = new Uint8Array(total).map((_, index) => index % 251)
      let written = 0
      const write = () => {
        while (written < total) {
          const accepted = client.write(stream.subarray(written))
          written += Math.max(0, accepted)
          if (accepted <= 0 || written < total) return
        }
      }
      drained = write
      write()
      yield* eventually(Effect.sync(() => !connection.isReading), "the parked connection stopped reading")
      // The kernel refuses the rest: nothing reads it while the connection is parked.
      yield* eventually(Effect.sync(() => written < total && written > 0), "the writer is held back")
      expect(yield* settles(Effect.sync(() => written), 20, "the bytes the writer's kernel took")).toBeLessThan(total)
      let received = 0
      let intact = true
      const done = Promise.withResolvers<void>()
      connection.receive({
        data: (bytes) => {
          for (let at = 0; at < bytes.length; at++) if (bytes[at] !== (received + at) % 251) intact = false
          received += bytes.length
          if (received >= total) done.resolve()
        },
        close: () => done.resolve()
      })
      yield* Effect.promise(() => done.promise)
      expect({ received, intact, reading: connection.isReading }).toEqual({ received: total, intact: true, reading: true })
    }), 30_000)

  effect.live("a take leaves the rest of every early chunk, once each and in order, for the next receiver", () =>
    Effect.gen(function*() {
      const server = yield* listen
      const client = yield* Effect.promise(() => Bun.connect({ hostname: "127.0.0.1", port: server.port, socket: { data: () => {} } }))
      yield* Effect.addFinalizer(() => Effect.sync(() => client.end()))
      const connection = yield* server.next
      // Two chunks kept while parked (as when a dialer's opening comes in two reads before its owner takes it).
      connection.unread(new Uint8Array([5, 6, 7]))
      connection.unread(new Uint8Array([1, 2, 3, 4]))
      const first = yield* Effect.promise(() => connection.take(2, 1_000))
      const rest: Array<number> = []
      connection.receive({ data: (bytes) => void rest.push(...bytes), close: () => {} })
      expect({ first: [...(first as Uint8Array)], rest }).toEqual({ first: [1, 2], rest: [3, 4, 5, 6, 7] })
    }), 10_000)
})
