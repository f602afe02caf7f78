/**
 * The EpochLedger by worked examples: every expected value below is written
 * out by hand, with a comment on how it follows from the rules in
 * `EpochLedger.ts`. The properties (epoch-ledger.property.test.ts) cover
 * random runs; these pin the boundaries a mutation would move: which rank
 * gets the extra sample, `<` against `<=` at a plan's end, a report of
 * exactly what a rank holds, a piece that crosses ranges, the order of
 * survivors that are not in the map in rank order, error messages.
 */
import { describe, expect, test } from "bun:test"
import {
  adopt,
  assignedCount,
  coverage,
  doneCount,
  type EpochLedger,
  isComplete,
  lengthOf,
  markDead,
  plan,
  remainder,
  report,
  type SampleRange,
  take
} from "../src/launcher/training/EpochLedger.ts"

const r = (start: number, end: number): SampleRange => ({ start, end })

/** Each rank's ranges, in ascending rank order. */
const plans = (ledger: EpochLedger) =>
  Object.fromEntries([...ledger.assigned].sort(([a], [b]) => a - b).map(([rank, ranges]) => [rank, ranges]))

/** Report in sequence; each must be taken as given (tests of refusal are separate). */
const reported = (ledger: EpochLedger, ...reports: ReadonlyArray<readonly [number, number]>) =>
  reports.reduce((book, [rank, done]) => report(book, rank, done).ledger, ledger)

// ---------------------------------------------------------------------------
// plan
// ---------------------------------------------------------------------------

describe("plan: equal split", () => {
  const cases: ReadonlyArray<{ size: number; ranks: Array<number>; expected: Record<number, Array<SampleRange>>; why: string }> = [
    { size: 9, ranks: [0, 1, 2], expected: { 0: [r(0, 3)], 1: [r(3, 6)], 2: [r(6, 9)] }, why: "9 = 3 × 3: no extra" },
    { size: 10, ranks: [0, 1, 2], expected: { 0: [r(0, 4)], 1: [r(4, 7)], 2: [r(7, 10)] }, why: "10 = 3 × 3 + 1: rank 0 gets the one extra" },
    { size: 11, ranks: [0, 1, 2], expected: { 0: [r(0, 4)], 1: [r(4, 8)], 2: [r(8, 11)] }, why: "11 = 3 × 3 + 2: ranks 0 and 1 get one extra each" },
    { size: 7, ranks: [4, 1], expected: { 1: [r(0, 4)], 4: [r(4, 7)] }, why: "7 = 2 × 3 + 1; ranks sorted: 1 before 4" },
    {
      size: 2,
      ranks: [10, 9, 2],
      expected: { 2: [r(0, 1)], 9: [r(1, 2)], 10: [] },
      why: "sorted as numbers (2, 9, 10), not as text (10, 2, 9); fewer samples than ranks: the last gets nothing"
    },
    { size: 1, ranks: [3], expected: { 3: [r(0, 1)] }, why: "one sample, one rank" },
    { size: 0, ranks: [2, 5], expected: { 2: [], 5: [] }, why: "an empty dataset: nobody holds anything" },
    { size: 10_000_000, ranks: [4], expected: { 4: [r(0, 10_000_000)] }, why: "a large dataset is one range, not 10^7 samples" }
  ]
  for (const { expected, ranks, size, why } of cases) {
    test(`${size} samples over ranks ${ranks.join(", ")}: ${why}`, () => {
      const ledger = plan(7, size, ranks)
      expect(plans(ledger)).toEqual(expected)
      expect(ledger.epoch).toBe(7)
      expect(ledger.datasetSize).toBe(size)
      expect([...ledger.done].sort(([a], [b]) => a - b)).toEqual([...ranks].sort((a, b) => a - b).map((rank) => [rank, 0]))
      expect(ledger.dead.size).toBe(0)
    })
  }
})

