/**
 * CPU all-reduce, and the time from a rank's death to the survivors holding
 * its work.
 *
 * 1. Bandwidth and latency. N = 2 and 4 ranks on this machine all-reduce a
 *    Float32Array in place, 4 B (one float: the latency), 1 MiB, 16 MiB and
 *    64 MiB. Each contender runs the same plan (PLAN: per size, untimed
 *    warm-up calls, a barrier, then a fixed number of calls, each timed alone
 *    on rank 0) and rank 0 prints one JSON line per size:
 *     - `cohort`: a cluster of N CPU ranks (`bun src/cli/launch.ts` on a
 *       generated cluster file) running bench/allreduce-entry.ts; per round it
 *       makes one `ctx.allreduce(buf, { op: "sum" })`, one `{ op: "avg" }` and
 *       one sum of a `ctx.tensor` (shared memory, reduced in place),
 *       alternating, timed separately;
 *     - `gloo`: N processes of /usr/bin/python3 bench/allreduce-gloo.py,
 *       `torch.distributed` with backend gloo over loopback, `all_reduce` SUM
 *       (torch 1.13's gloo has no AVG);
 *     - `MPI`: bench/allreduce-mpi.c, built here with `mpicc -O2`, run by
 *       `mpirun --allow-run-as-root --oversubscribe -np N`; `MPI_Allreduce`
 *       with MPI_IN_PLACE, MPI_SUM on MPI_FLOAT.
 *    Algorithm bandwidth (nccl-tests' algbw) = tensor bytes / time of one
 *    call, in GB/s (1e9 bytes); the figure is bytes / median per-call time.
 *    Per-call times of every run are pooled per contender, N and size.
 *    Contenders are interleaved: each run launches every contender once per
 *    N, the order rotating run by run. A contender whose tool is missing is
 *    skipped with one line.
 *
 * 2. Redistribution. A 4-rank `cpu_sync` job (bench/allreduce-kill-entry.ts:
 *    steps of 250 samples, each a sleep, a 4 KiB all-reduce and
 *    `ctx.progress`; 400,000 samples per epoch) runs under
 *    `elastic: { max_failure: 75% }`, with the launcher in this process
 *    (`launchEffect`). Once every rank has its epoch plan, the benchmark
 *    waits 0.4–0.8 s and SIGKILLs one rank (its pid as the rank printed it),
 *    then reads:
 *     - when the launcher's supervisor reported the rank dead (its debug log line);
 *     - when the coordinator had sent the dead rank's samples on
 *       (`onRedistributed`, in this process; it is called after the sends, so
 *       a fast survivor can be ahead of it);
 *     - when each survivor that was given samples saw `plan.ranges` grow
 *       (checked every 1 ms and after every await; the rank prints the bound
 *       on its lateness) and when it applied the order (exact).
 *    All on one clock: `performance.timeOrigin + performance.now()`, wall
 *    time shared by the processes of one machine. One kill per run; the run is
 *    then interrupted (the e2e tests check that such a run completes). Two
 *    step lengths, interleaved kill by kill: 4 ms sleeps (the measured case)
 *    and 20 ms sleeps (a control: a fifth of the progress reports and
 *    all-reduces per second), with the CPU share of the launcher process and
 *    of the relay just before the kill.
 *
 * Environment: BENCH_RUNS (3) runs of part 1, BENCH_KILLS (2 × runs − 1)
 * kills per step length in part 2, BENCH_ONLY=redistribution for part 2 alone. `bun bench/allreduce.ts` alone, or
 * through `bun run bench`.
 */
import { execSync } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { launchEffect } from "../src/launch.ts"
import * as Native from "../src/native/Native.ts"
import { createSegment, floats } from "../src/wire/Segments.ts"
import { median, percentile } from "./stats.ts"

