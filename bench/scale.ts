/**
 * Scale: one real launcher against 1,000 simulated hosts of 8 ranks each.
 *
 * The launcher is `bun src/cli/launch.ts` of a generated cluster file (every
 * worker `agent: self`, pre-shared admission, an `entry:` job with a dataset
 * so the coordinator runs, a long heartbeat timeout), a subprocess of its
 * own so its memory and CPU are its alone. The hosts are simulated, a few
 * hundred per process (`bench/scale/sim-agents.ts`), on the real wire
 * modules: join, Hello, Accept, WorldFormed, answers to StartRank, then per
 * host a control link like a relay's, an Attach for each rank and, when told,
 * a HostBeats per host per second, as a relay beats for its ranks. They read the run's salt from the file the
 * launcher writes for `bun run agent --salt-file`, and dial once the launcher
 * has printed that hint for every host. No rank, relay or agent process runs.
 *
 * Measured, on one clock (the wall clock every process shares):
 *  - the phases: the launcher's spawn, its `listening on` line, its last
 *    join hint, the first simulated dial, every Accept, its `world formed`
 *    and `cohort formed` lines, every host attached, the first epoch's plans
 *    at every rank; each host's dial → Accept, the kernel's listen-queue
 *    overflows and the CPU of the launcher and the simulators while joining;
 *  - `GET /state.json` latency at 200 requests/s, one connection each, from
 *    a separate client process (`bench/scale/status-client.ts`) started with
 *    the dials: during formation (first dial → cohort formed), and in the
 *    quiet seconds after the first epoch is planned;
 *  - the launcher's CPU (utime + stime from /proc/<pid>/stat) over a window
 *    with every host attached and silent, then over a window with all 8,000
 *    ranks beating at 1 Hz, and the control frames it received meanwhile (its
 *    own /metrics, read just outside each window);
 *  - its RSS at the phases, and its peak (VmHWM) at the end.
 *
 * `SCALE_RUNS` runs (default 1), each with a fresh launcher; `SCALE_HOSTS`,
 * `SCALE_DEVICES` and `SCALE_WORKERS` change the shape (default 1000, 8, 4);
 * `SCALE_STATUS_RATE=0` leaves the status client out; `SCALE_LAUNCHER_FLAGS`
 * passes flags to the launcher's bun (a CPU or heap profile),
 * `SCALE_LAUNCHER_LOG` names a file for its whole stderr, and
 * `SCALE_BEAT_EVERY_MS` sets the relays' beat interval, `SCALE_SIM_NICE` the simulators' niceness
 * (19: they take only what the launcher leaves, as hosts on other machines would). Every process
 * it starts is killed when it ends, however it ends: the launcher runs under
 * `setpriv --pdeathsig KILL`, and the helpers exit when their stdin closes.
 */
import { execSync } from "node:child_process"
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import type { Subprocess } from "bun"
import { cpuSeconds, cpuTimes, listenOverflows, runQueueSeconds, vmMiB } from "./scale/procfs.ts"
import { wallClock } from "./phase-lines.ts"
import { median, percentile } from "./stats.ts"
import { defaultFailurePolicy } from "../src/config/FailurePolicy.ts"
import { beatEveryMs } from "../src/config/Heartbeat.ts"

const HOSTS = Number(process.env.SCALE_HOSTS ?? 1000)
const DEVICES = Number(process.env.SCALE_DEVICES ?? 8)
const WORKERS = Number(process.env.SCALE_WORKERS ?? 4)
const RUNS = Number(process.env.SCALE_RUNS ?? 1)
/** `GET /state.json` per second during the run; 0 leaves the status client out (to see the rest without it). */
const STATUS_RATE = Number(process.env.SCALE_STATUS_RATE ?? 200)
/**
 * A niceness for the simulating processes (`nice -n`; 0, the default, runs them as the launcher runs): with 19
 * they stand in for hosts on other machines, taking only the CPU the launcher leaves, so that what the status
 * endpoint shows is the launcher's own latency rather than its wait for a core.
 */
const SIM_NICE = Number(process.env.SCALE_SIM_NICE ?? 0)
/** Once the first epoch's plans have reached every rank, the status client runs this much longer (the quiet window). */
const QUIET_MS = 2_000
const BASELINE_MS = 5_000
/**
 * How often each simulated relay sends its HostBeats: by default as a relay does at the default
 * heartbeat_timeout (30 s), which is also how often this launcher (heartbeat_timeout 10m) beats down.
 */
