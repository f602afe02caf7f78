/**
 * PyTorch ranks: cohort's in-process re-form against torchrun's restart of the whole group, for the same
 * training and the same death. examples/torch_elastic.py's MLP on spirals (30,000 samples an epoch, 4 epochs, 64
 * samples per rank per step, Adam, 4 CPU ranks over gloo), rank 2 SIGKILLing itself right after its step 150
 * (epoch 1 is 118 steps a rank, so this is inside epoch 2):
 *  - `cohort`: `bun run launch` of bench/torch_recovery_cohort.py (the example, unchanged, with a step clock),
 *    `after_formation: elastic`: the survivors re-form torch.distributed's group in-process and take the dead
 *    rank's samples;
 *  - `torchrun`: torch 1.13's torchrun (`--standalone --nproc_per_node 4 --max_restarts 3`, through
 *    bench/launch-torchrun.py, which only mends Debian 12's start-up bug) of bench/torch_recovery_torchrun.py, the
 *    same training as plain DDP with a checkpoint after each epoch: torchrun ends the survivors and starts all 4
 *    again from the last checkpoint, so epoch 2's first 32 steps are done again. Once with its default
 *    `--monitor_interval` (5 s, how often its agent looks at the workers) and once with 0.1 s, so that the
 *    polling is not all the difference;
 * and each without the kill, the baselines. Contenders interleave round after round.
 *
 * Each rank appends "<pid> <step> <epoch> <time>" per counted step to a file of its own. The kill is the dying
 * rank's last stamp; training has resumed at the first later stamp of a step that is not the one the dying rank
 * had just finished with the others (a step numbered past the kill's, or any step of a process started after it).
 * Per contender: the median time from the kill to that resumption, the wall time from spawning the launcher to its
 * exit, the samples learnt (every step's samples, as the example's --record writes them: work done twice counts
 * twice), and the job's 120,000 samples ÷ wall. A run counts only when it ended as it should (the cohort runs with
 * the kill DEGRADED, the others completed, exit 0), the held-out accuracy reached 0.95, with the kill rank 2
 * died at its step 150, cohort's ranks each stepped in one process and learnt the job's 120,000 samples in all, no
 * more, and torchrun's, with the kill, ran in two generations of processes; the others are shown with why, and left out of the
 * medians.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { median } from "./stats.ts"

const RUNS = Number(process.env.BENCH_RUNS ?? 3)
/** BENCH_ONLY=cohort runs only the contenders whose name starts so (an A/B of two checkouts' cohort, run in each). */
const ONLY = process.env.BENCH_ONLY
const PYTHON = "/usr/bin/python3"
const RANKS = 4
/** examples/torch_elastic.py's sizes (its TRAIN and the epochs of examples/torch.yml), written here again. */
const DATASET = 30_000
const EPOCHS = 4
const DYING = 2
const DIE_STEP = 150
/** Far above a run's 15–40 s: only a hung run meets it. */
const RUN_TIMEOUT_MS = 240_000
const root = resolve(import.meta.dir, "..")

interface Contender {
  readonly name: string
  readonly launcher: "cohort" | "torchrun"
  readonly kill: boolean
  /** torchrun's --monitor_interval, in seconds; undefined: its default (5 s). */
  readonly monitor?: number
  /** cohort's ranks wrap the model with ctx.ddp (torch's DDP, its buckets reduced over the current members). */
  readonly ddp?: boolean
}

const contenders: ReadonlyArray<Contender> = [
  { name: "cohort, elastic re-form", launcher: "cohort", kill: true },
  { name: "torchrun, group restart", launcher: "torchrun", kill: true },
  { name: "torchrun, group restart, --monitor_interval 0.1", launcher: "torchrun", kill: true, monitor: 0.1 },
  { name: "cohort, no kill", launcher: "cohort", kill: false },
  { name: "torchrun, no kill", launcher: "torchrun", kill: false },
  { name: "torchrun, no kill, --monitor_interval 0.1", launcher: "torchrun", kill: false, monitor: 0.1 },
  { name: "cohort ctx.ddp, elastic re-form", launcher: "cohort", kill: true, ddp: true },
  { name: "cohort ctx.ddp, no kill", launcher: "cohort", kill: false, ddp: true }
]

interface Outcome {
  readonly wallMs: number
  /** From the dying rank's last step to the next step that counts; undefined without a kill. */
  readonly resumeMs: number | undefined
  readonly samplesLearnt: number
  readonly accuracy: number | undefined
  /** How it ended: cohort's last line, or torchrun's exit status. */
  readonly ending: string
  /** Why the run does not count; empty when it does. */
  readonly problems: ReadonlyArray<string>
}

interface Stamp {
  readonly rank: number
  readonly pid: number
  readonly step: number
  readonly time: number
}

