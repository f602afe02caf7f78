/**
 * The recovery figures from a story of events, every number worked out by hand: which deaths count,
 * their times to detect and recover, a restart under a new number, a silent rank restarted, and the
 * effective training ratio over the world's seats. Then when the survivors' next counted step is
 * (SurvivorsStep), on the pure coordinator's own steps. recovery-figures.e2e.test.ts has a real run.
 */
import { describe, expect, test } from "bun:test"
import { coordinate, CoordinatorEvent, type CoordinatorState, initialState } from "../src/launcher/training/coordinate.ts"
import * as RecoveryFigures from "../src/launcher/view/RecoveryFigures.ts"
import * as SurvivorsStep from "../src/launcher/training/SurvivorsStep.ts"
import { Attach, Progress } from "../src/wire/messages/CoordinatorMessages.ts"

const fold = (events: ReadonlyArray<RecoveryFigures.RecoveryEvent>) => events.reduce(RecoveryFigures.apply, RecoveryFigures.empty)
const formed = (world: number, at: number): RecoveryFigures.RecoveryEvent => ({ event: "world_formed", at, world })
const ettr = (events: ReadonlyArray<RecoveryFigures.RecoveryEvent>, startedAt: number, endAt: number) =>
  RecoveryFigures.effectiveTrainingRatio(fold(events), startedAt, endAt)

