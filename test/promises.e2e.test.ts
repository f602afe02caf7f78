/**
 * README promises that had no test, each checked on real processes: a
 * launcher (`bun src/cli/launch.ts`), self-deployed agents
 * (`bun src/cli/agent.ts`, what `bun run agent` runs), real sockets.
 *
 * - `POST /start` from a non-loopback address needs the start token in a
 *   header like any other: 401 without one, 400 for one in the URL, 403 for
 *   a wrong one; the right one (from the run's registry file) starts the run.
 * - `--persist`: an agent with nobody to dial tries again after 5 s, and joins
 *   a launcher that came up in between.
 * - The salt from `--salt-stdin` and from `COHORT_SALT` admits a self-deployed
 *   agent; a wrong one, either way, gets no seat.
 * - Open admission: a salt-less agent under a declared host name is admitted
 *   and its ranks run; one under an undeclared name is refused, exit 2, saying why.
 * - Colour: rank prefixes are coloured on a terminal, never with `NO_COLOR`,
 *   and never where stdout is not a terminal.
 * - `/metrics`' GPU families: a rank on a GPU host whose NVML is a stand-in
 *   (fixtures/fake-gpu/nvml.c) shows that GPU's memory and utilisation, and
 *   /state.json's inventory names it as the agent did ("Fake H200").
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { networkInterfaces, tmpdir } from "node:os"
import { join } from "node:path"
import { listeningPort, pageUrl, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { collectLines, pidFiles, waitFor } from "./support/processes.ts"

const dirs: Array<string> = []
const started: Array<Bun.Subprocess> = []
afterEach(() => {
  for (const proc of started.splice(0)) proc.kill("SIGKILL")
})
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const tempDir = (): string => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-promises-"))
  dirs.push(dir)
  return dir
}

/** A launcher process on `text` (a cluster file; `$DIR` is the test's folder), its lines collected. */
const launch = (text: string, env: Record<string, string> = {}) => {
  const dir = tempDir()
  const file = join(dir, "cluster.yml")
  writeFileSync(file, text.replaceAll("$DIR", dir))
  const run = spawnLaunch(file, env)
  started.push(run.proc)
  return { ...run, dir }
}

/** `bun src/cli/agent.ts ARGS` (what `bun run agent` runs), with `env` over this process's environment (less any salt). */
const agent = (args: ReadonlyArray<string>, options: { readonly env?: Record<string, string>; readonly stdin?: string } = {}) => {
  const env: Record<string, string | undefined> = { ...process.env, COHORT_SALT: undefined, ...options.env }
  const proc = Bun.spawn([process.execPath, "src/cli/agent.ts", ...args], {
    cwd: repoRoot,
    env: Object.fromEntries(Object.entries(env).filter((entry): entry is [string, string] => entry[1] !== undefined)),
    stdin: options.stdin === undefined ? "ignore" : Buffer.from(options.stdin),
    stdout: "pipe",
    stderr: "pipe"
  })
  started.push(proc)
  return { proc, stdout: collectLines(proc.stdout), stderr: collectLines(proc.stderr) }
}

/** The `bun run agent` hint a launcher prints for an `agent: self` host: the address to dial and the salt file. */
const selfHint = async (lines: ReadonlyArray<string>, host: string) => {
  const hint = (line: string) => line.includes(`waiting for ${host} to join`)
  await waitFor(() => lines.some(hint), `the launcher to wait for ${host}`, 15_000)
  const line = lines.find(hint)!
  const controller = /--controller (\S+)/.exec(line)![1]!
  const saltFile = /--salt-file <a copy of (\S+)>/.exec(line)?.[1]
  return { controller, saltFile: saltFile === undefined ? undefined : join(repoRoot, saltFile) }
}

