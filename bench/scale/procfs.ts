/** What /proc says about a process: its memory high-water mark and the CPU it has used. */
import { readFileSync } from "node:fs"

/** Kernel clock ticks per second (getconf CLK_TCK); 100 on every Linux this runs on. */
const CLK_TCK = (() => {
  const out = Bun.spawnSync(["getconf", "CLK_TCK"]).stdout.toString().trim()
  return Number(out) > 0 ? Number(out) : 100
})()

/** A `Vm*` line of /proc/<pid>/status, in MiB. */
export const vmMiB = (pid: number, field: "VmHWM" | "VmRSS"): number => {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))
  if (match === null) throw new Error(`no ${field} for pid ${pid}`)
  return Number(match[1]) / 1024
}

/** utime and stime of the process (all its threads), in seconds. */
export const cpuTimes = (pid: number): { readonly user: number; readonly system: number } => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  // The command name may hold spaces and parentheses: count fields after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return { user: Number(fields[11]) / CLK_TCK, system: Number(fields[12]) / CLK_TCK }
}

/** utime + stime of the process (all its threads), in seconds. */
export const cpuSeconds = (pid: number): number => {
  const { system, user } = cpuTimes(pid)
  return user + system
}

/**
 * How long the process's main thread (its JS thread) has waited on a run queue, runnable but not running, in
 * seconds (/proc/<pid>/schedstat, the scheduler's own count): the time the machine's other work took from it.
 */
export const runQueueSeconds = (pid: number): number => Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[1]) / 1e9

/** The kernel's count of connections dropped because a listen queue was full (TcpExt ListenOverflows, whole machine). */
export const listenOverflows = (): number => {
  const [names, values] = readFileSync("/proc/net/netstat", "utf8").split("\n").filter((line) => line.startsWith("TcpExt:"))
  const index = names!.split(" ").indexOf("ListenOverflows")
  return index < 0 ? NaN : Number(values!.split(" ")[index])
}
