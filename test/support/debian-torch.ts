/**
 * Debian's python3-torch for /usr/bin/python3 (not the pyenv python3 on PATH), as the torch tests need it:
 * installed with apt-get as root when it is missing (waiting for another apt run's lock first, as the suite's
 * background install may hold it). `debianTorchProblem()` is undefined when torch imports, else why it cannot
 * be had: a test file awaits it at load and registers its tests as skipped (counted as skips, never as passes).
 */
import { existsSync } from "node:fs"

export const python = "/usr/bin/python3"

/** The whole setup, lock waits and downloads included: its commands' timeouts are cut to end inside it. */
const setupBudgetMs = 15 * 60_000
const setupDeadline = () => setupStart + setupBudgetMs - 30_000
let setupStart = 0

export interface Ran {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

export const runCommand = async (cmd: Array<string>, timeoutMs: number, env?: Record<string, string>): Promise<Ran> => {
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

/**
 * Python cases that share a set-up, all run in one Debian python3 (torch's import is most of the time) with the
 * client on PYTHONPATH: `CASES` maps a name to an expression whose value is JSON; `run(name)` gives that case's.
 * The first call runs them all; a run that writes to stderr fails every case.
 */
export const casesInOnePython = <T>(setUp: string, cases: Readonly<Record<string, string>>) => {
  let results: Promise<Record<string, T>> | undefined
  return (name: string): Promise<T> => {
    results ??= runCommand(
      [python, "-c", `${setUp}\nimport json\nprint(json.dumps({${Object.entries(cases).map(([key, call]) => `"${key}": ${call}`).join(", ")}}))`],
      60_000,
      { PYTHONPATH: new URL("../../python", import.meta.url).pathname }
    ).then((ran) => {
      if (ran.stderr !== "") throw new Error(`the python cases wrote to stderr:\n${ran.stderr}`)
      return JSON.parse(ran.stdout.trim())
    })
    return results.then((all) => all[name]!)
  }
}

export const lastLine = (text: string) => text.trim().split("\n").at(-1) ?? ""

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
    if (!announced) console.log("torch set-up: another apt/dpkg run holds the dpkg lock; waiting for it to finish")
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

  console.log("torch set-up: installing python3-torch with apt-get (a few hundred MB; this can take minutes)")
  const install = ["install", "-y", "--no-install-recommends", "python3-torch"]
  let ran = await aptGet(install)
  if (ran.code !== 0) {
    console.log(`torch set-up: apt-get install failed (${lastLine(ran.stderr) || `status ${ran.code}`}); running apt-get update and retrying`)
    await waitForAptLock()
    const update = await aptGet(["update"])
    if (update.code !== 0) return `apt-get update failed: ${lastLine(update.stderr) || `status ${update.code}`}`
    await waitForAptLock()
    ran = await aptGet(install)
    if (ran.code !== 0) return `apt-get install python3-torch failed: ${lastLine(ran.stderr) || `status ${ran.code}`}`
  }
  return torchImportProblem()
}


let setup: Promise<string | undefined> | undefined

/** undefined once torch imports in /usr/bin/python3, else why it cannot: set up once per test process. */
export const debianTorchProblem = (): Promise<string | undefined> => {
  setupStart ||= Date.now()
  setup ??= installTorch().catch((error: unknown) => `setup threw: ${String(error)}`)
  return setup
}
