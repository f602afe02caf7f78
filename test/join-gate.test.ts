/**
 * The join window over real sockets: admissions, refusals with reasons,
 * silence for bad MACs, the flood guard, deadlines and departures.
 */
import { describe, expect } from "bun:test"
import * as Effect from "effect/Effect"
import type * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import * as JoinGate from "../src/launcher/front/JoinGate.ts"
import type { JoinRules } from "../src/launcher/front/joinVerdict.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import { Hello, joinCodec, type JoinMessage, Reject, WorldFormed } from "../src/wire/messages/JoinMessages.ts"
import { newSalt, OPEN_SALT, saltFromHex } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import { effect, eventually } from "./support/effect.ts"
import { runSpec } from "./support/run-spec.ts"

const rules = (overrides: Partial<JoinRules> = {}): JoinRules => ({
  minRanks: 5,
  targetRanks: 5,
  timeoutMs: 5_000,
  maxTimeoutMs: 10_000,
  start: "auto",
  ...overrides
})

interface Growth {
  readonly maxRanks?: number
  readonly canRejoin?: (host: string) => boolean
}

const setup = (options: { rules?: JoinRules; open?: boolean; floodLimit?: number; growth?: Growth; handshakeMs?: number } = {}) =>
  Effect.gen(function*() {
    const salt = newSalt()
    const late: Array<JoinGate.Member> = []
    const gate = yield* JoinGate.make({
      rules: options.rules ?? rules(),
      declared: new Map(options.growth === undefined ? [["a", 2], ["b", 3]] : [["a", 2], ["b", 3], ["c", 1], ["d", 4]]),
      ...(options.growth === undefined ? {} : {
        afterFormation: "accept" as const,
        maxRanks: options.growth.maxRanks,
        canRejoin: options.growth.canRejoin ?? (() => false),
        onLateJoin: (member: JoinGate.Member) => Effect.sync(() => {
          late.push(member)
        })
      }),
      admission: options.open ? { mode: "open", warning: undefined } : { mode: "pre-shared" },
      specFor: (host) => runSpec({ run: host }),
      salt,
      version: "0.1.0",
      handshakeMs: options.handshakeMs ?? 2_000,
      ...(options.floodLimit === undefined ? {} : { floodLimit: options.floodLimit })
    })
    // The gate's own deadlines are under test here, not the door's first-frame deadline for strangers (PortMux).
    const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 2_000, firstFrameMs: 10_000, owners: { join: gate.owner } })
    return { gate, mux, salt, late }
  })

const hello = (host: string, devices: number, version = "0.1.0") =>
  new Hello({ host, devices: Array.from({ length: devices }, (_, i) => i), deviceLabels: Array.from({ length: devices }, () => "cpu"), pid: 1, version })

/** Dial, say hello, and return the first answer with the link. */
const join = (port: number, salt: Uint8Array, message: Hello, open = false) =>
  Effect.gen(function*() {
    const link = yield* Link.dial({
      host: "127.0.0.1",
      port,
      channel: "join",
      salt: open ? OPEN_SALT : salt,
      inbound: joinCodec,
      outbound: joinCodec,
      ...(open ? { rekeyOn: (m: JoinMessage) => (m._tag === "Accept" && m.saltHex ? saltFromHex(m.saltHex) : undefined) } : {})
    })
    yield* link.send(message)
    const answer = yield* Effect.either(link.receive)
    return { answer, link }
  })

/** A forked wait's result once it has come (in real time: what it waits on runs once the TestClock has moved). */
const settled = <A, E>(fiber: Fiber.RuntimeFiber<A, E>, what: string) =>
  Effect.zipRight(eventually(Effect.map(Fiber.poll(fiber), Option.isSome), what), Fiber.join(fiber))

const ranksOf = (answer: Either.Either<JoinMessage, unknown>) =>
  answer._tag === "Right" && answer.right._tag === "Accept" ? answer.right.ranks : answer

const reasonOf = (answer: Either.Either<JoinMessage, unknown>) =>
  answer._tag === "Right" && answer.right._tag === "Reject" ? answer.right.reason : answer