const readStamps = (dir: string): Array<Stamp> =>
  readdirSync(dir).flatMap((name) => {
    const rank = Number(/^r(\d+)-\d+\.txt$/.exec(name)?.[1])
    if (Number.isNaN(rank)) return []
    return readFileSync(join(dir, name), "utf8").trim().split("\n").filter(Boolean).map((line) => {
      const [pid, step, , time] = line.split(" ").map(Number)
      return { rank, pid: pid!, step: step!, time: time! }
    })
  })

/** The kill's moment and the resumption's, from the stamps; a problem when the kill did not happen as planned. */
const resumption = (stamps: ReadonlyArray<Stamp>): { resumeMs?: number; problem?: string } => {
  const dying = stamps.filter((stamp) => stamp.rank === DYING)
  // The earliest: a group torchrun restarted from epoch 1's checkpoint reaches step 150 again, and lives on.
  const killedAt = dying.filter((stamp) => stamp.step === DIE_STEP).sort((a, b) => a.time - b.time)[0]
  if (killedAt === undefined) return { problem: `rank ${DYING} never stamped its step ${DIE_STEP}` }
  if (dying.some((stamp) => stamp.pid === killedAt.pid && stamp.step > DIE_STEP)) return { problem: `rank ${DYING} went on past its step ${DIE_STEP}` }
  // The processes that were training when the kill came: their stamps of steps up to the kill's are the
  // collective the dying rank had just finished, not training after it.
  const before = new Set(stamps.filter((stamp) => stamp.time <= killedAt.time).map((stamp) => stamp.pid))
  const after = stamps.filter((stamp) => stamp.time > killedAt.time && (!before.has(stamp.pid) || stamp.step > DIE_STEP))
  if (after.length === 0) return { problem: "no step after the kill" }
  return { resumeMs: (Math.min(...after.map((stamp) => stamp.time)) - killedAt.time) * 1000 }
}

/** Every step's samples, from the record files ("<epoch> <pid> <sample>..." a line). */
const samplesIn = (dir: string): number =>
  readdirSync(dir).reduce((sum, name) =>
    sum + readFileSync(join(dir, name), "utf8").split("\n").reduce((n, line) => n + Math.max(0, line.trim().split(" ").length - 2), 0), 0)

