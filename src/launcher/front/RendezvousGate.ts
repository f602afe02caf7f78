/**
 * RendezvousGate: the launcher's end of the rendezvous channel (backend
 * `nccl`). Every rank dials in and joins. Once every live rank has, a
 * generation starts: one rank (the generator: a rank on the launcher's own
 * host if one lives, else one of the first declared worker's, else the
 * lowest) is asked for a fresh NCCL unique id,
 * and the id goes to every member with the members in ascending global
 * order (a member's NCCL rank is its position there).
 *
 * Membership changes (ranks reported dead, a member's link ending because
 * its process did) end the generation: the survivors are told to abort
 * their communicator (`Reform`), and a new generation forms from whoever
 * lives and has joined, so the survivors carry on with a smaller world.
 * When that generation is the last one less those who left, each survivor
 * still the process it was (the same link), its `Ready` says so
 * (`shrinkOf`): where NCCL can (2.27 and later) the survivors shrink the
 * old communicator rather than build one from the new id, which comes all
 * the same (for a rank that cannot shrink).
 *
 * Growth goes the same way: ranks that joined the formed cohort may dial in
 * at once (`admit`), but become members only at their epoch boundary
 * (`grow`): the generation in force is dissolved and a new one forms with
 * every live rank in ascending order. A grown rank that has not dialed in
 * within the id timeout is reported absent (the launcher treats it as dead).
 *
 * What the gate decides is the pure `generations` machine
 * (rendezvousGenerations.ts); the gate is its interpreter on the kernel. Each
 * connection's handshake and each member's link reader tell it what they
 * read; a timer tells it an id's or an entering rank's time is up.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Machine from "../../kernel/Machine.ts"
import { makeNoiseLog } from "./NoiseLog.ts"
import type { Accepted } from "./PortMux.ts"
import type * as Actor from "../../kernel/Actor.ts"
import { rankKey } from "../../wire/Keys.ts"
import * as Link from "../../wire/Link.ts"
import { ProvideId, Ready, Reform, rendezvousCodec, type RendezvousMessage } from "../../wire/messages/RendezvousMessages.ts"
import { before, type Generation, generations, GenerationsEffect, GenerationsEvent, type GenerationsState } from "./rendezvousGenerations.ts"

export { type Formed, type Generation, pickGenerator, shrinkOf } from "./rendezvousGenerations.ts"

type RendezvousLink = Link.Link<RendezvousMessage, RendezvousMessage>
type Event = GenerationsEvent<RendezvousLink>
type Effect_ = GenerationsEffect<RendezvousLink>

export interface RendezvousGateOptions {
  readonly salt: Uint8Array
  /** Encrypt every frame's payload on this channel's links, not only authenticate it (`controller.encrypt`; default false). */
  readonly encrypt?: boolean | undefined
  readonly handshakeMs: number
  /** How long the generator has to provide an id. */
  readonly idTimeoutMs: number
  /** No id could be had: the cohort cannot form (the launcher fails the run with this). */
  readonly onFailure: (reason: string) => Effect.Effect<void>
  /** Grown ranks that never joined the rendezvous in time (the launcher declares them lost). */
  readonly onAbsent?: (ranks: ReadonlyArray<number>, reason: string) => Effect.Effect<void>
}

export interface RendezvousGate {
  readonly owner: Actor.ActorRef<Accepted>
  /**
   * The world has formed: these ranks may join (before, every join is
   * refused). `preferred` orders who makes the ids (see `pickGenerator`).
   */
  readonly begin: (world: ReadonlyArray<number>, preferred: ReadonlyArray<ReadonlySet<number>>) => Effect.Effect<void>
  /**
   * Ranks that joined the formed cohort: they may dial in now, and take part from their `grow`. Told, like
   * `lose`: membership says both from its own fiber, which must never wait on this gate's lock (a rank
   * found absent holds it while membership hears of the loss).
   */
  readonly admit: (ranks: ReadonlyArray<number>) => Effect.Effect<void>
  /** Admitted ranks enter: the cohort re-rendezvouses with them (told, in order with `admit`). */
  readonly grow: (ranks: ReadonlyArray<number>) => Effect.Effect<void>
  /** These ranks are dead: the survivors re-rendezvous. */
  readonly lose: (ranks: ReadonlyArray<number>, reason: string) => Effect.Effect<void>
  /** The generation in force, if one has formed. */
  readonly current: Effect.Effect<Generation | undefined>
  /** Every generation that formed, oldest first. */
  readonly history: Effect.Effect<ReadonlyArray<Generation>>
}

