/**
 * The owner of membership: the one place the formed world's facts change, and
 * the one voice that says they changed.
 *
 * An actor over the `membership` machine (Machine.ts): every event is stepped
 * in its fiber, one at a time, and each effect the step returns is published
 * to every subscriber in the order they subscribed, before the next event is
 * stepped. `apply` returns once that is done, so a link's reader that reports
 * the last rank running user code has told the supervisor the cohort formed
 * before it reads that host's next report: no exit reported after it is
 * judged as if the cohort had not formed.
 *
 * Subscribers only tell (a mailbox, a synchronous table): one that waited on
 * another actor could wait on someone who is applying an event here, and the
 * two would wait for each other. The rendezvous gate and the coordinator are
 * told through their mailboxes for that reason.
 *
 * Besides the pure state it keeps each host's join link (the latest, for a
 * host that came back): a link is a resource, not a fact, and giving a host up
 * closes it.
 */
import * as Effect from "effect/Effect"
import * as Request from "effect/Request"
import type * as Scope from "effect/Scope"
import * as Machine from "../../kernel/Machine.ts"
import type { Member } from "../front/JoinGate.ts"
import { empty, type HostEntry, membership, type MembershipEffect, MembershipEvent, type MembershipState } from "./Membership.ts"

export interface Reactions {
  /** Every rank of the formed world has run user code (said once). */
  readonly cohortFormed: Effect.Effect<void>
}

/** Told each membership effect, in the owner's fiber (see the header: it must only tell). */
export type Subscriber = (effect: MembershipEffect) => Effect.Effect<void>

export interface MembershipOwner {
  /** Step membership with `event` and publish what changed; returns once every subscriber has been told. */
  readonly apply: (event: MembershipEvent) => Effect.Effect<void>
  /** A host joined the formed world (growth, or back after it was given up on): its link speaks for it from now on. */
  readonly joined: (member: Member) => Effect.Effect<void>
  /** Tell `subscriber` every change from now on, after those subscribed before it. */
  readonly subscribe: (subscriber: Subscriber) => Effect.Effect<void>
  /** Each host's join link (the latest, for a host that came back): the run's end is said down them. */
  readonly links: () => ReadonlyArray<Member["link"]>
  /** The state now: every reader's (a gate's synchronous check, the orders' routing, the result). */
  readonly snapshot: () => MembershipState
}

/**
 * A member's devices as its agent named them in its join: the GPU's index, or `cpu` for a CPU slot (an
 * agent labels each of those `cpu`, see Devices.ts); and each one's label. Taken from the join, not the
 * plan: a host whose devices only it can resolve (`devices: all` elsewhere, a self-deployed agent) is
 * known from here on like any other.
 */
export const entryOf = (member: Member): HostEntry => ({
  host: member.host,
  ranks: member.ranks,
  devices: member.devices.map((index, slot) => (member.deviceLabels[slot] === "cpu" ? "cpu" : String(index))),
  labels: member.ranks.map((_, slot) => member.deviceLabels[slot] ?? "?")
})

/** A host joins with its link: the link is handed over in the same step that admits the host. */
class Admit extends Request.TaggedClass("Admit")<void, never, { readonly member: Member }> {}
class Subscribe extends Request.TaggedClass("Subscribe")<void, never, { readonly subscriber: Subscriber }> {}

/** Own the membership of the world formed of `members`. */
export const make = (members: ReadonlyArray<Member>, reactions: Reactions): Effect.Effect<MembershipOwner, never, Scope.Scope> =>
  Effect.gen(function*() {
    const [, formed] = membership(empty, MembershipEvent.WorldFormed({ hosts: members.map(entryOf) }))
    // Touched only in the owner's fiber (its handlers), like the state.
    const links = new Map(members.map((member) => [member.host, member.link] as const))
    const subscribers: Array<Subscriber> = []

    const carryOut = (effect: MembershipEffect): Effect.Effect<void> =>
      Effect.zipRight(
        Effect.forEach(subscribers, (subscriber) => subscriber(effect), { discard: true }),
        // Then the owner's own: the supervisor hears of formation; a gone host's link is closed, so its ranks end
        // as lost instead of being waited for (after the followers, whose lines say why first).
        effect._tag === "CohortFormed"
          ? reactions.cohortFormed
          : effect._tag === "HostGone"
          ? Effect.suspend(() => links.get(effect.host)?.abort(effect.why) ?? Effect.void)
          : Effect.void
      )

    const owner = yield* Machine.spawn<MembershipState, MembershipEvent, MembershipEffect, MembershipEvent, Admit | Subscribe>({
      name: "membership",
      machine: { initial: formed, step: membership },
      events: {
        WorldFormed: true,
        HostJoined: true,
        RankStarted: true,
        RankRunning: true,
        RankExited: true,
        Renumbered: true,
        RanksLost: true,
        RanksGivenUp: true,
        RanksSilent: true,
        HostEnded: true
      },
      carryOut,
      requests: (stepper) => ({
        Admit: ({ member }) => Effect.zipRight(Effect.sync(() => links.set(member.host, member.link)), stepper.step(MembershipEvent.HostJoined({ host: entryOf(member) }))),
        Subscribe: ({ subscriber }) => Effect.sync(() => void subscribers.push(subscriber))
      })
    })
    // An owner that has stopped (the run is over) has nothing left to change: late events are dropped.
    const ask = (message: MembershipEvent | Admit | Subscribe) => Effect.ignore(owner.ref.ask(message))

    return {
      apply: ask,
      joined: (member) => ask(new Admit({ member })),
      subscribe: (subscriber) => ask(new Subscribe({ subscriber })),
      links: () => [...links.values()],
      snapshot: owner.current
    }
  })
