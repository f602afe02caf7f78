/**
 * The `restart` failure policy under training, end to end through the real
 * CLI (four traced ranks of examples/train.ts, see traced-train-fixture.ts):
 * one rank dies more than once. A restarted training rank rejoins like a
 * newcomer: under the next rank number (1, then 4, then 5), on its old
 * device, entering at the next epoch boundary from the consensus weights.
 * - Twice, under `max_restarts: 2`: it comes back twice (restart decisions of
 *   100 ms then 200 ms, three incarnations, the later two resumed from the
 *   consensus checkpoint under new numbers), and the run completes whole:
 *   exit 0, the weights agree, the accuracy is reached, and every sample of
 *   every epoch was processed exactly once (the dead incarnations' one
 *   in-flight batch aside).
 * - A third time: past `max_restarts` the policy escalates: exit 1, the
 *   verdict names restart intensity exceeded, and nothing of the run is left
 *   running.
 * The first death is a SIGKILL (its pid read from the status endpoint), the
 * later ones a crash on cue (`<trace>/exit-r<its number>`), each only once the
 * previous incarnation is back, has entered, resumed and made progress.
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test"
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { basename, join } from "node:path"
import { fetchState, listeningPort as portOf, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { allPids, commandLine, environment, isRunning, jsonLines, waitFor } from "./support/processes.ts"
import { type Batch, batchesOf, traces } from "./support/traces.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))
/** Launchers still running after their test (it failed midway): SIGKILLed, and their ranks go with them. */
const launchers: Array<{ readonly kill: (signal: "SIGKILL") => void; readonly exitCode: number | null }> = []
afterEach(() => launchers.splice(0).forEach((proc) => proc.exitCode === null && proc.kill("SIGKILL")))

const DATASET = 50_000
const EPOCHS = 8
/** The rank that dies, again and again: its first number, then the next ones it is given (the world has 4). */
const VICTIM = 1
const RENUMBERED = [4, 5]
const BATCH = 128

const setUp = (maxRestarts: number, scope: "one" | "all" = "one") => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-restart-"))
  dirs.push(dir)
  // Unique: the relay and the ranks carry the run's name, which finds them all at the end.
  const name = `restart-twice-${basename(dir).slice("cohort-restart-".length)}`
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: ${name}
workers:
  - { host: localhost, devices: 4, path: ${repoRoot} }
job:
  entry: test/fixtures/traced-train-fixture.ts
  args: ["trace=${dir}", "delay=8"]
  dataset_size: ${DATASET}
  epochs: ${EPOCHS}
  checkpoint: ${join(dir, "checkpoint.json")}
failure_policy:
  after_formation:
    restart: { max_restarts: ${maxRestarts}, within: 5m, backoff: { initial: 100ms, max: 1s, factor: 2, jitter: 0 }, scope: ${scope} }
  grace: 2s
  heartbeat_timeout: 5s
`)
  return { dir, file, name, events: join(dir, "events.jsonl") }
}

/** Wait until some line matches; the lines collected so far are searched as they grow. */
const waitForLine = (lines: ReadonlyArray<string>, pattern: RegExp, what: string, timeoutMs = 30_000) =>
  waitFor(() => lines.some((line) => pattern.test(line)), what, timeoutMs)

/** Poll an async condition (the status endpoint) until it holds. */
const until = async <A>(probe: () => Promise<A | undefined>, what: string, timeoutMs = 20_000): Promise<A> => {
  const deadline = performance.now() + timeoutMs
  while (performance.now() < deadline) {
    const value = await probe()
    if (value !== undefined) return value
    await Bun.sleep(10)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`)
}

const rankStatus = async (port: number, rank: number) => (await fetchState(port))?.ranks.find((entry) => entry.rank === rank)

const finalLines = (lines: ReadonlyArray<string>) => ({
  checksums: lines.flatMap((line) => /final weights checksum (\w+)/.exec(line)?.[1] ?? []),
  lastAccuracy: (rank: number) => {
    const own = lines.filter((line) => line.includes(`:r${rank}] epoch `))
    const match = /accuracy ([\d.]+)%/.exec(own.at(-1) ?? "")
    return match === null ? Number.NaN : Number(match[1])
  }
})

/** The end-of-run table's row for a rank: how it ended and its restarts. */
const tableRow = (lines: ReadonlyArray<string>, rank: number) => {
  const row = lines.map((line) => new RegExp(`^localhost\\s+${rank}\\s+cpu\\s+(\\S+)\\s+(\\d+)\\s`).exec(line)).find((match) => match !== null)
  return row === undefined || row === null ? undefined : { exit: row[1], restarts: Number(row[2]) }
}

