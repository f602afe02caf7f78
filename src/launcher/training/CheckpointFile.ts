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
import { checkPrivateFile, PrivateFileError, privateDirectory, writePrivateFile } from "../run/PrivateFiles.ts"

/** Why a checkpoint was written: an epoch's consensus, or a stop (the limit crossed, every rank lost, Ctrl-C or SIGTERM). */
export type SaveReason = "checkpoint" | "max_failure_exceeded" | "all_ranks_lost" | "interrupted"

/** The samples [start, end). */
export interface SampleRange {
  readonly start: number
  readonly end: number
}

/**
 * A state taken mid-epoch: the epoch in progress (the one after the record's `epoch`) and exactly the samples
 * of it that the state has learnt from. `--resume` trains only the rest of that epoch. Optional: a checkpoint
 * taken at an epoch's end has none (and an older cohort, not knowing the field, redoes the epoch whole).
 */
export interface Coverage {
  readonly epoch: number
  /** The dataset the ranges are of: a run with another `job.dataset_size` cannot continue them. */
  readonly datasetSize: number
  /** Sorted, disjoint, inside [0, datasetSize). */
  readonly done: ReadonlyArray<SampleRange>
}

export interface CheckpointRecord {
  readonly version: 1
  readonly run: string
  /** The last epoch the state has finished (the one before `coverage.epoch` when there is a coverage). */
  readonly epoch: number
  readonly reason: SaveReason
  readonly savedAt: string
  readonly world: number
  readonly dead: ReadonlyArray<number>
  /** The ranks' state, as StateJson text. */
  readonly state: string
  /** The controller's model root (anchor or centre, outer momentum), as StateJson text, when it has one. */
  readonly root?: string | undefined
  /** Present when the state was taken mid-epoch. */
  readonly coverage?: Coverage | undefined
}

/** Samples a coverage holds. */
export const coveredCount = (coverage: Coverage): number => coverage.done.reduce((sum, { end, start }) => sum + end - start, 0)

/** "epoch 3 at 18,432 of 50,000 samples done": where a mid-epoch checkpoint resumes. */
export const describeCoverage = (coverage: Coverage): string =>
  `epoch ${coverage.epoch} at ${coveredCount(coverage).toLocaleString("en-US")} of ${coverage.datasetSize.toLocaleString("en-US")} samples done`

/** What is wrong with a record's coverage (read from a file, so anything), or undefined when it is sound. */
export const coverageProblem = (epoch: number, coverage: unknown): string | undefined => {
  if (typeof coverage !== "object" || coverage === null) return "coverage is not an object"
  const { datasetSize, done, epoch: partOf } = coverage as Partial<Record<keyof Coverage, unknown>>
  if (partOf !== epoch + 1) return `coverage.epoch is ${String(partOf)}, but a state that finished epoch ${epoch} is part of epoch ${epoch + 1}`
  if (!Number.isSafeInteger(datasetSize) || (datasetSize as number) < 1) return `coverage.datasetSize is ${String(datasetSize)}, not a whole number ≥ 1`
  if (!Array.isArray(done)) return "coverage.done is not a list of sample ranges"
  let after = -1
  for (const [i, range] of done.entries()) {
    const { end, start } = (range ?? {}) as Partial<SampleRange>
    if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start! < 0 || end! <= start! || end! > (datasetSize as number)) {
      return `coverage.done[${i}] is ${JSON.stringify(range)}, not a range [start, end) inside [0, ${String(datasetSize)})`
    }
    if (start! < after) return `coverage.done[${i}] starts at ${start}, inside the range before it (which ends at ${after})`
    after = end!
  }
  return undefined
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
    if (record.coverage !== undefined) {
      const problem = coverageProblem(record.epoch, record.coverage)
      if (problem !== undefined) return yield* new CheckpointError({ path, reason: `its mid-epoch ${problem}: the file is damaged; resume from another checkpoint` })
    }
    return record as CheckpointRecord
  })

/**
 * The checkpoint `--resume` continues from: read, and a mid-epoch one checked against the job's dataset (its
 * coverage names samples of that dataset only).
 */
export const readToResume = (path: string, datasetSize: number): Effect.Effect<CheckpointRecord, CheckpointError> =>
  Effect.flatMap(read(path), (record) => {
    const { coverage } = record
    if (coverage === undefined || coverage.datasetSize === datasetSize) return Effect.succeed(record)
    return new CheckpointError({
      path,
      reason: `it was taken part-way through epoch ${coverage.epoch} of a dataset of ${coverage.datasetSize.toLocaleString("en-US")} samples, ` +
        `and job.dataset_size is now ${datasetSize.toLocaleString("en-US")}: set it back to ${coverage.datasetSize} to resume from it`
    })
  })

/** The launcher's line as it resumes: where the run continues. */
export const resumingLine = (path: string, record: CheckpointRecord): string =>
  record.coverage === undefined
    ? `resuming from ${path}: epoch ${record.epoch} of run ${record.run} (saved: ${record.reason})`
    : `resuming ${describeCoverage(record.coverage)} from ${path} (run ${record.run}, saved: ${record.reason})`

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