/** Ask `probe` every 50 ms until it gives a value; throws with `what` after `timeoutMs`. */
const eventually = async <A>(probe: () => Promise<A | undefined>, what: string, timeoutMs: number): Promise<A> => {
  const deadline = performance.now() + timeoutMs
  while (performance.now() < deadline) {
    const value = await probe().catch(() => undefined)
    if (value !== undefined) return value
    await Bun.sleep(50)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`)
}

/** A free TCP port on loopback, as the kernel hands one out (closed again at once). */
const freePort = (): number => {
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
  const port = probe.port
  probe.stop(true)
  return port
}

/** This machine's first non-loopback IPv4 address, or undefined when it has none. */
const externalIPv4 = Object.values(networkInterfaces()).flat().find((address) => address?.family === "IPv4" && !address.internal)?.address
if (externalIPv4 === undefined) console.log("POST /start from a non-loopback address skipped: this machine has no non-loopback IPv4 address")

describe("POST /start from a non-loopback address", () => {
  test.skipIf(externalIPv4 === undefined)(
    "no token 401, a token in the URL 400, a wrong one 403, none of them starts the run; the run's own token starts it",
    async () => {
      const run = `manual-${process.pid}`
      // An `agent: self` host dialling a non-loopback controller.host makes the launcher bind 0.0.0.0 (a loopback
      // one given binds loopback); the window is closed by the operator alone.
      const launcher = launch(`
name: ${run}
controller: { host: ${externalIPv4}, port: 0, join: { start: manual, min_ranks: 1 } }
workers:
  - { host: localhost, devices: 1, path: ${repoRoot} }
  - { host: elsewhere, devices: 1, agent: self, path: ${repoRoot} }
job: { entry: test/fixtures/rank-fixture.ts, args: ["hold", "pidfile=$DIR"] }
failure_policy: { grace: 2s }
`)
      const port = await listeningPort(launcher.stderr.lines)
      expect(launcher.stderr.lines.some((line) => line.includes(`listening on 0.0.0.0:${port}`))).toBe(true)
      await waitFor(() => launcher.stderr.lines.some((line) => line.includes("localhost joined with ranks 0")), "localhost to join", 15_000)
      const registry = join(repoRoot, ".cohort", "runs", `${run}-${launcher.proc.pid}.json`)
      await waitFor(() => existsSync(registry), "the run's registry file", 10_000)
      const { startToken } = JSON.parse(readFileSync(registry, "utf8")) as { startToken: string }

      const start = async (query: string, headers: Record<string, string>) => {
        const response = await fetch(`http://${externalIPv4}:${port}/start${query}`, { method: "POST", headers, keepalive: false })
        return { status: response.status, body: await response.json() as Record<string, unknown> }
      }
      expect(await start("", {})).toEqual({
        status: 401,
        body: { error: "POST /start needs the run's start token (Authorization: Bearer <token>): `bun run status --start` sends it from this directory" }
      })
      expect(await start(`?token=${startToken}`, {})).toEqual({ status: 400, body: { error: "the start token goes in an Authorization: Bearer header, never the URL" } })
      expect(await start("", { Authorization: `Bearer ${"0".repeat(64)}` })).toEqual({ status: 403, body: { error: "wrong start token for this run" } })
      // None of them started anything: the window is still open, and no rank runs user code.
      const state = await (await fetch(await pageUrl(port, "/state.json", externalIPv4))).json() as { phase: string }
      expect(state.phase).toBe("waiting")
      expect(pidFiles(launcher.dir)).toEqual([])

      expect(await start("", { Authorization: `Bearer ${startToken}` })).toEqual({ status: 200, body: { armed: true } })
      await waitFor(() => pidFiles(launcher.dir).length === 1, "rank 0 running user code once the window closed", 15_000)
      // The line comes a moment after the rank's pid file: waited for, not assumed.
      await waitFor(() => launcher.stderr.lines.includes("cohort: cohort formed: all 1 rank(s) run user code"), "the cohort formed line", 15_000)
      launcher.proc.kill("SIGTERM")
      expect(await launcher.proc.exited).toBe(143)
    },
    45_000
  )
})

