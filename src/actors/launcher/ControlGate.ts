/**
 * ControlGate: the launcher's end of the control channel.
 *
 * Once the world has formed, each host's relay dials in and registers the
 * ranks it serves. A relay is accepted once, for a host of this world and
 * exactly that host's ranks; anything else is told why and closed. The
 * accepted links stay open until the run ends (`closeAll`): their EOF is the
 * relays' signal to leave. What a relay sends after registering (its ranks'
 * reports, its folds) goes to `onMessage`; a link that ends goes to `onClosed`.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import * as Actor from "../Actor.ts"
import type { Accepted } from "../PortMux.ts"
import * as Codec from "../../wire/Codec.ts"
import { ControlMessage, LauncherBeat, RelayAccepted, RelayRejected } from "../../wire/ControlMessages.ts"
import * as Link from "../../wire/Link.ts"

export const controlCodec = Codec.make("control", ControlMessage)

/** One beat for every link: it carries nothing, so it is built and encoded once, not once per relay per second. */
const beat = new LauncherBeat()

export type ControlLink = Link.Link<ControlMessage, ControlMessage>

export interface ControlGate {
  readonly owner: Actor.ActorRef<Accepted>
  /** The hosts whose relay has registered. */
  readonly registered: Effect.Effect<ReadonlySet<string>>
  /** Send to a host's relay (dropped when it has none). */
  readonly send: (host: string, message: ControlMessage) => Effect.Effect<void>
  /** Close every relay link: the run is over. */
  readonly closeAll: Effect.Effect<void>
}

export interface ControlGateOptions {
  readonly salt: Uint8Array
  /** The world: each host and its ranks. */
  readonly hosts: Effect.Effect<ReadonlyMap<string, ReadonlyArray<number>>>
  readonly handshakeMs: number
  readonly onMessage: (host: string, message: ControlMessage) => Effect.Effect<void>
  readonly onClosed: (host: string) => Effect.Effect<void>
}

export const make = (options: ControlGateOptions): Effect.Effect<ControlGate, never, Scope.Scope> =>
  Effect.gen(function*() {
    const links = yield* Ref.make(new Map<string, ControlLink>())

    const problem = (hello: { host: string; ranks: ReadonlyArray<number> }, world: ReadonlyMap<string, ReadonlyArray<number>>, registered: ReadonlyMap<string, ControlLink>) => {
      const ranks = world.get(hello.host)
      if (ranks === undefined) return `host ${hello.host} is not in this world`
      if (registered.has(hello.host)) return `the relay of ${hello.host} has already registered`
      if (ranks.join(",") !== hello.ranks.join(",")) {
        return `the relay of ${hello.host} claims ranks ${hello.ranks.join(", ")}, but the host has ${ranks.join(", ")}`
      }
      return undefined
    }

    const serve = (connection: Accepted["connection"]) =>
      Effect.gen(function*() {
        const link = yield* Link.accept(connection, { channel: "control", salt: options.salt, inbound: controlCodec, outbound: controlCodec })
        const hello = yield* link.receiveWithin(options.handshakeMs, "RelayHello")
        const world = yield* options.hosts
        const why = hello._tag !== "RelayHello"
          ? `expected RelayHello first, got ${hello._tag}`
          : yield* Ref.modify(links, (current) => {
            const refused = problem(hello, world, current)
            return refused === undefined ? [undefined, new Map([...current, [hello.host, link]])] : [refused, current]
          })
        if (why !== undefined) {
          yield* Effect.ignore(link.send(new RelayRejected({ reason: why })))
          yield* link.close
          return yield* Effect.logWarning(`refused a relay from ${link.peer}: ${why}`)
        }
        yield* link.send(new RelayAccepted())
        if (hello._tag !== "RelayHello") return
        yield* Effect.logDebug(`relay of ${hello.host} registered`)
        const host = hello.host
        // The relay leaves when the launcher goes silent: beat while the link lasts.
        yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sleep(Duration.seconds(1)), link.send(beat))).pipe(Effect.ignore))
        while (true) {
          const message = yield* Effect.either(link.receive)
          if (message._tag === "Left") {
            yield* Ref.update(links, (current) => {
              if (current.get(host) !== link) return current
              const next = new Map(current)
              next.delete(host)
              return next
            })
            return yield* options.onClosed(host)
          }
          yield* options.onMessage(host, message.right)
        }
      }).pipe(Effect.catchAll((error) => Effect.logWarning(`dropped a control connection: ${error.message}`)))

    const owner = yield* Actor.spawn<Accepted, Scope.Scope>({
      name: "control-gate",
      handlers: { Accepted: ({ connection }) => Effect.asVoid(Effect.forkScoped(serve(connection))) }
    })
    const closeAll: Effect.Effect<void> = Effect.flatMap(
      Ref.getAndSet(links, new Map<string, ControlLink>()),
      (current) => Effect.forEach([...current.values()], (link) => link.close, { discard: true })
    )
    yield* Effect.addFinalizer(() => closeAll)
    return {
      owner,
      registered: Effect.map(Ref.get(links), (current) => new Set(current.keys())),
      send: (host, message) => Effect.flatMap(Ref.get(links), (current) => Effect.ignore(current.get(host)?.send(message) ?? Effect.void)),
      closeAll
    }
  })
