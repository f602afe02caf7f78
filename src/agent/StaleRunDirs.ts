/**
 * Leftover run directories. Each agent keeps its run's relay socket and
 * shared-memory segments in a private directory under /dev/shm and removes
 * it when its Scope closes; an agent (or a launcher, whose in-process agent
 * it is) that is SIGKILLed never gets there, and /dev/shm is memory, so such
 * a directory would stay until the host reboots. The next agent on the host
 * removes them instead.
 *
 * Whose directory is it, and has its owner ended? The name says, so nothing
 * needs a lock or a second file: `cohort-<run>-<pid>.<start>.<pidns>-XXXXXX`,
 * where `<start>` is the owner's start time (field 22 of /proc/<pid>/stat, in
 * clock ticks since boot) and `<pidns>` its pid namespace. A pid alone would
 * not do: pids are reused, and a directory whose pid now names some unrelated
 * live process would stay forever, while one whose pid was reused by nothing
 * yet would be judged right only by luck. The start time tells the original
 * owner from a newcomer with its pid. The namespace is there because /dev/shm
 * can be shared by containers that each see their own pids (`--ipc=host`, a
 * bind mount): a pid from another namespace means nothing in ours, so such a
 * directory is left to an agent of its own namespace.
 *
 * Linux only: without /proc no owner can be judged, so names carry no owner
 * (the old format, `cohort-<run>-XXXXXX`) and nothing is ever swept.
 */
import { lstatSync, readdirSync, readlinkSync, rmSync } from "node:fs"
import { join } from "node:path"
import { startTimeOf } from "../kernel/ProcessLiveness.ts"

/** Who made a directory: enough to tell, later, whether that very process still lives. */
interface Owner {
  readonly pid: number
  /** Field 22 of /proc/<pid>/stat, as written there (clock ticks since boot). */
  readonly start: string
  /** The inode of /proc/<pid>/ns/pid. */
  readonly namespace: string
}

/** `cohort-<run>-<pid>.<start>.<pidns>-<mkdtemp's 6 characters>`; the run name may itself hold `-` and `.`, so it is matched from the end. */
const OWNED = /^cohort-.*-(\d+)\.(\d+)\.(\d+)-[A-Za-z0-9]{6}$/

/** The inode of this process's pid namespace, from `pid:[4026531836]`. */
const namespaceOfSelf = (): string | undefined => {
  try {
    return /^pid:\[(\d+)\]$/.exec(readlinkSync("/proc/self/ns/pid"))?.[1]
  } catch {
    return undefined
  }
}

let self: Owner | undefined | null = null
/** This process as an owner, read once (none of it changes while the process lives); undefined without /proc. */
const selfOwner = (): Owner | undefined => {
  if (self === null) {
    const start = startTimeOf(process.pid)
    const namespace = namespaceOfSelf()
    self = start !== undefined && /^\d+$/.test(start) && namespace !== undefined ? { pid: process.pid, start, namespace } : undefined
  }
  return self
}

/**
 * The prefix to hand `mkdtempSync` for this process's directory of `run` in
 * `root`. The run name is made safe for a file name and cut to 32 characters,
 * which keeps `<dir>/relay.sock` within a Unix socket path's 107 bytes.
 */
export const runDirPrefix = (root: string, run: string): string => {
  const safe = run.replace(/[^A-Za-z0-9_.-]/g, "_").slice(0, 32)
  const owner = selfOwner()
  return join(root, owner === undefined ? `cohort-${safe}-` : `cohort-${safe}-${owner.pid}.${owner.start}.${owner.namespace}-`)
}

/**
 * Remove the run directories in `root` whose owner has ended; returns their
 * paths. Only real directories (a symlink is never followed, nor removed),
 * only this user's, only names in the owner format, only of this pid
 * namespace, and only when /proc/<pid> is gone or names a process that
 * started at another time. Whatever cannot be judged or removed is left as
 * it is: this runs on an agent's start-up path and must never stop it.
 */
export const sweepStaleRunDirs = (root: string): ReadonlyArray<string> => {
  const me = selfOwner()
  const uid = process.getuid?.()
  if (me === undefined || uid === undefined) return []
  let names: Array<string>
  try {
    names = readdirSync(root)
  } catch {
    return []
  }
  const removed: Array<string> = []
  for (const name of names) {
    // /dev/shm may hold many other programs' segments: the cheap test first, and lstat only for our names.
    if (!name.startsWith("cohort-")) continue
    const match = OWNED.exec(name)
    if (match === null) continue
    const [, pid, start, namespace] = match
    if (namespace !== me.namespace) continue
    const path = join(root, name)
    try {
      const stat = lstatSync(path)
      if (!stat.isDirectory() || stat.uid !== uid) continue
      // Kept while its owner still lives (the same pid, started at the same tick) or cannot be told.
      // A zombie counts as alive: it is reaped soon, and the next sweep has it.
      const now = startTimeOf(Number(pid))
      if (now === undefined || now === start) continue
      // Not `force`: a directory that another agent's sweep removed first is not ours to report.
      rmSync(path, { recursive: true })
      removed.push(path)
    } catch {
      // Gone mid-sweep, or not removable by us: someone else's concern, or the next sweep's.
    }
  }
  return removed
}
