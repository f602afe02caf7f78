/**
 * The training plane of a coordinated job: the Coordinator (epochs, liveness,
 * checkpoints) and the Controller (folds across hosts, the model root).
 *
 * Orders for ranks go down their host's relay link, routed by membership.
 * Ranks that join the formed cohort enter at an epoch boundary: their hosts
 * join the controller's rounds of that epoch, every relay learns that its
 * rounds from then on are shared, and NCCL re-forms with them. A plain
 * `command:` job (torchrun-style) has no training plane; one that plans
 * epochs runs the Python client and has (see `Job.isCoordinated`).
 *
 * The plane follows membership rather than being told by hand (see
 * MembershipFollowers): ranks that left are dead to the coordinator, a host
 * admitted or a seat renumbered brings joining ranks, and a host that is gone
 * leaves the controller's rounds.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Native from "../../native/Native.ts"
import { isCoordinated } from "../../config/Job.ts"
import { beatEveryMs } from "../../config/Heartbeat.ts"
import { deadlines, scaled } from "../../config/NetTimeouts.ts"
import type { CoordinatorOrder } from "../../wire/messages/CoordinatorMessages.ts"
import { ToRanks, WorldGrown } from "../../wire/messages/ControlMessages.ts"
import { parseState, stringifyState } from "../../wire/StateJson.ts"
import type * as ControlGate from "../front/ControlGate.ts"
import * as Controller from "./Controller.ts"
import * as Coordinator from "./Coordinator.ts"
import * as GroupRendezvous from "./GroupRendezvous.ts"
import type { Handoff } from "../run/Handoff.ts"
import { hostOf, liveHosts, rankRecords } from "../membership/Membership.ts"
import type { MembershipOwner } from "../membership/MembershipOwner.ts"
import { ModelRoot, type RootState } from "./ModelRoot.ts"
import { checkpointPath } from "../run/Plan.ts"
import type { RankSupervision } from "../run/RankSupervision.ts"
import type * as RendezvousGate from "../front/RendezvousGate.ts"
import type { RunEnv } from "../run/RunEnv.ts"

export interface TrainingPlane {
  readonly coordinator: Coordinator.Coordinator
  readonly controller: Controller.Controller
  /** The process groups' rendezvous store, for ranks that keep their own groups (the Python client). */
  readonly groupStore: GroupRendezvous.GroupRendezvous
}

export interface TrainingWiring {
  readonly membership: MembershipOwner
  readonly control: ControlGate.ControlGate
  readonly rendezvous: RendezvousGate.RendezvousGate | undefined
  /** The rank supervisor, made after the plane: ranks the coordinator gives up on are its to kill. */
  readonly supervision: Handoff<RankSupervision>
}

export const make = (env: RunEnv, wiring: TrainingWiring): Effect.Effect<TrainingPlane | undefined, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { config } = env.plan
    if (!isCoordinated(config.job)) return undefined
    const { control, membership, rendezvous, supervision } = wiring
    // Without the native library the controller reduces with the TypeScript kernels (and so do the relays):
    // the run works, slower, and says so once. NCCL jobs reduce on their GPUs: the controller's CPU rounds are
    // only their model syncs, not worth a warning.
    const cpu = config.job.backend !== "nccl"
    const kernels = cpu ? yield* Native.cpuKernelsSayingFallback() : (yield* Native.cpuKernels()).kernels
    const root = new ModelRoot(config.job.outerOptimizer, config.job.asyncAlpha)
    const saved = env.resumed?.root === undefined ? undefined : parseState(env.resumed.root) as RootState
    if (saved !== undefined && saved.anchor instanceof Float32Array && saved.momentum instanceof Float32Array) root.restore(saved)
    const formed = membership.snapshot()
    const controller = Controller.make({
      hosts: liveHosts(formed),
      kernels,
      send: (host, message) => control.send(host, message),
      root
    })

    const sendToRanks = (ranks: ReadonlyArray<number>, order: CoordinatorOrder) => {
      const wake = order._tag === "EpochEnd" ? controller.wakeAll(order.epoch) : Effect.void
      const now = membership.snapshot()
      const byHost = new Map<string, Array<number>>()
      for (const rank of ranks) {
        const host = hostOf(now, rank)
        if (host === undefined) continue
        const targets = byHost.get(host)
        if (targets === undefined) byHost.set(host, [rank])
        else targets.push(rank)
      }
      // Built unchecked: the codec checks every message as it encodes it, and the constructor's check of `order`
      // alone cost ~30 µs, once per host per order (the coordinator's beat: every host, every beat interval).
      return Effect.zipRight(wake, Effect.forEach(byHost, ([host, targets]) => control.send(host, new ToRanks({ ranks: targets, order }, true)), { discard: true }))
    }

    const enterRanks = (ranks: ReadonlyArray<number>, epoch: number) =>
      Effect.gen(function*() {
        const now = membership.snapshot()
        const hosts = new Set(ranks.flatMap((rank) => hostOf(now, rank) ?? []))
        for (const host of hosts) yield* controller.enter(host, epoch)
        const grown = new WorldGrown({ worldSize: now.world, fromEpoch: epoch, ranks })
        yield* Effect.forEach(liveHosts(now), (host) => control.send(host, grown), { discard: true })
        if (rendezvous !== undefined) yield* rendezvous.grow(ranks)
        yield* env.record({ event: "ranks_entered", at: Date.now(), ranks, epoch })
      })

    // Told of each generation by the coordinator's own announcement (below), before any member hears of it.
    let coordinator: Coordinator.Coordinator | undefined
    const groupStore = yield* GroupRendezvous.make({
      formWithinMs: scaled(deadlines.groupFormMs, env.scale),
      checkEveryMs: beatEveryMs(env.heartbeatTimeoutMs),
      answer: (rank, answer) => sendToRanks([rank], answer),
      // Given up, they leave membership, and the coordinator hears of it from there.
      lose: (ranks, reason) => supervision.ifReady((ranksSupervision) => ranksSupervision.giveUp(ranks, reason, "rendezvous", ranks.map(() => Date.now())))
    })
    const announcing = (ranks: ReadonlyArray<number>, order: CoordinatorOrder) =>
      order._tag === "Group" ? Effect.zipRight(groupStore.announce(order.generation, order.members), sendToRanks(ranks, order)) : sendToRanks(ranks, order)

    // An entry: job's TypeScript ranks time their all-reduce calls and send them with their progress: /metrics
    // shows their histogram from the start. A Python client's reduce through torch, untimed: "not measured" there.
    env.latency.measuredByRanks(config.job.program._tag === "Entry")
    coordinator = yield* Coordinator.make({
      run: config.name,
      ranks: rankRecords(formed).map(([rank]) => rank),
      job: config.job,
      heartbeatTimeoutMs: env.heartbeatTimeoutMs,
      checkpointPath: checkpointPath(config),
      resume: env.resumed,
      rootState: () => {
        const state = root.snapshot()
        return state === undefined ? undefined : stringifyState(state)
      },
      send: announcing,
      loseRanks: (ranks, reason, cause, diedAt, fatal) => supervision.ifReady((ranksSupervision) => ranksSupervision.giveUp(ranks, reason, cause, diedAt, fatal)),
      onEvent: env.record,
      onLatency: (counts) => env.latency.add(counts),
      drained: supervision.ifReady((ranksSupervision) => ranksSupervision.drained),
      onEnter: enterRanks,
      ...(env.options.onRedistributed === undefined ? {} : { onRedistributed: env.options.onRedistributed })
    })
    return { coordinator, controller, groupStore }
  })
