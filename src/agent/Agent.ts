/**
 * The agent: one per host. It joins the run through the launcher's join
 * channel. Once the world has formed it carries out the launcher's orders
 * for the host's ranks (`StartRank`, `StopRank`) and reports what becomes of
 * each one (`RankStarted`, `RankRunning`, `RankExited`, `RankResources`).
 * The failure policy is the launcher's: an agent decides nothing about the run.
 *
 * The host's children (its relay, and each incarnation of each rank) belong
 * to a kernel Supervisor. Their policy is data (`HostPolicy`): the relay is
 * significant, so its abnormal end takes the host's ranks with it, and the
 * ranks are temporary. The relay starts once every rank of the host runs user
 * code (`RelayChild`).
 *
 * Every child is stopped (the ranks side by side, then the relay) on `Abort`,
 * on `RunEnded`, when the join link ends (the launcher is gone), and when the
 * agent's own Scope closes. A relay that leaves cleanly gives the launcher's
 * RunEnded a moment to come, and the agent then ends as if it had lost the
 * link. A launcher-local host runs its agent inside the launcher, joining
 * over loopback exactly as a remote agent would.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Random from "effect/Random"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { describe as describeExit, isClean } from "../kernel/ChildExit.ts"
import { type Directive, SupervisionEvent } from "../kernel/policy/decide.ts"
import type { ProcessSpec } from "../kernel/ProcessChild.ts"
import { roleVariables } from "../kernel/Role.ts"
import { Shutdown } from "../kernel/Shutdown.ts"
import * as Machine from "../kernel/Machine.ts"
import * as Supervisor from "../kernel/Supervisor.ts"
import type { RankDevice } from "../rank/RankContext.ts"
import { type Accept, Hello, joinCodec, type JoinMessage, RankExited, RankResources, RankRunning, type StartRank, type StopRank, type WorldFormed } from "../wire/messages/JoinMessages.ts"
import * as Native from "../native/Native.ts"
import * as OutputForwarder from "./OutputForwarder.ts"
import { makeResourceSampler } from "./ResourceSampler.ts"
import { runDirPrefix, sweepStaleRunDirs } from "./StaleRunDirs.ts"
import { hostKey, OPEN_SALT, rankKey, saltFromHex } from "../wire/Keys.ts"
import * as Link from "../wire/Link.ts"
import { printable } from "../wire/Printable.ts"
import { OPEN_KEY_ID } from "../wire/Trust.ts"
import type { EntryPoints } from "../kernel/EntryPoints.ts"
import { deviceIndex, deviceTag, type HostDevices } from "./Devices.ts"
import { type HostEnvelope, toEnvironment } from "../wire/messages/Envelope.ts"
import { LOCAL_PROTOCOL_VERSION } from "../wire/LocalFrames.ts"
import { HANDSHAKE_DIALS, retryDelayMs } from "./HandshakeRetry.ts"
import { hostStrategy, isRankChild, rankChildId, relayHasEnded, RUN_END_WAIT } from "./HostPolicy.ts"
import { admitted, type HostEffect, HostEvent, type HostState, hostState, lostWithRelay } from "./HostState.ts"
import { rankChild, type RunningRank } from "./RankChild.ts"
import { RelayEnd, relayChild } from "./RelayChild.ts"
import { isCoordinated } from "../config/Job.ts"
import { internalEnvironment, rankEnvironment, scrub } from "./RankEnvironment.ts"
import * as CallbackFibers from "../kernel/CallbackFibers.ts"
import { AGENT_ANNOTATION } from "./AgentAnnotation.ts"

type JoinLink = Link.Link<JoinMessage, JoinMessage>

/**
 * Why an agent stopped. `permanent`: trying again cannot help (the launcher
 * refused the host, a protocol mismatch); otherwise it may (the launcher was
 * not there yet, or went away). A Schema: it is the agent's answer to the
 * launcher (in-process, or as its exit status and last line over ssh).
 */