describe("plan: weighted split (largest remainder)", () => {
  const cases: ReadonlyArray<{
    size: number
    weights: Array<readonly [number, number]>
    ranks?: Array<number>
    expected: Record<number, Array<SampleRange>>
    why: string
  }> = [
    {
      size: 10,
      weights: [[0, 1], [1, 2], [2, 1]],
      expected: { 0: [r(0, 3)], 1: [r(3, 8)], 2: [r(8, 10)] },
      why: "quotas 2.5, 5, 2.5: floors 2, 5, 2 leave 1; ranks 0 and 2 tie at .5, the lower takes it"
    },
    {
      size: 7,
      weights: [[0, 2], [1, 1], [2, 1]],
      expected: { 0: [r(0, 3)], 1: [r(3, 5)], 2: [r(5, 7)] },
      why: "quotas 3.5, 1.75, 1.75: floors 3, 1, 1 leave 2; the larger remainders (.75, ranks 1 and 2) win over rank 0's .5"
    },
    {
      size: 5,
      weights: [[5, 3], [2, 1], [9, 100]],
      ranks: [5, 2],
      expected: { 2: [r(0, 1)], 5: [r(1, 5)] },
      why: "rank 9's weight is ignored; quotas 1.25 (rank 2), 3.75 (rank 5): rank 5's .75 beats .25"
    },
    {
      size: 3,
      weights: [[0, 5], [1, 1]],
      expected: { 0: [r(0, 3)], 1: [] },
      why: "quotas 2.5 and 0.5 tie (in floats the second is 0.5000000000000001): the lower rank takes the one left"
    },
    {
      size: 2,
      weights: [[0, 2], [1, 7], [2, 1]],
      expected: { 0: [r(0, 1)], 1: [r(1, 2)], 2: [] },
      why: "quotas 0.4, 1.4, 0.2: floors 0, 1, 0 leave 1; ranks 0 and 1 tie at .4 (float noise apart), rank 0 takes it"
    },
    {
      size: 3,
      weights: [[0, 1], [1, 1], [2, 1], [3, 1], [4, 1]],
      expected: { 0: [r(0, 1)], 1: [r(1, 2)], 2: [r(2, 3)], 3: [], 4: [] },
      why: "five equal quotas of 0.6 tie: the three left go to the three lowest ranks, as in the equal split"
    },
    {
      size: 2,
      weights: [[3, 2], [5, 2], [8, 2], [9, 2]],
      expected: { 3: [r(0, 1)], 5: [r(1, 2)], 8: [], 9: [] },
      why: "four equal quotas of 0.5 tie: ranks 3 and 5, the lowest, take the two left"
    },
    {
      size: 6,
      weights: [[0, 1], [1, 1], [2, 4]],
      expected: { 0: [r(0, 1)], 1: [r(1, 2)], 2: [r(2, 6)] },
      why: "quotas 1, 1, 4 are whole: nothing to round"
    },
    {
      size: 3,
      weights: [[0, 1], [1, 1], [2, 1], [3, 1]],
      expected: { 0: [r(0, 1)], 1: [r(1, 2)], 2: [r(2, 3)], 3: [] },
      why: "equal weights: the equal split, the last rank gets nothing"
    },
    {
      size: 3,
      weights: [[0, 1e308], [1, 1e308]],
      expected: { 0: [r(0, 2)], 1: [r(2, 3)] },
      why: "weights near the float limit are scaled, not summed to Infinity: quotas 1.5 each, the tie to rank 0"
    },
    {
      size: 4,
      weights: [[0, 1e308], [1, 1e308], [2, 1e-300]],
      expected: { 0: [r(0, 2)], 1: [r(2, 4)], 2: [] },
      why: "scaled by the largest weight: 1e-300 / 1e308 vanishes to 0, the others split 2 and 2 (by the smallest, 1e308 / 1e-300 would be Infinity)"
    },
    {
      size: 5,
      weights: [[0, 1], [1, Number.MIN_VALUE]],
      expected: { 0: [r(0, 5)], 1: [] },
      why: "the tiniest positive weight is valid and gets nothing"
    }
  ]
  for (const { expected, ranks, size, weights, why } of cases) {
    test(`${size} samples by weights ${weights.map(([rank, w]) => `${rank}:${w}`).join(", ")}: ${why}`, () => {
      const members = ranks ?? weights.map(([rank]) => rank)
      expect(plans(plan(0, size, members, new Map(weights)))).toEqual(expected)
    })
  }
})

