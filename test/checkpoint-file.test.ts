/**
 * The consensus checkpoint on disk: write then read in a temporary
 * directory; the write is atomic (a temporary file beside it renamed over
 * it: none left behind, an existing checkpoint replaced whole); and each
 * way a read can fail (no file, not JSON, not a version-1 checkpoint) is a
 * CheckpointError naming the path.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { CheckpointError, type CheckpointRecord, peek, read, readToResume, resumingLine, write } from "../src/launcher/training/CheckpointFile.ts"
import { stringifyState } from "../src/wire/StateJson.ts"

let root = ""
let serial = 0
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "cohort-checkpoint-"))
})
afterAll(() => {
  rmSync(root, { recursive: true, force: true })
})

/** A fresh directory for one test. */
const freshDir = () => {
  const dir = join(root, `case-${serial++}`)
  mkdirSync(dir)
  return dir
}

const record = (overrides: Partial<CheckpointRecord> = {}): CheckpointRecord => ({
  version: 1,
  run: "run-1",
  epoch: 4,
  reason: "checkpoint",
  savedAt: "2025-01-02T03:04:05.000Z",
  world: 3,
  dead: [2],
  state: stringifyState({ weights: Float32Array.from([1, 2, 3]) }),
  ...overrides
})

const failureOf = <A>(effect: Effect.Effect<A, CheckpointError>): CheckpointError => {
  const result = Effect.runSync(Effect.either(effect))
  if (Either.isRight(result)) throw new Error(`expected a CheckpointError, got ${JSON.stringify(result.right)}`)
  return result.left
}