const RUNS = Number(process.env.BENCH_RUNS ?? 3)
const KILLS = Number(process.env.BENCH_KILLS ?? 2 * RUNS - 1)
const WORLDS = [2, 4] as const
const MiB = 1 << 20
/** Per size: untimed warm-up calls, then timed calls (per op), the same for every contender. */
const PLAN = [
  { bytes: 4, warm: 20, calls: 200 },
  { bytes: MiB, warm: 3, calls: 30 },
  { bytes: 16 * MiB, warm: 2, calls: 10 },
  { bytes: 64 * MiB, warm: 1, calls: 6 }
] as const
const PLAN_ARG = PLAN.map(({ bytes, calls, warm }) => `${bytes}:${warm}:${calls}`).join(",")
const PYTHON = "/usr/bin/python3"
const ROOT = resolve(import.meta.dir, "..")
const RUN_DEADLINE_MS = 120_000
/** Targets from the issue. */
const TARGET_BANDWIDTH_RATIO = 2
const TARGET_REDISTRIBUTION_MS = 50

const now = () => performance.timeOrigin + performance.now()

interface Result {
  readonly n: number
  readonly bytes: number
  readonly op: string
  readonly ms: ReadonlyArray<number>
  readonly ok: boolean
}

interface Contender {
  readonly name: string
  /** One launch of N ranks through the whole plan; rank 0's JSON lines. */
  readonly run: (n: number) => Promise<Array<Result>>
}

class RunFailed extends Error {}

/** Rank 0's `{"allreduce": …}` lines, wherever they sit in a line (cohort prefixes them). */
const parseResults = (text: string): Array<Result> =>
  text.split("\n").flatMap((line) => {
    const at = line.indexOf("{\"allreduce\"")
    return at < 0 ? [] : [(JSON.parse(line.slice(at)) as { allreduce: Result }).allreduce]
  })

const tail = (text: string) => text.trim().split("\n").slice(-8).map((line) => `    ${line}`).join("\n")

/** Run a command to its end (or the deadline); its stdout, or RunFailed with its stderr's tail. */
const runCommand = async (what: string, cmd: Array<string>, env: Record<string, string | undefined> = {}) => {
  const proc = Bun.spawn(cmd, { cwd: ROOT, env: { ...process.env, ...env }, stdin: "ignore", stdout: "pipe", stderr: "pipe" })
  let hung = false
  const deadline = setTimeout(() => {
    hung = true
    proc.kill("SIGKILL")
  }, RUN_DEADLINE_MS)
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  clearTimeout(deadline)
  if (hung || code !== 0) throw new RunFailed(`${what}: ${hung ? `no exit within ${RUN_DEADLINE_MS} ms` : `exit status ${code}`}\n${tail(stderr)}`)
  return stdout
}

const freePort = () => {
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const port = probe.port
  probe.stop(true)
  return port
}

