/**
 * Property tests of the EpochLedger, the coordinator's book of one epoch.
 *
 * No expected value here comes from the ledger: each is a property that pins
 * the answer down by itself (an equal split is the one whose sizes sum to the
 * total, differ by at most 1 and never increase), an exact integer model (the
 * largest-remainder split of integer weights), or a simulation of the ranks.
 *
 * The main property plays a run: ranks report progress (forwards, and now and
 * then backwards or beyond what they hold) and die, in a random interleaving;
 * if everyone died, newcomers may adopt what was orphaned; then every
 * survivor finishes what it holds. Each simulated rank keeps its own view
 * (its plan plus the extensions it was sent) and processes samples from that
 * view alone, so "every sample exactly once" and "a dead rank's remainder is
 * what it had not done" are checked against what the ranks would really
 * have done, not against the ledger's own bookkeeping.
 *
 * Literal worked examples are in epoch-ledger.table.test.ts.
 *
 * Every `fc.assert` is seeded so a failure reproduces; fast-check prints the
 * seed and the shrunk counterexample.
 */
import { expect, test } from "bun:test"
import * as fc from "fast-check"
import {
  adopt,
  assignedCount,
  coverage,
  covered,
  doneCount,
  type EpochLedger,
  isComplete,
  markDead,
  plan,
  planRest,
  remainder,
  report,
  type SampleRange,
  take
} from "../src/launcher/training/EpochLedger.ts"

/** Every property is seeded (reproducible) and reports the assertion that failed with its counterexample. */
const seeded = (seed: number, numRuns = 200) => ({ seed, numRuns, includeErrorInReport: true })

// ---------------------------------------------------------------------------
// Helpers: a model of ranges written without the ledger's code
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

/** `ranges` cut after their first `n` samples: what a rank that did `n` of them did, and what it did not. */
const splitAt = (ranges: ReadonlyArray<SampleRange>, n: number) => {
  const head: Array<SampleRange> = []
  const tail: Array<SampleRange> = []
  let before = 0 // samples in the ranges already walked
  for (const { end, start } of ranges) {
    const cutAt = start + Math.min(end - start, Math.max(0, n - before))
    if (cutAt > start) head.push({ start, end: cutAt })
    if (end > cutAt) tail.push({ start: cutAt, end })
    before += end - start
  }
  return { head, tail }
}

/**
 * The equal split, by what defines it rather than by a formula: sizes that add up to the total, differ by
 * at most 1 and never increase (so the first ones hold the extra). Only one list of sizes is all three.
 */
const expectEqualSplit = (sizes: ReadonlyArray<number>, total: number, what: string) => {
  const sum = sizes.reduce((a, b) => a + b, 0)
  const spread = sizes.length === 0 ? 0 : Math.max(...sizes) - Math.min(...sizes)
  const increases = sizes.findIndex((size, i) => i > 0 && size > sizes[i - 1]!)
  expect({ what, sum, spread: spread <= 1, increases }).toEqual({ what, sum: total, spread: true, increases: -1 })
}

/** Per-sample counts, checked without a 10^5-element diff: names the first sample that is off. */
const expectEvery = (counts: Uint32Array, expected: (sample: number) => number, what: string) => {
  const sample = counts.findIndex((count, i) => count !== expected(i))
  expect(sample === -1 ? "ok" : `${what}: sample ${sample} counted ${counts[sample]}, not ${expected(sample)}`)
    .toBe("ok")
}

