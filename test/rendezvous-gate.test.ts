/**
 * The NCCL rendezvous on the launcher, with scripted ranks over real
 * loopback links: one id per generation from the preferred generator, the
 * same id and member list for everyone, and a new generation of the
 * survivors after a death, a departure or a restart.
 */
import { describe, expect } from "bun:test"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as RendezvousGate from "../src/launcher/front/RendezvousGate.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import { newSalt, rankKey } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import { IdFailed, IdProvided, Join, rendezvousCodec, type RendezvousMessage } from "../src/wire/messages/RendezvousMessages.ts"
import { generatorPreference } from "../src/launcher/run/Formation.ts"
import type { Plan } from "../src/launcher/run/Plan.ts"
import { test } from "bun:test"
import { effect, eventually } from "./support/effect.ts"

const idOf = (byte: number) => new Uint8Array(128).fill(byte)

const gateWith = (world: ReadonlyArray<number>, local: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    const salt = newSalt()
    const failures: Array<string> = []
    const absent: Array<{ ranks: ReadonlyArray<number>; reason: string }> = []
    const gate = yield* RendezvousGate.make({
      salt,
      handshakeMs: 5_000,
      idTimeoutMs: 2_000,
      onFailure: (reason) => Effect.sync(() => failures.push(reason)),
      onAbsent: (ranks, reason) => Effect.sync(() => absent.push({ ranks, reason }))
    })
    const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 5_000, owners: { rendezvous: gate.owner } })
    yield* gate.begin(world, [new Set(local)])
    /** A scripted rank: its link and every message it received, in order. */
    // A rank holds its own number's key, named by its number (`as`: what it claims to be, and the key it holds).
    const rank = (rank: number, incarnation = 0, as: { readonly key: Uint8Array; readonly keyId: string } = { key: rankKey(salt, rank), keyId: String(rank) }) =>
      Effect.gen(function*() {
        const link = yield* Link.dial({
          channel: "rendezvous",
          host: "127.0.0.1",
          port: mux.port,
          salt: as.key,
          keyId: as.keyId,
          inbound: rendezvousCodec,
          outbound: rendezvousCodec
        })
        const inbox = yield* Queue.unbounded<RendezvousMessage>()
        const ended = yield* Deferred.make<void>()
        yield* Effect.forkScoped(Effect.forever(Effect.flatMap(link.receive, (message) => Queue.offer(inbox, message))).pipe(
          Effect.ignore,
          Effect.zipRight(Deferred.succeed(ended, undefined))
        ))
        yield* link.send(new Join({ rank, incarnation }))
        return { link, next: Queue.take(inbox), pending: Queue.size(inbox), ended: Deferred.await(ended) }
      })
    return { absent, failures, gate, rank, salt }
  })

describe("RendezvousGate growth", () => {
  effect.live("an admitted rank may dial in at once but waits; at its boundary the whole cohort re-forms with it, in ascending order", () =>
    Effect.gen(function*() {
      const { failures, gate, rank } = yield* gateWith([0, 2], [])
      const [r0, r2] = [yield* rank(0), yield* rank(2)]
      expect(yield* r0.next).toMatchObject({ _tag: "ProvideId", generation: 0 })
      yield* r0.link.send(new IdProvided({ generation: 0, id: idOf(1) }))
      for (const member of [r0, r2]) expect(yield* member.next).toMatchObject({ _tag: "Ready", generation: 0, members: [0, 2] })
      // Rank 3 joined the cohort: it dials in, and nothing changes until it enters.
      yield* gate.admit([3])
      const r3 = yield* rank(3)
      yield* eventually(Effect.map(gate.history, (history) => history.length === 1), "the first generation to stay alone")
      expect(yield* r0.pending).toBe(0)
      expect(yield* r3.pending).toBe(0)
      yield* gate.grow([3])
      for (const member of [r0, r2]) expect(yield* member.next).toMatchObject({ _tag: "Reform", generation: 0 })
      expect(yield* r0.next).toMatchObject({ _tag: "ProvideId", generation: 1 })
      yield* r0.link.send(new IdProvided({ generation: 1, id: idOf(2) }))
      for (const member of [r0, r2, r3]) {
        const ready = yield* member.next
        expect(ready).toMatchObject({ _tag: "Ready", generation: 1, members: [0, 2, 3] })
        expect(ready._tag === "Ready" && [...ready.id]).toEqual([...idOf(2)])
        // Growth is no shrink: the members build the new communicator from its id.
        expect(ready._tag === "Ready" && ready.shrinkOf).toBeUndefined()
      }
      expect(failures).toEqual([])
    }), 10_000)

  effect.live("a rank that enters without having dialed in is reported absent after the id timeout", () =>
    Effect.gen(function*() {
      const { absent, gate, rank } = yield* gateWith([0], [])
      const r0 = yield* rank(0)
      expect(yield* r0.next).toMatchObject({ _tag: "ProvideId", generation: 0 })
      yield* r0.link.send(new IdProvided({ generation: 0, id: idOf(1) }))
      expect(yield* r0.next).toMatchObject({ _tag: "Ready", members: [0] })
      yield* gate.admit([1])
      yield* gate.grow([1])
      expect(yield* r0.next).toMatchObject({ _tag: "Reform", generation: 0 })
      yield* eventually(Effect.sync(() => absent.length === 1), "rank 1 to be reported absent", 5_000)
      expect(absent).toEqual([{ ranks: [1], reason: "did not join the NCCL rendezvous within 2000 ms of entering" }])
    }), 10_000)
})