/** A run whose one host is `selfhost`, started by hand; `join` is what goes in `controller.join`'s braces. */
const selfCluster = (join: string, port = 0) => `
name: self-${process.pid}
controller: { host: 127.0.0.1, port: ${port}${join === "" ? "" : `, join: { ${join} }`} }
workers:
  - { host: selfhost, devices: 1, agent: self, path: ${repoRoot} }
job: { entry: test/fixtures/rank-fixture.ts, args: ["work=0"] }
failure_policy: { grace: 2s }
`

describe("bun run agent --persist", () => {
  test("with nobody listening it dials again after 5 s, and joins the launcher that came up meanwhile", async () => {
    const port = freePort()
    // Open admission: the agent needs no salt, so it can be started before any launcher made one.
    const persistent = agent(["--controller", `127.0.0.1:${port}`, "--host", "selfhost", "--devices", "1", "--persist"])
    const again = `dialling 127.0.0.1:${port} again in 5 s`
    const saidAgain = () => persistent.stderr.lines.some((line) => line.includes(again))
    await waitFor(() => saidAgain() || persistent.proc.exitCode !== null, "the agent to fail once and say it will dial again", 15_000)
    expect(saidAgain(), persistent.stderr.lines.join("\n")).toBe(true)
    const failedAt = persistent.stderr.times[persistent.stderr.lines.findIndex((line) => line.includes(again))]!
    expect(persistent.proc.exitCode).toBeNull()

    const launcher = launch(selfCluster("open_admission: true", port))
    await listeningPort(launcher.stderr.lines)
    const joined = "cohort: selfhost joined with ranks 0"
    await waitFor(() => launcher.stderr.lines.includes(joined), "the agent to join on its next try", 15_000)
    const joinedAt = launcher.stderr.times[launcher.stderr.lines.indexOf(joined)]!
    // It waited out its backoff, not dialled in a loop.
    expect(joinedAt - failedAt).toBeGreaterThan(4_000)
    expect(await persistent.proc.exited).toBe(0)
    expect(await launcher.proc.exited).toBe(0)
    await Promise.all([persistent.stdout.done, persistent.stderr.done, launcher.stdout.done])
    // Joined on its second try (a third, 10 s later, only if this machine was too slow to start the launcher within 5 s).
    const backoffs = persistent.stderr.lines.flatMap((line) => /dialling \S+ again in (\d+) s/.exec(line)?.[1] ?? []).map(Number)
    expect(backoffs).toEqual([5, 10, 20].slice(0, backoffs.length))
    // A self-deployed agent's rank lines are forwarded to the launcher, which shows every rank.
    expect(launcher.stdout.lines).toContain("[selfhost:cpu:r0] rank 0: finished its work")
  }, 45_000)
})

