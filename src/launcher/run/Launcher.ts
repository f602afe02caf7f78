/**
 * The launcher tree: one run, from a checked plan to a verdict.
 *
 * PortMux owns the one port and hands each channel to its owner: the
 * JoinGate (join window), the ControlGate (relays) and the StatusBoard
 * (HTTP). FanOut starts an agent for every host: this machine's runs
 * in-process and joins over loopback through the real join channel, another
 * machine's is started over ssh (SshFanOut), and an `agent: self` host's is
 * started by someone else and dials in. Once the
 * window forms, every host is told the world, and the RankSupervisor (the
 * kernel's Supervisor over remote rank children) applies the failure policy:
 * kill-all until every rank runs user code (the cohort has formed), then the
 * strategy after formation. The verdict, the ranks it lost and each rank's
 * exits make the run's result.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { ActorFailures, describeDefect } from "../../kernel/Actor.ts"
import { SupervisionEvent } from "../../kernel/policy/decide.ts"
import { Verdict } from "../../kernel/policy/Verdict.ts"
import { fanOut } from "../hosts/FanOut.ts"
import { awaitFormation, tellWorld } from "./Formation.ts"
import * as Handoff from "./Handoff.ts"
import type * as JoinGate from "../front/JoinGate.ts"
import type { LaunchOptions, RunResult } from "./LaunchOptions.ts"
import { listen } from "../front/Listen.ts"
import { MembershipEvent } from "../membership/Membership.ts"
import * as Followers from "../membership/MembershipFollowers.ts"
import * as MembershipOwner from "../membership/MembershipOwner.ts"
import type { LaunchInputError, Plan } from "./Plan.ts"
import type * as PortMux from "../front/PortMux.ts"
import type { RankSupervision } from "./RankSupervision.ts"
import { supervise } from "./SuperviseRanks.ts"
import * as RunEnv from "./RunEnv.ts"
import * as RunStops from "./RunStops.ts"
import { end, endRun, endUnformed } from "./Teardown.ts"
import * as TrainingPlane from "../training/TrainingPlane.ts"

export type { LaunchOptions, Outcome, RankReport, RunResult } from "./LaunchOptions.ts"

type ActorFailure = { readonly actor: string; readonly reason: string }

/**
 * Run a plan. Every actor of the run reports a defect to `actorFailed` (the first one is the root cause): before
 * formation it fails the window, after it the supervisor stops the ranks in order.
 */
export const run = (plan: Plan, options: LaunchOptions = {}): Effect.Effect<RunResult, LaunchInputError | PortMux.BindError, Scope.Scope> =>
  Effect.flatMap(Deferred.make<ActorFailure>(), (actorFailed) =>
    runPlan(plan, options, actorFailed).pipe(Effect.provideService(ActorFailures, {
      report: (actor, cause) =>
        Effect.flatMap(Deferred.succeed(actorFailed, { actor, reason: describeDefect(cause) }), (first) =>
          first ? Effect.logError(`internal error: the ${actor} failed: ${describeDefect(cause)} (please report it)`) : Effect.void)
    })))

