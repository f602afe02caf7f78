/**
 * A headless browser for tests: Debian's chromium, driven by playwright-core
 * (which ships no browser of its own). When /usr/bin/chromium is missing and
 * we are root, it is installed with apt-get; otherwise the tests that need it
 * skip, saying why.
 *
 * The outcome is cached per process: `bun test` runs every file in one
 * process, so several browser test files try the install at most once.
 */
import { existsSync } from "node:fs"
import { chromium, type Browser } from "playwright-core"

export const chromiumPath = "/usr/bin/chromium"

const launchArgs = [
  "--headless",
  "--no-sandbox", // root in a container: chromium's sandbox refuses to start
  "--disable-gpu",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync"
]

/** apt may wait on another install's dpkg lock and download ~100 MB: allow it minutes. */
const installBudgetMs = 10 * 60_000

const lastLine = (text: string) => text.trim().split("\n").at(-1) ?? ""

const run = async (cmd: Array<string>, timeoutMs: number): Promise<{ code: number | null; stderr: string }> => {
  const proc = Bun.spawn(cmd, {
    stdin: "ignore",
    stdout: "ignore",
    stderr: "pipe",
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    timeout: timeoutMs,
    killSignal: "SIGKILL"
  })
  const [stderr, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited])
  return { code, stderr }
}

const aptGet = (args: Array<string>, deadline: number) => {
  const remaining = Math.max(1_000, deadline - Date.now())
  // Wait for another apt/dpkg run's lock rather than failing at once, within the budget.
  const lockWait = Math.max(0, Math.floor(remaining / 1000) - 60)
  return run(["apt-get", "-o", `DPkg::Lock::Timeout=${lockWait}`, ...args], remaining)
}

/** undefined once chromium is on disk, else why it is not. */
const install = async (): Promise<string | undefined> => {
  if (existsSync(chromiumPath)) return undefined
  const missing = `${chromiumPath} does not exist`
  if (process.getuid?.() !== 0) return `${missing}; not root, so it cannot be installed (apt-get install chromium)`
  if (Bun.which("apt-get") === null) return `${missing}; apt-get is not available`
  const deadline = Date.now() + installBudgetMs
  console.log("browser: installing chromium with apt-get (about 100 MB; this can take minutes)")
  const args = ["install", "-y", "--no-install-recommends", "chromium"]
  let ran = await aptGet(args, deadline)
  if (ran.code !== 0) {
    // Usually stale package lists: refresh them once and retry.
    const update = await aptGet(["update"], deadline)
    if (update.code !== 0) return `${missing}; apt-get update failed: ${lastLine(update.stderr) || `status ${update.code}`}`
    ran = await aptGet(args, deadline)
    if (ran.code !== 0) return `${missing}; apt-get install chromium failed: ${lastLine(ran.stderr) || `status ${ran.code}`}`
  }
  return existsSync(chromiumPath) ? undefined : `${missing} even after apt-get install chromium`
}

const launch = (): Promise<Browser> => chromium.launch({ executablePath: chromiumPath, args: launchArgs, timeout: 30_000 })

/** Installed is not enough (missing libraries, no /dev/shm): start it once to be sure. */
const probe = async (): Promise<string | undefined> => {
  const problem = await install()
  if (problem !== undefined) return problem
  try {
    const browser = await launch()
    await browser.close()
    return undefined
  } catch (error) {
    return `${chromiumPath} does not start: ${lastLine(String(error instanceof Error ? error.message : error))}`
  }
}

let outcome: Promise<string | undefined> | undefined

/** undefined when a browser can be launched, else a one-line reason. */
export const browserUnavailable = (): Promise<string | undefined> =>
  (outcome ??= probe().catch((error: unknown) => `browser setup threw: ${String(error)}`))

/** A fresh headless chromium; close it when done. Throws when none can be had. */
export const launchBrowser = async (): Promise<Browser> => {
  const problem = await browserUnavailable()
  if (problem !== undefined) throw new Error(`no browser for tests: ${problem}`)
  return launch()
}
