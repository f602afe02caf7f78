/**
 * The phase that supervises the ranks: the kernel's Supervisor over the world's ranks.
 *
 * Each rank is a seat (RemoteRanks: its start, stop and exit travel over its
 * host's join link) and the failure policy decides what each end means:
 * kill-all until every rank runs user code (the cohort has formed), then the
 * strategy after formation. This phase carries out the Supervisor's
 * directives beyond the children themselves: a reported death is told to
 * membership, whose owner says the ranks left to everyone who acts on it
 * (the coordinator's redistribution, a new NCCL generation without the
 * dead); a stop of the whole run is said once with its grace, then whom it
 * still waits for; crossing max_failure (judged by `decide` alone) has the
 * coordinator write the consensus checkpoint.
 *
 * It also grows the run: a host admitted after formation joins membership
 * (whose followers let its ranks in at the next epoch boundary), is told the
 * world (its ranks numbered after every rank the run has had), and its ranks
 * become children and start. A training rank restarted by the policy rejoins the same way,
 * under the next number on its old device.
 */
import type { Cause } from "../../kernel/policy/FailureRules.ts"
import { hostLostDetail } from "../../kernel/policy/SecondaryDeaths.ts"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HashSet from "effect/HashSet"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import { causeOf, type ChildExit, describe as describeExit, isClean } from "../../kernel/ChildExit.ts"
import { type Directive, SupervisionEvent, type SupervisorState } from "../../kernel/policy/decide.ts"
import * as Supervisor from "../../kernel/Supervisor.ts"
import { WorldFormed } from "../../wire/messages/JoinMessages.ts"
import * as Handoff from "./Handoff.ts"
import type * as JoinGate from "../front/JoinGate.ts"
import type { Listening } from "../front/Listen.ts"
import { hostOf, MembershipEvent, numberOf, ranksOf, seatOf } from "../membership/Membership.ts"
import type { MembershipOwner } from "../membership/MembershipOwner.ts"
import * as RemoteRanks from "../hosts/RemoteRanks.ts"
import type { RunEnv } from "./RunEnv.ts"
import type { RunStops } from "./RunStops.ts"
import type { StopRequest } from "../../kernel/StopRequests.ts"
import type { RankSupervision } from "./RankSupervision.ts"
import type { TrainingPlane } from "../training/TrainingPlane.ts"
import * as Followers from "../membership/MembershipFollowers.ts"

/** How long a rank's abnormal exit waits for its last lines before its signature is read and a rule's `log` searched in them. */
const LINES_WAIT_MS = 200

export interface SupervisionWiring {
  readonly listening: Listening
  /** The world's members at formation, with their links (RemoteRanks listens to each). */
  readonly formedMembers: ReadonlyArray<JoinGate.Member>
  readonly membership: MembershipOwner
  readonly training: TrainingPlane | undefined
  readonly stops: RunStops
  /** The world as every host was told it at formation (growth tells newcomers the world since). */
  readonly worldFormed: WorldFormed
}

