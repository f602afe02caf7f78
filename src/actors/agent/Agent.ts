/**
 * The agent: one per host. It joins the run through the launcher's join
 * channel; once the world has formed it carries out the launcher's orders
 * for the host's ranks (`StartRank`, `StopRank`) and reports what becomes of
 * each one (`RankStarted`, `RankRunning`, `RankExited`). It starts the host's
 * relay once every rank of the host runs user code: loading a relay takes a
 * few hundred milliseconds of CPU that the ranks' own start-up needs more.
 * The failure policy is the launcher's: an agent decides nothing about the run.
 *
 * It stops every child it started on `Abort`, when the join link ends (the
 * launcher is gone), when its relay dies under running ranks, and when its
 * own Scope closes. A launcher-local host runs its agent inside the launcher,
 * joining over loopback exactly as a remote agent would.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Scope from "effect/Scope"
import { describe as describeExit, isClean } from "../ChildExit.ts"
import * as ProcessChild from "../ProcessChild.ts"
import { roleVariables } from "../Role.ts"
import { type Accept, Hello, joinCodec, type JoinMessage, RankExited, RankResources, RankRunning, RankStarted, type StartRank, type StopRank, type WorldFormed } from "../../wire/JoinMessages.ts"
import * as Native from "../../native/Native.ts"
import { makeResourceSampler } from "./ResourceSampler.ts"
import { runDirPrefix, sweepStaleRunDirs } from "./StaleRunDirs.ts"
import { hostKey, OPEN_SALT, rankKey, saltFromHex } from "../../wire/Keys.ts"
import * as Link from "../../wire/Link.ts"
import { rankEntry, relayEntry } from "../../cli/entryPoints.ts"
import { deviceIndex, deviceTag, type HostDevices } from "./Devices.ts"
import { type HostEnvelope, type HostKeyMessage, toEnvironment } from "./Envelope.ts"
import { internalEnvironment, rankEnvironment, scrub } from "./RankEnvironment.ts"
import * as CallbackFibers from "../CallbackFibers.ts"

type JoinLink = Link.Link<JoinMessage, JoinMessage>

/**
 * Why an agent stopped. `permanent`: trying again cannot help (the launcher
 * refused the host, a protocol mismatch); otherwise it may (the launcher was
 * not there yet, or went away).
 */
export class AgentError extends Data.TaggedError("AgentError")<{ readonly host: string; readonly reason: string; readonly permanent?: boolean }> {
  override get message(): string {
    return `agent of ${this.host}: ${this.reason}`
  }
}

/** How long a relay that left cleanly gives the launcher's RunEnded to arrive before the agent ends too. */
const RUN_END_WAIT = Duration.seconds(2)

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
}


interface RankProcess {
  readonly incarnation: number
  /** The device slot it runs on (a restarted rank keeps its slot under a new number). */
  readonly slot: number
  readonly child: ProcessChild.ProcessChild
}

/** Join, then serve the host until the run ends. */
export const run = (options: AgentOptions): Effect.Effect<void, AgentError, Scope.Scope> =>
  Effect.gen(function*() {
    const { host } = options
    const failWith = (reason: string) => new AgentError({ host, reason })
    const link: JoinLink = yield* Link.dial({
      channel: "join",
      host: options.controller.host,
      port: options.controller.port,
      salt: options.salt ?? OPEN_SALT,
      inbound: joinCodec,
      outbound: joinCodec,
      handshakeMs: options.handshakeMs,
      rekeyOn: (message: JoinMessage) => (message._tag === "Accept" && message.saltHex !== undefined ? saltFromHex(message.saltHex) : undefined)
    }).pipe(Effect.mapError((error) => failWith(error.message)))
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
    if (answer._tag === "Reject") return yield* refuse(`the launcher refused this host: ${answer.reason}`)
    if (answer._tag !== "Accept") return yield* refuse(`expected Accept or Reject, got ${answer._tag}`)
    const salt = options.salt ?? (answer.saltHex === undefined ? undefined : saltFromHex(answer.saltHex))
    if (salt === undefined) return yield* failWith("open admission, but the Accept carried no salt")

    const formed = yield* next(answer.formationWaitMs + options.handshakeMs, "WorldFormed")
    if (formed._tag === "Abort") return yield* Effect.logWarning(`${host}: the launcher aborted before the world formed: ${formed.reason}`)
    if (formed._tag !== "WorldFormed") return yield* refuse(`expected WorldFormed, got ${formed._tag}`)
    yield* serve(options, link, answer, formed, salt)
  })

