/**
 * What the journal (and so the terminal and the page) is told of training: the progress of the epoch under
 * way, at most every PROGRESS_EVERY_MS, and each epoch's end with its figures. Owns the `progress` slice; the
 * metrics it averages are the epoch's (`epochs.metrics`, `epochs.sums`), gathered as the reports come.
 */
import * as Ledger from "../EpochLedger.ts"
import { Instruction } from "./events.ts"
import type { MetricSum } from "./state.ts"
import type { Step } from "./step.ts"

/** Progress goes to the journal (and so the terminal and the page) no more often than this. */
export const PROGRESS_EVERY_MS = 500

/** Progress of the epoch under way, told at most every PROGRESS_EVERY_MS (its end is told as `epoch_done`). */
export const tellProgress = (step: Step): void => {
  const { ledger } = step.epochs
  if (ledger === undefined) return
  const { at } = step
  const { last } = step.progress
  if (last !== undefined && at - last.at < PROGRESS_EVERY_MS) return
  const done = Ledger.doneCount(ledger)
  const samples = step.progress.samplesBefore + done
  const samplesPerSec = last !== undefined && at > last.at ? ((samples - last.samples) * 1000) / (at - last.at) : null
  step.progress.last = { at, samples }
  step.instructions.push(Instruction.Journal({
    event: {
      event: "progress",
      at,
      epoch: ledger.epoch,
      epochs: step.settings.job.epochs,
      samplesDone: done,
      datasetSize: ledger.datasetSize,
      samplesPerSec,
      metrics: averageMetrics(step.epochs.metrics)
    }
  }))
}

/** The end of `ended`, which took `took` ms: journalled as `epoch_done` and said, with the means of its reports (`sums`). */
export const tellEpochDone = (step: Step, ended: Ledger.EpochLedger, took: number, sums: ReadonlyMap<string, MetricSum>): void => {
  step.progress.samplesBefore += ended.datasetSize
  const { epochs } = step.settings.job
  step.instructions.push(Instruction.Journal({
    event: { event: "epoch_done", at: step.at, epoch: ended.epoch, epochs, seconds: took / 1000, samples: ended.datasetSize, metrics: epochMeans(sums) }
  }))
  step.log(
    "info",
    `epoch ${ended.epoch}/${epochs} done in ${(took / 1000).toFixed(1)} s: ${ended.datasetSize} samples ` +
      `(${[...ended.done].sort(([a], [b]) => a - b).map(([rank, done]) => `r${rank} ${done}`).join(", ")})${summariseMetrics(sums)}`
  )
}

/** Each metric's mean over the ranks' latest reports. */
const averageMetrics = (metrics: ReadonlyMap<number, Readonly<Record<string, number>>>): Record<string, number> => {
  const sums = new Map<string, { total: number; count: number }>()
  for (const values of metrics.values()) {
    for (const [name, value] of Object.entries(values)) {
      const entry = sums.get(name) ?? { total: 0, count: 0 }
      sums.set(name, { total: entry.total + value, count: entry.count + 1 })
    }
  }
  return Object.fromEntries([...sums].map(([name, { count, total }]) => [name, total / count]))
}

/** `sums` with one more report added. */
export const addReport = (sums: ReadonlyMap<string, MetricSum>, metrics: Readonly<Record<string, number>>): ReadonlyMap<string, MetricSum> => {
  const next = new Map(sums)
  for (const [name, value] of Object.entries(metrics)) {
    const sum = next.get(name)
    next.set(name, { total: (sum?.total ?? 0) + value, count: (sum?.count ?? 0) + 1 })
  }
  return next
}

/** Each metric's mean over the epoch's reports. */
const epochMeans = (sums: ReadonlyMap<string, MetricSum>): Record<string, number> =>
  Object.fromEntries([...sums].map(([name, { count, total }]) => [name, total / count]))

/** "; loss 0.123 (mean of the epoch's reports)" from the epoch's sums. */
const summariseMetrics = (sums: ReadonlyMap<string, MetricSum>): string => {
  const means = Object.entries(epochMeans(sums))
  if (means.length === 0) return ""
  return `; ${means.map(([name, mean]) => `${name} ${mean.toPrecision(4)}`).join(", ")} (mean of the epoch's reports)`
}
