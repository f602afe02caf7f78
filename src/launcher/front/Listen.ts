/**
 * The run listens: the one port and the owners of its channels.
 *
 * The JoinGate runs the join window (and admits hosts after it), the
 * ControlGate carries the relays' reports up to the training plane, the
 * RendezvousGate hands out NCCL generations (nccl jobs only), and the
 * StatusBoard answers HTTP. The PortMux routes each connection to its owner
 * by the channel's magic. While the window is open its countdown is recorded
 * every half second, by the gate's own clock.
 */
import { hostname } from "node:os"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HashSet from "effect/HashSet"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import { SupervisionEvent } from "../../kernel/policy/decide.ts"
import { beatEveryMs } from "../../config/Heartbeat.ts"
import { usesRendezvous } from "../../config/Job.ts"
import { deadlines, scaled } from "../../config/NetTimeouts.ts"
import { VERSION } from "../../version.ts"
import { isRendezvousReport } from "../../wire/messages/CoordinatorMessages.ts"
import * as ControlGate from "./ControlGate.ts"
import { doorKeys } from "./DoorKeys.ts"
import type { Handoff } from "../run/Handoff.ts"
import * as JoinGate from "./JoinGate.ts"
import { ranksOf } from "../membership/Membership.ts"
import type { MembershipOwner } from "../membership/MembershipOwner.ts"
import { hostRunSpec, type Plan, windowRules, worldText } from "../run/Plan.ts"
import * as PortMux from "./PortMux.ts"
import type { RankSupervision } from "../run/RankSupervision.ts"
import * as RendezvousGate from "./RendezvousGate.ts"
import type { RunEnv } from "../run/RunEnv.ts"
import type { TrainingPlane } from "../training/TrainingPlane.ts"
import { invokedAs } from "../../kernel/ProgramName.ts"

export interface Listening {
  readonly gate: JoinGate.JoinGate
  readonly control: ControlGate.ControlGate
  readonly rendezvous: RendezvousGate.RendezvousGate | undefined
  readonly port: number
  /** Hosts admitted after formation, in order; they are let in once the cohort has formed. */
  readonly lateArrivals: Queue.Dequeue<JoinGate.Member>
}

/** What the channels' owners hand on to the phases made after them. */
export interface Later {
  readonly membership: Handoff<MembershipOwner>
  /** `undefined`: a job without epochs (a `command:` job) has no training plane. */
  readonly training: Handoff<TrainingPlane | undefined>
  readonly supervision: Handoff<RankSupervision>
}

/**
 * Where a person reaches the live page: the loopback a loopback-bound run listens on; for a run bound to every
 * interface, the address the other hosts dial (`controller.host`) unless that is a loopback one, and then this
 * host's name (0.0.0.0 is no address to browse to).
 */
export const pageAddress = (plan: Pick<Plan, "bindAddress" | "dialAddress" | "remoteDialAddress">, host: string = hostname()): string => {
  if (plan.bindAddress !== "0.0.0.0" && plan.bindAddress !== "::") return plan.bindAddress
  return isLoopback(plan.remoteDialAddress) ? host : plan.remoteDialAddress
}

const isLoopback = (address: string): boolean => /^127\./.test(address) || address === "::1" || address === "localhost"

/** An IPv6 address goes in brackets in a URL. */
const urlHost = (address: string): string => (address.includes(":") ? `[${address}]` : address)