export class AgentError extends Schema.TaggedError<AgentError>()("AgentError", {
  host: Schema.String,
  reason: Schema.String,
  permanent: Schema.optional(Schema.Boolean)
}) {
  override get message(): string {
    return `agent of ${this.host}: ${this.reason}`
  }
}

/** How often the ranks' resource use is sampled and sent. */
const RESOURCES_EVERY = Duration.seconds(2)

export type OutputSink = (line: string, stream: "stdout" | "stderr") => void

export interface AgentOptions {
  readonly host: string
  readonly devices: HostDevices
  /** Where the launcher's port is, as this host reaches it. */
  readonly controller: { readonly host: string; readonly port: number }
  /** Pre-shared admission: the run's salt. Absent: open admission, and the `Accept` brings it. */
  readonly salt?: Uint8Array | undefined
  readonly version: string
  /** The project checkout on this host: ranks run there. */
  readonly path: string
  /** The environment ranks start from (scrubbed of cohort's internals). */
  readonly inheritedEnv: Readonly<Record<string, string | undefined>>
  readonly handshakeMs: number
  /** Where the children's prefixed lines go. */
  readonly output: OutputSink
  /**
   * Send the children's lines up the join link too (`RankOutput`), for the launcher's terminal and log files:
   * a self-deployed agent's, which no ssh session carries. `output` still gets every line.
   */
  readonly forwardOutput?: boolean | undefined
  /** Where the relay's and the rank's programs are (given by the entry point that started this agent). */
  readonly entries: EntryPoints
}

/**
 * Join, then serve the host until the run ends. Its lines are the host's agent's (`cohort agent HOST:`, and
 * `agent-HOST.log` under `--log-dir`), inside the launcher's process too (logger.ts reads the annotation).
 */
export const run = (options: AgentOptions): Effect.Effect<void, AgentError, Scope.Scope> =>
  Effect.gen(function*() {
    const { host } = options
    const failWith = (reason: string) => new AgentError({ host, reason })
    const link: JoinLink = yield* dialJoin(options).pipe(Effect.mapError((error) => failWith(error.message)))
    const next = (within: number, waiting: string) =>
      link.receive.pipe(
        Effect.timeoutFail({ duration: Duration.millis(within), onTimeout: () => failWith(`no ${waiting} from the launcher within ${within} ms`) }),
        Effect.mapError((error) => (error._tag === "AgentError" ? error : failWith(error.message)))
      )

    yield* link.send(new Hello({
      host,
      devices: options.devices.devices.map(deviceIndex),
      deviceLabels: options.devices.labels,
      pid: process.pid,
      version: options.version
    })).pipe(Effect.mapError((error) => failWith(error.message)))
    const answer = yield* next(options.handshakeMs, "answer to the Hello")
    const refuse = (reason: string) => new AgentError({ host, reason, permanent: true })
    // Under the open key anyone could have written this refusal; it is heeded only by an agent that has no salt,
    // which this launcher would never admit (see `Trust`).
    if (answer._tag === "Reject" && answer.needs === "salt" && options.salt === undefined) {
      return yield* refuse(
        `the launcher at ${options.controller.host}:${options.controller.port} admits only agents that hold the run's salt, and this one has none: ` +
          `copy the salt file named in the launcher's line "waiting for ${host} to join" (under .cohort/salts/ where the launcher runs) ` +
          "to this machine and start the agent again with --salt-file FILE (or --salt-stdin, or COHORT_SALT)"
      )
    }
    if (answer._tag === "Reject") return yield* refuse(`the launcher refused this host: ${printable(answer.reason, 4_096)}`)
    if (answer._tag !== "Accept") return yield* refuse(`expected Accept or Reject, got ${answer._tag}`)
    const salt = options.salt ?? (answer.saltHex === undefined ? undefined : saltFromHex(answer.saltHex))
    if (salt === undefined) return yield* failWith("open admission, but the Accept carried no salt")

    const formed = yield* next(answer.formationWaitMs + options.handshakeMs, "WorldFormed")
    if (formed._tag === "Abort") return yield* Effect.logWarning(`${host}: the launcher aborted before the world formed: ${formed.reason}`)
    if (formed._tag !== "WorldFormed") return yield* refuse(`expected WorldFormed, got ${formed._tag}`)
    yield* serve(options, link, answer, formed, salt)
  }).pipe(Effect.annotateLogs(AGENT_ANNOTATION, options.host))

