/**
 * Looking at processes from the outside, the way an operator would: through
 * /proc, not through the supervisor under test.
 */
import { readFileSync } from "node:fs"

/** The state letter of a process (R, S, Z, …), or undefined when no such process exists. */
export const processState = (pid: number): string | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    // The command name is in parentheses and may contain spaces: the state follows the last ")".
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0]
  } catch {
    return undefined
  }
}

/** Running, sleeping or stopped: anything but gone or a zombie. */
export const isRunning = (pid: number): boolean => {
  const state = processState(pid)
  return state !== undefined && state !== "Z" && state !== "X"
}

/** Gone entirely: not even a zombie waiting to be reaped. */
export const isGone = (pid: number): boolean => processState(pid) === undefined

/** Wait until `check` holds, polling every few milliseconds; throws with `what` after `timeoutMs`. */
export const waitFor = async (check: () => boolean, what: string, timeoutMs = 4_000): Promise<number> => {
  const start = performance.now()
  while (!check()) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`)
    await Bun.sleep(2)
  }
  return performance.now() - start
}

/** Lines of a child's stdout, collected as they arrive. */
export const collectLines = (stream: ReadableStream<Uint8Array>): { readonly lines: Array<string>; readonly done: Promise<void> } => {
  const lines: Array<string> = []
  const done = (async () => {
    const decoder = new TextDecoder()
    let pending = ""
    for await (const chunk of stream) {
      pending += decoder.decode(chunk, { stream: true })
      let newline: number
      while ((newline = pending.indexOf("\n")) !== -1) {
        lines.push(pending.slice(0, newline))
        pending = pending.slice(newline + 1)
      }
    }
    if (pending.length > 0) lines.push(pending)
  })()
  return { lines, done }
}

/** The JSON objects among `lines` (other output is ignored). */
export const jsonLines = (lines: ReadonlyArray<string>): Array<Record<string, unknown>> =>
  lines.flatMap((line) => {
    if (!line.startsWith("{")) return []
    try {
      return [JSON.parse(line) as Record<string, unknown>]
    } catch {
      return []
    }
  })
