/**
 * No child of an agent holds the salt (issue 18, item 9), on real processes.
 * A launcher waits for an `agent: self` host; the test starts that agent
 * with the salt file the launcher wrote, so it knows the salt. Its ranks run
 * test/fixtures/key-thief-fixture.ts, which tries to act as its relay and its
 * host with the key it was given. While they wait, the test reads every
 * process's environment and argv. The run encrypts its frames
 * (`controller.encrypt: true`), so its join and control links
 * run encrypted from end to end here, with no option given to the agent.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { hostKey, rankKey } from "../src/wire/Keys.ts"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { allPids, collectLines, waitFor } from "./support/processes.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const readable = (file: string) => {
  try {
    return readFileSync(file, "utf8")
  } catch {
    return "" // gone, or not ours to read
  }
}

describe("scoped keys", () => {
  test("ranks hold only their own rank's key, the relay its host's (not in its environment), nobody the salt; a rank cannot act as its relay or its host", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-keys-"))
    dirs.push(dir)
    const file = join(dir, "cluster.yml")
    writeFileSync(file, `
name: keys
controller: { host: 127.0.0.1, port: 0, encrypt: true }
workers:
  - { host: keyhost, devices: 2, agent: self, path: ${repoRoot} }
job: { entry: test/fixtures/key-thief-fixture.ts, args: ["out=${dir}"] }
failure_policy: { grace: 2s }
`)
    const launch = spawnLaunch(file)
    await waitFor(() => launch.stderr.lines.some((line) => line.includes("waiting for keyhost to join")), "the launcher to wait for keyhost", 15_000)
    const hint = launch.stderr.lines.find((line) => line.includes("waiting for keyhost to join"))!
    const [, controller, saltFile] = /--controller (\S+) --host keyhost --salt-file <a copy of (\S+)>/.exec(hint)!
    const saltHex = readFileSync(join(repoRoot, saltFile!), "utf8").trim()
    const salt = new Uint8Array(Buffer.from(saltHex, "hex"))
    const agent = Bun.spawn([process.execPath, "src/cli/agent.ts", "--controller", controller!, "--host", "keyhost", "--devices", "2", "--salt-file", join(repoRoot, saltFile!)], {
      cwd: repoRoot,
      stdout: "pipe",
      stderr: "pipe"
    })
    const agentOut = collectLines(agent.stdout)
    try {
      await waitFor(() => [0, 1].every((rank) => existsSync(join(dir, `thief-${rank}.json`))), "both ranks to report their tries", 30_000)
      // What each rank was given, and what its tries got.
      for (const rank of [0, 1]) {
        const report = JSON.parse(readFileSync(join(dir, `thief-${rank}.json`), "utf8")) as { key: string; tries: Record<string, string> }
        expect(report.key).toBe(Buffer.from(rankKey(salt, rank)).toString("hex"))
        for (const [what, got] of Object.entries(report.tries)) expect({ rank, what, got: got.split(":")[0] }).toEqual({ rank, what, got: "ended" })
      }
      // Nobody's environment or argv holds the salt or the host's key; each rank's key is in its own environment only.
      const secrets = { salt: saltHex, hostKey: Buffer.from(hostKey(salt, "keyhost")).toString("hex") }
      const rankKeys = [0, 1].map((rank) => Buffer.from(rankKey(salt, rank)).toString("hex"))
      let holders = 0
      for (const pid of allPids()) {
        const environ = readable(`/proc/${pid}/environ`).toLowerCase()
        const argv = readable(`/proc/${pid}/cmdline`).toLowerCase()
        for (const [name, secret] of Object.entries(secrets)) {
          expect({ pid, name, inEnviron: environ.includes(secret), inArgv: argv.includes(secret) }).toEqual({ pid, name, inEnviron: false, inArgv: false })
        }
        const held = rankKeys.filter((key) => environ.includes(key))
        expect(held.length).toBeLessThanOrEqual(1)
        holders += held.length
      }
      expect(holders).toBe(2)
      writeFileSync(join(dir, "go"), "")
      expect(await agent.exited).toBe(0)
      expect(await launch.proc.exited).toBe(0)
      await launch.stderr.done
      expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
      expect(launch.stderr.lines.some((line) => line.includes("every link's frames are encrypted (controller.encrypt: true)"))).toBe(true)
      // The tries were dropped as noise: none of them reached the relay's or the run's bookkeeping.
      expect(agentOut.lines.filter((line) => /refused|rejected/i.test(line))).toEqual([])
    } finally {
      agent.kill("SIGKILL")
      launch.proc.kill("SIGKILL")
    }
  }, 60_000)
})