describe("who makes the ids (the reference's choice; README: the launcher's host, else the first worker)", () => {
  const preferred = [new Set([4, 5]), new Set([2, 3])]
  test.each([
    // members, generator: why
    [[0, 1, 2, 3, 4, 5], 4, "the launcher's host's lowest live rank, though 0 is lower"],
    [[0, 1, 2, 3, 5], 5, "another of the launcher's host's ranks when its lowest is gone"],
    [[0, 1, 2, 3], 2, "with the launcher's host gone, the first declared worker's"],
    [[0, 1, 3], 3, "any live rank of the first worker"],
    [[0, 1], 0, "neither: the lowest"],
    [[7], 7, "a lone survivor"]
  ] as const)("members %p: rank %p (%s)", (members, generator) => {
    expect(RendezvousGate.pickGenerator(members, preferred)).toBe(generator)
    // Without preferences, always the lowest.
    expect(RendezvousGate.pickGenerator(members, [])).toBe(members[0])
  })

  test("the preference comes from the plan: the in-process host's ranks, then the first declared worker's; by host name, as membership numbered them", () => {
    const host = (name: string, start: Plan["hosts"][number]["start"]) => ({ worker: { host: name }, start }) as unknown as Plan["hosts"][number]
    const hosts = [{ host: "gpu-b", ranks: [0, 1] }, { host: "gpu-a", ranks: [2, 3] }, { host: "launcher", ranks: [4] }]
    // gpu-a is declared first but joined second: its ranks are 2 and 3.
    expect(generatorPreference({ hosts: [host("gpu-a", "ssh"), host("gpu-b", "ssh"), host("launcher", "in-process")] }, hosts)).toEqual([new Set([4]), new Set([2, 3])])
    // Every host elsewhere: no local ranks, the first worker's next.
    expect(generatorPreference({ hosts: [host("gpu-b", "ssh"), host("gpu-a", "self")] }, hosts.slice(0, 2))).toEqual([new Set(), new Set([0, 1])])
  })
})

