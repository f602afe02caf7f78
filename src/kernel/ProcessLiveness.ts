/**
 * Is that process still the one we mean? A pid alone can be reused after its
 * process ends, so records of a process (a run's registry entry, a host's run
 * directory) keep its start time too, and a live pid whose start time differs
 * is someone else. Plain Node calls: the status CLI reads these without
 * loading the launcher.
 */
import { readFileSync } from "node:fs"

/**
 * A process's start time (field 22 of /proc/<pid>/stat, in clock ticks since boot); "gone" when /proc
 * has no such process; undefined when it cannot be told (no /proc, or /proc hides it).
 */
export const startTimeOf = (pid: number): string | "gone" | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    // The command name (field 2) is in parentheses and may hold spaces: count from after the last ")", where field 3 is.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[22 - 3]
  } catch (error) {
    // ESRCH: it ended while being read.
    const code = (error as NodeJS.ErrnoException).code
    return code === "ENOENT" || code === "ESRCH" ? "gone" : undefined
  }
}

/** Whether a process of that pid exists, whoever's it is. */
export const pidExists = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: it exists, as another user's process.
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}
