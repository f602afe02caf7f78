/**
 * The ControlGate over real sockets (PortMux, Link), its relays dialled in
 * this process: a relay speaks only for its own host's ranks, a quiet link
 * gets the launcher's beat, and a link the launcher already talks on gets none.
 */
import { describe, expect } from "bun:test"
import * as Effect from "effect/Effect"
import * as ControlGate from "../src/actors/launcher/ControlGate.ts"
import * as PortMux from "../src/actors/launcher/PortMux.ts"
import { controlCodec, type ControlMessage, FromRank, HostBeats, RelayHello, ToRanks } from "../src/wire/ControlMessages.ts"
import { Attach, CoordinatorBeat } from "../src/wire/CoordinatorMessages.ts"
import { hostKey, newSalt, rankKey } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import { effect, eventually } from "./support/effect.ts"

const world = new Map([["node-a", [0, 1]], ["node-b", [2, 3]]])

const gate = Effect.gen(function*() {
  const salt = newSalt()
  const delivered: Array<{ host: string; message: ControlMessage }> = []
  const control = yield* ControlGate.make({
    salt,
    ranksOf: (host) => Effect.succeed(world.get(host)),
    handshakeMs: 5_000,
    beatEveryMs: 1_000,
    onMessage: (from, message) => Effect.sync(() => delivered.push({ host: from, message })),
    onClosed: () => Effect.void
  })
  const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 5_000, owners: { control: control.owner } })
  /** A relay's link, holding `key` under the name `keyId`. */
  const dial = (key: Uint8Array, keyId: string) =>
    Link.dial({
      channel: "control",
      host: "127.0.0.1",
      port: mux.port,
      salt: key,
      keyId,
      inbound: controlCodec,
      outbound: controlCodec,
      handshakeMs: 5_000
    })
  return { control, delivered, dial, salt }
})

/** A relay of `host` registered on the gate, and what it hears from then on. */
const relayOn = ({ dial, salt }: Effect.Effect.Success<typeof gate>, host: string) =>
  Effect.gen(function*() {
    // A relay holds its host's key, named by the host.
    const relay = yield* dial(hostKey(salt, host), host)
    yield* relay.send(new RelayHello({ host, ranks: world.get(host)! }))
    expect((yield* relay.receive)._tag).toBe("RelayAccepted")
    const received: Array<{ at: number; message: ControlMessage }> = []
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(relay.receive, (message) => Effect.sync(() => received.push({ at: performance.now(), message })))).pipe(Effect.ignore))
    return { received, relay }
  })

const gateWithRelay = (host: string) =>
  Effect.gen(function*() {
    const started = yield* gate
    const { received, relay } = yield* relayOn(started, host)
    return { control: started.control, delivered: started.delivered, received, relay }
  })

/** What a relay's link hears first after its RelayHello: the answer's tag, or how the link ended. */
const firstAnswer = (relay: Link.Link<ControlMessage, ControlMessage>, host: string) =>
  Effect.gen(function*() {
    yield* Effect.ignore(relay.send(new RelayHello({ host, ranks: world.get(host) ?? [] })))
    const answer = yield* Effect.either(relay.receiveWithin(5_000, "an answer"))
    return answer._tag === "Right" ? answer.right : { _tag: "Ended" as const, reason: answer.left.reason }
  })

