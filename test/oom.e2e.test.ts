/**
 * An OOM kill told apart from any other SIGKILL (the failure rules' `oom`): the launcher runs in a memory
 * cgroup of its own with a limit, one rank takes memory until the kernel's OOM killer ends it, and its
 * agent, seeing the cgroup's oom_kill count rise, reports the death as an OOM kill. A rule on that cause
 * decides the run. Needs root and a writable memory cgroup (v1 or v2); skipped elsewhere, saying why.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { repoRoot } from "./support/launch-scenario.ts"
import { collectLines } from "./support/processes.ts"

const LIMIT = 700 * 1024 * 1024

/** A fresh memory cgroup under this process's own, with the limit set; or why there cannot be one. */
const makeCgroup = (): { readonly dir: string; readonly remove: () => void } | string => {
  if (process.getuid?.() !== 0) return "not root"
  const lines = readFileSync("/proc/self/cgroup", "utf8").split("\n")
  const v1 = lines.find((line) => line.split(":")[1]?.split(",").includes("memory"))
  const v2 = lines.find((line) => line.startsWith("0::"))
  const candidates = [
    ...(v1 === undefined ? [] : [{ dir: join("/sys/fs/cgroup/memory", v1.split(":").slice(2).join(":")), limit: "memory.limit_in_bytes" }]),
    ...(v2 === undefined ? [] : [{ dir: join("/sys/fs/cgroup", v2.slice(3)), limit: "memory.max" }])
  ]
  for (const { dir, limit } of candidates) {
    const own = join(dir, `cohort-oom-${process.pid}`)
    try {
      Bun.spawnSync(["mkdir", own])
      if (!existsSync(join(own, limit))) continue
      writeFileSync(join(own, limit), String(LIMIT))
      if (existsSync(join(own, "memory.swappiness"))) writeFileSync(join(own, "memory.swappiness"), "0")
      return { dir: own, remove: () => rmdirSync(own) }
    } catch {
      continue
    }
  }
  return "no writable memory cgroup (v1 memory controller or v2 memory.max) under this process's own"
}

const cgroup = makeCgroup()
if (typeof cgroup === "string") console.log(`OOM test skipped: ${cgroup}`)
const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

describe.skipIf(typeof cgroup === "string")("an OOM kill", () => {
  test("is told from another SIGKILL: a rule on cause oom decides, and the loss says the OOM killer", async () => {
    const { dir: cg, remove } = cgroup as Exclude<typeof cgroup, string>
    const dir = mkdtempSync(join(tmpdir(), "cohort-oom-"))
    dirs.push(dir)
    const file = join(dir, "cluster.yml")
    writeFileSync(file, [
      "name: oom",
      "controller: { host: 127.0.0.1, port: 0 }",
      `workers: [{ host: localhost, devices: 2, path: ${repoRoot} }]`,
      "job: { entry: test/fixtures/rank-fixture.ts, args: [hog=1, hold] }",
      "failure_policy:",
      "  rules: [{ name: memory, when: { cause: [oom] }, then: fail }]",
      "  grace: 2s",
      ""
    ].join("\n"))
    // The launcher enters the cgroup before it starts: its agent and ranks are born in it.
    const proc = Bun.spawn(["sh", "-c", `echo $$ > ${join(cg, "cgroup.procs")} && exec ${process.execPath} src/cli/launch.ts ${file}`], {
      cwd: repoRoot,
      stdout: "pipe",
      stderr: "pipe"
    })
    const stderr = collectLines(proc.stderr)
    collectLines(proc.stdout)
    try {
      expect(await proc.exited).toBe(1)
      await stderr.done
      expect(stderr.lines.at(-1)).toBe("cohort: run failed: rank 1 of localhost exited with signal SIGKILL (the OOM killer) (rule memory)")
    } finally {
      proc.kill("SIGKILL")
      await proc.exited
      // The cgroup empties as its processes go.
      for (let tries = 0; tries < 50; tries++) {
        try {
          remove()
          break
        } catch {
          await Bun.sleep(100)
        }
      }
    }
  }, 60_000)
})