const BEAT_EVERY_MS = Number(process.env.SCALE_BEAT_EVERY_MS ?? beatEveryMs(defaultFailurePolicy.heartbeatTimeout))
/** The relays' first beats are spread over one interval after `beat`; the window opens after this. */
const RAMP_MS = BEAT_EVERY_MS + 1_000
const HEARTBEAT_WINDOW_MS = 10_000
const PHASE_DEADLINE_MS = 120_000
/** Extra flags for the launcher's bun (e.g. `--cpu-prof --cpu-prof-md --cpu-prof-dir=/tmp/prof`): it is then stopped with SIGINT so it can write them. */
const LAUNCHER_FLAGS = (process.env.SCALE_LAUNCHER_FLAGS ?? "").split(" ").filter((flag) => flag !== "")
/** `SCALE_TURN_PROBE=1`: the launcher runs with `scale/turn-probe.ts` preloaded, and its long turns are reported. */
const TURN_PROBE = process.env.SCALE_TURN_PROBE === "1"
/** A file that gets every line of the launcher's stderr (appended). */
const LAUNCHER_LOG = process.env.SCALE_LAUNCHER_LOG

const TARGET_FORMATION_MS = 2_000
/** Issue 25: the launcher's CPU time per joining host, first dial → world formed. */
const TARGET_JOIN_CPU_MS_PER_HOST = 1
const TARGET_HWM_MIB = 250
const TARGET_STATUS_P99_MS = 50
const TARGET_HEARTBEAT_CPU = 0.2

const ROOT = resolve(import.meta.dir, "..")
const SIM = join(ROOT, "bench/scale/sim-agents.ts")
const STATUS = join(ROOT, "bench/scale/status-client.ts")

class ScaleFailed extends Error {}

/** What a run in progress must undo; also done on SIGINT or SIGTERM, which skip `finally`. */
const cleanups = new Set<() => void>()
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    for (const cleanup of cleanups) cleanup()
    process.exit(signal === "SIGINT" ? 130 : 143)
  })
}

const hostName = (index: number) => `sim-${String(index).padStart(4, "0")}`

const clusterFile = () =>
  [
    "name: scale",
    "controller: { host: 127.0.0.1, port: 0 }",
    "workers:",
    ...Array.from({ length: HOSTS }, (_, index) => `  - { host: ${hostName(index)}, devices: ${DEVICES}, agent: self }`),
    // The dataset only has to exist: the coordinator plans an epoch that nobody works on.
    `job: { entry: examples/train.ts, backend: cpu_sync, dataset_size: ${HOSTS * DEVICES * 100}, epochs: 1 }`,
    "failure_policy: { heartbeat_timeout: 10m }",
    ""
  ].join("\n")

/** Lines of a stream, handed to `onLine` as they arrive. */
const eachLine = async (stream: ReadableStream<Uint8Array>, onLine: (line: string) => void): Promise<void> => {
  const decoder = new TextDecoder()
  let pending = ""
  for await (const chunk of stream) {
    pending += decoder.decode(chunk, { stream: true })
    const lines = pending.split("\n")
    pending = lines.pop()!
    for (const line of lines) onLine(line)
  }
  if (pending !== "") onLine(pending)
}

/** Resolves once `check` gives a value; checked whenever `poke` is called. */
class Waits {
  private waiters: Array<() => void> = []
  poke(): void {
    for (const waiter of this.waiters.splice(0)) waiter()
  }
  async until<T>(check: () => T | undefined, what: string, ms = PHASE_DEADLINE_MS): Promise<T> {
    const deadline = performance.now() + ms
    while (true) {
      const value = check()
      if (value !== undefined) return value
      const left = deadline - performance.now()
      if (left <= 0) throw new ScaleFailed(`no ${what} within ${ms} ms`)
      await new Promise<void>((wake) => {
        const timer = setTimeout(wake, Math.min(left, 500))
        this.waiters.push(() => {
          clearTimeout(timer)
          wake()
        })
      })
    }
  }
}

