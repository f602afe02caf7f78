/**
 * The join window's verdict, checked against oracles that do not call it:
 *
 * 1. a literal table of the documented cases and every boundary a mutation
 *    would move (the window's end, the hard cap, the quorum, the target, the
 *    flood guard), each row worked out by hand from the rules in
 *    `joinVerdict.ts`'s header;
 * 2. a reference model written in the test, by phase of the window and then
 *    by start mode (the implementation is one ordered chain of ifs), that the
 *    function must match exactly, reasons included, over random rules and
 *    progress;
 * 3. invariants that hold whatever the details (never formed without a
 *    quorum, never open past the cap, ...).
 *
 * The flood limit is written here as the number 1024, not read from the
 * module, and so are the eight hosts a failed quorum names: a changed
 * constant must fail these tests, not move with them.
 */
import { describe, expect, test } from "bun:test"
import * as fc from "fast-check"
import { joinVerdict, type JoinProgress, type JoinRules, type JoinVerdict } from "../src/launcher/front/joinVerdict.ts"
import type { StartMode } from "../src/config/ClusterConfig.ts"

/** The flood guard: this many rejected joins fail the window. */
const FLOOD = 1024

const seeded = (seed: number, numRuns: number) => ({ seed, numRuns, includeErrorInReport: true })

const open: JoinVerdict = { _tag: "Open" }
const formed = (ranks: number): JoinVerdict => ({ _tag: "Formed", ranks })
/** The quorum's failure, naming at most eight of the hosts that never joined (written out here, not read from the module). */
const quorumNotMet = (joined: number, min: number, missing: ReadonlyArray<string> = []): JoinVerdict => {
  const named = missing.length === 0 ? "" : ` (never joined: ${missing.slice(0, 8).join(", ")}${missing.length > 8 ? ` and ${missing.length - 8} more` : ""})`
  return { _tag: "Failed", reason: `quorum not met: ${joined}/${min} ranks${named}` }
}
const noOperator = (capMs: number): JoinVerdict => ({
  _tag: "Failed",
  reason: `operator start not received (POST /start) within ${capMs} ms`
})
const flood = (rejected: number): JoinVerdict => ({
  _tag: "Failed",
  reason: `${rejected} joins were rejected: refusing to go on (flood guard)`
})

// ---------------------------------------------------------------------------
// 1. Literal table
// ---------------------------------------------------------------------------

/** Quorum 2, target 4, window 1 s, hard cap 5 s: the numbers every row below is worked out from. */
const rulesOf = (start: StartMode, withTarget: boolean): JoinRules => ({
  minRanks: 2,
  targetRanks: withTarget ? 4 : undefined,
  timeoutMs: 1_000,
  maxTimeoutMs: 5_000,
  start
})

interface Row {
  readonly why: string
  readonly start: StartMode
  readonly target?: "none"
  readonly joined: number
  readonly elapsed: number
  readonly armed?: true
  readonly rejected?: number
  readonly expected: JoinVerdict
}

