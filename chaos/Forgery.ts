/**
 * The `forged_frames` fault: what an attacker without the run's key throws
 * at a running launcher (issue 18), all at once, mid-epoch.
 *
 * - Joins under a wrong salt (their first frame fails its MAC).
 * - Relays keyed as the victim host under a wrong key, claiming its ranks.
 * - Rendezvous joins under a wrong key for rank 0.
 * - Half-sent frames: a join handshake, then a header announcing 16 MiB,
 *   then nothing, held open until the run ends.
 *
 * None may be answered, and the run must end exactly as it would have.
 * Returns the tries that got an answer (each one a defect) and the sockets
 * to close at the end.
 */
import * as Effect from "effect/Effect"
import { magic } from "../src/wire/Channel.ts"
import { controlCodec, RelayHello } from "../src/wire/messages/ControlMessages.ts"
import { Hello, joinCodec } from "../src/wire/messages/JoinMessages.ts"
import { newNonce, newSalt } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import { Join, rendezvousCodec } from "../src/wire/messages/RendezvousMessages.ts"

const FORGED_JOINS = 48
const FORGED_RELAYS = 8
const FORGED_RENDEZVOUS = 8
const HALF_SENT = 16

/** Dial with `options`, send `first`, and say whether anything came back within 1 s. */
const answered = <In, Out>(options: Link.DialOptions<In, Out>, first: Out): Promise<boolean> =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const link = yield* Effect.either(Link.dial(options))
    if (link._tag === "Left") return false
    yield* Effect.ignore(link.right.send(first))
    return yield* Effect.isSuccess(link.right.receiveWithin(1_000, "an answer"))
  })))

export interface Forged {
  readonly answered: ReadonlyArray<string>
  readonly close: () => void
}

export const forge = async (address: string, port: number, victimHost: string): Promise<Forged> => {
  const at = { host: address, port, handshakeMs: 2_000 }
  // Half-sent frames first: they are held while everything else is tried.
  const held = await Promise.all(Array.from({ length: HALF_SENT }, async () => {
    const socket = await Bun.connect({ hostname: address, port, socket: { data() {} } })
    const header = new Uint8Array(16)
    new DataView(header.buffer).setUint32(0, 16 << 20, true)
    socket.write(Buffer.concat([magic.join, newNonce(), new Uint8Array([0]), header]))
    return socket
  }))
  const tries: Array<Promise<string | undefined>> = []
  const note = (what: string, got: Promise<boolean>) => tries.push(got.then((yes) => (yes ? what : undefined), () => undefined))
  for (let i = 0; i < FORGED_JOINS; i++) {
    note(`join ${i}`, answered({ ...at, channel: "join", salt: newSalt(), inbound: joinCodec, outbound: joinCodec }, new Hello({ host: victimHost, devices: [0], deviceLabels: ["cpu"], pid: 1, version: "0" })))
  }
  for (let i = 0; i < FORGED_RELAYS; i++) {
    note(`relay ${i}`, answered({ ...at, channel: "control", salt: newSalt(), keyId: victimHost, inbound: controlCodec, outbound: controlCodec }, new RelayHello({ host: victimHost, ranks: [0] })))
  }
  for (let i = 0; i < FORGED_RENDEZVOUS; i++) {
    note(`rendezvous ${i}`, answered({ ...at, channel: "rendezvous", salt: newSalt(), keyId: "0", inbound: rendezvousCodec, outbound: rendezvousCodec }, new Join({ rank: 0, incarnation: 0 })))
  }
  const got = await Promise.all(tries)
  return { answered: got.filter((what): what is string => what !== undefined), close: () => held.forEach((socket) => socket.terminate()) }
}