/** After formation: the ranks as ordered, then the relay, until the run ends. */
const serve = (options: AgentOptions, link: JoinLink, accept: Accept, world: WorldFormed, salt: Uint8Array) =>
  Effect.gen(function*() {
    const { host } = options
    const { spec } = accept
    const scope = yield* Effect.scope
    // IPC callbacks (a rank saying it runs user code) act through fibers owned by this scope.
    const callbacks = yield* CallbackFibers.make("agent")
    const grace = Duration.millis(spec.graceMs)
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
    const ranks = new Map<number, RankProcess>()
    let ending = false
    const report = (message: JoinMessage) => Effect.ignore(link.send(message))

    // The ranks' resource use, for the status page and /metrics. GPUs are read through NVML (no CUDA context here).
    const gpuHost = options.devices.devices.some((device) => device.kind === "gpu")
    const native = gpuHost ? yield* Effect.option(Native.load()) : undefined
    const sampler = makeResourceSampler(native?._tag === "Some" ? native.value.nvml.sample : undefined)
    yield* Effect.forkIn(
      Effect.forever(Effect.zipRight(
        Effect.sleep(RESOURCES_EVERY),
        Effect.suspend(() => {
          const processes = [...ranks].map(([rank, { child, slot }]) => {
            const device = options.devices.devices[slot]
            return { rank, pid: child.pid, device: device?.kind === "gpu" ? device.index : "cpu" as const }
          })
          return processes.length === 0 ? Effect.void : report(new RankResources({ samples: sampler.sample(processes, performance.now()) }))
        })
      )),
      scope
    )

    const stopAll = (why: string) =>
      Effect.gen(function*() {
        if (ranks.size > 0) yield* Effect.logWarning(`${host}: stopping ${ranks.size} rank(s): ${why}`)
        yield* Effect.forEach([...ranks.values()], ({ child }) => child.stop("graceful", grace), { concurrency: "unbounded", discard: true })
      })

    /** The relay: started once, when every rank of the host first runs user code. */
    const running = new Set<number>()
    let relayStarted = false
    const startRelay = Effect.gen(function*() {
      const relay = yield* ProcessChild.spawn({
        cmd: [process.execPath, relayEntry],
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
        onLine: (line, stream) => options.output(`[${host}:relay] ${line}`, stream),
        grace
      }).pipe(Scope.extend(scope))
      // Its host's key goes over IPC, not in its environment (/proc/<pid>/environ is readable by the ranks).
      const keyMessage: HostKeyMessage = { _tag: "HostKey", keyHex: Buffer.from(hostKey(salt, host)).toString("hex") }
      yield* Effect.try({ try: () => relay.subprocess.send(keyMessage), catch: (error) => new Error(`cannot hand the relay its key: ${String(error)}`) })
      yield* Effect.forkIn(
        Effect.flatMap(relay.exited, (exit) =>
          ending
            ? Effect.void
            : isClean(exit)
            // The relay leaves on its own when the launcher has gone silent (a cut cable closes nothing), or
            // when the run ends, a moment before the RunEnded on this link. Past that moment the agent has no
            // one left to serve either, and ends like one that lost its link.
            ? Effect.zipRight(
              Effect.sleep(RUN_END_WAIT),
              Effect.suspend(() => (ending ? Effect.void : link.abort("the launcher went silent (the host's relay left)")))
            )
            : Effect.zipRight(Effect.logError(`${host}: the relay exited with ${describeExit(exit)}`), stopAll("the host's relay is gone"))),
        scope
      )
    }).pipe(Effect.catchAll((error) => Effect.zipRight(Effect.logError(`${host}: cannot start the relay: ${error.message}`), stopAll("the host has no relay"))))
    const markRunning = (rank: number, incarnation: number) =>
      Effect.gen(function*() {
        yield* report(new RankRunning({ rank, incarnation }))
        running.add(rank)
        if (relayStarted || ending || !accept.ranks.every((each) => running.has(each))) return
        relayStarted = true
        yield* startRelay
      })

    const start = ({ incarnation, rank, slot: given, worldSize }: StartRank) =>
      Effect.gen(function*() {
        const slot = given ?? accept.ranks.indexOf(rank)
        const device = options.devices.devices[slot]
        if (slot < 0 || device === undefined) {
          return yield* report(new RankExited({ rank, incarnation, code: null, signal: null, detail: `rank ${rank} is not on host ${host}` }))
        }
        if (ranks.has(rank)) {
          return yield* report(new RankExited({ rank, incarnation, code: null, signal: null, detail: `rank ${rank} is already running on ${host}` }))
        }
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
          })
        })
        const incarnationScope = yield* Scope.fork(scope, ExecutionStrategy.sequential)
        const spawned = yield* ProcessChild.spawn({
          cmd: program._tag === "Entry" ? [process.execPath, rankEntry] : [...program.command, ...spec.args],
          cwd,
          env,
          inheritEnv: false,
          // An entry rank checks in over IPC when it runs user code; the channel closing is its link to us ending.
          ipc: program._tag === "Entry"
            ? (message) => {
              if ((message as { _tag?: unknown })?._tag === "Running") callbacks.fork(markRunning(rank, incarnation))
            }
            : undefined,
          onLine: (line, stream) => options.output(prefix + line, stream),
          grace
        }).pipe(Scope.extend(incarnationScope), Effect.either)
        if (spawned._tag === "Left") {
          yield* Scope.close(incarnationScope, Exit.void)
          return yield* report(new RankExited({ rank, incarnation, code: null, signal: null, detail: spawned.left.message }))
        }
        const child = spawned.right
        ranks.set(rank, { incarnation, slot, child })
        yield* report(new RankStarted({ rank, incarnation, pid: child.pid }))
        // A command: rank runs user code from its first instruction.
        if (program._tag === "Command") yield* markRunning(rank, incarnation)
        yield* Effect.forkIn(
          Effect.gen(function*() {
            const exit = yield* child.exited
            if (ranks.get(rank)?.child === child) ranks.delete(rank)
            yield* Scope.close(incarnationScope, Exit.void)
            yield* report(new RankExited({
              rank,
              incarnation,
              code: exit._tag === "Exited" ? exit.code : null,
              signal: exit._tag === "Signaled" ? exit.signal : null,
              detail: exit._tag === "Crashed" ? exit.detail : undefined
            }))
          }),
          scope
        )
      })

    const stop = ({ graceMs, incarnation, mode, rank }: StopRank) => {
      const current = ranks.get(rank)
      if (current === undefined || current.incarnation !== incarnation) return Effect.void
      return Effect.asVoid(Effect.forkIn(current.child.stop(mode, Duration.millis(graceMs)), scope))
    }

    while (true) {
      const message = yield* Effect.either(link.receive)
      if (message._tag === "Left") {
        ending = true
        yield* stopAll(`lost the launcher (${message.left.detail})`)
        return yield* new AgentError({ host, reason: `lost the launcher (${message.left.detail})` })
      }
      switch (message.right._tag) {
        case "StartRank":
          yield* start(message.right)
          break
        case "StopRank":
          yield* stop(message.right)
          break
        case "Abort":
          ending = true
          return yield* stopAll(`the launcher aborted the run: ${message.right.reason}`)
        case "RunEnded":
          ending = true
          return yield* stopAll("the run has ended")
        default:
          yield* Effect.logWarning(`${host}: ignored an unexpected ${message.right._tag} from the launcher`)
      }
    }
  })

/** Shared memory where Linux has it (/dev/shm is a tmpfs), else the temporary directory. */
const sharedMemoryRoot = (): string => {
  try {
    rmSync(mkdtempSync("/dev/shm/cohort-probe-"), { recursive: true })
    return "/dev/shm"
  } catch {
    return tmpdir()
  }
}
