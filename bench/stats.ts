/** Summaries every benchmark quotes: medians, and percentiles by nearest rank. */

export const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** Nearest rank: the smallest sample with at least p of the samples at or below it. */
export const percentile = (values: ReadonlyArray<number>, p: number): number =>
  [...values].sort((a, b) => a - b)[Math.max(0, Math.ceil(p * values.length) - 1)]!
