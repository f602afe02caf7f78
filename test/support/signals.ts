/**
 * A process's pending signals, read from /proc/<pid>/status as an operator would: what has been sent to it
 * and not yet acted on.
 */
import { readFileSync } from "node:fs"

const mask = (status: string, field: "SigPnd" | "ShdPnd"): bigint => {
  const line = status.split("\n").find((each) => each.startsWith(`${field}:`))
  if (line === undefined) throw new Error(`/proc status has no ${field} line`)
  return BigInt(`0x${line.slice(field.length + 1).trim()}`)
}

/**
 * Whether `signal` (a number: 9 for SIGKILL) is pending for `pid`, sent to the process (ShdPnd) or to its main
 * thread (SigPnd); undefined when the process is gone. A SIGKILL sent to a process stays in ShdPnd until it has
 * been reaped, so a process that still exists with the bit clear was never sent one.
 */
export const signalPending = (pid: number, signal: number): boolean | undefined => {
  let status: string
  try {
    status = readFileSync(`/proc/${pid}/status`, "utf8")
  } catch {
    return undefined
  }
  const bit = 1n << BigInt(signal - 1)
  return ((mask(status, "SigPnd") | mask(status, "ShdPnd")) & bit) !== 0n
}
