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
 * (`NoiseLog`: per source prefix and reason, at most once a minute, with
 * counts); one for a channel nobody owns is reset at once, so its dialer
 * fails fast instead of waiting. Nothing a connection does delays any other:
 * the socket callbacks only buffer and route.
 *
 * Connections whose peer has not authenticated are counted at the door
 * (`Door`), per source prefix (`SourcePrefix`: all of loopback is one
 * source) and in all: first as unread, until the nonce and key id that a
 * dialer sends with its magic are read, then, unless the nonce shows that
 * the dialer holds its key (`DoorToken`: every agent, relay and rank does),
 * as a stranger, until its first frame authenticates (HTTP: until the status
 * server takes it). The mux reads them itself (`doorKeys`), before any owner
 * spends anything on the connection. Unread connections are not turned away
 * before they have had their turn to be read, so a flood cannot keep a key
 * holder out; strangers past their few seats are reset at once, and a seated
 * one's first frame must authenticate within `firstFrameMs` of the nonce.
 * However much a flood dials, the launcher holds a bounded number of sockets
 * (each with at most a 64 KiB first frame) and writes a few lines a minute.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { Socket } from "bun"
import * as Actor from "../../kernel/Actor.ts"
import { type ChannelName, magic, MAGIC_BYTES, otherProtocol, type Route, route } from "../../wire/Channel.ts"
import { Connection, forwardingHandlers, type SocketData } from "../../wire/Connection.ts"
import { vouches } from "../../wire/DoorToken.ts"
import * as Link from "../../wire/Link.ts"
import * as CallbackFibers from "../../kernel/CallbackFibers.ts"
import { Door, UNREAD_GRACE_MS } from "./Door.ts"
import type { DoorKeys } from "./DoorKeys.ts"
import { noiseLog } from "./NoiseLog.ts"
import { sourcePrefix } from "./SourcePrefix.ts"

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
  /** Counted at the door now: connections whose nonce is not read yet, and strangers. */
  readonly waiting: { readonly unread: number; readonly strangers: number }
}

/**
 * How long a stranger (a dialer whose nonce did not show its key) has, from the listener's nonce, for a first frame
 * that authenticates, before scaling: a dialer sends it one round trip after the nonce, in milliseconds.
 */
export const STRANGER_FIRST_FRAME_MS = 1_000

class Sniffed extends Data.TaggedClass("Sniffed")<{ readonly connection: Connection; readonly route: Route }> {}
type MuxMessage = Sniffed

export interface PortMuxOptions {
  /** `0.0.0.0`, or `127.0.0.1` when only tunnels (or this host) reach the launcher. */
  readonly address: string
  /** 0 picks a free port. */
  readonly port: number
  /** How long a connection has to name its channel (already scaled). */
  readonly magicDeadlineMs: number
  readonly owners: Partial<Record<ChannelName, Owner>> & { readonly http?: HttpOwner }
  /**
   * The keys the door reads dialers' nonces with, by channel (`DoorKeys`): a key holder's dial is told from a
   * stranger's as soon as its first bytes are read. Without them (tests), each owner's handshake tells the door.
   */
  readonly doorKeys?: DoorKeys
  /**
   * Connections whose first bytes are not read yet, from one source prefix (default 1,024: a big world's agents,
   * all arriving through tunnels from loopback, are accepted together before any is read)…
   */
  readonly maxUnreadPerSource?: number
  /** …and in all (default 2,048): past either, the oldest that has had its turn to be read makes room. */
  readonly maxUnread?: number
  /**
   * Unread connections kept from one source prefix while none has had its turn (default 3,072: a burst of thousands
   * of dials at once is absorbed, and read; 1,024 of `maxUnreadHeld` stay for every other source)…
   */
  readonly maxUnreadHeldPerSource?: number
  /** …and in all (default 4,096): past either, a newcomer is reset. */
  readonly maxUnreadHeld?: number
  /** Strangers (their nonce read: no key shown, not yet authenticated) from one source prefix (default 64)… */
  readonly maxStrangersPerSource?: number
  /** …and in all (default 256): past either, a new stranger is reset at once, before its handshake. */
  readonly maxStrangers?: number
  /** A stranger's time for its first frame (already scaled; default `STRANGER_FIRST_FRAME_MS`). */
  readonly firstFrameMs?: number
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
    const unread = {
      perPrefix: options.maxUnreadPerSource ?? 1_024,
      total: options.maxUnread ?? 2_048,
      heldPerPrefix: options.maxUnreadHeldPerSource ?? 3_072,
      held: options.maxUnreadHeld ?? 4_096
    }
    const strangers = { perPrefix: options.maxStrangersPerSource ?? 64, total: options.maxStrangers ?? 256 }
    const firstFrameMs = options.firstFrameMs ?? STRANGER_FIRST_FRAME_MS
    const door = new Door<Connection>({ unread, strangers })
    /** Connections the door let go: their close is its doing, not news. */
    const evicted = new WeakSet<Connection>()
    /**
     * Connections the door let go at their accept, not reset yet: that waits for the end of the event loop's turn.
     * Bun accepts every pending connection in one go, calling back for each, and reads none of them meanwhile; a
     * reset sent from there would have a flood dial again while that goes on, and keep it going (measured: the
     * launcher then read almost nothing, and let every connection go unread to make room). Held to the end of the
     * turn, the flood can only send what it already had under way, and the accepting stops.
     */
    let letGo: Array<Connection> = []
    /** The end of a turn in which something arrived or was let go: counted for the door, and the let-go reset. */
    let turnEnding = false
    const endTurnLater = () => {
      if (turnEnding) return
      turnEnding = true
      setImmediate(() => {
        turnEnding = false
        door.nextTurn()
        const now = letGo
        letGo = []
        for (const each of now) each.reset()
      })
    }
    const letGoLater = (connection: Connection) => {
      evicted.add(connection)
      letGo.push(connection)
      endTurnLater()
    }
    const noise = noiseLog("closed a connection")

