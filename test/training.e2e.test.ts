/**
 * Elastic training end to end, through the real CLI: four rank processes of
 * examples/train.ts (traced, see traced-train-fixture.ts), a relay, the
 * coordinator and the status endpoint.
 * - A rank SIGKILLed mid-epoch (its pid read from the status endpoint)
 *   under `max_failure: 50%`: the run completes DEGRADED, the survivors reach
 *   the accuracy and agree on the weights, and every sample of every epoch
 *   was processed exactly once (the dead rank's one in-flight batch aside).
 * - Crossing `max_failure` mid-epoch: exit 1 with the consensus checkpoint
 *   written with the epoch's coverage, and `--resume` trains only the rest
 *   of that epoch, then the next ones: each sample once across both runs.
 * - The launcher SIGKILLed: every rank and the relay are gone.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fetchState, repoRoot, spawnLaunch, waitForPhase } from "./support/launch-scenario.ts"
import { childrenOf, isGone, processState, waitFor } from "./support/processes.ts"
import { batchesOf, traces } from "./support/traces.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const DATASET = 50_000

interface Extra {
  /** The workers section's entries; default: localhost with 4 ranks. */
  readonly workers?: ReadonlyArray<string>
  /** More lines under job:. */
  readonly job?: ReadonlyArray<string>
  readonly heartbeatTimeout?: string
}

const setUp = (name: string, policy: string, epochs: number, delay: number, extra: Extra = {}) => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-train-"))
  dirs.push(dir)
  const file = join(dir, "cluster.yml")
  const workers = extra.workers ?? ["{ host: localhost, devices: 4 }"]
  writeFileSync(file, `
name: ${name}
workers:
${workers.map((worker) => `  - ${worker.replace("}", `, path: ${repoRoot} }`)}`).join("\n")}
job:
${(extra.job ?? []).map((line) => `  ${line}\n`).join("")}  entry: test/fixtures/traced-train-fixture.ts
  args: ["trace=${dir}", "delay=${delay}"]
  dataset_size: ${DATASET}
  epochs: ${epochs}
  checkpoint: ${join(dir, "checkpoint.json")}
failure_policy:
  after_formation:
    elastic: { max_failure: ${policy} }
  grace: 2s
  heartbeat_timeout: ${extra.heartbeatTimeout ?? "5s"}
`)
  return { dir, file }
}

/** Wait until some line matches; the lines collected so far are searched as they grow. */
const waitForLine = (lines: ReadonlyArray<string>, pattern: RegExp, what: string, timeoutMs = 30_000) =>
  waitFor(() => lines.some((line) => pattern.test(line)), what, timeoutMs)

/** A rank's pid, as the status endpoint shows it. */
const rankPid = async (port: number, rank: number): Promise<number> => {
  const state = await fetchState(port)
  const pid = state?.ranks.find((entry) => entry.rank === rank)?.pid
  if (typeof pid !== "number") throw new Error(`the status endpoint shows no pid for rank ${rank}`)
  return pid
}

const portOf = async (lines: ReadonlyArray<string>): Promise<number> => {
  await waitForLine(lines, /listening on [\d.]+:\d+/, "the launcher to listen", 15_000)
  return Number(/listening on [\d.]+:(\d+)/.exec(lines.find((line) => /listening on/.test(line))!)![1])
}

const finalLines = (lines: ReadonlyArray<string>) => ({
  accuracies: lines.flatMap((line) => /epoch (\d+): loss [\d.]+ accuracy ([\d.]+)%/.exec(line) ?? []).length,
  checksums: lines.flatMap((line) => /final weights checksum (\w+)/.exec(line)?.[1] ?? []),
  lastAccuracy: (rank: number) => {
    const own = lines.filter((line) => line.includes(`:r${rank}] epoch `))
    const match = /accuracy ([\d.]+)%/.exec(own.at(-1) ?? "")
    return match === null ? Number.NaN : Number(match[1])
  }
})

