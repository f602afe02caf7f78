/**
 * EpochLedger: the coordinator's book of one epoch.
 *
 * It says which dataset samples each rank must process (as ranges, in the
 * order the rank processes them), how far each rank has reported, and who is
 * dead. When a rank dies, what it had not reported done is handed to the
 * survivors, appended to the end of their plans, so that every sample of the
 * epoch is processed exactly once: a sample is either in the done prefix of
 * exactly one rank's plan or in the unprocessed tail of exactly one live
 * rank's plan.
 *
 * Progress is a cumulative count, not a list of samples: a rank processes its
 * plan in order, so "the first `done` samples of my plan" names its work
 * exactly and keeps reports (and the ledger) small. Everything here is pure
 * and immutable, and apart from `coverage` and `take` (which exist to expand
 * ranges into samples) it costs O(ranks + ranges), never O(samples): datasets
 * may hold 10^7 samples.
 */

/** The samples [start, end); start < end. */
export interface SampleRange {
  readonly start: number
  readonly end: number
}

export interface EpochLedger {
  readonly epoch: number
  readonly datasetSize: number
  /**
   * Each live-or-dead rank's assigned ranges, in the order the rank processes
   * them (plan order). Ranges of one rank never overlap, across ranks never
   * overlap. A dead rank keeps only what it reported done.
   */
  readonly assigned: ReadonlyMap<number, ReadonlyArray<SampleRange>>
  /** Samples reported done per rank: the first `done` samples of that rank's plan order. */
  readonly done: ReadonlyMap<number, number>
  readonly dead: ReadonlySet<number>
  /**
   * Samples done before this ledger was planned (a `--resume` mid-epoch: the checkpoint's coverage), sorted and
   * disjoint, assigned to no rank: they count as done, and no rank's plan holds them.
   */
  readonly carried?: ReadonlyArray<SampleRange> | undefined
}

/** Samples in a list of ranges. */
export const lengthOf = (ranges: ReadonlyArray<SampleRange>): number =>
  ranges.reduce((sum, range) => sum + range.end - range.start, 0)

/** `total` in `parts` sizes that differ by at most 1, the first ones larger. */
const equalSizes = (total: number, parts: number): Array<number> => {
  const base = Math.floor(total / parts)
  return Array.from({ length: parts }, (_, i) => base + (i < total % parts ? 1 : 0))
}

/** `total` in sizes proportional to `weights` (one per rank, ascending), by largest remainder. */
const weightedSizes = (
  total: number,
  ranks: ReadonlyArray<number>,
  weights: ReadonlyMap<number, number>
): Array<number> => {
  const raw = ranks.map((rank) => {
    const weight = weights.get(rank)
    if (weight === undefined) throw new RangeError(`rank ${rank} has no weight`)
    if (!Number.isFinite(weight) || weight <= 0) {
      throw new RangeError(`rank ${rank} has weight ${weight}: weights must be positive and finite`)
    }
    return weight
  })
  // Scale by the largest weight first: a sum of huge weights must not overflow to Infinity.
  const max = raw.reduce((a, b) => Math.max(a, b))
  const scaled = raw.map((weight) => weight / max)
  const sum = scaled.reduce((a, b) => a + b, 0)
  const quotas = scaled.map((weight) => (total * weight) / sum)
  const sizes = quotas.map((quota) => Math.floor(quota))
  // Rounding error is far below one sample, so the floors never exceed the total and what is left
  // is under one sample per rank. It goes to the largest remainders; the sort is stable, so ties go
  // to the lower rank, as in the equal split (equal weights give exactly the equal split). Remainders
  // closer than the quotas' float error are ties: 5:1 of 3 samples is 2.5 and 0.5, but the second
  // comes out as 0.5000000000000001.
  const noise = Number.EPSILON * Math.max(1, total) * ranks.length * 16
  const order = sizes.map((_, i) => i).sort((a, b) => {
    const larger = quotas[b]! - sizes[b]! - (quotas[a]! - sizes[a]!)
    return Math.abs(larger) <= noise ? 0 : larger
  })
  let left = total - sizes.reduce((a, b) => a + b, 0)
  for (let i = 0; left > 0; i = (i + 1) % order.length, left--) sizes[order[i]!]!++
  return sizes
}

