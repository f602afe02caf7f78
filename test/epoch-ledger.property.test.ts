/**
 * Property tests of the EpochLedger, the coordinator's book of one epoch.
 *
 * The main property plays a run: ranks report progress (forwards, and now and
 * then backwards or beyond what they hold) and die, in a random interleaving;
 * then every survivor finishes what it holds. Each simulated rank keeps its
 * own view (its plan plus the extensions it was sent) and processes samples
 * from that view alone, so "every sample exactly once" is checked against
 * what the ranks would really have done, not only against the ledger's own
 * bookkeeping.
 *
 * Every `fc.assert` is seeded so a failure reproduces; fast-check prints the
 * seed and the shrunk counterexample.
 */
import { expect, test } from "bun:test"
import * as fc from "fast-check"
import {
  assignedCount,
  coverage,
  doneCount,
  type EpochLedger,
  isComplete,
  markDead,
  plan,
  remainder,
  report,
  type SampleRange,
  take
} from "../src/actors/launcher/EpochLedger.ts"

/** Every property is seeded (reproducible) and reports the assertion that failed with its counterexample. */
const seeded = (seed: number, numRuns = 200) => ({ seed, numRuns, includeErrorInReport: true })

// ---------------------------------------------------------------------------
// Helpers and arbitraries
// ---------------------------------------------------------------------------

const ascending = (ranks: ReadonlyArray<number>) => [...ranks].sort((a, b) => a - b)

const lengthOf = (ranges: ReadonlyArray<SampleRange>) => ranges.reduce((n, { end, start }) => n + end - start, 0)

/** Every sample of `ranges`, in order: the naive reading that `take` must agree with. */
const expand = (ranges: ReadonlyArray<SampleRange>) =>
  ranges.flatMap(({ end, start }) => Array.from({ length: end - start }, (_, i) => start + i))

/** The same samples in the same order, with adjacent ranges joined: two lists mean the same plan iff these agree. */
const joined = (ranges: ReadonlyArray<SampleRange>) =>
  ranges.reduce<Array<SampleRange>>((out, range) => {
    const last = out.at(-1)
    if (last !== undefined && last.end === range.start) out[out.length - 1] = { start: last.start, end: range.end }
    else out.push(range)
    return out
  }, [])

/** Sizes that differ by at most 1, the first ones larger: the spec's equal split. */
const equalSplit = (total: number, parts: number) =>
  Array.from({ length: parts }, (_, i) => Math.floor(total / parts) + (i < total % parts ? 1 : 0))

/** Per-sample counts, checked without a 10^5-element diff: names the first sample that is off. */
const expectEvery = (counts: Uint32Array, expected: (sample: number) => number, what: string) => {
  const sample = counts.findIndex((count, i) => count !== expected(i))
  expect(sample === -1 ? "ok" : `${what}: sample ${sample} counted ${counts[sample]}, not ${expected(sample)}`)
    .toBe("ok")
}

/** Each sample's count in a list of ranges. */
const countsOf = (size: number, ranges: ReadonlyArray<SampleRange>) => {
  const counts = new Uint32Array(size)
  for (const sample of take(ranges, 0, Infinity)) counts[sample]!++
  return counts
}

/** 1–16 distinct ranks, not necessarily 0..n-1 nor in order: the ledger must sort them itself. */
const ranksArb = fc.uniqueArray(fc.nat({ max: 40 }), { minLength: 1, maxLength: 16 })

/** Mostly small datasets (edge cases, fewer samples than ranks), some up to 10^5. */
const sizeArb = fc.oneof(fc.nat({ max: 20 }), fc.nat({ max: 2_000 }), fc.nat({ max: 100_000 }))

/** A weight per rank position: throughputs within a factor of 10^6, or small integers (ties). */
const weightsArb = fc.array(
  fc.oneof(fc.double({ min: 1e-3, max: 1e3, noNaN: true }), fc.integer({ min: 1, max: 4 })),
  { minLength: 16, maxLength: 16 }
)

const weightMap = (ranks: ReadonlyArray<number>, weights: ReadonlyArray<number>) =>
  new Map(ascending(ranks).map((rank, i) => [rank, weights[i]!]))

/** The ranks, in ascending order, each hold one contiguous range, and together exactly [0, size). */
const expectContiguous = (ledger: EpochLedger, ranks: ReadonlyArray<number>) => {
  let at = 0
  for (const rank of ascending(ranks)) {
    const count = assignedCount(ledger, rank)
    expect(ledger.assigned.get(rank)).toEqual(count === 0 ? [] : [{ start: at, end: at + count }])
    at += count
  }
  expect(at).toBe(ledger.datasetSize)
}

