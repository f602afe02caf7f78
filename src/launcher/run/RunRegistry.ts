/**
 * The runs of this checkout: `.cohort/runs/<id>.json` under the launch's
 * working directory, one file per running launcher, so that `bun run status`
 * finds them and two runs never take the same checkpoint.
 *
 * A run's id is `<name>-<pid>`: unique among the live launchers of a host
 * without any locking, and it says which process to look at. The entry is
 * written at the run's start (before any agent starts), holding the
 * checkpoint it will write, and the start token; once the port listens it
 * gains the address, the port and the page's URL, which carries the page
 * token (StatusBoard): the file is 0600, so only this user's `bun run
 * status` reads them. It is removed when the run ends.
 *
 * Two runs of one file would overwrite each other's checkpoint (the
 * second's epoch 18 over the first's epoch 153). So a run whose checkpoint
 * another live run's entry names is refused at start. A claim writes its own
 * entry first and only then reads the others': a launcher that finds no
 * rival has written before any rival read, so every later claimant sees it.
 * One that finds a rival steps back, whoever started first: two launchers
 * started in the same instant may both step back (said so, and harmless),
 * but two never both go on.
 *
 * An entry left by a killed launcher names a pid that is gone, or one reused
 * by another process since (its start time in /proc differs): it is ignored,
 * and removed by the next run's claim. An entry written on another host (a
 * checkout shared over NFS) cannot be checked from here and counts as live.
 */
import { rmSync } from "node:fs"
import { hostname } from "node:os"
import { join, resolve } from "node:path"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { PrivateFileError, privateDirectory, writePrivateFile } from "./PrivateFiles.ts"
import { isLive, readEntries, type RunEntry } from "./RunEntries.ts"
import { startTimeOf } from "../../kernel/ProcessLiveness.ts"
import { invokedAs } from "../../kernel/ProgramName.ts"

export const RUNS_DIR = ".cohort/runs"

export type { RunEntry } from "./RunEntries.ts"
export { isLive, readEntries } from "./RunEntries.ts"

/** A run's id: its name and its launcher's pid. */
export const runId = (run: string, pid: number): string => `${run}-${pid}`

/** The entry's file; a name is a plain name (ClusterConfig), the replacement only guards a library caller's. */
const fileOf = (dir: string, id: string) => join(dir, `${id.replace(/[^A-Za-z0-9_.-]/g, "_")}.json`)

export class CheckpointTaken extends Data.TaggedError("CheckpointTaken")<{
  readonly checkpoint: string
  readonly other: RunEntry
  readonly otherHost: boolean
  /** This run's name. */
  readonly run: string
}> {
  override get message(): string {
    const { other, run } = this
    const where = other.page !== "" ? `, page ${other.page}` : ""
    const started = new Date(other.startedAt).toTimeString().slice(0, 8)
    const said = `(pid ${other.pid}, started ${started}${where})`
    const wait = this.otherHost
      ? `wait for that run to end (it runs on ${other.host}; if that launcher is gone, remove ${RUNS_DIR}/${other.id}.json)`
      : `wait for that run to end (stop it with kill -TERM ${other.pid})`
    // The name's own checkpoint (Plan.checkpointPath's default): another name is another checkpoint, and
    // `--set name=` is the fix a sweep of one script needs. A checkpoint the file names moves only with job.checkpoint.
    const byName = resolve(this.checkpoint) === resolve(`.cohort/checkpoints/${run}.json`)
    const fix = byName ? `give this one its own name with --set name=${run}-2` : "give this one its own checkpoint with --set job.checkpoint=PATH"
    if (byName && other.run === run) {
      return `another run named ${run} is running ${this.otherHost ? `on ${other.host}` : "here"} ${said}: it writes ${this.checkpoint}, ` +
        `which a second run would overwrite. To run both, ${fix}; or ${wait}`
    }
    return `the checkpoint ${this.checkpoint} belongs to run ${other.id}, which is running ${said}: a second run would overwrite it. ` +
      `To run both, ${fix}; or ${wait}`
  }
}

/** This run's entry, written and live until the Scope closes. */
export interface Registration {
  readonly id: string
  /** The port listens: `bun run status` can ask it now. */
  readonly listening: (where: { readonly address: string; readonly port: number; readonly page: string }) => Effect.Effect<void>
}

export interface ClaimOptions {
  readonly run: string
  /** The checkpoint the run writes; undefined: it writes none, and claims none. */
  readonly checkpoint: string | undefined
  readonly startedAt: number
  readonly startToken: string
  /** Where the entries are (default RUNS_DIR, under the working directory). */
  readonly dir?: string
  /** Tests stand in for another launcher. */
  readonly pid?: number
}

/**
 * Register this run until the Scope closes, refusing it (`CheckpointTaken`) when another live run holds the
 * same checkpoint. A folder that cannot be written only costs the discovery (and the check): one another
 * user could write is refused with a warning (see PrivateFiles).
 */
export const claim = (options: ClaimOptions): Effect.Effect<Registration, CheckpointTaken, Scope.Scope> =>
  Effect.gen(function*() {
    const dir = options.dir ?? RUNS_DIR
    const pid = options.pid ?? process.pid
    const start = startTimeOf(pid)
    const own: RunEntry = {
      id: runId(options.run, pid),
      run: options.run,
      address: "",
      port: 0,
      page: "",
      pid,
      pidStart: start === undefined || start === "gone" ? undefined : start,
      host: hostname(),
      startedAt: options.startedAt,
      checkpoint: options.checkpoint === undefined ? "" : resolve(options.checkpoint),
      startToken: options.startToken
    }
    const file = fileOf(dir, own.id)
    let current = own
    const write = (entry: RunEntry): Effect.Effect<boolean> =>
      Effect.suspend(() => {
        try {
          privateDirectory(dir)
          writePrivateFile(file, `${JSON.stringify(entry)}\n`)
          return Effect.succeed(true)
        } catch (error) {
          return error instanceof PrivateFileError
            ? Effect.as(Effect.logWarning(`\`${invokedAs("status")}\` will not find this run: ${error.message}`), false)
            : Effect.succeed(false)
        }
      })
    const written = yield* Effect.acquireRelease(write(own), (written) => Effect.sync(() => written && rmSync(file, { force: true })))
    if (written) {
      const here = hostname()
      for (const { entry, file: other } of readEntries(dir)) {
        if (entry.id === own.id && entry.pid === own.pid) continue
        if (!isLive(entry, here)) {
          // A killed launcher's entry: nobody else will remove it.
          if (entry.host === here) rmSync(other, { force: true })
          continue
        }
        if (own.checkpoint !== "" && entry.checkpoint === own.checkpoint) {
          return yield* new CheckpointTaken({ checkpoint: options.checkpoint!, other: entry, otherHost: entry.host !== here, run: options.run })
        }
      }
    }
    return {
      id: own.id,
      listening: (where) =>
        Effect.suspend(() => {
          current = { ...current, ...where }
          return written ? Effect.asVoid(write(current)) : Effect.void
        })
    }
  })
