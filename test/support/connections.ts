/**
 * A loopback listener (127.0.0.1, port 0) that wraps every accepted socket in a `Connection` as it opens,
 * as the mux does: `next` takes the oldest one not yet taken, waiting for it. Stopped with the scope.
 */
import type { Socket } from "bun"
import * as Effect from "effect/Effect"
import { Connection, forwardingHandlers, type SocketData } from "../../src/wire/Connection.ts"
import { eventually } from "./effect.ts"

export const listenForConnections = Effect.gen(function*() {
  const accepted: Array<Connection> = []
  const server = Bun.listen<SocketData>({
    hostname: "127.0.0.1",
    port: 0,
    data: {},
    socket: { ...forwardingHandlers, open: (socket: Socket<SocketData>) => void accepted.push(new Connection(socket)) }
  })
  yield* Effect.addFinalizer(() => Effect.sync(() => server.stop(true)))
  const next = Effect.gen(function*() {
    yield* eventually(Effect.sync(() => accepted.length > 0), "a connection accepted")
    return accepted.shift()!
  })
  return { port: server.port, next }
})
