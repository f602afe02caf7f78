/**
 * The run registry's entries as files: each running launcher's `.cohort/runs/<id>.json`, read and judged
 * live or stale. Plain Node, no Effect: `bun run status` reads them without loading the launcher, and
 * RunRegistry writes them.
 */
import { readdirSync, readFileSync } from "node:fs"
import { hostname } from "node:os"
import { join } from "node:path"
import { pidExists, startTimeOf } from "../../kernel/ProcessLiveness.ts"

export interface RunEntry {
  /** `<name>-<pid>`: what `bun run status --run` takes. */
  readonly id: string
  readonly run: string
  /** Where `bun run status` asks (the address this host dials); empty until the port listens. */
  readonly address: string
  /** 0 until the port listens. */
  readonly port: number
  /** The live page, as the start line prints it; empty until the port listens. */
  readonly page: string
  readonly pid: number
  /** Field 22 of /proc/<pid>/stat: tells this launcher from a later process that got its pid. */
  readonly pidStart: string | undefined
  /** The host the launcher runs on (`os.hostname()`): its pid means something only there. */
  readonly host: string
  readonly startedAt: number
  /** The checkpoint this run writes, as an absolute path; empty for a run that writes none (a command job). */
  readonly checkpoint: string
  /** `POST /start`'s token (`Keys.startToken`): the file is 0600, so only this user's `bun run status --start` reads it. */
  readonly startToken: string
}

/** Whether the entry's launcher still runs (an entry of another host cannot be told, and counts as live). */
export const isLive = (entry: Pick<RunEntry, "host" | "pid" | "pidStart">, here: string = hostname()): boolean => {
  if (entry.host !== here) return true
  if (!pidExists(entry.pid)) return false
  if (entry.pidStart === undefined) return true
  const now = startTimeOf(entry.pid)
  return now === undefined || now === entry.pidStart
}

/**
 * Every readable entry in `dir`, with its file. An entry of an older launcher (`<run>.json`, no id, host or
 * checkpoint) reads with its file's name as id and this host as its host.
 */
export const readEntries = (dir: string): ReadonlyArray<{ readonly file: string; readonly entry: RunEntry }> => {
  let names: Array<string>
  try {
    names = readdirSync(dir).filter((name) => name.endsWith(".json") && !name.startsWith("."))
  } catch {
    return []
  }
  return names.flatMap((name) => {
    const file = join(dir, name)
    try {
      const value = JSON.parse(readFileSync(file, "utf8")) as Partial<RunEntry>
      // A pid of 0 or below would signal a whole process group: such a file is not one of ours.
      if (typeof value.run !== "string" || !Number.isInteger(value.pid) || value.pid! <= 0 || typeof value.startedAt !== "number") return []
      const entry: RunEntry = {
        id: typeof value.id === "string" ? value.id : name.slice(0, -".json".length),
        run: value.run,
        address: typeof value.address === "string" ? value.address : "",
        port: typeof value.port === "number" ? value.port : 0,
        page: typeof value.page === "string" ? value.page : "",
        pid: value.pid!,
        pidStart: typeof value.pidStart === "string" ? value.pidStart : undefined,
        host: typeof value.host === "string" ? value.host : hostname(),
        startedAt: value.startedAt,
        checkpoint: typeof value.checkpoint === "string" ? value.checkpoint : "",
        startToken: typeof value.startToken === "string" ? value.startToken : ""
      }
      return [{ file, entry }]
    } catch {
      // Half-written (a rename makes that rare), or not ours.
      return []
    }
  })
}

/** Another live run already writes this run's checkpoint. */