/** Every process of the run still about (not a zombie): its name is in the relay's and the ranks' environments. */
const processesOf = (name: string): Array<string> =>
  allPids().filter((pid) => pid !== process.pid && isRunning(pid)).flatMap((pid) => {
    let env: Record<string, string> = {}
    try {
      env = environment(pid)
    } catch {
      // another user's, or gone
    }
    const line = commandLine(pid)
    return line.includes(name) || Object.values(env).some((value) => value.includes(name)) ? [`${pid} ${line.slice(0, 120)}`] : []
  })

const resumedLines = (lines: ReadonlyArray<string>) =>
  lines.filter((line) => /:r\d+\] resumed from the checkpoint of epoch \d+/.test(line))

/**
 * A run in progress and the victim's incarnations: `die` waits for the current
 * one to be gone and keeps its last reported batch (its in-flight one, which
 * may be reported twice); `comeBack` waits for the next one to be running
 * under a new pid, with the restart counted, resumed and making progress.
 */
const start = async (maxRestarts: number, scope: "one" | "all" = "one") => {
  const { dir, file, name, events } = setUp(maxRestarts, scope)
  const launch = spawnLaunch(file, {}, ["--events", events])
  launchers.push(launch.proc)
  const port = await portOf(launch.stderr.lines)
  /** The dead incarnations' last reported batches, with the number each ran as. */
  const lastBatches: Array<Batch & { readonly rank: number }> = []
  const pids: Array<number> = []
  /** The number the victim runs as now. */
  let victim = VICTIM

  const die = async (pid: number) => {
    await waitFor(() => !isRunning(pid), `incarnation ${pids.length} of rank ${VICTIM} (pid ${pid}) to die`, 20_000)
    // The restart is at least 100 ms away: what the trace holds now is the dead incarnation's.
    const last = batchesOf(dir, victim).at(-1)
    if (last !== undefined) lastBatches.push({ ...last, rank: victim })
  }

  /** The restart `restarts` runs as the next number; it enters at a boundary, resumes and works. */
  const comeBack = async (restarts: number, previous: number): Promise<number> => {
    const next = RENUMBERED[restarts - 1]!
    await waitForLine(launch.stderr.lines, new RegExp(`rank ${victim} of localhost restarts as rank ${next}: it rejoins at the next epoch boundary`), `rank ${victim} to restart as rank ${next}`, 20_000)
    victim = next
    const pid = await until(async () => {
      const status = await rankStatus(port, victim)
      return status?.state === "running" && typeof status.pid === "number" && status.pid !== previous ? status.pid : undefined
    }, `rank ${victim} to be running`)
    pids.push(pid)
    await waitForLine(launch.stderr.lines, new RegExp(`rank\\(s\\) ${victim} enter the cohort at epoch \\d+`), `rank ${victim} to enter at a boundary`, 20_000)
    await waitForLine(launch.stdout.lines, new RegExp(`:r${victim}\\] resumed from the checkpoint of epoch \\d+`), `rank ${victim} to resume from the checkpoint`, 20_000)
    await waitFor(() => batchesOf(dir, victim).length >= 3, `rank ${victim} to make progress`, 20_000)
    return pid
  }

  /**
   * Crash on cue: the rank exits with `code` before its next batch. Written aside and renamed into place: the
   * fixture reads the file as soon as it exists, and an empty one would be read as 0 (a clean exit).
   */
  const crash = (code: number) => {
    const cue = join(dir, `exit-r${victim}`)
    writeFileSync(`${cue}.next`, String(code))
    renameSync(`${cue}.next`, cue)
  }

  /** The first death: SIGKILL mid-epoch 2, once epoch 1 is done and checkpointed. */
  const killFirst = async () => {
    await waitForLine(launch.stdout.lines, new RegExp(`:r${VICTIM}\\] epoch 1: `), `rank ${VICTIM} to finish epoch 1 (and offer its checkpoint)`)
    await waitFor(() => (traces(dir).get(2)?.size ?? 0) > 0, "epoch 2 to make progress", 20_000)
    const status = await rankStatus(port, VICTIM)
    if (typeof status?.pid !== "number") throw new Error(`the status endpoint shows no pid for rank ${VICTIM}`)
    pids.push(status.pid)
    process.kill(status.pid, "SIGKILL")
    await die(status.pid)
    return status.pid
  }

  const finish = async () => {
    const code = await launch.proc.exited
    await launch.stdout.done
    await launch.stderr.done
    return code
  }

  return { dir, name, events, launch, lastBatches, die, comeBack, crash, killFirst, finish }
}