/** A helper process that speaks JSON lines on stdout. */
class Helper {
  readonly messages: Array<Record<string, unknown>> = []
  readonly errors: Array<string> = []
  constructor(readonly proc: Subprocess<"pipe", "pipe", "pipe">, waits: Waits) {
    void eachLine(proc.stdout, (line) => {
      try {
        this.messages.push(JSON.parse(line) as Record<string, unknown>)
      } catch {
        this.messages.push({ t: line })
      }
      waits.poke()
    })
    void eachLine(proc.stderr, (line) => {
      if (this.errors.length < 20) this.errors.push(line)
    })
  }
  write(text: string): void {
    this.proc.stdin.write(text)
    this.proc.stdin.flush()
  }
  find(t: string): Record<string, unknown> | undefined {
    return this.messages.find((message) => message.t === t)
  }
  /** The latest message of kind `t` after `after` messages. */
  latest(t: string, after: number): Record<string, unknown> | undefined {
    return this.messages.slice(after).findLast((message) => message.t === t)
  }
}

interface LatencySummary {
  readonly count: number
  readonly p50: number
  readonly p99: number
  readonly max: number
  readonly failed: number
  readonly mebibytes: number
}

interface Figures {
  readonly spawnToListening: number
  readonly listeningToHinted: number
  readonly listeningToDial: number
  readonly dialToAccepted: number
  readonly dialToWorld: number
  readonly dialToCohort: number
  readonly dialToAttached: number
  readonly dialToPlanned: number
  /** Simulated hosts that failed before the first epoch's plans reached them. */
  readonly failedHosts: number
  /** Each host's dial → Accept, ms. */
  readonly admissions: ReadonlyArray<number>
  /** Connections the kernel dropped from a full listen queue while the hosts joined (all of this machine's listeners). */
  readonly listenOverflows: number
  /** CPU share of one core from the first dial to world formed. */
  readonly joinCpu: { readonly launcher: number; readonly simulators: number }
  /** The launcher's CPU time (utime + stime) from the dials to world formed, ms per joining host. */
  readonly joinCpuMsPerHost: number
  /** The same CPU time, first dial → world formed, in ms (all hosts), and the part of it in the kernel (stime). */
  readonly joinCpuMs: number
  readonly joinSystemMs: number
  /** The launcher's JS thread runnable but not running (waiting for a core), first dial → cohort formed, ms. */
  readonly formationRunQueueMs: number
  readonly rssAtHintsMiB: number
  readonly rssAtWorldMiB: number
  readonly rssAtCohortMiB: number
  readonly hwmMiB: number
  readonly statusFormation: LatencySummary
  /** With `SCALE_TURN_PROBE=1`: the launcher's turns past 20 ms during formation (ms after the first dial, and how long). */
  readonly longTurns: ReadonlyArray<{ readonly at: number; readonly ms: number }> | undefined
  readonly statusSteady: LatencySummary
  readonly baselineCpu: number
  readonly heartbeatCpu: number
  readonly workersCpu: number
  readonly controlFramesPerSec: number
  readonly beatsPerSec: number
  readonly simErrors: ReadonlyArray<string>
}

const summarise = (samples: ReadonlyArray<{ ms: number; status: number; bytes: number }>): LatencySummary => {
  const ok = samples.filter((sample) => sample.status === 200)
  const ms = ok.map((sample) => sample.ms)
  return {
    count: samples.length,
    p50: ms.length === 0 ? NaN : median(ms),
    p99: ms.length === 0 ? NaN : percentile(ms, 0.99),
    max: ms.length === 0 ? NaN : Math.max(...ms),
    failed: samples.length - ok.length,
    mebibytes: ok.length === 0 ? NaN : median(ok.map((sample) => sample.bytes)) / (1 << 20)
  }
}

