/**
 * A second local Unix user against a run (issue 18): created with useradd
 * (CI runs as root; elsewhere this file is skipped, and says so), it runs
 * test/fixtures/intruder-fixture.ts under its own uid while root's run holds
 * its ranks. It must read none of the run's files, folders or processes,
 * must not join over loopback, reach the relay's socket or open the window.
 *
 * The intruder runs as one self-contained executable (bun build --compile) in
 * a world-readable folder under /tmp, never from the checkout: a clone in a
 * private home (0700, as root's is on Debian) is closed to the second user,
 * and so are its sources, node_modules and bun.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { chmodSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { clusterFile, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { environment, pidFiles, waitFor } from "./support/processes.ts"
import { secondUser } from "./support/second-user.ts"


const who = secondUser()
if (typeof who === "string") console.log(`second-user tests skipped: ${who}`)

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

/**
 * A folder under /tmp itself, open to all (not under $TMPDIR, which may be private): the second user must be
 * able to reach what is in it, so that what refuses them is each file's own mode, not a folder on the way.
 */
const openFolder = (prefix: string): string => {
  const dir = mkdtempSync(join("/tmp", prefix))
  dirs.push(dir)
  chmodSync(dir, 0o755)
  return dir
}

/** The intruder fixture built into one executable that needs nothing of the checkout, in a folder the second user can read. */
const buildIntruder = (): string => {
  const executable = join(openFolder("cohort-intruder-"), "intruder")
  const build = Bun.spawnSync(
    [process.execPath, "build", "--compile", join(repoRoot, "test", "fixtures", "intruder-fixture.ts"), "--outfile", executable],
    { cwd: repoRoot, stdout: "pipe", stderr: "pipe" }
  )
  if (build.exitCode !== 0) throw new Error(`bun build --compile of the intruder fixture failed: ${build.stderr.toString().trim()}`)
  chmodSync(executable, 0o755)
  return executable
}

describe.skipIf(typeof who === "string")("a second local user", () => {
  test("reads no run file, folder or process, gets no answer over loopback, no relay socket and no /start", async () => {
    const { uid, gid } = who as { uid: number; gid: number }
    const intruder = buildIntruder()
    const dir = openFolder("cohort-user2-")
    const file = join(dir, "cluster.yml")
    const run = `user2-${process.pid}`
    writeFileSync(file, clusterFile({ name: run, devices: 2, args: ["hold"] }, dir).replace("workers:", "controller: { host: 127.0.0.1, port: 0 }\nworkers:"))
    const launch = spawnLaunch(file, {}, ["--events", join(dir, "events.jsonl"), "--log-dir", join(dir, "logs")])
    try {
      await waitFor(() => pidFiles(dir).length === 2, "two ranks running user code", 20_000)
      const port = Number(/listening on [\d.]+:(\d+)/.exec(launch.stderr.lines.find((line) => /listening on/.test(line)) ?? "")?.[1])
      const rankPid = pidFiles(dir)[0]!
      const envelope = JSON.parse(environment(rankPid).COHORT_RANK_ENVELOPE!) as { dir: string; socket: string }
      const cohort = join(repoRoot, ".cohort")
      const logs = readdirSync(join(dir, "logs")).map((name) => join(dir, "logs", name))
      const targets = {
        port,
        files: [join(cohort, "runs", `${run}-${launch.proc.pid}.json`), join(dir, "events.jsonl"), ...logs],
        folders: [cohort, join(cohort, "runs"), envelope.dir],
        rankPid,
        relaySocket: envelope.socket
      }
      const attempt = Bun.spawnSync(
        ["setpriv", `--reuid=${uid}`, `--regid=${gid}`, "--clear-groups", intruder, JSON.stringify(targets)],
        { cwd: dir, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir }, stdout: "pipe", stderr: "pipe", timeout: 30_000 }
      )
      expect(attempt.stderr.toString()).toBe("")
      const got = JSON.parse(attempt.stdout.toString()) as Record<string, unknown>
      expect(got.uid).toBe(uid)
      expect(Object.keys(got.files as object).length).toBeGreaterThanOrEqual(3)
      for (const [path, how] of Object.entries(got.files as Record<string, string>)) expect({ path, how }).toEqual({ path, how: "EACCES" })
      for (const [path, how] of Object.entries(got.folders as Record<string, string>)) expect({ path, how }).toEqual({ path, how: "EACCES" })
      expect(got.environ).toBe("EACCES")
      expect(got.memory).toBe("EACCES")
      expect(got.joinOpen).toMatch(/^ended: /)
      expect(got.relay).toBe("EACCES")
      expect(got.start).toBe(401)
      // The run never noticed.
      launch.proc.kill("SIGTERM")
      expect(await launch.proc.exited).toBe(143)
    } finally {
      launch.proc.kill("SIGKILL")
    }
  }, 60_000)
})
