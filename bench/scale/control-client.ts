/**
 * Relays without ranks, for `heartbeat-path.ts`: `bun control-client.ts PORT SALT_HEX HOSTS [BEAT_EVERY_MS]`
 * registers HOSTS relays of 8 ranks on the control channel, attaches every rank,
 * says `attached`, and after `beat` on stdin sends each host's HostBeats every
 * BEAT_EVERY_MS (default 1 s), as a relay does (the hosts spread over the interval). Exits when stdin closes.
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as Codec from "../../src/wire/Codec.ts"
import { ControlMessage, FromRank, HostBeats, RelayHello } from "../../src/wire/messages/ControlMessages.ts"
import { Attach } from "../../src/wire/messages/CoordinatorMessages.ts"
import { hostKey, saltFromHex } from "../../src/wire/Keys.ts"
import * as Link from "../../src/wire/Link.ts"

const [port, saltHex, hostsText, beatEveryText] = process.argv.slice(2)
const BEAT_EVERY_MS = Number(beatEveryText ?? 1_000)
const HOSTS = Number(hostsText)
const DEVICES = 8
const salt = saltFromHex(saltHex ?? "")
if (salt === undefined) throw new Error("usage: control-client.ts PORT SALT_HEX HOSTS")
const codec = Codec.make("control", ControlMessage)
const beating = Effect.runSync(Deferred.make<void>())
let attached = 0

const relay = (host: number) =>
  Effect.scoped(Effect.gen(function*() {
    const name = `sim-${host}`
    const link = yield* Link.dial({ channel: "control", host: "127.0.0.1", port: Number(port), salt: hostKey(salt, name), keyId: name, inbound: codec, outbound: codec, handshakeMs: 60_000 })
    const ranks = Array.from({ length: DEVICES }, (_, slot) => host * DEVICES + slot)
    yield* link.send(new RelayHello({ host: name, ranks }))
    yield* link.receive
    yield* Effect.forkScoped(Effect.forever(link.receive).pipe(Effect.ignore))
    for (const rank of ranks) yield* link.send(new FromRank({ rank, report: new Attach() }))
    if (++attached === HOSTS) console.log("attached")
    yield* Deferred.await(beating)
    yield* Effect.sleep(Duration.millis((host * BEAT_EVERY_MS) / HOSTS))
    yield* Effect.repeat(link.send(new HostBeats({ ranks })), Schedule.fixed(Duration.millis(BEAT_EVERY_MS)))
  })).pipe(Effect.catchAll((error) => Effect.sync(() => console.error(error.message))))

for (let host = 0; host < HOSTS; host++) Effect.runFork(relay(host))
for await (const chunk of Bun.stdin.stream()) {
  if (new TextDecoder().decode(chunk).includes("beat")) Effect.runSync(Deferred.succeed(beating, undefined))
}
process.exit(0)
