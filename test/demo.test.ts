/**
 * README command 1 as a user meets it: the demo CLI in a real process, its
 * verdict line and exit status, for each phase a fault can fall in.
 */
import { describe, expect, test } from "bun:test"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

const demo = join(import.meta.dir, "..", "src", "cli", "demo.ts")
const dir = mkdtempSync(join(tmpdir(), "cohort-demo-"))

const runDemo = async (yaml: string) => {
  const file = join(dir, `${Bun.hash(yaml)}.yml`)
  writeFileSync(file, yaml)
  const proc = Bun.spawn([process.execPath, demo, file], { stdout: "pipe", stderr: "pipe" })
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  return { stdout, stderr, code }
}

const config = (policy: string, fault: string) => `
name: test-demo
failure_policy:
${policy}
demo:
  ranks: 4
  work: 600ms
  formation_after: 150ms
  faults: [${fault}]
`

describe("bun run demo", () => {
  test("a fault after formation under elastic: DEGRADED, status 0, the survivors finish", async () => {
    const { code, stderr, stdout } = await runDemo(
      config("  after_formation: { elastic: { max_failure: 50% } }", "{ rank: 2, at: 350ms, exit: 1 }")
    )
    expect(stderr).toContain("run completed DEGRADED (1 of 4 ranks lost")
    expect(code).toBe(0)
    for (const rank of [0, 1, 3]) expect(stdout).toContain(`[rank ${rank}] step 4/4`)
    expect(stdout).not.toContain("[rank 2] step 4/4")
  }, 10_000)

  test("a fault before formation under kill_all: FAILED with the root cause, status 1", async () => {
    const { code, stderr } = await runDemo(config("  before_formation: kill_all", "{ rank: 1, at: 10ms, exit: 7 }"))
    expect(stderr).toContain("run failed: rank 1 exited with status 7")
    expect(code).toBe(1)
  }, 10_000)

  test("max_failure crossed: FAILED naming dead, world and threshold", async () => {
    const { code, stderr } = await runDemo(
      config("  after_formation: { elastic: { max_failure: 1 } }", "{ rank: 0, at: 300ms, exit: 3 }")
    )
    expect(stderr).toContain("run failed: max_failure exceeded: 1/4 ranks dead, threshold 1")
    expect(code).toBe(1)
  }, 10_000)

  test("a bad value: one located error line, no stack trace, status 2", async () => {
    const { code, stderr } = await runDemo("failure_policy:\n  grace: soon\n")
    expect(stderr.trim()).toBe(
      `cohort: error: ${join(dir, `${Bun.hash("failure_policy:\n  grace: soon\n")}.yml`)}: failure_policy.grace (line 2, col 10): ` +
        `expected a duration like "250ms", "5s", "10m" or "1h", got "soon"`
    )
    expect(code).toBe(2)
  }, 10_000)
})