// ---------------------------------------------------------------------------
// plan
// ---------------------------------------------------------------------------

test("plan: an equal split is contiguous in rank order, sizes differ by at most 1, earlier ranks larger", () => {
  fc.assert(
    fc.property(fc.nat(), sizeArb, ranksArb, (epoch, size, ranks) => {
      const ledger = plan(epoch, size, ranks)
      expect(ledger.epoch).toBe(epoch)
      expect(ledger.datasetSize).toBe(size)
      expect(ledger.dead.size).toBe(0)
      expect(doneCount(ledger)).toBe(0)
      expect(ascending(ranks).map((rank) => assignedCount(ledger, rank))).toEqual(equalSplit(size, ranks.length))
      expectContiguous(ledger, ranks)
      expect(isComplete(ledger)).toBe(size === 0)
    }),
    seeded(1)
  )
})

test("plan: a weighted split is contiguous and rounds each share by largest remainder", () => {
  fc.assert(
    fc.property(sizeArb, ranksArb, weightsArb, (size, ranks, weights) => {
      const byRank = weightMap(ranks, weights)
      const ledger = plan(0, size, ranks, byRank)
      expectContiguous(ledger, ranks)
      const sorted = ascending(ranks)
      const total = sorted.reduce((sum, rank) => sum + byRank.get(rank)!, 0)
      // Each share is off its exact quota by under one sample, and no share was rounded up while
      // one with a larger fraction was rounded down: together, all excesses lie within 1 of each other.
      const excess = sorted.map((rank) => assignedCount(ledger, rank) - (size * byRank.get(rank)!) / total)
      for (const e of excess) expect(Math.abs(e)).toBeLessThan(1 + 1e-6)
      expect(Math.max(...excess) - Math.min(...excess)).toBeLessThanOrEqual(1 + 1e-6)
    }),
    seeded(2)
  )
})

test("plan: equal weights give exactly the equal split, however large or small", () => {
  fc.assert(
    fc.property(sizeArb, ranksArb, fc.double({ min: Number.MIN_VALUE, max: Number.MAX_VALUE, noNaN: true }), (
      size,
      ranks,
      weight
    ) => {
      const weighted = plan(0, size, ranks, new Map(ranks.map((rank) => [rank, weight])))
      expect(weighted.assigned).toEqual(plan(0, size, ranks).assigned)
    }),
    seeded(3)
  )
})

test("plan: worked examples and edge cases", () => {
  // Quotas 2.5, 5, 2.5: the one sample left goes to the lower of the tied ranks.
  const weighted = plan(0, 10, [0, 1, 2], new Map([[0, 1], [1, 2], [2, 1]]))
  expect([0, 1, 2].map((rank) => weighted.assigned.get(rank))).toEqual([
    [{ start: 0, end: 3 }],
    [{ start: 3, end: 8 }],
    [{ start: 8, end: 10 }]
  ])
  // Ranks in any order, weights keyed by rank (others ignored); quotas 1.25 and 3.75: the larger remainder wins.
  const unordered = plan(0, 5, [5, 2], new Map([[5, 3], [2, 1], [9, 100]]))
  expect(unordered.assigned.get(2)).toEqual([{ start: 0, end: 1 }])
  expect(unordered.assigned.get(5)).toEqual([{ start: 1, end: 5 }])
  // Weights near the float limits neither overflow nor vanish into NaN.
  expect(plan(0, 3, [0, 1], new Map([[0, 1e308], [1, 1e308]])).assigned.get(0)).toEqual([{ start: 0, end: 2 }])
  const tiny = plan(0, 5, [0, 1], new Map([[0, 1], [1, Number.MIN_VALUE]]))
  expect(tiny.assigned.get(0)).toEqual([{ start: 0, end: 5 }])
  expect(tiny.assigned.get(1)).toEqual([])

  const empty = plan(3, 0, [0, 1, 2])
  expect([...empty.assigned.values()]).toEqual([[], [], []])
  expect(isComplete(empty)).toBe(true)
  // Fewer samples than ranks: the lowest ranks get one each.
  const few = plan(0, 2, [7, 3, 5, 1])
  expect([1, 3, 5, 7].map((rank) => few.assigned.get(rank))).toEqual([
    [{ start: 0, end: 1 }],
    [{ start: 1, end: 2 }],
    [],
    []
  ])
  expect(plan(0, 10_000_000, [4]).assigned.get(4)).toEqual([{ start: 0, end: 10_000_000 }])
})

