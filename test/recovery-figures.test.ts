/**
 * The recovery figures from a story of events, every number worked out by hand: which deaths count,
 * their times to detect and recover, a restart under a new number, a silent rank restarted, and the
 * effective training ratio over a timeline.
 */
import { describe, expect, test } from "bun:test"
import * as RecoveryFigures from "../src/actors/launcher/RecoveryFigures.ts"

const fold = (events: ReadonlyArray<RecoveryFigures.RecoveryEvent>) => events.reduce(RecoveryFigures.apply, RecoveryFigures.empty)

describe("deaths and their times", () => {
  test("a dropped rank: detected when reported, recovered when its work moved; one without work never recovers", () => {
    const state = fold([
      { event: "rank_lost", at: 1_030, ranks: [2], kind: "signal", diedAt: 1_000 },
      { event: "work_moved", at: 1_045, rank: 2 },
      { event: "rank_lost", at: 5_010, ranks: [3], kind: "heartbeat", rule: "spot", diedAt: 2_010 }
    ])
    expect(state.deaths).toEqual([
      { rank: 2, kind: "signal", rule: null, how: "dropped", diedAt: 1_000, knownAt: 1_030, recoveredAt: 1_045 },
      { rank: 3, kind: "heartbeat", rule: "spot", how: "dropped", diedAt: 2_010, knownAt: 5_010, recoveredAt: null }
    ])
    // 1030 − 1000, 5010 − 2010; recovered: 1045 − 1000 only.
    expect(RecoveryFigures.times(state)).toEqual({ detect: [30, 3_000], recover: [45] })
  })

  test("work moved for a rank that is not open (a second move, another rank) changes nothing", () => {
    const state = fold([
      { event: "rank_lost", at: 100, ranks: [1], diedAt: 90 },
      { event: "work_moved", at: 120, rank: 1 },
      { event: "work_moved", at: 200, rank: 1 },
      { event: "work_moved", at: 210, rank: 7 }
    ])
    expect(state.deaths.map((death) => death.recoveredAt)).toEqual([120])
  })

  test("a restart: recovered when the new incarnation runs user code, under its new number too", () => {
    const state = fold([
      { event: "rank_restarting", at: 2_020, rank: 1, kind: "exit", diedAt: 2_000 },
      { event: "world_grew", at: 2_500, ranks: [4], replaces: 1 },
      { event: "rank_running", at: 2_900, rank: 4 },
      { event: "rank_restarting", at: 3_005, rank: 0, diedAt: 3_000 },
      { event: "rank_running", at: 3_400, rank: 0 }
    ])
    expect(state.deaths.map((death) => [death.rank, death.how, death.recoveredAt])).toEqual([[1, "restarted", 2_900], [0, "restarted", 3_400]])
    expect(RecoveryFigures.times(state)).toEqual({ detect: [20, 5], recover: [900, 400] })
  })

  test("in a training run a restart recovers when its new number enters the cohort, not when it merely runs", () => {
    const state = fold([
      { event: "rank_restarting", at: 1_010, rank: 1, diedAt: 1_000 },
      { event: "world_grew", at: 1_100, ranks: [4], replaces: 1 },
      { event: "rank_running", at: 1_300, rank: 4 },
      { event: "ranks_entered", at: 2_000, ranks: [4] },
      // A second entry of the same number (it cannot happen twice, but must not move the figure).
      { event: "ranks_entered", at: 3_000, ranks: [4] }
    ])
    expect(state.deaths.map((death) => [death.recoveredAt, death.entered])).toEqual([[2_000, true]])
    expect(RecoveryFigures.times(state).recover).toEqual([1_000])
  })

  test("a rank given up for silence and then restarted is one death, carried by the restart", () => {
    const state = fold([
      { event: "rank_lost", at: 31_000, ranks: [2], kind: "heartbeat", diedAt: 1_000 },
      { event: "rank_restarting", at: 31_100, rank: 2, kind: "signal", diedAt: 31_050 },
      { event: "rank_running", at: 32_000, rank: 2 }
    ])
    expect(state.deaths).toEqual([{ rank: 2, kind: "heartbeat", rule: null, how: "restarted", diedAt: 1_000, knownAt: 31_000, recoveredAt: 32_000 }])
  })

  test("a death's moment from a clock ahead of the launcher's is taken as when it was known", () => {
    const state = fold([{ event: "rank_lost", at: 1_000, ranks: [0], diedAt: 1_250 }])
    expect(RecoveryFigures.times(state).detect).toEqual([0])
  })
})

