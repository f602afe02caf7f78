/**
 * Two runs from one checkout, through the real CLI: each has its own id and
 * registry entry, so `bun run status` finds each while it runs (and the
 * second after the first has ended); a second run of a file whose
 * checkpoint the first is writing is refused at start, naming the first.
 * The first run's start also says what it would otherwise do silently: an
 * existing checkpoint will be replaced when it saves, and a max_failure
 * count above the world can never trip.
 */
import { afterAll, afterEach, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { listeningPort, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { waitFor } from "./support/processes.ts"

const dirs: Array<string> = []
const launched: Array<Bun.Subprocess> = []
afterEach(() => {
  for (const proc of launched.splice(0)) proc.kill("SIGKILL")
})
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const NAME = `concurrent-${process.pid}`

const clusterFile = (dir: string, file: string, checkpoint: string) => {
  const path = join(dir, file)
  writeFileSync(path, `
name: ${NAME}
workers:
  - { host: localhost, devices: 1, path: ${repoRoot} }
job:
  entry: test/fixtures/rank-fixture.ts
  args: [hold]
  checkpoint: ${checkpoint}
failure_policy:
  after_formation: { elastic: { max_failure: 9 } }
  grace: 2s
`)
  return path
}

const status = async (args: ReadonlyArray<string>) => {
  const proc = Bun.spawn([process.execPath, join(repoRoot, "src/cli/status.ts"), ...args], { cwd: repoRoot, stdout: "pipe", stderr: "pipe" })
  launched.push(proc)
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  return { code, stdout, stderr }
}

test("a second run of the same checkpoint is refused naming the first; another checkpoint runs beside it, and status finds each, before and after the other ends", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-concurrent-"))
  dirs.push(dir)
  const checkpoint = join(dir, "checkpoint.json")
  writeFileSync(
    checkpoint,
    JSON.stringify({ version: 1, run: NAME, epoch: 153, reason: "checkpoint", savedAt: "2026-01-02T03:04:05.000Z", world: 1, dead: [], state: "{}" }),
    { mode: 0o600 }
  )
  const file = clusterFile(dir, "cluster.yml", checkpoint)

  const first = spawnLaunch(file)
  launched.push(first.proc)
  const port = await listeningPort(first.stderr.lines)
  const id = `${NAME}-${first.proc.pid}`
  await waitFor(() => first.stderr.lines.includes("cohort: cohort formed: all 1 rank(s) run user code"), "the first run to form", 20_000)
  // What the start says before anything runs.
  expect(first.stderr.lines).toContainEqual(
    `cohort: warning: a checkpoint of epoch 153 exists at ${checkpoint} (run ${NAME}, saved 2026-01-02T03:04:05.000Z): --resume to continue from it; this run will replace it when it saves`
  )
  expect(first.stderr.lines).toContainEqual(
    "cohort: warning: failure_policy.after_formation.elastic.max_failure: 9 can never trip in a world of 1 rank(s): the run fails only when every rank is lost; " +
      "lower it (a count of dead ranks, or a percentage like 25%), or leave it out to tolerate any partial loss"
  )
  // The page's URL carries the run's page token (32 hex digits), which the page needs.
  expect(first.stderr.lines).toContainEqual(expect.stringMatching(new RegExp(`listening on 127\\.0\\.0\\.1:${port} \\(run ${id}; live page: http://127\\.0\\.0\\.1:${port}/\\?token=[0-9a-f]{32} ; bun run status\\)`)))

  // The same file again: refused at start (exit 2), naming the run that owns the checkpoint. Nothing started.
  const second = spawnLaunch(file)
  launched.push(second.proc)
  expect(await second.proc.exited).toBe(2)
  await second.stderr.done
  expect(second.stderr.lines).toHaveLength(1)
  expect(second.stderr.lines[0]).toMatch(new RegExp(
    `^cohort: the checkpoint ${checkpoint.replaceAll(".", "\\.")} belongs to run ${id}, which is running \\(pid ${first.proc.pid}, started \\d\\d:\\d\\d:\\d\\d, ` +
      `page http://127\\.0\\.0\\.1:${port}/\\?token=[0-9a-f]{32}\\): a second run would overwrite it\\. To run both, give this one its own checkpoint ` +
      `with --set job\\.checkpoint=PATH; or wait for that run to end \\(stop it with kill -TERM ${first.proc.pid}\\)$`
  ))

  // Same name, another checkpoint: it runs beside the first, under its own id.
  const other = spawnLaunch(clusterFile(dir, "other.yml", join(dir, "other-checkpoint.json")))
  launched.push(other.proc)
  const otherPort = await listeningPort(other.stderr.lines)
  const otherId = `${NAME}-${other.proc.pid}`
  await waitFor(() => other.stderr.lines.includes("cohort: cohort formed: all 1 rank(s) run user code"), "the second run to form", 20_000)

  // The name is both runs': status lists them and asks for an id; each id shows its own run.
  const byName = await status(["--run", NAME])
  expect(byName.code).toBe(2)
  expect(byName.stderr).toContain(`2 runs named ${NAME} are running here: choose one with --run ID`)
  expect(byName.stderr).toContain(`http://127.0.0.1:${port}/`)
  expect(byName.stderr).toContain(`http://127.0.0.1:${otherPort}/`)
  for (const [each, shown] of [[id, port], [otherId, otherPort]] as const) {
    const one = await status(["--run", each, "--json"])
    expect(one.code, one.stderr).toBe(0)
    expect(JSON.parse(one.stdout)).toMatchObject({ run: NAME, phase: "training" })
    expect(one.stderr).toBe("")
    expect(shown).toBeGreaterThan(0)
  }

  // The first ends: the second is still found, by its id and now by the name alone.
  first.proc.kill("SIGTERM")
  expect(await first.proc.exited).toBe(143)
  const after = await status(["--run", NAME])
  expect(after.code, after.stderr).toBe(0)
  expect(after.stdout).toStartWith(`run ${NAME} · training`)
  expect((await status(["--run", id])).stderr).toMatch(new RegExp(`no run ${id} is running from`))

  other.proc.kill("SIGTERM")
  expect(await other.proc.exited).toBe(143)
}, 90_000)
