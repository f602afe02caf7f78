/**
 * Reading the traced training fixture's traces (test/fixtures/traced-train-fixture.ts): every batch a
 * rank reported, as `<dir>/r<rank>.jsonl` lines `{ epoch, indices, at }`.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"

export interface Batch {
  readonly epoch: number
  readonly indices: Array<number>
  /** When the rank reported it (ms since the epoch). */
  readonly at: number
}

/** The batches a rank reported, every incarnation's, in order. Whole lines only: the rank may be appending one now. */
export const batchesOf = (dir: string, rank: number): Array<Batch> => {
  const file = join(dir, `r${rank}.jsonl`)
  if (!existsSync(file)) return []
  const text = readFileSync(file, "utf8")
  return text.slice(0, text.lastIndexOf("\n") + 1).split("\n").filter(Boolean).map((line) => JSON.parse(line) as Batch)
}

/**
 * Per epoch, every sample and the ranks that reported it, in the order they did: by the time of each report,
 * not by file (a directory lists its files in no order a test may rely on: tmpfs lists the newest first).
 */
export const traces = (dir: string): Map<number, Map<number, Array<number>>> => {
  const reports = readdirSync(dir)
    .filter((entry) => /^r\d+\.jsonl$/.test(entry))
    .map((name) => Number(name.slice(1, -6)))
    .sort((a, b) => a - b)
    .flatMap((rank) => batchesOf(dir, rank).map((batch) => ({ rank, ...batch })))
    .sort((a, b) => a.at - b.at)
  const seen = new Map<number, Map<number, Array<number>>>()
  for (const { epoch, indices, rank } of reports) {
    const samples = seen.get(epoch) ?? new Map<number, Array<number>>()
    seen.set(epoch, samples)
    for (const index of indices) samples.set(index, [...(samples.get(index) ?? []), rank])
  }
  return seen
}