/** The contenders this machine has, and a line for each one it has not. */
const detect = (scratch: string) => {
  const notes: Array<string> = []
  const contenders: Array<Contender> = []

  contenders.push({
    name: "cohort",
    run: async (n) => {
      const file = join(scratch, `cohort-${n}.yml`)
      writeFileSync(file, [
        "name: allreduce-bench",
        "controller: { host: 127.0.0.1, port: 0 }",
        "workers:",
        `  - { host: localhost, devices: ${n}, path: ${JSON.stringify(ROOT)}, env: { OMP_NUM_THREADS: "1" } }`,
        `job: { entry: bench/allreduce-entry.ts, args: [${JSON.stringify(`plan=${PLAN_ARG}`)}, "ops=sum,avg,tensor"] }`,
        "failure_policy: { grace: 2s }",
        ""
      ].join("\n"))
      return parseResults(await runCommand(`cohort, N=${n}`, [process.execPath, "src/cli/launch.ts", file]))
    }
  })

  const torch = existsSync(PYTHON) &&
    Bun.spawnSync([PYTHON, "-c", "import torch.distributed as d; assert d.is_available() and d.is_gloo_available()"], { stdout: "ignore", stderr: "ignore" }).exitCode === 0
  if (!torch) notes.push(`gloo skipped: ${PYTHON} cannot import torch.distributed with gloo (Debian: apt-get install python3-torch)`)
  else {
    contenders.push({
      name: "gloo",
      run: async (n) => {
        const port = String(freePort())
        const ranks = Array.from({ length: n }, (_, rank) =>
          runCommand(`gloo rank ${rank}, N=${n}`, [PYTHON, "bench/allreduce-gloo.py", PLAN_ARG], {
            RANK: String(rank),
            WORLD_SIZE: String(n),
            LOCAL_RANK: String(rank),
            MASTER_ADDR: "127.0.0.1",
            MASTER_PORT: port,
            OMP_NUM_THREADS: "1"
          }))
        return parseResults((await Promise.all(ranks))[0]!)
      }
    })
  }

  const mpicc = Bun.which("mpicc")
  const mpirun = Bun.which("mpirun")
  if (mpicc === null || mpirun === null) notes.push(`MPI skipped: ${mpicc === null ? "mpicc" : "mpirun"} is not on PATH (Debian: apt-get install openmpi-bin libopenmpi-dev)`)
  else {
    const binary = join(scratch, "allreduce-mpi")
    const built = Bun.spawnSync([mpicc, "-O2", "-o", binary, join(ROOT, "bench/allreduce-mpi.c")], { stdout: "pipe", stderr: "pipe" })
    if (built.exitCode !== 0) {
      notes.push(`MPI skipped: mpicc -O2 bench/allreduce-mpi.c failed (Debian: libopenmpi-dev has mpi.h): ${built.stderr.toString().trim().split("\n")[0]}`)
    } else {
      contenders.push({
        name: "MPI",
        run: async (n) =>
          parseResults(await runCommand(`MPI, N=${n}`, [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", String(n), binary, PLAN_ARG], { OMP_NUM_THREADS: "1" }))
      })
    }
  }
  return { contenders, notes }
}

const sizeLabel = (bytes: number) => (bytes < 1024 ? `${bytes} B` : `${bytes / MiB} MiB`)
const gbps = (bytes: number, ms: number) => bytes / (ms / 1000) / 1e9
const fixed = (value: number | undefined, digits: number) => (value === undefined || !Number.isFinite(value) ? "–" : value.toFixed(digits))

/** Part 1: every contender, N and size; tables, ratios and the two targets. */
const bandwidth = async (lines: Array<string>) => {
  const scratch = mkdtempSync(join(tmpdir(), "cohort-allreduce-"))
  try {
    const { contenders, notes } = detect(scratch)
    /** `${series}@${n}@${bytes}` → every timed call; per run, the median. */
    const calls = new Map<string, Array<number>>()
    const perRun = new Map<string, Array<number>>()
    const series = new Set<string>()
    const failures: Array<string> = []
    const key = (name: string, n: number, bytes: number) => `${name}@${n}@${bytes}`

    for (let run = 0; run < RUNS; run++) {
      for (const n of WORLDS) {
        const order = contenders.map((_, i) => contenders[(i + run) % contenders.length]!)
        for (const contender of order) {
          try {
            const results = await contender.run(n)
            if (results.length === 0) throw new RunFailed(`${contender.name}, N=${n}: no results on rank 0's output`)
            for (const result of results) {
              if (!result.ok) failures.push(`${contender.name} ${result.op}, N=${n}, ${sizeLabel(result.bytes)}: wrong sum in the check after the timed calls`)
              const name = `${contender.name} ${result.op}`
              series.add(name)
              const k = key(name, result.n, result.bytes)
              calls.set(k, [...(calls.get(k) ?? []), ...result.ms])
              perRun.set(k, [...(perRun.get(k) ?? []), median(result.ms)])
            }
          } catch (error) {
            if (!(error instanceof RunFailed)) throw error
            failures.push(error.message)
          }
        }
      }
    }

    const names = [...series]
    const med = (name: string, n: number, bytes: number) => {
      const values = calls.get(key(name, n, bytes))
      return values === undefined || values.length === 0 ? undefined : median(values)
    }
    lines.push(
      `## all-reduce, in place, f32: time per call on rank 0 and algorithm bandwidth (tensor bytes / median time per call, GB = 1e9 B)`,
      "",
      `Plan per size: ${PLAN.map(({ bytes, calls: count, warm }) => `${sizeLabel(bytes)}: ${warm} warm-up + ${count} timed`).join("; ")} calls per launch; ` +
        `${RUNS} run(s), each launching every contender once per N, order rotating.`,
      ...notes.map((note) => `note: ${note}`),
      "",
      "| N | size | contender | calls | median ms | p90 ms | min ms | algbw GB/s (median) |",
      "|---|---|---|---|---|---|---|---|"
    )
    for (const n of WORLDS) {
      for (const { bytes } of PLAN) {
        for (const name of names) {
          const values = calls.get(key(name, n, bytes)) ?? []
          if (values.length === 0) {
            lines.push(`| ${n} | ${sizeLabel(bytes)} | ${name} | 0 | – | – | – | – |`)
            continue
          }
          const m = median(values)
          const digits = bytes < 1024 ? 4 : 2
          lines.push(
            `| ${n} | ${sizeLabel(bytes)} | ${name} | ${values.length} | ${fixed(m, digits)} | ${fixed(percentile(values, 0.9), digits)} | ` +
              `${fixed(Math.min(...values), digits)} | ${bytes < 1024 ? "–" : fixed(gbps(bytes, m), 3)} |`
          )
        }
      }
    }

    // Ratios: bandwidth cohort ÷ other (> 1: cohort faster); for 4 B, latency cohort ÷ other (< 1: cohort faster).
    const others = names.filter((name) => !name.startsWith("cohort "))
    const ratioCell = (ours: string, theirs: string, n: number, bytes: number) => {
      const a = med(ours, n, bytes)
      const b = med(theirs, n, bytes)
      if (a === undefined || b === undefined) return "–"
      const ratio = bytes < 1024 ? a / b : b / a
      const runsA = perRun.get(key(ours, n, bytes)) ?? []
      const runsB = perRun.get(key(theirs, n, bytes)) ?? []
      const byRun = runsA.slice(0, runsB.length).map((value, i) => (bytes < 1024 ? value / runsB[i]! : runsB[i]! / value))
      return byRun.length > 1 ? `${ratio.toFixed(2)} (runs ${Math.min(...byRun).toFixed(2)}–${Math.max(...byRun).toFixed(2)})` : ratio.toFixed(2)
    }
    if (others.length > 0) {
      lines.push(
        "",
        "Ratios of medians: for 1–64 MiB cohort's bandwidth ÷ the other's (> 1: cohort faster); for 4 B cohort's latency ÷ the other's (< 1: cohort faster). " +
          "In brackets, the range of the same ratio taken run by run.",
        "",
        `| N | size | ${others.flatMap((other) => [`cohort sum vs ${other}`, `cohort avg vs ${other}`, `cohort tensor vs ${other}`]).join(" | ")} |`,
        `|---|---|${others.flatMap(() => ["---", "---", "---"]).join("|")}|`
      )
      for (const n of WORLDS) {
        for (const { bytes } of PLAN) {
          lines.push(`| ${n} | ${sizeLabel(bytes)} | ${others.flatMap((other) => [ratioCell("cohort sum", other, n, bytes), ratioCell("cohort avg", other, n, bytes), ratioCell("cohort tensor", other, n, bytes)]).join(" | ")} |`)
        }
      }
    }

    lines.push("", "Targets (N = 4):")
    const gloo64 = med("gloo sum", 4, 64 * MiB)
    for (const [name, what] of [["cohort sum", "an ordinary Float32Array"], ["cohort tensor", "a ctx.tensor"]] as const) {
      const ours64 = med(name, 4, 64 * MiB)
      if (ours64 === undefined || gloo64 === undefined) lines.push(`- 64 MiB bandwidth (${what}) ≥ ${TARGET_BANDWIDTH_RATIO}× gloo: not measured`)
      else {
        const ratio = gloo64 / ours64
        lines.push(
          `- 64 MiB algbw, ${what}: cohort ${gbps(64 * MiB, ours64).toFixed(3)} GB/s, gloo ${gbps(64 * MiB, gloo64).toFixed(3)} GB/s: ` +
            `${ratio.toFixed(2)}×, target ≥ ${TARGET_BANDWIDTH_RATIO}×: ${ratio >= TARGET_BANDWIDTH_RATIO ? "met" : "MISSED"}`
        )
      }
    }
    const ours4 = med("cohort sum", 4, 4)
    const gloo4 = med("gloo sum", 4, 4)
    if (ours4 === undefined || gloo4 === undefined) lines.push("- 4 B latency ≤ gloo's: not measured")
    else {
      lines.push(
        `- 4 B latency: cohort ${ours4.toFixed(3)} ms, gloo ${gloo4.toFixed(3)} ms: ${(ours4 / gloo4).toFixed(2)}× gloo's, target ≤ 1×: ` +
          (ours4 <= gloo4 ? "met" : "MISSED")
      )
    }
    if (failures.length > 0) lines.push("", `${failures.length} launch(es) or check(s) failed and are left out:`, ...failures.map((failure) => `- ${failure}`))
  } finally {
    rmSync(scratch, { recursive: true, force: true })
  }
}

/**
 * Where cohort's time goes at 64 MiB: the data movement of one
 * `ctx.allreduce` on one host, replayed in this process, one step after the
 * other. For an ordinary Float32Array: each rank's copy into its staging
 * segment (`Float32Array.set`, as RelayClient does), the relay's native sum
 * of the N segments into the first one, in place, the relay's N − 1 copies of
 * the result into the other segments (the kernel's one-input sum, on its
 * threads), and each rank's copy back. A `ctx.tensor` skips both rank-side
 * copies. Segments are files on /dev/shm mapped with Bun.mmap, as in a run.
 * Sequential, so these are CPU times; in a run the N ranks copy side by side
 * on the machine's cores.
 */
const breakdown = async (lines: Array<string>) => {
  const native = await Effect.runPromise(Effect.either(Native.load()))
  if (native._tag === "Left") {
    lines.push("", `(no breakdown: ${native.left.message})`)
    return
  }
  const { kernels } = native.right
  const dir = mkdtempSync(join(existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "cohort-allreduce-copies-"))
  try {
    const bytes = 64 * MiB
    lines.push(
      "",
      "## where cohort's time goes at 64 MiB: its data movement replayed in one process, step by step (median of 5 after 2 warm-ups, ms)",
      "",
      "| N | N copies in (rank → its segment) | native sum into the first segment | N − 1 result copies (relay, kernel threads) | N copies out (segment → rank) | total, ordinary array | total, ctx.tensor | algbw on one core, array / tensor |",
      "|---|---|---|---|---|---|---|---|"
    )
    for (const n of WORLDS) {
      const buffers = Array.from({ length: n }, () => new Float32Array(bytes / 4).fill(0))
      const segments = Array.from({ length: n }, (_, i) => floats(createSegment(join(dir, `r${i}.seg`), bytes), bytes))
      const times = { in: [] as Array<number>, sum: [] as Array<number>, spread: [] as Array<number>, out: [] as Array<number> }
      for (let round = 0; round < 7; round++) {
        let start = performance.now()
        for (let i = 0; i < n; i++) segments[i]!.set(buffers[i]!)
        const copiedIn = performance.now() - start
        start = performance.now()
        kernels.sum("f32", segments, segments[0]!)
        const summed = performance.now() - start
        start = performance.now()
        for (const target of segments.slice(1)) kernels.sum("f32", [segments[0]!], target)
        const spread = performance.now() - start
        start = performance.now()
        for (let i = 0; i < n; i++) buffers[i]!.set(segments[i]!)
        const copiedOut = performance.now() - start
        if (round < 2) continue
        times.in.push(copiedIn)
        times.sum.push(summed)
        times.spread.push(spread)
        times.out.push(copiedOut)
      }
      const relay = median(times.sum) + median(times.spread)
      const total = median(times.in) + relay + median(times.out)
      lines.push(
        `| ${n} | ${median(times.in).toFixed(1)} | ${median(times.sum).toFixed(1)} | ${median(times.spread).toFixed(1)} | ${median(times.out).toFixed(1)} | ` +
          `${total.toFixed(1)} | ${relay.toFixed(1)} | ${gbps(bytes, total).toFixed(3)} / ${gbps(bytes, relay).toFixed(3)} |`
      )
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

interface KillSample {
  readonly victim: number
  /** ms after the kill: the supervisor's "rank(s) R dead" log line */
  readonly reported: number | undefined
  /** ms after the kill: onRedistributed */
  readonly redistributed: number | undefined
  /** ms after the kill, per survivor given samples: seen through plan.ranges (poll), and applied (exact) */
  readonly seen: ReadonlyArray<number>
  readonly applied: ReadonlyArray<number>
  /** the largest bound on a survivor's poll lateness, ms */
  readonly pollError: number
  /** ms since the epoch's plans arrived, when the kill was sent */
  readonly into: number
  /** share of one core used by this process (launcher and agent) and by the relay in the moments before the kill, % */
  readonly launcherCpu: number
  readonly relayCpu: number | undefined
}

const waitFor = async (check: () => boolean, what: string, timeoutMs: number) => {
  const deadline = performance.now() + timeoutMs
  while (!check()) {
    if (performance.now() > deadline) throw new RunFailed(`waited ${timeoutMs} ms for ${what}`)
    await Bun.sleep(2)
  }
}

/** CPU ticks (user + system) of a process, from /proc; undefined when it cannot be read. */
const cpuTicks = (pid: number): number | undefined => {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
    return Number(fields[11]) + Number(fields[12])
  } catch {
    return undefined
  }
}
/** The relay: this process's child whose command line names src/cli/relay.ts. */
const findRelay = (): number | undefined => {
  try {
    for (const entry of readdirSync("/proc")) {
      if (!/^\d+$/.test(entry)) continue
      try {
        const parent = readFileSync(`/proc/${entry}/stat`, "utf8").split(") ")[1]!.split(" ")[1]
        if (parent === String(process.pid) && readFileSync(`/proc/${entry}/cmdline`, "utf8").includes("relay")) return Number(entry)
      } catch {}
    }
  } catch {}
  return undefined
}
const TICK_MS = 10

/** One run of part 2: start the job, kill `victim` mid-epoch, read the moments, interrupt. */
const killOnce = async (file: string, victim: number, delayMs: number): Promise<KillSample> => {
  const pids = new Map<number, number>()
  const epochAt = new Map<number, number>()
  const grew = new Map<number, { t: number; gap: number; arrived: number | undefined }>()
  let redistributed: { at: number; survivors: Array<number> } | undefined
  let reported: number | undefined
  let tail: Array<string> = []
  let stop!: (reason: string) => void
  const interrupt = new Promise<string>((resolve) => (stop = resolve))
  const deadLine = new RegExp(`^rank\\(s\\) [\\d, ]*\\b${victim}\\b[\\d, ]* dead`)
  const logger = Logger.make(({ message }) => {
    if (reported !== undefined) return
    const text = (Array.isArray(message) ? message : [message]).map(String).join(" ")
    if (deadLine.test(text)) reported = now()
  })
  const result = Effect.runPromise(
    launchEffect(file, {
      output: (line) => {
        tail = [...tail.slice(-7), line]
        const at = line.indexOf("{\"kill\"")
        if (at < 0) return
        const event = JSON.parse(line.slice(at)) as { kill: string; rank: number; pid: number; t: number; gap: number; arrived?: number }
        if (event.kill === "pid") pids.set(event.rank, event.pid)
        else if (event.kill === "epoch") epochAt.set(event.rank, event.t)
        else if (event.kill === "grew" && !grew.has(event.rank)) grew.set(event.rank, { t: event.t, gap: event.gap, arrived: event.arrived })
      },
      interrupt,
      onRedistributed: (dead, extensions) => {
        if (dead !== victim || redistributed !== undefined) return
        redistributed = { at: now(), survivors: [...extensions].filter(([, ranges]) => ranges.length > 0).map(([rank]) => rank) }
      }
    }).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)), Logger.withMinimumLogLevel(LogLevel.Debug))
  )
  let failed: unknown
  result.catch((error: unknown) => (failed = error))
  try {
    await waitFor(() => failed !== undefined || epochAt.size === 4, "every rank's epoch plan", 60_000)
    if (failed !== undefined) throw new RunFailed(`the run failed to start: ${String(failed)}`)
    const relay = findRelay()
    const cpuBefore = process.cpuUsage()
    const relayBefore = relay === undefined ? undefined : cpuTicks(relay)
    const windowStart = performance.now()
    await Bun.sleep(delayMs)
    const window = performance.now() - windowStart
    const cpu = process.cpuUsage(cpuBefore)
    const relayAfter = relay === undefined ? undefined : cpuTicks(relay)
    const pid = pids.get(victim)
    if (pid === undefined) throw new RunFailed(`rank ${victim} printed no pid`)
    const killedAt = now()
    process.kill(pid, "SIGKILL")
    await waitFor(
      () => redistributed !== undefined && redistributed.survivors.every((rank) => grew.has(rank)),
      "the survivors to see their plans grow",
      20_000
    )
    const survivors = redistributed!.survivors
    return {
      victim,
      reported: reported === undefined ? undefined : reported - killedAt,
      redistributed: redistributed!.at - killedAt,
      seen: survivors.map((rank) => grew.get(rank)!.t - killedAt),
      applied: survivors.flatMap((rank) => {
        const arrived = grew.get(rank)!.arrived
        return arrived === undefined ? [] : [arrived - killedAt]
      }),
      pollError: Math.max(...survivors.map((rank) => grew.get(rank)!.gap)),
      into: killedAt - Math.max(...epochAt.values()),
      launcherCpu: ((cpu.user + cpu.system) / 1000 / window) * 100,
      relayCpu: relayBefore === undefined || relayAfter === undefined ? undefined : (((relayAfter - relayBefore) * TICK_MS) / window) * 100
    }
  } catch (error) {
    if (error instanceof RunFailed) error.message += `\n  last lines:\n${tail.map((line) => `    ${line}`).join("\n")}`
    throw error
  } finally {
    stop("the benchmark has its measurement")
    await result.catch(() => undefined)
  }
}

/** The two step lengths: the measured one (a few ms per step, as asked), and a control with fewer reports per second. */
const STEP_CONFIGS = [
  { label: "4 ms steps", sleep: 4, target: true },
  { label: "20 ms steps", sleep: 20, target: false }
] as const

/** Part 2: kill → survivors hold the work, several kills per step length, interleaved. */
const redistribution = async (lines: Array<string>) => {
  const scratch = mkdtempSync(join(tmpdir(), "cohort-redistribution-"))
  try {
    const fileFor = (sleep: number) => {
      const file = join(scratch, `cluster-${sleep}.yml`)
      writeFileSync(file, [
        "name: redistribution-bench",
        "controller: { host: 127.0.0.1, port: 0 }",
        "workers:",
        `  - { host: localhost, devices: 4, path: ${JSON.stringify(ROOT)}, env: { OMP_NUM_THREADS: "1" } }`,
        "job:",
        "  entry: bench/allreduce-kill-entry.ts",
        `  args: ["batch=250", "sleep=${sleep}", "grad=1024"]`,
        "  backend: cpu_sync",
        "  dataset_size: 400000",
        "  epochs: 1",
        "failure_policy:",
        "  after_formation:",
        "    elastic: { max_failure: 75% }",
        "  grace: 2s",
        ""
      ].join("\n"))
      return file
    }
    const files = STEP_CONFIGS.map(({ sleep }) => fileFor(sleep))
    const samples = STEP_CONFIGS.map(() => [] as Array<KillSample>)
    const failures: Array<string> = []
    for (let i = 0; i < KILLS; i++) {
      const victim = [1, 2, 3, 0][i % 4]!
      for (let c = 0; c < STEP_CONFIGS.length; c++) {
        const config = (c + i) % STEP_CONFIGS.length
        try {
          samples[config]!.push(await killOnce(files[config]!, victim, 400 + ((i * 137) % 400)))
        } catch (error) {
          if (!(error instanceof RunFailed)) throw error
          failures.push(`${STEP_CONFIGS[config]!.label}, kill ${i + 1} (rank ${victim}): ${error.message}`)
        }
      }
    }
    const worst = (values: ReadonlyArray<number>) => (values.length === 0 ? undefined : Math.max(...values))
    const best = (values: ReadonlyArray<number>) => (values.length === 0 ? undefined : Math.min(...values))
    const medianOf = (values: ReadonlyArray<number | undefined>) => {
      const present = values.filter((value): value is number => value !== undefined)
      return present.length === 0 ? undefined : median(present)
    }
    lines.push(
      "",
      "## a rank SIGKILLed mid-epoch: ms from the kill until …",
      "",
      "4 ranks, 400,000 samples per epoch, steps of 250 samples (a sleep + a 4 KiB all-reduce + ctx.progress), elastic max_failure 75%, launcher in this process. " +
        "`seen`: a survivor's `plan.ranges` had grown, as user code sees it (late by at most `poll error`); `applied`: the rank applied the order (exact). " +
        "CPU: share of one core over the 0.4–0.8 s before the kill.",
      "",
      "| steps | kill | victim | into the epoch | supervisor reported it dead | redistributed (launcher) | first survivor applied | last survivor applied | first survivor seen | last survivor seen | poll error ≤ | launcher CPU % | relay CPU % |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    STEP_CONFIGS.forEach((config, c) => {
      const mine = samples[c]!
      mine.forEach((sample, i) => {
        lines.push(
          `| ${config.label} | ${i + 1} | ${sample.victim} | ${sample.into.toFixed(0)} | ${fixed(sample.reported, 1)} | ${fixed(sample.redistributed, 1)} | ` +
            `${fixed(best(sample.applied), 1)} | ${fixed(worst(sample.applied), 1)} | ${fixed(best(sample.seen), 1)} | ${fixed(worst(sample.seen), 1)} | ` +
            `${sample.pollError.toFixed(1)} | ${sample.launcherCpu.toFixed(0)} | ${fixed(sample.relayCpu, 0)} |`
        )
      })
      if (mine.length > 0) {
        lines.push(
          `| ${config.label} | **median** | | ${fixed(medianOf(mine.map((sample) => sample.into)), 0)} | ${fixed(medianOf(mine.map((sample) => sample.reported)), 1)} | ` +
            `${fixed(medianOf(mine.map((sample) => sample.redistributed)), 1)} | ${fixed(medianOf(mine.map((sample) => best(sample.applied))), 1)} | ` +
            `${fixed(medianOf(mine.map((sample) => worst(sample.applied))), 1)} | ${fixed(medianOf(mine.map((sample) => best(sample.seen))), 1)} | ` +
            `**${fixed(medianOf(mine.map((sample) => worst(sample.seen))), 1)}** | ${fixed(medianOf(mine.map((sample) => sample.pollError)), 1)} | ` +
            `${fixed(medianOf(mine.map((sample) => sample.launcherCpu)), 0)} | ${fixed(medianOf(mine.map((sample) => sample.relayCpu)), 0)} |`
        )
      }
    })
    STEP_CONFIGS.forEach((config, c) => {
      const last = medianOf(samples[c]!.map((sample) => worst(sample.seen)))
      if (last === undefined) return
      lines.push(
        "",
        `${config.target ? "Target" : "Control"} (${config.label}): median kill → every survivor sees its work ${last.toFixed(1)} ms over ${samples[c]!.length} kill(s)` +
          (config.target ? `, target ≤ ${TARGET_REDISTRIBUTION_MS} ms: ${last <= TARGET_REDISTRIBUTION_MS ? "met" : "MISSED"}` : "")
      )
    })
    if (failures.length > 0) lines.push("", `${failures.length} kill run(s) failed and are left out:`, ...failures.map((failure) => `- ${failure}`))
  } finally {
    rmSync(scratch, { recursive: true, force: true })
  }
}

export const allreduce = async () => {
  const started = now()
  const loadBefore = loadavg()[0]!
  const lines: Array<string> = []
  // BENCH_ONLY=redistribution: the kills alone (part 2), for a quick look at reaction times.
  if (process.env.BENCH_ONLY !== "redistribution") {
    await bandwidth(lines)
    await breakdown(lines)
  }
  await redistribution(lines)
  let commit = "unknown"
  try {
    commit = execSync("git rev-parse --short HEAD", { cwd: ROOT, stdio: ["ignore", "pipe", "ignore"] }).toString().trim()
    const changed = execSync("git status --porcelain -- src", { cwd: ROOT, stdio: ["ignore", "pipe", "ignore"] }).toString().trim()
    if (changed !== "") commit += " with uncommitted changes under src/"
  } catch {}
  lines.push(
    "",
    `(${((now() - started) / 1000).toFixed(0)} s in all; BENCH_RUNS=${RUNS}, BENCH_KILLS=${KILLS}; bun ${Bun.version}, ${navigator.hardwareConcurrency} cores, ` +
      `commit ${commit}; 1-minute load average ${loadBefore.toFixed(1)} before, ${loadavg()[0]!.toFixed(1)} after)`
  )
  return lines.join("\n")
}

if (import.meta.main) console.log(await allreduce())
