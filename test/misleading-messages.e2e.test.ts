/**
 * Messages that misled a new user (issue 38, part 3), through the real CLI: a rank that ignores SIGTERM is said
 * to be killed once its grace is over, in agent-localhost.log too (the in-process agent's lines); `-v` says
 * `listening on` once; two quick-form runs of one script in one folder both run, the second under a name of its
 * own; a `--resume` run adds to the `--events` file of the run it resumes, which any other run empties.
 * The quick-form runs start in a folder of their own (their `.cohort/` is there); the file runs in the checkout.
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { collectLines, waitFor } from "./support/processes.ts"

const dirs: Array<string> = []
const launched: Array<Bun.Subprocess> = []
afterEach(() => {
  for (const proc of launched.splice(0)) proc.kill("SIGKILL")
})
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-messages-"))
  dirs.push(dir)
  return dir
}

/** `bun src/cli/launch.ts ARGS` started in `cwd`, its output collected. */
const quick = (cwd: string, args: ReadonlyArray<string>) => {
  const proc = Bun.spawn([process.execPath, join(repoRoot, "src/cli/launch.ts"), ...args], { cwd, stdout: "pipe", stderr: "pipe" })
  launched.push(proc)
  return { proc, stdout: collectLines(proc.stdout), stderr: collectLines(proc.stderr) }
}
const said = (run: { stderr: { lines: ReadonlyArray<string> }; stdout: { lines: ReadonlyArray<string> } }) =>
  `--- stderr\n${run.stderr.lines.join("\n")}\n--- stdout\n${run.stdout.lines.join("\n")}`

describe("a rank that ignores SIGTERM, under -v and --log-dir", () => {
  test("is said to be killed when its grace is over, in agent-localhost.log too; listening on is said once", async () => {
    const dir = tempDir()
    // The trap is set before the line: once every rank has said it, a SIGTERM is ignored.
    writeFileSync(join(dir, "stubborn.sh"), `trap '' TERM\necho "rank $RANK up"\nwhile :; do sleep 0.05; done\n`)
    const run = quick(dir, ["-v", "-n", "2", "--set", "failure_policy.grace=1s", "--log-dir", join(dir, "logs"), "--", "sh", "stubborn.sh"])
    await waitFor(() => [0, 1].every((rank) => run.stdout.lines.includes(`[localhost:cpu:r${rank}] rank ${rank} up`)), "both ranks up", 20_000)
      .catch((error) => { throw new Error(`${(error as Error).message}\n${said(run)}`) })
    run.proc.kill("SIGINT")
    expect(await run.proc.exited, said(run)).toBe(130)
    await run.stderr.done
    const lines = run.stderr.lines
    for (const rank of [0, 1]) {
      expect(lines, said(run)).toContain(`cohort agent localhost: warning: rank ${rank} of localhost did not stop within the grace (1s): killed (SIGKILL)`)
    }
    expect(lines.filter((line) => line.includes("listening on")), said(run)).toHaveLength(1)
    const logs = join(dir, "logs")
    expect(readdirSync(logs).sort()).toEqual(["agent-localhost.log", "launcher.log", "rank-0.log", "rank-1.log"])
    const agentLog = readFileSync(join(logs, "agent-localhost.log"), "utf8").split("\n")
    for (const rank of [0, 1]) expect(agentLog).toContain(`warning: rank ${rank} of localhost did not stop within the grace (1s): killed (SIGKILL)`)
    expect(readFileSync(join(logs, "launcher.log"), "utf8")).not.toContain("did not stop within the grace")
  }, 40_000)
})

describe("two quick-form runs of one script in one folder", () => {
  test("both run: the second takes the name's next free one, and says so", async () => {
    const dir = tempDir()
    writeFileSync(join(dir, "hold.sh"), `echo "rank $RANK up"\nwhile :; do sleep 0.05; done\n`)
    const first = quick(dir, ["-n", "1", "--", "sh", "hold.sh"])
    await waitFor(() => first.stdout.lines.includes("[localhost:cpu:r0] rank 0 up"), "the first run's rank", 20_000)
      .catch((error) => { throw new Error(`${(error as Error).message}\n${said(first)}`) })
    const second = quick(dir, ["-n", "1", "--", "sh", "hold.sh"])
    await waitFor(() => second.stdout.lines.includes("[localhost:cpu:r0] rank 0 up"), "the second run's rank", 20_000)
      .catch((error) => { throw new Error(`${(error as Error).message}\n${said(second)}`) })
    expect(second.stderr.lines[0], said(second)).toBe(
      `cohort: another run named hold is running here (pid ${first.proc.pid}): this one is named hold-2 (--set name=NAME names it yourself)`
    )
    expect(second.stderr.lines[1], said(second)).toStartWith(`cohort: hold-2: listening on 127.0.0.1:`)
    expect(first.stderr.lines.join("\n")).not.toContain("another run named")
    second.proc.kill("SIGTERM")
    first.proc.kill("SIGTERM")
    expect(await second.proc.exited).toBe(143)
    expect(await first.proc.exited).toBe(143)
  }, 60_000)
})

describe("--events FILE and --resume", () => {
  test("a --resume run adds to the file, after the lines of the run it resumes; any other run empties it first", async () => {
    const dir = tempDir()
    const name = `resumed-events-${process.pid}`
    const checkpoint = join(dir, "checkpoint.json")
    const events = join(dir, "events.jsonl")
    const file = join(dir, "cluster.yml")
    writeFileSync(file, `
name: ${name}
workers:
  - { host: localhost, devices: 1, path: ${repoRoot} }
job:
  entry: test/fixtures/rank-fixture.ts
  args: [hold]
  epochs: 5
  checkpoint: ${checkpoint}
failure_policy:
  grace: 2s
`)
    /** One run of the file with these flags, stopped once it has formed: the ids its events file has then. */
    const runOnce = async (flags: ReadonlyArray<string>) => {
      const run = spawnLaunch(file, {}, ["--events", events, ...flags])
      launched.push(run.proc)
      await waitFor(() => run.stderr.lines.includes("cohort: cohort formed: all 1 rank(s) run user code"), "the run to form", 20_000)
        .catch((error) => { throw new Error(`${(error as Error).message}\n${said(run)}`) })
      run.proc.kill("SIGTERM")
      expect(await run.proc.exited, said(run)).toBe(143)
      const started = readFileSync(events, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line) as { event: string; id?: string })
      return { pid: run.proc.pid, ids: started.filter((event) => event.event === "run_started").map((event) => event.id), lines: run.stderr.lines }
    }
    const first = await runOnce([])
    expect(first.ids).toEqual([`${name}-${first.pid}`])
    // The first run's checkpoint, as a rank of it would have saved it.
    writeFileSync(
      checkpoint,
      JSON.stringify({ version: 1, run: name, epoch: 1, reason: "checkpoint", savedAt: "2026-01-02T03:04:05.000Z", world: 1, dead: [], state: "{}" }),
      { mode: 0o600 }
    )
    const resumed = await runOnce(["--resume"])
    expect(resumed.ids).toEqual([`${name}-${first.pid}`, `${name}-${resumed.pid}`])
    // The line it ends with names the same file again, which is now true to its word: the next run adds to it too.
    expect(resumed.lines).toContain(`cohort: checkpoint: ${checkpoint} (epoch 1); continue with: bun run launch ${file} --events ${events} --resume`)
    const fresh = await runOnce([])
    expect(fresh.ids).toEqual([`${name}-${fresh.pid}`])
  }, 90_000)
})
