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
import { rmSync } from "node:fs"
import { dirname } from "node:path"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import * as Agent from "../agent/Agent.ts"
import { deviceTag } from "../agent/Devices.ts"
import type { RankDevice } from "../rank/RankContext.ts"
import { describe as describeExit, isClean } from "../ChildExit.ts"
import { type Directive, SupervisionEvent, type SupervisorState } from "../decide.ts"
import * as PortMux from "./PortMux.ts"
import { onStops } from "../ScopedStops.ts"
import { ActorFailures, describeDefect } from "../Actor.ts"
import { exitStatusFor, type StopRequest, type StopSignal } from "../StopRequests.ts"
import * as StatusBoard from "./StatusBoard.ts"
import * as Supervisor from "../Supervisor.ts"
import { describeVerdict, exitCode, type Loss, Verdict } from "../Verdict.ts"
import { beatEveryMs } from "../../config/FailurePolicy.ts"
import { deadlines, netTimeoutScale, scaled } from "../../config/NetTimeouts.ts"
import { VERSION } from "../../version.ts"
import { WorldFormed, RunEnded, Abort } from "../../wire/JoinMessages.ts"
import { newSalt, saltToHex, startToken } from "../../wire/Keys.ts"
import { admission as admissionFor } from "../../wire/Trust.ts"
import * as ControlGate from "./ControlGate.ts"
import * as JoinGate from "./JoinGate.ts"
import { checkpointPath, hostRunSpec, LaunchInputError, type Plan, sshWorkers } from "./Plan.ts"
import * as RemoteRanks from "./RemoteRanks.ts"
import { dashboardPage } from "./dashboard/page.ts"
import * as Metrics from "./Metrics.ts"
import * as RunJournal from "./RunJournal.ts"
import * as RunRegistry from "./RunRegistry.ts"
import type { RunEvent, RunState } from "./RunView.ts"
import * as WireCounters from "../../wire/WireCounters.ts"
import * as RendezvousGate from "./RendezvousGate.ts"
import { localLockHash } from "./Preflight.ts"
import * as SshSession from "./SshSession.ts"
import { agentTag, cleanupHosts } from "./RemoteCleanup.ts"
import { writeAgentSpec } from "../agent/AgentSpec.ts"
import * as CheckpointFile from "./CheckpointFile.ts"
import { privateDirectory, writePrivateFile } from "./PrivateFiles.ts"
import * as Controller from "./Controller.ts"
import * as Coordinator from "./Coordinator.ts"
import { ModelRoot, type RootState } from "./ModelRoot.ts"
import { parseState, stringifyState } from "../../wire/StateJson.ts"
import * as Native from "../../native/Native.ts"
import { elasticLimit, inForce } from "../Strategy.ts"
import type { CoordinatorOrder } from "../../wire/CoordinatorMessages.ts"
import { ToRanks, WorldGrown } from "../../wire/ControlMessages.ts"

export type Outcome = "completed" | "degraded" | "failed" | "interrupted"

export interface RankReport {
  readonly rank: number
  readonly host: string
  /** The device index, or `cpu`. */
  readonly device: string
  /** The last incarnation's pid. */
  readonly pid: number | null
  /** How each incarnation ended, oldest first: "status 0", "signal SIGKILL", … */
  readonly exits: ReadonlyArray<string>
}

export interface RunResult {
  readonly run: string
  readonly outcome: Outcome
  /** 0 completed (degraded included), 1 failed; interrupted: 128 + the signal (129 SIGHUP, 130 SIGINT, 143 SIGTERM), 130 from code. */
  readonly exitCode: number
  /** The final line, after `cohort: `. */
  readonly summary: string
  readonly rootCause: string | undefined
  readonly world: number
  readonly lost: ReadonlyArray<Loss>
  readonly ranks: ReadonlyArray<RankReport>
  readonly port: number
  /** The consensus checkpoint on disk for this run, when it has one: where `--resume` continues from. */
  readonly checkpoint?: { readonly path: string; readonly epoch: number } | undefined
}

export interface LaunchOptions {
  /** Where rank and relay lines go (default: this process's stdout and stderr). */
  readonly output?: Agent.OutputSink
  /**
   * Turn SIGINT, SIGTERM and SIGHUP into an orderly stop (copies of one stop count once; see StopRequests);
   * a deliberate second signal calls `onInsist`, by default exiting the process at once.
   */
  readonly handleSignals?: boolean
  /** A deliberate second stop signal while stopping (with `handleSignals`). */
  readonly onInsist?: (signal: StopSignal) => void
  /** Said when the run starts stopping on request, after how long it waits (the CLI: "press Ctrl-C again to exit at once"). */
  readonly stopHint?: string
  /** Told the port once the mux listens. */
  readonly onListening?: (port: number) => void
  /** Told each phase as the run enters it (the status page's `phase`). */
  readonly onPhase?: (phase: StatusBoard.Phase) => void
  /** Stop the run from outside: resolving it is like a signal (a reason alone: like SIGINT). */
  readonly interrupt?: Promise<string | StopRequest>
  /** Start from the consensus checkpoint at `job.checkpoint` (the CLI's `--resume`). */
  readonly resume?: boolean
  /** Copy this checkout to every ssh host's path first (the CLI's `--sync`). */
  readonly sync?: boolean
  /** Told when survivors hold a dead rank's redistributed work (benchmarks, tests). */
  readonly onRedistributed?: Coordinator.CoordinatorOptions["onRedistributed"]
  /** Where cohort's own lines go (default: stderr). */
  readonly logLine?: (text: string) => void
  /** `--events FILE`: the run's events as JSON lines. */
  readonly eventsFile?: string | undefined
  /** Told every event the run records, with the state after it (the terminal's progress lines). */
  readonly onEvent?: (event: RunEvent, state: RunState) => void
}