describe("JoinGate after formation", () => {
  effect.live("by default a host that dials in once the world has formed is refused, saying how to grow", () =>
    Effect.gen(function*() {
      const { gate, mux, salt } = yield* setup({ rules: rules({ minRanks: 2, targetRanks: 2 }) })
      yield* join(mux.port, salt, hello("a", 2))
      expect((yield* gate.formation)._tag).toBe("Formed")
      const b = yield* join(mux.port, salt, hello("b", 3))
      expect(reasonOf(b.answer)).toBe("the cohort has already formed (this run does not grow: controller.join.after_formation is reject)")
    }))

  effect.live("with accept, late hosts are admitted with the next numbers, handed over with their links, up to max_ranks", () =>
    Effect.gen(function*() {
      const { gate, late, mux, salt } = yield* setup({ rules: rules({ minRanks: 2, targetRanks: 2 }), growth: { maxRanks: 6 } })
      yield* join(mux.port, salt, hello("a", 2))
      const formation = yield* gate.formation
      expect(formation._tag === "Formed" && formation.worldSize).toBe(2)
      const c = yield* join(mux.port, salt, hello("c", 1))
      expect(ranksOf(c.answer)).toEqual([2])
      // A late host is told to expect the world at once.
      expect(c.answer._tag === "Right" && c.answer.right._tag === "Accept" && c.answer.right.formationWaitMs).toBe(0)
      // Over max_ranks (2 + 1 + 4 > 6): refused, naming the cap; no number is taken.
      const d = yield* join(mux.port, salt, hello("d", 4))
      expect(reasonOf(d.answer)).toBe("the run would have 7 ranks, over controller.join.max_ranks (6)")
      const b = yield* join(mux.port, salt, hello("b", 3))
      expect(ranksOf(b.answer)).toEqual([3, 4, 5])
      expect(late.map(({ host, ranks }) => ({ host, ranks }))).toEqual([{ host: "c", ranks: [2] }, { host: "b", ranks: [3, 4, 5] }])
      // The late member's link is the launcher's: what goes down it arrives.
      const world = new WorldFormed({ worldSize: 6, hosts: [], master: { addr: "127.0.0.1", port: 29500 } })
      yield* late[0]!.link.send(world)
      expect(yield* c.link.receive).toEqual(world)
      // The same checks as before formation: a host already in, an undeclared one.
      expect(reasonOf((yield* join(mux.port, salt, hello("a", 2))).answer)).toBe("host a has already joined")
      expect(reasonOf((yield* join(mux.port, salt, hello("zz", 1))).answer)).toEqual(expect.stringContaining("host zz is not among the workers of this run"))
    }))

  effect.live("numbers taken for restarts are never given to a late host, and do not count towards max_ranks", () =>
    Effect.gen(function*() {
      const { gate, mux, salt } = yield* setup({ rules: rules({ minRanks: 2, targetRanks: 2 }), growth: { maxRanks: 3 } })
      yield* join(mux.port, salt, hello("a", 2))
      yield* gate.formation
      expect(yield* gate.take(1)).toBe(2)
      expect(yield* gate.take(1)).toBe(3)
      expect(ranksOf((yield* join(mux.port, salt, hello("c", 1))).answer)).toEqual([4])
    }))

  effect.live("a host that is gone may join again under its name, with new numbers", () =>
    Effect.gen(function*() {
      const gone = new Set<string>()
      const { gate, late, mux, salt } = yield* setup({ rules: rules({ minRanks: 2, targetRanks: 2 }), growth: { canRejoin: (host) => gone.has(host) } })
      yield* join(mux.port, salt, hello("a", 2))
      yield* gate.formation
      expect(reasonOf((yield* join(mux.port, salt, hello("a", 2))).answer)).toBe("host a has already joined")
      gone.add("a")
      expect(ranksOf((yield* join(mux.port, salt, hello("a", 2))).answer)).toEqual([2, 3])
      expect(late.map(({ host, ranks }) => ({ host, ranks }))).toEqual([{ host: "a", ranks: [2, 3] }])
    }))

  effect.live("concurrent late joins never share a number", () =>
    Effect.gen(function*() {
      const { gate, late, mux, salt } = yield* setup({ rules: rules({ minRanks: 2, targetRanks: 2 }), growth: {} })
      yield* join(mux.port, salt, hello("a", 2))
      yield* gate.formation
      const answers = yield* Effect.all([hello("b", 3), hello("c", 1), hello("d", 4)].map((message) => join(mux.port, salt, message)), { concurrency: "unbounded" })
      const numbers = answers.flatMap(({ answer }) => ranksOf(answer) as ReadonlyArray<number>).sort((x, y) => x - y)
      expect(numbers).toEqual([2, 3, 4, 5, 6, 7, 8, 9])
      expect(late).toHaveLength(3)
    }))
})