describe("the salt of a self-deployed agent", () => {
  /** A run that waits for two self-deployed hosts, one per way of giving the salt. */
  const twoSelfHosts = () =>
    launch(`
name: salt-${process.pid}
controller: { host: 127.0.0.1, port: 0 }
workers:
  - { host: by-stdin, devices: 1, agent: self, path: ${repoRoot} }
  - { host: by-env, devices: 1, agent: self, path: ${repoRoot} }
job: { entry: test/fixtures/rank-fixture.ts, args: ["work=0"] }
failure_policy: { grace: 2s }
`)

  test("--salt-stdin and COHORT_SALT each admit their host; the run completes on both", async () => {
    const launcher = twoSelfHosts()
    const { controller, saltFile } = await selfHint(launcher.stderr.lines, "by-stdin")
    const salt = readFileSync(saltFile!, "utf8").trim()
    expect(salt).toMatch(/^[0-9a-f]{32}$/)
    const byStdin = agent(["--controller", controller, "--host", "by-stdin", "--devices", "1", "--salt-stdin"], { stdin: `${salt}\n` })
    const byEnv = agent(["--controller", controller, "--host", "by-env", "--devices", "1"], { env: { COHORT_SALT: salt } })
    // Each host joins; an agent that exits first was not admitted (the other would wait for it until the window failed).
    const joined = (host: string) => launcher.stderr.lines.some((line) => line.startsWith(`cohort: ${host} joined with ranks `))
    await waitFor(() => (joined("by-stdin") && joined("by-env")) || byStdin.proc.exitCode !== null || byEnv.proc.exitCode !== null, "both hosts to join", 20_000)
    expect({ stdin: joined("by-stdin"), env: joined("by-env") }, [...byStdin.stderr.lines, ...byEnv.stderr.lines].join("\n")).toEqual({ stdin: true, env: true })
    expect(await byStdin.proc.exited).toBe(0)
    expect(await byEnv.proc.exited).toBe(0)
    expect(await launcher.proc.exited).toBe(0)
    await Promise.all([byStdin.stdout.done, byEnv.stdout.done, launcher.stderr.done, launcher.stdout.done])
    expect(launcher.stdout.lines.some((line) => /^\[by-stdin:cpu:r\d\] rank \d: finished its work$/.test(line))).toBe(true)
    expect(launcher.stdout.lines.some((line) => /^\[by-env:cpu:r\d\] rank \d: finished its work$/.test(line))).toBe(true)
    expect(launcher.stderr.lines.at(-1)).toBe("cohort: run completed")
  }, 45_000)

  test("a wrong salt, on stdin or in COHORT_SALT, gets no seat: the agent gives up, the run has admitted nobody", async () => {
    const launcher = twoSelfHosts()
    const { controller, saltFile } = await selfHint(launcher.stderr.lines, "by-stdin")
    const salt = readFileSync(saltFile!, "utf8").trim()
    // The right salt with its first digit changed.
    const wrong = `${salt[0] === "0" ? "1" : "0"}${salt.slice(1)}`
    // The launcher answers a join without the key with nothing (it resets it); a short handshake deadline (0.2 × 10 s)
    // keeps the test quick should it merely stay silent.
    const scale = { COHORT_NET_TIMEOUT_SCALE: "0.2" }
    const byStdin = agent(["--controller", controller, "--host", "by-stdin", "--devices", "1", "--salt-stdin"], { stdin: `${wrong}\n`, env: scale })
    const byEnv = agent(["--controller", controller, "--host", "by-env", "--devices", "1"], { env: { ...scale, COHORT_SALT: wrong } })
    const statuses = await Promise.all([byStdin.proc.exited, byEnv.proc.exited])
    await Promise.all([byStdin.stdout.done, byStdin.stderr.done, byEnv.stdout.done, byEnv.stderr.done])
    for (const [index, run] of [byStdin, byEnv].entries()) {
      expect(statuses[index], run.stderr.lines.join("\n")).not.toBe(0)
      expect([...run.stdout.lines, ...run.stderr.lines].join("\n")).not.toContain("joined")
    }
    const port = Number(controller.split(":")[1])
    const state = await (await fetch(await pageUrl(port, "/state.json"))).json() as { phase: string; joinedHosts: number; ranks: ReadonlyArray<unknown> }
    expect([state.phase, state.joinedHosts, state.ranks.length]).toEqual(["waiting", 0, 0])
    expect(launcher.stderr.lines.join("\n")).not.toContain("joined with ranks")
    launcher.proc.kill("SIGINT")
    expect(await launcher.proc.exited).toBe(130)
  }, 45_000)
})

