/**
 * What a rank's reported metrics may hold to be shown (src/wire/ReportedMetrics.ts), as a table of inputs and
 * what is kept and dropped, written out by hand: the same rules as the Python client's bounded_metrics
 * (test/python-step-lines.test.ts), which TypeScript ranks (rank/Training.ts) and the launcher
 * (training/Coordinator.ts) apply.
 */
import { describe, expect, test } from "bun:test"
import { boundedMetrics, droppedLine } from "../src/wire/ReportedMetrics.ts"

const sixteen = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`m${i}`, i]))

describe("boundedMetrics", () => {
  const cases: ReadonlyArray<readonly [string, Record<string, unknown>, Record<string, number>, ReadonlyArray<readonly [string, string]>]> = [
    ["all within", { loss: 0.5, val_acc: 1, ["x".repeat(64)]: -2 }, { loss: 0.5, val_acc: 1, ["x".repeat(64)]: -2 }, []],
    ["none", {}, {}, []],
    [
      "not finite, not a number, an empty name, a name of 65 characters",
      { loss: Number.NaN, gain: Number.POSITIVE_INFINITY, low: Number.NEGATIVE_INFINITY, text: "0.5", "": 1, ["y".repeat(65)]: 1, ok: 0 },
      { ok: 0 },
      [
        ["loss", "its value NaN is not a finite number"],
        ["gain", "its value Infinity is not a finite number"],
        ["low", "its value -Infinity is not a finite number"],
        ["text", "its value 0.5 is not a finite number"],
        ["", "its name has 0 characters (1 to 64)"],
        [`${"y".repeat(64)}…`, "its name has 65 characters (1 to 64)"]
      ]
    ],
    [
      "18 names: the first 16 valid ones kept, in order; a bad one does not take a place",
      { bad: Number.NaN, ...sixteen, m16: 16, m17: 17 },
      sixteen,
      [["bad", "its value NaN is not a finite number"], ["m16", "a report shows at most 16 metrics"], ["m17", "a report shows at most 16 metrics"]]
    ]
  ]
  for (const [what, metrics, kept, dropped] of cases) {
    test(what, () => {
      const bounded = boundedMetrics(metrics)
      expect(bounded.kept).toEqual(kept)
      expect(Object.keys(bounded.kept)).toEqual(Object.keys(kept))
      expect(bounded.dropped.map(({ name, why }) => [name, why])).toEqual(dropped.map(([name, why]) => [name, why]))
    })
  }

  test("the warning's words", () => {
    expect(droppedLine("rank 3", { name: "loss", why: "its value NaN is not a finite number" })).toBe(
      'rank 3 reported metric "loss": not shown, its value NaN is not a finite number'
    )
  })
})
