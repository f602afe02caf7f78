/**
 * Growth: a host joining a cohort that is already training.
 *
 * Each run launches the training example (traced: every rank appends each
 * reported batch, with the time, to `r<rank>.jsonl`) on 2 CPU ranks of this
 * host with `after_formation: accept`, and once epoch 2 has ended starts a
 * third rank's agent by hand (`bun run agent`, host `late`). Measured, per run:
 *  - dial → admitted: the agent's start to the launcher's `host_joined` event
 *    (Bun start-up, the dial and the handshake);
 *  - admitted → entered: to the `ranks_entered` event (the rank's own start,
 *    then the wait for the next epoch boundary: up to an epoch);
 *  - entered → first step: to the newcomer's first reported batch, which
 *    comes after its first averaged gradient (welcome, consensus weights, one
 *    step with everyone);
 *  - the existing ranks' dip: rank 0's first step of the entry epoch against
 *    its first step of the other epochs after growth (each includes the
 *    epoch-end average, the evaluation and the checkpoint), in steps of its
 *    median step after growth. Target: at most one step lost.
 * Step times before and after growth are quoted too: after it, every round
 * crosses the controller instead of finishing in the host's relay.
 *
 * Two step sizes: the example as it is (a step of a few milliseconds of CPU),
 * and with 20 ms added to every step (`delay=20`, a sleep: a step whose time
 * is spent on a device, as on a GPU), where "one step" means something.
 *
 * `GROWTH_RUNS` (default 3) runs of each, one after the other.
 */
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { readEvents } from "../test/support/run-records.ts"
import { median } from "./stats.ts"

const RUNS = Number(process.env.GROWTH_RUNS ?? 3)
const EPOCHS = 8
const root = resolve(import.meta.dir, "..")

interface Trace {
  readonly epoch: number
  readonly at: number
}

const readTrace = (dir: string, rank: number): Array<Trace> =>
  readFileSync(join(dir, `r${rank}.jsonl`), "utf8").trim().split("\n").map((line) => JSON.parse(line) as Trace)

const lines = (stream: ReadableStream<Uint8Array>, into: Array<string>) =>
  (async () => {
    const decoder = new TextDecoder()
    let rest = ""
    for await (const bytes of stream) {
      const parts = (rest + decoder.decode(bytes, { stream: true })).split("\n")
      rest = parts.pop()!
      into.push(...parts)
    }
  })()

const until = async (check: () => boolean, what: string, timeoutMs = 60_000) => {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`growth bench: timed out waiting for ${what}`)
    await Bun.sleep(5)
  }
}

interface RunFigures {
  readonly dialToAdmittedMs: number
  readonly admittedToEnteredMs: number
  readonly enteredToFirstStepMs: number
  readonly entryEpoch: number
  readonly stepBeforeMs: number
  readonly stepAfterMs: number
  readonly entryFirstStepMs: number
  readonly otherFirstStepMs: number
  readonly lostSteps: number
}

