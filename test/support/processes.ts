/**
 * Looking at processes from the outside, the way an operator would: through
 * /proc, not through the supervisor under test.
 */
import { readdirSync, readFileSync } from "node:fs"

/** The fields of /proc/<pid>/stat after the command name (state, ppid, …), or undefined when it is gone. */
const statFields = (pid: number): Array<string> | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    // The command name is in parentheses and may contain spaces: the fields follow the last ")".
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  } catch {
    return undefined
  }
}

/** The state letter of a process (R, S, Z, …), or undefined when no such process exists. */
export const processState = (pid: number): string | undefined => statFields(pid)?.[0]

/** A process's parent pid, or undefined when it is gone. */
export const parentOf = (pid: number): number | undefined => {
  const parent = statFields(pid)?.[1]
  return parent === undefined ? undefined : Number(parent)
}

/** Every process id on this machine. */
export const allPids = (): Array<number> => readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number)

/** The processes whose parent is `pid`. */
export const childrenOf = (pid: number): Array<number> => allPids().filter((candidate) => parentOf(candidate) === pid)

/** A process's argv joined by spaces ("" once it is gone, or while it is exec'ing). */
export const commandLine = (pid: number): string => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ")
  } catch {
    return ""
  }
}

/** A process's environment (readable for our own user's processes). */
export const environment = (pid: number): Record<string, string> =>
  Object.fromEntries(readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").filter(Boolean).map((entry) => {
    const at = entry.indexOf("=")
    return [entry.slice(0, at), entry.slice(at + 1)]
  }))

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

/** Lines of a child's stream, collected as they arrive, each with the time (performance.now()) it came. */
export const collectLines = (stream: ReadableStream<Uint8Array>): { readonly lines: Array<string>; readonly times: Array<number>; readonly done: Promise<void> } => {
  const lines: Array<string> = []
  const times: Array<number> = []
  const done = (async () => {
    const decoder = new TextDecoder()
    let pending = ""
    for await (const chunk of stream) {
      pending += decoder.decode(chunk, { stream: true })
      let newline: number
      while ((newline = pending.indexOf("\n")) !== -1) {
        lines.push(pending.slice(0, newline))
        times.push(performance.now())
        pending = pending.slice(newline + 1)
      }
    }
    if (pending.length > 0) {
      lines.push(pending)
      times.push(performance.now())
    }
  })()
  return { lines, times, done }
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

/** The pids a fixture wrote as `<name>.pid` files into `dir`. */
export const pidFiles = (dir: string): Array<number> =>
  readdirSync(dir)
    .filter((name) => name.endsWith(".pid"))
    .map((name) => Number(readFileSync(`${dir}/${name}`, "utf8")))
    // A file read between its creation and its write is empty (0): that rank has not written its pid yet.
    .filter((pid) => Number.isInteger(pid) && pid > 0)