/**
 * Split [0, datasetSize) into contiguous ranges, one per rank in ascending
 * rank order. Without weights: an equal split (sizes differ by at most 1,
 * earlier ranks get the extra). With weights (rank → positive finite number,
 * e.g. measured throughput): sizes proportional to weight, by largest
 * remainder. A rank whose share is 0 samples gets an empty list. Weights of
 * ranks not in `ranks` are ignored; a rank without one is an error.
 */
export const plan = (
  epoch: number,
  datasetSize: number,
  ranks: ReadonlyArray<number>,
  weights?: ReadonlyMap<number, number>
): EpochLedger => {
  if (!Number.isSafeInteger(datasetSize) || datasetSize < 0) {
    throw new RangeError(`datasetSize must be a non-negative integer, got ${datasetSize}`)
  }
  if (ranks.length === 0) throw new RangeError("an epoch needs at least one rank")
  const sorted = [...ranks].sort((a, b) => a - b)
  sorted.forEach((rank, i) => {
    if (!Number.isSafeInteger(rank) || rank < 0) throw new RangeError(`rank ${rank} is not a non-negative integer`)
    if (i > 0 && rank === sorted[i - 1]) throw new RangeError(`rank ${rank} is listed twice`)
  })
  const sizes = weights === undefined
    ? equalSizes(datasetSize, sorted.length)
    : weightedSizes(datasetSize, sorted, weights)
  const assigned = new Map<number, ReadonlyArray<SampleRange>>()
  const done = new Map<number, number>()
  let start = 0
  sorted.forEach((rank, i) => {
    const end = start + sizes[i]!
    assigned.set(rank, end > start ? [{ start, end }] : [])
    done.set(rank, 0)
    start = end
  })
  return { epoch, datasetSize, assigned, done, dead: new Set() }
}

/**
 * The rest of an epoch that a checkpoint covers in part: what `covered` (sorted, disjoint, inside
 * [0, datasetSize)) leaves of [0, datasetSize), in order, cut into contiguous pieces of equal size (±1, lower
 * ranks first get the extra) over the ranks in ascending order. The covered samples are `carried`: done, and
 * in no rank's plan, so the epoch ends once the rest is done.
 */
export const planRest = (
  epoch: number,
  datasetSize: number,
  ranks: ReadonlyArray<number>,
  covered: ReadonlyArray<SampleRange>
): EpochLedger => {
  const base = plan(epoch, datasetSize, ranks)
  const rest = complement(covered, datasetSize)
  const sorted = [...base.assigned.keys()]
  const assigned = new Map<number, ReadonlyArray<SampleRange>>()
  cut(rest, equalSizes(lengthOf(rest), sorted.length)).forEach((piece, i) => assigned.set(sorted[i]!, piece))
  return { ...base, assigned, carried: covered.map(({ end, start }) => ({ start, end })) }
}

/** [0, datasetSize) without `covered` (sorted, disjoint), in order. */
const complement = (covered: ReadonlyArray<SampleRange>, datasetSize: number): Array<SampleRange> => {
  const rest: Array<SampleRange> = []
  let at = 0
  for (const { end, start } of covered) {
    if (start > at) rest.push({ start: at, end: start })
    at = Math.max(at, end)
  }
  if (at < datasetSize) rest.push({ start: at, end: datasetSize })
  return rest
}

/**
 * The samples done so far, as sorted, disjoint, merged ranges: what was carried in and every rank's done
 * prefix (the dead's included). What a checkpoint taken now covers. O(ranges log ranges).
 */
export const covered = (ledger: EpochLedger): Array<SampleRange> => {
  const pieces: Array<SampleRange> = [...(ledger.carried ?? [])]
  for (const rank of ledger.assigned.keys()) pieces.push(...progressOf(ledger, rank).kept)
  pieces.sort((a, b) => a.start - b.start)
  const merged: Array<SampleRange> = []
  for (const piece of pieces) {
    const last = merged.at(-1)
    if (last !== undefined && last.end === piece.start) merged[merged.length - 1] = { start: last.start, end: piece.end }
    else merged.push({ start: piece.start, end: piece.end })
  }
  return merged
}

