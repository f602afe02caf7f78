/**
 * The owner of membership: the one place the formed world's facts change.
 *
 * It holds `Membership`'s state and applies `membership` to every event told
 * to it, in one synchronous step; readers take the state (`snapshot`) and
 * ask it through the selectors in Membership.ts. The effects an event calls for are carried out
 * by the fiber that told it, once the state has changed: a link's reader that
 * reports the last rank running user code tells the supervisor the cohort
 * formed before it reads that host's next report, so no exit reported after
 * it is judged as if the cohort had not formed. Nothing here waits on another
 * actor while holding the state, so no reaction can deadlock against it.
 *
 * Besides the pure state it keeps each host's join link (the latest, for a
 * host that came back): a link is a resource, not a fact, and giving a host up
 * closes it.
 */
import * as Effect from "effect/Effect"
import type { Member } from "./JoinGate.ts"
import { type HostEntry, membership, MembershipEvent, type MembershipState, empty } from "./Membership.ts"

export interface Reactions {
  /** Every rank of the formed world has run user code (said once). */
  readonly cohortFormed: Effect.Effect<void>
  /** The host is given up on; `abort` closes its join link, so its ranks end as lost instead of being waited for. */
  readonly hostGone: (host: string, why: string, abort: Effect.Effect<void>) => Effect.Effect<void>
}

export interface MembershipOwner {
  readonly tell: (event: MembershipEvent) => Effect.Effect<void>
  /** A host joined the formed world (growth, or back after it was given up on): its link speaks for it from now on. */
  readonly joined: (member: Member) => Effect.Effect<void>
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

/** Own the membership of the world formed of `members`. */
export const make = (members: ReadonlyArray<Member>, reactions: Reactions): Effect.Effect<MembershipOwner> =>
  Effect.gen(function*() {
    const [, formed] = membership(empty, MembershipEvent.WorldFormed({ hosts: members.map(entryOf) }))
    // Changed in one synchronous step per event: nothing runs between reading the state and writing the next.
    let current = formed
    const links = new Map(members.map((member) => [member.host, member.link] as const))

    const tell = (event: MembershipEvent) =>
      Effect.flatMap(Effect.sync(() => {
        const [effects, next] = membership(current, event)
        current = next
        return effects
      }), (effects) =>
        Effect.forEach(effects, (effect) => {
          switch (effect._tag) {
            case "CohortFormed":
              return reactions.cohortFormed
            case "HostGone": {
              const link = links.get(effect.host)
              return reactions.hostGone(effect.host, effect.why, link === undefined ? Effect.void : link.abort(effect.why))
            }
          }
        }, { discard: true }))

    return {
      tell,
      joined: (member) =>
        Effect.zipRight(Effect.sync(() => links.set(member.host, member.link)), tell(MembershipEvent.HostJoined({ host: entryOf(member) }))),
      links: () => [...links.values()],
      snapshot: () => current
    }
  })