export const supervise = (env: RunEnv, wiring: SupervisionWiring): Effect.Effect<RankSupervision, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { grace, plan, record } = env
    const { config } = plan
    const { listening, membership, stops, training } = wiring
    const { gate } = listening
    const coordinator = training?.coordinator
    const runScope = yield* Effect.scope
    // The Supervisor needs the children, and the children's reactions need the Supervisor: handed over once it starts.
    const supervisorReady = yield* Handoff.make<Supervisor.Supervisor>("the rank supervisor")
    const cohortFormedAt = yield* Deferred.make<void>()
    // Ranks start only once the supervisor does, so every rank's report finds it there.
    const withSupervisor = (act: (supervisor: Supervisor.Supervisor) => Effect.Effect<void>) => Effect.flatMap(supervisorReady.await, act)

    const cohortFormed = withSupervisor((supervisor) =>
      Effect.gen(function*() {
        yield* Deferred.succeed(cohortFormedAt, undefined)
        yield* Effect.logInfo(`cohort formed: all ${membership.snapshot().formedWith} rank(s) run user code`)
        yield* record({ event: "cohort_formed", at: Date.now() })
        yield* supervisor.send(SupervisionEvent.CohortFormed())
        if (coordinator !== undefined) yield* coordinator.cohortFormed
        yield* env.enter("training")
      }))

    /**
     * A training rank restarted by the failure policy rejoins like a newcomer: under the next rank number, on
     * its old device, entering at the next epoch boundary from the consensus weights. Its old number is dead
     * to the coordinator at once (its unprocessed samples go to the others) and is never used again. Jobs
     * without epochs (and commands) keep their numbers: there is no boundary to enter at.
     */
    const renumber = (seat: number, member: JoinGate.Member): Effect.Effect<RemoteRanks.Renumbered | undefined> =>
      Effect.gen(function*() {
        if (coordinator === undefined || config.job.datasetSize === 0) return undefined
        // The gate numbers every rank: late hosts and restarts never share a number.
        const rank = yield* gate.take(1)
        // Membership's owner tells the relay's gate, the journal, the coordinator and the rendezvous (SeatRenumbered).
        yield* membership.apply(MembershipEvent.Renumbered({ seat, rank }))
        return { rank, slot: member.ranks.indexOf(seat), worldSize: membership.snapshot().world }
      })

    const logRules = (env.plan.config.failurePolicy.strategy.rules ?? []).some((rule) => rule.when.log !== undefined)
    /** Each rank number's last exit and when it was heard: a restart's death, for the recovery figures. */
    const lastExits = new Map<number, { readonly exit: ChildExit; readonly at: number }>()
    const remote = yield* RemoteRanks.make(wiring.formedMembers, {
      started: (rank, pid) =>
        Effect.zipRight(membership.apply(MembershipEvent.RankStarted({ rank, pid })), env.journal.recordSoon({ event: "rank_started", at: Date.now(), rank, pid })),
      // Told from the link's reader itself: the cohort's formation reaches the supervisor before any exit reported after it.
      running: (rank) =>
        Effect.zipRight(membership.apply(MembershipEvent.RankRunning({ rank })), env.journal.recordSoon({ event: "rank_running", at: Date.now(), rank })),
      exited: (rank, exit) =>
        Effect.all([
          Effect.sync(() => lastExits.set(rank, { exit, at: Date.now() })),
          membership.apply(MembershipEvent.RankExited({ rank, exit: describeExit(exit) })),
          env.journal.recordSoon({ event: "rank_exited", at: Date.now(), rank, exit: describeExit(exit), clean: isClean(exit) }),
          // A clean exit is judged by the coordinator: with work left and no word of leaving, it is a loss.
          isClean(exit) && coordinator !== undefined ? coordinator.exitedCleanly(rank) : Effect.void
        ], { discard: true }),
      resources: (host, samples) => env.journal.recordSoon({ event: "resources", at: Date.now(), host, samples }),
      // A self-deployed agent's ranks' lines: to the run's output, as an ssh host's session and this machine's agent bring theirs.
      output: (lines) => Effect.sync(() => lines.forEach(({ line, stream }) => env.output(line, stream))),
      // The wait lets lines still in flight (an ssh session's) arrive first; a signal's end waits only when a rule's log may search them.
      lastLines: env.lastLines,
      lastErrors: env.lastErrors,
      linesWaitMs: LINES_WAIT_MS,
      linesForSignals: logRules,
      // A host's ranks are given up together, before their exits: none of its work is handed to another of them.
      hostLost: (host, ranks, why) => loseWithHost(host, ranks, why)
    }, grace, { renumber, seatOf: (rank) => seatOf(membership.snapshot(), rank) })

    /**
     * A lost host's ranks are given up at once, together (the policy judges their loss, the journal has it,
     * membership says they left, and so the coordinator hands their work on to ranks elsewhere): their exits
     * come one by one, each after a wait for its lines, and a rank of the host that returns meanwhile would hand
     * its work to another rank there. Each rank once, whichever way its host's loss was heard first: its link
     * ended (RemoteRanks), or the host was given up (its session ended: its link may stay open a while).
     */
    const goneWithHost = new Set<number>()
    const loseWithHost = (host: string, ranks: ReadonlyArray<number>, why: string): Effect.Effect<void> =>
      withSupervisor((supervisor) =>
        Effect.flatMap(supervisor.state, (state) => {
          // A run that is ending loses nobody more: its ranks are being stopped, or have finished.
          if (state.stopping || state.drained) return Effect.void
          const now = membership.snapshot()
          const running = (rank: number) => state.children.some((child) => child.spec.id === `rank-${seatOf(now, rank)}` && child.status === "running")
          const fresh = ranks.filter((rank) => !goneWithHost.has(rank) && !HashSet.has(now.left, rank) && running(rank))
          for (const rank of fresh) goneWithHost.add(rank)
          const at = Date.now()
          return fresh.length === 0 ? Effect.void : giveUp(fresh, hostLostDetail(host, why), "host_lost", fresh.map(() => at))
        }))
    // Told in the owner's fiber, which must only tell: the giving up (which asks membership) runs beside it.
    yield* membership.subscribe(Followers.supervision({
      hostGone: (host, why) => {
        const now = membership.snapshot()
        const ranks = (ranksOf(now, host) ?? []).filter((rank) => hostOf(now, rank) === host)
        return Effect.asVoid(Effect.forkIn(loseWithHost(host, ranks, why), runScope))
      }
    }))

    const giveUp = (ranks: ReadonlyArray<number>, reason: string, cause: Cause, diedAt: ReadonlyArray<number>, fatal = false) =>
      withSupervisor((supervisor) =>
        Effect.gen(function*() {
          const now = membership.snapshot()
          // The policy does not report these (membership knows): the journal has them here, each with its moment,
          // first: the survivors' next step (the recovery) must come after it. Said like the deaths the policy
          // reports: what became of which rank, and why (a silent one went silent).
          const causeOf = (rank: number) => {
            const where = hostOf(now, rank)
            const who = where === undefined ? `rank ${rank}` : `rank ${rank} of ${where}`
            return cause === "heartbeat" ? `${who} went silent: ${reason}` : `${who} lost: ${reason}`
          }
          yield* Effect.forEach(ranks, (rank, index) =>
            record({ event: "rank_lost", at: Date.now(), ranks: [rank], cause: causeOf(rank), kind: cause, ...(diedAt[index] === undefined ? {} : { diedAt: diedAt[index]! }) }), { discard: true })
          // They leave the world now: the coordinator hands on their work, the rendezvous re-forms without them.
          // Before the policy judges them: a limit it finds crossed has the coordinator cut the epoch, and the
          // cut must not wait on ranks that are gone (a lost host's, whose work is in no survivor's state).
          yield* membership.apply(MembershipEvent.RanksGivenUp({ ranks, reason }))
          // The supervisor knows seats (a restarted rank runs under a new number in its first number's seat).
          yield* supervisor.send(SupervisionEvent.RanksLost({ ranks: ranks.map((rank) => seatOf(now, rank)), reason, cause, ...(fatal ? { fatal } : {}) }))
          for (const rank of ranks) {
            const handle = yield* supervisor.handle(`rank-${seatOf(now, rank)}`)
            // A kill takes no grace.
            if (handle !== undefined) yield* Effect.forkIn(handle.stop("kill", Duration.zero), runScope)
          }
          // A host none of whose ranks is heard any more is likely cut off: membership gives it up. Only silence says
          // so: ranks given up for a rendezvous (or an NCCL generation) they never completed were beating all along.
          if (cause === "heartbeat") {
            yield* membership.apply(MembershipEvent.RanksSilent({ ranks, why: `none of its ranks has beaten for ${env.heartbeatTimeoutMs} ms` }))
          }
        }))

    // A run-wide stop is said once: how long it may take, then whom it still waits for, every second.
    let stopAnnounced = false
    const rankLabel = (child: SupervisorState["children"][number]) =>
      `rank ${numberOf(membership.snapshot(), child.spec.ranks[0]!)}${child.spec.group === undefined ? "" : ` (${child.spec.group})`}`
    const stillWaiting = (supervisor: Supervisor.Supervisor) =>
      Effect.gen(function*() {
        while (true) {
          yield* Effect.sleep(Duration.seconds(1))
          const waiting = (yield* supervisor.state).children.filter((child) => child.status === "stopping")
          if (waiting.length === 0) return
          const named = waiting.slice(0, 8).map(rankLabel).join(", ")
          yield* Effect.logInfo(`stopping: still waiting for ${named}${waiting.length > 8 ? ` and ${waiting.length - 8} more` : ""}`)
        }
      })
    const announceStop = (directive: Extract<Directive, { readonly _tag: "Terminate" }>) =>
      withSupervisor((supervisor) =>
        Effect.gen(function*() {
          if (stopAnnounced || !(yield* supervisor.state).stopping) return
          stopAnnounced = true
          const ranks = directive.ids.length
          if (directive.mode === "kill") return yield* Effect.logInfo(`stopping: killing ${ranks} rank(s) at once`)
          const seconds = directive.graceMs !== undefined ? directive.graceMs / 1000 : Duration.toSeconds(grace)
          const hint = stops.asked() && stops.hint !== undefined ? ` (${stops.hint})` : ""
          yield* Effect.logInfo(`stopping: waiting up to ${seconds} s for ${ranks} rank(s)${hint}`)
          yield* Effect.forkIn(stillWaiting(supervisor), runScope)
        }))

    const numbers = (ranks: ReadonlyArray<number>) => {
      const now = membership.snapshot()
      return ranks.map((seat) => numberOf(now, seat))
    }
    const onDirective = (directive: Directive): Effect.Effect<void> => {
      switch (directive._tag) {
        case "ReportDead": {
          const ranks = numbers(directive.ranks)
          return Effect.all([
            record({
              event: "rank_lost",
              at: Date.now(),
              ranks,
              cause: directive.cause,
              ...(directive.kind === undefined ? {} : { kind: directive.kind }),
              ...(directive.rule === undefined ? {} : { rule: directive.rule }),
              ...(directive.diedAt === undefined ? {} : { diedAt: directive.diedAt })
            }),
            // The death chain starts at membership: those it says left are handed on and re-rendezvoused without.
            membership.apply(MembershipEvent.RanksLost({ ranks, cause: directive.cause }))
          ], { discard: true })
        }
        case "Start":
        case "Verdict":
          return Effect.void
        case "LimitCrossed":
          // decide alone judges max_failure; the coordinator writes the consensus checkpoint and tells the survivors.
          return Effect.zipRight(
            coordinator?.stopRun(directive.message) ?? Effect.void,
            record({ event: "decision", at: Date.now(), decision: directive._tag, detail: directive.message })
          )
        case "Terminate": {
          const stopped = numbers(directive.ids.flatMap((id) => /^rank-(\d+)$/.exec(id) === null ? [] : [Number(id.slice(5))]))
          return Effect.all([
            // Ranks cohort stops leave early on purpose: the coordinator must not count them lost.
            coordinator?.stopOrdered(stopped) ?? Effect.void,
            announceStop(directive),
            record({ event: "decision", at: Date.now(), decision: directive._tag, detail: describeDirective(directive) })
          ], { discard: true })
        }
        case "RuleMatched":
          return record({ event: "rule_matched", at: Date.now(), rule: directive.rule, action: directive.action, ranks: numbers(directive.ranks) })
        case "Restart": {
          // A death the policy carries by restarting: when it happened, as its exit was heard, for the recovery figures.
          const seat = /^rank-(\d+)$/.exec(directive.id)
          const rank = seat === null ? undefined : numbers([Number(seat[1])])[0]
          const last = rank === undefined ? undefined : lastExits.get(rank)
          return Effect.zipRight(
            rank === undefined
              ? Effect.void
              : record({
                event: "rank_restarting",
                at: Date.now(),
                rank,
                ...(last === undefined ? {} : { diedAt: last.exit.at ?? last.at, kind: causeOf(last.exit) })
              }),
            record({ event: "decision", at: Date.now(), decision: directive._tag, detail: describeDirective(directive) })
          )
        }
        default:
          return record({ event: "decision", at: Date.now(), decision: directive._tag, detail: describeDirective(directive) })
      }
    }

    const supervisor = yield* Supervisor.start({
      name: "rank-supervisor",
      strategy: config.failurePolicy.strategy,
      children: remote.children,
      onDirective
    })
    yield* supervisorReady.fill(supervisor)

    /** A host admitted after formation joins the running cohort (see above). */
    const grow = (member: JoinGate.Member) =>
      Effect.gen(function*() {
        // Membership's owner tells the journal, the coordinator and the rendezvous (HostAdmitted).
        yield* membership.joined(member)
        const now = membership.snapshot()
        yield* Effect.ignore(member.link.send(new WorldFormed({
          worldSize: now.world,
          hosts: now.hosts.map((each) => ({ host: each.host, ranks: each.ranks })),
          master: wiring.worldFormed.master
        })))
        yield* supervisor.join(yield* remote.add(member))
      })
    // Hosts that dial in while the cohort is still forming wait for it to form.
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(listening.lateArrivals), (member) => Effect.zipRight(Deferred.await(cohortFormedAt), grow(member)))))

    const abort = (request: StopRequest) =>
      Effect.zipRight(coordinator?.interrupted(`aborted: ${request.reason}`) ?? Effect.void, supervisor.send(SupervisionEvent.AbortRequested(request)))
    return { supervisor, giveUp, cohortFormed, drained: supervisor.send(SupervisionEvent.RunDrained()), abort }
  })

/** A supervisor's decision, in words, for the events file. */
const describeDirective = (directive: Directive): string => {
  switch (directive._tag) {
    case "Terminate":
      return `${directive.mode === "kill" ? "kill" : "stop"} ${directive.ids.join(", ")}: ${directive.reason}`
    case "Restart":
      return `restart ${directive.id} in ${directive.after} ms`
    case "Escalate":
      return directive.cause
    case "Note":
      return directive.message
    default:
      return directive._tag
  }
}
