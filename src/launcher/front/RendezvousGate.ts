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
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Data from "effect/Data"
import type * as Scope from "effect/Scope"
import * as Actor from "../../kernel/Actor.ts"
import { makeNoiseLog } from "./NoiseLog.ts"
import type { Accepted } from "./PortMux.ts"
import { rankKey } from "../../wire/Keys.ts"
import * as Link from "../../wire/Link.ts"
import { ProvideId, Ready, Reform, rendezvousCodec, type RendezvousMessage, type ShrinkOf } from "../../wire/messages/RendezvousMessages.ts"


type RendezvousLink = Link.Link<RendezvousMessage, RendezvousMessage>

export interface Generation {
  readonly generation: number
  readonly members: ReadonlyArray<number>
  readonly generator: number
  /** Present when the generation is an earlier one less those who left (see `shrinkOf`). */
  readonly shrinkOf?: ShrinkOf
}

/** A generation as it formed: its members and the link each joined it with (which process it was). */
export interface Formed<L> {
  readonly generation: number
  readonly members: ReadonlyArray<number>
  readonly links: ReadonlyMap<number, L>
}

/**
 * Whether the generation of `members` (ascending), whose members are now on `links`, may be formed by
 * shrinking `parent`: someone left, nobody entered, and every member is still on the link it joined the
 * parent with. A member that came back (a restart) is a new process without the parent's communicator:
 * then every member builds anew, since a shrink is collective.
 */
export const shrinkOf = <L>(parent: Formed<L> | undefined, members: ReadonlyArray<number>, links: ReadonlyMap<number, L>): ShrinkOf | undefined => {
  if (parent === undefined) return undefined
  const stayed = members.every((rank) => parent.links.has(rank) && parent.links.get(rank) === links.get(rank))
  const left = parent.members.filter((rank) => !members.includes(rank))
  return stayed && left.length > 0 ? { generation: parent.generation, left } : undefined
}

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

/**
 * Who makes a generation's id, as the reference chooses: the first live member of the first preference
 * that has one (the launcher's own host's ranks, then the first declared worker's), else the lowest.
 * `members` are ascending.
 */