test("plan: bad input is a RangeError that says what is wrong", () => {
  expect(() => plan(0, -1, [0])).toThrow(new RangeError("datasetSize must be a non-negative integer, got -1"))
  expect(() => plan(0, 1.5, [0])).toThrow("datasetSize must be a non-negative integer, got 1.5")
  expect(() => plan(0, Number.NaN, [0])).toThrow("datasetSize must be a non-negative integer, got NaN")
  expect(() => plan(0, 2 ** 53, [0])).toThrow(RangeError) // not a safe integer
  expect(() => plan(0, 10, [])).toThrow(new RangeError("an epoch needs at least one rank"))
  expect(() => plan(0, 10, [1, 2, 1])).toThrow(new RangeError("rank 1 is listed twice"))
  expect(() => plan(0, 10, [2, 2])).toThrow("rank 2 is listed twice")
  expect(() => plan(0, 10, [0, -1])).toThrow(new RangeError("rank -1 is not a non-negative integer"))
  expect(() => plan(0, 10, [0, 0.5])).toThrow("rank 0.5 is not a non-negative integer")
  expect(() => plan(0, 10, [0, 2 ** 53])).toThrow(`rank ${2 ** 53} is not a non-negative integer`)
  for (const bad of [0, -2, Number.NaN, Number.POSITIVE_INFINITY]) {
    expect(() => plan(0, 10, [0, 3], new Map([[0, 1], [3, bad]]))).toThrow(
      new RangeError(`rank 3 has weight ${bad}: weights must be positive and finite`)
    )
  }
  expect(() => plan(0, 10, [0, 3], new Map([[0, 1]]))).toThrow(new RangeError("rank 3 has no weight"))
  // Zero samples, rank 0 and epoch 0 are all valid.
  expect(plans(plan(0, 0, [0]))).toEqual({ 0: [] })
})

// ---------------------------------------------------------------------------
// report
// ---------------------------------------------------------------------------

describe("report", () => {
  const ledger = plan(0, 10, [0, 1]) // rank 0 holds [0, 5), rank 1 [5, 10)

  test("forward reports are cumulative and the ledger is not changed in place", () => {
    const first = report(ledger, 0, 3)
    expect(first).toEqual({ ledger: expect.anything(), accepted: 3, clipped: false })
    expect(first.ledger.done.get(0)).toBe(3)
    expect(first.ledger.done.get(1)).toBe(0)
    expect(ledger.done.get(0)).toBe(0)
    expect(report(first.ledger, 0, 4).ledger.done.get(0)).toBe(4)
    expect(report(ledger, 0, 1)).toMatchObject({ accepted: 1, clipped: false }) // 1 > 0: the smallest step counts
  })

  test("a report of exactly what the rank holds is not clipped; one more is", () => {
    expect(report(ledger, 0, 5)).toMatchObject({ accepted: 5, clipped: false })
    expect(report(ledger, 0, 5).ledger.done.get(0)).toBe(5)
    expect(report(ledger, 0, 6)).toMatchObject({ accepted: 5, clipped: true })
    expect(report(ledger, 0, 6).ledger.done.get(0)).toBe(5)
  })

  test("backwards, repeated and non-integer reports leave the same ledger and the count it had", () => {
    const first = report(ledger, 0, 3).ledger
    for (const ignored of [2, 3, 2.5, 3.5, Number.NaN, -1, Number.POSITIVE_INFINITY, 2 ** 53]) {
      const again = report(first, 0, ignored)
      expect(again.ledger).toBe(first)
      expect({ ignored, accepted: again.accepted, clipped: again.clipped }).toEqual({ ignored, accepted: 3, clipped: false })
    }
    expect(report(ledger, 0, 0)).toEqual({ ledger, accepted: 0, clipped: false }) // 0 after 0 is a repeat
  })

  test("a report beyond a plan already done is clipped and changes nothing", () => {
    const full = report(ledger, 0, 9).ledger
    const again = report(full, 0, 7)
    expect(again.ledger).toBe(full)
    expect(again).toMatchObject({ accepted: 5, clipped: true })
  })

  test("a rank with an empty plan: any report is clipped to 0 and changes nothing", () => {
    const few = plan(0, 1, [0, 1]) // rank 0 holds [0, 1), rank 1 nothing
    const result = report(few, 1, 1)
    expect(result.ledger).toBe(few)
    expect(result).toMatchObject({ accepted: 0, clipped: true })
  })

  test("unknown and dead ranks are ignored", () => {
    expect(report(ledger, 9, 1)).toEqual({ ledger, accepted: 0, clipped: false })
    const dead = markDead(report(ledger, 1, 2).ledger, 1).ledger
    const late = report(dead, 1, 4)
    expect(late.ledger).toBe(dead)
    expect(late).toMatchObject({ accepted: 2, clipped: false })
  })
})