describe("open admission", () => {
  test("a salt-less agent under a declared name is admitted and runs its ranks; under an undeclared name it is refused, exit 2", async () => {
    const launcher = launch(selfCluster("open_admission: true"))
    const { controller, saltFile } = await selfHint(launcher.stderr.lines, "selfhost")
    // Open admission: there is no salt to hand out of band.
    expect(saltFile).toBeUndefined()
    // controller.host: 127.0.0.1 given: the port listens on loopback alone, and the warning says who reaches it.
    expect(launcher.stderr.lines.some((line) => line.includes("open admission on 127.0.0.1: any user of this machine"))).toBe(true)

    const stranger = agent(["--controller", controller, "--host", "stranger", "--devices", "1"])
    expect(await stranger.proc.exited).toBe(2)
    await stranger.stderr.done
    expect(stranger.stderr.lines.join("\n")).toContain("the launcher refused this host: host stranger is not among the workers of this run (selfhost)")

    const declared = agent(["--controller", controller, "--host", "selfhost", "--devices", "1"])
    expect(await declared.proc.exited).toBe(0)
    expect(await launcher.proc.exited).toBe(0)
    await Promise.all([declared.stdout.done, launcher.stderr.done, launcher.stdout.done])
    expect(launcher.stdout.lines).toContain("[selfhost:cpu:r0] rank 0 of 1 up (local 0/1, restart 0)")
    expect(launcher.stdout.lines).toContain("[selfhost:cpu:r0] rank 0: finished its work")
    expect(launcher.stderr.lines).toContain("cohort: selfhost joined with ranks 0")
    expect(launcher.stderr.lines.join("\n")).not.toContain("stranger joined")
    expect(launcher.stderr.lines.at(-1)).toBe("cohort: run completed")
  }, 45_000)
})

const script = Bun.which("script")
if (script === null) console.log("colour tests on a terminal skipped: util-linux's `script` is not on PATH (apt-get install -y bsdutils)")

describe("colour", () => {
  const oneRank = () => `
name: colour-${process.pid}
workers:
  - { host: localhost, devices: 1, path: ${repoRoot} }
job: { entry: test/fixtures/rank-fixture.ts, args: ["work=0"] }
failure_policy: { grace: 2s }
`
  /** The launcher with stdout on a pseudo-terminal (`script`) and stderr into a file: what each shows, and its status. */
  const onTerminal = async (noColor: boolean) => {
    const dir = tempDir()
    const file = join(dir, "cluster.yml")
    writeFileSync(file, oneRank())
    const errors = join(dir, "stderr")
    const env: Record<string, string> = Object.fromEntries(Object.entries(process.env).filter((entry): entry is [string, string] => entry[1] !== undefined))
    delete env.NO_COLOR
    if (noColor) env.NO_COLOR = "1"
    const proc = Bun.spawn([script!, "-qec", `exec ${process.execPath} src/cli/launch.ts ${file} 2>${errors}`, "/dev/null"], {
      cwd: repoRoot,
      env,
      stdin: "pipe",
      stdout: "pipe",
      stderr: "pipe"
    })
    started.push(proc)
    const [terminal, code] = await Promise.all([new Response(proc.stdout).text(), proc.exited])
    return { terminal, stderr: readFileSync(errors, "utf8"), code }
  }

  test.skipIf(script === null)("on a terminal, rank prefixes are coloured", async () => {
    const { terminal, stderr, code } = await onTerminal(false)
    expect(code, stderr).toBe(0)
    expect(terminal).toContain("\x1b[36m[localhost:cpu:r0] \x1b[0mrank 0 of 1 up (local 0/1, restart 0)")
  }, 30_000)

  test.skipIf(script === null)("NO_COLOR=1 on a terminal, stderr not one: no escape sequence anywhere, the lines are all there", async () => {
    const { terminal, stderr, code } = await onTerminal(true)
    expect(code, stderr).toBe(0)
    expect(terminal).toContain("[localhost:cpu:r0] rank 0 of 1 up (local 0/1, restart 0)")
    expect(stderr).toContain("cohort: run completed")
    expect(terminal).not.toContain("\x1b")
    expect(stderr).not.toContain("\x1b")
  }, 30_000)

  test("stdout and stderr pipes, NO_COLOR unset: no escape sequence", async () => {
    const env = { ...process.env } as Record<string, string>
    delete env.NO_COLOR
    const dir = tempDir()
    const file = join(dir, "cluster.yml")
    writeFileSync(file, oneRank())
    const proc = Bun.spawn([process.execPath, "src/cli/launch.ts", file], { cwd: repoRoot, env, stdout: "pipe", stderr: "pipe" })
    started.push(proc)
    const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
    expect(code, stderr).toBe(0)
    expect(stdout).toContain("[localhost:cpu:r0] rank 0 of 1 up (local 0/1, restart 0)\n")
    expect(stdout).not.toContain("\x1b")
    expect(stderr).not.toContain("\x1b")
  }, 30_000)
})