test("plan: bad input is a RangeError that names what is wrong", () => {
  expect(() => plan(0, -1, [0])).toThrow(RangeError)
  expect(() => plan(0, 1.5, [0])).toThrow(RangeError)
  expect(() => plan(0, Number.NaN, [0])).toThrow(RangeError)
  expect(() => plan(0, 10, [])).toThrow(RangeError)
  expect(() => plan(0, 10, [1, 2, 1])).toThrow(/rank 1 /)
  expect(() => plan(0, 10, [0, -1])).toThrow(/rank -1 /)
  expect(() => plan(0, 10, [0, 0.5])).toThrow(/rank 0.5 /)
  for (const bad of [0, -2, Number.NaN, Number.POSITIVE_INFINITY]) {
    expect(() => plan(0, 10, [0, 3], new Map([[0, 1], [3, bad]]))).toThrow(/rank 3 /)
  }
  expect(() => plan(0, 10, [0, 3], new Map([[0, 1]]))).toThrow(/rank 3 /)
  expect(() => plan(0, 10, [2, 2])).toThrow(RangeError)
})

// ---------------------------------------------------------------------------
// report, markDead, take
// ---------------------------------------------------------------------------

test("report: cumulative, clipped to the assignment; backwards, repeated, dead, unknown and non-integer reports change nothing", () => {
  const ledger = plan(0, 10, [0, 1]) // rank 0 holds [0, 5), rank 1 [5, 10)
  const first = report(ledger, 0, 3)
  expect(first).toMatchObject({ accepted: 3, clipped: false })
  expect(first.ledger.done.get(0)).toBe(3)
  expect(ledger.done.get(0)).toBe(0) // immutable

  for (const ignored of [2, 3, 2.5, Number.NaN, -1]) {
    const again = report(first.ledger, 0, ignored)
    expect(again.ledger).toBe(first.ledger)
    expect(again).toMatchObject({ accepted: 3, clipped: false })
  }

  const beyond = report(first.ledger, 0, 9)
  expect(beyond).toMatchObject({ accepted: 5, clipped: true })
  expect(beyond.ledger.done.get(0)).toBe(5)
  const stillBeyond = report(beyond.ledger, 0, 7)
  expect(stillBeyond.ledger).toBe(beyond.ledger)
  expect(stillBeyond).toMatchObject({ accepted: 5, clipped: true })

  const unknown = report(ledger, 9, 1)
  expect(unknown.ledger).toBe(ledger)
  expect(unknown).toMatchObject({ accepted: 0, clipped: false })

  const dead = markDead(report(ledger, 1, 2).ledger, 1).ledger
  const late = report(dead, 1, 4)
  expect(late.ledger).toBe(dead)
  expect(late).toMatchObject({ accepted: 2, clipped: false })
})

test("markDead: survivors' pieces are appended (merged at a seam), a second call is a no-op, the last death orphans", () => {
  const ledger = plan(0, 9, [0, 1, 2]) // [0, 3), [3, 6), [6, 9)
  // Rank 1 did nothing: its 3 samples go 2 to rank 0 (merged onto [0, 3)) and 1 to rank 2.
  const first = markDead(ledger, 1)
  expect([...first.extensions]).toEqual([[0, [{ start: 3, end: 5 }]], [2, [{ start: 5, end: 6 }]]])
  expect(first.orphaned).toEqual([])
  expect(first.ledger.assigned.get(0)).toEqual([{ start: 0, end: 5 }])
  expect(first.ledger.assigned.get(1)).toEqual([])
  expect(first.ledger.assigned.get(2)).toEqual([{ start: 6, end: 9 }, { start: 5, end: 6 }])
  expect(ledger.dead.size).toBe(0) // immutable

  const again = markDead(first.ledger, 1)
  expect(again.ledger).toBe(first.ledger)
  expect(again.extensions.size).toBe(0)
  expect(again.orphaned).toEqual([])
  expect(markDead(first.ledger, 42).ledger).toBe(first.ledger)

  // Rank 0 did 4 of its 5: the one left, [4, 5), goes to rank 2, after what it holds.
  const second = markDead(report(first.ledger, 0, 4).ledger, 0)
  expect(remainder(report(first.ledger, 0, 4).ledger, 0)).toEqual([{ start: 4, end: 5 }])
  expect([...second.extensions]).toEqual([[2, [{ start: 4, end: 5 }]]])
  expect(second.ledger.assigned.get(0)).toEqual([{ start: 0, end: 4 }]) // what it did, still counted
  expect(second.ledger.assigned.get(2)).toEqual([{ start: 6, end: 9 }, { start: 5, end: 6 }, { start: 4, end: 5 }])

  // The last rank dies after 2 samples: nobody is left to take the rest.
  const last = markDead(report(second.ledger, 2, 2).ledger, 2)
  expect(last.extensions.size).toBe(0)
  expect(last.orphaned).toEqual([{ start: 8, end: 9 }, { start: 5, end: 6 }, { start: 4, end: 5 }])
  expect(last.ledger.assigned.get(2)).toEqual([{ start: 6, end: 8 }])
  expect(doneCount(last.ledger)).toBe(6)
  expect(isComplete(last.ledger)).toBe(false)
})