/** Each sample's count in a list of ranges, walked directly (not through `take`). */
const countsOf = (size: number, ranges: ReadonlyArray<SampleRange>, counts = new Uint32Array(size)) => {
  for (const { end, start } of ranges) for (let sample = start; sample < end; sample++) counts[sample]!++
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

/**
 * The ranks, in ascending order, each hold one contiguous range (or none), and together exactly
 * [0, size) with no gap: returns each rank's size, read from the ranges themselves.
 */
const contiguousSizes = (ledger: EpochLedger, ranks: ReadonlyArray<number>) => {
  let at = 0
  const sizes = ascending(ranks).map((rank) => {
    const ranges = ledger.assigned.get(rank)!
    expect(ranges.length).toBeLessThanOrEqual(1)
    if (ranges.length === 0) return 0
    expect(ranges[0]!.start).toBe(at)
    expect(ranges[0]!.end).toBeGreaterThan(at)
    at = ranges[0]!.end
    return ranges[0]!.end - ranges[0]!.start
  })
  expect(at).toBe(ledger.datasetSize)
  expect(ledger.assigned.size).toBe(ranks.length)
  return sizes
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
      expect([...ledger.done.values()]).toEqual(ranks.map(() => 0))
      expect(ascending([...ledger.done.keys()])).toEqual(ascending(ranks))
      expectEqualSplit(contiguousSizes(ledger, ranks), size, "plan")
      expect(isComplete(ledger)).toBe(size === 0)
    }),
    seeded(1)
  )
})

/**
 * The largest-remainder split of `total` by integer weights, in exact integer arithmetic: each share is
 * floor(total × w / W) and its remainder (total × w) mod W, compared as integers, so no rounding decides.
 */
const exactShares = (total: number, weights: ReadonlyArray<number>) => {
  const sum = weights.reduce((a, b) => a + b, 0)
  return weights.map((weight) => ({ floor: Math.floor((total * weight) / sum), remainder: (total * weight) % sum }))
}

test("plan: integer weights give a largest-remainder split, checked in exact arithmetic", () => {
  const integerWeightsArb = fc.array(fc.integer({ min: 1, max: 12 }), { minLength: 16, maxLength: 16 })
  fc.assert(
    fc.property(sizeArb, ranksArb, integerWeightsArb, (size, ranks, weights) => {
      const sorted = ascending(ranks)
      const ledger = plan(0, size, ranks, weightMap(ranks, weights))
      const sizes = contiguousSizes(ledger, ranks)
      const shares = exactShares(size, sorted.map((_, i) => weights[i]!))
      // Every share is its quota's floor or one more, and the ones rounded up are as many as the floors leave.
      const roundedUp = sizes.flatMap((got, i) => (got === shares[i]!.floor + 1 ? [i] : []))
      const roundedDown = sizes.flatMap((got, i) => (got === shares[i]!.floor ? [i] : []))
      expect(roundedUp.length + roundedDown.length).toBe(sorted.length)
      expect(roundedUp.length).toBe(size - shares.reduce((n, share) => n + share.floor, 0))
      // No share was rounded up while one with a strictly larger remainder was rounded down.
      const upMin = Math.min(...roundedUp.map((i) => shares[i]!.remainder))
      const downMax = Math.max(...roundedDown.map((i) => shares[i]!.remainder))
      expect(roundedUp.length === 0 || roundedDown.length === 0 || upMin >= downMax).toBe(true)
      // Where no two remainders tie across the cut, the split is unique: it must be exactly that one.
      // (Ties are left out: float noise breaks them, not always toward the lower rank; see the table test.)
      if (roundedUp.length === 0 || roundedDown.length === 0 || upMin > downMax) {
        const byRemainder = shares.map((share, i) => ({ ...share, i })).sort((a, b) => b.remainder - a.remainder)
        const expected = shares.map((share) => share.floor)
        for (const { i } of byRemainder.slice(0, roundedUp.length)) expected[i]!++
        expect(sizes).toEqual(expected)
      }
    }),
    seeded(6)
  )
})

test("plan: a weighted split is contiguous and rounds each share by largest remainder", () => {
  fc.assert(
    fc.property(sizeArb, ranksArb, weightsArb, (size, ranks, weights) => {
      const byRank = weightMap(ranks, weights)
      const ledger = plan(0, size, ranks, byRank)
      const sizes = contiguousSizes(ledger, ranks)
      const sorted = ascending(ranks)
      const total = sorted.reduce((sum, rank) => sum + byRank.get(rank)!, 0)
      // Each share is off its exact quota by under one sample, and no share was rounded up while
      // one with a larger fraction was rounded down: together, all excesses lie within 1 of each other.
      const excess = sorted.map((rank, i) => sizes[i]! - (size * byRank.get(rank)!) / total)
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
      expectEqualSplit(contiguousSizes(weighted, ranks), size, "equal weights")
    }),
    seeded(3)
  )
})