// ---------------------------------------------------------------------------
// remainder and markDead
// ---------------------------------------------------------------------------

test("remainder: a plan's samples after the first `done`, across range boundaries", () => {
  // A plan of three ranges, 3 + 1 + 1 samples: [6, 9), [5, 6), [4, 5).
  const ledger: EpochLedger = {
    epoch: 1,
    datasetSize: 9,
    assigned: new Map([[2, [r(6, 9), r(5, 6), r(4, 5)]]]),
    done: new Map([[2, 0]]),
    dead: new Set()
  }
  const after = (done: number) => remainder({ ...ledger, done: new Map([[2, done]]) }, 2)
  expect(after(0)).toEqual([r(6, 9), r(5, 6), r(4, 5)])
  expect(after(2)).toEqual([r(8, 9), r(5, 6), r(4, 5)]) // inside the first range
  expect(after(3)).toEqual([r(5, 6), r(4, 5)]) // exactly the first range
  expect(after(4)).toEqual([r(4, 5)])
  expect(after(5)).toEqual([]) // all of it
  expect(remainder(ledger, 7)).toEqual([]) // not in the epoch
  expect(assignedCount(ledger, 2)).toBe(5)
  expect(assignedCount(ledger, 7)).toBe(0)
})

describe("markDead", () => {
  test("survivors' pieces are appended (merged at a seam), a second call is a no-op, the last death orphans", () => {
    const ledger = plan(0, 9, [0, 1, 2]) // [0, 3), [3, 6), [6, 9)
    // Rank 1 did nothing: its 3 samples over 2 survivors are 2 + 1: rank 0 gets [3, 5) (merged onto [0, 3)), rank 2 [5, 6).
    const first = markDead(ledger, 1)
    expect([...first.extensions]).toEqual([[0, [r(3, 5)]], [2, [r(5, 6)]]])
    expect(first.orphaned).toEqual([])
    expect(plans(first.ledger)).toEqual({ 0: [r(0, 5)], 1: [], 2: [r(6, 9), r(5, 6)] })
    expect([...first.ledger.dead]).toEqual([1])
    expect(ledger.dead.size).toBe(0) // immutable
    expect(plans(ledger)).toEqual({ 0: [r(0, 3)], 1: [r(3, 6)], 2: [r(6, 9)] })

    const again = markDead(first.ledger, 1)
    expect(again.ledger).toBe(first.ledger)
    expect(again.extensions.size).toBe(0)
    expect(again.orphaned).toEqual([])
    expect(markDead(first.ledger, 42).ledger).toBe(first.ledger)

    // Rank 0 did 4 of its 5: the one left, [4, 5), goes to rank 2, after what it holds.
    const fourDone = report(first.ledger, 0, 4).ledger
    const second = markDead(fourDone, 0)
    expect([...second.extensions]).toEqual([[2, [r(4, 5)]]])
    expect(plans(second.ledger)).toEqual({ 0: [r(0, 4)], 1: [], 2: [r(6, 9), r(5, 6), r(4, 5)] })
    expect(second.ledger.done.get(0)).toBe(4) // what it did, still counted

    // The last rank dies after 2 samples: nobody is left to take the rest, [8, 9), [5, 6), [4, 5).
    const last = markDead(report(second.ledger, 2, 2).ledger, 2)
    expect(last.extensions.size).toBe(0)
    expect(last.orphaned).toEqual([r(8, 9), r(5, 6), r(4, 5)])
    expect(last.ledger.assigned.get(2)).toEqual([r(6, 8)])
    expect([...last.ledger.dead].sort()).toEqual([0, 1, 2])
    expect(doneCount(last.ledger)).toBe(6) // 4 by rank 0, 2 by rank 2
    expect(isComplete(last.ledger)).toBe(false)
  })

  test("fewer samples left than survivors: the lowest survivors get one each, the others are not named", () => {
    const ledger = report(plan(0, 9, [0, 1, 2]), 0, 2).ledger // rank 0 did [0, 2) of [0, 3)
    const result = markDead(ledger, 0)
    // 1 sample over ranks 1 and 2: 1 + 0.
    expect([...result.extensions]).toEqual([[1, [r(2, 3)]]])
    expect(plans(result.ledger)).toEqual({ 0: [r(0, 2)], 1: [r(3, 6), r(2, 3)], 2: [r(6, 9)] })
  })

  test("a dead rank that did everything hands nothing on", () => {
    const ledger = report(plan(0, 6, [0, 1]), 0, 3).ledger
    const result = markDead(ledger, 0)
    expect(result.extensions.size).toBe(0)
    expect(result.orphaned).toEqual([])
    expect(plans(result.ledger)).toEqual({ 0: [r(0, 3)], 1: [r(3, 6)] })
    expect(isComplete(report(result.ledger, 1, 3).ledger)).toBe(true)
  })

  test("a piece may span ranges; a survivor with an empty plan takes it as is", () => {
    // [0, 1), [1, 2), []: rank 0 dies with nothing done, its sample goes to rank 1 (1 over 2 survivors: 1 + 0).
    const one = markDead(plan(0, 2, [0, 1, 2]), 0)
    expect(plans(one.ledger)).toEqual({ 0: [], 1: [r(1, 2), r(0, 1)], 2: [] })
    // Rank 1 dies with nothing done: both its ranges, in its order, go to rank 2, whose plan was empty.
    const two = markDead(one.ledger, 1)
    expect([...two.extensions]).toEqual([[2, [r(1, 2), r(0, 1)]]])
    expect(plans(two.ledger)).toEqual({ 0: [], 1: [], 2: [r(1, 2), r(0, 1)] })
  })

  test("a remainder is cut inside a range, and pieces keep its order", () => {
    // [0, 3), [3, 6), [6, 9), [9, 12); rank 3 did 1: [10, 12) left, 2 over 3 survivors: 1 + 1 + 0.
    const result = markDead(report(plan(0, 12, [0, 1, 2, 3]), 3, 1).ledger, 3)
    expect([...result.extensions]).toEqual([[0, [r(10, 11)]], [1, [r(11, 12)]]])
    expect(plans(result.ledger)).toEqual({ 0: [r(0, 3), r(10, 11)], 1: [r(3, 6), r(11, 12)], 2: [r(6, 9)], 3: [r(9, 10)] })
  })

  test("survivors are served in rank order even when the ledger holds them in another", () => {
    // Ranks 5 and 6 hold [0, 2) and [2, 4); rank 1 is adopted with nothing, so the book lists 5, 6, 1.
    const book = adopt(plan(0, 4, [5, 6]), [1], []).ledger
    expect([...book.assigned.keys()]).toEqual([5, 6, 1])
    // Rank 5 dies with nothing done: 2 samples over survivors 1 and 6 (in rank order): 1 + 1.
    const result = markDead(book, 5)
    expect([...result.extensions]).toEqual([[1, [r(0, 1)]], [6, [r(1, 2)]]])
    expect(plans(result.ledger)).toEqual({ 1: [r(0, 1)], 5: [], 6: [r(2, 4), r(1, 2)] })
  })
})

