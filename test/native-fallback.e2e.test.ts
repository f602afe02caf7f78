/**
 * Without cohort's native library (no cargo at install, a broken toolchain:
 * here `COHORT_NATIVE_LIB` names a file that is not there), a training run
 * across two hosts still completes: the relays and the launcher's controller
 * reduce with the TypeScript kernels. The launcher says so in exactly one
 * line (its controller and its in-process agent share a machine), and the
 * self-deployed agent in one line for its own host. Real launcher, agent,
 * relay and rank processes; the ranks end with equal weights, so the
 * reductions were whole.
 */
import { afterAll, afterEach, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { collectLines, waitFor } from "./support/processes.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))
const started: Array<Bun.Subprocess> = []
afterEach(() => {
  for (const proc of started.splice(0)) proc.kill("SIGKILL")
})

const MISSING = "/nonexistent/libcohort_native.so"
const WARNING = "CPU reductions run in TypeScript (the same results, 2 to 6 times slower on large tensors): " +
  `cohort's native library cannot be loaded from ${MISSING} (no such file); build it with \`bun run build:native\` (needs cargo), ` +
  "or point COHORT_NATIVE_LIB at it"

test("without the native library a two-host training run completes, with one warning line per machine", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-fallback-"))
  dirs.push(dir)
  const file = join(dir, "cluster.yml")
  // A checkpoint of its own: an earlier run's would be one to replace, and said so in a warning of its own.
  writeFileSync(file, `
name: fallback
controller: { host: 127.0.0.1, port: 0 }
workers:
  - { host: localhost, devices: 2, path: ${repoRoot} }
  - { host: selfhost, devices: 2, agent: self, path: ${repoRoot} }
job: { entry: examples/train.ts, dataset_size: 20000, epochs: 2, checkpoint: ${join(dir, "checkpoint.json")} }
failure_policy: { grace: 2s }
`)
  const env = { COHORT_NATIVE_LIB: MISSING }
  const launch = spawnLaunch(file, env)
  started.push(launch.proc)
  await waitFor(() => launch.stderr.lines.some((line) => line.includes("waiting for selfhost to join")), "the launcher to wait for selfhost", 15_000)
  const hint = launch.stderr.lines.find((line) => line.includes("waiting for selfhost to join"))!
  const [, controller, saltFile] = /--controller (\S+) --host selfhost --salt-file <a copy of (\S+)>/.exec(hint)!
  const agent = Bun.spawn([process.execPath, "src/cli/agent.ts", "--controller", controller!, "--host", "selfhost", "--devices", "2", "--salt-file", join(repoRoot, saltFile!)], {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdout: "pipe",
    stderr: "pipe"
  })
  started.push(agent)
  const agentErr = collectLines(agent.stderr)
  expect(await agent.exited).toBe(0)
  expect(await launch.proc.exited).toBe(0)
  await Promise.all([agentErr.done, launch.stdout.done, launch.stderr.done])
  expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")

  expect(launch.stderr.lines.filter((line) => line.includes("warning"))).toEqual([`cohort: warning: ${WARNING}`])
  expect(agentErr.lines.filter((line) => line.includes("warning"))).toEqual([`cohort agent selfhost: warning: ${WARNING}`])

  // Every rank of both hosts (selfhost's forwarded by its agent) ends with the same weights.
  const checksums = launch.stdout.lines.flatMap((line) => {
    const match = /^\[(localhost|selfhost):cpu:r\d\] final weights checksum ([0-9a-f]+)$/.exec(line)
    return match === null ? [] : [[match[1], match[2]] as const]
  })
  expect(checksums.map(([host]) => host).sort()).toEqual(["localhost", "localhost", "selfhost", "selfhost"])
  expect(new Set(checksums.map(([, sum]) => sum)).size).toBe(1)
}, 120_000)
