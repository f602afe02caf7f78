/**
 * The relay and a rank of another protocol version, through a real launch: the rank's hello says version 99 and
 * the relay refuses it, naming both versions and what to do, and closes (test/fixtures/wrong_version_client.py
 * prints what it was told). No torch needed.
 */
import { expect, test } from "bun:test"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"

const root = resolve(import.meta.dir, "..")
const python = Bun.which("python3") ?? "/usr/bin/python3"

test("a rank whose hello speaks another protocol version is refused by its relay, saying both versions", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-wrong-version-"))
  const file = join(dir, "cluster.yml")
  writeFileSync(
    file,
    `name: wrong-version
controller: { host: 127.0.0.1, port: 0 }
workers:
  - host: localhost
    devices: 1
    path: ${JSON.stringify(root)}
job:
  command: [${python}, ${join(import.meta.dir, "fixtures", "wrong_version_client.py")}]
`
  )
  const child = Bun.spawn([process.execPath, join(root, "src", "cli", "launch.ts"), file], { stdout: "pipe", stderr: "pipe", timeout: 30_000 })
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  expect(stdout, stderr).toContain(
    "[localhost:cpu:r0] {'t': 'refused', 'reason': 'rank 0 speaks version 99 of the rank-relay protocol and this relay speaks 2: " +
      "use the client that comes with this cohort (python/cohort in its checkout)'}"
  )
  expect(code).toBe(0)
}, 40_000)
