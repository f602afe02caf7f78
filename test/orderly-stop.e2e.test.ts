/**
 * Stopping a run in order, end to end: the launcher started as a user starts
 * it (`setsid bun run launch FILE`, its own process group), real signals from
 * outside, /proc looked at directly. The ranks are the rank fixture with
 * `hold` and `save=MS:DIR`: on SIGTERM each "saves" for MS ms and writes a
 * `saved-<rank>` marker, so a marker says the rank got its SIGTERM and its
 * grace, and its absence that it was killed first.
 *
 * The expectations are the specification of the stop behaviour:
 * 1. one interrupt however delivered (a group SIGINT reaches `bun run`, which
 *    forwards it, and the launcher: twice within a millisecond); a later SIGINT
 *    exits at once;
 * 2. stops run side by side, and the launcher names whom it waits for;
 * 3. kill_all gives the siblings their grace (`grace: 0s` kills at once);
 * 4. the launcher does not outlive the `bun run` that started it;
 * 5. SIGHUP is an orderly stop, except under nohup;
 * 6. exit status 128 + signal, the verdict last, the checkpoint named.
 */
import { afterEach, describe, expect, test } from "bun:test"
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { clusterFile, repoRoot } from "./support/launch-scenario.ts"
import {
  collectPids,
  exitWithin,
  killEverything,
  launcherLines,
  launcherPid,
  type LauncherRun,
  leftRunning,
  rankPid,
  ranksUp,
  readMarkers,
  signalGroup,
  startLauncher,
  transcript,
  writeCluster
} from "./support/process-group.ts"
import { isRunning, waitFor } from "./support/processes.ts"

afterEach(killEverything)

/** failure_policy.grace in every scenario here: the stopping line says "5 s". */
const GRACE_MS = 5_000
const stoppingLine = (ranks: number) =>
  `cohort: stopping: waiting up to 5 s for ${ranks} rank(s) (press Ctrl-C again to exit at once)`
const verdict = (signal: string) => `cohort: run failed: aborted: received ${signal}`
const AGAIN = "cohort: run failed: interrupted again: exiting now without waiting for the ranks"

/** `devices` held ranks that each save for `saveMs` when stopped. */
const heldCluster = (devices: number, saveMs: number, policy = "  grace: 5s", extra: ReadonlyArray<string> = []) =>
  writeCluster((dir) => clusterFile({ devices, args: ["hold", `save=${saveMs}:$DIR`, ...extra], policy }, dir))

/** Start `setsid bun run launch FILE`, wait for every rank, find the launcher; the run's pids are collected. */
const running = async (devices: number, saveMs: number, policy?: string, extra?: ReadonlyArray<string>) => {
  const run = await startLauncher(heldCluster(devices, saveMs, policy, extra))
  const ranks = await ranksUp(run, devices)
  const launcher = await launcherPid(run)
  collectPids(run, [launcher])
  return { run, ranks, launcher }
}

/** The exit status, failing with the launcher's output when it has not exited within `timeoutMs`. */
const exited = async (run: LauncherRun, timeoutMs: number): Promise<number> => {
  const status = await exitWithin(run, timeoutMs)
  if (status === undefined) throw new Error(`the launcher had not exited ${timeoutMs} ms on\n${transcript(run)}`)
  await Promise.race([Promise.all([run.stdout.done, run.stderr.done]), Bun.sleep(2_000)])
  return status
}

/** Every pid of the run gone (or a zombie), within `timeoutMs`. */
const nothingLeft = (run: LauncherRun, timeoutMs = 2_000) =>
  waitFor(() => leftRunning(run).length === 0, `no process of the run left (still running: ${leftRunning(run).join(", ")})`, timeoutMs)

/** Exactly these ranks saved, each marker written by the rank's own process (its pid file's pid). */
const expectSavedBy = (run: LauncherRun, ranks: ReadonlyArray<number>) => {
  const markers = readMarkers(run.dir)
  expect(markers.map((marker) => marker.rank), transcript(run)).toEqual([...ranks])
  for (const marker of markers) expect(marker.pid, transcript(run)).toBe(rankPid(run.dir, marker.rank)!)
  return markers
}

const stderrHas = (run: LauncherRun, line: string) => run.stderr.lines.includes(line)

/**
 * The stop was orderly: the launcher said it was stopping (ranks.length of them), exited with `status`, its
 * last line is the verdict naming `signal`, exactly `ranks` saved, and nothing of the run is left.
 */
