/**
 * PortMux: the launcher's one TCP port.
 *
 * Every connection must name its channel in its first four bytes within a
 * deadline (`Channel`). The mux hands it, with any bytes read past the
 * magic, to the actor that owns that channel in this run, as an `Accepted`
 * message. HTTP goes to the status server straight from the socket callback,
 * never queued behind the control plane's work (a big run's formation keeps
 * thousands of fibers busy). A connection in another wire protocol (a
 * cohort of another version: `CoJ1` against this `CoJ2`) is reset and logged
 * with both protocols and what to do. A connection with an unknown
 * magic, that closes early or that misses the deadline is closed and logged
 * (once per peer address and reason); one for a channel nobody owns is reset
 * at once, so its dialer fails fast instead of waiting. Nothing a connection
 * does delays any other: the socket callbacks only buffer and route.
 *
 * Strangers are capped: connections whose peer has not yet authenticated (no
 * frame of theirs has passed its MAC; HTTP until the status server takes it)
 * count against a limit per source address and one in all. One over either is
 * reset at once, so however many a flood opens, the launcher holds a bounded
 * number of them, each with at most a 64 KiB first frame.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { Socket } from "bun"
import * as Actor from "../Actor.ts"
import { type ChannelName, MAGIC_BYTES, otherProtocol, type Route, route } from "../../wire/Channel.ts"
import { Connection, forwardingHandlers, type SocketData } from "../../wire/Connection.ts"
import * as CallbackFibers from "../CallbackFibers.ts"

/** The message a channel owner receives: a connection that is now its own. */
export class Accepted extends Data.TaggedClass("Accepted")<{ readonly connection: Connection }> {}

/**
 * A channel's owner: an actor told each connection (`Accepted`), or one that takes it straight from the socket
 * callback (`accept`, which must only start work: the join gate forks its handshake there, one fiber per
 * connection instead of a message through a mailbox and then a fiber).
 */
export type Owner = Actor.ActorRef<Accepted> | { readonly accept: (connection: Connection) => void }

/** The status server: called with each HTTP connection at once, from the socket callback. */
export interface HttpOwner {
  readonly serve: (connection: Connection) => void
}

export class BindError extends Data.TaggedError("BindError")<{
  readonly address: string
  readonly port: number
  readonly detail: string
}> {
  override get message(): string {
    return `cannot listen on ${this.address}:${this.port}: ${this.detail}`
  }
}

export interface MuxStats {
  readonly accepted: number
  readonly routed: Readonly<Record<string, number>>
  readonly dropped: Readonly<Record<string, number>>
}

class Sniffed extends Data.TaggedClass("Sniffed")<{ readonly connection: Connection; readonly route: Route }> {}
class Dropped extends Data.TaggedClass("Dropped")<{
  readonly peer: string
  readonly address: string
  readonly reason: string
  readonly quiet: boolean
}> {}
type MuxMessage = Sniffed | Dropped

export interface PortMuxOptions {
  /** `0.0.0.0`, or `127.0.0.1` when only tunnels (or this host) reach the launcher. */
  readonly address: string
  /** 0 picks a free port. */
  readonly port: number
  /** How long a connection has to name its channel (already scaled). */
  readonly magicDeadlineMs: number
  readonly owners: Partial<Record<ChannelName, Owner>> & { readonly http?: HttpOwner }
  /** Connections not yet authenticated, from one source address (default 1,024: a big world's hosts join at once). */
  readonly maxStrangersPerSource?: number
  /** …and in all (default 2,048). */
  readonly maxStrangers?: number
}

export interface PortMux {
  readonly address: string
  /** The port actually bound (the chosen one when asked for 0). */
  readonly port: number
  readonly stats: Effect.Effect<MuxStats>
}