describe("deaths and their times", () => {
  test("a dropped rank: detected when reported, recovered at the survivors' next counted step; one they never step after never recovers", () => {
    const state = fold([
      { event: "rank_lost", at: 1_030, ranks: [2], kind: "signal", diedAt: 1_000 },
      { event: "survivors_stepped", at: 1_245, ranks: [2] },
      { event: "rank_lost", at: 5_010, ranks: [3], kind: "heartbeat", rule: "spot", diedAt: 2_010 }
    ])
    expect(state.deaths).toEqual([
      { rank: 2, kind: "signal", rule: null, how: "dropped", diedAt: 1_000, knownAt: 1_030, recoveredAt: 1_245 },
      { rank: 3, kind: "heartbeat", rule: "spot", how: "dropped", diedAt: 2_010, knownAt: 5_010, recoveredAt: null }
    ])
    // 1030 − 1000, 5010 − 2010; recovered: 1245 − 1000 only.
    expect(RecoveryFigures.times(state)).toEqual({ detect: [30, 3_000], recover: [245] })
  })

  test("a step after a death already recovered, or after another rank's, changes nothing; one step closes every death it follows", () => {
    const state = fold([
      { event: "rank_lost", at: 100, ranks: [1], diedAt: 90 },
      { event: "survivors_stepped", at: 120, ranks: [1] },
      { event: "survivors_stepped", at: 200, ranks: [1] },
      { event: "survivors_stepped", at: 210, ranks: [7] }
    ])
    expect(state.deaths.map((death) => death.recoveredAt)).toEqual([120])
    // Two deaths before the survivors step again: the one step is both recoveries.
    const both = fold([
      { event: "rank_lost", at: 100, ranks: [1], diedAt: 95 },
      { event: "rank_lost", at: 130, ranks: [3], diedAt: 128 },
      { event: "survivors_stepped", at: 400, ranks: [1, 3] }
    ])
    expect(RecoveryFigures.times(both).recover).toEqual([305, 272])
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
    // Wall 0..100: formed at 10 with 4 seats; 3 of 4 at work from 50; run ends at 100.
    // (50 − 10) × 1 + (100 − 50) × 0.75 = 40 + 37.5 = 77.5 → 0.775
    const dropped = [formed(4, 10), { event: "rank_lost", at: 50, ranks: [3], diedAt: 45 }] as const
    expect(ettr(dropped, 0, 100)).toBeCloseTo(0.775, 10)
    // Growth by 2 at 80: 5 of 6 seats at work: 40 + 30 × 0.75 + 20 × 5/6.
    expect(ettr([...dropped, { event: "world_grew", at: 80, ranks: [4, 5] }], 0, 100)).toBeCloseTo((40 + 22.5 + 20 * 5 / 6) / 100, 10)
    expect(ettr([], 0, 100)).toBe(0)
    // A restarted rank of the 4 is absent from its death at 20 to its recovery at 60: 40 × 1/4 = 10 less.
    const restart = [formed(4, 10), { event: "rank_restarting", at: 21, rank: 0, diedAt: 20 }, { event: "ranks_entered", at: 60, ranks: [0] }] as const
    expect(ettr(restart, 0, 100)).toBeCloseTo((90 - 10) / 100, 10)
    // Not recovered by the end: absent to the end (100 − 20 = 80, a quarter of it).
    expect(ettr([formed(4, 10), { event: "rank_restarting", at: 21, rank: 0, diedAt: 20 }], 0, 100)).toBeCloseTo((90 - 20) / 100, 10)
    expect(ettr(dropped, 100, 100)).toBeUndefined()
  })

  test("a restart costs its share of the world it happens in, and a seat restarted under a new number is one seat", () => {
    // 4 form at 0, 2 join at 10, rank 0 restarts from 20 and trains again at 60: 40 ms of one seat in 6.
    expect(ettr([
      formed(4, 0),
      { event: "world_grew", at: 10, ranks: [4, 5] },
      { event: "rank_restarting", at: 20, rank: 0, diedAt: 20 },
      { event: "rank_running", at: 60, rank: 0 }
    ], 0, 100)).toBeCloseTo((100 - 40 / 6) / 100, 10)
    // 1 forms at 0, 2 join at 1, ranks 1 and 2 restart at 10 and never recover: 1 of 3 seats at work from 10.
    // (Weighting each by the world at formation, 1/1, once took the figure below zero and said 0.)
    expect(ettr([
      formed(1, 0),
      { event: "world_grew", at: 1, ranks: [1, 2] },
      { event: "rank_restarting", at: 10, rank: 1, diedAt: 10 },
      { event: "rank_restarting", at: 10, rank: 2, diedAt: 10 }
    ], 0, 100)).toBeCloseTo((10 + 90 / 3) / 100, 10)
    // 4 form; rank 1 restarts at 10, becomes rank 4 at 20 and enters at 40; rank 2 is dropped at 50: the old
    // number 1 is no seat of its own. 30 ms of one seat in 4 away, then 50 ms of one seat in 4 lost.
    expect(ettr([
      formed(4, 0),
      { event: "rank_restarting", at: 10, rank: 1, diedAt: 10 },
      { event: "world_grew", at: 20, ranks: [4], replaces: 1 },
      { event: "ranks_entered", at: 40, ranks: [4] },
      { event: "rank_lost", at: 50, ranks: [2], diedAt: 50 }
    ], 0, 100)).toBeCloseTo((100 - 30 / 4 - 50 / 4) / 100, 10)
  })

  test("a rank given up for silence and then restarted is one absence, from its last beat to its recovery", () => {
    // Rank 2 of 4 silent from 10, given up at 30, restarted at 35, running again at 50: away 10..50 only.
    expect(ettr([
      formed(4, 0),
      { event: "rank_lost", at: 30, ranks: [2], kind: "heartbeat", diedAt: 10 },
      { event: "rank_restarting", at: 35, rank: 2, diedAt: 30 },
      { event: "rank_running", at: 50, rank: 2 }
    ], 0, 100)).toBeCloseTo((100 - 40 / 4) / 100, 10)
  })

  test("formation stays counted in a long run, and growth in its own ms adds to it", () => {
    // 1,000 form at 0; 300 are dropped one per ms from 500 (the silence path says each on its own).
    const losses = Array.from({ length: 300 }, (_, n): RecoveryFigures.RecoveryEvent => ({ event: "rank_lost", at: 500 + n, ranks: [n], diedAt: 500 + n }))
    // 500 whole, then 300 ms losing one per ms (Σ (1000 − k)/1000 for k = 1..300), then 200 at 0.7.
    const expected = (500 + (300 * 1_000 - (300 * 301) / 2) / 1_000 + 200 * 0.7) / 1_000
    expect(ettr([formed(1_000, 0), ...losses], 0, 1_000)).toBeCloseTo(expected, 10)
    // 2 form at 10 and 2 join in the same ms: 4 seats, one dropped at 60: 50 whole, 40 at 3/4.
    expect(ettr([formed(2, 10), { event: "world_grew", at: 10, ranks: [2, 3] }, { event: "rank_lost", at: 60, ranks: [0], diedAt: 60 }], 0, 100))
      .toBeCloseTo((50 + 40 * 0.75) / 100, 10)
  })

  test("the end-of-run line", () => {
    const state = fold([
      { event: "rank_lost", at: 1_009, ranks: [1], diedAt: 1_000 },
      { event: "survivors_stepped", at: 1_022, ranks: [1] },
      { event: "rank_lost", at: 2_012, ranks: [2], diedAt: 2_000 },
      { event: "survivors_stepped", at: 2_025, ranks: [2] }
    ])
    expect(RecoveryFigures.describeFigures(state, 0.974)).toBe("2 death(s): detected in 9/12 ms, recovered in 22/25 ms; effective training 97.4%")
    expect(RecoveryFigures.describeFigures(fold([{ event: "rank_lost", at: 5, ranks: [0], diedAt: 1 }]), undefined)).toBe("1 death(s): detected in 4 ms, none recovered")
    expect(RecoveryFigures.describeFigures(RecoveryFigures.empty, 0.5)).toBe("effective training 50.0%")
    // A failed run's figures say they cover the time before the failure.
    expect(RecoveryFigures.describeFigures(state, 0.974, true)).toBe(
      "2 death(s) before the run failed: detected in 9/12 ms, recovered in 22/25 ms; effective training 97.4% until the run failed"
    )
    expect(RecoveryFigures.describeFigures(RecoveryFigures.empty, 0.5, true)).toBe("effective training 50.0% until the run failed")
  })
})

