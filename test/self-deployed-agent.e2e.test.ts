/**
 * `bun run agent`: a self-deployed agent joins a launcher that waits for an
 * `agent: self` host, runs its ranks, and exits 0; refused, it exits 2; with
 * nobody to dial, 1; bad arguments, 2 with the usage.
 *
 * The launcher's hint is a command that works as pasted on a CPU host (it
 * names the host's devices and checkout; only the salt file is to be copied),
 * and the agent's ranks' lines reach the launcher, whose terminal, `--ranks`
 * and `--log-dir` treat them like any host's, while the agent's own terminal
 * shows them only with `--local-output`. An agent without the salt, against
 * a launcher that needs it, is refused for good (exit 2, saying where the
 * salt is), even with `--persist`.
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { collectLines, waitFor } from "./support/processes.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))
const started: Array<Bun.Subprocess> = []
afterEach(() => {
  for (const proc of started.splice(0)) proc.kill("SIGKILL")
})

const agent = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>> = {}) => {
  const proc = Bun.spawn([process.execPath, "src/cli/agent.ts", ...args], { cwd: repoRoot, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" })
  started.push(proc)
  return { proc, stdout: collectLines(proc.stdout), stderr: collectLines(proc.stderr) }
}

const HINT = "waiting for selfhost to join"

const launchWaitingForSelf = async (flags: ReadonlyArray<string> = []) => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-self-"))
  dirs.push(dir)
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: self
controller: { host: 127.0.0.1, port: 0 }
workers:
  - { host: selfhost, devices: 2, agent: self, path: ${repoRoot} }
job: { entry: examples/train.ts, dataset_size: 20000, epochs: 2, checkpoint: ${join(dir, "checkpoint.json")} }
failure_policy: { grace: 2s }
`)
  const launch = spawnLaunch(file, {}, flags)
  started.push(launch.proc)
  await waitFor(() => launch.stderr.lines.some((line) => line.includes(HINT)), "the launcher to wait for selfhost", 15_000)
  const hint = launch.stderr.lines.find((line) => line.includes(HINT))!
  // The host's devices and checkout as the file declares them; the salt file is the one thing to copy.
  const parsed = /run {2}(bun run agent --controller (\S+) --host selfhost --salt-file <a copy of (\S+)> --devices 2 --path (\S+))$/.exec(hint)
  expect(parsed, hint).not.toBeNull()
  const [, command, controller, saltFile, path] = parsed!
  expect(path).toBe(repoRoot)
  return { launch, dir, command: command!, controller: controller!, saltFile: join(repoRoot, saltFile!) }
}

const checksumLine = (rank: number) => new RegExp(`^\\[selfhost:cpu:r${rank}\\] final weights checksum [0-9a-f]+$`)

describe("bun run agent", () => {
  test("the printed command, pasted on this CPU host, joins and runs its ranks; their lines reach the launcher (--ranks, --log-dir), not the agent's terminal", async () => {
    const logDir = join(mkdtempSync(join(tmpdir(), "cohort-self-logs-")), "logs")
    dirs.push(dirname(logDir))
    const { command, launch, saltFile } = await launchWaitingForSelf(["--log-dir", logDir, "--ranks", "1"])
    // As a person would paste it into a shell in the checkout, once the salt file is copied (here: the same path).
    const pasted = command.replace(/<a copy of \S+>/, saltFile)
    const shell = Bun.spawn(["sh", "-c", pasted], {
      cwd: repoRoot,
      env: { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ""}` },
      stdout: "pipe",
      stderr: "pipe"
    })
    started.push(shell)
    const [agentOut, agentErr] = [collectLines(shell.stdout), collectLines(shell.stderr)]
    expect(await shell.exited, agentErr.lines.join("\n")).toBe(0)
    expect(await launch.proc.exited).toBe(0)
    await Promise.all([agentOut.done, agentErr.done, launch.stdout.done, launch.stderr.done])
    expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
    // --ranks 1: the launcher's terminal shows rank 1's lines and not rank 0's.
    expect(launch.stdout.lines.filter((line) => checksumLine(1).test(line))).toHaveLength(1)
    expect(launch.stdout.lines.some((line) => line.startsWith("[selfhost:cpu:r0]"))).toBe(false)
    // --log-dir: every rank's lines, prefixes stripped, whatever the filter.
    for (const rank of [0, 1]) {
      const log = join(logDir, `rank-${rank}.log`)
      expect(existsSync(log), `${log} exists`).toBe(true)
      expect(readFileSync(log, "utf8")).toMatch(/^final weights checksum [0-9a-f]+$/m)
    }
    // The agent's terminal: its own lines only.
    expect([...agentOut.lines, ...agentErr.lines].filter((line) => line.startsWith("[selfhost:"))).toEqual([])
  }, 90_000)

  test("--local-output: the agent's terminal shows its ranks' lines too, and the launcher's still does", async () => {
    const { controller, launch, saltFile } = await launchWaitingForSelf()
    const joined = agent(["--controller", controller, "--host", "selfhost", "--devices", "2", "--salt-file", saltFile, "--local-output"])
    expect(await joined.proc.exited).toBe(0)
    expect(await launch.proc.exited).toBe(0)
    await Promise.all([joined.stdout.done, launch.stdout.done])
    for (const lines of [joined.stdout.lines, launch.stdout.lines]) {
      expect(lines.filter((line) => checksumLine(0).test(line) || checksumLine(1).test(line))).toHaveLength(2)
    }
  }, 90_000)

  test("refused (a host the run does not declare): exit 2, saying why", async () => {
    const { controller, launch, saltFile } = await launchWaitingForSelf()
    const stranger = agent(["--controller", controller, "--host", "stranger", "--devices", "2", "--salt-file", saltFile])
    expect(await stranger.proc.exited).toBe(2)
    await stranger.stderr.done
    expect(stranger.stderr.lines.join("\n")).toContain("the launcher refused this host: host stranger is not among the workers of this run")
    launch.proc.kill("SIGINT")
    expect(await launch.proc.exited).toBe(130)
  }, 60_000)

  test("without the salt, against a launcher that needs it: exit 2 at once, saying so and where the salt is; --persist does not dial again", async () => {
    const { controller, launch } = await launchWaitingForSelf()
    const saltless = agent(["--controller", controller, "--host", "selfhost", "--devices", "2", "--persist"], { COHORT_SALT: "" })
    expect(await saltless.proc.exited).toBe(2)
    await saltless.stderr.done
    const [port] = controller.split(":").slice(-1)
    expect(saltless.stderr.lines).toEqual([
      `cohort agent selfhost: error: agent of selfhost: the launcher at 127.0.0.1:${port} admits only agents that hold the run's salt, ` +
      `and this one has none: copy the salt file named in the launcher's line "${HINT}" (under .cohort/salts/ where the launcher runs) ` +
      "to this machine and start the agent again with --salt-file FILE (or --salt-stdin, or COHORT_SALT)"
    ])
    // The launcher heard it as noise (counted nowhere), named the host, and still waits.
    await waitFor(() => launch.stderr.lines.some((line) => /dropped a join connection from 127\.0\.0\.1:\d+: an agent for host "selfhost" without the run's salt/.test(line)), "the launcher's note")
    expect(launch.proc.exitCode).toBeNull()
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

  // No GPU to be found: no native library to ask CUDA through, no nvidia-smi on PATH.
  const noGpu = { PATH: dirname(process.execPath), COHORT_NATIVE_LIB: "/nonexistent/libcohort_native.so" }
  test.each([
    [
      [],
      "cohort agent: host h has --devices all (the default), but no GPU was found there (nvidia-smi is not on PATH); " +
      "give a number of CPU ranks (--devices 4) or the GPU indices (--devices 0,1)"
    ],
    [
      ["--devices", "all"],
      "cohort agent: host h has --devices all, but no GPU was found there (nvidia-smi is not on PATH); " +
      "give a number of CPU ranks (--devices 4) or the GPU indices (--devices 0,1)"
    ],
    [
      ["--devices", "0,1"],
      "cohort agent: host h lists GPU indices [0, 1], but its GPUs cannot be listed (nvidia-smi is not on PATH); " +
      "give a number of CPU ranks (--devices 4) on a machine without GPUs"
    ]
  ])("no GPU here, devices %p: exit 2, the fix written as the flag", async (args, says) => {
    const bad = agent(["--controller", "127.0.0.1:1", "--host", "h", ...args], noGpu)
    expect(await bad.proc.exited).toBe(2)
    await bad.stderr.done
    expect(bad.stderr.lines).toEqual([says])
  })
})