const run = async (contender: Contender): Promise<Outcome> => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-bench-torch-recovery-"))
  const stamps = join(dir, "stamps")
  const records = join(dir, "records")
  mkdirSync(stamps)
  mkdirSync(records)
  const checkpoint = join(dir, contender.launcher === "cohort" ? "checkpoint.json" : "checkpoint.pt")
  const death: Record<string, string> = contender.kill ? { BENCH_DIE_RANK: String(DYING), BENCH_DIE_STEP: String(DIE_STEP) } : {}
  let cmd: Array<string>
  let env: Record<string, string | undefined> = process.env
  if (contender.launcher === "cohort") {
    const file = join(dir, "torch.yml")
    const workerEnv = { OMP_NUM_THREADS: "1", GLOO_SOCKET_IFNAME: "lo", BENCH_STAMPS: stamps, ...death }
    writeFileSync(
      file,
      `name: bench-torch-recovery
controller: { host: 127.0.0.1, port: 0 }
workers:
  - host: localhost
    devices: ${RANKS}
    path: ${JSON.stringify(root)}
    env: ${JSON.stringify(workerEnv)}
job:
  command: [${PYTHON}, ${JSON.stringify(join(root, "bench", "torch_recovery_cohort.py"))}]
  args: [--record, ${JSON.stringify(records)}${contender.ddp === true ? ", --ddp" : ""}]
  dataset_size: ${DATASET}
  epochs: ${EPOCHS}
  checkpoint: ${JSON.stringify(checkpoint)}
failure_policy:
  before_formation: kill_all
  after_formation: elastic
  grace: 5s
`
    )
    cmd = [process.execPath, "run", "launch", file]
  } else {
    const monitor = contender.monitor === undefined ? [] : ["--monitor_interval", String(contender.monitor)]
    cmd = [PYTHON, join(root, "bench", "launch-torchrun.py"), "--standalone", "--nproc_per_node", String(RANKS), "--max_restarts", "3", ...monitor,
      join(root, "bench", "torch_recovery_torchrun.py"), checkpoint, records]
    env = { ...process.env, OMP_NUM_THREADS: "1", GLOO_SOCKET_IFNAME: "lo", BENCH_STAMPS: stamps, ...death }
  }
  try {
    const start = performance.now()
    // setsid: the launcher leads a process group of its own, so a hung run is ended with every process it started.
    const proc = Bun.spawn(["setsid", ...cmd], { cwd: root, env, stdin: "ignore", stdout: "pipe", stderr: "pipe" })
    const timer = setTimeout(() => {
      try {
        process.kill(-proc.pid, "SIGKILL")
      } catch {
        // Already gone.
      }
    }, RUN_TIMEOUT_MS)
    const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
    const wallMs = performance.now() - start
    clearTimeout(timer)

    const problems: Array<string> = []
    const reached = /held-out accuracy ([\d.]+) reached the target/.exec(stdout)
    if (reached === null) problems.push("the held-out accuracy did not reach 0.95")
    let ending: string
    if (contender.launcher === "cohort") {
      ending = stderr.trim().split("\n").at(-1) ?? ""
      const wanted = contender.kill ? "cohort: run completed DEGRADED" : "cohort: run completed"
      if (contender.kill ? !ending.startsWith(wanted) : ending !== wanted) problems.push(`ended "${ending}", not "${wanted}…"`)
    } else {
      ending = `exit ${code}`
      if (code !== 0) problems.push(`torchrun ${ending}: ${stderr.trim().split("\n").at(-1)}`)
    }
    if (code !== 0 && contender.launcher === "cohort") problems.push(`exit ${code}`)
    let resumeMs: number | undefined
    const stamped = readStamps(stamps)
    if (contender.kill) {
      const found = resumption(stamped)
      if (found.problem !== undefined) problems.push(found.problem)
      resumeMs = found.resumeMs
    }
    // How each contender claims to recover, checked: cohort's survivors go on in the processes they started in,
    // while torchrun starts every rank again.
    const processes = new Set(stamped.map((stamp) => stamp.pid)).size
    const expected = contender.launcher === "torchrun" && contender.kill ? 2 * RANKS : RANKS
    if (processes !== expected) problems.push(`${processes} rank processes stamped steps, not ${expected}`)
    const samplesLearnt = samplesIn(records)
    // Elastic takes over the dead rank's samples without repeating any; a restart from a checkpoint repeats some.
    if (contender.launcher === "cohort" ? samplesLearnt !== DATASET * EPOCHS : samplesLearnt < DATASET * EPOCHS) {
      problems.push(`${samplesLearnt} samples learnt, against the job's ${DATASET * EPOCHS}`)
    }
    return { wallMs, resumeMs, samplesLearnt, accuracy: reached === null ? undefined : Number(reached[1]), ending, problems }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/** undefined when /usr/bin/python3 has torch and torchrun, else why this benchmark cannot run. */
const torchProblem = (): string | undefined => {
  if (!existsSync(PYTHON)) return `${PYTHON} does not exist`
  const ran = Bun.spawnSync([PYTHON, "-c", "import torch, torch.distributed.run"], { stdout: "ignore", stderr: "pipe" })
  return ran.exitCode === 0 ? undefined : `${PYTHON} cannot import torch: ${ran.stderr.toString().trim().split("\n").at(-1)}`
}

export const torchRecovery = async (): Promise<string> => {
  const problem = torchProblem()
  if (problem !== undefined) return `torch recovery: skipped (${problem}; on Debian: apt-get install python3-torch)`

  const outcomes = new Map<Contender, Array<Outcome>>(contenders.map((contender) => [contender, []]))
  const selected = contenders.filter((contender) => ONLY === undefined || contender.name.startsWith(ONLY))
  for (let round = 0; round < RUNS; round++) {
    for (const contender of selected) {
      const outcome = await run(contender)
      outcomes.get(contender)!.push(outcome)
      console.error(`torch recovery: round ${round + 1}/${RUNS}, ${contender.name}: ${(outcome.wallMs / 1000).toFixed(1)} s` +
        (outcome.resumeMs === undefined ? "" : `, resumed ${Math.round(outcome.resumeMs)} ms after the kill`) +
        (outcome.problems.length === 0 ? "" : `; DOES NOT COUNT: ${outcome.problems.join("; ")}`))
    }
  }

  const counted = (contender: Contender) => outcomes.get(contender)!.filter((outcome) => outcome.problems.length === 0)
  const medianOf = (contender: Contender, pick: (outcome: Outcome) => number | undefined) => {
    const values = counted(contender).flatMap((outcome) => {
      const value = pick(outcome)
      return value === undefined ? [] : [value]
    })
    return values.length === 0 ? undefined : median(values)
  }
  const spread = (contender: Contender, pick: (outcome: Outcome) => number | undefined, scale: number, digits: number) => {
    const values = counted(contender).flatMap((outcome) => {
      const value = pick(outcome)
      return value === undefined ? [] : [value / scale]
    })
    return values.length < 2 ? "" : ` (${Math.min(...values).toFixed(digits)}–${Math.max(...values).toFixed(digits)})`
  }
  const wall = (contender: Contender) => medianOf(contender, (outcome) => outcome.wallMs)
  const resume = (contender: Contender) => medianOf(contender, (outcome) => outcome.resumeMs)
  const fixed = (value: number | undefined, digits: number, unit = "") => (value === undefined ? "–" : `${value.toFixed(digits)}${unit}`)
  const rate = (contender: Contender) => {
    const ms = wall(contender)
    return ms === undefined ? undefined : (DATASET * EPOCHS) / (ms / 1000)
  }

  const rows = selected.map((contender) => {
    const all = outcomes.get(contender)!
    const endings = [...new Set(all.map((outcome) => outcome.ending.replace(/ \(.*\)$/, "")))].join(" / ")
    const resumeMs = resume(contender)
    const wallMs = wall(contender)
    return `| ${contender.name} | ${counted(contender).length}/${all.length} | ` +
      `${resumeMs === undefined ? "–" : `${Math.round(resumeMs)} ms${spread(contender, (outcome) => outcome.resumeMs, 1, 0)}`} | ` +
      `${wallMs === undefined ? "–" : `${(wallMs / 1000).toFixed(1)} s${spread(contender, (outcome) => outcome.wallMs, 1000, 1)}`} | ` +
      `${fixed(medianOf(contender, (outcome) => outcome.samplesLearnt), 0)} | ${fixed(rate(contender), 0)} | ` +
      `${fixed(medianOf(contender, (outcome) => outcome.accuracy), 4)} | ${endings} |`
  })

  const ratio = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? "–" : (a / b).toFixed(2))
  const [cohortKill, torchrunKill, torchrunFastKill, cohortNone, torchrunNone, torchrunFastNone, ddpKill, ddpNone] = contenders as [
    Contender, Contender, Contender, Contender, Contender, Contender, Contender, Contender
  ]
  const costOf = (kill: Contender, none: Contender) => {
    const [a, b] = [wall(kill), wall(none)]
    return a === undefined || b === undefined ? "–" : `${a >= b ? "+" : "−"}${(Math.abs(a - b) / 1000).toFixed(1)} s`
  }
  const ratios = [
    ["torchrun (default monitor)", torchrunKill, torchrunNone],
    ["torchrun --monitor_interval 0.1", torchrunFastKill, torchrunFastNone]
  ].map(([name, kill, none]) => {
    const [k, n] = [kill as Contender, none as Contender]
    return `| ${name as string} | ${ratio(resume(k), resume(cohortKill))} | ${ratio(wall(k), wall(cohortKill))} | ${ratio(rate(k), rate(cohortKill))} | ` +
      `${ratio(wall(n), wall(cohortNone))} | ${costOf(k, n)} (cohort: ${costOf(cohortKill, cohortNone)}) |`
  })

  const problems = contenders.flatMap((contender) =>
    outcomes.get(contender)!.flatMap((outcome, index) => (outcome.problems.length === 0 ? [] : [`- ${contender.name}, round ${index + 1}: ${outcome.problems.join("; ")}`]))
  )
  return [
    `torch recovery: examples/torch_elastic.py's training, ${RANKS} CPU ranks, ${DATASET.toLocaleString("en-US")} samples × ${EPOCHS} epochs, batch 64 a rank; ` +
    `rank ${DYING} SIGKILLs itself after its step ${DIE_STEP} (inside epoch 2); ${RUNS} round(s), medians of the runs that count (min–max)`,
    "| contender | runs that count | kill → training resumed | wall time | samples learnt | samples/s (120,000 ÷ wall) | held-out accuracy | ended |",
    "|---|---:|---:|---:|---:|---:|---:|---|",
    ...rows,
    "",
    "| torchrun ÷ cohort | kill → resumed | wall, with the kill | samples/s, with the kill | wall, no kill | the kill's cost: wall with it − without |",
    "|---|---:|---:|---:|---:|---|",
    ...ratios,
    "",
    "| cohort's DDP path ÷ | samples/s, no kill | samples/s, with the kill | kill → resumed | the kill's cost |",
    "|---|---:|---:|---:|---|",
    `| ÷ torchrun + DDP (default monitor) | ${ratio(rate(ddpNone), rate(torchrunNone))} | ${ratio(rate(ddpKill), rate(torchrunKill))} | ${ratio(resume(ddpKill), resume(torchrunKill))} | ${costOf(ddpKill, ddpNone)} (torchrun: ${costOf(torchrunKill, torchrunNone)}) |`,
    `| ÷ cohort's ctx.watch path | ${ratio(rate(ddpNone), rate(cohortNone))} | ${ratio(rate(ddpKill), rate(cohortKill))} | ${ratio(resume(ddpKill), resume(cohortKill))} | ${costOf(ddpKill, ddpNone)} (ctx.watch: ${costOf(cohortKill, cohortNone)}) |`,
    ...(problems.length === 0 ? [] : ["", "Runs that do not count:", ...problems])
  ].join("\n")
}

if (import.meta.main) console.log(await torchRecovery())