/** Total samples assigned to a rank (sum of its range lengths); 0 for a rank not in the epoch. */
export const assignedCount = (ledger: EpochLedger, rank: number): number =>
  lengthOf(ledger.assigned.get(rank) ?? [])

/**
 * Record cumulative progress: `done` is the total the rank reports done in
 * this epoch. Reports from a dead or unknown rank, reports that go backwards
 * (or repeat) and reports that are not integers are ignored: the ledger comes
 * back unchanged (the same object) with the count it already had. A report
 * beyond the rank's assignment is clipped to it (`clipped: true`): the rank
 * cannot have processed samples it was never given.
 */
export const report = (
  ledger: EpochLedger,
  rank: number,
  done: number
): { ledger: EpochLedger; accepted: number; clipped: boolean } => {
  const previous = ledger.done.get(rank)
  if (previous === undefined || ledger.dead.has(rank) || !Number.isSafeInteger(done) || done <= previous) {
    return { ledger, accepted: previous ?? 0, clipped: false }
  }
  const limit = assignedCount(ledger, rank)
  const accepted = Math.min(done, limit)
  const clipped = done > limit
  if (accepted === previous) return { ledger, accepted, clipped }
  return { ledger: { ...ledger, done: new Map(ledger.done).set(rank, accepted) }, accepted, clipped }
}

/** Cut `ranges`, in order, into consecutive pieces of the given sizes (which sum to at most their length). */
const cut = (ranges: ReadonlyArray<SampleRange>, sizes: ReadonlyArray<number>): Array<Array<SampleRange>> => {
  let i = 0
  let at = ranges[0]?.start ?? 0
  return sizes.map((size) => {
    const piece: Array<SampleRange> = []
    for (let need = size; need > 0;) {
      const range = ranges[i]!
      const end = Math.min(range.end, at + need)
      piece.push({ start: at, end })
      need -= end - at
      at = end
      if (end === range.end) at = ranges[++i]?.start ?? end
    }
    return piece
  })
}

/** A rank's plan split into what it reported done and what it has not (both in plan order). */
const progressOf = (ledger: EpochLedger, rank: number) => {
  const ranges = ledger.assigned.get(rank) ?? []
  const total = lengthOf(ranges)
  const done = Math.min(ledger.done.get(rank) ?? 0, total)
  const [kept, rest] = cut(ranges, [done, total - done]) as [Array<SampleRange>, Array<SampleRange>]
  return { kept, rest, left: total - done }
}

/** The unprocessed ranges of a rank: its plan order minus its first `done` samples. */
export const remainder = (ledger: EpochLedger, rank: number): ReadonlyArray<SampleRange> =>
  progressOf(ledger, rank).rest

/** `ranges` followed by `piece`, merging the seam when the piece starts where the list ends. */
const append = (ranges: ReadonlyArray<SampleRange>, piece: ReadonlyArray<SampleRange>): Array<SampleRange> => {
  const last = ranges.at(-1)
  const first = piece[0]
  if (last === undefined || first === undefined || last.end !== first.start) return [...ranges, ...piece]
  return [...ranges.slice(0, -1), { start: last.start, end: first.end }, ...piece.slice(1)]
}

/**
 * Mark `rank` dead and hand its remainder to the live ranks: the remainder,
 * in its order, is cut into contiguous pieces of equal size (±1, lower ranks
 * first get the extra) over the survivors in ascending rank order, and each
 * piece is appended to its survivor's plan. `extensions` holds the pieces
 * (only for ranks that got something): the ranges each survivor must process
 * after what it already had. The dead rank keeps only what it reported done,
 * which stays counted. With no survivor the remainder stays unassigned and
 * comes back as `orphaned`. Marking a dead or unknown rank changes nothing.
 */
