/**
 * Who acts on a change of membership, and how: the one table of membership's
 * fan-out.
 *
 * Membership's owner publishes each effect of a step (Membership.ts) to these
 * followers, in the order the launcher subscribes them: the journal, the
 * control gate, the training plane, the NCCL rendezvous, the rank supervision. Before, each place
 * that changed membership also told every other party by hand (a death told
 * four sinks, a restart's renumbering made eight calls to five owners), and a
 * call left out went unnoticed until an end-to-end run; here a party follows
 * every change or none.
 *
 * Each follower only tells (a mailbox, a synchronous table, the journal): it
 * runs in the owner's fiber, and one that waited on another actor could wait
 * on someone applying an event to the owner.
 */
import * as Effect from "effect/Effect"
import type { RunEvent } from "../view/RunView.ts"
import type { ControlGate } from "../front/ControlGate.ts"
import type { Controller } from "../training/Controller.ts"
import type { Coordinator } from "../training/Coordinator.ts"
import type { MembershipEffect } from "./Membership.ts"
import type { Subscriber } from "./MembershipOwner.ts"
import type { RendezvousGate } from "../front/RendezvousGate.ts"

/** What a follower does with each kind of change; a kind it does not name changes nothing for it. */
type Reactions = {
  readonly [K in MembershipEffect["_tag"]]?: (effect: Extract<MembershipEffect, { readonly _tag: K }>) => Effect.Effect<void>
}

/** A subscriber from its reactions by kind. */
const following = (reactions: Reactions): Subscriber => (effect) => {
  const react = reactions[effect._tag] as ((effect: MembershipEffect) => Effect.Effect<void>) | undefined
  return react === undefined ? Effect.void : react(effect)
}

export interface JournalSink {
  readonly record: (event: RunEvent) => Effect.Effect<void>
  /** The wall clock, in ms: the journal's `at`. */
  readonly now: () => number
}

/**
 * The run's log lines and events file: growth, restarts under new numbers, hosts given up on. Each loss is
 * journaled where it is judged (rank_lost, with its rule and moment), and formation by the supervision.
 */
export const journal = (sink: JournalSink): Subscriber =>
  following({
    HostAdmitted: ({ entry, world }) =>
      Effect.zipRight(
        Effect.logInfo(`${entry.host} joins the running cohort with rank(s) ${entry.ranks.join(", ")}: ${world} rank(s) in the run`),
        sink.record({ event: "world_grew", at: sink.now(), world, host: entry.host, ranks: entry.ranks, devices: entry.devices, labels: entry.labels })
      ),
    SeatRenumbered: ({ device, host, label, old, rank, world }) =>
      Effect.zipRight(
        Effect.logInfo(`rank ${old} of ${host} restarts as rank ${rank}: it rejoins at the next epoch boundary from the consensus weights`),
        sink.record({ event: "world_grew", at: sink.now(), world, host, ranks: [rank], devices: [device], labels: [label], replaces: old })
      ),
    HostGone: ({ host, why }) =>
      Effect.zipRight(
        Effect.logWarning(`${host} is gone (${why}): its ranks are lost`),
        sink.record({ event: "host_gone", at: sink.now(), host, reason: why })
      )
  })

/** The relays' gate: a restart's new number is spoken for by its host's relay. */
export const controlGate = (gate: Pick<ControlGate, "adopt">): Subscriber =>
  following({ SeatRenumbered: ({ host, rank }) => gate.adopt(host, [rank]) })

/** The training plane: the coordinator hands on the work of ranks that left and lets joining ones in; the controller's rounds lose a gone host. */
export const training = (plane: { readonly coordinator: Pick<Coordinator, "ranksDead" | "join">; readonly controller: Pick<Controller, "leave"> }): Subscriber =>
  following({
    RanksLeft: ({ cause, ranks }) => plane.coordinator.ranksDead(ranks, cause),
    HostAdmitted: ({ entry }) => plane.coordinator.join(entry.ranks),
    SeatRenumbered: ({ old, rank }) => Effect.zipRight(plane.coordinator.join([rank]), plane.coordinator.ranksDead([old], `restarted as rank ${rank}`)),
    HostGone: ({ host }) => plane.controller.leave(host)
  })

/** The NCCL rendezvous: ranks that left force a generation without them; joining ones may dial in. */
export const rendezvous = (gate: Pick<RendezvousGate, "lose" | "admit">): Subscriber =>
  following({
    RanksLeft: ({ cause, ranks }) => gate.lose(ranks, cause),
    HostAdmitted: ({ entry }) => gate.admit(entry.ranks),
    SeatRenumbered: ({ old, rank }) => Effect.zipRight(gate.lose([old], `rank ${old} restarts as rank ${rank}`), gate.admit([rank]))
  })

/**
 * The rank supervision: a gone host's ranks are given up together, before their exits come one by one (so none
 * of its work is handed to another rank of that host). The giving up asks membership, so it only starts here.
 */
export const supervision = (sink: { readonly hostGone: (host: string, why: string) => Effect.Effect<void> }): Subscriber =>
  following({ HostGone: ({ host, why }) => sink.hostGone(host, why) })
