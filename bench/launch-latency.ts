/**
 * Launch latency: how long from the moment a launcher command is spawned
 * until every one of its N ranks runs user code, and until the launcher has
 * exited when the ranks exit at once? And how much memory does it take?
 *
 * Every rank writes the wall-clock time at which it runs user code into a
 * per-run temp dir and exits. Latency = max(rank stamps) − spawn time, taken
 * with the same clock (`performance.timeOrigin + performance.now()` here and
 * in an entry rank, `time.time()` in Python). Contenders, interleaved run by
 * run, for N = 1, 2, 4, 8 ranks on this host:
 *  - `cohort command`: a `command:` job running `/usr/bin/python3 bench/launch-stamp.py`;
 *  - `cohort entry`:   an `entry:` job, `bench/launch-stamp-entry.ts` in cohort's rank runtime;
 *  - `mpirun`:         Open MPI, `mpirun -np N` of the same stamp program (when installed);
 *  - `torchrun`:       `torch.distributed.run --standalone --monitor_interval 0.1` of the same
 *                      program (when Debian's /usr/bin/python3 imports torch), through
 *                      `bench/launch-torchrun.py`, which mends Debian's torch 1.13 under Python 3.11.
 *                      The 0.1 s monitor interval only shortens its wall time (the default 5 s adds
 *                      seconds after the ranks exit). It gets fewer runs: BENCH_TORCHRUN_RUNS (5);
 *  - `floor`:          N bare `Bun.spawn`s of the stamp program from this process, no launcher;
 *  - `cohort command /bin/true` and `mpirun /bin/true`, at N = 4 only: ranks that do nothing, so wall
 *    time is the launcher's alone (no stamps: latency is not measured for them).
 * cohort runs as `bun src/cli/launch.ts <generated cluster.yml>` (one worker
 * `localhost`, `devices: N`, `controller.port: 0`). Its stderr is read to
 * time its phases (listening, world formed, cohort formed); its stdout and
 * everyone else's output are discarded.
 *
 * Memory comes from VmHWM (/proc/<pid>/status), each process's own
 * high-water mark. Not from getrusage's ru_maxrss: Linux carries the
 * spawning process's high-water mark across exec, so a launcher spawned by
 * this benchmark would report the benchmark's size, and a rank its launcher's.
 *  - an entry rank writes its VmHWM when user code starts (every timed run);
 *  - after the timed runs, one memory run per launcher at N = 4 and 8 under
 *    GNU time (`/usr/bin/time -f %M`, when installed): the maximum over the
 *    launcher and every descendant it reaped, each counted from its own
 *    exec, since `time` is tiny. For mpirun and torchrun that is the
 *    launcher (its children are the 10 MiB stamp program). For cohort it is
 *    also the relay's and the entry ranks', so the cohort launcher also
 *    runs with `--preload bench/launch-rss-preload.ts`, which writes its own
 *    VmHWM at exit.
 * Memory runs are not timed: the wrapper and the preload are not part of a
 * launch.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { median, percentile } from "./stats.ts"
import { type Phase, runPhased, wallClock } from "./phase-lines.ts"

const RUNS = Number(process.env.BENCH_RUNS ?? 10)
/** torchrun takes seconds a run: it runs in the first rounds only, so the whole benchmark stays within minutes. */
const TORCHRUN_RUNS = Math.min(RUNS, Number(process.env.BENCH_TORCHRUN_RUNS ?? 5))
const SIZES = [1, 2, 4, 8] as const
const MEMORY_SIZES = [4, 8] as const
/** The ratios and targets are taken at this N. */
const TARGET_N = 4
const PYTHON = "/usr/bin/python3"
const TRUE = "/bin/true"
const GNU_TIME = "/usr/bin/time"
const ROOT = resolve(import.meta.dir, "..")
const STAMP_PY = join(ROOT, "bench/launch-stamp.py")
const STAMP_ENTRY = join(ROOT, "bench/launch-stamp-entry.ts")
const TORCHRUN_SHIM = join(ROOT, "bench/launch-torchrun.py")
const RSS_PRELOAD = join(ROOT, "bench/launch-rss-preload.ts")
const RUN_DEADLINE_MS = 60_000