/** The GPU stand-ins, built with cc into a folder of their own: NVML (found on LD_LIBRARY_PATH), the CUDA runtime and driver. */
const gpuStandIns = ((): { readonly dir: string } | string => {
  const cc = Bun.which("cc") ?? Bun.which("gcc")
  if (cc === null) return "no C compiler (cc) to build the NVML and CUDA stand-ins"
  const dir = tempDir()
  mkdirSync(dir, { recursive: true })
  for (const [source, library] of [["nvml", "libnvidia-ml.so.1"], ["cuda", "libcuda.so.1"], ["cudart", "libcudart.so"]] as const) {
    const built = Bun.spawnSync([cc, "-shared", "-fPIC", "-O2", "-o", join(dir, library), join(import.meta.dir, "fixtures", "fake-gpu", `${source}.c`)], { stderr: "pipe" })
    if (built.exitCode !== 0) return `building the ${source} stand-in failed: ${built.stderr.toString()}`
  }
  return { dir }
})()
if (typeof gpuStandIns === "string") console.log(`/metrics GPU families skipped: ${gpuStandIns}`)

describe("/metrics on a GPU host", () => {
  // A GPU's name is its device label, spaces and all ("NVIDIA H200"; the stand-in's "Fake H200"): this test found
  // the join gate refusing every GPU host for it.
  test.skipIf(typeof gpuStandIns === "string")(
    "a GPU rank's memory in use and utilisation, as its agent samples them through NVML, with the run, rank, host and device labels",
    async () => {
      const { dir } = gpuStandIns as { dir: string }
      const run = `gpu-${process.pid}`
      const launcher = launch(`
name: ${run}
workers:
  - { host: localhost, devices: [0], path: ${repoRoot} }
job: { entry: test/fixtures/rank-fixture.ts, args: ["hold", "pidfile=$DIR"] }
failure_policy: { grace: 2s }
`, {
        LD_LIBRARY_PATH: dir,
        COHORT_CUDART_LIB: join(dir, "libcudart.so"),
        // The stand-in's device 0: 3000 MiB in use, 55% busy.
        COHORT_FAKE_NVML_USED_MIB: "3000",
        COHORT_FAKE_NVML_UTIL: "55"
      })
      const port = await listeningPort(launcher.stderr.lines)
      const labels = `run="${run}",rank="0",host="localhost",device="0"`
      const expected = [
        "# HELP cohort_rank_gpu_memory_bytes Memory in use on a rank's GPU.",
        "# TYPE cohort_rank_gpu_memory_bytes gauge",
        `cohort_rank_gpu_memory_bytes{${labels}} 3145728000`,
        "# HELP cohort_rank_gpu_utilization_ratio A rank's GPU utilisation (0-1).",
        "# TYPE cohort_rank_gpu_utilization_ratio gauge",
        `cohort_rank_gpu_utilization_ratio{${labels}} 0.55`
      ]
      // The agent samples every 2 s: the families appear with its first sample (or never, if the run ends first).
      const gpuLines = await eventually(async () => {
        if (launcher.proc.exitCode !== null) return []
        const text = await (await fetch(await pageUrl(port, "/metrics"))).text()
        const lines = text.split("\n").filter((line) => line.includes("cohort_rank_gpu_"))
        return lines.length > 0 ? lines : undefined
      }, "the GPU families in /metrics", 20_000)
      expect(gpuLines, launcher.stderr.lines.join("\n")).toEqual(expected)
      // The cohort's inventory names the GPU as its agent did in its join (a bench harness's hardware header).
      const state = (await (await fetch(await pageUrl(port, "/state.json"))).json()) as { inventory?: unknown }
      expect(state.inventory).toEqual([{ host: "localhost", devices: [{ device: "0", label: "Fake H200", ranks: [0] }] }])
      launcher.proc.kill("SIGTERM")
      expect(await launcher.proc.exited).toBe(143)
    },
    45_000
  )
})