export const pickGenerator = (members: ReadonlyArray<number>, preferred: ReadonlyArray<ReadonlySet<number>>): number => {
  for (const ranks of preferred) {
    const found = members.find((rank) => ranks.has(rank))
    if (found !== undefined) return found
  }
  return members[0]!
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

/** A generation got no NCCL unique id: why, in words (a membership change retries; anything else fails the rendezvous). */
class NoUniqueId extends Data.TaggedError("NoUniqueId")<{ readonly reason: string }> {
  override get message(): string {
    return this.reason
  }
}

/** Told through the gate's mailbox, in order with the connections it accepts (see `admit`). */
type Told = Data.TaggedEnum<{
  Admit: { readonly ranks: ReadonlyArray<number> }
  Grow: { readonly ranks: ReadonlyArray<number> }
  Lose: { readonly ranks: ReadonlyArray<number>; readonly reason: string }
}>
const Told = Data.taggedEnum<Told>()

export const make = (options: RendezvousGateOptions): Effect.Effect<RendezvousGate, never, Scope.Scope> =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    const lock = yield* Effect.makeSemaphore(1)
    const serial = <A, E>(effect: Effect.Effect<A, E>) => lock.withPermits(1)(effect)
    const live = new Set<number>()
    /** Admitted, not yet grown: may dial in, not yet members. */
    const admitted = new Set<number>()
    let preferred: ReadonlyArray<ReadonlySet<number>> = []
    const links = new Map<number, RendezvousLink>()
    const history: Array<Generation> = []
    let formed: Generation | undefined
    /** The last generation that formed, with its members' links: the parent a shrink would start from. */
    let lastFormed: Formed<RendezvousLink> | undefined
    let forming: { readonly generation: number; readonly id: Deferred.Deferred<Uint8Array, NoUniqueId> } | undefined
    let next = 0
    let failed = false

    const broadcast = (message: RendezvousMessage, ranks: Iterable<number>) =>
      Effect.forEach([...ranks], (rank) => Effect.ignore(links.get(rank)?.send(message) ?? Effect.void), { discard: true })

    /** The current generation is over: its members abort their communicators. */
    const dissolve = (reason: string) =>
      Effect.gen(function*() {
        if (formed !== undefined) {
          const ended = formed
          formed = undefined
          yield* Effect.logInfo(`rendezvous generation ${ended.generation} dissolved: ${reason}`)
          yield* broadcast(new Reform({ generation: ended.generation, reason }), ended.members)
        }
      })

    /** Start a generation once every live rank has joined (and none is forming or formed). */
    const advance: Effect.Effect<void> = Effect.suspend(() => {
      if (failed || forming !== undefined || formed !== undefined || live.size === 0) return Effect.void
      if (![...live].every((rank) => links.has(rank))) return Effect.void
      const members = [...live].sort((a, b) => a - b)
      const generator = pickGenerator(members, preferred)
      const generation = next++
      return Effect.gen(function*() {
        const id = yield* Deferred.make<Uint8Array, NoUniqueId>()
        forming = { generation, id }
        yield* Effect.ignore(links.get(generator)!.send(new ProvideId({ generation })))
        yield* Effect.forkIn(awaitId(generation, generator, members, id), scope)
      })
    })

    /** Members are a subset of the live ranks until someone leaves: a different size means someone entered. */
    const membershipChanged = (members: ReadonlyArray<number>) =>
      members.length !== live.size || members.some((rank) => !live.has(rank) || !links.has(rank))

    const awaitId = (generation: number, generator: number, members: ReadonlyArray<number>, id: Deferred.Deferred<Uint8Array, NoUniqueId>) =>
      Deferred.await(id).pipe(
        Effect.timeoutFail({ duration: Duration.millis(options.idTimeoutMs), onTimeout: () => new NoUniqueId({ reason: `rank ${generator} gave no NCCL unique id within ${options.idTimeoutMs} ms` }) }),
        Effect.matchEffect({
          onFailure: ({ reason }) =>
            serial(Effect.gen(function*() {
              if (forming?.generation !== generation) return
              forming = undefined
              // A member (the generator included) that left, or one that entered, is a membership change, not a failure: retry.
              if (membershipChanged(members)) return yield* advance
              failed = true
              yield* options.onFailure(`the NCCL rendezvous failed: ${reason}`)
            })),
          onSuccess: (bytes) =>
            serial(Effect.gen(function*() {
              if (forming?.generation !== generation) return
              forming = undefined
              // Someone left or entered while the id was made: this generation is stillborn; start over.
              if (membershipChanged(members)) return yield* advance
              const shrink = shrinkOf(lastFormed, members, links)
              formed = shrink === undefined ? { generation, members, generator } : { generation, members, generator, shrinkOf: shrink }
              lastFormed = { generation, members, links: new Map(members.map((rank) => [rank, links.get(rank)!])) }
              history.push(formed)
              const shrinking = shrink === undefined ? "" : `; generation ${shrink.generation} less rank(s) ${shrink.left.join(", ")}: its survivors may shrink its communicator`
              yield* Effect.logInfo(`rendezvous generation ${generation}: ${members.length} rank(s), id from rank ${generator}${shrinking}`)
              yield* broadcast(new Ready({ generation, id: bytes, members, shrinkOf: shrink }), members)
            }))
        })
      )

    const listen = (rank: number, link: RendezvousLink) =>
      Effect.gen(function*() {
        while (true) {
          const message = yield* link.receive
          if ((message._tag === "IdProvided" || message._tag === "IdFailed") && forming?.generation === message.generation) {
            yield* message._tag === "IdProvided"
              ? Deferred.succeed(forming.id, message.id)
              : Deferred.fail(forming.id, new NoUniqueId({ reason: `rank ${rank} could not make an NCCL unique id: ${message.reason}` }))
          }
        }
      }).pipe(
        Effect.catchAll(() =>
          serial(Effect.gen(function*() {
            if (links.get(rank) !== link) return
            links.delete(rank)
            if (formed?.members.includes(rank)) yield* dissolve(`rank ${rank} left`)
            if (forming !== undefined) yield* Deferred.fail(forming.id, new NoUniqueId({ reason: `rank ${rank} left while the id was made` }))
          }))
        )
      )

    // Each rank holds its own key (`Keys.rankKey`), never the salt: a key id is a rank number, in decimal.
    const rankKeyFor = (keyId: string) => (/^(0|[1-9]\d{0,8})$/.test(keyId) ? rankKey(options.salt, Number(keyId)) : undefined)
    const noise = makeNoiseLog("rendezvous")
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
        if (!(live.has(first.rank) || admitted.has(first.rank))) return yield* refuse(`rank ${first.rank} is not a live rank of this world`)
        yield* serial(Effect.gen(function*() {
          const previous = links.get(first.rank)
          links.set(first.rank, link)
          if (previous !== undefined) yield* previous.close
          // A member coming back (a restart) makes the formed generation stale; an admitted rank waits for its `grow`.
          if (formed?.members.includes(first.rank)) yield* dissolve(`rank ${first.rank} rejoined`)
          yield* advance
        }))
        yield* Effect.forkScoped(listen(first.rank, link))
      }).pipe(Effect.catchAll((error) =>
        // Reset: a connection that failed its hello (or its deadline) must not be held open with what it buffered.
        Effect.zipRight(Effect.sync(() => connection.reset()), noise.drop(connection.peer, error.message))))

    const admit = (ranks: ReadonlyArray<number>) => serial(Effect.sync(() => ranks.forEach((rank) => admitted.add(rank))))
    const grow = (ranks: ReadonlyArray<number>) =>
      serial(Effect.gen(function*() {
        const entering = ranks.filter((rank) => admitted.delete(rank))
        if (entering.length === 0) return
        for (const rank of entering) live.add(rank)
        yield* dissolve(`rank(s) ${entering.join(", ")} joined`)
        if (forming !== undefined) yield* Deferred.fail(forming.id, new NoUniqueId({ reason: `rank(s) ${entering.join(", ")} joined` }))
        yield* advance
        // A rank that never dials in would hold every generation back: past the id timeout it is absent.
        yield* Effect.forkIn(
          Effect.zipRight(
            Effect.sleep(Duration.millis(options.idTimeoutMs)),
            serial(Effect.suspend(() => {
              const absent = entering.filter((rank) => live.has(rank) && !links.has(rank))
              return absent.length === 0
                ? Effect.void
                : options.onAbsent?.(absent, `did not join the NCCL rendezvous within ${options.idTimeoutMs} ms of entering`) ?? Effect.void
            }))
          ),
          scope
        )
      }))
    const lose = (ranks: ReadonlyArray<number>, reason: string) =>
      serial(Effect.gen(function*() {
        for (const rank of ranks) admitted.delete(rank)
        const gone = ranks.filter((rank) => live.has(rank))
        if (gone.length === 0) return
        for (const rank of gone) {
          live.delete(rank)
          yield* Effect.ignore(links.get(rank)?.close ?? Effect.void)
          links.delete(rank)
        }
        yield* dissolve(reason)
        if (forming !== undefined) yield* Deferred.fail(forming.id, new NoUniqueId({ reason }))
        yield* advance
      }))

    const owner = yield* Actor.spawn<Accepted | Told, Scope.Scope>({
      name: "rendezvous-gate",
      handlers: {
        Accepted: ({ connection }) => Effect.asVoid(Effect.forkScoped(serve(connection))),
        Admit: ({ ranks }) => admit(ranks),
        Grow: ({ ranks }) => grow(ranks),
        Lose: ({ ranks, reason }) => lose(ranks, reason)
      }
    })
    // A gate that has stopped (the run is over) has no rendezvous left to change.
    const tell = (message: Told) => Effect.ignore(owner.tell(message))

    return {
      owner,
      begin: (world, order) =>
        serial(Effect.gen(function*() {
          for (const rank of world) live.add(rank)
          preferred = order
          yield* advance
        })),
      admit: (ranks) => tell(Told.Admit({ ranks })),
      grow: (ranks) => tell(Told.Grow({ ranks })),
      lose: (ranks, reason) => tell(Told.Lose({ ranks, reason })),
      current: Effect.sync(() => formed),
      history: Effect.sync(() => [...history])
    }
  })