const now = wallClock


interface Sample {
  /** spawn → the last rank runs user code (undefined: a rank program that writes no stamp) */
  readonly latency: number | undefined
  /** spawn → the first rank runs user code */
  readonly first: number | undefined
  /** spawn → the launcher has exited */
  readonly wall: number
  /** cohort: ms since spawn at which each phase line arrived */
  readonly phases: Partial<Record<Phase, number>>
  /** entry ranks: VmHWM when user code starts, largest rank, KiB */
  readonly rankPeakKb: number | undefined
  /** entry ranks: process start → user code, slowest rank, ms */
  readonly rankBoot: number | undefined
  /** memory runs: GNU time's %M (the launcher and its reaped descendants), KiB */
  readonly treePeakKb: number | undefined
  /** memory runs, cohort: the launcher's own VmHWM at exit, KiB */
  readonly ownPeakKb: number | undefined
}

interface Contender {
  readonly name: string
  readonly runs: number
  /** The launcher's argv for N ranks (`memory`: for a memory run); undefined: the floor, bare spawns. */
  readonly launcher: ((n: number, memory: boolean) => Array<string>) | undefined
  readonly isCohort: boolean
  /** Its ranks write stamps (false: `/bin/true`, timed by wall only). */
  readonly stamps: boolean
  /** The N it runs at (all SIZES when absent). */
  readonly sizes?: ReadonlyArray<number>
}

class RunFailed extends Error {}

interface Stamp {
  readonly t: number
  readonly origin?: number
  readonly peakKb?: number
}

const readStamps = (dir: string): Array<Stamp> =>
  readdirSync(dir).map((name) => {
    const text = readFileSync(join(dir, name), "utf8")
    return text.startsWith("{") ? JSON.parse(text) as Stamp : { t: Number(text) * 1000 }
  })

/** The last number in a file (GNU time writes "Command exited with …" above it on a failure). */
const readKb = (file: string): number | undefined => {
  if (!existsSync(file)) return undefined
  const value = Number(readFileSync(file, "utf8").trim().split("\n").at(-1))
  return Number.isFinite(value) && value > 0 ? value : undefined
}

