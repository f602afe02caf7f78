/**
 * The whole suite's slowest set-up is apt's: chromium for the browser tests and python3-torch for the
 * torch ones, a few hundred MB, each installed by the first test that needs it, which then waits for
 * the download with two cores idle. Preloaded (bunfig.toml), this starts that install at the suite's
 * start, in the background at the lowest CPU and I/O priority, so it overlaps the tests before them.
 *
 * Nothing depends on it: those tests still check for and install what they need, waiting for this
 * install's dpkg lock first (so they find the packages in place, or install them themselves if it
 * failed). It runs only for the whole suite as the README and CI run it (`bun test`, no file or
 * filter), as root with apt-get; the fast tier, a single file or `-t` never start it.
 */
import { existsSync, readFileSync } from "node:fs"

const wholeSuite = (): boolean => {
  try {
    const words = readFileSync("/proc/self/cmdline", "utf8").split("\0").filter(Boolean)
    const at = words.indexOf("test")
    return at !== -1 && words.slice(at + 1).length === 0
  } catch {
    return false
  }
}

const installed = (name: string): boolean =>
  Bun.spawnSync(["dpkg-query", "-W", "-f=${Status}", name], { stdout: "pipe", stderr: "ignore" }).stdout.toString() === "install ok installed"

const missing = (): Array<string> => [
  ...(existsSync("/usr/bin/chromium") ? [] : ["chromium"]),
  ...(installed("python3-torch") ? [] : ["python3-torch"])
]

if (process.getuid?.() === 0 && Bun.which("apt-get") !== null && Bun.which("dpkg-query") !== null && wholeSuite()) {
  const packages = missing()
  if (packages.length > 0) {
    const install = `apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends ${packages.join(" ")}`
    // Stale package lists are the usual failure: refresh once and try again, as the tests themselves do.
    const script = `${install} || { apt-get -o DPkg::Lock::Timeout=600 update && ${install}; }`
    const lowest = [...(Bun.which("nice") === null ? [] : ["nice", "-n", "19"]), ...(Bun.which("ionice") === null ? [] : ["ionice", "-c", "3"])]
    const log = "/tmp/cohort-test-prefetch.log"
    console.log(`test set-up: installing ${packages.join(" and ")} in the background for the tests that need them (log: ${log})`)
    const child = Bun.spawn([...lowest, "sh", "-c", `exec >${log} 2>&1; ${script}`], {
      stdin: "ignore",
      stdout: "ignore",
      stderr: "ignore",
      env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" }
    })
    // The suite does not wait for it: the tests that need the packages do, through dpkg's lock.
    child.unref()
  }
}