const rows: ReadonlyArray<Row> = [
  // auto: the target closes the window at once; otherwise the window runs out, then the quorum decides.
  { why: "target reached before the window ends", start: "auto", joined: 4, elapsed: 0, expected: formed(4) },
  { why: "more than the target", start: "auto", joined: 5, elapsed: 10, expected: formed(5) },
  { why: "one short of the target: a quorum alone never closes the window early", start: "auto", joined: 3, elapsed: 999, expected: open },
  { why: "the window ends at exactly timeoutMs (elapsed < timeout is open)", start: "auto", joined: 3, elapsed: 1_000, expected: formed(3) },
  { why: "exactly the quorum, once the window ended", start: "auto", joined: 2, elapsed: 1_000, expected: formed(2) },
  { why: "one short of the quorum after the window: wait for the cap", start: "auto", joined: 1, elapsed: 1_000, expected: open },
  { why: "one ms before the cap", start: "auto", joined: 1, elapsed: 4_999, expected: open },
  { why: "the cap is reached at exactly maxTimeoutMs", start: "auto", joined: 1, elapsed: 5_000, expected: quorumNotMet(1, 2) },
  { why: "a quorum at the cap still forms", start: "auto", joined: 2, elapsed: 5_000, expected: formed(2) },
  { why: "nobody came", start: "auto", joined: 0, elapsed: 20_000, expected: quorumNotMet(0, 2) },
  { why: "auto ignores an armed start", start: "auto", joined: 3, elapsed: 10, armed: true, expected: open },
  { why: "no target: many ranks still wait out the window", start: "auto", target: "none", joined: 40, elapsed: 999, expected: open },
  { why: "no target: the window's end forms", start: "auto", target: "none", joined: 40, elapsed: 1_000, expected: formed(40) },
  // The flood guard: 1023 rejected joins are tolerated, 1024 fail, whatever else holds.
  { why: "one rejected join under the flood limit", start: "auto", joined: 4, elapsed: 10, rejected: 1_023, expected: formed(4) },
  { why: "the flood limit fails even a reached target", start: "auto", joined: 4, elapsed: 10, rejected: 1_024, expected: flood(1_024) },
  { why: "the flood reason names the count", start: "hybrid", joined: 2, elapsed: 10, armed: true, rejected: 5_000, expected: flood(5_000) },
  { why: "a flood fails a manual window before the cap", start: "manual", joined: 0, elapsed: 0, rejected: 1_024, expected: flood(1_024) },
  // hybrid: the operator's start forms as soon as the quorum is in; otherwise as auto.
  { why: "hybrid, armed, exactly the quorum", start: "hybrid", joined: 2, elapsed: 10, armed: true, expected: formed(2) },
  { why: "hybrid, armed, one short of the quorum", start: "hybrid", joined: 1, elapsed: 10, armed: true, expected: open },
  { why: "hybrid, not armed, quorum in the window", start: "hybrid", joined: 3, elapsed: 999, expected: open },
  { why: "hybrid, not armed, the window ended", start: "hybrid", joined: 3, elapsed: 1_000, expected: formed(3) },
  { why: "hybrid, the target without the operator", start: "hybrid", joined: 4, elapsed: 10, expected: formed(4) },
  { why: "hybrid, armed but no quorum at the cap", start: "hybrid", joined: 1, elapsed: 5_000, armed: true, expected: quorumNotMet(1, 2) },
  // manual: only the operator forms; a target is ignored; the cap fails it.
  { why: "manual ignores a reached target", start: "manual", joined: 4, elapsed: 10, expected: open },
  { why: "manual does not form when the window ends", start: "manual", joined: 4, elapsed: 1_000, expected: open },
  { why: "manual, one ms before the cap", start: "manual", joined: 4, elapsed: 4_999, expected: open },
  { why: "manual, quorum, no start by the cap", start: "manual", joined: 4, elapsed: 5_000, expected: noOperator(5_000) },
  { why: "manual, exactly the quorum, no start by the cap", start: "manual", joined: 2, elapsed: 5_000, expected: noOperator(5_000) },
  { why: "manual, no quorum by the cap", start: "manual", joined: 1, elapsed: 5_000, expected: quorumNotMet(1, 2) },
  { why: "manual, armed, exactly the quorum", start: "manual", joined: 2, elapsed: 10, armed: true, expected: formed(2) },
  { why: "manual, armed, one short", start: "manual", joined: 1, elapsed: 10, armed: true, expected: open },
  { why: "manual, armed with a quorum past the cap: the start is checked first", start: "manual", joined: 2, elapsed: 6_000, armed: true, expected: formed(2) }
]