describe("JoinGate", () => {
  /** The join magic, a 16-byte nonce, then a frame header announcing `length` bytes and 3 of them: a frame that never finishes. */
  const halfFrame = (length: number) => {
    const header = new Uint8Array(16)
    new DataView(header.buffer).setUint32(0, length, true)
    header[4] = 1
    // Magic, nonce, an empty key id (the salt's), then a frame's header and a few of its bytes.
    return new Uint8Array([...new TextEncoder().encode("CoJ2"), ...new Uint8Array(16).fill(7), 0, ...header, 1, 2, 3])
  }
  /** Milliseconds until the launcher closes a connection that sent `bytes` (none: still open after 6 s). */
  const closedAfter = (port: number, bytes: Uint8Array) =>
    Effect.promise(() =>
      new Promise<number>((resolve) => {
        const start = performance.now()
        void Bun.connect({
          hostname: "127.0.0.1",
          port,
          socket: {
            open: (socket) => void socket.write(bytes),
            data: () => {},
            close: () => resolve(performance.now() - start),
            error: () => resolve(performance.now() - start)
          }
        })
      })
    ).pipe(Effect.timeout("6 seconds"), Effect.option)

  effect.live("a half-sent frame past the Hello deadline is reset, not held: every such connection is closed by the launcher", () =>
    Effect.gen(function*() {
      const { mux } = yield* setup()
      // 32 KiB: under the ceiling before authentication, so only the deadline can end it.
      const closed = yield* Effect.all(Array.from({ length: 8 }, () => closedAfter(mux.port, halfFrame(32 << 10))), { concurrency: "unbounded" })
      // handshakeMs is 2 s here: each is closed at its deadline, none is left open.
      for (const after of closed) {
        expect(after._tag).toBe("Some")
        if (after._tag === "Some") expect(after.value).toBeGreaterThanOrEqual(1_900)
      }
    }), 15_000)

  effect.live("a first frame that announces more than 64 KiB is refused at its header: closed at once, nothing buffered", () =>
    Effect.gen(function*() {
      // A Hello deadline of 20 s (the door's first-frame deadline is 10 s): a frame that was buffered instead
      // would be closed at 10 s at the soonest, past closedAfter's 6 s. What the bound separates: refused at
      // the header is tens of milliseconds, loaded or not; held for a deadline is ten seconds or more.
      const { mux } = yield* setup({ handshakeMs: 20_000 })
      const closed = yield* Effect.all([64 << 10 | 1, 1 << 20, 16 << 20].map((length) => closedAfter(mux.port, halfFrame(length))), { concurrency: "unbounded" })
      for (const after of closed) {
        expect(after._tag).toBe("Some")
        if (after._tag === "Some") expect(after.value).toBeLessThan(1_000)
      }
    }), 15_000)

  effect.live("declared hosts are admitted with contiguous ranks and the target forms the world at once", () =>
    Effect.gen(function*() {
      const { gate, mux, salt } = yield* setup()
      const a = yield* join(mux.port, salt, hello("a", 2))
      expect(a.answer).toEqual(expect.objectContaining({ right: expect.objectContaining({ _tag: "Accept", ranks: [0, 1] }) }))
      const b = yield* join(mux.port, salt, hello("b", 3))
      expect(b.answer._tag === "Right" && b.answer.right._tag === "Accept" && b.answer.right.ranks).toEqual([2, 3, 4])
      const formation = yield* gate.formation
      expect(formation._tag).toBe("Formed")
      if (formation._tag !== "Formed") return
      expect(formation.worldSize).toBe(5)
      expect(formation.members.map(({ host, ranks }) => ({ host, ranks }))).toEqual([{ host: "a", ranks: [0, 1] }, { host: "b", ranks: [2, 3, 4] }])
      // The join link stays open as the host's control link.
      yield* formation.members[0]!.link.send(new WorldFormed({ worldSize: 5, hosts: [], master: { addr: "127.0.0.1", port: 29500 } }))
      expect(yield* a.link.receive).toEqual(new WorldFormed({ worldSize: 5, hosts: [], master: { addr: "127.0.0.1", port: 29500 } }))
    }))

  effect.live("a Hello whose host name carries terminal controls is refused, the name escaped in the reason", () =>
    Effect.gen(function*() {
      const { mux, salt } = yield* setup()
      const evil = yield* join(mux.port, salt, hello("a\u001b[2K\rcohort: run completed", 2))
      expect(reasonOf(evil.answer)).toBe(
        "host name \"a\\x1b[2K\\x0dcohort: run completed\" is not one: it must be 1 to 253 letters, digits, '.', '-', '_' or ':', starting with a letter or digit"
      )
    }))

  effect.live("device labels are GPU names, spaces and all; an empty, over-long or control-character one is refused", () =>
    Effect.gen(function*() {
      const { mux, salt } = yield* setup()
      const gpus = new Hello({ host: "a", devices: [0, 1], deviceLabels: ["NVIDIA H200", "NVIDIA A100-SXM4-80GB"], pid: 1, version: "0.1.0" })
      expect((yield* join(mux.port, salt, gpus)).answer).toEqual(expect.objectContaining({ right: expect.objectContaining({ _tag: "Accept", ranks: [0, 1] }) }))
      const rule = "1 to 64 letters, digits, spaces or ':', '.', '_', '(', ')', '/', '+', '-', starting with a letter or digit"
      for (const label of ["NVIDIA\u001b[2K H200", "", " leading space", "x".repeat(65)]) {
        const bad = new Hello({ host: "b", devices: [0], deviceLabels: [label], pid: 1, version: "0.1.0" })
        expect(reasonOf((yield* join(mux.port, salt, bad)).answer)).toBe(`host b sent a device label that is not one: ${rule}`)
      }
      // One label per device: the inventory names each device by its own.
      const short = new Hello({ host: "b", devices: [0, 1, 2], deviceLabels: ["NVIDIA H200"], pid: 1, version: "0.1.0" })
      expect(reasonOf((yield* join(mux.port, salt, short)).answer)).toBe("host b sent 1 device label(s) for 3 device(s): one per device")
    }))

  effect.live("open admission still admits only declared hosts: a stranger is refused, and the salt is not in the refusal", () =>
    Effect.gen(function*() {
      const { mux, salt } = yield* setup({ open: true })
      const evil = yield* join(mux.port, salt, hello("evil", 4), true)
      expect(reasonOf(evil.answer)).toBe("host evil is not among the workers of this run (a, b)")
    }))

  effect.live("refusals say why when the MAC was good; a bad MAC gets no reply", () =>
    Effect.gen(function*() {
      const { mux, salt } = yield* setup()
      yield* join(mux.port, salt, hello("a", 2))
      expect((yield* join(mux.port, salt, hello("a", 2))).answer).toEqual(expect.objectContaining({ right: new Reject({ reason: "host a has already joined" }) }))
      expect((yield* join(mux.port, salt, hello("c", 1))).answer).toEqual(
        expect.objectContaining({ right: new Reject({ reason: "host c is not among the workers of this run (a, b)" }) })
      )
      expect((yield* join(mux.port, salt, hello("b", 2))).answer).toEqual(
        expect.objectContaining({ right: new Reject({ reason: "host b was declared with 3 devices but brings 2" }) })
      )
      expect((yield* join(mux.port, salt, hello("b", 3, "9.9.9"))).answer).toEqual(
        expect.objectContaining({ right: new Reject({ reason: "version skew: the launcher runs cohort 0.1.0, this agent 9.9.9" }) })
      )
      const forged = (yield* join(mux.port, newSalt(), hello("b", 3))).answer
      expect(forged._tag === "Left" && forged.left.reason).toBe("closed")
    }))

  effect.live("a flood of refused joins fails the window", () =>
    Effect.gen(function*() {
      const { gate, mux, salt } = yield* setup({ floodLimit: 5 })
      for (let i = 0; i < 5; i++) yield* join(mux.port, salt, hello(`stranger-${i}`, 1))
      expect(yield* gate.formation).toEqual({ _tag: "Failed", reason: "5 joins were rejected: refusing to go on (flood guard)" })
    }))

  effect.live("unauthenticated noise never trips the flood guard: 30 forged joins and 10 silent ones, then the world forms", () =>
    Effect.gen(function*() {
      const { gate, mux, salt } = yield* setup({ floodLimit: 5 })
      // Six times the limit in joins keyed with salts that are not the run's: each fails its MAC and is dropped unanswered.
      const forged = yield* Effect.all(
        Array.from({ length: 30 }, (_, i) => Effect.scoped(join(mux.port, newSalt(), hello(`stranger-${i}`, 1)))),
        { concurrency: 10 }
      )
      for (const { answer } of forged) expect(answer._tag === "Left" && answer.left.reason).toBe("closed")
      // Connections that never say anything are dropped at the deadline; they do not count either.
      const halves = yield* Effect.all(Array.from({ length: 10 }, () => closedAfter(mux.port, halfFrame(100))), { concurrency: "unbounded" })
      for (const closed of halves) expect(closed._tag).toBe("Some")
      const a = yield* join(mux.port, salt, hello("a", 2))
      const b = yield* join(mux.port, salt, hello("b", 3))
      expect([a.answer, b.answer].map(ranksOf)).toEqual([[0, 1], [2, 3, 4]])
      const formation = yield* gate.formation
      expect(formation._tag === "Formed" && formation.worldSize).toBe(5)
    }), 20_000)

  effect.live("a member that leaves before formation fails the window at once", () =>
    Effect.gen(function*() {
      const { gate, mux, salt } = yield* setup()
      yield* Effect.scoped(join(mux.port, salt, hello("a", 2)))
      const formation = yield* gate.formation
      expect(formation._tag).toBe("Failed")
      if (formation._tag === "Failed") expect(formation.reason).toStartWith("a left before the cohort formed:")
    }))

  effect.it("the quorum forms at the window's end, not before; without it the window fails at the hard cap, not at the window's end, naming the hosts that never joined", () =>
    Effect.gen(function*() {
      // The gate's deadlines run on Effect's Clock, here the TestClock: a join slowed by a loaded machine cannot
      // outlast them, and each is checked to the millisecond. The sockets and handshakes are real.
      const quorum = yield* setup({ rules: rules({ minRanks: 2, timeoutMs: 150, maxTimeoutMs: 300 }) })
      yield* join(quorum.mux.port, quorum.salt, hello("a", 2))
      const formed = yield* Effect.fork(quorum.gate.formation)
      yield* TestClock.adjust("149 millis")
      expect(yield* Fiber.poll(formed)).toEqual(Option.none())
      yield* TestClock.adjust("1 millis")
      const outcome = yield* settled(formed, "the window's outcome at its end")
      expect(outcome._tag === "Formed" && outcome.worldSize).toBe(2)
      const short = yield* setup({ rules: rules({ minRanks: 3, timeoutMs: 100, maxTimeoutMs: 200 }) })
      yield* join(short.mux.port, short.salt, hello("a", 2))
      const failed = yield* Effect.fork(short.gate.formation)
      // Past the window's end without a quorum, the window stays open to the hard cap.
      yield* TestClock.adjust("199 millis")
      expect(yield* Fiber.poll(failed)).toEqual(Option.none())
      yield* TestClock.adjust("1 millis")
      // a joined, b (declared with 3) never did.
      expect(yield* settled(failed, "the window's outcome at the hard cap")).toEqual({ _tag: "Failed", reason: "quorum not met: 2/3 ranks (never joined: b)" })
    }), 15_000)

  effect.live("open admission: the Accept carries the salt, and the link is keyed by it from then on", () =>
    Effect.gen(function*() {
      const { gate, mux, salt } = yield* setup({ open: true })
      const a = yield* join(mux.port, salt, hello("a", 2), true)
      expect(a.answer._tag === "Right" && a.answer.right._tag === "Accept" && saltFromHex(a.answer.right.saltHex ?? "")).toEqual(salt)
      yield* join(mux.port, salt, hello("b", 3), true)
      const formation = yield* gate.formation
      if (formation._tag !== "Formed") throw new Error(`not formed: ${JSON.stringify(formation)}`)
      yield* formation.members[0]!.link.send(new WorldFormed({ worldSize: 5, hosts: [], master: { addr: "127.0.0.1", port: 29500 } }))
      expect(yield* a.link.receive).toEqual(new WorldFormed({ worldSize: 5, hosts: [], master: { addr: "127.0.0.1", port: 29500 } }))
    }))
})