describe("elastic training", () => {
  test("a rank SIGKILLed mid-epoch: DEGRADED, accurate, and every sample processed exactly once", async () => {
    const { dir, file } = setUp("elastic", "50%", 4, 8)
    const launch = spawnLaunch(file)
    const port = await portOf(launch.stderr.lines)
    await waitForPhase(port, "training", 20_000)
    // Mid-epoch 2: after epoch 1 has ended and rank 2 has done some of epoch 2.
    await waitForLine(launch.stderr.lines, /epoch 1\/4 done/, "epoch 1 to end")
    await waitFor(() => (traces(dir).get(2)?.size ?? 0) > 0, "epoch 2 to make progress", 20_000)
    const victim = await rankPid(port, 2)
    process.kill(victim, "SIGKILL")
    const code = await launch.proc.exited
    await launch.stdout.done
    const stdout = launch.stdout.lines
    const stderr = launch.stderr.lines
    expect(stderr.at(-1)).toContain("run completed DEGRADED (1 of 4 ranks lost")
    expect(code).toBe(0)
    expect(stderr.some((line) => /rank 2 lost .*unprocessed sample\(s\) of epoch 2 handed to rank\(s\)/.test(line))).toBe(true)

    const { checksums, lastAccuracy } = finalLines(stdout)
    expect(checksums).toHaveLength(3)
    expect(new Set(checksums).size).toBe(1)
    for (const rank of [0, 1, 3]) expect(lastAccuracy(rank)).toBeGreaterThanOrEqual(95)

    // Coverage: every sample of every epoch, once; a sample twice only when the first time was the dead rank's last batch.
    const seen = traces(dir)
    expect([...seen.keys()].sort()).toEqual([1, 2, 3, 4])
    const deadLast = readFileSync(join(dir, "r2.jsonl"), "utf8").trim().split("\n").map((line) => JSON.parse(line) as { epoch: number; indices: Array<number> }).at(-1)!
    for (const [epoch, samples] of seen) {
      expect(samples.size).toBe(DATASET)
      for (const [index, ranks] of samples) {
        if (ranks.length === 1) continue
        expect({ epoch, index, ranks: ranks.length }).toEqual({ epoch, index, ranks: 2 })
        expect(ranks).toContain(2)
        expect(deadLast.epoch === epoch && deadLast.indices.includes(index)).toBe(true)
      }
      // After its death rank 2 processes nothing.
      if (epoch > 2) expect([...samples.values()].some((ranks) => ranks.includes(2))).toBe(false)
    }
  }, 90_000)

  test("two hosts: the controller averages across relays, and a death on one host leaves the other training", async () => {
    const { dir, file } = setUp("hosts", "50%", 3, 8, { workers: ["{ host: localhost, devices: 2 }", "{ host: 127.0.0.1, devices: 2 }"] })
    const launch = spawnLaunch(file)
    const port = await portOf(launch.stderr.lines)
    await waitForLine(launch.stderr.lines, /epoch 1\/3 done/, "epoch 1 to end")
    await waitFor(() => (traces(dir).get(2)?.size ?? 0) > 0, "epoch 2 to make progress", 20_000)
    process.kill(await rankPid(port, 3), "SIGKILL")
    expect(await launch.proc.exited).toBe(0)
    await launch.stdout.done
    expect(launch.stderr.lines.at(-1)).toContain("run completed DEGRADED (1 of 4 ranks lost")
    // Ranks 2 and 3 ran on the second host, behind their own relay.
    expect(launch.stdout.lines.some((line) => line.startsWith("[127.0.0.1:cpu:r2] final weights checksum"))).toBe(true)
    const { checksums, lastAccuracy } = finalLines(launch.stdout.lines)
    expect(checksums).toHaveLength(3)
    expect(new Set(checksums).size).toBe(1)
    expect(lastAccuracy(2)).toBeGreaterThanOrEqual(95)
    for (const samples of traces(dir).values()) expect(samples.size).toBe(DATASET)
  }, 90_000)

  test.each([
    ["cpu_cadence", "{ kind: diloco, lr: 0.7, momentum: 0.5 }"],
    ["cpu_async", "{ kind: slowmo, lr: 1, momentum: 0.3 }"]
  ])("%s with an outer optimizer trains to the target, and its model root is in the checkpoint", async (backend, outer) => {
    const { dir, file } = setUp(backend, "50%", 6, 0, { job: [`backend: ${backend}`, "cadence: 4", `outer_optimizer: ${outer}`] })
    const launch = spawnLaunch(file)
    expect(await launch.proc.exited).toBe(0)
    await launch.stdout.done
    expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
    const { checksums, lastAccuracy } = finalLines(launch.stdout.lines)
    expect(new Set(checksums).size).toBe(1)
    for (const rank of [0, 1, 2, 3]) expect(lastAccuracy(rank)).toBeGreaterThanOrEqual(95)
    const saved = JSON.parse(readFileSync(join(dir, "checkpoint.json"), "utf8")) as { epoch: number; root?: string }
    expect(saved.epoch).toBe(6)
    expect(saved.root).toContain("$f32")
  }, 60_000)

  test("under restart, a killed rank comes back as a newcomer (the next number, from the latest consensus, at a boundary), and the run completes whole", async () => {
    const { dir, file } = setUp("restart", "50%", 4, 8)
    writeFileSync(file, readFileSync(file, "utf8").replace(
      /after_formation:\n    elastic: \{ max_failure: 50% \}/,
      "after_formation:\n    restart: { max_restarts: 2, within: 1m, backoff: { initial: 100ms, max: 1s, factor: 2, jitter: 0 } }"
    ))
    const launch = spawnLaunch(file)
    const port = await portOf(launch.stderr.lines)
    await waitForLine(launch.stdout.lines, /:r1\] epoch 1: /, "rank 1 to finish epoch 1 (and offer its checkpoint)")
    await waitFor(() => (traces(dir).get(2)?.size ?? 0) > 0, "epoch 2 to make progress", 20_000)
    const first = await rankPid(port, 1)
    process.kill(first, "SIGKILL")
    expect(await launch.proc.exited).toBe(0)
    await launch.stdout.done
    expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
    // Rank 1's unprocessed samples went to the others at once; its restart runs as rank 4 and enters at a boundary.
    expect(launch.stderr.lines).toContain("cohort: rank 1 of localhost restarts as rank 4: it rejoins at the next epoch boundary from the consensus weights")
    expect(launch.stderr.lines.some((line) => /rank 1 lost \(restarted as rank 4\): \d+ unprocessed sample\(s\) of epoch 2 handed to rank\(s\) 0, 2, 3/.test(line))).toBe(true)
    const entry = Number(/rank\(s\) 4 enter the cohort at epoch (\d)/.exec(launch.stderr.lines.find((line) => /rank\(s\) 4 enter/.test(line)) ?? "")?.[1])
    expect(entry).toBeGreaterThanOrEqual(3)
    expect(launch.stdout.lines.some((line) => line.includes(`:r4] resumed from the checkpoint of epoch ${entry - 1} `))).toBe(true)
    const { checksums, lastAccuracy } = finalLines(launch.stdout.lines)
    expect(checksums).toHaveLength(4)
    expect(new Set(checksums).size).toBe(1)
    expect(lastAccuracy(4)).toBeGreaterThanOrEqual(95)
    for (const [epoch, samples] of traces(dir)) {
      expect(samples.size).toBe(DATASET)
      // Twice only within rank 1's in-flight batch at its death (and its redo by a survivor).
      const repeated = [...samples.values()].filter((ranks) => ranks.length > 1)
      if (epoch !== 2) expect(repeated).toEqual([])
      expect(repeated.length).toBeLessThanOrEqual(128)
    }
  }, 90_000)

  test("a rank that exits with status 0 mid-epoch, without returning, is lost at once: no wait for the heartbeat timeout", async () => {
    // A minute of heartbeat timeout: were the loss seen only as silence, the run would outlast the test.
    const { dir, file } = setUp("exit0", "50%", 3, 8, { heartbeatTimeout: "60s" })
    const launch = spawnLaunch(file)
    await waitForLine(launch.stderr.lines, /epoch 1\/3 done/, "epoch 1 to end")
    await waitFor(() => (traces(dir).get(2)?.size ?? 0) > 0, "epoch 2 to make progress", 20_000)
    // The traced fixture's cue: rank 2 calls process.exit(0) before its next batch, sending no word of leaving.
    writeFileSync(join(dir, "exit-r2.next"), "0")
    renameSync(join(dir, "exit-r2.next"), join(dir, "exit-r2"))
    expect(await launch.proc.exited).toBe(0)
    await launch.stdout.done
    const stderr = launch.stderr.lines
    expect(stderr.some((line) => /rank 2 lost \(exited with status 0 with \d+ sample\(s\) of epoch 2 left\): \d+ unprocessed sample\(s\) of epoch 2 handed to rank\(s\) 0, 1, 3/.test(line))).toBe(true)
    expect(stderr.at(-1)).toStartWith("cohort: run completed DEGRADED (1 of 4 ranks lost")
    for (const samples of traces(dir).values()) expect(samples.size).toBe(DATASET)
  }, 45_000)

  test("one rank alone reaches the same accuracy, every sample its own", async () => {
    const { dir, file } = setUp("alone", "50%", 4, 0, { workers: ["{ host: localhost, devices: 1 }"] })
    const launch = spawnLaunch(file)
    expect(await launch.proc.exited).toBe(0)
    await launch.stdout.done
    expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
    expect(finalLines(launch.stdout.lines).lastAccuracy(0)).toBeGreaterThanOrEqual(95)
    for (const samples of traces(dir).values()) expect(samples.size).toBe(DATASET)
  }, 60_000)

  test("crossing max_failure mid-epoch: exit 1 with the epoch's coverage in the checkpoint; --resume trains only the rest, no sample twice", async () => {
    const { dir, file } = setUp("exceed", "1", 4, 8)
    const first = spawnLaunch(file)
    const port = await portOf(first.stderr.lines)
    // Mid-epoch 2: after epoch 1 has ended (its consensus offered) and some of epoch 2 is done.
    await waitForLine(first.stderr.lines, /epoch 1\/4 done/, "epoch 1 to end")
    await waitFor(() => (traces(dir).get(2)?.size ?? 0) > 0, "epoch 2 to make progress", 20_000)
    process.kill(await rankPid(port, 1), "SIGKILL")
    expect(await first.proc.exited).toBe(1)
    await first.stdout.done
    expect(first.stderr.lines.at(-1)).toMatch(/run failed: .*max_failure exceeded/)
    const path = join(dir, "checkpoint.json")
    const saved = JSON.parse(readFileSync(path, "utf8")) as {
      epoch: number
      reason: string
      dead: Array<number>
      coverage?: { epoch: number; datasetSize: number; done: Array<{ start: number; end: number }> }
    }
    expect(saved.reason).toBe("max_failure_exceeded")
    expect(saved.dead).toEqual([1])
    expect(saved.epoch).toBe(1)
    expect(saved.coverage?.epoch).toBe(2)
    expect(saved.coverage?.datasetSize).toBe(DATASET)
    const covered = new Set(saved.coverage!.done.flatMap(({ end, start }) => Array.from({ length: end - start }, (_, i) => start + i)))
    const where = `epoch 2 at ${covered.size.toLocaleString("en-US")} of 50,000 samples done`
    expect(first.stderr.lines.some((line) => line.includes(`consensus checkpoint written to ${path}, resuming ${where}; resume with --resume`))).toBe(true)
    // The coverage is exactly what the ranks reported doing in epoch 2, the dead rank's last batch aside (it may not have been told).
    const before = traces(dir).get(2)!
    const deadLast = batchesOf(dir, 1).at(-1)!
    for (const index of covered) expect(before.has(index)).toBe(true)
    for (const [index, ranks] of before) {
      if (!covered.has(index)) expect({ index, ranks, last: deadLast.epoch === 2 && deadLast.indices.includes(index) }).toEqual({ index, ranks: [1], last: true })
    }

    const second = spawnLaunch(file, {}, ["--resume"])
    expect(await second.proc.exited).toBe(0)
    await second.stdout.done
    expect(second.stderr.lines.some((line) => line.includes(`resuming ${where} from ${path}`))).toBe(true)
    expect(second.stdout.lines.filter((line) => line.includes("resumed from the checkpoint of epoch 1, part-way through epoch 2"))).toHaveLength(4)
    const epochs = second.stdout.lines.flatMap((line) => /:r0\] epoch (\d+):/.exec(line)?.[1] ?? []).map(Number)
    expect(epochs).toEqual([2, 3, 4])
    expect(second.stderr.lines.at(-1)).toBe("cohort: run completed")
    const { checksums, lastAccuracy } = finalLines(second.stdout.lines)
    expect(new Set(checksums).size).toBe(1)
    expect(lastAccuracy(0)).toBeGreaterThanOrEqual(95)
    // Both runs together: every sample of every epoch once; twice only the dead rank's last batch, done again after.
    const seen = traces(dir)
    expect([...seen.keys()].sort()).toEqual([1, 2, 3, 4])
    for (const [epoch, samples] of seen) {
      expect(samples.size).toBe(DATASET)
      for (const [index, ranks] of samples) {
        if (ranks.length === 1) continue
        expect({ epoch, index, first: ranks[0] }).toEqual({ epoch: 2, index, first: 1 })
        expect(ranks).toHaveLength(2)
        expect(deadLast.indices).toContain(index)
      }
    }
  }, 90_000)

  test("Ctrl-C mid-epoch: exit 130 with the epoch's coverage in the checkpoint (interrupted), said; --resume trains only the rest, every sample once", async () => {
    // Slower steps (25 ms) than the others' tests: the Ctrl-C must come while every rank still has work in epoch 2
    // (one that ran out has waited for work, and its weights miss the others' last rounds: no cut, by design).
    const { dir, file } = setUp("interrupt", "50%", 2, 25)
    const first = spawnLaunch(file)
    await waitForLine(first.stderr.lines, /epoch 1\/2 done/, "epoch 1 to end", 60_000)
    await waitFor(() => (traces(dir).get(2)?.size ?? 0) > 0, "epoch 2 to make progress", 20_000)
    first.proc.kill("SIGINT")
    expect(await first.proc.exited).toBe(130)
    await first.stdout.done
    expect(first.stderr.lines.at(-1)).toBe("cohort: run failed: aborted: received SIGINT")
    const path = join(dir, "checkpoint.json")
    const saved = JSON.parse(readFileSync(path, "utf8")) as {
      epoch: number
      reason: string
      coverage?: { epoch: number; done: Array<{ start: number; end: number }> }
    }
    expect([saved.reason, saved.epoch, saved.coverage?.epoch], first.stderr.lines.join("\n")).toEqual(["interrupted", 1, 2])
    const covered = new Set(saved.coverage!.done.flatMap(({ end, start }) => Array.from({ length: end - start }, (_, i) => start + i)))
    // Exactly what the ranks did of epoch 2 (no rank died: nothing done is left out).
    expect(covered).toEqual(new Set(traces(dir).get(2)!.keys()))
    const where = `epoch 2 at ${covered.size.toLocaleString("en-US")} of 50,000 samples done`
    expect(first.stderr.lines).toContain(`cohort: error: aborted: received SIGINT: consensus checkpoint written to ${path}, resuming ${where}; resume with --resume`)

    const second = spawnLaunch(file, {}, ["--resume"])
    expect(await second.proc.exited).toBe(0)
    await second.stdout.done
    expect(second.stderr.lines.at(-1)).toBe("cohort: run completed")
    const seen = traces(dir)
    expect([...seen.keys()].sort()).toEqual([1, 2])
    for (const samples of seen.values()) {
      expect(samples.size).toBe(DATASET)
      expect([...samples.values()].filter((ranks) => ranks.length !== 1)).toEqual([])
    }
  }, 90_000)

  test("a rank that stops beating (SIGSTOP) is declared dead after the heartbeat timeout, killed, and its work redistributed", async () => {
    const { dir, file } = setUp("silent", "50%", 3, 8, { heartbeatTimeout: "2s" })
    const launch = spawnLaunch(file)
    const port = await portOf(launch.stderr.lines)
    await waitForLine(launch.stderr.lines, /epoch 1\/3 done/, "epoch 1 to end")
    const frozen = await rankPid(port, 1)
    process.kill(frozen, "SIGSTOP")
    const stoppedAt = performance.now()
    await waitForLine(launch.stderr.lines, /rank 1 lost \(no heartbeat for 2\.0 s\)/, "the coordinator to give up on rank 1", 15_000)
    // The rank beats once a second, so its last beat came up to 1 s before the SIGSTOP: the timeout (2 s) runs
    // from that beat, and the coordinator may give up as early as 1 s after the stop.
    const noticed = performance.now() - stoppedAt
    expect(noticed).toBeGreaterThanOrEqual(1_000)
    expect(await launch.proc.exited).toBe(0)
    await launch.stdout.done
    expect(isGone(frozen)).toBe(true)
    // The verdict and the end table say why it was lost (it went silent), not only that cohort killed it.
    expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed DEGRADED (1 of 4 ranks lost: rank 1 of localhost went silent: no heartbeat for 2.0 s)")
    expect(launch.stderr.lines).toContainEqual(expect.stringMatching(/^localhost +1 +cpu +silent for 2\.0 s +0 +/))
    for (const samples of traces(dir).values()) expect(samples.size).toBe(DATASET)
  }, 60_000)

  test("ranks that lose their coordinator (launcher frozen) leave after the heartbeat timeout", async () => {
    const { file } = setUp("frozen", "50%", 50, 8, { heartbeatTimeout: "2s" })
    const launch = spawnLaunch(file)
    const port = await portOf(launch.stderr.lines)
    await waitForLine(launch.stderr.lines, /epoch 1\/50 done/, "epoch 1 to end")
    const ranks = await Promise.all([0, 1, 2, 3].map((rank) => rankPid(port, rank)))
    const relay = childrenOf(launch.proc.pid).find((pid) => !ranks.includes(pid))!
    launch.proc.kill("SIGSTOP")
    // A frozen launcher cannot reap them: an exited child stays a zombie ("Z") until it is killed.
    const exited = (pid: number) => isGone(pid) || processState(pid) === "Z"
    try {
      await waitFor(() => ranks.every(exited), "every rank to leave", 10_000)
      await waitFor(() => exited(relay), "the relay to leave once its ranks have", 5_000)
    } finally {
      launch.proc.kill("SIGKILL")
      launch.proc.kill("SIGCONT")
    }
  }, 60_000)

  test("the launcher SIGKILLed: every rank and the relay are gone", async () => {
    const { file } = setUp("orphans", "50%", 50, 8)
    const launch = spawnLaunch(file)
    const port = await portOf(launch.stderr.lines)
    await waitForLine(launch.stderr.lines, /epoch 1\/50 done/, "epoch 1 to end")
    const children = childrenOf(launch.proc.pid)
    const ranks = await Promise.all([0, 1, 2, 3].map((rank) => rankPid(port, rank)))
    expect(children.length).toBeGreaterThanOrEqual(5)
    for (const rank of ranks) expect(children).toContain(rank)
    launch.proc.kill("SIGKILL")
    // Parent-death reaches them at once; the heartbeat timeout (5 s) would be the slow path.
    await waitFor(() => children.every(isGone), "every rank and the relay to exit", 5_000)
  }, 60_000)
})
