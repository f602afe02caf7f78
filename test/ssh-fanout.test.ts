import { describe, expect, test } from "bun:test"
import * as Duration from "effect/Duration"
import { parseDevices, parseEndpoint, readAgentSpec, writeAgentSpec } from "../src/agent/AgentSpec.ts"
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { agentTag, cleanupScript } from "../src/launcher/hosts/RemoteCleanup.ts"
import { batchModeOverridden, remoteAgentScript, shellQuote, sshCommand, sshDefaults } from "../src/launcher/hosts/SshFanOut.ts"
import type { Worker } from "../src/config/ClusterConfig.ts"
import { commandLine, waitFor } from "./support/processes.ts"

const worker = (overrides: Partial<Worker> = {}): Worker => ({
  host: "node-b",
  devices: { _tag: "Count", count: 2 },
  path: "/srv/cohort",
  env: {},
  ssh: undefined,
  tunnel: false,
  agent: undefined,
  ...overrides
})

const ssh = (options: Partial<NonNullable<Worker["ssh"]>>): Worker["ssh"] => ({
  target: undefined,
  user: undefined,
  port: undefined,
  identityFile: undefined,
  options: [],
  ...options
})

describe("ssh command", () => {
  test("the user's options come first (OpenSSH takes the first value), then the defaults, port, user, key, target", () => {
    const argv = sshCommand(worker({ ssh: ssh({ target: "10.0.0.2", user: "train", port: 2222, identityFile: "/k", options: ["-o", "BatchMode=no"] }) }), "true")
    expect(argv.slice(0, 3)).toEqual(["ssh", "-o", "BatchMode=no"])
    expect(argv.slice(3, 3 + sshDefaults.length)).toEqual(sshDefaults)
    expect(argv.slice(3 + sshDefaults.length)).toEqual(["-p", "2222", "-l", "train", "-i", "/k", "10.0.0.2", "bash --norc --noprofile -c 'true'"])
  })

  test("a tunnel carries the launcher's port to the host's loopback, and the session fails without it, whatever the user's options", () => {
    const argv = sshCommand(worker({ tunnel: true, ssh: ssh({ options: ["-o", "ExitOnForwardFailure=no"] }) }), "true", 29400)
    // OpenSSH keeps an option's first value: the forward's check comes before the user's options.
    expect(argv.slice(0, 7)).toEqual(["ssh", "-R", "127.0.0.1:29400:127.0.0.1:29400", "-o", "ExitOnForwardFailure=yes", "-o", "ExitOnForwardFailure=no"])
  })

  test("the host is the target unless ssh.target says otherwise", () => {
    expect(sshCommand(worker(), "true").at(-2)).toBe("node-b")
  })

  test("BatchMode turned off is noticed, in either spelling; on is not", () => {
    expect(batchModeOverridden(worker({ ssh: ssh({ options: ["-o", "BatchMode=no"] }) }))).toBe(true)
    expect(batchModeOverridden(worker({ ssh: ssh({ options: ["-oBatchMode=no"] }) }))).toBe(true)
    expect(batchModeOverridden(worker({ ssh: ssh({ options: ["-o", "batchmode = Ask "] }) }))).toBe(true)
    expect(batchModeOverridden(worker({ ssh: ssh({ options: ["-o", "BatchMode=yes"] }) }))).toBe(false)
    expect(batchModeOverridden(worker({ ssh: ssh({ options: ["-o", " batchmode = YES"] }) }))).toBe(false)
    expect(batchModeOverridden(worker())).toBe(false)
  })

  test("every interpolated value is single-quoted, quotes included", () => {
    expect(shellQuote("it's")).toBe(`'it'\\''s'`)
    const script = remoteAgentScript(worker({ path: "/srv/it's here; rm -rf /", host: "node'b" }), "run/node_b", Duration.seconds(5), 2)
    expect(script).toContain(`cd '/srv/it'\\''s here; rm -rf /'`)
    expect(script).toContain(`COHORT_NET_TIMEOUT_SCALE='2'`)
    // A shell that runs it reads the spec from stdin into a variable it never exports: nothing of it reaches argv or an environment.
    expect(script.split("\n")[0]).toBe("IFS= read -r spec || exit 2")
    expect(script).not.toContain("export")
  })

  test("the script runs: it reads the spec line, enters the path, and stops at a missing checkout with the host named", () => {
    const result = Bun.spawnSync(["bash", "-c", remoteAgentScript(worker({ path: "/nonexistent" }), "run/node-b", Duration.seconds(1), 1)], { stdin: Buffer.from("{}\n"), stderr: "pipe" })
    expect(result.exitCode).toBe(2)
    expect(result.stderr.toString()).toContain("/nonexistent is not a directory on node-b")
  })
  test("the script hands the agent its spec on descriptor 3 alone: not in its environment, not in its argv", () => {
    // A stand-in checkout whose agent reports what it was given.
    const checkout = mkdtempSync(join(tmpdir(), "cohort-fanout-"))
    try {
      mkdirSync(join(checkout, "src", "cli"), { recursive: true })
      mkdirSync(join(checkout, "node_modules", ".bin"), { recursive: true })
      symlinkSync(process.execPath, join(checkout, "node_modules", ".bin", "bun"))
      writeFileSync(join(checkout, "src", "cli", "agent.ts"), `
import { readFileSync } from "node:fs"
const environ = readFileSync("/proc/self/environ", "utf8")
const argv = readFileSync("/proc/self/cmdline", "utf8")
console.log(JSON.stringify({ variable: process.env.COHORT_AGENT_SPEC, fd3: readFileSync(3, "utf8"), environ, argv }))
`)
      const spec = `{"host":"node-b","saltHex":"${"5a".repeat(16)}"}`
      const result = Bun.spawnSync(["bash", "-c", remoteAgentScript(worker({ path: checkout }), "run/node-b", Duration.seconds(1), 1)], { stdin: Buffer.from(`${spec}\n`), stdout: "pipe", stderr: "pipe" })
      expect(result.stderr.toString()).toBe("")
      expect(result.exitCode).toBe(0)
      const seen = JSON.parse(result.stdout.toString()) as { variable: string; fd3: string; environ: string; argv: string }
      expect(seen.variable).toBe("fd:3")
      expect(seen.fd3.trim()).toBe(spec)
      expect(seen.environ.includes("5a5a5a5a")).toBe(false)
      expect(seen.argv.includes("5a5a5a5a")).toBe(false)
    } finally {
      rmSync(checkout, { recursive: true, force: true })
    }
  })
})