export const start = (options: PortMuxOptions): Effect.Effect<PortMux, BindError, Scope.Scope> =>
  Effect.gen(function*() {
    // Socket callbacks hand connections on through fibers owned by this scope.
    const callbacks = yield* CallbackFibers.make("port mux")
    let accepted = 0
    const routed: Record<string, number> = {}
    const dropped: Record<string, number> = {}
    const logged = new Set<string>()
    const maxPerSource = options.maxStrangersPerSource ?? 1_024
    const maxStrangers = options.maxStrangers ?? 2_048
    /** Connections not yet authenticated: in all, and by source address. */
    let strangers = 0
    const strangersFrom = new Map<string, number>()

    /**
     * Count every drop; log the first per peer address and reason. A dialer
     * that closes before saying anything (a port probe, a process stopped
     * while connecting) is only a debug line: it harms no one.
     */
    const dropOnce = (address: string, peer: string, reason: string, quiet = false) =>
      Effect.suspend(() => {
        dropped[reason] = (dropped[reason] ?? 0) + 1
        const key = `${address}\u0000${reason}`
        if (logged.has(key)) return Effect.void
        logged.add(key)
        const line = `closed a connection from ${peer}: ${reason} (further ones from ${address} for this reason are not logged)`
        return quiet ? Effect.logDebug(line) : Effect.logWarning(line)
      })

    /**
     * A connection nobody took: the run has no owner for its channel, or it closed before the socket callback could
     * hand it over (an open connection with an owner goes to it from `sniff`, never through here).
     */
    const unowned = (connection: Connection, owner: Owner | undefined, name: string) => {
      if (owner !== undefined) return dropOnce(connection.address, connection.peer, "closed before its owner took it")
      connection.reset()
      return dropOnce(connection.address, connection.peer, `no ${name} service in this run`)
    }

    const mux = yield* Actor.spawn<MuxMessage, Scope.Scope>({
      name: "port-mux",
      handlers: {
        Sniffed: ({ connection, route: where }) => {
          switch (where._tag) {
            case "Channel":
              return unowned(connection, options.owners[where.channel], `${where.channel} channel`)
            case "OtherProtocol":
              // Its frames could never authenticate here: say why now, not with a tag that fails later.
              connection.reset()
              return dropOnce(connection.address, connection.peer, otherProtocol(where.channel, where.protocol))
            case "Http":
              // Served from `sniff`; a run without a status server resets it here.
              return unowned(connection, undefined, "status (HTTP)")
            case "Unknown":
              connection.end()
              return dropOnce(connection.address, connection.peer, "unknown channel magic")
          }
        },
        Dropped: ({ address, peer, quiet, reason }) => dropOnce(address, peer, reason, quiet)
      }
    })
    const tell = (message: MuxMessage) => callbacks.fork(mux.tell(message))

    /** Read the magic (with a deadline), then let the mux route the connection. */
    const sniff = (connection: Connection) => {
      accepted += 1
      const { address } = connection
      const from = strangersFrom.get(address) ?? 0
      if (strangers >= maxStrangers || from >= maxPerSource) {
        connection.reset()
        const reason = from >= maxPerSource
          ? `over ${maxPerSource} connections from ${address} that have not authenticated`
          : `over ${maxStrangers} connections that have not authenticated`
        tell(new Dropped({ address, peer: connection.peer, reason, quiet: false }))
        return
      }
      strangers += 1
      strangersFrom.set(address, from + 1)
      connection.untilTrusted(() => {
        strangers -= 1
        const left = (strangersFrom.get(address) ?? 1) - 1
        if (left === 0) strangersFrom.delete(address)
        else strangersFrom.set(address, left)
      })
      void connection.take(MAGIC_BYTES, options.magicDeadlineMs).then((first) => {
        if (first === "timeout") {
          connection.reset()
          tell(new Dropped({ address: connection.address, peer: connection.peer, reason: `no channel magic within ${options.magicDeadlineMs} ms`, quiet: false }))
        } else if (first === "closed") {
          tell(new Dropped({ address: connection.address, peer: connection.peer, reason: "closed before sending its channel magic", quiet: true }))
        } else {
          const where = route(first)
          if (where._tag === "Http" && options.owners.http !== undefined) {
            // HTTP keeps the method bytes.
            connection.unread(first)
            // The status server bounds its own requests (size, deadline): HTTP is not counted past here.
            connection.trusted()
            routed["status (HTTP)"] = (routed["status (HTTP)"] ?? 0) + 1
            return options.owners.http.serve(connection)
          }
          const owner = where._tag === "Channel" ? options.owners[where.channel] : undefined
          if (where._tag === "Channel" && owner !== undefined && !connection.isClosed) {
            // The common case goes straight to its owner from here: one fiber, not a message through the mux's
            // mailbox and then a fiber (a big world's hosts all dial at once, twice each). The connection stays
            // parked until its owner takes it.
            const name = `${where.channel} channel`
            routed[name] = (routed[name] ?? 0) + 1
            if ("accept" in owner) return owner.accept(connection)
            return callbacks.fork(owner.tell(new Accepted({ connection })).pipe(Effect.catchAll(() => Effect.sync(() => connection.reset()))))
          }
          // The rest (no owner, another protocol, an unknown magic, closed already) is the mux's to drop and log.
          tell(new Sniffed({ connection, route: where }))
        }
      })
    }

    const listener = yield* Effect.try({
      try: () =>
        Bun.listen<SocketData>({
          hostname: options.address,
          port: options.port,
          // One run per port: never share it through SO_REUSEPORT.
          exclusive: true,
          data: {},
          socket: { ...forwardingHandlers, open: (socket: Socket<SocketData>) => sniff(new Connection(socket)) }
        }),
      catch: (error) => {
        const code = (error as { code?: string }).code
        return new BindError({
          address: options.address,
          port: options.port,
          detail: code === "EADDRINUSE"
            ? "the port is already in use (another cohort run, or another program); set `controller.port: 0` to pick a free port, or choose another port"
            : `${error instanceof Error ? error.message : String(error)}; check controller.host and controller.port`
        })
      }
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => listener.stop(true)))
    yield* Effect.logDebug(`listening on ${options.address}:${listener.port}`)

    const mux_: PortMux = {
      address: options.address,
      port: listener.port,
      stats: Effect.sync(() => ({ accepted, routed: { ...routed }, dropped: { ...dropped } }))
    }
    return mux_
  })