describe("ControlGate", () => {
  effect.live("a relay is keyed for its own host alone: the salt, a rank's key, another host's key or another host's name get nowhere", () =>
    Effect.gen(function*() {
      const { delivered, dial, salt } = yield* gate
      // Keys computed here from RFC 5869 by hand (test/keys.test.ts pins them): what each party holds.
      const tries = [
        { what: "the salt itself, unnamed", key: salt, keyId: "", claims: "node-a" },
        { what: "the salt itself, named", key: salt, keyId: "node-a", claims: "node-a" },
        { what: "rank 0's key (what a rank of node-a holds)", key: rankKey(salt, 0), keyId: "node-a", claims: "node-a" },
        { what: "node-b's key, named node-a", key: hostKey(salt, "node-b"), keyId: "node-a", claims: "node-a" }
      ]
      for (const attempt of tries) {
        const relay = yield* dial(attempt.key, attempt.keyId).pipe(Effect.either)
        // Either the handshake is reset, or the first frame fails its MAC: no answer at all.
        const answer = relay._tag === "Left" ? { _tag: "Ended", reason: relay.left.reason } : yield* firstAnswer(relay.right, attempt.claims)
        expect({ what: attempt.what, answer: answer._tag }).toEqual({ what: attempt.what, answer: "Ended" })
      }
      // node-a's own key, claiming node-b: told why, and refused.
      const impostor = yield* dial(hostKey(salt, "node-a"), "node-a")
      const refused = yield* firstAnswer(impostor, "node-b")
      expect(refused).toMatchObject({ _tag: "RelayRejected", reason: "a relay keyed for node-a claims host node-b" })
      // And node-b's key, named node-b, still registers node-b: nothing above took its place.
      const real = yield* dial(hostKey(salt, "node-b"), "node-b")
      expect((yield* firstAnswer(real, "node-b"))._tag).toBe("RelayAccepted")
      expect(delivered).toEqual([])
    }))

  effect.live("a relay speaks for its own ranks only: another host's rank in a report or a beat is dropped", () =>
    Effect.gen(function*() {
      const { delivered, relay } = yield* gateWithRelay("node-a")
      yield* relay.send(new FromRank({ rank: 2, report: new Attach() }))
      yield* relay.send(new HostBeats({ ranks: [0, 3] }))
      yield* relay.send(new FromRank({ rank: 1, report: new Attach() }))
      yield* relay.send(new HostBeats({ ranks: [0, 1] }))
      yield* eventually(Effect.sync(() => delivered.length >= 2), "the relay's own messages")
      // Sent after the foreign ones on the same link: had those passed, they would be here first.
      expect(delivered).toEqual([
        { host: "node-a", message: new FromRank({ rank: 1, report: new Attach() }) },
        { host: "node-a", message: new HostBeats({ ranks: [0, 1] }) }
      ])
    }))

  effect.live("a quiet link gets a LauncherBeat every ~1.1 s; a link the launcher keeps talking on gets none", () =>
    Effect.gen(function*() {
      const started = yield* gate
      const quiet = yield* relayOn(started, "node-a")
      const busy = yield* relayOn(started, "node-b")
      // The launcher talks on node-b's link the whole time: the next order as soon as the last one is there,
      // so it is never quiet for more than a few ms (a beat needs 1.1 s of quiet: a loaded machine's late
      // timer cannot make it look quiet). It talks until the same gate has beaten the quiet link three
      // times: its beat loop has run for over 3 s, past several beat intervals, while node-b's link was busy.
      const order = new ToRanks({ ranks: [2, 3], order: new CoordinatorBeat() })
      const deadline = performance.now() + 10_000
      let sent = 0
      while (quiet.received.length < 3) {
        if (performance.now() > deadline) return yield* Effect.dieMessage(`timed out waiting for three beats on the quiet link (${quiet.received.length} so far)`)
        yield* started.control.send("node-b", order)
        sent += 1
        yield* eventually(Effect.sync(() => busy.received.length >= sent), `order ${sent} on node-b's link`)
      }
      expect(busy.received.map(({ message }) => message._tag)).toEqual(Array(sent).fill("ToRanks"))

      expect(quiet.received.every(({ message }) => message._tag === "LauncherBeat")).toBe(true)
      const gaps = quiet.received.slice(1).map(({ at }, index) => at - quiet.received[index]!.at)
      // QUIET_MS (1,100) checked every 250 ms: a relay waits about 1.35 s at most. The bound is what that
      // serves, a relay's 2 s minimum timeout (twice the interval), not the 1.35 s: a loaded machine's late
      // timer may stretch a gap, while a gate that beat only every 2 s or more would drop the relays.
      for (const gap of gaps) expect(gap).toBeLessThan(2_000)
    }), 15_000)
})