describe("RendezvousGate", () => {
  effect.live("once every rank has joined, the local generator's id reaches every member with the same member list", () =>
    Effect.gen(function*() {
      const { gate, rank } = yield* gateWith([0, 1, 2], [2])
      const [r0, r1] = [yield* rank(0), yield* rank(1)]
      expect(yield* r0.pending).toBe(0) // nobody is asked while rank 2 is missing
      const r2 = yield* rank(2)
      // Rank 2 is on the launcher's host: it generates, though 0 is lower.
      expect(yield* r2.next).toMatchObject({ _tag: "ProvideId", generation: 0 })
      yield* r2.link.send(new IdProvided({ generation: 0, id: idOf(7) }))
      for (const member of [r0, r1, r2]) {
        const ready = yield* member.next
        expect(ready).toMatchObject({ _tag: "Ready", generation: 0, members: [0, 1, 2] })
        expect(ready._tag === "Ready" && [...ready.id]).toEqual([...idOf(7)])
      }
      expect(yield* gate.current).toEqual({ generation: 0, members: [0, 1, 2], generator: 2 })
    }), 10_000)

  effect.live("a death dissolves the generation; the survivors re-rendezvous in ascending order", () =>
    Effect.gen(function*() {
      const { gate, rank } = yield* gateWith([0, 1, 2], [])
      const ranks = [yield* rank(0), yield* rank(1), yield* rank(2)]
      expect(yield* ranks[0]!.next).toMatchObject({ _tag: "ProvideId", generation: 0 })
      yield* ranks[0]!.link.send(new IdProvided({ generation: 0, id: idOf(1) }))
      for (const member of ranks) expect((yield* member.next)._tag).toBe("Ready")

      yield* gate.lose([0], "rank 0 exited with status 3")
      for (const member of [ranks[1]!, ranks[2]!]) {
        expect(yield* member.next).toEqual(expect.objectContaining({ _tag: "Reform", generation: 0, reason: "rank 0 exited with status 3" }))
      }
      // Rank 0 is gone: the lowest survivor generates the next id.
      expect(yield* ranks[1]!.next).toMatchObject({ _tag: "ProvideId", generation: 1 })
      yield* ranks[1]!.link.send(new IdProvided({ generation: 1, id: idOf(2) }))
      // The survivors are told who left generation 0, so that they may shrink its communicator.
      for (const member of [ranks[1]!, ranks[2]!]) {
        expect(yield* member.next).toMatchObject({ _tag: "Ready", generation: 1, members: [1, 2], shrinkOf: { generation: 0, left: [0] } })
      }
      expect((yield* gate.history).map(({ members }) => members)).toEqual([[0, 1, 2], [1, 2]])
      expect((yield* gate.history).map(({ shrinkOf }) => shrinkOf)).toEqual([undefined, { generation: 0, left: [0] }])
    }), 10_000)

  effect.live("a member whose link ends (its process died) and comes back as a restart gets a new generation", () =>
    Effect.gen(function*() {
      const { gate, rank } = yield* gateWith([0, 1], [])
      const [r0, r1] = [yield* rank(0), yield* rank(1)]
      expect((yield* r0.next)._tag).toBe("ProvideId")
      yield* r0.link.send(new IdProvided({ generation: 0, id: idOf(1) }))
      expect((yield* r0.next)._tag).toBe("Ready")
      expect((yield* r1.next)._tag).toBe("Ready")
      yield* r1.link.close
      expect(yield* r0.next).toMatchObject({ _tag: "Reform", generation: 0 })
      yield* eventually(Effect.map(gate.current, (current) => current === undefined), "the generation dissolved")
      const again = yield* rank(1, 1)
      expect(yield* r0.next).toMatchObject({ _tag: "ProvideId", generation: 1 })
      yield* r0.link.send(new IdProvided({ generation: 1, id: idOf(3) }))
      const ready = yield* again.next
      expect(ready).toMatchObject({ _tag: "Ready", generation: 1, members: [0, 1] })
      // Rank 1 is a new process without generation 0's communicator: no shrink, everyone builds anew.
      expect(ready._tag === "Ready" && ready.shrinkOf).toBeUndefined()
    }), 10_000)

  effect.live("a generator that cannot make an id fails the rendezvous with its reason", () =>
    Effect.gen(function*() {
      const { failures, rank } = yield* gateWith([0], [])
      const r0 = yield* rank(0)
      expect((yield* r0.next)._tag).toBe("ProvideId")
      yield* r0.link.send(new IdFailed({ generation: 0, reason: "NCCL not found; searched: x" }))
      yield* eventually(Effect.sync(() => failures.length === 1), "the failure reported")
      expect(failures[0]).toBe("the NCCL rendezvous failed: rank 0 could not make an NCCL unique id: NCCL not found; searched: x")
    }), 10_000)

  effect.live("a join for a rank outside the world is refused and asks nothing of anyone", () =>
    Effect.gen(function*() {
      const { gate, rank } = yield* gateWith([0], [])
      const stranger = yield* rank(5)
      yield* stranger.ended // the gate closed its link
      expect(yield* stranger.pending).toBe(0)
      expect(yield* gate.current).toBeUndefined()
      const r0 = yield* rank(0)
      expect((yield* r0.next)._tag).toBe("ProvideId")
    }), 10_000)

  effect.live("a rank is keyed for its own number alone: another rank's number, the salt, or a key under another name get nowhere", () =>
    Effect.gen(function*() {
      const { gate, rank, salt } = yield* gateWith([0, 1], [])
      // Rank 1's key, joining as rank 0 under its own name: refused by the gate.
      const claimsZero = yield* rank(0, 0, { key: rankKey(salt, 1), keyId: "1" })
      yield* claimsZero.ended
      // Rank 1's key under rank 0's name, and the salt itself: the MAC fails, or the handshake is reset.
      const misnamed = yield* Effect.either(rank(0, 0, { key: rankKey(salt, 1), keyId: "0" }))
      if (misnamed._tag === "Right") yield* misnamed.right.ended
      const salted = yield* Effect.either(rank(0, 0, { key: salt, keyId: "" }))
      if (salted._tag === "Right") yield* salted.right.ended
      for (const attempt of [claimsZero, misnamed._tag === "Right" ? misnamed.right : undefined, salted._tag === "Right" ? salted.right : undefined]) {
        if (attempt !== undefined) expect(yield* attempt.pending).toBe(0)
      }
      expect(yield* gate.current).toBeUndefined()
      // The real ranks still form a generation: none of the above took rank 0's place.
      const r0 = yield* rank(0)
      const r1 = yield* rank(1)
      expect((yield* r0.next)._tag).toBe("ProvideId")
      expect(yield* r1.pending).toBe(0)
    }), 10_000)
})