// ---------------------------------------------------------------------------
// adopt
// ---------------------------------------------------------------------------

describe("adopt", () => {
  // Ranks 0 and 1 hold [0, 3) and [3, 6). Rank 0 does 1 and dies: [1, 3) goes to rank 1, which holds
  // [3, 6), [1, 3). Rank 1 does 2 and dies: its remainder [5, 6), [1, 3) is orphaned.
  const step1 = markDead(reported(plan(2, 6, [0, 1]), [0, 1]), 0).ledger
  const orphanedBy = markDead(report(step1, 1, 2).ledger, 1)

  test("the worked example's orphans", () => {
    expect(orphanedBy.orphaned).toEqual([r(5, 6), r(1, 3)])
    expect(plans(orphanedBy.ledger)).toEqual({ 0: [r(0, 1)], 1: [r(3, 5)] })
  })

  test("new ranks take the orphans in equal pieces, in ascending rank order; repeats and members are ignored", () => {
    const before = orphanedBy.ledger
    // Asked: 10, 9, 9 (a repeat), 1 (a member, dead). Fresh: 9 and 10, as numbers (text order would be 10, 9).
    // 3 samples over 2: 2 + 1. Rank 9 gets the first two, [5, 6) and [1, 2); rank 10 gets [2, 3).
    const result = adopt(before, [10, 9, 9, 1], orphanedBy.orphaned)
    expect([...result.pieces]).toEqual([[9, [r(5, 6), r(1, 2)]], [10, [r(2, 3)]]])
    expect(plans(result.ledger)).toEqual({ 0: [r(0, 1)], 1: [r(3, 5)], 9: [r(5, 6), r(1, 2)], 10: [r(2, 3)] })
    expect(result.ledger.done.get(9)).toBe(0)
    expect(result.ledger.done.get(10)).toBe(0)
    expect(result.ledger.done.get(1)).toBe(2) // the dead keep their count
    expect([...result.ledger.dead].sort()).toEqual([0, 1])
    expect(result.ledger.epoch).toBe(2)
    // Immutable: the ledger adopted from is as it was.
    expect(plans(before)).toEqual({ 0: [r(0, 1)], 1: [r(3, 5)] })
    expect(before.done.has(9)).toBe(false)
    // The newcomers finish: 1 + 2 + 2 + 1 = 6 samples, the epoch is complete.
    const finished = reported(result.ledger, [9, 2], [10, 1])
    expect(doneCount(finished)).toBe(6)
    expect(isComplete(finished)).toBe(true)
    expect(isComplete(report(result.ledger, 9, 2).ledger)).toBe(false) // one sample short
  })

  test("more newcomers than samples: the lowest get one each, the rest an empty plan", () => {
    const result = adopt(orphanedBy.ledger, [7, 8, 9, 11], orphanedBy.orphaned)
    // 3 samples over 4: 1 + 1 + 1 + 0, cut from [5, 6), [1, 3) in order.
    expect([...result.pieces]).toEqual([[7, [r(5, 6)]], [8, [r(1, 2)]], [9, [r(2, 3)]], [11, []]])
    expect(result.ledger.done.get(11)).toBe(0)
  })

  test("nothing to adopt with: the same ledger, no pieces", () => {
    for (const ranks of [[], [0, 1], [1, 1]]) {
      const result = adopt(orphanedBy.ledger, ranks, orphanedBy.orphaned)
      expect(result.ledger).toBe(orphanedBy.ledger)
      expect(result.pieces.size).toBe(0)
    }
  })

  test("adopting no ranges still enters the rank, with an empty plan and nothing done", () => {
    const result = adopt(plan(0, 4, [0]), [3], [])
    expect([...result.pieces]).toEqual([[3, []]])
    expect(plans(result.ledger)).toEqual({ 0: [r(0, 4)], 3: [] })
    expect(result.ledger.done.get(3)).toBe(0)
  })
})