test("take: the samples of a list of ranges, from an offset, up to a count", () => {
  const rangesArb = fc.array(
    fc.record({ start: fc.nat({ max: 1_000 }), length: fc.integer({ min: 1, max: 30 }) })
      .map(({ length, start }) => ({ start, end: start + length })),
    { maxLength: 8 }
  )
  fc.assert(
    fc.property(rangesArb, fc.nat({ max: 300 }), fc.integer({ min: -3, max: 300 }), (ranges, offset, count) => {
      expect(take(ranges, offset, count)).toEqual(expand(ranges).slice(offset, offset + Math.max(0, count)))
    }),
    seeded(4, 500)
  )
})

// ---------------------------------------------------------------------------
// A whole epoch: progress and deaths, then the survivors finish
// ---------------------------------------------------------------------------

type Event =
  | { readonly kind: "report"; readonly pick: number; readonly mode: "forward" | "beyond" | "back"; readonly f: number }
  | { readonly kind: "die"; readonly pick: number }

const eventArb: fc.Arbitrary<Event> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant("report" as const),
      pick: fc.nat({ max: 1_000 }),
      mode: fc.oneof(
        { weight: 8, arbitrary: fc.constant("forward" as const) },
        { weight: 1, arbitrary: fc.constant("beyond" as const) },
        { weight: 1, arbitrary: fc.constant("back" as const) }
      ),
      f: fc.double({ min: 0, max: 1, noNaN: true })
    })
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("die" as const), pick: fc.nat({ max: 1_000 }) }) }
)

const runArb = fc.record({
  size: sizeArb,
  ranks: ranksArb,
  weights: fc.option(weightsArb),
  events: fc.array(eventArb, { maxLength: 60 }),
  everyoneDies: fc.oneof({ weight: 3, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) })
})