const defaultOutput: Agent.OutputSink = (line, stream) => {
  ;(stream === "stdout" ? process.stdout : process.stderr).write(`${line}\n`)
}

/** A free TCP port on this machine, for rank 0's store (torchrun's MASTER_PORT). */
const freePort = (address: string): number => {
  const probe = Bun.listen({ hostname: address, port: 0, socket: { data() {} } })
  const port = probe.port
  probe.stop(true)
  return port
}

interface RankBook {
  host: string
  device: string
  pid: number | null
  state: StatusBoard.RankStatus["state"]
  exits: Array<string>
  running: boolean
}

/**
 * Run a plan. Every actor of the run reports a defect to `actorFailed` (the first one is the root cause): before
 * formation it fails the window, after it the supervisor stops the ranks in order.
 */
export const run = (plan: Plan, options: LaunchOptions = {}): Effect.Effect<RunResult, LaunchInputError | PortMux.BindError, Scope.Scope> =>
  Effect.flatMap(Deferred.make<{ readonly actor: string; readonly reason: string }>(), (actorFailed) =>
    runPlan(plan, options, actorFailed).pipe(Effect.provideService(ActorFailures, {
      report: (actor, cause) =>
        Effect.flatMap(Deferred.succeed(actorFailed, { actor, reason: describeDefect(cause) }), (first) =>
          first ? Effect.logError(`internal error: the ${actor} failed: ${describeDefect(cause)} (please report it)`) : Effect.void)
    })))