// ---------------------------------------------------------------------------
// take
// ---------------------------------------------------------------------------

test("take: the samples of a list of ranges, from an offset, up to a count", () => {
  const rangesArb = fc.array(
    fc.record({ start: fc.nat({ max: 1_000 }), length: fc.integer({ min: 1, max: 30 }) })
      .map(({ length, start }) => ({ start, end: start + length })),
    { maxLength: 8 }
  )
  fc.assert(
    fc.property(rangesArb, fc.integer({ min: -3, max: 300 }), fc.integer({ min: -3, max: 300 }), (ranges, offset, count) => {
      expect(take(ranges, offset, count)).toEqual(expand(ranges).slice(Math.max(0, offset), Math.max(0, offset) + Math.max(0, count)))
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
  everyoneDies: fc.oneof({ weight: 3, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
  /** After everyone died: newcomers (numbers above any member's) that adopt what was orphaned, if any. */
  adopters: fc.uniqueArray(fc.integer({ min: 41, max: 60 }), { maxLength: 4 })
})

test("an epoch with random progress, deaths and adoption ends with every sample processed exactly once, none by the dead", () => {
  // The property must not pass vacuously: these shapes must all occur.
  const seen = { survivorGotNothing: 0, multiRangePiece: 0, mergedSeam: 0, orphaned: 0, adopted: 0, clipped: 0 }
  fc.assert(
    fc.property(runArb, ({ adopters, everyoneDies, events, ranks, size, weights }) => {
      const sorted = ascending(ranks)
      let ledger = plan(1, size, ranks, weights === null ? undefined : weightMap(ranks, weights))
      // What each rank itself knows: its plan plus every extension it was sent, and how far it got.
      const view = new Map(sorted.map((rank) => [rank, [...ledger.assigned.get(rank)!]]))
      const progress = new Map(sorted.map((rank) => [rank, 0]))
      const dead = new Set<number>()
      let members = [...sorted] // every rank the epoch has had, ascending
      // Samples the ranks processed, read from their own views.
      const processed = new Uint32Array(size)
      let orphaned: Array<SampleRange> = []
      const live = () => members.filter((rank) => !dead.has(rank))
      const small = size <= 500 // per-step O(samples) checks only where they are cheap

      const reportTo = (rank: number, target: number) => {
        const before = ledger
        const result = report(ledger, rank, target)
        const had = progress.get(rank)!
        const holds = lengthOf(view.get(rank)!)
        if (dead.has(rank) || target <= had) {
          expect(result.ledger).toBe(before)
          expect(result.accepted).toBe(had)
          expect(result.clipped).toBe(false)
          return
        }
        const accepted = Math.min(target, holds)
        expect(result.accepted).toBe(accepted)
        expect(result.clipped).toBe(target > holds)
        if (target > holds) seen.clipped++
        if (accepted === had) expect(result.ledger).toBe(before)
        // The rank processes samples [had, accepted) of its own view.
        countsOf(size, splitAt(splitAt(view.get(rank)!, accepted).head, had).tail, processed)
        progress.set(rank, accepted)
        ledger = result.ledger
        expect(ledger.done.get(rank)).toBe(accepted)
        expect(before.done.get(rank)).toBe(had) // the ledger before is untouched
      }

      const die = (rank: number) => {
        const before = ledger
        const result = markDead(ledger, rank)
        if (dead.has(rank)) {
          expect(result.ledger).toBe(before)
          expect(result.extensions.size).toBe(0)
          expect(result.orphaned).toEqual([])
          return
        }
        // What the rank had not done, from its own view.
        const { head: did, tail: left } = splitAt(view.get(rank)!, progress.get(rank)!)
        expect(joined(remainder(before, rank))).toEqual(joined(left))
        dead.add(rank)
        ledger = result.ledger
        expect(ascending([...ledger.dead])).toEqual(ascending([...dead]))
        expect(before.dead.has(rank)).toBe(false) // the ledger before is untouched
        const survivors = live()
        for (const to of result.extensions.keys()) expect(survivors).toContain(to)
        if (survivors.length === 0) {
          expect(result.extensions.size).toBe(0)
          expect(joined(result.orphaned)).toEqual(joined(left))
          if (lengthOf(left) > 0) seen.orphaned++
          orphaned = [...orphaned, ...result.orphaned]
        } else {
          // The remainder, in order, in equal pieces (lower ranks first get the extra) over the survivors.
          expect(result.orphaned).toEqual([])
          const pieces = survivors.map((to) => result.extensions.get(to) ?? [])
          expectEqualSplit(pieces.map(lengthOf), lengthOf(left), "pieces of a dead rank's remainder")
          expect(joined(pieces.flat())).toEqual(joined(left))
          if (pieces.some((piece) => piece.length === 0)) seen.survivorGotNothing++
          if (pieces.some((piece) => piece.length > 1)) seen.multiRangePiece++
          // Only ranks that got something are named, and every range holds a sample.
          for (const piece of result.extensions.values()) expect(piece.length).toBeGreaterThan(0)
          expect(pieces.flat().every((range) => range.start < range.end)).toBe(true)
          for (const [to, piece] of result.extensions) {
            const had = view.get(to)!
            if (had.length > 0 && had.at(-1)!.end === piece[0]!.start) seen.mergedSeam++
            view.set(to, [...had, ...piece])
          }
        }
        // The dead rank keeps exactly what it reported done, and it stays counted.
        expect(joined(ledger.assigned.get(rank)!)).toEqual(joined(did))
        expect(ledger.done.get(rank)).toBe(progress.get(rank)!)
        view.set(rank, did)
      }

      const checkInvariants = () => {
        // Every rank's plan in the ledger is what the rank was told (a dead one: what it did).
        for (const rank of members) expect(joined(ledger.assigned.get(rank)!)).toEqual(joined(view.get(rank)!))
        for (const rank of live()) expect(ledger.assigned.get(rank)).toEqual(joined(view.get(rank)!))
        for (const rank of members) expect(assignedCount(ledger, rank)).toBe(lengthOf(view.get(rank)!))
        // Each sample is held by a live rank, done by a dead one or orphaned: exactly once in all.
        const heldCount = members.reduce((n, rank) => n + lengthOf(view.get(rank)!), 0)
        expect(heldCount + lengthOf(orphaned)).toBe(size)
        expect(doneCount(ledger)).toBe(members.reduce((n, rank) => n + progress.get(rank)!, 0))
        if (small) {
          const { assigned } = coverage(ledger)
          const held = new Uint32Array(size)
          for (const rank of members) countsOf(size, view.get(rank)!, held)
          expectEvery(assigned, (i) => held[i]!, "assigned (by the ledger) vs held (by the ranks)")
          const lost = countsOf(size, orphaned)
          expectEvery(held, (i) => 1 - lost[i]!, "held or orphaned, once")
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
      if (live().length === 0 && adopters.length > 0) {
        // Newcomers adopt the orphaned work; a member among them (or a repeat) is ignored.
        const asked = [...adopters, ...adopters.slice(0, 1), sorted[0]!]
        const result = adopt(ledger, asked, orphaned)
        const fresh = ascending(adopters)
        expect([...result.pieces.keys()]).toEqual(fresh)
        const pieces = fresh.map((rank) => result.pieces.get(rank)!)
        expectEqualSplit(pieces.map(lengthOf), lengthOf(orphaned), "adopted pieces")
        expect(joined(pieces.flat())).toEqual(joined(orphaned))
        ledger = result.ledger
        for (const [i, rank] of fresh.entries()) {
          expect(ledger.assigned.get(rank)).toEqual(pieces[i]!)
          expect(ledger.done.get(rank)).toBe(0)
          view.set(rank, [...pieces[i]!])
          progress.set(rank, 0)
        }
        members = ascending([...members, ...fresh])
        if (lengthOf(orphaned) > 0) seen.adopted++
        orphaned = []
        checkInvariants()
      }
      // The survivors finish what they hold, extensions included.
      for (const rank of live()) reportTo(rank, lengthOf(view.get(rank)!))
      checkInvariants()

      const { assigned, done } = coverage(ledger)
      // The ledger's done samples are exactly the ones the ranks processed, and `take` reads each rank's alike.
      expectEvery(done, (i) => processed[i]!, "ledger done vs processed")
      for (const rank of members) {
        const ranges = ledger.assigned.get(rank)!
        expect(take(ranges, 0, ledger.done.get(rank)!)).toEqual(expand(splitAt(view.get(rank)!, progress.get(rank)!).head))
      }
      if (live().length > 0) {
        expectEvery(done, () => 1, "done")
        expectEvery(assigned, () => 1, "assigned")
        expect(isComplete(ledger)).toBe(true)
        expect(doneCount(ledger)).toBe(size)
        for (const rank of members) expect(remainder(ledger, rank)).toEqual([])
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
  for (const [shape, count] of Object.entries(seen)) expect({ shape, seen: count > 5 }).toEqual({ shape, seen: true })
}, 20_000)

/** A sample set as sorted, merged ranges, by walking a boolean array (no ledger code). */
const rangesOfSet = (set: ReadonlyArray<boolean>): Array<SampleRange> => {
  const ranges: Array<SampleRange> = []
  set.forEach((inIt, sample) => {
    if (!inIt) return
    const last = ranges.at(-1)
    if (last !== undefined && last.end === sample) ranges[ranges.length - 1] = { start: last.start, end: sample + 1 }
    else ranges.push({ start: sample, end: sample + 1 })
  })
  return ranges
}

test("planRest and covered: a resumed epoch plans exactly what its coverage left, equally; reports, deaths and a second cut add up to every sample once", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 400 }).chain((size) => fc.tuple(fc.constant(size), fc.array(fc.boolean(), { minLength: size, maxLength: size }))),
      ranksArb,
      fc.array(fc.tuple(fc.nat(), fc.nat({ max: 400 })), { maxLength: 12 }),
      ([size, done], ranks, reports) => {
        const carried = rangesOfSet(done)
        let ledger = planRest(3, size, ranks, carried)
        const { assigned: timesAssigned, done: timesDone } = coverage(ledger)
        // Every sample once: the covered ones done (and in no plan), the rest assigned to exactly one rank.
        for (let sample = 0; sample < size; sample++) {
          expect([timesAssigned[sample], timesDone[sample]]).toEqual([1, done[sample] ? 1 : 0])
        }
        for (const ranges of ledger.assigned.values()) for (const { end, start } of ranges) for (let sample = start; sample < end; sample++) expect(done[sample]).toBe(false)
        const left = done.filter((inIt) => !inIt).length
        expectEqualSplit(ascending(ranks).map((rank) => assignedCount(ledger, rank)), left, "planRest")
        expect(doneCount(ledger)).toBe(size - left)
        expect(covered(ledger)).toEqual(carried)
        // Progress and deaths, then the cut: covered is what coverage() counts done, as merged ranges.
        for (const [pick, count] of reports) {
          const rank = ascending(ranks)[pick % ranks.length]!
          ledger = pick % 5 === 4 ? markDead(ledger, rank).ledger : report(ledger, rank, count).ledger
        }
        const now = coverage(ledger).done
        expect(covered(ledger)).toEqual(rangesOfSet([...now].map((times) => times === 1)))
        expect([...now].every((times) => times <= 1)).toBe(true)
        expect(isComplete(ledger)).toBe([...now].every((times) => times === 1))
      }
    ),
    seeded(71)
  )
})
