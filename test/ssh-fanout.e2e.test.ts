/**
 * The ssh fan-out against a real sshd (on this machine, reached as another
 * host): the launcher starts the host's agent over ssh, the agent dials back
 * and runs its ranks, and the salt never shows in any process's argv.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { isAbsolute, join, relative } from "node:path"
import { judge } from "../src/launcher/run/Preflight.ts"
import { ABI_VERSION } from "../src/native/library.ts"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { allPids, childrenOf, commandLine, isGone, waitFor } from "./support/processes.ts"
import { type Sshd, sshdUnavailable, startSshd } from "./support/sshd.ts"

const unavailable = sshdUnavailable()
if (unavailable !== undefined) console.log(`ssh fan-out tests skipped: ${unavailable}`)

let sshd: Sshd | undefined
const dirs: Array<string> = []
beforeAll(async () => {
  if (unavailable === undefined) sshd = await startSshd()
})
// Removing --sync's copy of the checkout (node_modules and all, some 300 MB) outlasts bun's 5 s hook default
// on a loaded machine.
afterAll(() => {
  sshd?.stop()
  dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true }))
}, 60_000)

const clusterFile = (worker: string, job = "entry: examples/train.ts\n  dataset_size: 20000\n  epochs: 2") => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-ssh-"))
  dirs.push(dir)
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: ssh
controller: { host: 127.0.0.1, port: 0 }
workers:
  - ${worker}
job:
  ${job}
failure_policy: { grace: 2s }
`)
  return file
}

const sshWorker = (overrides: { host?: string; path?: string; identity?: string } = {}) =>
  `{ host: ${overrides.host ?? "sshhost"}, devices: 2, path: ${overrides.path ?? repoRoot}, ssh: { target: 127.0.0.1, port: ${sshd!.port}, ` +
  `identity_file: ${overrides.identity ?? sshd!.identityFile}, options: ${JSON.stringify(sshd!.options)} } }`

/**
 * This user's home as sshd logs them in there: their passwd entry's, through NSS as sshd reads it. Neither
 * $HOME nor Bun's os.userInfo().homedir (which returns $HOME) will do: a user may have set HOME elsewhere.
 */
const loginHome = (): string => {
  const uid = process.getuid!()
  const entry = Bun.spawnSync(["getent", "passwd", String(uid)], { stdout: "pipe", stderr: "pipe" })
  const home = entry.stdout.toString().trim().split(":")[5]
  if (entry.exitCode !== 0 || home === undefined || home === "") throw new Error(`getent passwd ${uid} gave no home directory (exit ${entry.exitCode}); the ssh test needs this user's passwd entry`)
  return home
}