const runPlan = (
  plan: Plan,
  options: LaunchOptions,
  actorFailed: Deferred.Deferred<{ readonly actor: string; readonly reason: string }>
): Effect.Effect<RunResult, LaunchInputError | PortMux.BindError, Scope.Scope> =>
  Effect.gen(function*() {
    const { config } = plan
    const output = options.output ?? defaultOutput
    const scale = yield* Effect.try({
      try: () => netTimeoutScale(),
      catch: (error) => new LaunchInputError({ problems: [(error as Error).message] })
    })
    const salt = newSalt()
    const admission = admissionFor({ bindAddress: plan.bindAddress, openAdmission: config.controller.join.openAdmission })
    if (admission.mode === "open" && admission.warning !== undefined) yield* Effect.logWarning(admission.warning)
    const handshakeMs = scaled(deadlines.handshakeMs, scale)
    const graceMs = config.failurePolicy.grace
    const heartbeatTimeoutMs = scaled(config.failurePolicy.heartbeatTimeout, scale)
    const join = config.controller.join
    const resumed = options.resume === true
      ? yield* CheckpointFile.read(checkpointPath(config)).pipe(Effect.mapError((error) => new LaunchInputError({ problems: [error.message] })))
      : undefined
    if (resumed !== undefined) yield* Effect.logInfo(`resuming from ${checkpointPath(config)}: epoch ${resumed.epoch} of run ${resumed.run} (saved: ${resumed.reason})`)

    // The run's state, as the status page shows it.
    const phase = yield* Ref.make<StatusBoard.Phase>("waiting")
    const book = new Map<number, RankBook>()
    const openedAt = Date.now()
    const latency = Metrics.latencyHistogram()

    let gate: JoinGate.JoinGate | undefined
    /** Hosts that can no longer be heard from (see forgetHost); one may come back under the same name and join again. */
    const gone = new Set<string>()
    /** Hosts admitted after formation, taken in order once the cohort has formed (see `grow`). */
    const lateArrivals = yield* Queue.unbounded<JoinGate.Member>()
    const token = startToken(salt)
    const board = yield* StatusBoard.make({
      startToken: token,
      requestDeadlineMs: scaled(deadlines.httpRequestMs, scale),
      onStart: () => gate?.arm ?? Effect.succeed({ armed: false as const, reason: "the run is still starting" }),
      page: dashboardPage,
      metrics: (): Effect.Effect<string> => Effect.map(journal.state, (state) => Metrics.render(state, latency, WireCounters.snapshot()))
    })
    // Everything that happens is recorded here: the status page, /metrics, --events and the terminal read it.
    const journal: RunJournal.RunJournal = yield* RunJournal.make({
      run: config.name,
      eventsFile: options.eventsFile,
      onEvent: (event, state) => Effect.zipRight(board.publish(state), Effect.sync(() => options.onEvent?.(event, state)))
    })
    const record = (event: RunEvent) => journal.record(event)
    yield* record({
      event: "run_started",
      at: Date.now(),
      run: config.name,
      hosts: plan.hosts.map(({ devices, worker }) => ({ host: worker.host, ranks: devices.devices.length }))
    })
    const enter = (next: StatusBoard.Phase) =>
      Effect.zipRight(Ref.set(phase, next), Effect.zipRight(Effect.sync(() => options.onPhase?.(next)), record({ event: "phase", at: Date.now(), phase: next })))

    gate = yield* JoinGate.make({
      rules: {
        minRanks: join.minRanks ?? plan.world,
        targetRanks: join.targetRanks,
        timeoutMs: join.timeoutMs,
        maxTimeoutMs: join.maxTimeoutMs,
        start: join.start
      },
      declared: new Map(plan.hosts.map(({ devices, worker }) => [worker.host, devices.devices.length])),
      admission,
      specFor: (host) => hostRunSpec(config, host, heartbeatTimeoutMs),
      salt,
      version: VERSION,
      handshakeMs,
      onJoined: (host, ranks) => record({ event: "host_joined", at: Date.now(), host, ranks }),
      onRefused: (peer, reason) => record({ event: "join_rejected", at: Date.now(), peer, reason }),
      afterFormation: join.afterFormation,
      maxRanks: join.maxRanks,
      canRejoin: (host) => gone.has(host),
      onLateJoin: (member) => Queue.offer(lateArrivals, member)
    })
    const world = yield* Ref.make(new Map<string, ReadonlyArray<number>>())
    // The training roles exist once the world has formed; relays register only after that.
    let coordinator: Coordinator.Coordinator | undefined
    let controller: Controller.Controller | undefined
    const control = yield* ControlGate.make({
      salt,
      hosts: Ref.get(world),
      handshakeMs,
      beatEveryMs: beatEveryMs(heartbeatTimeoutMs),
      onMessage: (host, message) => {
        switch (message._tag) {
          case "FromRank":
            return coordinator?.report(message.rank, message.report) ?? Effect.void
          case "HostBeats":
            return coordinator?.beats(message.ranks) ?? Effect.void
          case "HostFold":
            return controller?.fold(host, message) ?? Effect.void
          case "HostIdle":
            return controller?.idle(host, message.afterEpoch) ?? Effect.void
          case "ElasticPush":
            return controller?.elastic(host, message) ?? Effect.void
          default:
            return Effect.logWarning(`ignored an unexpected ${message._tag} from the relay of ${host}`)
        }
      },
      onClosed: (host) => controller?.leave(host) ?? Effect.void
    })
    // Interruption and the rank supervisor come later; the rendezvous reports to whichever exists.
    let supervisor: Supervisor.Supervisor | undefined
    let giveUpRanks: (ranks: ReadonlyArray<number>, reason: string) => Effect.Effect<void> = () => Effect.void
    const rendezvous = config.job.backend === "nccl"
      ? yield* RendezvousGate.make({
        salt,
        handshakeMs,
        idTimeoutMs: scaled(deadlines.rendezvousIdMs, scale),
        onFailure: (reason) => supervisor === undefined ? Effect.void : supervisor.send(SupervisionEvent.CoordinatorFailed({ reason })),
        onAbsent: (ranks, reason) => Effect.zipRight(giveUpRanks(ranks, reason), coordinator?.ranksDead(ranks, reason) ?? Effect.void)
      })
      : undefined
    const mux = yield* PortMux.start({
      address: plan.bindAddress,
      port: config.controller.port,
      magicDeadlineMs: scaled(deadlines.magicMs, scale),
      owners: { join: gate.owner, control: control.owner, http: board, ...(rendezvous === undefined ? {} : { rendezvous: rendezvous.owner }) }
    })
    options.onListening?.(mux.port)
    options.onPhase?.("waiting")
    yield* Effect.logInfo(
      `${config.name}: listening on ${plan.bindAddress}:${mux.port} (live page: http://${plan.bindAddress}:${mux.port}/ ; bun run status); ` +
        `waiting for ${plan.world} rank(s) on ${plan.hosts.length} host(s)`
    )
    yield* record({ event: "listening", at: Date.now(), address: plan.bindAddress, port: mux.port })
    yield* RunRegistry.register({ run: config.name, address: plan.dialAddress, port: mux.port, pid: process.pid, startedAt: openedAt, startToken: token })
    // The window's countdowns move while it is open; its time is the gate's (one clock, the one its deadlines use).
    const countDown = Effect.flatMap(gate.remaining, ({ capMs, windowMs }) =>
      record({ event: "join_window", at: Date.now(), windowRemainingMs: windowMs, capRemainingMs: capMs }))
    yield* countDown
    yield* Effect.forkScoped(Effect.gen(function*() {
      while ((yield* Ref.get(phase)) === "waiting") {
        yield* Effect.sleep(Duration.millis(500))
        if ((yield* Ref.get(phase)) === "waiting") yield* countDown
      }
    }))

    // Interruption: before formation it ends the window; after, the Supervisor stops the ranks in order.
    const interrupted = yield* Deferred.make<StopRequest>()
    /** Set once a stop was asked for: the stopping line then says how to insist. */
    let stopAsked = false
    const interrupt = (request: StopRequest) => {
      stopAsked = true
      return supervisor === undefined
        ? Effect.asVoid(Deferred.succeed(interrupted, request))
        : supervisor.send(SupervisionEvent.AbortRequested(request))
    }
    if (options.handleSignals === true) {
      const insist = options.onInsist ?? ((signal: StopSignal) => {
        process.stderr.write("cohort: run failed: interrupted again: exiting now without waiting for the ranks\n")
        process.exit(exitStatusFor(signal))
      })
      yield* onStops(interrupt, (signal) => Effect.sync(() => insist(signal)))
    }
    if (options.interrupt !== undefined) {
      yield* Effect.forkScoped(Effect.flatMap(
        Effect.promise(() => options.interrupt!),
        (request) => interrupt(typeof request === "string" ? { reason: request } : request)
      ))
    }
    const stopHint = options.stopHint ?? (options.handleSignals === true ? "press Ctrl-C again to exit at once" : undefined)

    let afterFormationAgentEnded: (host: string, reason: string) => Effect.Effect<void> = () => Effect.void
    // FanOut: this machine's agents run in-process and join over loopback; other hosts' over ssh; `agent: self` hosts dial in.
    const agentFailed = yield* Deferred.make<string>()
    const saltHex = admission.mode === "open" ? undefined : saltToHex(salt)
    // Every ssh host's session opens now and runs its preflight; no agent starts until every host has passed.
    const lockHash = localLockHash()
    const sessions = new Map<string, SshSession.SshSession>()
    for (const worker of sshWorkers(plan)) {
      sessions.set(worker.host, yield* SshSession.open({
        worker,
        run: config.name,
        tag: agentTag(config.name, worker.host),
        lockHash,
        graceMs,
        netTimeoutScale: scale,
        tunnelPort: worker.tunnel ? mux.port : undefined,
        // The agent there prefixes its ranks' and relay's lines, and its own say `cohort agent <host>:`.
        output
      }).pipe(Effect.mapError((problem) => new LaunchInputError({ problems: [problem] }))))
    }
    const hostsChecked = yield* Deferred.make<void, LaunchInputError>()
    yield* Effect.forkScoped(Effect.gen(function*() {
      const judgements = yield* Effect.forEach(sessions.values(), (session) => session.checked, { concurrency: "unbounded" })
      for (const note of judgements.flatMap((judgement) => judgement.notes)) yield* Effect.logInfo(note)
      const problems = judgements.flatMap((judgement) => judgement.problems)
      yield* problems.length === 0 ? Deferred.succeed(hostsChecked, undefined) : Deferred.fail(hostsChecked, new LaunchInputError({ problems }))
    }))
    const agentOf = ({ devices, start, worker }: Plan["hosts"][number]): Effect.Effect<void, string, Scope.Scope> => {
      switch (start) {
        case "in-process":
          return Effect.mapError(
            Agent.run({
              host: worker.host,
              devices,
              controller: { host: plan.dialAddress, port: mux.port },
              salt: admission.mode === "open" ? undefined : salt,
              version: VERSION,
              path: worker.path,
              inheritedEnv: process.env,
              handshakeMs,
              output
            }),
            (error) => error.message
          )
        case "ssh": {
          const session = sessions.get(worker.host)!
          // A tunnelled host dials its own loopback, which the session carries here.
          return Effect.zipRight(
            session.begin(writeAgentSpec({
              host: worker.host,
              controller: { host: worker.tunnel ? "127.0.0.1" : plan.remoteDialAddress, port: mux.port },
              saltHex,
              devices: worker.devices,
              path: worker.path
            })),
            session.ended
          )
        }
        case "self":
          return Effect.zipRight(selfDeployHint(worker.host, saltHex, `${plan.remoteDialAddress}:${mux.port}`), Effect.never)
      }
    }
    const agents = yield* Effect.forEach(plan.hosts, (host) =>
      // A failed preflight ends the run below; the agents never start.
      Effect.zipRight(Effect.orElse(Deferred.await(hostsChecked), () => Effect.never), agentOf(host)).pipe(
        Effect.scoped,
        // Before formation an agent's end fails the window; after it, the host is gone (see forgetHost).
        Effect.catchAll((reason) => Effect.zipRight(Deferred.succeed(agentFailed, reason), Effect.suspend(() => afterFormationAgentEnded(host.worker.host, reason)))),
        Effect.forkScoped
      ))

    const formation = yield* Effect.raceAll<Effect.Effect<JoinGate.Formation | { readonly _tag: "Refused"; readonly error: LaunchInputError }>>([
      gate.formation,
      Effect.matchEffect(Deferred.await(hostsChecked), { onFailure: (error) => Effect.succeed({ _tag: "Refused" as const, error }), onSuccess: () => Effect.never }),
      Effect.map(Deferred.await(agentFailed), (reason): JoinGate.Formation => ({ _tag: "Failed", reason })),
      Effect.map(Deferred.await(interrupted), ({ reason }): JoinGate.Formation => ({ _tag: "Failed", reason: `${reason} before the world formed` })),
      Effect.map(Deferred.await(actorFailed), ({ actor, reason }): JoinGate.Formation => ({ _tag: "Failed", reason: `internal error: the ${actor} failed: ${reason}` }))
    ])

    /** Every rank the run has had (the declared world until it forms). The join gate hands out the numbers (`take`), which only grow. */
    let currentWorld = plan.world
    const finish = (verdict: Verdict, lost: ReadonlyArray<Loss>): Effect.Effect<RunResult> =>
      Effect.gen(function*() {
        const summary = describeVerdict(verdict, lost)
        yield* enter(verdict._tag === "Completed" ? "done" : "failed")
        const code = exitCode(verdict)
        const outcome: Outcome = verdict._tag === "Failed"
          ? (verdict.kind === "aborted" ? "interrupted" : "failed")
          : verdict.dead > 0 ? "degraded" : "completed"
        const checkpointEpoch = coordinator === undefined ? undefined : yield* coordinator.checkpointEpoch
        yield* record({ event: "verdict", at: Date.now(), outcome, exitCode: code, summary })
        // The live pages see the verdict before the port closes under them.
        yield* board.endStreams
        return {
          run: config.name,
          outcome,
          exitCode: code,
          summary,
          rootCause: verdict._tag === "Failed" ? verdict.message : undefined,
          world: currentWorld,
          lost,
          ranks: [...book.entries()].sort(([a], [b]) => a - b).map(([rank, entry]) => ({
            rank,
            host: entry.host,
            device: entry.device,
            pid: entry.pid,
            exits: entry.exits
          })),
          port: mux.port,
          checkpoint: checkpointEpoch === undefined ? undefined : { path: checkpointPath(config), epoch: checkpointEpoch }
        }
      })

    if (formation._tag === "Refused") return yield* Effect.fail(formation.error)
    if (formation._tag === "Failed") {
      yield* cleanupHosts(sshWorkers(plan), config.name)
      const request = yield* Deferred.poll(interrupted)
      if (request._tag === "Some") {
        const { signal } = yield* request.value
        return yield* finish(Verdict.Failed({ kind: "aborted", message: `aborted: ${formation.reason}`, signal }), [])
      }
      const internal = yield* Deferred.isDone(actorFailed)
      return yield* finish(
        Verdict.Failed({ kind: internal ? "internal" : "join", message: internal ? formation.reason : `the join window failed: ${formation.reason}` }),
        []
      )
    }

    const { worldSize } = formation
    /** The world's hosts: those of formation, then each one that joined since (a host that came back is listed again). */
    const members = [...formation.members]
    currentWorld = worldSize
    /**
     * A host that cannot be heard from any more (its agent's session ended, or
     * every rank of it went silent): its join link is closed, so its ranks end
     * as lost (RemoteRanks) instead of being waited for, and it leaves the
     * controller's rounds. A cable cut closes nothing by itself.
     */
    const forgetHost = (host: string, why: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        const member = members.findLast((candidate) => candidate.host === host)
        if (member === undefined || gone.has(host)) return Effect.void
        gone.add(host)
        return Effect.all([
          Effect.logWarning(`${host} is gone (${why}): its ranks are lost`),
          record({ event: "host_gone", at: Date.now(), host, reason: why }),
          controller?.leave(host) ?? Effect.void,
          member.link.abort(why)
        ], { discard: true })
      })
    afterFormationAgentEnded = (host, reason) => forgetHost(host, reason)
    const silent = new Set<number>()
    yield* Ref.set(world, new Map(members.map((member) => [member.host, member.ranks])))
    const deviceLabel = deviceLabels(plan)
    for (const member of members) {
      member.ranks.forEach((rank, slot) =>
        book.set(rank, { host: member.host, device: deviceLabel(member.host, slot), pid: null, state: "starting", exits: [], running: false }))
    }
    // Counted down as ranks first run user code: the cohort forms at zero (a scan of every rank per report was quadratic).
    let notYetRunning = book.size
    yield* Effect.logInfo(`world formed: ${worldSize} rank(s) on ${members.length} host(s) (${members.map((member) => `${member.host}: ${member.ranks.join(", ")}`).join("; ")})`)
    const worldFormed = new WorldFormed({
      worldSize,
      hosts: members.map((member) => ({ host: member.host, ranks: member.ranks })),
      master: { addr: plan.dialAddress, port: freePort(plan.bindAddress) }
    })
    // Every rank of this version runs on the launcher's machine: any live one may generate ids.
    if (rendezvous !== undefined) yield* rendezvous.begin([...book.keys()], new Set(book.keys()))
    yield* Effect.forEach(members, (member) => Effect.ignore(member.link.send(worldFormed)), { discard: true })
    yield* record({
      event: "world_formed",
      at: Date.now(),
      world: worldSize,
      hosts: members.map((member) => ({ host: member.host, ranks: member.ranks, devices: member.ranks.map((_, slot) => deviceLabel(member.host, slot)) }))
    })
    yield* enter("forming")

    // Formed once every rank runs user code. Told to the Supervisor from the
    // link's reader itself, so it precedes any exit reported after it.
    let formed = false
    const cohortFormed = yield* Deferred.make<void>()
    const formCohort = Effect.gen(function*() {
      if (formed || supervisor === undefined) return
      formed = true
      yield* Deferred.succeed(cohortFormed, undefined)
      yield* Effect.logInfo(`cohort formed: all ${worldSize} rank(s) run user code`)
      yield* record({ event: "cohort_formed", at: Date.now() })
      yield* supervisor.send(SupervisionEvent.CohortFormed())
      if (coordinator !== undefined) yield* coordinator.cohortFormed
      yield* enter("training")
    })
    const remote = yield* RemoteRanks.make(members, {
      started: (rank, pid) => Effect.suspend(() => {
        const entry = book.get(rank)!
        entry.pid = pid
        entry.state = "running"
        return journal.recordSoon({ event: "rank_started", at: Date.now(), rank, pid })
      }),
      running: (rank) => Effect.suspend(() => {
        const entry = book.get(rank)!
        if (!entry.running) {
          entry.running = true
          notYetRunning -= 1
        }
        return notYetRunning === 0 ? formCohort : Effect.void
      }),
      exited: (rank, exit) => Effect.suspend(() => {
        const entry = book.get(rank)!
        entry.exits.push(describeExit(exit))
        entry.state = isClean(exit) ? "exited" : "dead"
        return Effect.zipRight(
          journal.recordSoon({ event: "rank_exited", at: Date.now(), rank, exit: describeExit(exit), clean: isClean(exit) }),
          // A clean exit is judged by the coordinator: with work left and no word of leaving, it is a loss.
          isClean(exit) ? coordinator?.exitedCleanly(rank) ?? Effect.void : Effect.void
        )
      }),
      resources: (host, samples) => journal.recordSoon({ event: "resources", at: Date.now(), host, samples })
    }, graceMs, (seat, member) => renumber(seat, member))

    // Orders for ranks go down their host's relay link.
    const hostOf = new Map(members.flatMap((member) => member.ranks.map((rank) => [rank, member.host] as const)))
    const sendToRanks = (ranks: ReadonlyArray<number>, order: CoordinatorOrder) => {
      const wake = order._tag === "EpochEnd" ? controller?.wakeAll(order.epoch) ?? Effect.void : Effect.void
      const byHost = new Map<string, Array<number>>()
      for (const rank of ranks) {
        const host = hostOf.get(rank)
        if (host === undefined) continue
        const targets = byHost.get(host)
        if (targets === undefined) byHost.set(host, [rank])
        else targets.push(rank)
      }
      // Built unchecked: the codec checks every message as it encodes it, and the constructor's check of `order`
      // alone cost ~30 µs, once per host per order (the coordinator's beat: every host, every beat interval).
      return Effect.zipRight(wake, Effect.forEach(byHost, ([host, targets]) => control.send(host, new ToRanks({ ranks: targets, order }, true)), { discard: true }))
    }
    const afterFormation = inForce(config.failurePolicy.strategy, true)
    const limitReached = (dead: number) => {
      const limit = afterFormation._tag === "Elastic" ? elasticLimit(afterFormation, worldSize, currentWorld) : undefined
      return limit !== undefined && dead >= limit
    }
    /** Joined ranks enter at an epoch boundary: their hosts join the controller's rounds of that epoch, every relay learns that its rounds from then on are shared, and NCCL re-forms with them. */
    const enterRanks = (ranks: ReadonlyArray<number>, epoch: number) =>
      Effect.gen(function*() {
        const hosts = new Set(ranks.flatMap((rank) => hostOf.get(rank) ?? []))
        for (const host of hosts) yield* controller?.enter(host, epoch) ?? Effect.void
        const grown = new WorldGrown({ worldSize: currentWorld, fromEpoch: epoch, ranks })
        yield* Effect.forEach(new Set(members.map((member) => member.host)), (host) => gone.has(host) ? Effect.void : control.send(host, grown), { discard: true })
        if (rendezvous !== undefined) yield* rendezvous.grow(ranks)
        yield* record({ event: "ranks_entered", at: Date.now(), ranks, epoch })
      })
    const runScope = yield* Effect.scope
    /**
     * A seat (a supervised child, named by the rank it first ran as) and the rank number it runs as now: they
     * differ once a training rank has been restarted, since a restart rejoins under a new number.
     */
    const numberOfSeat = new Map<number, number>()
    const seatOfNumber = new Map<number, number>()
    const numberOf = (seat: number) => numberOfSeat.get(seat) ?? seat
    const seatOf = (rank: number) => seatOfNumber.get(rank) ?? rank
    /**
     * A training rank restarted by the failure policy rejoins like a newcomer: under the next rank number, on
     * its old device, entering at the next epoch boundary from the consensus weights. Its old number is dead
     * to the coordinator at once (its unprocessed samples go to the others) and is never used again. Jobs
     * without epochs (and commands) keep their numbers: there is no boundary to enter at.
     */
    const renumber = (seat: number, member: JoinGate.Member): Effect.Effect<RemoteRanks.Renumbered | undefined> =>
      Effect.gen(function*() {
        if (coordinator === undefined || config.job.datasetSize === 0) return undefined
        const old = numberOf(seat)
        // The gate numbers every rank: late hosts and restarts never share a number.
        const rank = yield* gate!.take(1)
        currentWorld += 1
        numberOfSeat.set(seat, rank)
        seatOfNumber.set(rank, seat)
        hostOf.set(rank, member.host)
        yield* Ref.update(world, (hosts) => new Map(hosts).set(member.host, [...(hosts.get(member.host) ?? []), rank]))
        yield* control.adopt(member.host, [rank])
        const device = book.get(old)?.device ?? "?"
        book.set(rank, { host: member.host, device, pid: null, state: "starting", exits: [], running: true })
        yield* Effect.logInfo(`rank ${old} of ${member.host} restarts as rank ${rank}: it rejoins at the next epoch boundary from the consensus weights`)
        yield* record({ event: "world_grew", at: Date.now(), world: currentWorld, host: member.host, ranks: [rank], devices: [device], replaces: old })
        yield* coordinator.join([rank])
        yield* coordinator.ranksDead([old], `restarted as rank ${rank}`)
        if (rendezvous !== undefined) yield* Effect.zipRight(rendezvous.lose([old], `rank ${old} restarts as rank ${rank}`), rendezvous.admit([rank]))
        return { rank, slot: member.ranks.indexOf(seat), worldSize: currentWorld }
      })
    /** Ranks given up on while their processes may live (silent, or absent from a rendezvous): counted lost, and killed. */
    giveUpRanks = (ranks, reason) =>
      supervisor === undefined ? Effect.void : Effect.gen(function*() {
        // The supervisor knows seats (a restarted rank runs under a new number in its first number's seat).
        yield* supervisor!.send(SupervisionEvent.RanksLost({ ranks: ranks.map(seatOf), reason }))
        for (const rank of ranks) {
          silent.add(rank)
          const handle = yield* supervisor!.handle(`rank-${seatOf(rank)}`)
          if (handle !== undefined) yield* Effect.forkIn(handle.stop("kill", Duration.millis(graceMs)), runScope)
        }
        // A host none of whose ranks is heard any more is likely cut off: a kill order would never reach it.
        for (const member of members) {
          // A host that came back is judged by its new ranks only.
          if (members.findLast((each) => each.host === member.host) !== member) continue
          if (member.ranks.every((seat) => silent.has(numberOf(seat)))) yield* forgetHost(member.host, `none of its ranks has beaten for ${heartbeatTimeoutMs} ms`)
        }
      })
    if (config.job.program._tag === "Entry") {
      const kernels = yield* Effect.option(Native.load())
      if (kernels._tag === "None") yield* Effect.logWarning("the native library is missing: CPU reductions across hosts will fail (run `bun run build:native`)")
      const root = new ModelRoot(config.job.outerOptimizer, config.job.asyncAlpha)
      const saved = resumed?.root === undefined ? undefined : parseState(resumed.root) as RootState
      if (saved !== undefined && saved.anchor instanceof Float32Array && saved.momentum instanceof Float32Array) root.restore(saved)
      controller = Controller.make({
        hosts: members.map((member) => member.host),
        kernels: kernels._tag === "Some" ? kernels.value.kernels : undefined,
        send: (host, message) => control.send(host, message),
        root
      })
      coordinator = yield* Coordinator.make({
        run: config.name,
        ranks: [...book.keys()].sort((a, b) => a - b),
        job: config.job,
        heartbeatTimeoutMs,
        checkpointPath: checkpointPath(config),
        resume: resumed,
        rootState: () => {
          const state = root.snapshot()
          return state === undefined ? undefined : stringifyState(state)
        },
        send: sendToRanks,
        loseRanks: giveUpRanks,
        limitReached,
        onEvent: record,
        onLatency: (counts) => latency.add(counts),
        drained: Effect.suspend(() => supervisor?.send(SupervisionEvent.RunDrained()) ?? Effect.void),
        onEnter: enterRanks,
        ...(options.onRedistributed === undefined ? {} : { onRedistributed: options.onRedistributed })
      })
    }

    const lost: Array<Loss> = []
    /** A run-wide stop is said once: how long it may take, then whom it still waits for, every second. */
    let stopAnnounced = false
    const rankLabel = (child: SupervisorState["children"][number]) => `rank ${numberOf(child.spec.ranks[0]!)}${child.spec.group === undefined ? "" : ` (${child.spec.group})`}`
    const stillWaiting = Effect.gen(function*() {
      while (true) {
        yield* Effect.sleep(Duration.seconds(1))
        const waiting = (yield* supervisor!.state).children.filter((child) => child.status === "stopping")
        if (waiting.length === 0) return
        const named = waiting.slice(0, 8).map(rankLabel).join(", ")
        yield* Effect.logInfo(`stopping: still waiting for ${named}${waiting.length > 8 ? ` and ${waiting.length - 8} more` : ""}`)
      }
    })
    const announceStop = (directive: Extract<Directive, { readonly _tag: "Terminate" }>) =>
      Effect.gen(function*() {
        if (stopAnnounced || !(yield* supervisor!.state).stopping) return
        stopAnnounced = true
        const ranks = directive.ids.length
        if (directive.mode === "kill") return yield* Effect.logInfo(`stopping: killing ${ranks} rank(s) at once`)
        const seconds = (directive.graceMs ?? graceMs) / 1000
        const hint = stopAsked && stopHint !== undefined ? ` (${stopHint})` : ""
        yield* Effect.logInfo(`stopping: waiting up to ${seconds} s for ${ranks} rank(s)${hint}`)
        yield* Effect.forkIn(stillWaiting, runScope)
      })
    supervisor = yield* Supervisor.start({
      name: "rank-supervisor",
      strategy: config.failurePolicy.strategy,
      children: remote.children,
      grace: Duration.millis(graceMs),
      onDirective: (directive) =>
        directive._tag === "ReportDead"
          ? Effect.zipRight(
            Effect.zipRight(
              Effect.sync(() => lost.push({ ranks: directive.ranks.map(numberOf), cause: directive.cause })),
              record({ event: "rank_lost", at: Date.now(), ranks: directive.ranks.map(numberOf), cause: directive.cause })
            ),
            Effect.zipRight(
              // The death chain: the survivors take the dead ranks' work.
              coordinator?.ranksDead(directive.ranks.map(numberOf), directive.cause) ?? Effect.void,
              // The survivors re-rendezvous: a new NCCL communicator without the dead.
              rendezvous?.lose(directive.ranks.map(numberOf), directive.cause) ?? Effect.void
            )
          )
          : directive._tag === "Start" || directive._tag === "Verdict"
          ? Effect.void
          : Effect.zipRight(
            // Ranks cohort stops leave early on purpose: the coordinator must not count them lost.
            directive._tag === "Terminate"
              ? Effect.zipRight(
                coordinator === undefined
                  ? Effect.void
                  : coordinator.stopOrdered(directive.ids.flatMap((id) => /^rank-(\d+)$/.exec(id) === null ? [] : [numberOf(Number(id.slice(5)))])),
                announceStop(directive)
              )
              : Effect.void,
            record({ event: "decision", at: Date.now(), decision: directive._tag, detail: describeDirective(directive) })
          )
    })
    // An interruption that raced formation still stops the ranks.
    if (yield* Deferred.isDone(interrupted)) yield* supervisor.send(SupervisionEvent.AbortRequested(yield* Deferred.await(interrupted)))
    // A defect in any of the run's actors is the root cause, and the ranks are stopped in order.
    yield* Effect.forkScoped(Effect.flatMap(Deferred.await(actorFailed), (failure) => supervisor!.send(SupervisionEvent.ActorFailed(failure))))

    /**
     * Growth: a host admitted after formation is told the world (its ranks numbered after every rank the run
     * has had), its ranks become the supervisor's children and start, and the coordinator lets them in at the
     * next epoch boundary. Hosts that dial in while the cohort is still forming wait for it to form.
     */
    const grow = (member: JoinGate.Member) =>
      Effect.gen(function*() {
        members.push(member)
        currentWorld += member.ranks.length
        yield* Ref.update(world, (hosts) => new Map(hosts).set(member.host, member.ranks))
        gone.delete(member.host)
        const devices = member.ranks.map((_, slot) => member.deviceLabels[slot] ?? deviceLabel(member.host, slot))
        member.ranks.forEach((rank, slot) => {
          hostOf.set(rank, member.host)
          // `running` only counts ranks towards the cohort's formation, which is behind us.
          book.set(rank, { host: member.host, device: devices[slot]!, pid: null, state: "starting", exits: [], running: true })
        })
        yield* Effect.logInfo(`${member.host} joins the running cohort with rank(s) ${member.ranks.join(", ")}: ${currentWorld} rank(s) in the run`)
        yield* record({ event: "world_grew", at: Date.now(), world: currentWorld, host: member.host, ranks: member.ranks, devices })
        yield* Effect.ignore(member.link.send(new WorldFormed({
          worldSize: currentWorld,
          hosts: members.map((each) => ({ host: each.host, ranks: each.ranks })),
          master: worldFormed.master
        })))
        const children = yield* remote.add(member)
        if (coordinator !== undefined) yield* coordinator.join(member.ranks)
        if (rendezvous !== undefined) yield* rendezvous.admit(member.ranks)
        yield* supervisor!.join(children)
      })
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(lateArrivals), (member) => Effect.zipRight(Deferred.await(cohortFormed), grow(member)))))

    const verdict = yield* supervisor.verdict
    yield* Effect.forEach(members, (member) => Effect.ignore(member.link.send(
      verdict._tag === "Failed" ? new Abort({ reason: verdict.message }) : new RunEnded({ verdict: describeVerdict(verdict) })
    )), { discard: true })
    yield* control.closeAll
    // The agents stop their relays and leave; each has the grace period to do so.
    yield* Effect.forEach(agents, (agent) => Effect.timeout(Fiber.await(agent), Duration.millis(graceMs + 1_000)), { discard: true }).pipe(Effect.ignore)
    // Whatever did not leave on another host is ended there (a host given up on is not waited for).
    yield* cleanupHosts(sshWorkers(plan).filter((worker) => !gone.has(worker.host)), config.name)
    return yield* finish(verdict, lost)
  })

