/**
 * Leftover run directories: what a sweep removes and what it must leave
 * alone, on real directories and real processes in a temp root; then the
 * whole story with real launchers: a SIGKILLed run's directory stays in
 * /dev/shm until the next run on the host starts, which removes it.
 *
 * The expected names and start times are worked out here from /proc, not
 * through the module under test.
 */
import { afterEach, describe, expect, test } from "bun:test"
import { chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { sweepStaleRunDirs } from "../src/agent/StaleRunDirs.ts"
import { clusterFile, spawnLaunch } from "./support/launch-scenario.ts"
import { childrenOf, isGone, isRunning, pidFiles, waitFor } from "./support/processes.ts"

/** Field 22 of /proc/<pid>/stat: the fields after the command name start at field 3. */
const startTime = (pid: number): string => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]!
}
const pidNamespace = /\d+/.exec(readlinkSync("/proc/self/ns/pid"))![0]
const owned = (run: string, pid: number, start: string, suffix: string, namespace = pidNamespace) =>
  `cohort-${run}-${pid}.${start}.${namespace}-${suffix}`

const isRoot = process.getuid?.() === 0

const spawned: Array<Bun.Subprocess> = []
const roots: Array<string> = []
afterEach(() => {
  for (const proc of spawned.splice(0)) proc.kill("SIGKILL")
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true })
})

const tempRoot = () => {
  const root = mkdtempSync(join(tmpdir(), "stale-sweep-"))
  roots.push(root)
  return root
}
const sleeper = () => {
  const proc = Bun.spawn(["sleep", "30"], { stdout: "ignore", stderr: "ignore" })
  spawned.push(proc)
  return proc
}
/** A run directory with something in it, as an agent leaves one: segments and a nested entry. */
const runDir = (root: string, name: string) => {
  const path = join(root, name)
  mkdirSync(join(path, "nested"), { recursive: true })
  writeFileSync(join(path, "segment-0"), "x".repeat(4096))
  writeFileSync(join(path, "nested", "file"), "y")
  return path
}

describe("sweepStaleRunDirs", () => {
  test("removes exactly the directories whose owner ended, or whose pid now names a newer process", async () => {
    const root = tempRoot()
    const live = sleeper()
    const liveStart = startTime(live.pid)
    const dead = sleeper()
    const deadStart = startTime(dead.pid)
    dead.kill("SIGKILL")
    await dead.exited // reaped: /proc/<pid> is gone
    await waitFor(() => isGone(dead.pid), "the killed process gone from /proc")

    const outside = mkdtempSync(join(tmpdir(), "stale-sweep-target-"))
    roots.push(outside)
    writeFileSync(join(outside, "keep"), "k")

    const ofLive = runDir(root, owned("live", live.pid, liveStart, "aB3dE5"))
    const ofSelf = runDir(root, owned("self", process.pid, startTime(process.pid), "Zz0000"))
    const ofDead = runDir(root, owned("my-run.v2-1", dead.pid, deadStart, "q1W2e3"))
    const recycled = runDir(root, owned("recycled", live.pid, String(Number(liveStart) + 1), "r4T5y6"))
    const oldFormat = runDir(root, "cohort-old-abc123")
    const probe = runDir(root, "cohort-probe-Xy12ab")
    const otherNamespace = runDir(root, owned("elsewhere", dead.pid, deadStart, "n0n0n0", "1"))
    const notOurs = runDir(root, owned("plain", dead.pid, deadStart, "p1p2p3").replace(/^cohort-/, "other-"))
    const link = join(root, owned("link", dead.pid, deadStart, "l1n2k3"))
    symlinkSync(outside, link)
    const file = join(root, owned("file", dead.pid, deadStart, "f1l2e3"))
    writeFileSync(file, "not a directory")

    const removed = sweepStaleRunDirs(root)

    expect([...removed].sort()).toEqual([ofDead, recycled].sort())
    expect(existsSync(ofDead)).toBe(false)
    expect(existsSync(recycled)).toBe(false)
    for (const kept of [ofLive, ofSelf, oldFormat, probe, otherNamespace, notOurs]) {
      expect(existsSync(join(kept, "nested", "file"))).toBe(true)
    }
    // The symlink is neither followed nor removed; what it points at is untouched.
    expect(lstatSync(link).isSymbolicLink()).toBe(true)
    expect(readFileSync(join(outside, "keep"), "utf8")).toBe("k")
    expect(readFileSync(file, "utf8")).toBe("not a directory")
    // Nothing is left to remove: a second sweep finds nothing.
    expect(sweepStaleRunDirs(root)).toEqual([])
  })

  test.skipIf(!isRoot)("leaves another user's directory alone, even when its owner ended (runs as root only: it needs chown)", async () => {
    const root = tempRoot()
    const dead = sleeper()
    const deadStart = startTime(dead.pid)
    dead.kill("SIGKILL")
    await dead.exited
    await waitFor(() => isGone(dead.pid), "the killed process gone from /proc")
    const theirs = runDir(root, owned("theirs", dead.pid, deadStart, "u6u5u4"))
    for (const path of [theirs, join(theirs, "nested"), join(theirs, "nested", "file"), join(theirs, "segment-0")]) chownSync(path, 65534, 65534)
    const mine = runDir(root, owned("mine", dead.pid, deadStart, "m1m2m3"))

    expect(sweepStaleRunDirs(root)).toEqual([mine])
    expect(lstatSync(theirs).uid).toBe(65534)
    expect(existsSync(join(theirs, "nested", "file"))).toBe(true)
  })
  if (!isRoot) console.warn("stale-run-dirs: skipping the other-user case: chown to uid 65534 needs root")

  test("never throws: a root that does not exist, or is a file, gives an empty list", () => {
    const root = tempRoot()
    expect(sweepStaleRunDirs(join(root, "missing"))).toEqual([])
    writeFileSync(join(root, "plain"), "")
    expect(sweepStaleRunDirs(join(root, "plain"))).toEqual([])
  })
})