// ---------------------------------------------------------------------------
// doneCount, isComplete, lengthOf, take, coverage
// ---------------------------------------------------------------------------

test("doneCount sums every rank's count, the dead's included; isComplete is exactly the dataset", () => {
  const ledger = plan(0, 10, [0, 1]) // [0, 5), [5, 10)
  expect(doneCount(ledger)).toBe(0)
  expect(doneCount(reported(ledger, [0, 3], [1, 4]))).toBe(7)
  expect(isComplete(reported(ledger, [0, 5], [1, 4]))).toBe(false) // 9 of 10
  expect(isComplete(reported(ledger, [0, 5], [1, 5]))).toBe(true)
  const afterDeath = markDead(reported(ledger, [0, 2]), 0).ledger // rank 1 now holds [5, 10), [2, 5)
  expect(doneCount(afterDeath)).toBe(2)
  expect(isComplete(report(afterDeath, 1, 8).ledger)).toBe(true) // 2 + 8
  expect(isComplete(plan(0, 0, [0]))).toBe(true)
})

test("lengthOf counts the samples of a list of ranges", () => {
  expect(lengthOf([])).toBe(0)
  expect(lengthOf([r(0, 1)])).toBe(1)
  expect(lengthOf([r(6, 9), r(5, 6), r(100, 104)])).toBe(8) // 3 + 1 + 4
})