describe("effective training ratio", () => {
  test("full membership counts whole, fewer by their share, before formation nothing", () => {
    // Wall 0..100: formed at 10 with 4 alive; 3 of 4 from 50; run ends at 100.
    // (50 − 10) × 1 + (100 − 50) × 0.75 = 40 + 37.5 = 77.5 → 0.775
    const timeline = [{ at: 10, ranks: 4, alive: 4 }, { at: 50, ranks: 4, alive: 3 }]
    expect(RecoveryFigures.effectiveTrainingRatio(timeline, 0, 100)).toBeCloseTo(0.775, 10)
    // Growth: 6 ranks with 6 alive counts whole again.
    expect(RecoveryFigures.effectiveTrainingRatio([...timeline, { at: 80, ranks: 6, alive: 6 }], 0, 100)).toBeCloseTo((40 + 30 * 0.75 + 20) / 100, 10)
    expect(RecoveryFigures.effectiveTrainingRatio([], 0, 100)).toBe(0)
    // A restarted rank of the 4 is absent from its death at 20 to its recovery at 60: 40 × 1/4 = 10 less.
    const restart = fold([{ event: "rank_restarting", at: 21, rank: 0, diedAt: 20 }, { event: "ranks_entered", at: 60, ranks: [0] }])
    expect(RecoveryFigures.effectiveTrainingRatio([{ at: 10, ranks: 4, alive: 4 }], 0, 100, restart)).toBeCloseTo((90 - 10) / 100, 10)
    // Not recovered by the end: absent to the end (100 − 20 = 80, a quarter of it).
    const never = fold([{ event: "rank_restarting", at: 21, rank: 0, diedAt: 20 }])
    expect(RecoveryFigures.effectiveTrainingRatio([{ at: 10, ranks: 4, alive: 4 }], 0, 100, never)).toBeCloseTo((90 - 20) / 100, 10)
    expect(RecoveryFigures.effectiveTrainingRatio(timeline, 100, 100)).toBeUndefined()
  })

  test("the end-of-run line", () => {
    const state = fold([
      { event: "rank_lost", at: 1_009, ranks: [1], diedAt: 1_000 },
      { event: "work_moved", at: 1_022, rank: 1 },
      { event: "rank_lost", at: 2_012, ranks: [2], diedAt: 2_000 },
      { event: "work_moved", at: 2_025, rank: 2 }
    ])
    expect(RecoveryFigures.describeFigures(state, 0.974)).toBe("2 death(s): detected in 9/12 ms, recovered in 22/25 ms; effective training 97.4%")
    expect(RecoveryFigures.describeFigures(fold([{ event: "rank_lost", at: 5, ranks: [0], diedAt: 1 }]), undefined)).toBe("1 death(s): detected in 4 ms, none recovered")
    expect(RecoveryFigures.describeFigures(RecoveryFigures.empty, 0.5)).toBe("effective training 50.0%")
  })
})

