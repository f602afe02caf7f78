/**
 * An unmodified `torch.distributed` script under `bun run launch`, as a user
 * would run it: a `command:` job, four CPU ranks on one host, env:// init
 * from the torchrun variables cohort sets, a gloo all_reduce across them.
 *
 * The torch test needs Debian's python3-torch for /usr/bin/python3 (not the
 * pyenv python3 on PATH). When it is missing, the setup installs it as root;
 * when that cannot be done, the torch test says why and skips. (The torchrun
 * variables themselves are checked in launch-cli.test.ts.)
 */
import { describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"

const root = resolve(import.meta.dir, "..")
const launch = join(root, "src", "cli", "launch.ts")
const python = "/usr/bin/python3"
const allreduceScript = join(import.meta.dir, "fixtures", "torch_allreduce.py")
const dir = mkdtempSync(join(tmpdir(), "cohort-torch-"))
const ranks = [0, 1, 2, 3]

/** The whole setup, lock waits and downloads included: its commands' timeouts are cut to end inside it. */
const setupBudgetMs = 15 * 60_000
const setupDeadline = () => setupStart + setupBudgetMs - 30_000
let setupStart = 0

interface Ran {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const runCommand = async (cmd: Array<string>, timeoutMs: number, env?: Record<string, string>): Promise<Ran> => {
  const proc = Bun.spawn(cmd, {
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
    env: { ...process.env, ...env },
    timeout: Math.max(1_000, timeoutMs),
    killSignal: "SIGKILL"
  })
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  return { code, stdout, stderr }
}

const lastLine = (text: string) => text.trim().split("\n").at(-1) ?? ""

/** undefined when torch imports, else why not. */
const torchImportProblem = async (): Promise<string | undefined> => {
  if (!existsSync(python)) return `${python} does not exist`
  const ran = await runCommand([python, "-c", "import torch, torch.distributed; assert torch.distributed.is_available()"], 120_000)
  return ran.code === 0 ? undefined : `${python} -c "import torch" failed: ${lastLine(ran.stderr) || `status ${ran.code}`}`
}

/** Another apt/dpkg run (an install already under way on this machine) holds the lock: wait for it to finish. */
const waitForAptLock = async () => {
  const fuser = Bun.which("fuser") ?? (existsSync("/usr/bin/fuser") ? "/usr/bin/fuser" : null)
  if (fuser === null) return // apt-get's own DPkg::Lock::Timeout waits instead
  let announced = false
  while (Date.now() < setupDeadline()) {
    const held = await runCommand([fuser, "/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock"], 10_000)
    if (held.code !== 0) return
    if (!announced) console.log("torch e2e: another apt/dpkg run holds the dpkg lock; waiting for it to finish")
    announced = true
    await Bun.sleep(5_000)
  }
}

const aptGet = async (args: Array<string>) => {
  const remaining = setupDeadline() - Date.now()
  const lockWait = Math.max(0, Math.floor(remaining / 1000) - 60)
  return runCommand(["apt-get", "-o", `DPkg::Lock::Timeout=${lockWait}`, ...args], remaining, { DEBIAN_FRONTEND: "noninteractive" })
}

const installTorch = async (): Promise<string | undefined> => {
  const before = await torchImportProblem()
  if (before === undefined) return undefined
  if (!existsSync(python)) return before
  if (process.getuid?.() !== 0) return `${before}; not running as root, so python3-torch cannot be installed`
  if (Bun.which("apt-get") === null) return `${before}; apt-get is not available`

  await waitForAptLock()
  // The install that held the lock may have been this very package.
  if ((await torchImportProblem()) === undefined) return undefined

  console.log("torch e2e: installing python3-torch with apt-get (a few hundred MB; this can take minutes)")
  const install = ["install", "-y", "--no-install-recommends", "python3-torch"]
  let ran = await aptGet(install)
  if (ran.code !== 0) {
    console.log(`torch e2e: apt-get install failed (${lastLine(ran.stderr) || `status ${ran.code}`}); running apt-get update and retrying`)
    await waitForAptLock()
    const update = await aptGet(["update"])
    if (update.code !== 0) return `apt-get update failed: ${lastLine(update.stderr) || `status ${update.code}`}`
    await waitForAptLock()
    ran = await aptGet(install)
    if (ran.code !== 0) return `apt-get install python3-torch failed: ${lastLine(ran.stderr) || `status ${ran.code}`}`
  }
  return torchImportProblem()
}

const writeCluster = (name: string, command: ReadonlyArray<string>) => {
  const file = join(dir, `${name}.yml`)
  writeFileSync(
    file,
    `name: ${name}
controller: { host: 127.0.0.1, port: 0 }
workers:
  - host: localhost
    devices: 4
    path: ${JSON.stringify(root)}
    env: { OMP_NUM_THREADS: "1" }
job:
  command: ${JSON.stringify(command)}
`
  )
  return file
}

const launchCluster = async (file: string, timeoutMs: number) => {
  const started = performance.now()
  const ran = await runCommand([process.execPath, launch, file], timeoutMs)
  return { ...ran, ms: Math.round(performance.now() - started) }
}

/** What a run printed, for assertion messages. */
const transcript = (ran: Ran) => `exit ${ran.code}\n--- stdout ---\n${ran.stdout}\n--- stderr ---\n${ran.stderr}`

// The setup runs while the file loads (top-level await), so that the test is registered as skipped, and
// counted as a skip by the runner, when python3-torch cannot be had: never a test that returns early and passes.
setupStart = Date.now()
const torchProblem: string | undefined = await installTorch().catch((error: unknown) => `setup threw: ${String(error)}`)
if (torchProblem !== undefined) console.log(`torch e2e skipped: python3-torch not installable: ${torchProblem}`)

describe("bun run launch with a command: job, torchrun-style", () => {
  test.skipIf(torchProblem !== undefined)("an unmodified torch.distributed gloo script all-reduces across 4 ranks", async () => {
    const ran = await launchCluster(writeCluster("torch-allreduce", [python, allreduceScript]), 55_000)
    console.log(`torch e2e: 4 gloo ranks ran in ${ran.ms} ms`)
    expect(ran.code, transcript(ran)).toBe(0)
    expect(lastLine(ran.stderr), transcript(ran)).toBe("cohort: run completed")
    for (const rank of ranks) expect(ran.stdout, transcript(ran)).toContain(`[localhost:cpu:r${rank}] rank ${rank}: allreduce ok 10.0`)
  }, 60_000)
})