describe("joinVerdict: the table", () => {
  for (const row of rows) {
    test(`${row.start}, ${row.joined} joined at ${row.elapsed} ms${row.armed ? ", armed" : ""}: ${row.why}`, () => {
      const rules = rulesOf(row.start, row.target !== "none")
      const progress: JoinProgress = {
        joinedRanks: row.joined,
        elapsedMs: row.elapsed,
        startArmed: row.armed ?? false,
        rejected: row.rejected ?? 0
      }
      expect(joinVerdict(rules, progress)).toEqual(row.expected)
    })
  }

  test("the reasons carry the rules' own numbers, not the table's", () => {
    const rules: JoinRules = { minRanks: 7, targetRanks: undefined, timeoutMs: 30, maxTimeoutMs: 123, start: "manual" }
    const at = (joinedRanks: number) => joinVerdict(rules, { joinedRanks, elapsedMs: 123, rejected: 0, startArmed: false })
    expect(at(3)).toEqual(quorumNotMet(3, 7))
    expect(at(7)).toEqual(noOperator(123))
  })

  test("a failed quorum names the hosts that never joined: all of up to eight, then eight and a count", () => {
    const rules: JoinRules = { minRanks: 4, targetRanks: undefined, timeoutMs: 1_000, maxTimeoutMs: 5_000, start: "auto" }
    const at = (missing: ReadonlyArray<string> | undefined, elapsedMs = 5_000) => joinVerdict(rules, { joinedRanks: 2, elapsedMs, rejected: 0, startArmed: false, missing })
    expect(at(["gpu-b"])).toEqual({ _tag: "Failed", reason: "quorum not met: 2/4 ranks (never joined: gpu-b)" })
    expect(at(["gpu-b", "gpu-c"])).toEqual({ _tag: "Failed", reason: "quorum not met: 2/4 ranks (never joined: gpu-b, gpu-c)" })
    const nine = ["h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8", "h9"]
    expect(at(nine.slice(0, 8))).toEqual({ _tag: "Failed", reason: "quorum not met: 2/4 ranks (never joined: h1, h2, h3, h4, h5, h6, h7, h8)" })
    expect(at(nine)).toEqual({ _tag: "Failed", reason: "quorum not met: 2/4 ranks (never joined: h1, h2, h3, h4, h5, h6, h7, h8 and 1 more)" })
    expect(at([...nine, "h10", "h11"])).toEqual({ _tag: "Failed", reason: "quorum not met: 2/4 ranks (never joined: h1, h2, h3, h4, h5, h6, h7, h8 and 3 more)" })
    // Nobody missing (every host joined, short of devices), or not said: the count alone.
    expect(at([])).toEqual({ _tag: "Failed", reason: "quorum not met: 2/4 ranks" })
    expect(at(undefined)).toEqual({ _tag: "Failed", reason: "quorum not met: 2/4 ranks" })
    // Missing hosts change nothing before the cap, nor for a window that forms, nor for a flood or a manual start.
    expect(at(["gpu-b"], 4_999)).toEqual({ _tag: "Open" })
    expect(joinVerdict(rules, { joinedRanks: 4, elapsedMs: 1_000, rejected: 0, startArmed: false, missing: ["gpu-b"] })).toEqual({ _tag: "Formed", ranks: 4 })
    expect(joinVerdict(rules, { joinedRanks: 2, elapsedMs: 10, rejected: 1_024, startArmed: false, missing: ["gpu-b"] }))
      .toEqual({ _tag: "Failed", reason: "1024 joins were rejected: refusing to go on (flood guard)" })
    expect(joinVerdict({ ...rules, start: "manual" }, { joinedRanks: 4, elapsedMs: 5_000, rejected: 0, startArmed: false, missing: ["gpu-b"] }))
      .toEqual({ _tag: "Failed", reason: "operator start not received (POST /start) within 5000 ms" })
  })

  test("a host that counts its devices only when it joins (devices: all elsewhere): every declared host is the quorum and the target", () => {
    // 2 ranks known elsewhere plus one unresolved host bringing at least one: min 3, no rank target.
    const rules: JoinRules = { minRanks: 3, targetRanks: undefined, timeoutMs: 1_000, maxTimeoutMs: 5_000, start: "auto", everyHostForQuorum: true, everyHostForTarget: true }
    const at = (joinedRanks: number, missing: ReadonlyArray<string>, elapsedMs: number) => joinVerdict(rules, { joinedRanks, elapsedMs, rejected: 0, startArmed: false, missing })
    // Every host in: formed at once, whatever the unresolved one brought.
    expect(at(10, [], 5)).toEqual({ _tag: "Formed", ranks: 10 })
    expect(at(3, [], 5)).toEqual({ _tag: "Formed", ranks: 3 })
    // Enough ranks but a host missing: neither target nor quorum, open through the window and its grace.
    expect(at(10, ["gpu-b"], 5)).toEqual({ _tag: "Open" })
    expect(at(10, ["gpu-b"], 4_999)).toEqual({ _tag: "Open" })
    expect(at(10, ["gpu-b"], 5_000)).toEqual({ _tag: "Failed", reason: "quorum not met: every declared host (10 rank(s) joined) (never joined: gpu-b)" })
    // Under a manual start the quorum is every host too, and only the operator's word forms.
    const manual: JoinRules = { ...rules, start: "manual" }
    expect(joinVerdict(manual, { joinedRanks: 10, elapsedMs: 5, rejected: 0, startArmed: false, missing: [] })).toEqual({ _tag: "Open" })
    expect(joinVerdict(manual, { joinedRanks: 10, elapsedMs: 5, rejected: 0, startArmed: true, missing: ["gpu-b"] })).toEqual({ _tag: "Open" })
    expect(joinVerdict(manual, { joinedRanks: 10, elapsedMs: 5, rejected: 0, startArmed: true, missing: [] })).toEqual({ _tag: "Formed", ranks: 10 })
    // A min_ranks the file gives stands alone: the target is still every host, the quorum forms after the window without them.
    const withMin: JoinRules = { ...rules, minRanks: 2, everyHostForQuorum: false }
    expect(joinVerdict(withMin, { joinedRanks: 2, elapsedMs: 5, rejected: 0, startArmed: false, missing: ["gpu-b"] })).toEqual({ _tag: "Open" })
    expect(joinVerdict(withMin, { joinedRanks: 2, elapsedMs: 1_000, rejected: 0, startArmed: false, missing: ["gpu-b"] })).toEqual({ _tag: "Formed", ranks: 2 })
  })

  test("a flood limit of the rules' own (the gate's) replaces 1024: at it the window fails, one below it stays open", () => {
    const rules: JoinRules = { floodLimit: 3, minRanks: 2, targetRanks: undefined, timeoutMs: 1_000, maxTimeoutMs: 2_000, start: "auto" }
    const rejected = (count: number) => joinVerdict(rules, { joinedRanks: 0, elapsedMs: 10, rejected: count, startArmed: false })
    expect(rejected(2)).toEqual({ _tag: "Open" })
    expect(rejected(3)).toEqual({ _tag: "Failed", reason: "3 joins were rejected: refusing to go on (flood guard)" })
  })
})

