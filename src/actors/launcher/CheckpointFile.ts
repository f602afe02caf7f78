/**
 * The consensus checkpoint on disk: one JSON file, replaced atomically
 * (written to a fresh temporary file beside it, then renamed over it), so a
 * crash mid-write leaves the previous checkpoint whole. It holds the model's
 * weights: 0600 in a 0700 folder, and `--resume` trusts only a file of this
 * user's that nobody else can write (see PrivateFiles).
 */
import { existsSync, readFileSync } from "node:fs"
import { dirname } from "node:path"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import { checkPrivateFile, PrivateFileError, privateDirectory, writePrivateFile } from "./PrivateFiles.ts"

export type SaveReason = "checkpoint" | "max_failure_exceeded" | "all_ranks_lost"

export interface CheckpointRecord {
  readonly version: 1
  readonly run: string
  /** The last epoch the state has finished. */
  readonly epoch: number
  readonly reason: SaveReason
  readonly savedAt: string
  readonly world: number
  readonly dead: ReadonlyArray<number>
  /** The ranks' state, as StateJson text. */
  readonly state: string
  /** The controller's model root (anchor or centre, outer momentum), as StateJson text, when it has one. */
  readonly root?: string | undefined
}

export class CheckpointError extends Data.TaggedError("CheckpointError")<{ readonly path: string; readonly reason: string }> {
  override get message(): string {
    return `checkpoint ${this.path}: ${this.reason}`
  }
}

export const write = (path: string, record: CheckpointRecord): Effect.Effect<void, CheckpointError> =>
  Effect.try({
    try: () => {
      privateDirectory(dirname(path))
      writePrivateFile(path, JSON.stringify(record))
    },
    catch: (error) => new CheckpointError({ path, reason: `cannot write it: ${(error as Error).message}` })
  })

export const read = (path: string): Effect.Effect<CheckpointRecord, CheckpointError> =>
  Effect.gen(function*() {
    const text = yield* Effect.try({
      // Weights another user could have written are not resumed from.
      try: () => (checkPrivateFile(path), readFileSync(path, "utf8")),
      catch: (error) =>
        new CheckpointError({
          path,
          reason: error instanceof PrivateFileError
            ? `${error.problem}; a checkpoint to resume from must be yours alone`
            : (error as NodeJS.ErrnoException).code === "ENOENT"
            ? "there is no checkpoint to resume from (run without --resume, or set job.checkpoint to the file)"
            : `cannot read it: ${(error as Error).message}`
        })
    })
    const record = yield* Effect.try({
      try: () => JSON.parse(text) as Partial<CheckpointRecord>,
      catch: () => new CheckpointError({ path, reason: "it is not JSON: not a cohort checkpoint" })
    })
    if (typeof record !== "object" || record === null || record.version !== 1 || typeof record.epoch !== "number" || typeof record.state !== "string") {
      return yield* new CheckpointError({ path, reason: "it is not a cohort checkpoint (version 1 with epoch and state)" })
    }
    return record as CheckpointRecord
  })

/** What is at a checkpoint's path, for a run that does not resume from it. */
export type Found =
  | { readonly _tag: "Absent" }
  | { readonly _tag: "Checkpoint"; readonly record: CheckpointRecord }
  | { readonly _tag: "Unreadable"; readonly reason: string }

/** Look at what a run's first save would replace; a file that is not a checkpoint of this user's says why. */
export const peek = (path: string): Effect.Effect<Found> =>
  Effect.suspend(() =>
    existsSync(path)
      ? read(path).pipe(Effect.match({
        onFailure: (error): Found => ({ _tag: "Unreadable", reason: error.reason.replace(/; a checkpoint to resume from must be yours alone$/, "") }),
        onSuccess: (record): Found => ({ _tag: "Checkpoint", record })
      }))
      : Effect.succeed<Found>({ _tag: "Absent" })
  )