const once = async (delayMs: number, dataset: number): Promise<RunFigures> => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-bench-growth-"))
  try {
    const file = join(dir, "cluster.yml")
    const events = join(dir, "events.jsonl")
    writeFileSync(file, `
name: bench-growth
controller: { host: 127.0.0.1, join: { min_ranks: 2, target_ranks: 2, after_formation: accept } }
workers:
  - { host: localhost, devices: 2, path: ${root}, env: { OMP_NUM_THREADS: "1" } }
  - { host: late, devices: 1, agent: self, path: ${root}, env: { OMP_NUM_THREADS: "1" } }
job:
  entry: test/fixtures/traced-train-fixture.ts
  args: ["trace=${dir}", "batch=64", "delay=${delayMs}"]
  dataset_size: ${dataset}
  epochs: ${EPOCHS}
  checkpoint: ${join(dir, "checkpoint.json")}
failure_policy: { after_formation: elastic, grace: 2s, heartbeat_timeout: 10s }
`)
    const stderr: Array<string> = []
    const launcher = Bun.spawn([process.execPath, "src/cli/launch.ts", file, "--events", events, "--quiet"], { cwd: root, stdout: "ignore", stderr: "pipe" })
    const reading = lines(launcher.stderr, stderr)
    await until(() => stderr.some((line) => /listening on/.test(line)), "the launcher to listen")
    const port = Number(/listening on [\d.]+:(\d+)/.exec(stderr.find((line) => /listening on/.test(line))!)![1])
    await until(() => stderr.some((line) => /epoch 2\/\d+ done/.test(line)), "epoch 2 to end")
    const salt = join(root, ".cohort", "salts", `${launcher.pid}-late.salt`)
    if (!existsSync(salt)) throw new Error(`growth bench: no salt file at ${salt}`)
    copyFileSync(salt, join(dir, "late.salt"))
    const dialAt = Date.now()
    const agent = Bun.spawn(
      [process.execPath, "src/cli/agent.ts", "--controller", `127.0.0.1:${port}`, "--host", "late", "--devices", "1", "--salt-file", join(dir, "late.salt")],
      { cwd: root, stdout: "ignore", stderr: "ignore" }
    )
    const code = await launcher.exited
    await reading
    await agent.exited
    if (code !== 0) throw new Error(`growth bench: the run exited with ${code}:\n${stderr.slice(-10).join("\n")}`)

    const recorded = readEvents(events)
    const joined = recorded.find((event) => event.event === "host_joined" && event.host === "late")!
    const entered = recorded.find((event) => event.event === "ranks_entered")
    if (entered === undefined || entered.event !== "ranks_entered") throw new Error("growth bench: rank 2 never entered")
    const late = readTrace(dir, 2)
    const first = readTrace(dir, 0)
    // Rank 0's step times per epoch: gaps between its reported batches; an epoch's first gap spans the boundary.
    const steps = new Map<number, Array<number>>()
    const firstSteps = new Map<number, number>()
    first.forEach((trace, i) => {
      if (i === 0) return
      const gap = trace.at - first[i - 1]!.at
      if (trace.epoch !== first[i - 1]!.epoch) firstSteps.set(trace.epoch, gap)
      else steps.set(trace.epoch, [...(steps.get(trace.epoch) ?? []), gap])
    })
    const before = [...steps].filter(([epoch]) => epoch < entered.epoch).flatMap(([, gaps]) => gaps)
    const after = [...steps].filter(([epoch]) => epoch >= entered.epoch).flatMap(([, gaps]) => gaps)
    const others = [...firstSteps].filter(([epoch]) => epoch > entered.epoch).map(([, gap]) => gap)
    const stepAfterMs = median(after)
    const entryFirstStepMs = firstSteps.get(entered.epoch)!
    const otherFirstStepMs = median(others)
    return {
      dialToAdmittedMs: joined.at - dialAt,
      admittedToEnteredMs: entered.at - joined.at,
      enteredToFirstStepMs: late[0]!.at - entered.at,
      entryEpoch: entered.epoch,
      stepBeforeMs: median(before),
      stepAfterMs,
      entryFirstStepMs,
      otherFirstStepMs,
      lostSteps: (entryFirstStepMs - otherFirstStepMs) / stepAfterMs
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

const table = async (delayMs: number, dataset: number): Promise<string> => {
  const runs: Array<RunFigures> = []
  for (let i = 0; i < RUNS; i++) runs.push(await once(delayMs, dataset))
  const row = (name: string, pick: (run: RunFigures) => number, digits = 0) =>
    `| ${name} | ${runs.map((run) => pick(run).toFixed(digits)).join(" / ")} | ${median(runs.map(pick)).toFixed(digits)} |`
  return [
    `growth: 2 CPU ranks of examples/train.ts (traced${delayMs > 0 ? `, ${delayMs} ms added to every step` : ""}), a third rank's agent started after epoch 2 of ${EPOCHS}, ${dataset} samples, batch 64; ${RUNS} run(s)`,
    "",
    "| | runs | median |",
    "|---|---|---|",
    row("entry epoch", (run) => run.entryEpoch),
    row("dial → admitted, ms", (run) => run.dialToAdmittedMs),
    row("admitted → entered (waits for the boundary), ms", (run) => run.admittedToEnteredMs),
    row("entered → newcomer's first averaged step, ms", (run) => run.enteredToFirstStepMs),
    row("rank 0 step before growth (relay alone), ms", (run) => run.stepBeforeMs, 1),
    row("rank 0 step after growth (through the controller), ms", (run) => run.stepAfterMs, 1),
    row("rank 0 first step of the entry epoch, ms", (run) => run.entryFirstStepMs),
    row("rank 0 first step of later epochs (median), ms", (run) => run.otherFirstStepMs),
    row("existing ranks' loss at the boundary, steps", (run) => run.lostSteps, 2)
  ].join("\n")
}

// With 20 ms steps the epochs are smaller: the same number of boundaries in a tenth of the time.
export const growth = async (): Promise<string> => `${await table(0, 50_000)}\n\n${await table(20, 10_000)}`

if (import.meta.main) console.log(await growth())