/** Every process's argv, joined, while the run is on. */
const commandLines = (): Array<string> =>
  readdirSync("/proc").filter((name) => /^\d+$/.test(name)).flatMap((pid) => {
    try {
      return [readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ")]
    } catch {
      return []
    }
  })

describe.skipIf(unavailable !== undefined)("ssh fan-out", () => {
  test("a host reached over ssh runs its ranks from a path relative to the login directory; the salt is in no argv", async () => {
    // The sshd logs this user in at their home: a relative path names the checkout from there, entered once
    // (flodl's convention; the preflight and the agent each entering it failed with "No such file or directory").
    const fromHome = relative(loginHome(), repoRoot)
    expect(isAbsolute(fromHome)).toBe(false)
    const launch = spawnLaunch(clusterFile(sshWorker({ path: fromHome })))
    const seen: Array<string> = []
    const watching = setInterval(() => seen.push(...commandLines().filter((line) => /cohort|agent\.ts|rank\.|relay\./.test(line))), 100)
    const code = await launch.proc.exited
    clearInterval(watching)
    await launch.stdout.done
    expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
    expect(code).toBe(0)
    expect(launch.stdout.lines.filter((line) => /^\[sshhost:cpu:r[01]\] final weights checksum/.test(line))).toHaveLength(2)
    expect(seen.some((line) => line.includes("agent.ts"))).toBe(true)
    expect(seen.filter((line) => /[0-9a-f]{32}/i.test(line))).toEqual([])
  }, 60_000)

  test("the launcher SIGKILLed mid-run: the agent over ssh and everything it started are gone within 15 s", async () => {
    const launch = spawnLaunch(clusterFile(sshWorker(), "entry: examples/train.ts\n  dataset_size: 50000\n  epochs: 50"))
    await waitFor(() => launch.stderr.lines.some((line) => /epoch 1\/50 done/.test(line)), "epoch 1 to end", 30_000)
    const agentPid = allPids().find((pid) => /bun\S* src\/cli\/agent\.ts/.test(commandLine(pid)))
    expect(agentPid).toBeDefined()
    const theirs = [agentPid!, ...childrenOf(agentPid!)]
    expect(theirs.length).toBeGreaterThanOrEqual(4)
    launch.proc.kill("SIGKILL")
    await waitFor(() => theirs.every(isGone), "the agent, relay and ranks to be gone", 15_000)
  }, 60_000)

  test("preflight: a missing checkout path on the host is an input error naming the host, before anything starts", async () => {
    const launch = spawnLaunch(clusterFile(sshWorker({ path: "/nonexistent/cohort" })))
    expect(await launch.proc.exited).toBe(2)
    expect(launch.stderr.lines.at(-1)).toBe("cohort: sshhost: /nonexistent/cohort is not a directory there; give workers[].path as the cohort checkout's path on sshhost (or copy it there with --sync)")
  }, 60_000)

  test("preflight: a key the host does not accept is an input error naming the host and what to check", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-ssh-key-"))
    dirs.push(dir)
    Bun.spawnSync(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", join(dir, "stranger")])
    const launch = spawnLaunch(clusterFile(sshWorker({ identity: join(dir, "stranger") })))
    expect(await launch.proc.exited).toBe(2)
    expect(launch.stderr.lines.at(-1)).toMatch(/^cohort: sshhost: ssh could not reach 127\.0\.0\.1 or log in \(.*Permission denied.*\): check the host, ssh\.user, ssh\.identity_file/)
  }, 60_000)

  test("preflight: a problem on one host starts no agent on any, and every host's problems come at once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-ssh-key-"))
    dirs.push(dir)
    Bun.spawnSync(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", join(dir, "stranger")])
    const workers = [sshWorker(), sshWorker({ host: "pathless", path: "/nonexistent/cohort" }), sshWorker({ host: "stranger", identity: join(dir, "stranger") })]
    const agents: Array<string> = []
    const watching = setInterval(() => agents.push(...commandLines().filter((line) => /bun\S* src\/cli\/agent\.ts --tag/.test(line))), 20)
    const launch = spawnLaunch(clusterFile(workers.join("\n  - ")))
    expect(await launch.proc.exited).toBe(2)
    clearInterval(watching)
    expect(launch.stderr.lines.slice(-2).sort()).toEqual([
      expect.stringMatching(/^cohort: pathless: \/nonexistent\/cohort is not a directory there/),
      expect.stringMatching(/^cohort: stranger: ssh could not reach 127\.0\.0\.1 or log in/)
    ])
    // The healthy host passed its checks, and still nothing started there.
    expect(agents).toEqual([])
    expect(launch.stderr.lines.some((line) => /joined|world formed/.test(line))).toBe(false)
  }, 60_000)

  test("--sync copies the checkout to a host that has none, and the run goes on there", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-sync-"))
    dirs.push(dir)
    const path = join(dir, "checkout")
    const launch = spawnLaunch(clusterFile(sshWorker({ path })), {}, ["--sync"])
    expect(await launch.proc.exited).toBe(0)
    await launch.stdout.done
    expect(launch.stderr.lines.some((line) => line.endsWith(`to sshhost:${path}`) && line.startsWith("cohort: copied"))).toBe(true)
    expect(existsSync(join(path, "src/cli/agent.ts"))).toBe(true)
    expect(existsSync(join(path, ".git"))).toBe(false)
    expect(launch.stdout.lines.filter((line) => /^\[sshhost:cpu:r[01]\] final weights checksum/.test(line))).toHaveLength(2)
  }, 90_000)

  test("preflight: a checkout of another cohort version is named as such", () => {
    const worker = { host: "h", devices: { _tag: "Count" as const, count: 1 }, path: "/p", env: {}, ssh: undefined, tunnel: false, agent: undefined }
    expect(judge(worker, "bun ./node_modules/.bin/bun\nlock 00\nnative built\n", "ff").problems).toEqual([
      "h: /p holds another version of cohort (its bun.lock differs from this launcher's); update it (or use --sync)"
    ])
    expect(judge(worker, "bun none\nlock ff\nnative missing\n", "ff").problems).toHaveLength(2)
    expect(judge(worker, "bun ./node_modules/.bin/bun\nlock ff\nnative rebuilt\n", "ff")).toEqual({ problems: [], notes: ["h: built the native library in /p"] })
    expect(judge(worker, "bun b\nlock ff\nnative built\nabi 0\n", "ff").problems).toEqual([
      `h: the native library in /p speaks ABI 0, this launcher ${ABI_VERSION}: run  bun run build:native  there (or use --sync)`
    ])
    expect(judge(worker, `bun b\nlock ff\nnative built\nabi ${ABI_VERSION}\n`, "ff").problems).toEqual([])
    const gpuWorker = { ...worker, devices: { _tag: "Indices" as const, indices: [0, 3] } }
    expect(judge(gpuWorker, "bun b\nlock ff\nnative built\ngpus 0,1\n", "ff").problems).toEqual(["h: has no GPU 3 (nvidia-smi lists 0, 1); fix workers[].devices for h"])
    // devices: all is the agent's to resolve there: refused only when nvidia-smi answers with none.
    const allWorker = { ...worker, devices: { _tag: "All" as const } }
    expect(judge(allWorker, "bun b\nlock ff\nnative built\ngpus \n", "ff").problems).toEqual(["h: has devices: all, but nvidia-smi lists no GPU there; give a number of CPU ranks or the GPU indices for h"])
    expect(judge(allWorker, "bun b\nlock ff\nnative built\ngpus 0,1\n", "ff").problems).toEqual([])
    expect(judge(allWorker, "bun b\nlock ff\nnative built\ngpus unknown\n", "ff").problems).toEqual([])
    expect(judge(gpuWorker, "bun b\nlock ff\nnative built\ngpus unknown\nleftovers 2\n", "ff")).toEqual({
      problems: [],
      notes: ["h: ended 2 agent(s) of this run left behind by an earlier launcher"]
    })
  })
})