export const make = (options: RendezvousGateOptions): Effect.Effect<RendezvousGate, never, Scope.Scope> =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    const noise = makeNoiseLog("rendezvous")
    // Bound once the actor is spawned: fibers it starts (link readers, timers) tell it what they saw.
    let tellGate: (event: Event) => Effect.Effect<void> = () => Effect.void
    let links: () => ReadonlyMap<number, RendezvousLink> = () => new Map()

    const broadcast = (message: RendezvousMessage, ranks: Iterable<number>) =>
      Effect.suspend(() => {
        const now = links()
        return Effect.forEach([...ranks], (rank) => Effect.ignore(now.get(rank)?.send(message) ?? Effect.void), { discard: true })
      })
    const after = (ms: number, event: Event) => Effect.asVoid(Effect.forkIn(Effect.zipRight(Effect.sleep(Duration.millis(ms)), Effect.suspend(() => tellGate(event))), scope))

    /** A member's link: the generator's id (or why it has none) goes to the gate; the link ending is its leaving. */
    const listen = (rank: number, link: RendezvousLink) =>
      Effect.gen(function*() {
        while (true) {
          const message = yield* link.receive
          if (message._tag === "IdProvided") yield* tellGate(GenerationsEvent.IdProvided({ generation: message.generation, id: message.id }))
          if (message._tag === "IdFailed") {
            yield* tellGate(GenerationsEvent.IdFailed({ generation: message.generation, reason: `rank ${rank} could not make an NCCL unique id: ${message.reason}` }))
          }
        }
      }).pipe(Effect.catchAll(() => tellGate(GenerationsEvent.LinkEnded({ rank, link }))))

    const carryOut = (effect: Effect_): Effect.Effect<void> => {
      switch (effect._tag) {
        case "Refuse":
          return Effect.zipRight(effect.link.close, Effect.logWarning(`refused a rendezvous from ${effect.link.peer}: ${effect.why}`))
        case "Listen":
          return Effect.asVoid(Effect.forkIn(listen(effect.rank, effect.link), scope))
        case "Close":
          return Effect.ignore(effect.link.close)
        case "AskId": {
          const { generation, generator } = effect
          return Effect.zipRight(
            Effect.suspend(() => Effect.ignore(links().get(generator)?.send(new ProvideId({ generation })) ?? Effect.void)),
            after(options.idTimeoutMs, GenerationsEvent.IdFailed({ generation, reason: `rank ${generator} gave no NCCL unique id within ${options.idTimeoutMs} ms` }))
          )
        }
        case "Dissolved":
          return Effect.zipRight(
            Effect.logInfo(`rendezvous generation ${effect.generation} dissolved: ${effect.reason}`),
            broadcast(new Reform({ generation: effect.generation, reason: effect.reason }), effect.members)
          )
        case "Formed": {
          const { generation, generator, members, shrinkOf } = effect.generation
          const shrinking = shrinkOf === undefined ? "" : `; generation ${shrinkOf.generation} less rank(s) ${shrinkOf.left.join(", ")}: its survivors may shrink its communicator`
          return Effect.zipRight(
            Effect.logInfo(`rendezvous generation ${generation}: ${members.length} rank(s), id from rank ${generator}${shrinking}`),
            broadcast(new Ready({ generation, id: effect.id, members, shrinkOf }), members)
          )
        }
        case "WatchAbsence":
          return after(options.idTimeoutMs, GenerationsEvent.AbsenceDue({ ranks: effect.ranks }))
        case "Failed":
          return options.onFailure(effect.reason)
        case "Absent":
          return options.onAbsent?.(effect.ranks, `did not join the NCCL rendezvous within ${options.idTimeoutMs} ms of entering`) ?? Effect.void
      }
    }

    // Each rank holds its own key (`Keys.rankKey`), never the salt: a key id is a rank number, in decimal.
    const rankKeyFor = (keyId: string) => (/^(0|[1-9]\d{0,8})$/.test(keyId) ? rankKey(options.salt, Number(keyId)) : undefined)
    const serve = (connection: Accepted["connection"]) =>
      Effect.gen(function*() {
        const link = yield* Link.accept(connection, {
          channel: "rendezvous",
          keyFor: rankKeyFor,
          encrypt: options.encrypt,
          inbound: rendezvousCodec,
          outbound: rendezvousCodec
        })
        const first = yield* link.receiveWithin(options.handshakeMs, "Join")
        const refuse = (why: string) => Effect.zipRight(link.close, Effect.logWarning(`refused a rendezvous from ${link.peer}: ${why}`))
        if (first._tag !== "Join") return yield* refuse(`expected Join, got ${first._tag}`)
        // The key a rank holds is its number's: it joins as that rank and no other.
        if (String(first.rank) !== link.keyId) return yield* refuse(`a rank keyed as rank ${link.keyId} joined as rank ${first.rank}`)
        yield* tellGate(GenerationsEvent.Joined({ rank: first.rank, link }))
      }).pipe(Effect.catchAll((error) =>
        // Reset: a connection that failed its hello (or its deadline) must not be held open with what it buffered.
        Effect.zipRight(Effect.sync(() => connection.reset()), noise.drop(connection.peer, error.message))))

    const gate = yield* Machine.spawn<GenerationsState<RendezvousLink>, Event, Effect_, Event, Accepted, Scope.Scope>({
      name: "rendezvous-gate",
      machine: { initial: before<RendezvousLink>(), step: generations },
      events: { Begin: true, Admit: true, Grow: true, Lose: true, Joined: true, LinkEnded: true, IdProvided: true, IdFailed: true, AbsenceDue: true },
      carryOut,
      requests: () => ({ Accepted: ({ connection }) => Effect.asVoid(Effect.forkScoped(serve(connection))) })
    })
    // A gate that has stopped (the run is over) has no rendezvous left to change.
    const tell = (event: Event) => Effect.ignore(gate.ref.tell(event))
    tellGate = tell
    links = () => gate.current().links

    return {
      owner: gate.ref as Actor.ActorRef<Accepted>,
      begin: (world, preferred) => Effect.ignore(gate.ref.ask(GenerationsEvent.Begin({ world, preferred }))),
      admit: (ranks) => tell(GenerationsEvent.Admit({ ranks })),
      grow: (ranks) => tell(GenerationsEvent.Grow({ ranks })),
      lose: (ranks, reason) => tell(GenerationsEvent.Lose({ ranks, reason })),
      current: Effect.sync(() => gate.current().formed),
      history: Effect.sync(() => gate.current().history)
    }
  })