test("an epoch with random progress and deaths ends with every sample processed exactly once, none by the dead", () => {
  fc.assert(
    fc.property(runArb, ({ everyoneDies, events, ranks, size, weights }) => {
      const sorted = ascending(ranks)
      let ledger = plan(1, size, ranks, weights === null ? undefined : weightMap(ranks, weights))
      // What each rank itself knows: its plan plus every extension it was sent, and how far it got.
      const view = new Map(sorted.map((rank) => [rank, [...ledger.assigned.get(rank)!]]))
      const progress = new Map(sorted.map((rank) => [rank, 0]))
      // Samples the ranks processed, read from their own views.
      const processed = new Uint32Array(size)
      const frozen = new Map<number, number>() // dead rank → its assignment at death
      const orphaned: Array<SampleRange> = []
      const live = () => sorted.filter((rank) => !ledger.dead.has(rank))
      const small = size <= 500 // per-step O(samples) checks only where they are cheap

      const reportTo = (rank: number, target: number) => {
        const before = ledger
        const result = report(ledger, rank, target)
        const had = progress.get(rank)!
        if (before.dead.has(rank) || target <= had) {
          expect(result.ledger).toBe(before)
          expect(result.accepted).toBe(had)
          return
        }
        const holds = lengthOf(view.get(rank)!)
        expect(result.accepted).toBe(Math.min(target, holds))
        expect(result.clipped).toBe(target > holds)
        for (const sample of take(view.get(rank)!, had, result.accepted - had)) processed[sample]!++
        progress.set(rank, result.accepted)
        ledger = result.ledger
        expect(ledger.done.get(rank)).toBe(result.accepted)
      }

      const die = (rank: number) => {
        const before = ledger
        const result = markDead(ledger, rank)
        if (before.dead.has(rank)) {
          expect(result.ledger).toBe(before)
          expect(result.extensions.size).toBe(0)
          expect(result.orphaned).toEqual([])
          return
        }
        const left = remainder(before, rank)
        if (small) expect(expand(left)).toEqual(take(before.assigned.get(rank)!, before.done.get(rank)!, Infinity))
        ledger = result.ledger
        const survivors = live()
        for (const to of result.extensions.keys()) expect(survivors).toContain(to)
        if (survivors.length === 0) {
          expect(result.extensions.size).toBe(0)
          expect(result.orphaned).toEqual(left)
          orphaned.push(...result.orphaned)
        } else {
          // The remainder, in order, in equal pieces (lower ranks first get the extra) over the survivors.
          expect(result.orphaned).toEqual([])
          const pieces = survivors.map((to) => result.extensions.get(to) ?? [])
          expect(pieces.map(lengthOf)).toEqual(equalSplit(lengthOf(left), survivors.length))
          expect(joined(pieces.flat())).toEqual(joined(left))
          // Only ranks that got something are named, and every range holds a sample.
          for (const piece of result.extensions.values()) expect(piece.length).toBeGreaterThan(0)
          expect(pieces.flat().every((range) => range.start < range.end)).toBe(true)
        }
        // The dead rank keeps exactly what it reported done.
        expect(assignedCount(ledger, rank)).toBe(progress.get(rank)!)
        expect(ledger.done.get(rank)).toBe(progress.get(rank)!)
        frozen.set(rank, assignedCount(ledger, rank))
        for (const [to, piece] of result.extensions) view.get(to)!.push(...piece)
      }

      const checkInvariants = () => {
        // A dead rank's assignment never grows; every live rank's plan is what it was told.
        for (const [rank, count] of frozen) expect(assignedCount(ledger, rank)).toBe(count)
        for (const rank of live()) expect(ledger.assigned.get(rank)).toEqual(joined(view.get(rank)!))
        // Each sample is held by a live rank, done by a dead one or orphaned: counted, exactly once in all.
        const held = live().reduce((n, rank) => n + assignedCount(ledger, rank), 0)
        const doneByDead = [...ledger.dead].reduce((n, rank) => n + ledger.done.get(rank)!, 0)
        expect(held + doneByDead + lengthOf(orphaned)).toBe(size)
        if (small) {
          const { assigned } = coverage(ledger)
          const lost = countsOf(size, orphaned)
          expectEvery(assigned.map((count, i) => count + lost[i]!), () => 1, "assigned or orphaned")
        }
      }

      for (const event of events) {
        const rank = sorted[event.pick % sorted.length]!
        if (event.kind === "die") die(rank)
        else {
          const had = progress.get(rank)!
          const holds = lengthOf(view.get(rank)!)
          const target = event.mode === "forward"
            ? had + Math.floor(event.f * (holds - had + 1))
            : event.mode === "beyond"
            ? holds + 1 + Math.floor(event.f * 10)
            : Math.floor(event.f * had)
          reportTo(rank, target)
        }
        checkInvariants()
      }
      if (everyoneDies) for (const rank of live()) die(rank)
      // The survivors finish what they hold, extensions included.
      for (const rank of live()) reportTo(rank, lengthOf(view.get(rank)!))
      checkInvariants()

      const { assigned, done } = coverage(ledger)
      // The ledger's done samples are exactly the ones the ranks processed, and `take` reads them alike.
      expectEvery(done, (i) => processed[i]!, "ledger done vs processed")
      const taken = new Uint32Array(size)
      for (const [rank, ranges] of ledger.assigned) for (const s of take(ranges, 0, ledger.done.get(rank)!)) taken[s]!++
      expectEvery(taken, (i) => done[i]!, "take vs coverage")
      if (live().length > 0) {
        expectEvery(done, () => 1, "done")
        expectEvery(assigned, () => 1, "assigned")
        expect(isComplete(ledger)).toBe(true)
        expect(doneCount(ledger)).toBe(size)
        for (const rank of sorted) expect(remainder(ledger, rank)).toEqual([])
      } else {
        // Everyone died: what was done and what was orphaned make up the epoch, once each.
        const lost = countsOf(size, orphaned)
        expectEvery(done.map((count, i) => count + lost[i]!), () => 1, "done or orphaned")
        expectEvery(assigned, (i) => done[i]!, "a dead rank holds only what it did")
        expect(doneCount(ledger) + lengthOf(orphaned)).toBe(size)
        expect(isComplete(ledger)).toBe(lengthOf(orphaned) === 0)
      }
    }),
    seeded(5, 300)
  )
})
