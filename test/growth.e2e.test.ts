/**
 * Elastic growth end to end, on this host, through the real CLI: a 2-rank
 * run of the training example (traced, see traced-train-fixture.ts) with
 * `after_formation: accept`, and a third rank's agent started by hand
 * (`bun run agent --controller …`) once the run is training. It is admitted
 * as rank 2, enters at an epoch boundary from the consensus weights, takes
 * work from that epoch only, and the run ends with every sample of every
 * epoch processed once, equal weights everywhere and the example's accuracy.
 * A run without `accept` refuses the same agent.
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test"
import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fetchState, listeningPort as portOf, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { isGone, waitFor } from "./support/processes.ts"
import { readEvents } from "./support/run-records.ts"
import { traces } from "./support/traces.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))
const procs: Array<{ readonly kill: (signal?: number | NodeJS.Signals) => void }> = []
afterEach(() => procs.splice(0).forEach((proc) => proc.kill("SIGKILL")))

const DATASET = 30_000
const EPOCHS = 6

const setUp = (name: string, afterFormation: "accept" | "reject") => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-grow-"))
  dirs.push(dir)
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: ${name}
controller:
  host: 127.0.0.1
  join: { min_ranks: 2, target_ranks: 2, after_formation: ${afterFormation} }
workers:
  - { host: localhost, devices: 2, path: ${repoRoot}, env: { OMP_NUM_THREADS: "1" } }
  - { host: late, devices: 1, agent: self, path: ${repoRoot}, env: { OMP_NUM_THREADS: "1" } }
job:
  entry: test/fixtures/traced-train-fixture.ts
  args: ["trace=${dir}", "delay=4"]
  dataset_size: ${DATASET}
  epochs: ${EPOCHS}
  checkpoint: ${join(dir, "checkpoint.json")}
failure_policy:
  after_formation: elastic
  grace: 2s
  heartbeat_timeout: 10s
`)
  return { dir, file, events: join(dir, "events.jsonl") }
}

/** The hand-started agent of host `late`, with the salt the launcher left for it (copied: it goes with the run). */
const startLateAgent = (dir: string, port: number, launcherPid: number) => {
  const salt = join(repoRoot, ".cohort", "salts", `${launcherPid}.salt`)
  if (!existsSync(salt)) throw new Error(`the launcher left no salt file at ${salt}`)
  const copy = join(dir, "late.salt")
  copyFileSync(salt, copy)
  const lines: Array<string> = []
  const proc = Bun.spawn(
    [process.execPath, "src/cli/agent.ts", "--controller", `127.0.0.1:${port}`, "--host", "late", "--devices", "1", "--salt-file", copy],
    { cwd: repoRoot, stdout: "pipe", stderr: "pipe" }
  )
  procs.push(proc)
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    let rest = ""
    const decoder = new TextDecoder()
    for await (const bytes of stream) {
      const parts = (rest + decoder.decode(bytes, { stream: true })).split("\n")
      rest = parts.pop()!
      lines.push(...parts)
    }
    if (rest !== "") lines.push(rest)
  }
  const done = Promise.all([collect(proc.stdout), collect(proc.stderr)])
  return { proc, lines, done }
}

describe("elastic growth", () => {
  test("a third rank's agent started by hand mid-run joins at the next epoch from the consensus weights; coverage, weights and accuracy hold", async () => {
    const { dir, events, file } = setUp("grow", "accept")
    const launch = spawnLaunch(file, {}, ["--events", events])
    procs.push(launch.proc)
    const port = await portOf(launch.stderr.lines)
    await waitFor(() => launch.stderr.lines.some((line) => /epoch 1\/\d+ done/.test(line)), "epoch 1 to end", 30_000)
    const late = startLateAgent(dir, port, launch.proc.pid)
    await waitFor(() => launch.stderr.lines.some((line) => /rank\(s\) 2 enter the cohort at epoch \d+/.test(line)), "rank 2 to enter", 30_000)
    const state = await fetchState(port)
    expect(state?.world).toBe(3)
    expect(state?.joinedAfterFormation).toBe(1)

    const code = await launch.proc.exited
    await launch.stdout.done
    await late.done
    const stderr = launch.stderr.lines
    expect(code).toBe(0)
    expect(stderr.at(-1)).toBe("cohort: run completed")
    expect(stderr).toContain("cohort: late joined with ranks 2 (after formation)")
    const entry = Number(/enter the cohort at epoch (\d+)/.exec(stderr.find((line) => /enter the cohort at epoch/.test(line))!)![1])
    expect(entry).toBeGreaterThanOrEqual(2)
    expect(entry).toBeLessThanOrEqual(EPOCHS)
    // It started from the consensus of the epoch before its first, never from scratch.
    // The hand-started agent's rank lines are forwarded to the launcher, like every host's.
    expect(launch.stdout.lines.some((line) => line.startsWith(`[late:cpu:r2] resumed from the checkpoint of epoch ${entry - 1} `))).toBe(true)

    // Every sample of every epoch once; rank 2 only from its entry on, and a share of every epoch from then.
    const seen = traces(dir)
    expect([...seen.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: EPOCHS }, (_, i) => i + 1))
    for (const [epoch, samples] of seen) {
      expect(samples.size).toBe(DATASET)
      expect([...samples.values()].filter((ranks) => ranks.length !== 1)).toEqual([])
      const byLate = [...samples.values()].filter((ranks) => ranks[0] === 2).length
      if (epoch < entry) expect({ epoch, byLate }).toEqual({ epoch, byLate: 0 })
      else expect(byLate).toBeGreaterThan(DATASET / 4)
    }

    // The same weights everywhere, and the example's accuracy.
    const checksums = launch.stdout.lines.flatMap((line) => /final weights checksum (\w+)/.exec(line)?.[1] ?? [])
    expect(checksums).toHaveLength(3)
    expect(new Set(checksums).size).toBe(1)
    const accuracy = Number(/accuracy ([\d.]+)%/.exec(launch.stdout.lines.filter((line) => line.startsWith("[late:") && line.includes("] epoch ")).at(-1) ?? "")?.[1])
    expect(accuracy).toBeGreaterThanOrEqual(95)

    // The events file tells the growth, and the page's world over time.
    const recorded = readEvents(events)
    expect(recorded.find((event) => event.event === "world_grew")).toMatchObject({ world: 3, host: "late", ranks: [2], devices: ["cpu"], labels: ["cpu"] })
    expect(recorded.find((event) => event.event === "ranks_entered")).toMatchObject({ ranks: [2], epoch: entry })
    expect(late.proc.exitCode).toBe(0)
    expect(isGone(late.proc.pid)).toBe(true)
  }, 90_000)

  test("without after_formation: accept, a late agent is refused, saying why, and the run is not disturbed", async () => {
    const { dir, file } = setUp("nogrow", "reject")
    const launch = spawnLaunch(file)
    procs.push(launch.proc)
    const port = await portOf(launch.stderr.lines)
    await waitFor(() => launch.stderr.lines.some((line) => /epoch 1\/\d+ done/.test(line)), "epoch 1 to end", 30_000)
    const late = startLateAgent(dir, port, launch.proc.pid)
    expect(await late.proc.exited).toBe(2)
    await late.done
    expect(late.lines.join("\n")).toContain("the cohort has already formed (this run does not grow: controller.join.after_formation is reject)")
    expect(await launch.proc.exited).toBe(0)
    expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
  }, 90_000)
})