const expectOrderlyStop = async (run: LauncherRun, status: number, signal: string, ranks: ReadonlyArray<number>) => {
  const log = transcript(run)
  expect(run.stderr.lines, log).toContain(stoppingLine(ranks.length))
  expect(status, log).toBe(exitFor[signal])
  expect(launcherLines(run).at(-1), log).toBe(verdict(signal))
  expectSavedBy(run, ranks)
  await nothingLeft(run)
}
/** 128 + the signal's number, written out here: what shells and schedulers expect. */
const exitFor: Readonly<Record<string, number>> = { SIGHUP: 129, SIGINT: 130, SIGTERM: 143 }

describe("1. one interrupt, however delivered", () => {
  test("a group SIGINT (bun run forwards it, the launcher gets it too) is one interrupt: every rank gets SIGTERM and its grace; the launcher names whom it waits for about once a second; exit 130", async () => {
    const { run } = await running(3, 2_500)
    signalGroup(run.pgid, "SIGINT")
    const status = await exited(run, GRACE_MS + 4_000)
    const log = transcript(run)
    expect(run.stderr.lines, log).not.toContain(AGAIN)
    expect(run.stderr.lines, log).toContain(stoppingLine(3))
    expect(status, log).toBe(130)
    expect(launcherLines(run).at(-1), log).toBe(verdict("SIGINT"))
    expectSavedBy(run, [0, 1, 2])
    // Spec 2: while the ranks save (2.5 s), "still waiting for" lines name them, about once a second.
    const stoppingAt = run.stderr.times[run.stderr.lines.indexOf(stoppingLine(3))]!
    const waiting = run.stderr.lines.flatMap((line, i) => line.startsWith("cohort: stopping: still waiting for") ? [{ line, at: run.stderr.times[i]! }] : [])
    expect(waiting.length, log).toBeGreaterThanOrEqual(2)
    for (const { line } of waiting) expect(line, log).toMatch(/\brank [0-2] \(localhost\)/)
    expect(waiting[0]!.at - stoppingAt, log).toBeGreaterThan(500)
    expect(waiting[0]!.at - stoppingAt, log).toBeLessThan(1_700)
    for (let i = 1; i < waiting.length; i++) {
      expect(waiting[i]!.at - waiting[i - 1]!.at, log).toBeGreaterThan(500)
      expect(waiting[i]!.at - waiting[i - 1]!.at, log).toBeLessThan(1_700)
    }
    await nothingLeft(run)
  }, 30_000)

  test("a group SIGTERM is one interrupt too: markers written, exit 143, the verdict names SIGTERM", async () => {
    const { run } = await running(2, 1_000)
    signalGroup(run.pgid, "SIGTERM")
    const status = await exited(run, GRACE_MS + 3_000)
    const log = transcript(run)
    expect(run.stderr.lines, log).not.toContain(AGAIN)
    await expectOrderlyStop(run, status, "SIGTERM", [0, 1])
  }, 30_000)

  test("SIGTERM to the launcher's pid only: an orderly stop, exit 143", async () => {
    const { run, launcher } = await running(2, 1_000)
    process.kill(launcher, "SIGTERM")
    const status = await exited(run, GRACE_MS + 3_000)
    await expectOrderlyStop(run, status, "SIGTERM", [0, 1])
  }, 30_000)

  test("a second SIGINT more than a second after the first exits at once (130); the ranks die with the launcher, none saved", async () => {
    const { run, ranks, launcher } = await running(2, 3_000)
    signalGroup(run.pgid, "SIGINT")
    await waitFor(() => stderrHas(run, stoppingLine(2)), "the stopping line", 4_000)
      .catch((error) => { throw new Error(`${(error as Error).message}\n${transcript(run)}`) })
    // More than a second after the launcher took the first SIGINT (its stopping line says it has), not after it
    // was sent: on a loaded machine the first is handled late, and a second within a second of it is its copy.
    const first = performance.now()
    await waitFor(() => performance.now() - first >= 1_100, "1.1 s since the stopping line", 2_000)
    process.kill(launcher, "SIGINT")
    const second = performance.now()
    const status = await exited(run, 1_500)
    const log = transcript(run)
    expect(performance.now() - second, log).toBeLessThan(1_500)
    expect(status, log).toBe(130)
    expect(launcherLines(run).at(-1), log).toBe(AGAIN)
    // Parent death (PR_SET_PDEATHSIG) takes the ranks well inside their 3 s of saving.
    await waitFor(() => ranks.every((pid) => !isRunning(pid)), "the ranks dead with their launcher", 1_500)
    expect(readMarkers(run.dir), log).toEqual([])
    await nothingLeft(run)
  }, 30_000)
})

