/**
 * `bun run agent`: a self-deployed agent joins a launcher that waits for an
 * `agent: self` host, runs its ranks, and exits 0; refused, it exits 2; with
 * nobody to dial, 1; bad arguments, 2 with the usage.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { collectLines, waitFor } from "./support/processes.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const agent = (args: ReadonlyArray<string>) => {
  const proc = Bun.spawn([process.execPath, "src/cli/agent.ts", ...args], { cwd: repoRoot, stdout: "pipe", stderr: "pipe" })
  return { proc, stdout: collectLines(proc.stdout), stderr: collectLines(proc.stderr) }
}

const launchWaitingForSelf = async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-self-"))
  dirs.push(dir)
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: self
controller: { host: 127.0.0.1, port: 0 }
workers:
  - { host: selfhost, devices: 2, agent: self, path: ${repoRoot} }
job: { entry: examples/train.ts, dataset_size: 20000, epochs: 2 }
failure_policy: { grace: 2s }
`)
  const launch = spawnLaunch(file)
  await waitFor(() => launch.stderr.lines.some((line) => line.includes("waiting for selfhost to join")), "the launcher to wait for selfhost", 15_000)
  const hint = launch.stderr.lines.find((line) => line.includes("waiting for selfhost to join"))!
  const [, controller, saltFile] = /--controller (\S+) --host selfhost --salt-file <a copy of (\S+)>/.exec(hint)!
  return { launch, controller: controller!, saltFile: join(repoRoot, saltFile!) }
}

describe("bun run agent", () => {
  test("joins an agent: self host's run, runs its ranks, and exits 0 with the run", async () => {
    const { controller, launch, saltFile } = await launchWaitingForSelf()
    const joined = agent(["--controller", controller, "--host", "selfhost", "--devices", "2", "--salt-file", saltFile])
    expect(await joined.proc.exited).toBe(0)
    expect(await launch.proc.exited).toBe(0)
    await joined.stdout.done
    expect(joined.stdout.lines.filter((line) => /^\[selfhost:cpu:r[01]\] final weights checksum/.test(line))).toHaveLength(2)
    expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
  }, 60_000)

  test("refused (a host the run does not declare): exit 2, saying why", async () => {
    const { controller, launch, saltFile } = await launchWaitingForSelf()
    const stranger = agent(["--controller", controller, "--host", "stranger", "--devices", "2", "--salt-file", saltFile])
    expect(await stranger.proc.exited).toBe(2)
    await stranger.stderr.done
    expect(stranger.stderr.lines.join("\n")).toContain("the launcher refused this host: host stranger is not among the workers of this run")
    launch.proc.kill("SIGINT")
    expect(await launch.proc.exited).toBe(130)
  }, 60_000)

  test("nobody to dial: exit 1 (transient)", async () => {
    const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
    const port = probe.port
    probe.stop(true)
    const lonely = agent(["--controller", `127.0.0.1:${port}`, "--devices", "1"])
    expect(await lonely.proc.exited).toBe(1)
  }, 30_000)

  test.each([
    [["--devices", "2"], "--controller HOST:PORT is required"],
    [["--controller", "nowhere"], `--controller: expected HOST:PORT (like 10.0.0.1:29400), got "nowhere"`],
    [["--controller", "h:1", "--devices", "many"], `--devices: expected a number of CPU ranks (4), GPU indices (0,1) or all, got "many"`],
    [["--controller", "h:1", "--salt"], "unknown argument --salt"]
  ])("bad arguments %p: exit 2 with the reason", async (args, says) => {
    const bad = agent(args)
    expect(await bad.proc.exited).toBe(2)
    await bad.stderr.done
    expect(bad.stderr.lines.join("\n")).toContain(says)
  })
})