const runOnce = async (contender: Contender, n: number, scratch: string, memory: boolean): Promise<Sample> => {
  const dir = mkdtempSync(join(scratch, "run-"))
  const timeFile = `${dir}.time`
  const ownFile = `${dir}.own`
  try {
    const env = { ...process.env, LAUNCH_STAMP_DIR: dir, ...(memory ? { LAUNCH_RSS_FILE: ownFile } : {}) }
    let phases: Partial<Record<Phase, number>> = {}
    let tail: ReadonlyArray<string> = []
    let t0: number
    let status: string
    if (contender.launcher === undefined) {
      t0 = now()
      const procs = Array.from({ length: n }, () => Bun.spawn([PYTHON, STAMP_PY], { env, stdin: "ignore", stdout: "ignore", stderr: "ignore" }))
      const codes = await Promise.all(procs.map((proc) => proc.exited))
      status = codes.every((code) => code === 0) ? "ok" : `exit statuses ${codes.join(", ")}`
    } else {
      const argv = contender.launcher(n, memory)
      const cmd = memory ? [GNU_TIME, "-f", "%M", "-o", timeFile, ...argv] : argv
      ;({ phases, status, t0, tail } = await runPhased(cmd, { cwd: ROOT, env }, RUN_DEADLINE_MS))
    }
    const wall = now() - t0
    const stamps = readStamps(dir)
    if (status !== "ok" || stamps.length !== (contender.stamps ? n : 0)) {
      throw new RunFailed(
        `${contender.name}, N=${n}: ${status}, ${stamps.length} of ${contender.stamps ? n : 0} stamps` +
          (tail.length > 0 ? `\n  last stderr lines:\n${tail.map((line) => `    ${line}`).join("\n")}` : "")
      )
    }
    const times = stamps.map((stamp) => stamp.t)
    const entry = stamps.filter((stamp) => stamp.origin !== undefined)
    return {
      latency: times.length === 0 ? undefined : Math.max(...times) - t0,
      first: times.length === 0 ? undefined : Math.min(...times) - t0,
      wall,
      phases,
      rankPeakKb: entry.length > 0 ? Math.max(...entry.map((stamp) => stamp.peakKb!)) : undefined,
      rankBoot: entry.length > 0 ? Math.max(...entry.map((stamp) => stamp.t - stamp.origin!)) : undefined,
      treePeakKb: readKb(timeFile),
      ownPeakKb: readKb(ownFile)
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
    rmSync(timeFile, { force: true })
    rmSync(ownFile, { force: true })
  }
}

const present = (values: ReadonlyArray<number | undefined>) =>
  values.filter((value): value is number => value !== undefined && Number.isFinite(value))
const medianOf = (values: ReadonlyArray<number | undefined>) => {
  const known = present(values)
  return known.length === 0 ? undefined : median(known)
}
const ms = (value: number | undefined) => (value === undefined ? "–" : value.toFixed(0))
const mib = (kb: number | undefined) => (kb === undefined ? "–" : (kb / 1024).toFixed(0))

/** The contenders this machine has, and notes on the ones it has not. */
const detect = (scratch: string) => {
  const notes: Array<string> = []
  const cluster = (n: number, job: "command" | "entry" | "true") => {
    const file = join(scratch, `cluster-${job}-${n}.yml`)
    if (!existsSync(file)) {
      writeFileSync(
        file,
        [
          "name: launch-latency",
          "controller: { host: 127.0.0.1, port: 0 }",
          "workers:",
          `  - { host: localhost, devices: ${n}, path: ${JSON.stringify(ROOT)} }`,
          job === "command"
            ? `job: { command: [${JSON.stringify(PYTHON)}, ${JSON.stringify(STAMP_PY)}] }`
            : job === "true"
            ? `job: { command: [${JSON.stringify(TRUE)}] }`
            : `job: { entry: ${JSON.stringify(STAMP_ENTRY)} }`,
          ""
        ].join("\n")
      )
    }
    return file
  }
  const cohort = (job: "command" | "entry" | "true") => (n: number, memory: boolean) => [
    process.execPath,
    ...(memory ? ["--preload", RSS_PRELOAD] : []),
    "src/cli/launch.ts",
    cluster(n, job)
  ]

  const python = existsSync(PYTHON)
  if (!python) notes.push(`${PYTHON} is missing: the stamp program cannot run, so only cohort entry runs`)
  const mpirun = python ? Bun.which("mpirun") : null
  if (python && mpirun === null) notes.push("mpirun is not installed (Debian: openmpi-bin): skipped")
  const torch = python && Bun.spawnSync([PYTHON, "-c", "import torch.distributed.run"], { stdout: "ignore", stderr: "ignore" }).exitCode === 0
  if (python && !torch) notes.push(`${PYTHON} cannot import torch (Debian: python3-torch): torchrun skipped`)
  const gnuTime = existsSync(GNU_TIME)
  if (!gnuTime) notes.push(`${GNU_TIME} (GNU time) is missing: no launcher memory figures`)

  const contenders: Array<Contender> = []
  if (python) {
    contenders.push({ name: "floor: N × Bun.spawn", runs: RUNS, launcher: undefined, isCohort: false, stamps: true })
    contenders.push({ name: "cohort command", runs: RUNS, launcher: cohort("command"), isCohort: true, stamps: true })
  }
  contenders.push({ name: "cohort entry", runs: RUNS, launcher: cohort("entry"), isCohort: true, stamps: true })
  const mpirunOf = (mpirun: string, program: ReadonlyArray<string>) => (n: number) => [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", String(n), ...program]
  if (mpirun !== null) contenders.push({ name: "mpirun", runs: RUNS, launcher: mpirunOf(mpirun, [PYTHON, STAMP_PY]), isCohort: false, stamps: true })
  // Ranks that do nothing: the launchers' own time, spawn to exit (issue 25 measured its "today" this way).
  contenders.push({ name: "cohort command /bin/true", runs: RUNS, launcher: cohort("true"), isCohort: true, stamps: false, sizes: [TARGET_N] })
  const mpirunTrue = Bun.which("mpirun")
  if (mpirunTrue !== null) {
    contenders.push({ name: "mpirun /bin/true", runs: RUNS, launcher: mpirunOf(mpirunTrue, [TRUE]), isCohort: false, stamps: false, sizes: [TARGET_N] })
  }
  if (torch) {
    contenders.push({
      name: "torchrun",
      runs: TORCHRUN_RUNS,
      launcher: (n) => [PYTHON, TORCHRUN_SHIM, "--standalone", "--nproc_per_node", String(n), "--monitor_interval", "0.1", STAMP_PY],
      isCohort: false,
      stamps: true
    })
  }
  return { contenders, notes, gnuTime }
}

export const launchLatency = async () => {
  const scratch = mkdtempSync(join(tmpdir(), "cohort-launch-latency-"))
  const started = now()
  const loadBefore = loadavg()[0]!
  try {
    const { contenders, gnuTime, notes } = detect(scratch)
    const key = (name: string, n: number) => `${name}@${n}`
    const timed = new Map<string, Array<Sample>>()
    const memory = new Map<string, Sample>()
    const failures: Array<string> = []
    const attempt = async (contender: Contender, n: number, mode: "warm-up" | "timed" | "memory") => {
      try {
        const sample = await runOnce(contender, n, scratch, mode === "memory")
        if (mode === "timed") timed.set(key(contender.name, n), [...(timed.get(key(contender.name, n)) ?? []), sample])
        if (mode === "memory") memory.set(key(contender.name, n), sample)
      } catch (error) {
        if (!(error instanceof RunFailed)) throw error
        failures.push(`${mode === "timed" ? "" : `(${mode} run) `}${error.message}`)
      }
    }

    const runsAt = (contender: Contender, n: number) => (contender.sizes ?? SIZES).includes(n)
    // The launchers that run their own work: the /bin/true pairs would only repeat them.
    const memoryContenders = contenders.filter((contender) => contender.launcher !== undefined && contender.sizes === undefined)
    // Warm-up: page cache, Bun's transpiler cache, cohort's bundle, Python's bytecode.
    for (const contender of contenders) await attempt(contender, 1, "warm-up")
    for (let round = 0; round < RUNS; round++) {
      for (const n of SIZES) {
        // Rotate who goes first, so no contender always follows the same one.
        const order = contenders.map((_, i) => contenders[(i + round) % contenders.length]!)
        for (const contender of order) if (round < contender.runs && runsAt(contender, n)) await attempt(contender, n, "timed")
      }
    }
    if (gnuTime) {
      for (const n of MEMORY_SIZES) for (const contender of memoryContenders) await attempt(contender, n, "memory")
    }

    const get = (name: string, n: number) => timed.get(key(name, n)) ?? []
    const lines: Array<string> = [
      "launch latency: spawn → every rank runs user code (latency), and spawn → launcher exit (wall), ms; each rank stamps and exits at once",
      ...notes.map((note) => `note: ${note}`),
      "",
      "| N | contender | runs | latency median | latency p90 | first rank median | wall median | wall p90 |",
      "|---|---|---|---|---|---|---|---|"
    ]
    for (const n of SIZES) {
      for (const contender of contenders) {
        if (!runsAt(contender, n)) continue
        const runs = get(contender.name, n)
        if (runs.length === 0) {
          lines.push(`| ${n} | ${contender.name} | 0 | – | – | – | – | – |`)
          continue
        }
        const latency = present(runs.map((run) => run.latency))
        const wall = runs.map((run) => run.wall)
        lines.push(
          `| ${n} | ${contender.name} | ${runs.length} | ${ms(medianOf(latency))} | ${ms(latency.length === 0 ? undefined : percentile(latency, 0.9))} | ` +
            `${ms(medianOf(runs.map((run) => run.first)))} | ${ms(median(wall))} | ${ms(percentile(wall, 0.9))} |`
        )
      }
    }

    const cohortJobs = contenders.filter((contender) => contender.isCohort)
    lines.push(
      "",
      "cohort's phases, medians, ms since spawn (the moment its stderr line reached the benchmark):",
      "",
      "| N | job | listening | agent joined | world formed | cohort formed (every rank started) | last rank runs user code | launcher exited | entry rank: process start → user code (slowest) |",
      "|---|---|---|---|---|---|---|---|---|"
    )
    for (const n of SIZES) {
      for (const contender of cohortJobs) {
        if (!runsAt(contender, n)) continue
        const runs = get(contender.name, n)
        const phase = (name: Phase) => ms(medianOf(runs.map((run) => run.phases[name])))
        lines.push(
          `| ${n} | ${contender.name.replace("cohort ", "")} | ${phase("listening")} | ${phase("agent joined")} | ${phase("world formed")} | ${phase("cohort formed")} | ` +
            `${ms(medianOf(runs.map((run) => run.latency)))} | ${ms(medianOf(runs.map((run) => run.wall)))} | ` +
            `${ms(medianOf(runs.map((run) => run.rankBoot)))} |`
        )
      }
    }

    const rankPeaks = SIZES.flatMap((n) => get("cohort entry", n).map((run) => run.rankPeakKb))
    lines.push(
      "",
      "peak RSS, MiB (VmHWM; one memory run per launcher and N):",
      "",
      "| N | launcher | launcher and its reaped children (GNU time %M) | launcher's own |",
      "|---|---|---|---|"
    )
    for (const n of MEMORY_SIZES) {
      for (const contender of memoryContenders) {
        const sample = memory.get(key(contender.name, n))
        lines.push(`| ${n} | ${contender.name} | ${mib(sample?.treePeakKb)} | ${contender.isCohort ? mib(sample?.ownPeakKb) : "(same)"} |`)
      }
    }
    lines.push("", `an entry rank's peak RSS when user code starts: ${mib(medianOf(rankPeaks))} MiB (median over every timed run, largest rank of each)`)

    const at = (name: string, measure: "latency" | "wall") => medianOf(get(name, TARGET_N).map((run) => run[measure]))
    // Issue 25's, on whole-process (wall) time, then the earlier ones on latency.
    const targets: Array<[string, string, number, "latency" | "wall"]> = [
      ["cohort command /bin/true", "mpirun /bin/true", 2, "wall"],
      ["cohort command", "mpirun", 2, "wall"],
      ["cohort entry", "mpirun", 2.5, "wall"],
      ["cohort command", "mpirun", 1, "latency"],
      ["cohort entry", "mpirun", 2, "latency"],
      ["cohort command", "torchrun", 0.25, "latency"],
      ["cohort entry", "torchrun", 0.25, "latency"]
    ]
    lines.push("", `targets at N=${TARGET_N}, on medians:`)
    for (const [ours, theirs, limit, measure] of targets) {
      const a = at(ours, measure)
      const b = at(theirs, measure)
      if (a === undefined || b === undefined) {
        lines.push(`- ${measure}: ${ours} / ${theirs} ≤ ${limit}: not measured (${a === undefined ? ours : theirs} has no runs)`)
        continue
      }
      const ratio = a / b
      lines.push(
        `- ${measure}: ${ours} / ${theirs} = ${a.toFixed(0)} / ${b.toFixed(0)} = ${ratio.toFixed(2)}, target ≤ ${limit}: ` +
          (ratio <= limit ? "met" : `MISSED by ${(a - limit * b).toFixed(0)} ms (${(ratio / limit).toFixed(2)}× the allowance)`)
      )
    }
    if (failures.length > 0) lines.push("", `${failures.length} run(s) failed and are left out of the figures:`, ...failures.map((failure) => `- ${failure}`))
    lines.push(
      "",
      `(${((now() - started) / 1000).toFixed(0)} s in all; BENCH_RUNS=${RUNS}, torchrun runs=${TORCHRUN_RUNS}; ` +
        `1-minute load average ${loadBefore.toFixed(1)} before, ${loadavg()[0]!.toFixed(1)} after, on ${navigator.hardwareConcurrency} cores)`
    )
    return lines.join("\n")
  } finally {
    rmSync(scratch, { recursive: true, force: true })
  }
}

if (import.meta.main) console.log(await launchLatency())