describe("remote cleanup", () => {
  test("the tag keeps to plain characters", () => {
    expect(agentTag("my run.v2", "gpu-b.example")).toBe("my_run_v2/gpu-b_example")
  })

  test("ends exactly this run's agents on this host: not another tag, not the script itself", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-cleanup-"))
    try {
      // Stand-ins whose command lines look like tagged agents: `<dir>/bun src/cli/agent.ts --tag …`.
      writeFileSync(join(dir, "bun"), "#!/bin/sh\nsleep 20\n", { mode: 0o755 })
      // No pipes: the script's `sleep` outlives a killed script, and a pipe it held kept the test runner waiting 20 s.
      const quiet = { stdin: "ignore", stdout: "ignore", stderr: "ignore" } as const
      const mine = Bun.spawn([join(dir, "bun"), "src/cli/agent.ts", "--tag", "run/host-a"], quiet)
      const other = Bun.spawn([join(dir, "bun"), "src/cli/agent.ts", "--tag", "run/host-b"], quiet)
      // Both have exec'd their script: their command lines are the tagged agents' (before that, a fork of this process's).
      const tagged = (proc: Bun.Subprocess, tag: string) => commandLine(proc.pid).includes(`${join(dir, "bun")} src/cli/agent.ts --tag ${tag}`)
      await waitFor(() => tagged(mine, "run/host-a") && tagged(other, "run/host-b"), "both stand-ins running as tagged agents")
      const result = Bun.spawnSync(["bash", "-c", cleanupScript("run/host-a")], { stdout: "pipe" })
      expect(result.stdout.toString().trim()).toBe("leftovers 1")
      expect(await mine.exited).not.toBe(0)
      expect(other.killed || other.exitCode !== null).toBe(false)
      other.kill("SIGKILL")
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe("agent spec", () => {
  test("round trip", () => {
    const launch = { host: "node-b", controller: { host: "10.0.0.1", port: 29400 }, saltHex: "0123456789abcdef0123456789abcdef", devices: { _tag: "Indices" as const, indices: [0, 1] }, path: "/srv" }
    expect(readAgentSpec(writeAgentSpec(launch))).toEqual({ ...launch, persist: false })
  })

  test("every problem at once, naming the variable", () => {
    expect(readAgentSpec("nope")).toContain("COHORT_AGENT_SPEC is not JSON")
    const problem = readAgentSpec(JSON.stringify({ controller: "x", devices: "many", saltHex: "short" })) as string
    expect(problem).toContain("host is missing")
    expect(problem).toContain(`expected HOST:PORT (like 10.0.0.1:29400), got "x"`)
    expect(problem).toContain(`got "many"`)
    expect(problem).toContain("saltHex is not 32 hex digits")
    expect(problem).toContain("path is missing")
  })

  test("devices and endpoints", () => {
    expect(parseDevices("4")).toEqual({ _tag: "Count", count: 4 })
    expect(parseDevices("0,1")).toEqual({ _tag: "Indices", indices: [0, 1] })
    expect(parseDevices("all")).toEqual({ _tag: "All" })
    expect(parseDevices("0,0")).toContain("listed twice")
    expect(parseDevices("0")).toContain("from 1 to 256")
    expect(parseEndpoint("[::1]:80")).toEqual({ host: "::1", port: 80 })
    expect(parseEndpoint("host:99999")).toContain("expected HOST:PORT")
  })
})
