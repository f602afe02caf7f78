/**
 * The join window's verdict: properties over every combination of rules and
 * progress, plus the documented cases.
 */
import { expect, test } from "bun:test"
import * as fc from "fast-check"
import { FLOOD_LIMIT, joinVerdict, type JoinProgress, type JoinRules } from "../src/actors/launcher/joinVerdict.ts"

const rulesArb: fc.Arbitrary<JoinRules> = fc
  .record({
    minRanks: fc.integer({ min: 1, max: 16 }),
    extra: fc.option(fc.integer({ min: 0, max: 16 }), { nil: undefined }),
    timeoutMs: fc.integer({ min: 1, max: 10_000 }),
    capExtra: fc.integer({ min: 0, max: 10_000 }),
    start: fc.constantFrom("auto" as const, "manual" as const, "hybrid" as const)
  })
  .map(({ capExtra, extra, minRanks, start, timeoutMs }) => ({
    minRanks,
    targetRanks: start === "manual" || extra === undefined ? undefined : minRanks + extra,
    timeoutMs,
    maxTimeoutMs: timeoutMs + capExtra,
    start
  }))

const progressArb: fc.Arbitrary<JoinProgress> = fc.record({
  joinedRanks: fc.integer({ min: 0, max: 40 }),
  rejected: fc.oneof(fc.integer({ min: 0, max: 10 }), fc.integer({ min: 0, max: 2 * FLOOD_LIMIT })),
  startArmed: fc.boolean(),
  elapsedMs: fc.integer({ min: 0, max: 25_000 })
})

test("never formed without a quorum; never open past the hard cap; failed only past it or on a flood", () => {
  fc.assert(
    fc.property(rulesArb, progressArb, (rules, progress) => {
      const verdict = joinVerdict(rules, progress)
      if (verdict._tag === "Formed") expect(progress.joinedRanks).toBeGreaterThanOrEqual(rules.minRanks)
      if (verdict._tag === "Open") expect(progress.elapsedMs).toBeLessThan(rules.maxTimeoutMs)
      if (verdict._tag === "Failed") {
        expect(progress.rejected >= FLOOD_LIMIT || progress.elapsedMs >= rules.maxTimeoutMs).toBe(true)
      }
    }),
    { seed: 81, numRuns: 2_000 }
  )
})

test("the target closes the window at once; a manual window forms only on the operator's word", () => {
  fc.assert(
    fc.property(rulesArb, progressArb, (rules, progress) => {
      const verdict = joinVerdict(rules, { ...progress, rejected: 0 })
      if (rules.targetRanks !== undefined && progress.joinedRanks >= rules.targetRanks) expect(verdict._tag).toBe("Formed")
      if (rules.start === "manual" && !progress.startArmed) expect(verdict._tag).not.toBe("Formed")
      if (rules.start === "auto" && progress.joinedRanks >= rules.minRanks && progress.elapsedMs >= rules.timeoutMs) {
        expect(verdict._tag).toBe("Formed")
      }
    }),
    { seed: 82, numRuns: 2_000 }
  )
})

test("the documented cases", () => {
  const rules: JoinRules = { minRanks: 2, targetRanks: 4, timeoutMs: 1_000, maxTimeoutMs: 5_000, start: "auto" }
  const at = (joinedRanks: number, elapsedMs: number, extra: Partial<JoinProgress> = {}) =>
    joinVerdict(rules, { joinedRanks, elapsedMs, rejected: 0, startArmed: false, ...extra })
  expect(at(4, 10)).toEqual({ _tag: "Formed", ranks: 4 })
  expect(at(3, 10)).toEqual({ _tag: "Open" })
  expect(at(3, 1_000)).toEqual({ _tag: "Formed", ranks: 3 })
  expect(at(1, 4_999)).toEqual({ _tag: "Open" })
  expect(at(1, 5_000)).toEqual({ _tag: "Failed", reason: "quorum not met: 1/2 ranks" })
  expect(at(4, 10, { rejected: FLOOD_LIMIT })._tag).toBe("Failed")
  const manual = { ...rules, targetRanks: undefined, start: "manual" as const }
  expect(joinVerdict(manual, { joinedRanks: 4, elapsedMs: 6_000, rejected: 0, startArmed: false })).toEqual({
    _tag: "Failed",
    reason: "operator start not received (POST /start) within 5000 ms"
  })
  expect(joinVerdict(manual, { joinedRanks: 2, elapsedMs: 10, rejected: 0, startArmed: true })).toEqual({ _tag: "Formed", ranks: 2 })
})
