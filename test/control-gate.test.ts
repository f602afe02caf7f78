/**
 * The ControlGate over real sockets (PortMux, Link), its relays dialled in
 * this process: a relay speaks only for its own host's ranks, a quiet link
 * gets the launcher's beat, and a link the launcher already talks on gets none.
 */
import { describe, expect } from "bun:test"
import * as Effect from "effect/Effect"
import * as ControlGate from "../src/actors/launcher/ControlGate.ts"
import * as PortMux from "../src/actors/PortMux.ts"
import { type ControlMessage, FromRank, HostBeats, RelayHello, ToRanks } from "../src/wire/ControlMessages.ts"
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
    hosts: Effect.succeed(world),
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
      inbound: ControlGate.controlCodec,
      outbound: ControlGate.controlCodec,
      handshakeMs: 5_000
    })
  return { control, delivered, dial, salt }
})

const gateWithRelay = (host: string) =>
  Effect.gen(function*() {
    const { control, delivered, dial, salt } = yield* gate
    // A relay holds its host's key, named by the host.
    const relay = yield* dial(hostKey(salt, host), host)
    yield* relay.send(new RelayHello({ host, ranks: world.get(host)! }))
    expect((yield* relay.receive)._tag).toBe("RelayAccepted")
    const received: Array<{ at: number; message: ControlMessage }> = []
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(relay.receive, (message) => Effect.sync(() => received.push({ at: performance.now(), message })))).pipe(Effect.ignore))
    return { control, delivered, received, relay }
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
      const quiet = yield* gateWithRelay("node-a")
      yield* eventually(Effect.sync(() => quiet.received.length >= 3), "three beats on a quiet link", 6_000)
      expect(quiet.received.every(({ message }) => message._tag === "LauncherBeat")).toBe(true)
      const gaps = quiet.received.slice(1).map(({ at }, index) => at - quiet.received[index]!.at)
      // QUIET_MS (1,100) checked every 250 ms: a relay never waits much more than 1.35 s, well inside its 2 s minimum timeout.
      for (const gap of gaps) expect(gap).toBeLessThan(1_700)

      const busy = yield* gateWithRelay("node-b")
      const order = new ToRanks({ ranks: [2, 3], order: new CoordinatorBeat() })
      // Every 600 ms rather than every second: a loaded machine's late timer must not look like a quiet link.
      for (let beat = 0; beat < 5; beat++) {
        yield* busy.control.send("node-b", order)
        yield* Effect.sleep("600 millis")
      }
      yield* eventually(Effect.sync(() => busy.received.length >= 5), "the five orders")
      expect(busy.received.map(({ message }) => message._tag)).toEqual(Array(5).fill("ToRanks"))
    }), 15_000)
})
