/**
 * ControlGate: the launcher's end of the control channel.
 *
 * Once the world has formed, each host's relay dials in and registers the
 * ranks it serves. A relay is accepted once, for a host of this world and
 * exactly that host's ranks; anything else is told why and closed. The
 * accepted links stay open until the run ends (`closeAll`): their EOF is the
 * relays' signal to leave. What a relay sends after registering (its ranks'
 * reports, its folds) goes to `onMessage`, for its own ranks only; a link that
 * ends goes to `onClosed`. A link that has carried nothing for a while gets a
 * `LauncherBeat`: a relay leaves a launcher it has not heard from.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Actor from "../../kernel/Actor.ts"
import { makeNoiseLog } from "./NoiseLog.ts"
import type { Accepted } from "./PortMux.ts"
import { controlCodec, type ControlMessage, LauncherBeat, RelayAccepted, RelayRejected } from "../../wire/messages/ControlMessages.ts"
import * as Link from "../../wire/Link.ts"
import { hostKey } from "../../wire/Keys.ts"
import { isHostName, printable } from "../../wire/Printable.ts"


/** One beat for every link: it carries nothing, so it is built and encoded once, not once per relay per second. */
const beat = new LauncherBeat()
/**
 * A link gets a beat once nothing has gone down it for a beat interval and QUIET_MARGIN_MS, checked every
 * BEAT_CHECK_MS: a link that carries the coordinator's beats needs none of its own, and a relay hears
 * something at least every interval + 350 ms (its timeout is at least twice the interval).
 */
const QUIET_MARGIN_MS = 100
const BEAT_CHECK_MS = 250

export type ControlLink = Link.Link<ControlMessage, ControlMessage>

export interface ControlGate {
  readonly owner: Actor.ActorRef<Accepted>
  /** The hosts whose relay has registered. */
  readonly registered: Effect.Effect<ReadonlySet<string>>
  /** Send to a host's relay (dropped when it has none). */
  readonly send: (host: string, message: ControlMessage) => Effect.Effect<void>
  /** Close every relay link: the run is over. */
  readonly closeAll: Effect.Effect<void>
  /** The host's relay speaks for these ranks too from now on (a restarted rank under a new number). */
  readonly adopt: (host: string, ranks: ReadonlyArray<number>) => Effect.Effect<void>
}

export interface ControlGateOptions {
  readonly salt: Uint8Array
  /** Encrypt every frame's payload on this channel's links, not only authenticate it (`controller.encrypt`; default false). */
  readonly encrypt?: boolean | undefined
  /** The ranks a host's relay speaks for (undefined: the host is not in the world). Asked once per relay hello. */
  readonly ranksOf: (host: string) => Effect.Effect<ReadonlyArray<number> | undefined>
  readonly handshakeMs: number
  /** The coordinator's beat interval (`beatEveryMs`). */
  readonly beatEveryMs: number
  readonly onMessage: (host: string, message: ControlMessage) => Effect.Effect<void>
  readonly onClosed: (host: string) => Effect.Effect<void>
}

interface Registered {
  readonly link: ControlLink
  /** The host's ranks: the relay speaks for these only. */
  readonly ranks: Set<number>
  /** When something last went down the link (ms). */
  sentAt: number
  /** It has spoken for another host's ranks (logged once). */
  warned: boolean
}

// Effect's Clock, not Date.now(): the beat's timing is then a test's to drive (TestClock), not the machine's load.
const sendOn = (registered: Registered, message: ControlMessage): Effect.Effect<void> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) => {
    registered.sentAt = now
    return Effect.ignore(registered.link.send(message))
  })

/** Does the message speak only for the relay's own ranks? */
const speaksForItsOwn = (registered: Registered, message: ControlMessage): boolean => {
  switch (message._tag) {
    case "FromRank":
    case "ElasticPush":
      return registered.ranks.has(message.rank)
    case "HostBeats":
      return message.ranks.every((rank) => registered.ranks.has(rank))
    default:
      return true
  }
}