// ---------------------------------------------------------------------------
// 2. A reference model
// ---------------------------------------------------------------------------

/**
 * The rules restated by phase of the window, then by start mode:
 * - `window`: before timeoutMs; `grace`: from then until the hard cap; `closed`: from the cap on.
 * - auto: the target forms at any time; in the window it is open; after it a quorum forms, and without
 *   one it is open until the cap, then failed.
 * - hybrid: as auto, and an armed start with a quorum forms at any time.
 * - manual: only an armed start with a quorum forms (a target means nothing); open until the cap, then
 *   failed, naming the operator if the quorum was in.
 */
const referenceVerdict = (rules: JoinRules, progress: JoinProgress): JoinVerdict => {
  if (progress.rejected >= FLOOD) return flood(progress.rejected)
  const joined = progress.joinedRanks
  const hasQuorum = joined >= rules.minRanks
  const hitTarget = rules.targetRanks !== undefined && joined >= rules.targetRanks
  const phase = progress.elapsedMs < rules.timeoutMs ? "window" : progress.elapsedMs < rules.maxTimeoutMs ? "grace" : "closed"
  const operatorSaidGo = progress.startArmed && hasQuorum
  switch (rules.start) {
    case "manual":
      if (operatorSaidGo) return formed(joined)
      if (phase !== "closed") return open
      return hasQuorum ? noOperator(rules.maxTimeoutMs) : quorumNotMet(joined, rules.minRanks, progress.missing)
    case "hybrid":
    case "auto":
      if ((rules.start === "hybrid" && operatorSaidGo) || hitTarget) return formed(joined)
      if (phase === "window") return open
      if (hasQuorum) return formed(joined)
      return phase === "grace" ? open : quorumNotMet(joined, rules.minRanks, progress.missing)
  }
}

const startArb = fc.constantFrom<StartMode>("auto", "manual", "hybrid")