describe("a SIGKILLed run's directory in /dev/shm", () => {
  const launched: Array<Bun.Subprocess> = []
  const leftovers: Array<string> = []
  afterEach(async () => {
    for (const proc of launched.splice(0)) {
      proc.kill("SIGKILL")
      await proc.exited
    }
    // A run killed here leaves its directory like any other: take it away rather than leave it to the next run.
    for (const path of leftovers.splice(0)) rmSync(path, { recursive: true, force: true })
  })

  const shm = "/dev/shm"
  /** The run directory a launcher's in-process agent made: its pid is in the name. */
  const runDirOf = (pid: number): string | undefined => {
    const name = readdirSync(shm).find((entry) => entry.startsWith("cohort-") && new RegExp(`-${pid}\\.\\d+\\.\\d+-[A-Za-z0-9]{6}$`).test(entry))
    return name === undefined ? undefined : join(shm, name)
  }
  const launch = () => {
    const dir = mkdtempSync(join(tmpdir(), "stale-e2e-"))
    roots.push(dir)
    const file = join(dir, "cluster.yml")
    writeFileSync(file, clusterFile({ devices: 1, args: ["hold"], name: "stale-e2e" }, dir))
    const run = spawnLaunch(file)
    launched.push(run.proc)
    return { ...run, dir }
  }

  /** A timeout, with what the launcher said and what /dev/shm holds: why it did not get there. */
  const explain = (run: ReturnType<typeof launch>) => (error: Error): never => {
    throw new Error(`${error.message}\nthe launcher's stderr:\n${run.stderr.lines.join("\n")}\n${shm}: ${readdirSync(shm).join(" ")}`)
  }

  test.skipIf(!existsSync(shm))("stays after SIGKILL, and the next run on the host removes it", async () => {
    const first = launch()
    let firstDir: string | undefined
    await waitFor(() => (firstDir = runDirOf(first.proc.pid)) !== undefined && pidFiles(first.dir).length === 1, "the first run's directory and its rank", 10_000)
      .catch(explain(first))
    leftovers.push(firstDir!)
    // The relay listens in the directory: with its socket there, the directory is as a live run has it.
    await waitFor(() => existsSync(join(firstDir!, "relay.sock")), "the first run's relay socket", 5_000).catch(explain(first))
    const children = childrenOf(first.proc.pid)
    expect(children.length).toBeGreaterThan(0) // the rank, and the relay
    first.proc.kill("SIGKILL")
    await first.proc.exited
    await waitFor(() => [...children, ...pidFiles(first.dir)].every((pid) => !isRunning(pid)), "the first run's ranks and relay gone", 5_000)
    expect(existsSync(firstDir!)).toBe(true)

    const second = launch()
    let secondDir: string | undefined
    await waitFor(() => (secondDir = runDirOf(second.proc.pid)) !== undefined, "the second run's directory", 10_000).catch(explain(second))
    leftovers.push(secondDir!)
    expect(existsSync(firstDir!)).toBe(false)
    const said = /localhost: removed \d+ leftover run director(y|ies) of ended runs from \/dev\/shm/
    await waitFor(() => second.stderr.lines.some((line) => said.test(line)), "the second run to say what it removed", 5_000).catch(explain(second))
  }, 20_000)
})