describe("2. stops run side by side", () => {
  test("4 ranks that each need 1 s to save: every one saves, together, and the run ends well under the 4 s a one-at-a-time stop takes", async () => {
    const { run } = await running(4, 1_000)
    signalGroup(run.pgid, "SIGINT")
    const signalled = performance.now()
    const status = await exited(run, GRACE_MS + 3_000)
    const took = performance.now() - signalled
    const log = transcript(run)
    expect(status, log).toBe(130)
    const markers = expectSavedBy(run, [0, 1, 2, 3])
    expect(took, log).toBeLessThan(3_500)
    const times = markers.map((marker) => marker.at)
    expect(Math.max(...times) - Math.min(...times), log).toBeLessThan(700)
    await nothingLeft(run)
  }, 30_000)
})

describe("3. kill_all gives the siblings their grace", () => {
  const failing = (afterFormation: string) => [
    "  before_formation: kill_all",
    `  after_formation: ${afterFormation}`,
    "  grace: 5s"
  ].join("\n")

  /** 3 ranks held and saving; rank 2 exits 3 once the trigger exists, created once the cohort has formed. */
  const failRank2 = async (afterFormation: string) => {
    const { run, ranks } = await running(3, 500, failing(afterFormation), ["fail=2:3", "trigger=$DIR/go"])
    await waitFor(() => run.stderr.lines.some((line) => line.startsWith("cohort: cohort formed")), "the cohort formed", 10_000)
    writeFileSync(join(run.dir, "go"), "")
    return { run, ranks }
  }

  test("after_formation: kill_all with grace 5s: both siblings save, exit 1, the verdict names the failing rank", async () => {
    const { run } = await failRank2("kill_all")
    const status = await exited(run, GRACE_MS + 3_000)
    const log = transcript(run)
    expect(status, log).toBe(1)
    expect(launcherLines(run).at(-1), log).toMatch(/^cohort: run failed: .*\brank 2\b/)
    expectSavedBy(run, [0, 1])
    await nothingLeft(run)
  }, 30_000)

  test("after_formation: { kill_all: { grace: 0s } }: the siblings are killed at once, no marker", async () => {
    const { run, ranks } = await failRank2("{ kill_all: { grace: 0s } }")
    const status = await exited(run, GRACE_MS + 3_000)
    const log = transcript(run)
    expect(status, log).toBe(1)
    expect(launcherLines(run).at(-1), log).toMatch(/^cohort: run failed: .*\brank 2\b/)
    await waitFor(() => ranks.every((pid) => !isRunning(pid)), "every rank gone", 2_000)
    expect(readMarkers(run.dir), log).toEqual([])
    await nothingLeft(run)
  }, 30_000)
})

describe("4. the launcher does not outlive what started it", () => {
  test("SIGKILL of `bun run` only: the launcher stops in order as for SIGTERM, every rank saves, nothing of the run is left after grace + 1 s", async () => {
    const { run, launcher } = await running(3, 500)
    const pids = collectPids(run, [launcher])
    expect(pids.size, transcript(run)).toBeGreaterThanOrEqual(1 + 1 + 3) // bun run, the launcher, the ranks (and the relay, …)
    process.kill(run.proc.pid, "SIGKILL")
    await run.proc.exited
    await nothingLeft(run, GRACE_MS + 1_000).catch((error) => {
      throw new Error(`${(error as Error).message}\n${transcript(run)}`)
    })
    await Promise.race([run.stderr.done, Bun.sleep(1_000)])
    const log = transcript(run)
    expect(run.stderr.lines.some((line) => line.startsWith("cohort: stopping:")), log).toBe(true)
    expectSavedBy(run, [0, 1, 2])
  }, 30_000)
})

