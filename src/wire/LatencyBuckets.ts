/**
 * The all-reduce latency histogram's buckets: upper bounds in seconds, then
 * one more bucket for the rest. Ranks count into them (without loading
 * Effect); the launcher sums the counts into /metrics.
 */
export const ALLREDUCE_BUCKETS_S = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const

/** A count per bucket (the last one unbounded) and the total seconds. */
export interface LatencyCounts {
  readonly counts: ReadonlyArray<number>
  readonly sum: number
}

export const emptyCounts = (): { counts: Array<number>; sum: number } => ({ counts: new Array<number>(ALLREDUCE_BUCKETS_S.length + 1).fill(0), sum: 0 })

/** The bucket a latency of `seconds` falls in. */
export const bucketOf = (seconds: number): number => {
  const index = ALLREDUCE_BUCKETS_S.findIndex((bound) => seconds <= bound)
  return index === -1 ? ALLREDUCE_BUCKETS_S.length : index
}