/** The launcher's count of control frames received (its /metrics); NaN when a busy launcher does not answer after a few tries. */
const controlFramesIn = async (port: number, pageToken: string): Promise<number> => {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics?token=${pageToken}`, { signal: AbortSignal.timeout(20_000) })).text()
      const match = /^cohort_frames_total\{[^}]*channel="control",direction="in"\} (\d+)$/m.exec(text)
      if (match !== null) return Number(match[1])
    } catch {
      // Reset or timed out: a launcher too busy to read the request within its deadline. Try again.
    }
  }
  return NaN
}

/** CPU share of one core used by `pids` over `run`. */
const cpuShare = async (pids: ReadonlyArray<number>, run: () => Promise<void>): Promise<number> => {
  const before = pids.map(cpuSeconds)
  const t0 = performance.now()
  await run()
  const seconds = (performance.now() - t0) / 1000
  return pids.reduce((sum, pid, index) => sum + cpuSeconds(pid) - before[index]!, 0) / seconds
}

const runOnce = async (): Promise<Figures> => {
  const scratch = mkdtempSync(join(tmpdir(), "cohort-bench-scale-"))
  const procs: Array<Subprocess> = []
  const waits = new Waits()
  let launcherProc: Subprocess | undefined
  const cleanup = () => {
    for (const proc of procs) {
      try {
        proc.kill("SIGKILL")
      } catch {
        // Already gone.
      }
    }
    rmSync(scratch, { recursive: true, force: true })
  }
  cleanups.add(cleanup)
  const helper = (cmd: ReadonlyArray<string>) => {
    const proc = Bun.spawn([...cmd], { cwd: ROOT, stdin: "pipe", stdout: "pipe", stderr: "pipe" })
    procs.push(proc)
    return new Helper(proc, waits)
  }
  try {
    writeFileSync(join(scratch, "cluster.yml"), clusterFile())
    const sims = Array.from({ length: WORKERS }, () => helper([...(SIM_NICE === 0 ? [] : ["nice", "-n", String(SIM_NICE)]), process.execPath, SIM]))
    const status = STATUS_RATE > 0 ? helper([process.execPath, STATUS, String(STATUS_RATE)]) : undefined
    // Every helper is loaded before the launcher starts: their start-up is not the launcher's.
    await waits.until(() => (sims.every((sim) => sim.find("ready")) && (status?.find("ready") ?? true) ? true : undefined), "helpers ready", 30_000)

    const phases: Record<string, number> = {}
    const tail: Array<string> = []
    let port: number | undefined
    /** The run's page token, from the page URL of its `listening on` line: /state.json and /metrics need it. */
    let pageToken: string | undefined
    let saltFile: string | undefined
    /** `waiting for <host> to join: on it, run …` lines so far: the launcher says what to run on each host. */
    let hinted = 0
    /** The launcher's CPU (utime + stime, and stime) when its `world formed` line was read. */
    let worldCpu: { readonly total: number; readonly system: number } | undefined
    const t0 = wallClock()
    const probeFile = join(scratch, "turns.jsonl")
    const probe = TURN_PROBE ? ["--preload", join(ROOT, "bench/scale/turn-probe.ts")] : []
    const launcher = Bun.spawn(["setpriv", "--pdeathsig", "KILL", "--", process.execPath, ...LAUNCHER_FLAGS, ...probe, join(ROOT, "src/cli/launch.ts"), "cluster.yml"], {
      cwd: scratch,
      stdin: "ignore",
      stdout: "ignore",
      stderr: "pipe",
      env: { ...process.env, NO_COLOR: "1", ...(TURN_PROBE ? { COHORT_TURN_PROBE_FILE: probeFile } : {}) }
    })
    procs.push(launcher)
    launcherProc = launcher
    let exited: number | undefined
    void launcher.exited.then((code) => {
      exited = code
      waits.poke()
    })
    void eachLine(launcher.stderr, (line) => {
      if (LAUNCHER_LOG !== undefined) appendFileSync(LAUNCHER_LOG, `${line}\n`)
      const at = wallClock() - t0
      const listening = / listening on [^ ]+:(\d+) /.exec(line)
      if (listening !== null && port === undefined) {
        port = Number(listening[1])
        pageToken = /live page: \S*[?&]token=([0-9a-f]+)/.exec(line)?.[1]
        phases.listening = at
      }
      const salt = /--salt-file <a copy of ([^>]+)>/.exec(line)
      if (salt !== null) {
        saltFile ??= salt[1]
        hinted += 1
        if (hinted === HOSTS) phases.hinted = at
      }
      if (phases.world === undefined && line.startsWith("cohort: world formed")) {
        phases.world = at
        // The join's CPU ends here, as the line is read: not once every simulator has seen its Accept.
        try {
          worldCpu = { total: cpuSeconds(launcher.pid), system: cpuTimes(launcher.pid).system }
        } catch {
          // Gone already: the run fails below.
        }
      }
      if (phases.cohort === undefined && line.startsWith("cohort: cohort formed")) phases.cohort = at
      // The per-host lines would push everything else out.
      if (!/waiting for sim-|sim-\d+ joined with/.test(line)) {
        tail.push(line.length > 300 ? `${line.slice(0, 300)}…` : line)
        if (tail.length > 20) tail.shift()
      }
      waits.poke()
    })
    const alive = <T>(value: T | undefined): T | undefined => {
      if (exited !== undefined) throw new ScaleFailed(`the launcher exited with status ${exited}:\n${tail.map((line) => `    ${line}`).join("\n")}`)
      return value
    }
    const until = async <T>(check: () => T | undefined, what: string) => {
      try {
        return await waits.until(() => alive(check()), what)
      } catch (error) {
        const simErrors = sims.flatMap((sim) => [...sim.errors, ...sim.messages.filter((m) => m.t === "error").slice(0, 3).map((m) => JSON.stringify(m))])
        throw new ScaleFailed(`${(error as Error).message}\n  launcher's last lines:\n${tail.map((line) => `    ${line}`).join("\n")}\n  helpers:\n${simErrors.slice(0, 10).map((line) => `    ${line}`).join("\n")}`)
      }
    }

    // The hosts are started once the launcher has said what to run on every one of them, as a scheduler would.
    const listenPort = await until(() => (phases.hinted === undefined ? undefined : port), "a join hint for every host")
    const saltHex = readFileSync(join(scratch, saltFile!), "utf8").trim()
    status?.write(`${listenPort} ${pageToken ?? ""}\n`)
    const perWorker = Math.ceil(HOSTS / WORKERS)
    const simPids = sims.map((sim) => sim.proc.pid)
    const rssAtHintsMiB = vmMiB(launcher.pid, "VmRSS")
    const joinStart = { at: performance.now(), launcher: cpuSeconds(launcher.pid), system: cpuTimes(launcher.pid).system, runQueue: runQueueSeconds(launcher.pid), simulators: simPids.map(cpuSeconds), overflows: listenOverflows() }
    sims.forEach((sim, index) => {
      const hosts = Array.from({ length: HOSTS }, (_, host) => hostName(host)).slice(index * perWorker, (index + 1) * perWorker)
      sim.write(`${JSON.stringify({ port: listenPort, saltHex, hosts, devices: DEVICES, beatEveryMs: BEAT_EVERY_MS })}\n`)
    })
    // A stage is over once every simulated host has reached it or failed before it.
    const allAt = (t: string) => () => {
      const times = sims.map((sim) => sim.find(t)?.at as number | undefined)
      return times.every((time) => time !== undefined) ? Math.max(...(times as Array<number>)) - t0 : undefined
    }
    const firstDial = await until(() => {
      const times = sims.map((sim) => sim.find("dialing")?.at as number | undefined)
      return times.every((time) => time !== undefined) ? Math.min(...(times as Array<number>)) - t0 : undefined
    }, "dial")
    const accepted = await until(allAt("accepted"), "admission of every host")
    await until(() => phases.world, "world formed")
    const rssAtWorldMiB = vmMiB(launcher.pid, "VmRSS")
    const joinSeconds = (performance.now() - joinStart.at) / 1000
    const joinCpu = {
      launcher: (cpuSeconds(launcher.pid) - joinStart.launcher) / joinSeconds,
      simulators: simPids.reduce((sum, pid, index) => sum + cpuSeconds(pid) - joinStart.simulators[index]!, 0) / joinSeconds
    }
    const joinCpuMs = ((worldCpu?.total ?? NaN) - joinStart.launcher) * 1000
    const joinSystemMs = ((worldCpu?.system ?? NaN) - joinStart.system) * 1000
    const overflows = listenOverflows() - joinStart.overflows
    await until(() => phases.cohort, "cohort formed")
    const formationRunQueueMs = (runQueueSeconds(launcher.pid) - joinStart.runQueue) * 1000
    const rssAtCohortMiB = vmMiB(launcher.pid, "VmRSS")
    const attached = await until(allAt("attached"), "every host attached")
    const planned = await until(allAt("planned"), "the first epoch's plans at every rank")
    const failedHosts = sims.reduce((sum, sim) => sum + ((sim.find("planned")?.failed as number | undefined) ?? 0), 0)

    await Bun.sleep(QUIET_MS)
    const stoppedAt = wallClock()
    status?.write("stop\n")
    const { samples } = status === undefined ? { samples: [] } : await until(() => status.messages.find((message) => Array.isArray(message.samples)), "status samples") as {
      samples: Array<{ at: number; ms: number; status: number; bytes: number }>
    }
    const formation = samples.filter((sample) => sample.at - t0 >= firstDial && sample.at - t0 <= phases.cohort!)
    // The launcher's turns that held its thread past 20 ms, from the first dial to cohort formed.
    const longTurns = !TURN_PROBE || !existsSync(probeFile)
      ? undefined
      : readFileSync(probeFile, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line) as { endedAt: number; heldMs: number })
        .filter((turn) => turn.endedAt - t0 >= firstDial && turn.endedAt - turn.heldMs - t0 <= phases.cohort!)
    const steady = samples.filter((sample) => sample.at >= stoppedAt - QUIET_MS)

    // Every host attached, nobody beating: what the launcher spends on its own beats and ticks.
    await controlFramesIn(listenPort, pageToken ?? "")
    const baselineCpu = await cpuShare([launcher.pid], () => Bun.sleep(BASELINE_MS))

    for (const sim of sims) sim.write("beat\n")
    await Bun.sleep(RAMP_MS)
    const framesBefore = await controlFramesIn(listenPort, pageToken ?? "")
    const statsFrom = sims.map((sim) => sim.messages.length)
    const beatsBefore = await Promise.all(sims.map(async (sim, index) => {
      sim.write("stats\n")
      return (await until(() => sim.latest("stats", statsFrom[index]!), "sim stats")).heartbeats as number
    }))
    let workersCpu = 0
    const windowStart = performance.now()
    const heartbeatCpu = await cpuShare([launcher.pid], async () => {
      workersCpu = await cpuShare(simPids, () => Bun.sleep(HEARTBEAT_WINDOW_MS))
    })
    const windowSeconds = (performance.now() - windowStart) / 1000
    const statsAfter = sims.map((sim) => sim.messages.length)
    const beatsAfter = await Promise.all(sims.map(async (sim, index) => {
      sim.write("stats\n")
      return (await until(() => sim.latest("stats", statsAfter[index]!), "sim stats")).heartbeats as number
    }))
    const framesAfter = await controlFramesIn(listenPort, pageToken ?? "")
    const hwmMiB = vmMiB(launcher.pid, "VmHWM")
    alive(true)

    return {
      spawnToListening: phases.listening!,
      listeningToHinted: phases.hinted! - phases.listening!,
      listeningToDial: firstDial - phases.listening!,
      dialToAccepted: accepted - firstDial,
      dialToWorld: phases.world! - firstDial,
      dialToCohort: phases.cohort! - firstDial,
      dialToAttached: attached - firstDial,
      dialToPlanned: planned - firstDial,
      failedHosts,
      admissions: sims.flatMap((sim) => (sim.find("accepted")?.admissions as Array<number> | undefined) ?? []),
      listenOverflows: overflows,
      joinCpu,
      joinCpuMs,
      joinSystemMs,
      formationRunQueueMs,
      joinCpuMsPerHost: joinCpuMs / HOSTS,
      rssAtHintsMiB,
      rssAtWorldMiB,
      rssAtCohortMiB,
      hwmMiB,
      statusFormation: summarise(formation),
      longTurns: longTurns?.map((turn) => ({ at: Math.round(turn.endedAt - t0 - firstDial), ms: Math.round(turn.heldMs) })),
      statusSteady: summarise(steady),
      baselineCpu,
      heartbeatCpu,
      workersCpu,
      // Measured just outside the window on both sides: a slight overestimate of the window's rate.
      controlFramesPerSec: (framesAfter - framesBefore) / windowSeconds,
      beatsPerSec: beatsAfter.reduce((sum, count, index) => sum + count - beatsBefore[index]!, 0) / windowSeconds,
      simErrors: sims.flatMap((sim) => sim.messages.filter((message) => message.t === "error").map((message) => `${message.host}: ${message.error}`))
    }
  } finally {
    if (LAUNCHER_FLAGS.length > 0 && launcherProc !== undefined) {
      // A second SIGINT makes the CLI exit at once, and a profile is written at exit.
      launcherProc.kill("SIGINT")
      await Bun.sleep(500)
      launcherProc.kill("SIGINT")
      await Promise.race([launcherProc.exited, Bun.sleep(60_000)])
    }
    cleanup()
    cleanups.delete(cleanup)
    await Promise.all(procs.map((proc) => proc.exited))
  }
}