/**
 * Dial the launcher's join channel. A dial it closes before answering is made again after a while
 * (`HandshakeRetry`), with a line each time: under a flood of strangers the launcher's door may have let this one
 * go before reading it, and a busy launcher is no reason to give up at once. Any other failure is final here.
 */
const dialJoin = (options: AgentOptions): Effect.Effect<JoinLink, Link.LinkError, Scope.Scope> => {
  const where = `${options.controller.host}:${options.controller.port}`
  const dial = Link.dial({
    channel: "join",
    host: options.controller.host,
    port: options.controller.port,
    salt: options.salt ?? OPEN_SALT,
    // Without a salt, say so: a launcher that needs one can then answer instead of dropping the dial.
    keyId: options.salt === undefined ? OPEN_KEY_ID : undefined,
    inbound: joinCodec,
    outbound: joinCodec,
    handshakeMs: options.handshakeMs,
    rekeyOn: (message: JoinMessage) => (message._tag === "Accept" && message.saltHex !== undefined ? saltFromHex(message.saltHex) : undefined)
  })
  const attempt = (made: number): Effect.Effect<JoinLink, Link.LinkError, Scope.Scope> =>
    Effect.catchIf(dial, Link.closedBeforeAnswer, (error) =>
      Effect.gen(function*() {
        const delay = retryDelayMs(made + 1, yield* Random.next)
        if (delay === undefined) {
          const detail = `${error.detail}; ${HANDSHAKE_DIALS} dials in a row were closed before an answer`
          return yield* new Link.LinkError({ channel: error.channel, peer: error.peer, reason: error.reason, detail })
        }
        yield* Effect.logWarning(
          `the launcher at ${where} closed the handshake before answering (dial ${made} of ${HANDSHAKE_DIALS}): it may be busy, or ` +
            `refusing strangers (under a flood of unauthenticated connections it lets the oldest go); dialling again in ${(delay / 1000).toFixed(2)} s`
        )
        yield* Effect.sleep(Duration.millis(delay))
        return yield* attempt(made + 1)
      }))
  return attempt(1)
}

/** How long after its ranks run a host whose ranks never use the relay starts it (as the launcher's watchdog). */
const WATCHDOG_RELAY_DELAY = Duration.seconds(1)

/**
 * After formation: the host's supervisor (`HostPolicy`) over the relay and the
 * ranks the launcher orders, until the run ends.
 */