/** prepare → listen → fan out → await formation → supervise → tear down. */
const runPlan = (
  plan: Plan,
  options: LaunchOptions,
  actorFailed: Deferred.Deferred<ActorFailure>
): Effect.Effect<RunResult, LaunchInputError | PortMux.BindError, Scope.Scope> =>
  Effect.gen(function*() {
    // What later phases make and earlier ones must reach (see Handoff).
    const gateReady = yield* Handoff.make<JoinGate.JoinGate>("the join gate")
    const later = {
      membership: yield* Handoff.make<MembershipOwner.MembershipOwner>("membership"),
      training: yield* Handoff.make<TrainingPlane.TrainingPlane | undefined>("the training plane"),
      supervision: yield* Handoff.make<RankSupervision>("rank supervision")
    }
    const env = yield* RunEnv.prepare(plan, options, () =>
      Effect.flatMap(gateReady.poll, (gate) => gate._tag === "Some" ? gate.value.arm : Effect.succeed({ armed: false as const, reason: "the run is still starting" })))
    const listening = yield* listen(env, later)
    yield* gateReady.fill(listening.gate)
    const stops = yield* RunStops.wire(options, later.supervision)
    const fannedOut = yield* fanOut(env, listening.port, (host, reason) =>
      later.membership.ifReady((membership) => membership.apply(MembershipEvent.HostEnded({ host, why: reason }))))

    const formation = yield* awaitFormation(listening, fannedOut, stops.beforeRanks, actorFailed)
    if (formation._tag === "Refused") return yield* Effect.fail(formation.error)
    if (formation._tag === "Failed") {
      const request = yield* Deferred.poll(stops.beforeRanks)
      const internal = yield* Deferred.isDone(actorFailed)
      const verdict = request._tag === "Some"
        ? Verdict.Failed({ kind: "aborted", message: `aborted: ${formation.reason}`, signal: (yield* request.value).signal })
        : Verdict.Failed({ kind: internal ? "internal" : "join", message: internal ? formation.reason : `the join window failed: ${formation.reason}` })
      return yield* end(env, { verdict, membership: undefined, cleanUp: endUnformed(env), checkpointEpoch: Effect.succeed(undefined), port: listening.port })
    }

    // The world has formed: membership has one owner from now on.
    const { members } = formation
    const membership = yield* MembershipOwner.make(members, {
      // A rank runs user code only once the supervisor has started it: the supervision is there, or about to be.
      cohortFormed: Effect.flatMap(later.supervision.await, (supervision) => supervision.cohortFormed)
    })
    // Whoever acts on a change of membership follows it, in this order (see MembershipFollowers).
    yield* membership.subscribe(Followers.journal({ record: env.record, now: Date.now }))
    yield* membership.subscribe(Followers.controlGate(listening.control))
    yield* later.membership.fill(membership)
    const worldFormed = yield* tellWorld(env, listening, membership, members)
    yield* env.enter("forming")

    const training = yield* TrainingPlane.make(env, { membership, control: listening.control, rendezvous: listening.rendezvous, supervision: later.supervision })
    yield* later.training.fill(training)
    if (training !== undefined) yield* membership.subscribe(Followers.training(training))
    if (listening.rendezvous !== undefined) yield* membership.subscribe(Followers.rendezvous(listening.rendezvous))
    const supervision = yield* supervise(env, { listening, formedMembers: members, membership, training, stops, worldFormed })
    yield* later.supervision.fill(supervision)
    const { supervisor } = supervision
    // A stop that raced formation still stops the ranks, in order.
    const early = yield* Deferred.poll(stops.beforeRanks)
    if (early._tag === "Some") yield* supervision.abort(yield* early.value)
    // A defect in any of the run's actors is the root cause, and the ranks are stopped in order.
    yield* Effect.forkScoped(Effect.flatMap(Deferred.await(actorFailed), (failure) => supervisor.send(SupervisionEvent.ActorFailed(failure))))

    // The verdict is said as soon as it is known; the hosts are told and cleaned up after it (see Teardown).
    const supervised = yield* supervisor.verdict
    // Every rank ended without a failure, yet the plan is not done: never "completed" (a script that never joined).
    const unfinished = supervised._tag === "Completed" && training !== undefined ? yield* training.coordinator.unfinished : undefined
    const verdict = unfinished === undefined ? supervised : Verdict.Failed({ kind: "child-failed", message: unfinished })
    return yield* end(env, {
      verdict,
      membership,
      cleanUp: endRun(env, membership, listening.control, fannedOut.agents, verdict),
      checkpointEpoch: training === undefined ? Effect.succeed(undefined) : training.coordinator.checkpointEpoch,
      port: listening.port
    })
  })
