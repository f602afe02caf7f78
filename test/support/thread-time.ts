/**
 * The time this thread has spent running on a CPU, from the kernel's scheduler statistics
 * (/proc/thread-self/schedstat: nanoseconds on a CPU, nanoseconds waiting for one, slices).
 *
 * For claims about how long work held the event loop: wall-clock gaps also count the time a loaded machine
 * gave the CPU to other processes, which says nothing about the code under test; this thread's own CPU time
 * between two ticks of a timer is the work that ran before the timer got its turn, whatever the load.
 */
import { readFileSync } from "node:fs"

const SCHEDSTAT = "/proc/thread-self/schedstat"

/** Whether this kernel reports per-thread CPU time (Linux with scheduler statistics, as Debian's and most are). */
export const hasThreadCpuTime = (() => {
  try {
    return Number.isFinite(Number(readFileSync(SCHEDSTAT, "utf8").split(" ")[0]))
  } catch {
    return false
  }
})()

/** Milliseconds of CPU the calling thread has used (call it from the thread you measure: here, the event loop's). */
export const threadCpuMs = (): number => Number(readFileSync(SCHEDSTAT, "utf8").split(" ")[0]) / 1e6