describe("whose death a later event closes", () => {
  test("work moved closes the dropped death of that rank only: not another rank's, not a restarted one", () => {
    const state = fold([
      { event: "rank_lost", at: 10, ranks: [1], kind: "exit", rule: "r", diedAt: 5 },
      { event: "rank_restarting", at: 20, rank: 2, diedAt: 15 },
      { event: "rank_lost", at: 30, ranks: [3], diedAt: 25 },
      { event: "work_moved", at: 40, rank: 2 },
      { event: "work_moved", at: 50, rank: 3 }
    ])
    expect(state.deaths.map((death) => [death.rank, death.kind, death.rule, death.recoveredAt])).toEqual([[1, "exit", "r", null], [2, null, null, null], [3, null, null, 50]])
  })

  test("a rank's newest death is the open one: an older recovered death of the same rank is left as it was", () => {
    const state = fold([
      { event: "rank_lost", at: 10, ranks: [1], diedAt: 5 },
      { event: "work_moved", at: 12, rank: 1 },
      { event: "rank_lost", at: 30, ranks: [1], diedAt: 25 },
      { event: "work_moved", at: 40, rank: 1 }
    ])
    expect(state.deaths.map((death) => death.recoveredAt)).toEqual([12, 40])
  })

  test("a restart's new number is told only by a world_grew that replaces; running or entering closes only restarted deaths", () => {
    const state = fold([
      { event: "rank_restarting", at: 10, rank: 1, diedAt: 5 },
      { event: "world_grew", at: 11, ranks: [5] },
      { event: "world_grew", at: 12, ranks: [], replaces: 1 },
      { event: "rank_lost", at: 13, ranks: [2], diedAt: 13 },
      { event: "rank_running", at: 14, rank: 5 },
      { event: "rank_running", at: 15, rank: 2 },
      { event: "ranks_entered", at: 16, ranks: [5, 2] }
    ])
    expect(state.replacing).toEqual({})
    expect(state.deaths.map((death) => [death.rank, death.recoveredAt])).toEqual([[1, null], [2, null]])
    const entered = fold([
      { event: "rank_restarting", at: 10, rank: 1, diedAt: 5 },
      { event: "rank_restarting", at: 20, rank: 3, diedAt: 18 },
      { event: "ranks_entered", at: 30, ranks: [3] }
    ])
    expect(entered.deaths.map((death) => [death.rank, death.recoveredAt])).toEqual([[1, null], [3, 30]])
  })

  test("stretches of no length, of no ranks, or after the end count nothing", () => {
    expect(RecoveryFigures.effectiveTrainingRatio([{ at: 10, ranks: 0, alive: 0 }], 0, 100)).toBe(0)
    expect(RecoveryFigures.effectiveTrainingRatio([{ at: 10, ranks: 4, alive: 4 }, { at: 10, ranks: 4, alive: 2 }], 0, 100)).toBeCloseTo(0.45, 10)
    expect(RecoveryFigures.effectiveTrainingRatio([{ at: 10, ranks: 4, alive: 4 }, { at: 200, ranks: 4, alive: 0 }], 0, 100)).toBeCloseTo(0.9, 10)
    // More alive than ranks (a restart's new number counted before its old one is) is never more than whole.
    expect(RecoveryFigures.effectiveTrainingRatio([{ at: 0, ranks: 4, alive: 5 }], 0, 100)).toBe(1)
  })

  test("no deaths and no ratio: nothing to say", () => {
    expect(RecoveryFigures.describeFigures(RecoveryFigures.empty, undefined)).toBeUndefined()
  })
})

test("the deaths recovered between two states: each once, a restart again when it enters", () => {
  const before = fold([{ event: "rank_lost", at: 10, ranks: [1], diedAt: 5 }, { event: "rank_restarting", at: 20, rank: 2, diedAt: 15 }])
  const moved = RecoveryFigures.apply(before, { event: "work_moved", at: 30, rank: 1 })
  expect(RecoveryFigures.recoveredSince(before, moved).map((death) => [death.rank, death.recoveredAt])).toEqual([[1, 30]])
  expect(RecoveryFigures.recoveredSince(moved, moved)).toEqual([])
  const running = RecoveryFigures.apply(moved, { event: "rank_running", at: 40, rank: 2 })
  const entered = RecoveryFigures.apply(running, { event: "ranks_entered", at: 50, ranks: [2] })
  expect(RecoveryFigures.recoveredSince(moved, running).map((death) => [death.rank, death.recoveredAt])).toEqual([[2, 40]])
  expect(RecoveryFigures.recoveredSince(running, entered).map((death) => [death.rank, death.recoveredAt])).toEqual([[2, 50]])
})