const commit = (): string => {
  try {
    const head = execSync("git rev-parse --short HEAD", { cwd: ROOT, encoding: "utf8" }).trim()
    const dirty = execSync("git status --porcelain -- src", { cwd: ROOT, encoding: "utf8" }).trim() !== ""
    return dirty ? `${head} with uncommitted changes in src/` : head
  } catch {
    return "unknown"
  }
}

const f0 = (value: number) => (Number.isFinite(value) ? value.toFixed(0) : "–")
const f1 = (value: number) => (Number.isFinite(value) ? value.toFixed(1) : "–")
const pct = (share: number) => `${(share * 100).toFixed(1)}%`
const verdict = (value: number, target: number, unit: string, format: (value: number) => string = f0) =>
  !Number.isFinite(value)
    ? "not measured"
    : value <= target
    ? "met"
    : `**missed** by ${format(value - target)} ${unit} (${(value / target).toFixed(1)}×)`

export const scale = async (): Promise<string> => {
  const startedAt = performance.now()
  const load = [loadavg()[0]!]
  const runs: Array<Figures> = []
  for (let run = 0; run < RUNS; run++) runs.push(await runOnce())
  load.push(loadavg()[0]!)
  const med = (pick: (figures: Figures) => number) => median(runs.map(pick))
  const ranks = HOSTS * DEVICES

  const out: Array<string> = []
  out.push("## Scale (`bench/scale.ts`)")
  out.push("")
  out.push(
    `${HOSTS} simulated hosts × ${DEVICES} ranks = ${ranks} ranks in ${WORKERS} processes against one launcher; ` +
      `${RUNS} run(s)${RUNS > 1 ? ", medians" : ""}${SIM_NICE === 0 ? "" : `, the simulators at nice ${SIM_NICE}`}. Bun ${Bun.version}, ${navigator.hardwareConcurrency} cores, commit ${commit()}, ` +
      `1-minute load average ${load[0]!.toFixed(1)} → ${load[1]!.toFixed(1)}, ${((performance.now() - startedAt) / 1000).toFixed(0)} s in all.`
  )
  out.push("")
  out.push("| run | spawn → listening | listening → every host's hint | → first dial | first dial → all accepted | → world formed | → cohort formed | → all attached | → first epoch planned everywhere | hosts failed | RSS (MiB): hints | world | cohort | VmHWM (MiB) |")
  out.push("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  const phaseRow = (name: string, pick: (pickOne: (figures: Figures) => number) => number) =>
    out.push(
      `| ${name} | ${f0(pick((r) => r.spawnToListening))} | ${f0(pick((r) => r.listeningToHinted))} | ${f0(pick((r) => r.listeningToDial))} | ${f0(pick((r) => r.dialToAccepted))} | ` +
        `${f0(pick((r) => r.dialToWorld))} | ${f0(pick((r) => r.dialToCohort))} | ${f0(pick((r) => r.dialToAttached))} | ${f0(pick((r) => r.dialToPlanned))} | ` +
        `${f0(pick((r) => r.failedHosts))} | ` +
        `${f0(pick((r) => r.rssAtHintsMiB))} | ${f0(pick((r) => r.rssAtWorldMiB))} | ${f0(pick((r) => r.rssAtCohortMiB))} | ${f0(pick((r) => r.hwmMiB))} |`
    )
  runs.forEach((run, index) => phaseRow(String(index + 1), (pickOne) => pickOne(run)))
  if (RUNS > 1) phaseRow("**median**", med)
  out.push("")
  out.push("Joining (first dial → world formed): each host's dial → Accept in ms, the hosts waiting a second or more (a dropped SYN is sent again after 1 s, then 3 s), the kernel's listen-queue overflows meanwhile (the whole machine's), and CPU shares of one core:")
  out.push("")
  out.push("| run | dial → Accept p50 | p90 | max | hosts ≥ 1 s | listen overflows | launcher CPU | simulators' CPU | launcher CPU time (ms) | of it in the kernel | per joining host (ms) |")
  out.push("|---|---|---|---|---|---|---|---|---|---|---|")
  runs.forEach((run, index) =>
    out.push(
      `| ${index + 1} | ${f0(median(run.admissions))} | ${f0(percentile(run.admissions, 0.9))} | ${f0(Math.max(...run.admissions))} | ` +
        `${run.admissions.filter((ms) => ms >= 1000).length} | ${run.listenOverflows} | ${pct(run.joinCpu.launcher)} | ${pct(run.joinCpu.simulators)} | ${f0(run.joinCpuMs)} | ${f0(run.joinSystemMs)} | ${run.joinCpuMsPerHost.toFixed(2)} |`
    ))
  out.push("")
  out.push(
    `\`GET /state.json\` at ${STATUS_RATE}/s, one connection each (ms; failed = not a 200 or no answer). The launcher's JS thread waited for a core ` +
      `(runnable, not running: /proc/<pid>/schedstat) ${runs.map((run) => f0(run.formationRunQueueMs)).join(", ")} ms from the first dial to cohort formed:`
  )
  out.push("")
  out.push("| run | window | requests | p50 | p99 | max | failed | response on the wire, gzipped (MiB) |")
  out.push("|---|---|---|---|---|---|---|---|")
  runs.forEach((run, index) => {
    for (const [window, summary] of [["formation (first dial → cohort formed)", run.statusFormation], [`quiet: the ${QUIET_MS / 1000} s after the first epoch is planned`, run.statusSteady]] as const) {
      out.push(`| ${index + 1} | ${window} | ${summary.count} | ${f1(summary.p50)} | ${f1(summary.p99)} | ${f1(summary.max)} | ${summary.failed} | ${summary.mebibytes.toFixed(2)} |`)
    }
  })
  if (runs.some((run) => run.longTurns !== undefined)) {
    out.push("")
    out.push("The launcher's turns that held its thread past 20 ms from the first dial to cohort formed (`SCALE_TURN_PROBE=1`; ms after the first dial: how long):")
    out.push("")
    runs.forEach((run, index) => {
      const turns = run.longTurns ?? []
      const longest = turns.reduce((most, turn) => Math.max(most, turn.ms), 0)
      out.push(`- run ${index + 1}: ${turns.length} turn(s), the longest ${longest} ms: ${turns.map((turn) => `${turn.at}: ${turn.ms}`).join(", ")}`)
    })
  }
  out.push("")
  out.push(`CPU, share of one core (utime + stime over the window; ${BASELINE_MS / 1000} s silent, ${HEARTBEAT_WINDOW_MS / 1000} s beating):`)
  out.push("")
  out.push("| run | launcher, every host attached, silent | launcher, every rank beating at 1 Hz | heartbeats sent/s | control frames into the launcher/s | the simulating processes, beating |")
  out.push("|---|---|---|---|---|---|")
  runs.forEach((run, index) =>
    out.push(`| ${index + 1} | ${pct(run.baselineCpu)} | ${pct(run.heartbeatCpu)} | ${f0(run.beatsPerSec)} | ${f0(run.controlFramesPerSec)} | ${pct(run.workersCpu)} |`))
  out.push("")
  const errors = runs.flatMap((run) => run.simErrors)
  if (errors.length > 0) out.push(`Simulated hosts that failed: ${errors.length} (first: ${errors.slice(0, 3).join("; ")})`, "")

  out.push("| target | measured | |")
  out.push("|---|---|---|")
  out.push(`| launcher CPU time ≤ ${TARGET_JOIN_CPU_MS_PER_HOST} ms per joining host (utime + stime, first dial → world formed) | ${med((r) => r.joinCpuMsPerHost).toFixed(2)} ms | ${verdict(med((r) => r.joinCpuMsPerHost), TARGET_JOIN_CPU_MS_PER_HOST, "ms", (v) => v.toFixed(2))} |`)
  out.push(`| ${ranks} ranks admitted, world formed ≤ ${TARGET_FORMATION_MS} ms (first dial → world formed) | ${f0(med((r) => r.dialToWorld))} ms | ${verdict(med((r) => r.dialToWorld), TARGET_FORMATION_MS, "ms")} |`)
  out.push(`| launcher peak RSS (VmHWM) ≤ ${TARGET_HWM_MIB} MiB | ${f0(med((r) => r.hwmMiB))} MiB | ${verdict(med((r) => r.hwmMiB), TARGET_HWM_MIB, "MiB")} |`)
  out.push(`| status p99 ≤ ${TARGET_STATUS_P99_MS} ms during formation | ${f1(med((r) => r.statusFormation.p99))} ms | ${verdict(med((r) => r.statusFormation.p99), TARGET_STATUS_P99_MS, "ms", f1)} |`)
  out.push(`| heartbeat handling ≤ ${pct(TARGET_HEARTBEAT_CPU)} of one core (launcher, beating window) | ${pct(med((r) => r.heartbeatCpu))} | ${verdict(med((r) => r.heartbeatCpu) * 100, TARGET_HEARTBEAT_CPU * 100, "points", f1)} |`)
  return out.join("\n")
}

if (import.meta.main) console.log(await scale())