describe("CheckpointFile", () => {
  test("write then read returns the record", () => {
    const path = join(freshDir(), "checkpoint.json")
    const saved = record()
    Effect.runSync(write(path, saved))
    expect(Effect.runSync(read(path))).toEqual(saved)
  })

  test("write creates missing parent directories", () => {
    const path = join(freshDir(), "a", "b", "c", "checkpoint.json")
    Effect.runSync(write(path, record({ reason: "all_ranks_lost" })))
    expect(Effect.runSync(read(path)).reason).toBe("all_ranks_lost")
  })

  test("no temporary file is left behind", () => {
    const dir = freshDir()
    const path = join(dir, "checkpoint.json")
    Effect.runSync(write(path, record()))
    Effect.runSync(write(path, record({ epoch: 5 })))
    expect(readdirSync(dir)).toEqual(["checkpoint.json"])
  })

  test("an existing checkpoint is replaced whole, by a new file renamed over it", () => {
    const dir = freshDir()
    const path = join(dir, "checkpoint.json")
    // A long one first, then a short one: nothing of the first may survive.
    Effect.runSync(write(path, record({ epoch: 1, state: JSON.stringify({ big: "x".repeat(100_000) }) })))
    const before = statSync(path)
    const second = record({ epoch: 2, state: "{}", dead: [] })
    Effect.runSync(write(path, second))
    expect(readFileSync(path, "utf8")).toBe(JSON.stringify(second))
    expect(Effect.runSync(read(path))).toEqual(second)
    // Renamed into place, not rewritten in place: a reader of the old file kept it whole.
    expect(statSync(path).ino).not.toBe(before.ino)
    expect(readdirSync(dir)).toEqual(["checkpoint.json"])
  })

  test("a write that cannot be done is a CheckpointError naming the path", () => {
    const dir = freshDir()
    const blocker = join(dir, "not-a-dir")
    writeFileSync(blocker, "a file where a directory should be")
    const path = join(blocker, "checkpoint.json")
    const error = failureOf(write(path, record()))
    expect(error).toBeInstanceOf(CheckpointError)
    expect(error.path).toBe(path)
    expect(error.message).toStartWith(`checkpoint ${path}: cannot write it:`)
  })

  // Bug (src/launcher/training/CheckpointFile.ts, write): when renameSync fails after the
  // temporary file was written (here: the checkpoint path is a directory, EISDIR), the
  // `${path}.${pid}.tmp` file is left beside it; the catch does not remove it.
  test("a write that fails at the rename leaves no temporary file behind", () => {
    const dir = freshDir()
    const path = join(dir, "checkpoint.json")
    mkdirSync(path)
    const error = failureOf(write(path, record()))
    expect(error.message).toContain("cannot write it")
    expect(readdirSync(dir)).toEqual(["checkpoint.json"])
  })

  test("a missing file: there is nothing to resume from, and --resume is mentioned", () => {
    const path = join(freshDir(), "absent.json")
    const error = failureOf(read(path))
    expect(error).toBeInstanceOf(CheckpointError)
    expect(error._tag).toBe("CheckpointError")
    expect(error.path).toBe(path)
    expect(error.message).toContain(path)
    expect(error.message).toContain("no checkpoint to resume from")
    expect(error.message).toContain("--resume")
  })

  test("a file that cannot be read (a directory) is a CheckpointError naming the path", () => {
    const path = join(freshDir(), "checkpoint.json")
    mkdirSync(path)
    const error = failureOf(read(path))
    // Checked before it is read: a checkpoint to resume from must be a regular file of this user's.
    expect(error.message).toBe(`checkpoint ${path}: is not a file: remove it and run again; a checkpoint to resume from must be yours alone`)
  })

  test("a file that is not JSON", () => {
    const path = join(freshDir(), "checkpoint.json")
    writeFileSync(path, "{ this is not json")
    const error = failureOf(read(path))
    expect(error).toBeInstanceOf(CheckpointError)
    expect(error.message).toBe(`checkpoint ${path}: it is not JSON: not a cohort checkpoint`)
  })

  test("a truncated checkpoint (a crash mid-write without the rename) is not JSON", () => {
    const path = join(freshDir(), "checkpoint.json")
    const text = JSON.stringify(record())
    writeFileSync(path, text.slice(0, text.length / 2))
    expect(failureOf(read(path)).message).toContain("it is not JSON")
  })

  test("wrong version, or missing epoch or state: not a cohort checkpoint", () => {
    const cases: ReadonlyArray<unknown> = [
      { ...record(), version: 2 },
      { ...record(), version: "1" },
      (({ version: _, ...rest }) => rest)(record()),
      (({ epoch: _, ...rest }) => rest)(record()),
      { ...record(), epoch: "4" },
      (({ state: _, ...rest }) => rest)(record()),
      { ...record(), state: { weights: [1, 2] } },
      [],
      42,
      "a string"
    ]
    const dir = freshDir()
    cases.forEach((contents, i) => {
      const path = join(dir, `case-${i}.json`)
      writeFileSync(path, JSON.stringify(contents))
      const error = failureOf(read(path))
      expect(error).toBeInstanceOf(CheckpointError)
      expect(error.message).toBe(`checkpoint ${path}: it is not a cohort checkpoint (version 1 with epoch and state)`)
    })
  })

  // Bug (src/launcher/training/CheckpointFile.ts, read, the `record.version` check): a file
  // whose JSON is `null` makes `record.version` throw a TypeError, so read dies with a
  // defect instead of failing with a CheckpointError (the launcher's mapError never sees it).
  test("a file holding JSON null is a CheckpointError, not a defect", () => {
    const path = join(freshDir(), "checkpoint.json")
    writeFileSync(path, "null")
    const exit = Effect.runSyncExit(read(path))
    expect(exit._tag).toBe("Failure")
    expect(failureOf(read(path)).message).toContain("not a cohort checkpoint")
  })

  test("peek, for a run that does not resume: nothing there, a checkpoint and its epoch, or why the file there is none", () => {
    const dir = freshDir()
    const path = join(dir, "checkpoint.json")
    expect(Effect.runSync(peek(path))).toEqual({ _tag: "Absent" })
    const saved = record({ epoch: 153 })
    Effect.runSync(write(path, saved))
    expect(Effect.runSync(peek(path))).toEqual({ _tag: "Checkpoint", record: saved })
    writeFileSync(path, "not json", { mode: 0o600 })
    expect(Effect.runSync(peek(path))).toEqual({ _tag: "Unreadable", reason: "it is not JSON: not a cohort checkpoint" })
    writeFileSync(path, JSON.stringify({ version: 2 }), { mode: 0o600 })
    expect(Effect.runSync(peek(path))).toEqual({ _tag: "Unreadable", reason: "it is not a cohort checkpoint (version 1 with epoch and state)" })
    // Writable by others: said as such, without --resume's advice (this run does not resume from it).
    writeFileSync(path, JSON.stringify(saved), { mode: 0o600 })
    chmodSync(path, 0o666)
    const shared = Effect.runSync(peek(path))
    expect(shared).toEqual({ _tag: "Unreadable", reason: `is writable by every user (mode 666): \`chmod go-w ${path}\`, or remove it` })
  })

  test("a mid-epoch checkpoint keeps its coverage; a damaged one is refused naming what is wrong; an older file has none", () => {
    const dir = freshDir()
    const path = join(dir, "ckpt.json")
    const coverage = { epoch: 5, datasetSize: 50_000, done: [{ start: 0, end: 12_000 }, { start: 12_500, end: 18_932 }] }
    Effect.runSync(write(path, record({ coverage })))
    const back = Effect.runSync(readToResume(path, 50_000))
    expect(back.coverage).toEqual(coverage)
    // 12,000 + 6,432 samples done.
    expect(resumingLine("/c.json", back)).toBe("resuming epoch 5 at 18,432 of 50,000 samples done from /c.json (run run-1, saved: checkpoint)")
    expect(failureOf(readToResume(path, 40_000)).message).toBe(
      `checkpoint ${path}: it was taken part-way through epoch 5 of a dataset of 50,000 samples, and job.dataset_size is now 40,000: set it back to 50000 to resume from it`
    )
    const damaged = (bad: unknown) => {
      writeFileSync(path, JSON.stringify({ ...record(), coverage: bad }), { mode: 0o600 })
      return failureOf(read(path)).reason
    }
    const tail = ": the file is damaged; resume from another checkpoint"
    expect(damaged({ ...coverage, epoch: 6 })).toBe(`its mid-epoch coverage.epoch is 6, but a state that finished epoch 4 is part of epoch 5${tail}`)
    expect(damaged({ ...coverage, datasetSize: 0 })).toBe(`its mid-epoch coverage.datasetSize is 0, not a whole number ≥ 1${tail}`)
    expect(damaged({ ...coverage, done: "all" })).toBe(`its mid-epoch coverage.done is not a list of sample ranges${tail}`)
    expect(damaged({ ...coverage, done: [{ start: 5, end: 5 }] })).toBe(`its mid-epoch coverage.done[0] is {"start":5,"end":5}, not a range [start, end) inside [0, 50000)${tail}`)
    expect(damaged({ ...coverage, done: [{ start: 0, end: 50_001 }] })).toBe(`its mid-epoch coverage.done[0] is {"start":0,"end":50001}, not a range [start, end) inside [0, 50000)${tail}`)
    expect(damaged({ ...coverage, done: [{ start: 10, end: 20 }, { start: 19, end: 30 }] })).toBe(`its mid-epoch coverage.done[1] starts at 19, inside the range before it (which ends at 20)${tail}`)
    // Ranges that touch are sound; a checkpoint of an epoch's end has no coverage, and resumes as before.
    writeFileSync(path, JSON.stringify({ ...record(), coverage: { ...coverage, done: [{ start: 10, end: 20 }, { start: 20, end: 30 }] } }), { mode: 0o600 })
    expect(Effect.runSync(read(path)).coverage?.done).toEqual([{ start: 10, end: 20 }, { start: 20, end: 30 }])
    writeFileSync(path, JSON.stringify(record()), { mode: 0o600 })
    const old = Effect.runSync(readToResume(path, 40_000))
    expect(old.coverage).toBeUndefined()
    expect(resumingLine("/c.json", old)).toBe("resuming from /c.json: epoch 4 of run run-1 (saved: checkpoint)")
  })
})