/** How to start a `agent: self` host's agent; under pre-shared admission the salt goes to a file only this user can read. */
const selfDeployHint = (host: string, saltHex: string | undefined, controller: string) =>
  Effect.gen(function*() {
    let saltArgument = ""
    if (saltHex !== undefined) {
      const file = `.cohort/salts/${process.pid}-${host.replace(/[^A-Za-z0-9_.-]/g, "_")}.salt`
      // A folder someone else can write could hold a link named like this file: it is refused, never written through.
      yield* Effect.try({
        try: () => {
          privateDirectory(dirname(file))
          writePrivateFile(file, `${saltHex}\n`)
        },
        catch: (error) => `cannot write ${host}'s salt file: ${error instanceof Error ? error.message : String(error)}`
      })
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(file, { force: true })))
      saltArgument = ` --salt-file <a copy of ${file}>`
    }
    yield* Effect.logInfo(`waiting for ${host} to join: on it, run  bun run agent --controller ${controller} --host ${host}${saltArgument}`)
  })

/** Each host's device labels by slot, looked up by host name ("?" for a slot the plan does not know). */
const deviceLabels = (plan: Plan): (host: string, slot: number) => string => {
  const byHost = new Map<string, ReadonlyArray<RankDevice>>()
  for (const { devices, worker } of plan.hosts) if (!byHost.has(worker.host)) byHost.set(worker.host, devices.devices)
  return (host, slot) => {
    const device = byHost.get(host)?.[slot]
    return device === undefined ? "?" : deviceTag(device)
  }
}

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