export const make = (options: ControlGateOptions): Effect.Effect<ControlGate, never, Scope.Scope> =>
  Effect.gen(function*() {
    const links = new Map<string, Registered>()

    const problem = (hello: { host: string; ranks: ReadonlyArray<number> }, ranks: ReadonlyArray<number> | undefined) => {
      // Escaped: a relay's claim is printed, and must not carry terminal controls.
      if (ranks === undefined) return `host ${printable(hello.host, 64)} is not in this world`
      if (links.has(hello.host)) return `the relay of ${hello.host} has already registered`
      // The ranks the host was admitted with come first; a restarted rank's new numbers follow them.
      if (ranks.slice(0, hello.ranks.length).join(",") !== hello.ranks.join(",")) {
        return `the relay of ${hello.host} claims ranks ${hello.ranks.join(", ")}, but the host has ${ranks.join(", ")}`
      }
      return undefined
    }

    const refuse = (link: ControlLink, why: string) =>
      Effect.gen(function*() {
        yield* Effect.ignore(link.send(new RelayRejected({ reason: why })))
        yield* link.close
        yield* Effect.logWarning(`refused a relay from ${link.peer}: ${why}`)
      })

    // Each host's relay holds its own key (`Keys.hostKey`), never the salt: a key id is a host name.
    const hostKeyFor = (keyId: string) => (isHostName(keyId) ? hostKey(options.salt, keyId) : undefined)
    const noise = makeNoiseLog("control")
    const serve = (connection: Accepted["connection"]) =>
      Effect.gen(function*() {
        const link = yield* Link.accept(connection, { channel: "control", keyFor: hostKeyFor, encrypt: options.encrypt, inbound: controlCodec, outbound: controlCodec })
        const hello = yield* link.receiveWithin(options.handshakeMs, "RelayHello")
        if (hello._tag !== "RelayHello") return yield* refuse(link, `expected RelayHello first, got ${hello._tag}`)
        // The key a relay holds is its host's: it speaks for that host and no other.
        const ranks = hello.host === link.keyId ? yield* options.ranksOf(hello.host) : undefined
        const why = hello.host !== link.keyId
          ? `a relay keyed for ${link.keyId} claims host ${printable(hello.host, 64)}`
          : problem(hello, ranks)
        if (why !== undefined) return yield* refuse(link, why)
        const host = hello.host
        const registered: Registered = { link, ranks: new Set(ranks), sentAt: yield* Clock.currentTimeMillis, warned: false }
        links.set(host, registered)
        yield* sendOn(registered, new RelayAccepted())
        yield* Effect.logDebug(`relay of ${host} registered`)
        while (true) {
          const message = yield* Effect.either(link.receive)
          if (message._tag === "Left") {
            if (links.get(host) === registered) links.delete(host)
            return yield* options.onClosed(host)
          }
          if (speaksForItsOwn(registered, message.right)) yield* options.onMessage(host, message.right)
          else if (!registered.warned) {
            registered.warned = true
            yield* Effect.logWarning(`the relay of ${host} spoke for ranks that are not its host's; dropped (further ones are not logged)`)
          }
        }
      }).pipe(Effect.catchAll((error) =>
        // Reset: a connection that failed its hello (or its deadline) must not be held open with what it buffered.
        Effect.zipRight(Effect.sync(() => connection.reset()), noise.drop(connection.peer, error.message))))

    const owner = yield* Actor.spawn<Accepted, Scope.Scope>({
      name: "control-gate",
      handlers: { Accepted: ({ connection }) => Effect.asVoid(Effect.forkScoped(serve(connection))) }
    })
    // The relays leave when the launcher goes silent: one loop beats every link that has been quiet.
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(
      Effect.sleep(Duration.millis(BEAT_CHECK_MS)),
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const quietSince = now - options.beatEveryMs - QUIET_MARGIN_MS
        return Effect.forEach(links.values(), (registered) => registered.sentAt <= quietSince ? sendOn(registered, beat) : Effect.void, { discard: true })
      })
    )))
    const closeAll: Effect.Effect<void> = Effect.suspend(() => {
      const current = [...links.values()]
      links.clear()
      return Effect.forEach(current, ({ link }) => link.close, { discard: true })
    })
    yield* Effect.addFinalizer(() => closeAll)
    return {
      owner,
      registered: Effect.sync(() => new Set(links.keys())),
      send: (host, message) => Effect.suspend(() => {
        const registered = links.get(host)
        return registered === undefined ? Effect.void : sendOn(registered, message)
      }),
      closeAll,
      adopt: (host, ranks) => Effect.sync(() => ranks.forEach((rank) => links.get(host)?.ranks.add(rank)))
    }
  })
