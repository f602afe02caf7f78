/**
 * Who acts on a change of membership, and how: the one table of membership's
 * fan-out.
 *
 * Membership's owner publishes each effect of a step (Membership.ts) to these
 * followers, in the order the launcher subscribes them: the journal, the
 * control gate, the training plane, the NCCL rendezvous. Before, each place
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
import type { RunEvent } from "./RunView.ts"
import type { ControlGate } from "./ControlGate.ts"
import type { Controller } from "./Controller.ts"
import type { Coordinator } from "./Coordinator.ts"
import type { MembershipEffect } from "./Membership.ts"
import type { Subscriber } from "./MembershipOwner.ts"
import type { RendezvousGate } from "./RendezvousGate.ts"

export interface JournalSink {
  readonly record: (event: RunEvent) => Effect.Effect<void>
  /** The wall clock, in ms: the journal's `at`. */
  readonly now: () => number
}

/** The run's log lines and events file: growth, restarts under new numbers, hosts given up on. */
export const journal = (sink: JournalSink): Subscriber => (effect: MembershipEffect) => {
  switch (effect._tag) {
    case "HostAdmitted": {
      const { entry, world } = effect
      return Effect.zipRight(
        Effect.logInfo(`${entry.host} joins the running cohort with rank(s) ${entry.ranks.join(", ")}: ${world} rank(s) in the run`),
        sink.record({ event: "world_grew", at: sink.now(), world, host: entry.host, ranks: entry.ranks, devices: entry.devices, labels: entry.labels })
      )
    }
    case "SeatRenumbered": {
      const { device, host, label, old, rank, world } = effect
      return Effect.zipRight(
        Effect.logInfo(`rank ${old} of ${host} restarts as rank ${rank}: it rejoins at the next epoch boundary from the consensus weights`),
        sink.record({ event: "world_grew", at: sink.now(), world, host, ranks: [rank], devices: [device], labels: [label], replaces: old })
      )
    }
    case "HostGone":
      return Effect.zipRight(
        Effect.logWarning(`${effect.host} is gone (${effect.why}): its ranks are lost`),
        sink.record({ event: "host_gone", at: sink.now(), host: effect.host, reason: effect.why })
      )
    case "RanksLeft":
    case "CohortFormed":
      // Each loss is journaled where it is judged (rank_lost, with its rule and moment); formation by the supervision.
      return Effect.void
  }
}

/** The relays' gate: a restart's new number is spoken for by its host's relay. */
export const controlGate = (gate: Pick<ControlGate, "adopt">): Subscriber => (effect: MembershipEffect) =>
  effect._tag === "SeatRenumbered" ? gate.adopt(effect.host, [effect.rank]) : Effect.void

/** The training plane: the coordinator hands on the work of ranks that left and lets joining ones in; the controller's rounds lose a gone host. */
export const training = (plane: { readonly coordinator: Pick<Coordinator, "ranksDead" | "join">; readonly controller: Pick<Controller, "leave"> }): Subscriber =>
(effect: MembershipEffect) => {
  const { controller, coordinator } = plane
  switch (effect._tag) {
    case "RanksLeft":
      return coordinator.ranksDead(effect.ranks, effect.cause)
    case "HostAdmitted":
      return coordinator.join(effect.entry.ranks)
    case "SeatRenumbered":
      return Effect.zipRight(coordinator.join([effect.rank]), coordinator.ranksDead([effect.old], `restarted as rank ${effect.rank}`))
    case "HostGone":
      return controller.leave(effect.host)
    case "CohortFormed":
      return Effect.void
  }
}

/** The NCCL rendezvous: ranks that left force a generation without them; joining ones may dial in. */
export const rendezvous = (gate: Pick<RendezvousGate, "lose" | "admit">): Subscriber => (effect: MembershipEffect) => {
  switch (effect._tag) {
    case "RanksLeft":
      return gate.lose(effect.ranks, effect.cause)
    case "HostAdmitted":
      return gate.admit(effect.entry.ranks)
    case "SeatRenumbered":
      return Effect.zipRight(gate.lose([effect.old], `rank ${effect.old} restarts as rank ${effect.rank}`), gate.admit([effect.rank]))
    case "HostGone":
    case "CohortFormed":
      return Effect.void
  }
}