describe("take", () => {
  const ranges = [r(10, 13), r(0, 2), r(20, 21)] // samples 10, 11, 12, 0, 1, 20
  const cases: ReadonlyArray<readonly [number, number, Array<number>, string]> = [
    [0, Number.POSITIVE_INFINITY, [10, 11, 12, 0, 1, 20], "everything, in plan order"],
    [0, 6, [10, 11, 12, 0, 1, 20], "exactly all"],
    [0, 2, [10, 11], "a count inside the first range"],
    [2, 2, [12, 0], "across a range boundary"],
    [3, 2, [0, 1], "an offset of exactly the first range's length starts the second"],
    [5, 1, [20], "the last sample"],
    [6, 5, [], "an offset at the end"],
    [9, 5, [], "an offset past the end"],
    [-2, 3, [10, 11, 12], "a negative offset reads as 0"],
    [1, 0, [], "a count of 0"],
    [1, -3, [], "a negative count"]
  ]
  for (const [offset, count, expected, why] of cases) {
    test(`offset ${offset}, count ${count}: ${why}`, () => expect(take(ranges, offset, count)).toEqual(expected))
  }
  test("no ranges: nothing", () => expect(take([], 0, 5)).toEqual([]))
})

test("coverage counts each sample's assignments and reported-done", () => {
  const ledger = plan(0, 6, [0, 1, 2]) // [0, 2), [2, 4), [4, 6)
  const some = reported(ledger, [0, 1], [2, 2])
  expect(coverage(some)).toEqual({ assigned: Uint32Array.from([1, 1, 1, 1, 1, 1]), done: Uint32Array.from([1, 0, 0, 0, 1, 1]) })
  // Rank 1 dies having done 1 ([2, 3)): its [3, 4) goes to rank 0, which now holds [0, 2), [3, 4).
  const after = markDead(report(some, 1, 1).ledger, 1).ledger
  expect(plans(after)).toEqual({ 0: [r(0, 2), r(3, 4)], 1: [r(2, 3)], 2: [r(4, 6)] })
  // Rank 0 reports 3: its first two samples and then [3, 4).
  expect(coverage(report(after, 0, 3).ledger)).toEqual({
    assigned: Uint32Array.from([1, 1, 1, 1, 1, 1]),
    done: Uint32Array.from([1, 1, 1, 1, 1, 1])
  })
  expect(coverage(plan(0, 0, [0]))).toEqual({ assigned: new Uint32Array(0), done: new Uint32Array(0) })
})