const serve = (options: AgentOptions, link: JoinLink, accept: Accept, world: WorldFormed, salt: Uint8Array) =>
  Effect.gen(function*() {
    const { host } = options
    const { spec } = accept
    const scope = yield* Effect.scope
    // IPC callbacks (a rank saying it runs user code) act through fibers owned by this scope.
    const callbacks = yield* CallbackFibers.make("agent")
    // The run's grace as the launcher sent it: the relay and every rank are stopped with it.
    const grace = Duration.millis(spec.graceMs)
    const shutdown = Shutdown.Grace({ grace })
    const cwd = resolve(options.path)
    const entry = spec.program._tag === "Entry" ? spec.program.entry : undefined
    // The host's private run directory: the relay's socket and the shared-memory segments, gone with the run.
    // A SIGKILLed agent never removes its own, so the directories of ended runs go first; the name tells ours apart.
    const root = yield* Effect.sync(sharedMemoryRoot)
    const swept = yield* Effect.sync(() => sweepStaleRunDirs(root))
    if (swept.length > 0) {
      yield* Effect.logInfo(`${host}: removed ${swept.length} leftover run ${swept.length === 1 ? "directory" : "directories"} of ended runs from ${root}`)
    }
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(runDirPrefix(root, spec.run))),
      (path) => Effect.sync(() => rmSync(path, { recursive: true, force: true }))
    )
    const envelope: HostEnvelope = {
      protocol: LOCAL_PROTOCOL_VERSION,
      run: spec.run,
      host,
      groupRank: Math.max(0, world.hosts.findIndex((member) => member.host === host)),
      worldSize: world.worldSize,
      ranks: accept.ranks,
      devices: options.devices.devices,
      controller: options.controller,
      // This slot's rank's own key, filled in per rank (`envelopeOf`): no child of the agent gets the salt.
      rankKeyHex: "",
      entry,
      args: spec.args,
      backend: spec.backend,
      dir,
      socket: join(dir, "relay.sock"),
      datasetSize: spec.datasetSize,
      epochs: spec.epochs,
      cadence: spec.cadence,
      ...(spec.checkpointPickle === true ? { checkpointPickle: true } : {}),
      heartbeatTimeoutMs: spec.heartbeatTimeoutMs
    }
    /** A rank's envelope: its own key, and its number and the world's size when they moved since admission. */
    const envelopeOf = (rank: number, slot: number, worldSize: number | undefined) =>
      toEnvironment({
        ...envelope,
        ranks: accept.ranks.map((each, at) => (at === slot ? rank : each)),
        worldSize: worldSize ?? envelope.worldSize,
        rankKeyHex: Buffer.from(rankKey(salt, rank)).toString("hex")
      })
    const running = new Map<string, RunningRank>()
    /** Every rank of the host has run user code once: the relay may start. */
    const allRanksRunning = yield* Deferred.make<void>()
    // The host's facts (ranks checked in, last words, the relay lost, the stop and its cause) in one state, on the kernel.
    const facts = Machine.run<HostState, HostEvent, HostEffect, never>(
      { initial: admitted(accept.ranks), step: hostState },
      { carryOut: (effect) => effect._tag === "AllRanksRunning" ? Deferred.succeed(allRanksRunning, undefined) : Effect.void }
    )
    const ending = () => facts.current().ending
    const forwarder = options.forwardOutput === true ? yield* OutputForwarder.make((batch) => Effect.ignore(link.send(batch))) : undefined
    /** A child's line: here, and to the launcher when forwarding. */
    const childLine = (line: string, stream: "stdout" | "stderr") => {
      options.output(line, stream)
      forwarder?.push(line, stream)
    }
    // Lines forwarded so far go first: a rank's last lines reach the launcher before its RankExited.
    const report = (message: JoinMessage) => Effect.zipRight(forwarder?.flush ?? Effect.void, Effect.ignore(link.send(message)))
    const refuse = ({ incarnation, rank }: StartRank, detail: string) =>
      report(new RankExited({ rank, incarnation, code: null, signal: null, detail }))

    // The relay reduces with the TypeScript kernels where the native library cannot be loaded: said here, once
    // for the host (and once for the launcher's machine, whose controller says the same).
    // It is the machine's line, not the agent's: inside the launcher it stays a `cohort:` line, whichever says it first.
    if (entry !== undefined && spec.backend !== "nccl") yield* Native.cpuKernelsSayingFallback().pipe(Effect.annotateLogs(AGENT_ANNOTATION, null))

    // The ranks' resource use, for the status page and /metrics. GPUs are read through NVML (no CUDA context here).
    const gpuHost = options.devices.devices.some((device) => device.kind === "gpu")
    const native = gpuHost ? yield* Effect.option(Native.load()) : undefined
    const sampler = makeResourceSampler(native?._tag === "Some" ? native.value.nvml.sample : undefined)
    yield* Effect.forkIn(
      Effect.forever(Effect.zipRight(
        Effect.sleep(RESOURCES_EVERY),
        Effect.suspend(() => {
          const processes = [...running.values()].map(({ process, rank, slot }) => {
            const device = options.devices.devices[slot]
            return { rank, pid: process.pid, device: device?.kind === "gpu" ? device.index : "cpu" as const }
          })
          return processes.length === 0 ? Effect.void : report(new RankResources({ samples: sampler.sample(processes, performance.now()) }))
        })
      )),
      scope
    )

    // A `command:` job without a dataset has no coordinator, and its ranks never talk to the relay: there the relay
    // is only the host's watchdog over the launcher (it leaves when the launcher goes silent, and the agent with it).
    // It starts a while after the ranks run, so that a short job never pays for loading one beside its ranks.
    const relayReady = isCoordinated(spec)
      ? Deferred.await(allRanksRunning)
      : Effect.zipRight(Deferred.await(allRanksRunning), Effect.sleep(WATCHDOG_RELAY_DELAY))
    const markRunning = (rank: number, incarnation: number) =>
      Effect.zipRight(report(new RankRunning({ rank, incarnation })), facts.step(HostEvent.RankRunning({ rank })))

    // Past this moment (see RUN_END_WAIT) the agent has no one left to serve, and ends like one that lost its link.
    const awaitRunEnd = Effect.zipRight(
      Effect.sleep(RUN_END_WAIT),
      Effect.suspend(() => (ending() ? Effect.void : link.abort("the launcher went silent (the host's relay left)")))
    )
    const relayEndedAlone = (end: RelayEnd) =>
      Effect.suspend(() =>
        ending() ? Effect.void : RelayEnd.$match(end, {
          NotStarted: ({ reason }) =>
            Effect.zipRight(facts.step(HostEvent.RelayLost({ cause: "the host has no relay" })), Effect.logError(`${host}: cannot start the relay: ${reason}`)),
          Exited: ({ exit }) =>
            isClean(exit)
              ? Effect.asVoid(Effect.forkIn(awaitRunEnd, scope))
              : Effect.zipRight(facts.step(HostEvent.RelayLost({ cause: "the host's relay is gone" })), Effect.logError(`${host}: the relay exited with ${describeExit(exit)}`))
        })
      )
    const relay = relayChild({
      host,
      process: {
        cmd: [process.execPath, options.entries.relay],
        cwd,
        env: { ...scrub(options.inheritedEnv), [roleVariables.relay]: toEnvironment({
          host,
          ranks: accept.ranks,
          worldSize: world.worldSize,
          controller: options.controller,
          dir,
          socket: envelope.socket,
          heartbeatTimeoutMs: spec.heartbeatTimeoutMs
        }) },
        inheritEnv: false,
        ipc: () => undefined,
        onLine: (line, stream) => childLine(`[${host}:relay] ${line}`, stream),
        shutdown
      },
      key: { _tag: "HostKey", keyHex: Buffer.from(hostKey(salt, host)).toString("hex") },
      ready: relayReady,
      ranksEnded: Effect.suspend(() => Effect.forEach([...running.values()], ({ process }) => process.exited, { concurrency: "unbounded", discard: true })),
      endedAlone: relayEndedAlone
    })

    /**
     * Orders joined to the supervisor and not started yet, each with the answer the main loop waits for.
     * One the supervisor will never start (it gave its verdict: every child, the relay included, has
     * ended) is answered at that verdict.
     */
    const unanswered = new Map<string, { readonly order: StartRank; readonly answered: Deferred.Deferred<void> }>()
    /** Answer an order not started (yet): only once, whoever gets to it first. */
    const refuseUnanswered = (id: string, detail: string) =>
      Effect.suspend(() => {
        const waiting = unanswered.get(id)
        if (waiting === undefined) return Effect.void
        unanswered.delete(id)
        return Effect.zipRight(refuse(waiting.order, detail), Deferred.succeed(waiting.answered, undefined))
      })
    const relayGone = `the host's relay is gone: ${host} starts no more ranks`

    const onDirective = (directive: Directive): Effect.Effect<void> => {
      switch (directive._tag) {
        case "Terminate": {
          const ranks = directive.ids.filter(isRankChild).length
          return ranks === 0 ? Effect.void : Effect.logWarning(`${host}: stopping ${ranks} rank(s): ${facts.current().stopCause ?? directive.reason}`)
        }
        case "Verdict":
          return Effect.forEach([...unanswered.keys()], (id) => refuseUnanswered(id, relayGone), { discard: true })
        default:
          return Effect.void
      }
    }
    const supervisor = yield* Supervisor.start({
      name: `agent of ${host}`,
      strategy: hostStrategy,
      children: [relay],
      onDirective
    }).pipe(warningsAndAbove)
    // The world has formed (this runs after WorldFormed): ranks may join the host from now on.
    yield* supervisor.send(SupervisionEvent.CohortFormed())

    /** A rank's process, as its StartRank asks. */
    const rankProcess = ({ incarnation, rank, worldSize }: StartRank, slot: number, device: RankDevice): ProcessSpec => {
      const prefix = `[${host}:${deviceTag(device)}:r${rank}] `
      const program = spec.program
      const env = rankEnvironment({
        inherited: options.inheritedEnv,
        clusterEnv: spec.env,
        hostEnv: {},
        placement: {
          rank,
          localRank: slot,
          worldSize: worldSize ?? world.worldSize,
          localWorldSize: accept.ranks.length,
          groupRank: envelope.groupRank,
          device
        },
        torchrun: program._tag === "Command" ? world.master : undefined,
        // A rank under a number its host was not admitted with reads that number (and the world's size now) from its envelope.
        internal: internalEnvironment({
          envelope: envelopeOf(rank, slot, worldSize),
          slot,
          incarnation,
          command: program._tag === "Command"
        }),
        pythonClient: program._tag === "Command" ? options.entries.pythonClient : undefined
      })
      return {
        cmd: program._tag === "Entry" ? [process.execPath, options.entries.rank] : [...program.command, ...spec.args],
        cwd,
        env,
        inheritEnv: false,
        // An entry rank checks in over IPC when it runs user code; the channel closing is its link to us ending.
        ipc: program._tag === "Entry"
          ? (message) => {
            const said = message as { _tag?: unknown; errorClass?: unknown; message?: unknown; ncclError?: unknown } | null
            if (said?._tag === "Running") callbacks.fork(markRunning(rank, incarnation))
            // The user's code threw: kept for its exit's report (the failure rules' `exception`).
            if (said?._tag === "Threw" && typeof said.errorClass === "string" && typeof said.message === "string") {
              // Kept at once, not in a fiber: the exit that follows must find it.
              facts.note(HostEvent.Threw({
                id: rankChildId(rank, incarnation),
                error: `${said.errorClass.slice(0, 80)}: ${said.message.slice(0, 500)}`,
                // A communicator held an asynchronous NCCL error when the code threw: the death is NCCL's.
                ...(typeof said.ncclError === "number" && said.ncclError !== 0 ? { ncclError: said.ncclError } : {})
              }))
            }
            // It lost its relay and exits for that: reported as the relay's loss, even before this agent sees the relay end.
            if (said?._tag === "RelayLost") facts.note(HostEvent.LostItsRelay({ id: rankChildId(rank, incarnation) }))
          }
          : undefined,
        onLine: (line, stream) => childLine(prefix + line, stream),
        shutdown
      }
    }

    const start = (order: StartRank) =>
      Effect.gen(function*() {
        const { incarnation, rank } = order
        const slot = order.slot ?? accept.ranks.indexOf(rank)
        const device = options.devices.devices[slot]
        if (slot < 0 || device === undefined) return yield* refuse(order, `rank ${rank} is not on host ${host}`)
        if ([...running.values()].some((each) => each.rank === rank)) return yield* refuse(order, `rank ${rank} is already running on ${host}`)
        const id = rankChildId(rank, incarnation)
        const answered = yield* Deferred.make<void>()
        const child = rankChild({
          host,
          rank,
          incarnation,
          slot,
          process: rankProcess(order, slot, device),
          running,
          report,
          watchIn: scope,
          // Only an entry rank says anything before it exits (over IPC): a command rank's exit is not waited on.
          ...(spec.program._tag === "Entry" ? { thrown: () => facts.current().lastWords.get(id)?.error } : {}),
          relayLost: () => lostWithRelay(facts.current(), id),
          ncclError: () => facts.current().lastWords.get(id)?.ncclError,
          answered: (started) =>
            Effect.gen(function*() {
              unanswered.delete(id)
              // A command: rank runs user code from its first instruction.
              if (started !== undefined && spec.program._tag === "Command") yield* markRunning(rank, incarnation)
              yield* Deferred.succeed(answered, undefined)
            })
        })
        // Waiting first, then checked: a verdict that comes in between answers it (see `unanswered`).
        unanswered.set(id, { order, answered })
        const state = yield* supervisor.state
        if (relayHasEnded(state)) {
          yield* refuseUnanswered(id, relayGone)
        } else if (state.children.some((each) => each.spec.id === id)) {
          yield* refuseUnanswered(id, `rank ${rank} was already started as incarnation ${incarnation} on ${host}`)
        } else {
          yield* supervisor.join([child])
        }
        // Answered before the next order is read, as the launcher sent them: a StopRank that follows finds its rank.
        // (A supervisor that died of a defect answers nothing more; its verdict says so.)
        yield* Effect.raceFirst(Deferred.await(answered), Effect.asVoid(supervisor.verdict))
      })

    // The launcher's policy stopping one of its ranks: done through the rank's own handle, and its exit reported as any.
    const stop = ({ graceMs, incarnation, mode, rank }: StopRank) => {
      const current = running.get(rankChildId(rank, incarnation))
      return current === undefined ? Effect.void : Effect.asVoid(Effect.forkIn(current.process.stop(mode, Duration.millis(graceMs)), scope))
    }

    /** Every child goes, by the policy's stop: the ranks side by side, then the relay. */
    const stopEverything = (why: string) =>
      Effect.gen(function*() {
        yield* facts.step(HostEvent.Ending({ why }))
        yield* supervisor.send(SupervisionEvent.AbortRequested({ reason: why }))
        yield* supervisor.verdict
        // The relay's last lines, which no report follows.
        if (forwarder !== undefined) yield* forwarder.flush
      })

    while (true) {
      const message = yield* Effect.either(link.receive)
      if (message._tag === "Left") {
        const why = `lost the launcher (${message.left.detail})`
        yield* stopEverything(why)
        return yield* new AgentError({ host, reason: why })
      }
      switch (message.right._tag) {
        case "StartRank":
          yield* start(message.right)
          break
        case "StopRank":
          yield* stop(message.right)
          break
        case "Abort":
          return yield* stopEverything(`the launcher aborted the run: ${message.right.reason}`)
        case "RunEnded":
          return yield* stopEverything("the run has ended")
        default:
          yield* Effect.logWarning(`${host}: ignored an unexpected ${message.right._tag} from the launcher`)
      }
    }
  })

/**
 * The kernel's notes ("… joined the cohort: 0 rank(s) now") speak of a run and its world. A host has no
 * world of its own (`HostPolicy`: its children carry no ranks), and on the launcher's terminal those notes
 * would read as the run's. The agent's own lines say what happens on a host, so the host's supervisor
 * logs only its warnings and errors (never more than the caller's level lets through).
 */
const warningsAndAbove = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(FiberRef.get(FiberRef.currentMinimumLogLevel), (level) =>
    Logger.withMinimumLogLevel(effect, LogLevel.greaterThan(level, LogLevel.Warning) ? level : LogLevel.Warning))

/** Shared memory where Linux has it (/dev/shm is a tmpfs), else the temporary directory. */
const sharedMemoryRoot = (): string => {
  try {
    rmSync(mkdtempSync("/dev/shm/cohort-probe-"), { recursive: true })
    return "/dev/shm"
  } catch {
    return tmpdir()
  }
}