    /**
     * Count every drop, from the socket callback; log it when its source prefix has not been logged for this reason
     * within the minute (`NoiseLog`), through a fiber only then. A dialer that closes before saying anything (a
     * port probe, a process stopped while connecting) is only a debug line: it harms no one.
     */
    const drop = (peer: string, reason: string, quiet = false) => {
      dropped[reason] = (dropped[reason] ?? 0) + 1
      const line = noise.note(peer, reason, reason)
      if (line !== undefined) callbacks.fork(quiet ? Effect.logDebug(line) : Effect.logWarning(line))
    }
    const dropFor = (connection: Connection, reason: string) => Effect.sync(() => drop(connection.peer, reason))

    /**
     * A connection nobody took: the run has no owner for its channel, or it closed before the socket callback could
     * hand it over (an open connection with an owner goes to it from `sniff`, never through here).
     */
    const unowned = (connection: Connection, owner: Owner | undefined, name: string) => {
      if (owner !== undefined) return evicted.has(connection) ? Effect.void : dropFor(connection, "closed before its owner took it")
      connection.reset()
      return dropFor(connection, `no ${name} service in this run`)
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
              return dropFor(connection, otherProtocol(where.channel, where.protocol))
            case "Http":
              // Served from `sniff`; a run without a status server resets it here.
              return unowned(connection, undefined, "status (HTTP)")
            case "Unknown":
              connection.end()
              return dropFor(connection, "unknown channel magic")
          }
        }
      }
    })
    const tell = (message: MuxMessage) => callbacks.fork(mux.tell(message))

    /**
     * Whether a connection for `channel` may go on to its owner: the door reads the nonce and key id that came with
     * its magic (`Link.peekOpening`) and tells a key holder from a stranger; a stranger with no seat left is reset
     * here, before its owner spends anything on it. Bytes not there yet: its owner's handshake tells the door.
     */
    const admitted = (connection: Connection, channel: ChannelName): boolean => {
      const keyFor = options.doorKeys?.[channel]
      const opening = keyFor === undefined ? undefined : Link.peekOpening(connection)
      if (keyFor === undefined || opening === undefined) return true
      const key = keyFor(opening.keyId)
      if (connection.shown(key !== undefined && vouches(key, magic[channel], opening.keyId, opening.nonce), opening.nonce) !== "refused") return true
      drop(connection.peer, refusedStranger)
      evicted.add(connection)
      // At once: this is a read, not an accept, and the dial it brings again comes in the next turn's accepts.
      connection.reset()
      return false
    }
    const madeRoomReason = {
      prefix: `the oldest of over ${unread.perPrefix} unread connections from its source prefix (it sent nothing in ${UNREAD_GRACE_MS} ms), reset to make room`,
      total: `the oldest of over ${unread.total} unread connections (it sent nothing in ${UNREAD_GRACE_MS} ms), reset to make room`
    }
    const turnedAwayReason = {
      prefix: `${unread.heldPerPrefix} connections from its source prefix came in too short a time to have been read yet: reset`,
      total: `${unread.held} connections came in too short a time to have been read yet: reset`
    }
    const refusedStranger =
      `over ${strangers.perPrefix} strangers from its source prefix or ${strangers.total} in all (dialers that have not shown their key ` +
      "and not yet authenticated): reset before its handshake"

    /** Count the connection at the door (making room for it), read the magic (with a deadline), then route it. */
    const sniff = (connection: Connection) => {
      accepted += 1
      endTurnLater()
      const { ticket, evicted: out } = door.arrive(sourcePrefix(connection.address), connection, performance.now())
      for (const { item, limit, turnedAway } of out) {
        drop(item.peer, turnedAway ? turnedAwayReason[limit] : madeRoomReason[limit])
        letGoLater(item)
      }
      connection.untilTrusted({ shown: (vouched, nonce) => door.shown(ticket, vouched, nonce), settled: () => door.leave(ticket), firstFrameMs })
      void connection.take(MAGIC_BYTES, options.magicDeadlineMs).then((first) => {
        if (first === "timeout") {
          connection.reset()
          drop(connection.peer, `no channel magic within ${options.magicDeadlineMs} ms`)
        } else if (first === "closed") {
          if (!evicted.has(connection)) drop(connection.peer, "closed before sending its channel magic", true)
        } else if (!evicted.has(connection)) {
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
            if (!admitted(connection, where.channel)) return
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
    // Not "listening on": the launcher's start line (Listen) says that, with the run and its page, once.
    yield* Effect.logDebug(`the port ${options.address}:${listener.port} carries ${Object.keys(options.owners).join(", ")}, told apart by their first bytes`)

    const mux_: PortMux = {
      address: options.address,
      port: listener.port,
      stats: Effect.sync(() => ({ accepted, routed: { ...routed }, dropped: { ...dropped }, waiting: door.counts }))
    }
    return mux_
  })