export const listen = (env: RunEnv, later: Later): Effect.Effect<Listening, PortMux.BindError, Scope.Scope> =>
  Effect.gen(function*() {
    const { plan, record } = env
    const { config } = plan
    const join = config.controller.join
    const lateArrivals = yield* Queue.unbounded<JoinGate.Member>()
    // Each Accept carries its host's spec: found by name, not by a scan of the workers (1,000 joins, 1,000 workers).
    const workers = new Map<string, (typeof config.workers)[number]>()
    for (const worker of config.workers) if (!workers.has(worker.host)) workers.set(worker.host, worker)
    const gate = yield* JoinGate.make({
      rules: {
        ...windowRules(plan),
        timeoutMs: join.timeoutMs,
        maxTimeoutMs: join.maxTimeoutMs,
        start: join.start
      },
      // A host that resolves `devices: all` there may bring any number.
      declared: new Map(plan.hosts.map(({ devices, worker }) => [worker.host, devices?.devices.length])),
      admission: env.admission,
      specFor: (host) => hostRunSpec(config, host, env.heartbeatTimeoutMs, workers.get(host)),
      salt: env.salt,
      encrypt: config.controller.encrypt,
      version: VERSION,
      handshakeMs: env.handshakeMs,
      onJoined: (host, ranks) => record({ event: "host_joined", at: Date.now(), host, ranks }),
      onRefused: (peer, reason) => record({ event: "join_rejected", at: Date.now(), peer, reason }),
      afterFormation: join.afterFormation,
      maxRanks: join.maxRanks,
      // A host given up on may join again under its name.
      canRejoin: (host) => Option.match(later.membership.now(), { onNone: () => false, onSome: (owner) => HashSet.has(owner.snapshot().gone, host) }),
      onLateJoin: (member) => Queue.offer(lateArrivals, member)
    })
    const training = later.training
    const control = yield* ControlGate.make({
      salt: env.salt,
      encrypt: config.controller.encrypt,
      // Relays register once the world has formed; until then no host is anyone's.
      ranksOf: (host) => Effect.map(later.membership.poll, (owner) => owner._tag === "None" ? undefined : ranksOf(owner.value.snapshot(), host)),
      handshakeMs: env.handshakeMs,
      beatEveryMs: beatEveryMs(env.heartbeatTimeoutMs),
      onMessage: (host, message) => {
        switch (message._tag) {
          case "FromRank": {
            const { rank, report } = message
            return training.ifReady((plane) => {
              if (plane === undefined) return Effect.void
              if (!isRendezvousReport(report)) return plane.coordinator.report(rank, report)
              return report._tag === "StoreCall" ? plane.groupStore.call(rank, report) : plane.groupStore.formed(rank, report.generation)
            })
          }
          case "HostBeats":
            return training.ifReady((plane) => plane?.coordinator.beats(message.ranks) ?? Effect.void)
          case "HostFold":
            return training.ifReady((plane) => plane?.controller.fold(host, message) ?? Effect.void)
          case "HostIdle":
            return training.ifReady((plane) => plane?.controller.idle(host, message.afterEpoch) ?? Effect.void)
          case "ElasticPush":
            return training.ifReady((plane) => plane?.controller.elastic(host, message) ?? Effect.void)
          default:
            return Effect.logWarning(`ignored an unexpected ${message._tag} from the relay of ${host}`)
        }
      },
      onClosed: (host) => training.ifReady((plane) => plane?.controller.leave(host) ?? Effect.void)
    })
    const rendezvous = usesRendezvous(config.job)
      ? yield* RendezvousGate.make({
        salt: env.salt,
        encrypt: config.controller.encrypt,
        handshakeMs: env.handshakeMs,
        idTimeoutMs: scaled(deadlines.rendezvousIdMs, env.scale),
        onFailure: (reason) => later.supervision.ifReady(({ supervisor }) => supervisor.send(SupervisionEvent.CoordinatorFailed({ reason }))),
        // A member that never took part in its NCCL generation: the rules' nccl cause. Given up, it leaves
        // membership, and the coordinator hears of it from there.
        onAbsent: (ranks, reason) => later.supervision.ifReady((supervision) => supervision.giveUp(ranks, reason, "nccl", ranks.map(() => Date.now())))
      })
      : undefined
    const mux = yield* PortMux.start({
      address: plan.bindAddress,
      port: config.controller.port,
      magicDeadlineMs: scaled(deadlines.magicMs, env.scale),
      firstFrameMs: scaled(PortMux.STRANGER_FIRST_FRAME_MS, env.scale),
      doorKeys: doorKeys(env.salt, env.admission),
      owners: { join: gate.owner, control: control.owner, http: env.board, ...(rendezvous === undefined ? {} : { rendezvous: rendezvous.owner }) }
    })
    env.options.onListening?.(mux.port)
    env.options.onPhase?.("waiting")
    // With its token: the page shows nothing without it (StatusBoard).
    const page = `http://${urlHost(pageAddress(plan))}:${mux.port}/?token=${env.board.pageToken}`
    yield* Effect.logInfo(
      `${config.name}: listening on ${plan.bindAddress}:${mux.port} (run ${env.runId}; live page: ${page} ; ${invokedAs("status")}); ` +
        `waiting for ${worldText(plan)} on ${plan.hosts.length} host(s)`
    )
    if (config.controller.encrypt === true) {
      // Said once: the dialers learn it in each link's handshake, and nobody else would know.
      yield* Effect.logInfo("every link's frames are encrypted (controller.encrypt: true), not only authenticated")
    }
    yield* record({ event: "listening", at: Date.now(), address: plan.bindAddress, port: mux.port })
    yield* env.registration.listening({ address: plan.dialAddress, port: mux.port, page })
    // The window's countdowns move while it is open; its time is the gate's (one clock, the one its deadlines use).
    const countDown = Effect.flatMap(gate.remaining, ({ capMs, windowMs }) =>
      record({ event: "join_window", at: Date.now(), windowRemainingMs: windowMs, capRemainingMs: capMs }))
    yield* countDown
    yield* Effect.forkScoped(Effect.gen(function*() {
      while ((yield* env.phase) === "waiting") {
        yield* Effect.sleep(Duration.millis(500))
        if ((yield* env.phase) === "waiting") yield* countDown
      }
    }))
    return { gate, control, rendezvous, port: mux.port, lateArrivals }
  })
