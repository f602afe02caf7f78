/**
 * Recovery: the example job (examples/train.ts, 4 ranks) with a rank SIGKILLed at fixed moments of wall
 * time, under three policies, side by side in one process, round after round:
 *  - `elastic`: the survivors take the dead ranks' samples and carry on;
 *  - `restart`: each killed rank comes back (under a new number, at the next epoch boundary);
 *  - `group restart`: torchrun's model, kill every rank and start the whole job again from its last
 *    checkpoint (`after_formation: kill_all`, then the same launch with `resume`), until it completes.
 * And the same job with no kill, the baseline. Reported per policy: the median wall time to finish the
 * job, its ratio to the baseline's (the goodput: 1.0 is no loss), the deaths, cohort's median time to
 * detect and to recover from one (RecoveryFigures), and cohort's effective training ratio (none for the
 * group restart: its loss is work done again from the checkpoint, which only the wall time shows).
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { effectiveTrainingAt, type RunState } from "../src/launcher/view/RunView.ts"
import * as RecoveryFigures from "../src/launcher/view/RecoveryFigures.ts"
import { launch } from "../src/index.ts"
import { median } from "./stats.ts"

const RUNS = Number(process.env.BENCH_RUNS ?? 2)
const RANKS = 4
const DATASET = 1_000_000
const EPOCHS = 4
/** When a rank is killed, in ms of the job's wall time (across relaunches). */
const KILLS_AT = [3_000, 6_000, 9_000]
const root = resolve(import.meta.dir, "..")

type Policy = "none" | "elastic" | "restart" | "group restart"

const policyOf = (policy: Policy) =>
  policy === "restart"
    ? { after_formation: { restart: { max_restarts: 10, within: "10m", backoff: { initial: "0ms", max: "0ms", jitter: 0 } } }, grace: "2s" }
    : policy === "group restart"
    ? { after_formation: "kill_all", grace: "2s" }
    : { after_formation: "elastic", grace: "2s" }

interface Outcome {
  readonly wallMs: number
  readonly deaths: number
  readonly detect: ReadonlyArray<number>
  readonly recover: ReadonlyArray<number>
  /** cohort's ETTR; none for the group restart. */
  readonly ettr: number | undefined
}

/** One job to its end under `policy`, with the kills on the job's own clock. */
const job = async (policy: Policy): Promise<Outcome> => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-bench-recovery-"))
  const config = {
    name: "bench-recovery",
    workers: [{ host: "localhost", devices: RANKS, path: root, env: { OMP_NUM_THREADS: "1" } }],
    job: { entry: "examples/train.ts", dataset_size: DATASET, epochs: EPOCHS, checkpoint: join(dir, "checkpoint.json") },
    failure_policy: policyOf(policy)
  }
  const start = performance.now()
  const kills = policy === "none" ? [] : [...KILLS_AT]
  let state: RunState | undefined
  // Set by \`onEvent\`, which the compiler does not see run during \`await launch\`: read through a function, the
  // type stays what it is. The state is the launcher's own object, in this process, never text: nothing to decode.
  const latest = (): RunState | undefined => state
  let deaths = 0
  const detect: Array<number> = []
  const recover: Array<number> = []
  let ettr: number | undefined
  const killer = setInterval(() => {
    if (kills.length === 0 || performance.now() - start < kills[0]! || state?.phase !== "training") return
    const victim = state.ranks.find((rank) => rank.state === "running" && rank.pid !== null)
    if (victim?.pid === undefined || victim.pid === null) return
    kills.shift()
    try {
      process.kill(victim.pid, "SIGKILL")
    } catch {
      // Gone already: the next moment kills another.
    }
  }, 20)
  try {
    for (let attempt = 0; ; attempt++) {
      const result = await launch(config, {
        // From the last checkpoint when there is one, else from the start, as a relaunched torchrun job does.
        resume: attempt > 0 && existsSync(config.job.checkpoint),
        output: () => {},
        logLine: () => {},
        onEvent: (_, next) => void (state = next)
      })
      const last = latest()
      const figures = RecoveryFigures.times(last?.recovery ?? RecoveryFigures.empty)
      detect.push(...figures.detect)
      recover.push(...figures.recover)
      deaths += last?.recovery?.deaths.length ?? 0
      if (last !== undefined && policy !== "group restart") {
        ettr = effectiveTrainingAt(last)
      }
      state = undefined
      if (result.outcome === "completed" || result.outcome === "degraded") break
      if (policy !== "group restart" || attempt > 10) throw new Error(`${policy}: the job ended ${result.outcome}: ${result.summary}`)
      // The group model's death is the whole run's: counted once per relaunch.
      deaths += 1
    }
  } finally {
    clearInterval(killer)
    rmSync(dir, { recursive: true, force: true })
  }
  const wallMs = performance.now() - start
  return { wallMs, deaths, detect, recover, ettr }
}

export const recovery = async (): Promise<string> => {
  const policies: ReadonlyArray<Policy> = ["none", "elastic", "restart", "group restart"]
  const outcomes = new Map<Policy, Array<Outcome>>(policies.map((policy) => [policy, []]))
  for (let round = 0; round < RUNS; round++) {
    for (const policy of policies) outcomes.get(policy)!.push(await job(policy))
  }
  const baseline = median(outcomes.get("none")!.map((outcome) => outcome.wallMs))
  const ms = (values: ReadonlyArray<number>) => (values.length === 0 ? "–" : `${Math.round(median(values))} ms`)
  const rows = policies.map((policy) => {
    const runs = outcomes.get(policy)!
    const wall = median(runs.map((run) => run.wallMs))
    const ettrs = runs.flatMap((run) => (run.ettr === undefined ? [] : [run.ettr]))
    return `| ${policy} | ${(wall / 1000).toFixed(1)} s | ${(baseline / wall).toFixed(2)} | ${median(runs.map((run) => run.deaths))} | ` +
      `${ms(runs.flatMap((run) => run.detect))} | ${ms(runs.flatMap((run) => run.recover))} | ${ettrs.length === 0 ? "–" : `${(median(ettrs) * 100).toFixed(1)}%`} |`
  })
  return [
    `recovery: examples/train.ts, ${RANKS} ranks, ${DATASET.toLocaleString("en-US")} samples × ${EPOCHS} epochs, a rank SIGKILLed at ${KILLS_AT.map((at) => at / 1000).join(", ")} s; ${RUNS} round(s), medians`,
    "| policy | wall time | goodput (baseline ÷ wall) | deaths | detect | recover | effective training |",
    "|---|---:|---:|---:|---:|---:|---:|",
    ...rows
  ].join("\n")
}

if (import.meta.main) console.log(await recovery())