describe("whose death a later event closes", () => {
  test("the survivors' step closes the dropped deaths it names only: not another rank's, not a restarted one", () => {
    const state = fold([
      { event: "rank_lost", at: 10, ranks: [1], kind: "exit", rule: "r", diedAt: 5 },
      { event: "rank_restarting", at: 20, rank: 2, diedAt: 15 },
      { event: "rank_lost", at: 30, ranks: [3], diedAt: 25 },
      { event: "survivors_stepped", at: 40, ranks: [2] },
      { event: "survivors_stepped", at: 50, ranks: [3] }
    ])
    expect(state.deaths.map((death) => [death.rank, death.kind, death.rule, death.recoveredAt])).toEqual([[1, "exit", "r", null], [2, null, null, null], [3, null, null, 50]])
  })

  test("a rank's newest death is the open one: an older recovered death of the same rank is left as it was", () => {
    const state = fold([
      { event: "rank_lost", at: 10, ranks: [1], diedAt: 5 },
      { event: "survivors_stepped", at: 12, ranks: [1] },
      { event: "rank_lost", at: 30, ranks: [1], diedAt: 25 },
      { event: "survivors_stepped", at: 40, ranks: [1] }
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

  test("stretches of no length, of no seats, or after the end count nothing", () => {
    expect(ettr([formed(0, 10)], 0, 100)).toBe(0)
    // A state from a launcher that kept no seats: nothing counted, not a failure.
    expect(RecoveryFigures.effectiveTrainingRatio({ deaths: [], replacing: {} }, 0, 100)).toBe(0)
    // A loss in the ms of formation: 2 of 4 dropped at 10: 90 ms at half.
    expect(ettr([formed(4, 10), { event: "rank_lost", at: 10, ranks: [0, 1], diedAt: 10 }], 0, 100)).toBeCloseTo(0.45, 10)
    expect(ettr([formed(4, 10), { event: "rank_lost", at: 200, ranks: [0, 1, 2, 3], diedAt: 200 }], 0, 100)).toBeCloseTo(0.9, 10)
    // A recovery heard without its death (a journal cut short) is never more than whole.
    expect(ettr([formed(4, 0), { event: "rank_running", at: 50, rank: 1 }], 0, 100)).toBe(1)
  })

  test("no deaths and no ratio: nothing to say", () => {
    expect(RecoveryFigures.describeFigures(RecoveryFigures.empty, undefined)).toBeUndefined()
  })
})

test("the deaths recovered between two states: each once, a restart again when it enters", () => {
  const before = fold([{ event: "rank_lost", at: 10, ranks: [1], diedAt: 5 }, { event: "rank_restarting", at: 20, rank: 2, diedAt: 15 }])
  const moved = RecoveryFigures.apply(before, { event: "survivors_stepped", at: 30, ranks: [1] })
  expect(RecoveryFigures.recoveredSince(before, moved).map((death) => [death.rank, death.recoveredAt])).toEqual([[1, 30]])
  expect(RecoveryFigures.recoveredSince(moved, moved)).toEqual([])
  const running = RecoveryFigures.apply(moved, { event: "rank_running", at: 40, rank: 2 })
  const entered = RecoveryFigures.apply(running, { event: "ranks_entered", at: 50, ranks: [2] })
  expect(RecoveryFigures.recoveredSince(moved, running).map((death) => [death.rank, death.recoveredAt])).toEqual([[2, 40]])
  expect(RecoveryFigures.recoveredSince(running, entered).map((death) => [death.rank, death.recoveredAt])).toEqual([[2, 50]])
})

describe("the survivors' next counted step (SurvivorsStep), on the coordinator's own steps", () => {
  /** The pure coordinator, stepped as its actor steps it, with the observation after each step. */
  const run = (ranks: ReadonlyArray<number>, datasetSize: number, epochs: number) => {
    let state: CoordinatorState = initialState({
      job: { backend: "cpu_sync", datasetSize, epochs },
      ranks,
      heartbeatTimeoutMs: 6_000,
      checkpointPath: "/ckpt/run.json",
      resume: undefined
    })
    let awaiting = SurvivorsStep.none
    const step = (event: CoordinatorEvent): SurvivorsStep.SurvivorsStepped | undefined => {
      const [instructions, next] = coordinate(state, event)
      const [stepped, left] = SurvivorsStep.observe(awaiting, event, state, instructions)
      state = next
      awaiting = left
      return stepped
    }
    // Every rank attaches at 0 (with `groups`, as the Python client does): epoch 1 is planned.
    for (const rank of ranks) step(CoordinatorEvent.Reported({ rank, report: new Attach({ groups: true }), at: 0 }))
    return {
      step,
      progress: (rank: number, epoch: number, done: number, at: number) => step(CoordinatorEvent.Reported({ rank, report: new Progress({ epoch, done }), at })),
      dies: (dead: ReadonlyArray<number>, at: number) => step(CoordinatorEvent.RanksDead({ ranks: dead, cause: "killed", at })),
      get awaiting() {
        return awaiting
      }
    }
  }

  test("a death mid-epoch: not the hand-over, not a report of no more samples, not the dead rank's own; the first survivor's report of more is", () => {
    // 30 samples over 3 ranks: 10 each in epoch 1.
    const cohort = run([0, 1, 2], 30, 2)
    expect(cohort.progress(0, 1, 2, 100)).toBeUndefined()
    expect(cohort.progress(1, 1, 2, 100)).toBeUndefined()
    expect(cohort.progress(2, 1, 2, 100)).toBeUndefined()
    // Nothing awaits a step before any death.
    expect(cohort.awaiting).toEqual([])
    // Rank 1 dies at 1000: its 8 samples go to the survivors (the hand-over), and the death awaits their step.
    expect(cohort.dies([1], 1_000)).toBeUndefined()
    expect(cohort.awaiting).toEqual([1])
    // The survivors re-form their group: a report of the samples they had is no step; nor is one of the dead rank's, heard late.
    expect(cohort.progress(0, 1, 2, 1_050)).toBeUndefined()
    expect(cohort.progress(1, 1, 4, 1_060)).toBeUndefined()
    // The first counted step after the death: rank 2's, at 1230.
    expect(cohort.progress(2, 1, 4, 1_230)).toEqual({ event: "survivors_stepped", at: 1_230, ranks: [1], rank: 2, epoch: 1 })
    expect(cohort.awaiting).toEqual([])
    // Later steps are training as usual.
    expect(cohort.progress(0, 1, 4, 1_240)).toBeUndefined()
  })

  test("two deaths before the survivors step: one step is both deaths'; a death with no epoch under way awaits nothing", () => {
    const cohort = run([0, 1, 2, 3], 40, 1)
    cohort.dies([1], 500)
    cohort.dies([3], 520)
    expect(cohort.awaiting).toEqual([1, 3])
    expect(cohort.progress(0, 1, 2, 900)).toEqual({ event: "survivors_stepped", at: 900, ranks: [1, 3], rank: 0, epoch: 1 })
    // Not yet formed (no epoch planned): a death hands nothing over, and awaits no step.
    const unplanned = initialState({ job: { backend: "cpu_sync", datasetSize: 10, epochs: 1 }, ranks: [0, 1], heartbeatTimeoutMs: 6_000, checkpointPath: "/x", resume: undefined })
    const [instructions] = coordinate(unplanned, CoordinatorEvent.RanksDead({ ranks: [1], cause: "killed", at: 5 }))
    expect(SurvivorsStep.observe(SurvivorsStep.none, CoordinatorEvent.RanksDead({ ranks: [1], cause: "killed", at: 5 }), unplanned, instructions)).toEqual([undefined, []])
  })

  test("a survivor's report that finishes the epoch is a counted step too (the coordinator has moved on to the next epoch by then)", () => {
    // 20 samples over 2 ranks; rank 1 has done all 10 of its own, rank 0 5 of its 10 when rank 1 dies.
    const cohort = run([0, 1], 20, 2)
    cohort.progress(1, 1, 10, 100)
    cohort.progress(0, 1, 5, 100)
    cohort.dies([1], 200)
    expect(cohort.awaiting).toEqual([1])
    // Rank 0 finishes epoch 1: that counts (more samples of the epoch under way).
    expect(cohort.progress(0, 1, 10, 450)).toEqual({ event: "survivors_stepped", at: 450, ranks: [1], rank: 0, epoch: 1 })
  })
})