/**
 * Rules as a cluster file gives them (cap at or after the window), and now and then odd ones the function
 * must still answer consistently: a manual window with a target, a cap before the window's end.
 */
const rulesArb: fc.Arbitrary<JoinRules> = fc
  .record({
    minRanks: fc.integer({ min: 1, max: 16 }),
    extra: fc.option(fc.integer({ min: 0, max: 16 }), { nil: undefined }),
    timeoutMs: fc.integer({ min: 1, max: 10_000 }),
    capExtra: fc.integer({ min: -2_000, max: 10_000 }),
    start: startArb
  })
  .map(({ capExtra, extra, minRanks, start, timeoutMs }) => ({
    minRanks,
    targetRanks: extra === undefined ? undefined : minRanks + extra,
    timeoutMs,
    maxTimeoutMs: Math.max(0, timeoutMs + capExtra),
    start
  }))

/** Progress near the rules' boundaries as often as not: the off-by-ones live there. */
const progressArb = (rules: JoinRules): fc.Arbitrary<JoinProgress> => {
  const near = (at: number) => fc.integer({ min: Math.max(0, at - 1), max: at + 1 })
  return fc.record({
    joinedRanks: fc.oneof(fc.integer({ min: 0, max: 40 }), near(rules.minRanks), near(rules.targetRanks ?? rules.minRanks)),
    rejected: fc.oneof(fc.integer({ min: 0, max: 10 }), near(FLOOD), fc.integer({ min: 0, max: 2 * FLOOD })),
    startArmed: fc.boolean(),
    elapsedMs: fc.oneof(fc.integer({ min: 0, max: 25_000 }), near(rules.timeoutMs), near(rules.maxTimeoutMs)),
    // Around the eight a reason names.
    missing: fc.option(fc.array(fc.constantFrom("a", "b", "gpu-c", "gpu-d", "h5", "h6", "h7", "h8", "h9", "node-10", "n11"), { maxLength: 11 }), { nil: undefined })
  })
}

const caseArb = rulesArb.chain((rules) => progressArb(rules).map((progress) => ({ rules, progress })))

test("joinVerdict agrees with the reference model, reasons included", () => {
  fc.assert(
    fc.property(caseArb, ({ progress, rules }) => {
      expect(joinVerdict(rules, progress)).toEqual(referenceVerdict(rules, progress))
    }),
    seeded(83, 5_000)
  )
})

// ---------------------------------------------------------------------------
// 3. Invariants
// ---------------------------------------------------------------------------

test("never formed without a quorum; never open past the hard cap; failed only past it or on a flood", () => {
  fc.assert(
    fc.property(caseArb, ({ progress, rules }) => {
      const verdict = joinVerdict(rules, progress)
      if (verdict._tag === "Formed") {
        expect(progress.joinedRanks).toBeGreaterThanOrEqual(rules.minRanks)
        expect(verdict.ranks).toBe(progress.joinedRanks)
      }
      if (verdict._tag === "Open") expect(progress.elapsedMs).toBeLessThan(Math.max(rules.timeoutMs, rules.maxTimeoutMs))
      if (verdict._tag === "Failed") {
        expect(progress.rejected >= FLOOD || progress.elapsedMs >= Math.max(rules.timeoutMs, rules.maxTimeoutMs)).toBe(true)
      }
    }),
    seeded(81, 2_000)
  )
})

test("the target closes the window at once; a manual window forms only on the operator's word", () => {
  fc.assert(
    fc.property(caseArb, ({ progress, rules }) => {
      const verdict = joinVerdict(rules, { ...progress, rejected: 0 })
      if (rules.start !== "manual" && rules.targetRanks !== undefined && progress.joinedRanks >= rules.targetRanks) {
        expect(verdict._tag).toBe("Formed")
      }
      if (rules.start === "manual" && !progress.startArmed) expect(verdict._tag).not.toBe("Formed")
      if (rules.start === "auto" && progress.joinedRanks >= rules.minRanks && progress.elapsedMs >= rules.timeoutMs) {
        expect(verdict._tag).toBe("Formed")
      }
    }),
    seeded(82, 2_000)
  )
})