/** The victim killed, back, crashed (status 3) and back again: the pids of its three incarnations. */
const dieTwice = async (run: Awaited<ReturnType<typeof start>>) => {
  const first = await run.killFirst()
  const second = await run.comeBack(1, first)
  run.crash(3)
  await run.die(second)
  const third = await run.comeBack(2, second)
  return [first, second, third] as const
}

type Event = Record<string, unknown>

const eventsOf = (file: string): Array<Event> => jsonLines(readFileSync(file, "utf8").split("\n"))

describe("restart, a rank that dies more than once", () => {
  test("dies twice under max_restarts 2: it comes back twice and the run completes whole", async () => {
    const started = performance.now()
    const run = await start(2)
    const [first, second, third] = await dieTwice(run)
    expect(new Set([first, second, third]).size).toBe(3)

    const code = await run.finish()
    const stdout = run.launch.stdout.lines
    const stderr = run.launch.stderr.lines
    expect(stderr.at(-1)).toBe("cohort: run completed")
    expect(code).toBe(0)
    expect(stderr).toContain(`cohort: training done: ${EPOCHS} epoch(s)`)

    // Two restart decisions, the second after a doubled backoff; nothing escalated.
    const restarting = stderr.filter((line) => /restarting it in/.test(line))
    expect(restarting).toHaveLength(2)
    expect(restarting[0]).toMatch(new RegExp(`rank ${VICTIM} of localhost exited with signal SIGKILL: restarting it in 100 ms$`))
    expect(restarting[1]).toMatch(new RegExp(`rank ${VICTIM} of localhost exited with status 3: restarting it in 200 ms$`))
    expect(stderr.some((line) => /restart intensity exceeded|escalat/.test(line))).toBe(false)
    const events = eventsOf(run.events)
    expect(events.filter((event) => event.event === "decision" && event.decision === "Restart").map((event) => event.detail))
      .toEqual([`restart rank-${VICTIM} in 100 ms`, `restart rank-${VICTIM} in 200 ms`])
    expect(events.some((event) => event.event === "decision" && event.decision === "Escalate")).toBe(false)
    // Each incarnation came back under the next number, on the same device: three starts under three pids,
    // the two new ones grown into the world and resumed from the consensus.
    const starts = events.filter((event) => event.event === "rank_started" && [VICTIM, ...RENUMBERED].includes(event.rank as number))
    expect(starts.map((event) => [event.rank, event.pid])).toEqual([[VICTIM, first], [RENUMBERED[0], second], [RENUMBERED[1], third]])
    expect(events.filter((event) => event.event === "world_grew").map((event) => [event.replaces, event.ranks])).toEqual([[VICTIM, [RENUMBERED[0]]], [RENUMBERED[0], [RENUMBERED[1]]]])
    expect(resumedLines(stdout).map((line) => /:r(\d+)\]/.exec(line)![1])).toEqual(RENUMBERED.map(String))
    // The other ranks never restarted.
    for (const rank of [0, 2, 3]) expect(events.filter((event) => event.event === "rank_started" && event.rank === rank)).toHaveLength(1)

    // The rows: the last incarnation ended cleanly; the dead ones with their deaths. Each number the seat ran
    // as counts the restarts before it: 1 for the first new number, 2 for the second.
    expect(tableRow(stderr, RENUMBERED[1]!)).toEqual({ exit: "0", restarts: 2 })
    expect(tableRow(stderr, RENUMBERED[0]!)).toEqual({ exit: "3", restarts: 1 })
    for (const rank of [0, 2, 3]) expect(tableRow(stderr, rank)).toEqual({ exit: "0", restarts: 0 })

    const { checksums, lastAccuracy } = finalLines(stdout)
    expect(checksums).toHaveLength(4)
    expect(new Set(checksums).size).toBe(1)
    for (const rank of [0, 2, 3, RENUMBERED[1]!]) expect(lastAccuracy(rank)).toBeGreaterThanOrEqual(95)

    // Coverage: every sample of every epoch, once; twice only within a dead incarnation's last reported batch
    // (reported by it, then redone by the next incarnation).
    expect(run.lastBatches).toHaveLength(2)
    const seen = traces(run.dir)
    expect([...seen.keys()].sort()).toEqual(Array.from({ length: EPOCHS }, (_, slot) => slot + 1))
    for (const [epoch, samples] of seen) {
      expect(samples.size).toBe(DATASET)
      const repeated = [...samples.entries()].filter(([, ranks]) => ranks.length > 1)
      expect(repeated.length).toBeLessThanOrEqual(2 * BATCH)
      for (const [index, ranks] of repeated) {
        expect({ epoch, index, ranks: ranks.length }).toEqual({ epoch, index, ranks: 2 })
        expect(run.lastBatches.some((batch) => batch.epoch === epoch && batch.indices.includes(index) && ranks.includes(batch.rank))).toBe(true)
      }
    }
    console.log(`restart twice: ${((performance.now() - started) / 1000).toFixed(1)} s`)
  }, 40_000)

  test("dies a third time past max_restarts 2: the policy escalates, the run fails, and nothing is left running", async () => {
    const started = performance.now()
    const run = await start(2)
    const [first, second, third] = await dieTwice(run)
    run.crash(4)
    await run.die(third)

    const code = await run.finish()
    const stderr = run.launch.stderr.lines
    expect(code).toBe(1)
    // The supervisor names the child by its seat: the rank it first ran as.
    expect(stderr.at(-1)).toBe(
      `cohort: run failed: rank ${VICTIM} of localhost exited with status 4; restart intensity exceeded: ` +
        `rank ${VICTIM} of localhost would be restart 3 within 5m (max_restarts 2)`
    )
    // Two restarts were granted, the third refused: no fourth incarnation.
    expect(stderr.filter((line) => /restarting it in/.test(line))).toHaveLength(2)
    const events = eventsOf(run.events)
    expect(events.filter((event) => event.event === "decision" && event.decision === "Restart")).toHaveLength(2)
    expect(events.filter((event) => event.event === "decision" && event.decision === "Escalate").map((event) => event.detail))
      .toEqual([expect.stringContaining("restart intensity exceeded")])
    expect(events.filter((event) => event.event === "rank_started" && [VICTIM, ...RENUMBERED].includes(event.rank as number)).map((event) => event.pid)).toEqual([first, second, third])
    expect(tableRow(stderr, RENUMBERED[1]!)).toEqual({ exit: "4", restarts: 2 })
    // The run did not train to its end.
    expect(stderr).not.toContain(`cohort: training done: ${EPOCHS} epoch(s)`)

    // Nothing of the run is left: no incarnation of any rank, no relay.
    const rankPids = events.filter((event) => event.event === "rank_started").map((event) => event.pid as number)
    expect(rankPids).toHaveLength(4 + 2)
    expect(rankPids.filter((pid) => isRunning(pid))).toEqual([])
    expect(processesOf(run.name)).toEqual([])
    console.log(`restart thrice: ${((performance.now() - started) / 1000).toFixed(1)} s`)
  }, 40_000)

  test("scope: all: the whole group comes back under new numbers and takes over the epoch together", async () => {
    const run = await start(2, "all")
    const first = await run.killFirst()
    expect(first).toBeGreaterThan(0)
    const code = await run.finish()
    const stdout = run.launch.stdout.lines
    const stderr = run.launch.stderr.lines
    expect(stderr.at(-1)).toBe("cohort: run completed")
    expect(code).toBe(0)
    // Each seat comes back under one of the next four numbers, in whatever order the group's exits came.
    const renumbered = stderr.flatMap((line) => /^cohort: rank (\d) of localhost restarts as rank (\d): it rejoins at the next epoch boundary from the consensus weights$/.exec(line)?.slice(1).map(Number) ?? [])
    expect(renumbered.filter((_, at) => at % 2 === 0).sort()).toEqual([0, 1, 2, 3])
    expect(renumbered.filter((_, at) => at % 2 === 1).sort()).toEqual([4, 5, 6, 7])
    // Every member was stopped: the four newcomers enter together and share what is left of the epoch.
    expect(stderr.some((line) => /every member was lost \(.*\): rank\(s\) 4, 5, 6, 7 enter at once and take epoch 2's remaining \d+ sample\(s\)/.test(line))).toBe(true)
    const { checksums } = finalLines(stdout)
    expect(checksums).toHaveLength(4)
    expect(new Set(checksums).size).toBe(1)
    const seen = traces(run.dir)
    for (const [epoch, samples] of seen) {
      expect(samples.size).toBe(DATASET)
      // Twice only within the killed rank's in-flight batch.
      const repeated = [...samples.values()].filter((ranks) => ranks.length > 1)
      if (epoch !== 2) expect(repeated).toEqual([])
      expect(repeated.length).toBeLessThanOrEqual(BATCH)
      if (epoch === 2) for (const rank of [4, 5, 6, 7]) expect([...samples.values()].some((ranks) => ranks.includes(rank))).toBe(true)
    }
  }, 40_000)
})