export const markDead = (
  ledger: EpochLedger,
  rank: number
): {
  ledger: EpochLedger
  extensions: ReadonlyMap<number, ReadonlyArray<SampleRange>>
  orphaned: ReadonlyArray<SampleRange>
} => {
  const extensions = new Map<number, ReadonlyArray<SampleRange>>()
  if (!ledger.assigned.has(rank) || ledger.dead.has(rank)) return { ledger, extensions, orphaned: [] }
  const { kept, left, rest } = progressOf(ledger, rank)
  const assigned = new Map(ledger.assigned).set(rank, kept)
  const dead = new Set(ledger.dead).add(rank)
  const survivors = [...ledger.assigned.keys()].filter((r) => !dead.has(r)).sort((a, b) => a - b)
  if (survivors.length === 0) return { ledger: { ...ledger, assigned, dead }, extensions, orphaned: rest }
  cut(rest, equalSizes(left, survivors.length)).forEach((piece, i) => {
    if (piece.length === 0) return
    const survivor = survivors[i]!
    assigned.set(survivor, append(assigned.get(survivor)!, piece))
    extensions.set(survivor, piece)
  })
  return { ledger: { ...ledger, assigned, dead }, extensions, orphaned: [] }
}

/**
 * New ranks take over `ranges` (work no live rank holds: what `markDead`
 * left orphaned), cut into contiguous pieces of equal size (±1, lower ranks
 * first) in ascending rank order. Ranks already in the ledger are ignored.
 */
export const adopt = (
  ledger: EpochLedger,
  ranks: ReadonlyArray<number>,
  ranges: ReadonlyArray<SampleRange>
): { ledger: EpochLedger; pieces: ReadonlyMap<number, ReadonlyArray<SampleRange>> } => {
  const fresh = [...new Set(ranks)].filter((rank) => !ledger.assigned.has(rank)).sort((a, b) => a - b)
  const pieces = new Map<number, ReadonlyArray<SampleRange>>()
  if (fresh.length === 0) return { ledger, pieces }
  const assigned = new Map(ledger.assigned)
  const done = new Map(ledger.done)
  cut(ranges, equalSizes(lengthOf(ranges), fresh.length)).forEach((piece, i) => {
    assigned.set(fresh[i]!, piece)
    done.set(fresh[i]!, 0)
    pieces.set(fresh[i]!, piece)
  })
  return { ledger: { ...ledger, assigned, done }, pieces }
}

/** Samples reported done, summed over ranks (dead ones included), and those carried in. */
export const doneCount = (ledger: EpochLedger): number => {
  let sum = lengthOf(ledger.carried ?? [])
  for (const done of ledger.done.values()) sum += done
  return sum
}

/**
 * True when every sample of [0, datasetSize) is reported done by someone.
 * Counting is enough: done samples are prefixes of disjoint plans (reports are
 * clipped to the plan), so they never overlap.
 */
export const isComplete = (ledger: EpochLedger): boolean => doneCount(ledger) === ledger.datasetSize

/** Call `f` on the samples of `ranges` in order, skipping the first `offset` and stopping after `count`. */
const forEachSample = (
  ranges: ReadonlyArray<SampleRange>,
  offset: number,
  count: number,
  f: (sample: number) => void
): void => {
  let skip = Math.max(0, offset)
  let left = count
  for (const { end, start } of ranges) {
    if (left <= 0) return
    if (skip >= end - start) {
      skip -= end - start
      continue
    }
    for (let sample = start + skip; sample < end && left > 0; sample++, left--) f(sample)
    skip = 0
  }
}

/**
 * For tests and checks: how many times each sample is assigned and reported
 * done, as two arrays of length datasetSize. Done = the first `done` samples
 * of each rank's plan order. O(samples).
 */
export const coverage = (ledger: EpochLedger): { assigned: Uint32Array; done: Uint32Array } => {
  const assigned = new Uint32Array(ledger.datasetSize)
  const done = new Uint32Array(ledger.datasetSize)
  for (const { end, start } of ledger.carried ?? []) {
    for (let sample = start; sample < end; sample++) (assigned[sample]!++, done[sample]!++)
  }
  for (const [rank, ranges] of ledger.assigned) {
    for (const { end, start } of ranges) for (let sample = start; sample < end; sample++) assigned[sample]!++
    forEachSample(ranges, 0, ledger.done.get(rank) ?? 0, (sample) => done[sample]!++)
  }
  return { assigned, done }
}

/**
 * The samples of `ranges`, in order, skipping the first `offset` and taking
 * up to `count`: how a rank turns its plan and its progress into indices.
 */
export const take = (ranges: ReadonlyArray<SampleRange>, offset: number, count: number): Array<number> => {
  const samples: Array<number> = []
  forEachSample(ranges, offset, count, (sample) => samples.push(sample))
  return samples
}
