/**
 * A channel owner for mux tests: it runs the listener's side of a Link (with
 * the join codec) on every connection it is handed, answers each Hello with
 * Abort{reason: "hello <host>"}, and reports when it took a connection and
 * how the link ended. The peer is read when the connection is handed over,
 * while it is still open.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Actor from "../../src/kernel/Actor.ts"
import type * as PortMux from "../../src/launcher/front/PortMux.ts"
import type { ChannelName } from "../../src/wire/Channel.ts"
import * as Codec from "../../src/wire/Codec.ts"
import { Abort, JoinMessage } from "../../src/wire/messages/JoinMessages.ts"
import * as Link from "../../src/wire/Link.ts"

const join = Codec.make("join", JoinMessage)

export interface OwnerHooks {
  /** The owner was handed a connection from `peer` (before its handshake). */
  readonly taken?: (peer: string) => void
  /** The link with `peer` ended (every link ends with a LinkError, EOF included). */
  readonly ended?: (peer: string, error: Link.LinkError) => void
}

export const echoOwner = (channel: ChannelName, salt: Uint8Array, hooks: OwnerHooks = {}) =>
  Actor.spawn<PortMux.Accepted, Scope.Scope>({
    name: `${channel}-owner`,
    handlers: {
      Accepted: ({ connection }) => {
        const peer = connection.peer
        hooks.taken?.(peer)
        return Effect.gen(function*() {
          const link = yield* Link.accept(connection, { channel, keyFor: Link.unnamedKey(salt), inbound: join, outbound: join, handshakeMs: 5_000 })
          while (true) {
            const message = yield* link.receive
            // A send can fail only once the link has ended; the next receive says why it ended.
            if (message._tag === "Hello") yield* Effect.ignore(link.send(new Abort({ reason: `hello ${message.host}` })))
          }
        }).pipe(
          Effect.catchAll((error) => Effect.sync(() => hooks.ended?.(peer, error))),
          Effect.forkScoped,
          Effect.asVoid
        )
      }
    }
  })
