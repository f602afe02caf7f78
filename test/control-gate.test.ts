/**
 * The ControlGate over real sockets (PortMux, Link), its relays dialled in
 * this process: a relay speaks only for its own host's ranks, a quiet link
 * gets the launcher's beat, and a link the launcher already talks on gets none.
 */
import { describe, expect } from "bun:test"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import * as ControlGate from "../src/launcher/front/ControlGate.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import { controlCodec, type ControlMessage, FromRank, HostBeats, RelayHello, ToRanks } from "../src/wire/messages/ControlMessages.ts"
import { Attach, CoordinatorBeat } from "../src/wire/messages/CoordinatorMessages.ts"
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
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(relay.receive, (message) => Effect.map(Clock.currentTimeMillis, (at) => received.push({ at, message })))).pipe(Effect.ignore))
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

  effect.it("a quiet link gets a LauncherBeat at the first 250 ms check once it has been quiet for the beat interval and 100 ms; a link the launcher talks on gets none", () =>
    Effect.gen(function*() {
      // The gate's clock is the TestClock: time moves in the gate's own check steps, and only here, so a loaded
      // machine's late timer can neither make a busy link look quiet nor stretch a quiet one's gap.
      const started = yield* gate
      const quiet = yield* relayOn(started, "node-a")
      const busy = yield* relayOn(started, "node-b")
      // Both registered at 0 ms, RelayAccepted the last thing sent to either. With a 1,000 ms beat interval a
      // link is quiet once nothing went down it for 1,100 ms: the checks at 1,250, 2,500 and 3,750 ms beat it.
      const beatsBy = (ms: number) => [1_250, 2_500, 3_750].filter((at) => at <= ms).length
      const order = new ToRanks({ ranks: [2, 3], order: new CoordinatorBeat() })
      for (let step = 1; step <= 16; step++) {
        yield* TestClock.adjust("250 millis")
        // Each beat due by now has arrived before time moves on, so it is stamped with the step it was sent at.
        yield* eventually(Effect.sync(() => quiet.received.length >= beatsBy(step * 250)), `the beats due by ${step * 250} ms`)
        // The launcher talks on node-b's link at every step: never quiet for 1,100 ms.
        yield* started.control.send("node-b", order)
        yield* eventually(Effect.sync(() => busy.received.length >= step), `order ${step} on node-b's link`)
      }
      expect(busy.received.map(({ at, message }) => [at, message._tag])).toEqual(Array.from({ length: 16 }, (_, at) => [(at + 1) * 250, "ToRanks"]))
      expect(quiet.received.map(({ at, message }) => [at, message._tag])).toEqual([[1_250, "LauncherBeat"], [2_500, "LauncherBeat"], [3_750, "LauncherBeat"]])
    }))
})
