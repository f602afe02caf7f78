/**
 * A coordinated `command:` job (job.dataset_size) whose script never calls cohort.init() (issue 35, part 5): it
 * used to "complete" with exit 0 and nothing trained. Now the run fails with one line naming cohort.init(), at
 * once for a script that ends, at the heartbeat timeout for one that keeps running. Plain python3, no torch.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { lastLine, runCommand } from "./support/debian-torch.ts"

const root = resolve(import.meta.dir, "..")
const launch = join(root, "src", "cli", "launch.ts")
const python = Bun.which("python3") ?? "/usr/bin/python3"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const runScript = async (script: string) => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-no-init-"))
  dirs.push(dir)
  writeFileSync(join(dir, "train.py"), script)
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `name: no-init
workers:
  - host: localhost
    devices: 2
    path: ${JSON.stringify(dir)}
job:
  command: [${JSON.stringify(python)}, train.py]
  dataset_size: 1000
  epochs: 2
failure_policy:
  heartbeat_timeout: 3s
  grace: 2s
`)
  const ran = await runCommand([process.execPath, launch, file], 60_000)
  return { ran, transcript: `exit ${ran.code}\n--- stdout ---\n${ran.stdout}\n--- stderr ---\n${ran.stderr}` }
}

const why = "a command: job with job.dataset_size is coordinated, and its script must join it (call cohort.init() before training), " +
  "or drop job.dataset_size to run the command as torchrun would"

describe("a coordinated script that never calls cohort.init()", () => {
  test("one that ends at once: the run fails (exit 1), naming cohort.init(); it never says completed", async () => {
    const { ran, transcript } = await runScript("print('training on my own')\n")
    expect(ran.code, transcript).toBe(1)
    // Both ranks ended before the coordinator judged either (a second after each exit): the run's end says it.
    expect(lastLine(ran.stderr), transcript).toBe(`cohort: run failed: every rank ended without attaching, so nothing trained: ${why}`)
    expect(ran.stderr, transcript).not.toContain("run completed")
  }, 90_000)

  test("one that keeps running: the run fails at the heartbeat timeout (3 s here), naming cohort.init()", async () => {
    const { ran, transcript } = await runScript("import time\nprint('training on my own', flush=True)\ntime.sleep(60)\n")
    expect(ran.code, transcript).toBe(1)
    expect(lastLine(ran.stderr), transcript).toMatch(new RegExp(`^cohort: run failed: rank\\(s\\) [01](, [01])? lost: never attached within 3\\.0 s of the cohort's formation: ${why.replace(/[().]/g, "\\$&")}`))
  }, 90_000)
})
