/**
 * Secrets never travel in clear: an Accept's env and args cross the wire
 * encrypted (AES-256-GCM inside the authenticated frame), while messages
 * without secrets stay readable, which shows the tap sees the traffic. The
 * tap is a TCP relay between a real dialer and a real mux that records every
 * byte the launcher sends; the sealing primitives are checked on literal
 * inputs.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { Socket } from "bun"
import * as Actor from "../src/kernel/Actor.ts"
import * as PortMux from "../src/launcher/front/PortMux.ts"
import * as Codec from "../src/wire/Codec.ts"
import { Abort, Accept, Hello, JoinMessage } from "../src/wire/messages/JoinMessages.ts"
import { newSalt } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import { open, seal } from "../src/wire/Seal.ts"
import { effect } from "./support/effect.ts"
import { runSpec } from "./support/run-spec.ts"

const join = Codec.make("join", JoinMessage)
const key = new Uint8Array(32).fill(9)
const text = new TextEncoder().encode("HF_TOKEN=secret-token-1234")

describe("seal and open", () => {
  test("what is sealed opens with the same key, kind and sequence, and with nothing else", () => {
    const sealed = seal(key, 3, 7n, text)
    expect(sealed.length).toBe(text.length + 16)
    expect(Buffer.from(sealed).includes(Buffer.from("secret-token"))).toBe(false)
    expect(open(key, 3, 7n, sealed)).toEqual(text)
    expect(open(new Uint8Array(32).fill(8), 3, 7n, sealed)).toBeUndefined()
    expect(open(key, 4, 7n, sealed)).toBeUndefined()
    expect(open(key, 3, 8n, sealed)).toBeUndefined()
    const altered = new Uint8Array(sealed)
    altered[0]! ^= 1
    expect(open(key, 3, 7n, altered)).toBeUndefined()
    expect(open(key, 3, 7n, sealed.subarray(0, 10))).toBeUndefined()
  })
})

/** A TCP relay to `port` that records every byte coming back from it. */
const tap = (port: number) => {
  const fromServer: Array<Uint8Array> = []
  const server = Bun.listen<{ upstream?: Socket<unknown>; early: Array<Uint8Array> }>({
    hostname: "127.0.0.1",
    port: 0,
    data: { early: [] },
    socket: {
      open: (client) => {
        client.data = { early: [] }
        void Bun.connect({
          hostname: "127.0.0.1",
          port,
          socket: {
            open: (upstream) => {
              client.data.upstream = upstream
              for (const chunk of client.data.early.splice(0)) upstream.write(chunk)
            },
            data: (_upstream, bytes) => {
              fromServer.push(new Uint8Array(bytes))
              client.write(bytes)
            },
            close: () => void client.end()
          }
        })
      },
      data: (client, bytes) => {
        if (client.data.upstream === undefined) client.data.early.push(new Uint8Array(bytes))
        else client.data.upstream.write(bytes)
      },
      close: (client) => void client.data.upstream?.end()
    }
  })
  return { port: server.port, seen: () => Buffer.concat(fromServer), stop: () => server.stop(true) }
}

effect.live("an Accept's env and args are unreadable on the wire; an Abort's reason is readable (the tap sees the traffic)", () =>
  Effect.gen(function*() {
    const salt = newSalt()
    const owner = yield* Actor.spawn<PortMux.Accepted, Scope.Scope>({
      name: "join-owner",
      handlers: {
        Accepted: ({ connection }) =>
          Effect.gen(function*() {
            const link = yield* Link.accept(connection, { channel: "join", keyFor: Link.unnamedKey(salt), inbound: join, outbound: join })
            yield* link.receive
            yield* link.send(new Accept({
              ranks: [0],
              formationWaitMs: 1_000,
              spec: runSpec({ env: { HF_TOKEN: "secret-token-1234" }, args: ["--api-key", "k-98765-secret"] })
            }))
            yield* link.send(new Abort({ reason: "a readable reason, not a secret" }))
          }).pipe(Effect.ignore, Effect.forkScoped, Effect.asVoid)
      }
    })
    const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 2_000, owners: { join: owner } })
    const wire = tap(mux.port)
    yield* Effect.addFinalizer(() => Effect.sync(wire.stop))
    const link = yield* Link.dial({ host: "127.0.0.1", port: wire.port, channel: "join", salt, inbound: join, outbound: join })
    yield* link.send(new Hello({ host: "a", devices: [0], deviceLabels: ["cpu"], pid: 1, version: "0.1.0" }))
    const accept = yield* link.receive
    expect(accept._tag === "Accept" && [accept.spec.env, accept.spec.args]).toEqual([{ HF_TOKEN: "secret-token-1234" }, ["--api-key", "k-98765-secret"]])
    expect(yield* link.receive).toEqual(new Abort({ reason: "a readable reason, not a secret" }))
    const seen = wire.seen()
    expect(seen.includes(Buffer.from("a readable reason, not a secret"))).toBe(true)
    expect(seen.includes(Buffer.from("secret-token-1234"))).toBe(false)
    expect(seen.includes(Buffer.from("k-98765-secret"))).toBe(false)
    expect(seen.includes(Buffer.from("HF_TOKEN"))).toBe(false)
  }), 10_000)