describe("5. SIGHUP", () => {
  test("a group SIGHUP (the terminal closed) is an orderly stop: markers written, exit 129", async () => {
    const { run } = await running(2, 500)
    signalGroup(run.pgid, "SIGHUP")
    const status = await exited(run, GRACE_MS + 3_000)
    await expectOrderlyStop(run, status, "SIGHUP", [0, 1])
  }, 30_000)

  test("under nohup, SIGHUP to the launcher changes nothing; SIGTERM then stops it in order (143)", async () => {
    // Directly, not through `bun run`: Bun's script runner does not keep an ignored SIGHUP for its script;
    // the launcher's own disposition is what is under test.
    const run = await startLauncher(heldCluster(2, 500), { via: "direct", nohup: true })
    const ranks = await ranksUp(run, 2)
    const launcher = await launcherPid(run)
    expect(launcher).toBe(run.proc.pid)
    collectPids(run, [launcher])
    process.kill(launcher, "SIGHUP")
    // The one fixed wait: what is checked is that nothing happens, and no event marks "decided to ignore".
    // A stop would show at once (the stopping line within milliseconds, markers 500 ms later); 1.5 s is
    // three times that, and short.
    await Bun.sleep(1_500)
    const log = transcript(run)
    expect(isRunning(launcher), log).toBe(true)
    expect(ranks.every(isRunning), log).toBe(true)
    expect(readMarkers(run.dir), log).toEqual([])
    expect(run.stderr.lines.filter((line) => line.startsWith("cohort: stopping:")), log).toEqual([])
    process.kill(launcher, "SIGTERM")
    const status = await exited(run, GRACE_MS + 3_000)
    const after = transcript(run)
    expect(status, after).toBe(143)
    expect(launcherLines(run).at(-1), after).toBe(verdict("SIGTERM"))
    expectSavedBy(run, [0, 1])
    await nothingLeft(run)
  }, 30_000)
})

describe("6. exit status and the last line", () => {
  // 130 / 143 / 129 and `aborted: received SIG…` as the last line are asserted by the SIGINT, SIGTERM and
  // SIGHUP tests above; here, a training run's checkpoint is named before the verdict.
  test("a group SIGINT mid-training: the consensus checkpoint is written and named, with the command that resumes it", async () => {
    const cluster = writeCluster((dir) => `
name: stop-checkpoint
workers:
  - host: localhost
    devices: 2
    path: ${repoRoot}
    env: { OMP_NUM_THREADS: "1" }
job:
  entry: examples/train.ts
  backend: cpu_sync
  dataset_size: 20000
  epochs: 500
  checkpoint: ${join(dir, "checkpoint.json")}
failure_policy:
  grace: 5s
`)
    const checkpoint = join(cluster.dir, "checkpoint.json")
    const run = await startLauncher(cluster)
    // Epoch 2 done, not epoch 1: the coordinator prints "epoch 1/500 done" when epoch 1's samples are
    // processed, before the ranks average, evaluate and save it, so an interrupt right then can come
    // before any rank has saved (no consensus yet, nothing to name). A rank saves epoch 1 before it
    // works on epoch 2, so once epoch 2 is done a consensus of epoch ≥ 1 exists.
    await waitFor(() => run.stderr.lines.some((line) => /^cohort: epoch 2\/500 done/.test(line)), "epoch 2 done", 20_000)
      .catch((error) => { throw new Error(`${(error as Error).message}\n${transcript(run)}`) })
    collectPids(run)
    signalGroup(run.pgid, "SIGINT")
    const status = await exited(run, GRACE_MS + 4_000)
    const log = transcript(run)
    expect(status, log).toBe(130)
    expect(launcherLines(run).at(-1), log).toBe(verdict("SIGINT"))
    const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")
    // A boundary's checkpoint names its epoch; an interrupt that lands once the next epoch has begun keeps a cut of
    // it (possibly at 0 samples done, on a loaded machine), named with the epoch it resumes.
    const named = new RegExp(
      `^cohort: checkpoint: ${escaped(checkpoint)} \\((?:epoch (\\d+)|resumes epoch (\\d+) at [\\d,]+ of [\\d,]+ samples done)\\); continue with: bun run launch ${escaped(cluster.file)} --resume$`
    )
    const lines = launcherLines(run)
    const at = lines.findIndex((line) => named.test(line))
    expect(at, log).toBeGreaterThanOrEqual(0)
    expect(at, log).toBeLessThan(lines.length - 1)
    const match = named.exec(lines[at]!)!
    expect(Number(match[1] ?? match[2]), log).toBeGreaterThanOrEqual(1)
    expect(existsSync(checkpoint), log).toBe(true)
    expect(() => JSON.parse(readFileSync(checkpoint, "utf8"))).not.toThrow()
    await nothingLeft(run)
  }, 40_000)
})
