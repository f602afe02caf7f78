/**
 * flodl's form of `ssh.options` against a real sshd (this machine, reached as another host):
 * `Key=Value` entries reach ssh as `-o` settings, so the preflight's session gets through with
 * them, and `--dry-run` warns about a BatchMode turned off.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { type Sshd, sshdUnavailable, startSshd } from "./support/sshd.ts"

const unavailable = sshdUnavailable()
if (unavailable !== undefined) console.log(`flodl ssh.options tests skipped: ${unavailable}`)

let sshd: Sshd | undefined
let dir: string | undefined
beforeAll(async () => {
  if (unavailable === undefined) sshd = await startSshd()
})
afterAll(() => {
  sshd?.stop()
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
})

describe.skipIf(unavailable !== undefined)("flodl's ssh.options over a real ssh session", () => {
  test("Key=Value entries are -o settings: --dry-run's preflight passes, and BatchMode=no is warned about", async () => {
    dir = mkdtempSync(join(tmpdir(), "cohort-flodl-ssh-"))
    const file = join(dir, "cluster.yml")
    // The sshd's throwaway host key needs these settings: were they not -o options, ssh would take the first as the host.
    const options = ["UserKnownHostsFile=/dev/null", "StrictHostKeyChecking=no", "LogLevel=ERROR", "BatchMode=no"]
    writeFileSync(file, [
      "name: flodl-ssh",
      "controller: { host: 127.0.0.1, port: 0 }",
      "workers:",
      `  - { host: sshhost, devices: 1, path: ${repoRoot}, ssh: { target: 127.0.0.1, port: ${sshd!.port}, identity_file: ${sshd!.identityFile}, options: ${JSON.stringify(options)} } }`,
      "job: { entry: examples/train.ts }",
      ""
    ].join("\n"))
    const launch = spawnLaunch(file, {}, ["--dry-run"])
    expect(await launch.proc.exited).toBe(0)
    expect(launch.stderr.lines.filter((line) => line.includes("BatchMode"))).toEqual([
      "cohort: warning: sshhost: ssh.options set BatchMode=no: cohort's ssh is not interactive, so ssh may wait for a password or host key answer nobody types; remove it unless this host needs it"
    ])
    expect(launch.stdout.lines[0]).toBe("run flodl-ssh: 1 rank(s) on 1 host(s)")
  }, 30_000)
})
