/**
 * The launcher's heartbeat path alone, in this process: PortMux, ControlGate
 * and Coordinator wired as Launcher.ts wires them (its `sendToRanks` is
 * copied here), 1,000 relays × 8 ranks simulated by a child process
 * (`control-client.ts`). CPU of this process over 5 s with every rank attached
 * and silent (the coordinator's beats, one frame per relay per interval; a
 * link that carries them needs no LauncherBeat), then over 10 s with every
 * rank beating (one HostBeats per relay per interval).
 *
 * `bun bench/scale/heartbeat-path.ts` (HOSTS changes the host count,
 * HEARTBEAT_TIMEOUT_MS the run's timeout: 30 s, the default, beats every 5 s).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ControlGate from "../../src/launcher/front/ControlGate.ts"
import * as Coordinator from "../../src/launcher/training/Coordinator.ts"
import * as PortMux from "../../src/launcher/front/PortMux.ts"
import * as Log from "../../src/cli/logger.ts"
import type { Job } from "../../src/config/ClusterConfig.ts"
import { defaultFailurePolicy } from "../../src/config/FailurePolicy.ts"
import { beatEveryMs } from "../../src/config/Heartbeat.ts"
import { ToRanks } from "../../src/wire/messages/ControlMessages.ts"
import { type CoordinatorOrder, isRendezvousReport } from "../../src/wire/messages/CoordinatorMessages.ts"
import { newSalt, saltToHex } from "../../src/wire/Keys.ts"

const HOSTS = Number(process.env.HOSTS ?? 1000)
/** The run's heartbeat_timeout: it sets how often the relays and the coordinator beat (`beatEveryMs`). */
const HEARTBEAT_TIMEOUT_MS = Number(process.env.HEARTBEAT_TIMEOUT_MS ?? defaultFailurePolicy.heartbeatTimeout)
const DEVICES = 8
const salt = newSalt()
const world = new Map(Array.from({ length: HOSTS }, (_, host) => [`sim-${host}`, Array.from({ length: DEVICES }, (_, slot) => host * DEVICES + slot)] as const))
const hostOf = new Map([...world].flatMap(([host, ranks]) => ranks.map((rank) => [rank, host] as const)))
const job: Job = {
  program: { _tag: "Entry", entry: "examples/train.ts" },
  args: [],
  backend: "cpu_sync",
  datasetSize: HOSTS * DEVICES * 100,
  epochs: 1,
  cadence: 1,
  checkpoint: undefined,
  outerOptimizer: undefined,
  asyncAlpha: 0.5
}
const cpuSeconds = () => {
  const usage = process.cpuUsage()
  return (usage.user + usage.system) / 1e6
}

const program = Effect.gen(function*() {
  let coordinator: Coordinator.Coordinator | undefined
  const control = yield* ControlGate.make({
    salt,
    ranksOf: (host) => Effect.succeed((world as ReadonlyMap<string, ReadonlyArray<number>>).get(host)),
    handshakeMs: 60_000,
    beatEveryMs: beatEveryMs(HEARTBEAT_TIMEOUT_MS),
    onMessage: (_host, message) =>
      message._tag === "FromRank"
        ? isRendezvousReport(message.report) ? Effect.void : coordinator?.report(message.rank, message.report) ?? Effect.void
        : message._tag === "HostBeats"
        ? coordinator?.beats(message.ranks) ?? Effect.void
        : Effect.void,
    onClosed: () => Effect.void
  })
  // As Launcher.ts sends orders: one ToRanks per host.
  const sendToRanks = (ranks: ReadonlyArray<number>, order: CoordinatorOrder) => {
    const byHost = new Map<string, Array<number>>()
    for (const rank of ranks) {
      const host = hostOf.get(rank)
      if (host !== undefined) byHost.set(host, [...(byHost.get(host) ?? []), rank])
    }
    return Effect.forEach(byHost, ([host, targets]) => control.send(host, new ToRanks({ ranks: targets, order })), { discard: true })
  }
  coordinator = yield* Coordinator.make({
    run: "heartbeat-path",
    ranks: [...hostOf.keys()],
    job,
    heartbeatTimeoutMs: HEARTBEAT_TIMEOUT_MS,
    checkpointPath: "/dev/null",
    resume: undefined,
    send: sendToRanks,
    loseRanks: () => Effect.void,
    drained: Effect.void,
    rootState: () => undefined
  })
  const mux = yield* PortMux.start({ address: "127.0.0.1", port: 0, magicDeadlineMs: 60_000, owners: { control: control.owner } })
  const client = Bun.spawn([process.execPath, `${import.meta.dir}/control-client.ts`, String(mux.port), saltToHex(salt), String(HOSTS), String(beatEveryMs(HEARTBEAT_TIMEOUT_MS))], {
    stdin: "pipe",
    stdout: "pipe",
    stderr: "inherit"
  })
  yield* Effect.addFinalizer(() => Effect.sync(() => client.kill()))
  const reader = client.stdout.getReader()
  const decoder = new TextDecoder()
  let said = ""
  yield* Effect.promise(async () => {
    while (!said.includes("attached")) {
      const { done, value } = await reader.read()
      if (done) throw new Error("the control client died")
      said += decoder.decode(value)
    }
  })
  // The first epoch's plans go out after the last Attach: let them.
  yield* Effect.sleep("4 seconds")
  const share = (seconds: number) =>
    Effect.gen(function*() {
      const cpu = cpuSeconds()
      const t0 = performance.now()
      yield* Effect.sleep(`${seconds} seconds`)
      return (cpuSeconds() - cpu) / ((performance.now() - t0) / 1000)
    })
  const silent = yield* share(5)
  client.stdin.write("beat\n")
  client.stdin.flush()
  // The relays' first beats are spread over one interval.
  yield* Effect.sleep(Duration.millis(beatEveryMs(HEARTBEAT_TIMEOUT_MS) + 1_000))
  const beating = yield* share(10)
  return `${HOSTS} relays × ${DEVICES} ranks; CPU of one core: silent ${(silent * 100).toFixed(1)}%, beating ${(beating * 100).toFixed(1)}%`
})

console.log(await Effect.runPromise(Effect.scoped(program).pipe(Effect.provide(Log.layer()))))
process.exit(0)
