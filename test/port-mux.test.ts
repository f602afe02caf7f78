/**
 * PortMux with real sockets: routing by channel magic, links over it, and
 * the connections it refuses.
 */
import { describe, expect } from "bun:test"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Actor from "../src/actors/Actor.ts"
import * as PortMux from "../src/actors/PortMux.ts"
import * as Codec from "../src/wire/Codec.ts"
import { Abort, Hello, JoinMessage } from "../src/wire/JoinMessages.ts"
import { newSalt } from "../src/wire/Keys.ts"
import * as Link from "../src/wire/Link.ts"
import { effect } from "./support/effect.ts"

const join = Codec.make("join", JoinMessage)
const hello = new Hello({ host: "node-a", devices: [0, 1], deviceLabels: ["cpu", "cpu"], pid: 42, version: "0.1.0" })

/** A join owner that answers each Hello with Abort{reason: host}. */
const echoOwner = (salt: Uint8Array) =>
  Actor.spawn<PortMux.Accepted, Scope.Scope>({
    name: "join-owner",
    handlers: {
      Accepted: ({ connection }) =>
        Effect.gen(function*() {
          const link = yield* Link.accept(connection, { channel: "join", salt, inbound: join, outbound: join })
          const message = yield* link.receive
          if (message._tag === "Hello") yield* link.send(new Abort({ reason: `hello ${message.host}` }))
        }).pipe(Effect.ignore, Effect.forkScoped, Effect.asVoid)
    }
  })

describe("PortMux", () => {
  effect.live("a join link over the mux: hello goes up, the answer comes down", () =>
    Effect.gen(function*() {
      const salt = newSalt()
      const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 1_000, owners: { join: yield* echoOwner(salt) } })
      expect(mux.port).toBeGreaterThan(0)
      const link = yield* Link.dial({ host: "127.0.0.1", port: mux.port, channel: "join", salt, inbound: join, outbound: join })
      yield* link.send(hello)
      expect(yield* link.receive).toEqual(new Abort({ reason: "hello node-a" }))
    }))

  effect.live("a dialer with the wrong salt is dropped without a reply", () =>
    Effect.gen(function*() {
      const salt = newSalt()
      const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 1_000, owners: { join: yield* echoOwner(salt) } })
      const link = yield* Link.dial({ host: "127.0.0.1", port: mux.port, channel: "join", salt: newSalt(), inbound: join, outbound: join })
      yield* link.send(hello)
      const error = yield* Effect.flip(link.receive)
      expect(error.reason).toBe("closed")
    }))

  effect.live("a port held by a live listener is a clear error naming address and port", () =>
    Effect.gen(function*() {
      const first = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 1_000, owners: {} })
      const error = yield* Effect.flip(PortMux.start({ address: "127.0.0.1", port: first.port, magicDeadlineMs: 1_000, owners: {} }))
      expect(error.message).toBe(
        `cannot listen on 127.0.0.1:${first.port}: the port is already in use (another cohort run, or another program); ` +
          "set `controller.port: 0` to pick a free port, or choose another port"
      )
    }))
})
