/**
 * Elastic growth by worked examples. Every expected value is written out by
 * hand, with how it follows from the rules; the random runs are in
 * growth.property.test.ts.
 *
 * 1. The death limit over a grown world (`elasticLimit`): which base a
 *    percentage is taken of, how it rounds, the floor of 1.
 * 2. `decide` in a world that grows: the death that stops the run, and the
 *    threshold its message names.
 * 3. The coordinator's re-planning, driven through the real Coordinator by
 *    hand-written sequences of reports: each rank's orders, in full. A
 *    newcomer waits for the boundary, the grown epoch is split equally over
 *    the members in rank order, the newcomer is welcomed with the consensus
 *    of the epoch before its first; a dead rank's remainder is handed on; a
 *    newcomer rescues an epoch whose members all died; one that joins too late
 *    is told training is done.
 */
import { describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as TestContext from "effect/TestContext"
import * as Coordinator from "../src/launcher/training/Coordinator.ts"
import { ChildExit } from "../src/kernel/ChildExit.ts"
import type { ChildSpec } from "../src/kernel/ChildSpec.ts"
import { decide, type Directive, initialState, SupervisionEvent, type SupervisorState } from "../src/kernel/policy/decide.ts"
import { Count, Elastic, elasticLimit, type FailureBase, KillAll, type MaxFailure, Percent, Phased } from "../src/kernel/policy/Strategy.ts"
import type { Job } from "../src/config/ClusterConfig.ts"
import { Attach, CheckpointSave, type CoordinatorOrder, Progress, type RankReport } from "../src/wire/messages/CoordinatorMessages.ts"
import { anyShutdown } from "./fixtures/child-specs.ts"

// ---------------------------------------------------------------------------
// 1. elasticLimit
// ---------------------------------------------------------------------------

describe("elasticLimit: deaths that trip the threshold, formation world 4, current world 8", () => {
  const cases: ReadonlyArray<readonly [MaxFailure | undefined, FailureBase | undefined, number | undefined, string]> = [
    [undefined, undefined, undefined, "no max_failure: no limit"],
    [undefined, "current", undefined, "no max_failure, whatever the base"],
    [new Count({ n: 3 }), "formation", 3, "a count is a count"],
    [new Count({ n: 3 }), "current", 3, "a count ignores the base"],
    [new Count({ n: 0 }), undefined, 1, "a count of 0: the first death trips it"],
    [new Percent({ p: 50 }), undefined, 2, "no base means the formation world: 50% of 4"],
    [new Percent({ p: 50 }), "formation", 2, "50% of 4"],
    [new Percent({ p: 50 }), "current", 4, "50% of 8"],
    [new Percent({ p: 30 }), "formation", 2, "30% of 4 is 1.2, rounded up"],
    [new Percent({ p: 30 }), "current", 3, "30% of 8 is 2.4, rounded up"],
    [new Percent({ p: 12.5 }), "current", 1, "12.5% of 8 is exactly 1"],
    [new Percent({ p: 12.5 }), "formation", 1, "12.5% of 4 is 0.5, rounded up"],
    [new Percent({ p: 0 }), "current", 1, "0%: the first death trips it"],
    [new Percent({ p: 100 }), "formation", 4, "100% of the formation world"],
    [new Percent({ p: 100 }), "current", 8, "100% of every rank"]
  ]
  for (const [maxFailure, base, expected, why] of cases) {
    test(why, () => {
      const strategy = new Elastic({
        ...(maxFailure === undefined ? {} : { maxFailure }),
        ...(base === undefined ? {} : { base })
      })
      expect(elasticLimit(strategy, 4, 8)).toBe(expected)
    })
  }

  test("a percentage is rounded up from its decimal value, not from float noise", () => {
    // 0.28 × 25 is 7.000000000000001 in floats: the limit is 7, not 8.
    expect(elasticLimit(new Elastic({ maxFailure: new Percent({ p: 28 }), base: "current" }), 5, 25)).toBe(7)
    // 0.07 × 100 is 7.000000000000001 in floats: 7.
    expect(elasticLimit(new Elastic({ maxFailure: new Percent({ p: 7 }) }), 100, 100)).toBe(7)
    // 10% of 31 is 3.1: 4; a real fraction still rounds up.
    expect(elasticLimit(new Elastic({ maxFailure: new Percent({ p: 10 }), base: "current" }), 10, 31)).toBe(4)
  })
})

// ---------------------------------------------------------------------------
// 2. decide in a growing world
// ---------------------------------------------------------------------------

const rankChild = (rank: number): ChildSpec => ({ id: `rank-${rank}`, label: `rank ${rank}`, ranks: [rank], group: undefined, restart: "transient", significant: false, shutdown: anyShutdown })

/** `decide` over a formed world of `world` rank children, one event at a time, 10 ms apart. */
const formed = (afterFormation: Elastic, world: number) => {
  const strategy = new Phased({ beforeFormation: new KillAll(), afterFormation })
  let state = initialState(Array.from({ length: world }, (_, rank) => rankChild(rank))) as SupervisorState
  let now = 0
  const run = (event: SupervisionEvent): ReadonlyArray<Directive> => {
    const [directives, next] = decide(strategy, state, event, (now += 10))
    state = next
    return directives
  }
  run(SupervisionEvent.Boot())
  run(SupervisionEvent.CohortFormed())
  return { run, state: () => state }
}

const kill = (rank: number) => SupervisionEvent.ChildExited({ id: `rank-${rank}`, exit: ChildExit.Signaled({ signal: "SIGKILL" }) })
const joinRanks = (from: number, count: number) =>
  SupervisionEvent.ChildrenJoined({ children: Array.from({ length: count }, (_, i) => rankChild(from + i)) })

describe("decide: the death that stops a grown run", () => {
  const cases: ReadonlyArray<{
    readonly why: string
    readonly strategy: Elastic
    readonly world: number
    readonly joined: number
    /** The death (1st, 2nd, ...) at which the run stops, and the threshold its note names. */
    readonly stopsAt: number
    readonly note: string
  }> = [
    {
      why: "50% over the formation world: 2 of the 4 at formation",
      strategy: new Elastic({ maxFailure: new Percent({ p: 50 }), base: "formation" }),
      world: 4,
      joined: 4,
      stopsAt: 2,
      note: "max_failure exceeded (2 of 8 (4 at formation, 4 joined since) dead, threshold 2): stopping the run"
    },
    {
      why: "no base is the formation world",
      strategy: new Elastic({ maxFailure: new Percent({ p: 50 }) }),
      world: 4,
      joined: 4,
      stopsAt: 2,
      note: "max_failure exceeded (2 of 8 (4 at formation, 4 joined since) dead, threshold 2): stopping the run"
    },
    {
      why: "50% over every rank: 4 of the 8",
      strategy: new Elastic({ maxFailure: new Percent({ p: 50 }), base: "current" }),
      world: 4,
      joined: 4,
      stopsAt: 4,
      note: "max_failure exceeded (4 of 8 (4 at formation, 4 joined since) dead, threshold 4): stopping the run"
    },
    {
      why: "100% over the formation world stops at 4, with 4 of 8 still alive",
      strategy: new Elastic({ maxFailure: new Percent({ p: 100 }) }),
      world: 4,
      joined: 4,
      stopsAt: 4,
      note: "max_failure exceeded (4 of 8 (4 at formation, 4 joined since) dead, threshold 4): stopping the run"
    },
    {
      why: "a count of 3",
      strategy: new Elastic({ maxFailure: new Count({ n: 3 }), base: "current" }),
      world: 4,
      joined: 4,
      stopsAt: 3,
      note: "max_failure exceeded (3 of 8 (4 at formation, 4 joined since) dead, threshold 3): stopping the run"
    },
    {
      why: "0%: the first death",
      strategy: new Elastic({ maxFailure: new Percent({ p: 0 }) }),
      world: 4,
      joined: 4,
      stopsAt: 1,
      note: "max_failure exceeded (1 of 8 (4 at formation, 4 joined since) dead, threshold 1): stopping the run"
    },
    {
      why: "no max_failure: only when every rank is dead",
      strategy: new Elastic({}),
      world: 2,
      joined: 2,
      stopsAt: 4,
      note: "every rank was lost (4 of 4 (2 at formation, 2 joined since)): stopping the run"
    },
    {
      why: "28% of 25 (5 at formation, 20 joined) is 7, not the 8 float noise (7.000000000000001) would give",
      strategy: new Elastic({ maxFailure: new Percent({ p: 28 }), base: "current" }),
      world: 5,
      joined: 20,
      stopsAt: 7,
      note: "max_failure exceeded (7 of 25 (5 at formation, 20 joined since) dead, threshold 7): stopping the run"
    },
    {
      why: "no growth: the verdict names one world",
      strategy: new Elastic({ maxFailure: new Count({ n: 2 }) }),
      world: 3,
      joined: 0,
      stopsAt: 2,
      note: "max_failure exceeded (2/3 dead, threshold 2): stopping the run"
    }
  ]
  for (const { joined, note, stopsAt, strategy, why, world } of cases) {
    test(why, () => {
      const { run, state } = formed(strategy, world)
      if (joined > 0) run(joinRanks(world, joined))
      expect(state().joined).toBe(joined)
      const stoppingAfter: Array<boolean> = []
      let notes: Array<string> = []
      for (let death = 1; death <= stopsAt; death++) {
        // Ranks die from the highest down: joined ones first, so a "formation" base is not helped by them.
        const directives = run(kill(world + joined - death))
        stoppingAfter.push(state().stopping)
        notes = directives.flatMap((directive) => (directive._tag === "Note" ? [directive.message] : []))
      }
      expect(stoppingAfter).toEqual([...Array.from({ length: stopsAt - 1 }, () => false), true])
      expect(notes).toContain(note)
    })
  }

  test("a `current` base follows the world as it grows mid-run", () => {
    const { run, state } = formed(new Elastic({ maxFailure: new Percent({ p: 75 }), base: "current" }), 2)
    run(kill(0)) // 1 dead; 75% of 2 = 1.5 → 2: running
    expect(state().stopping).toBe(false)
    run(joinRanks(2, 2)) // 75% of 4 = 3
    run(kill(2)) // 2 dead < 3: running
    expect(state().stopping).toBe(false)
    run(kill(3)) // 3 dead: the limit
    expect(state().stopping).toBe(true)
  })
})

// ---------------------------------------------------------------------------
// 3. The coordinator's re-planning
// ---------------------------------------------------------------------------

const jobOf = (datasetSize: number, epochs: number): Job => ({
  program: { _tag: "Entry", entry: "train.ts" },
  args: [],
  backend: "cpu_sync",
  datasetSize,
  epochs,
  cadence: 8,
  checkpoint: undefined,
  outerOptimizer: undefined,
  asyncAlpha: 0.5
})

/** An order as one short line: what the tables below are written in. */
const show = (order: CoordinatorOrder): string => {
  const ranges = (list: ReadonlyArray<{ readonly start: number; readonly end: number }>) =>
    list.length === 0 ? "-" : list.map(({ end, start }) => `[${start},${end})`).join(" ")
  switch (order._tag) {
    case "Welcome":
      return `Welcome first=${order.firstEpoch}${order.checkpoint === undefined ? "" : ` from=${order.checkpoint}`}`
    case "EpochStart":
      return `EpochStart ${order.epoch} ${ranges(order.ranges)}`
    case "EpochExtend":
      return `EpochExtend ${order.epoch} ${ranges(order.ranges)}`
    case "EpochEnd":
      return `EpochEnd ${order.epoch}`
    case "CheckpointSaved":
      return `CheckpointSaved ${order.epoch}`
    default:
      return order._tag
  }
}

interface Driver {
  /** A rank's report, then the coordinator's mailbox runs dry. */
  readonly say: (rank: number, report: RankReport) => Effect.Effect<void>
  readonly join: (ranks: ReadonlyArray<number>) => Effect.Effect<void>
  readonly dies: (ranks: ReadonlyArray<number>) => Effect.Effect<void>
}

/**
 * Run `script` against a real Coordinator over `world` (cpu_sync: equal splits), and return every order
 * each rank was sent (as `show` lines) and each entry (`onEnter`) in turn. The test clock never moves, so
 * no beat or timeout intervenes.
 */
const drive = (world: ReadonlyArray<number>, job: Job, script: (driver: Driver) => Effect.Effect<void>) => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-growth-table-"))
  const orders = new Map<number, Array<string>>()
  const entries: Array<string> = []
  const program = Effect.gen(function*() {
    const coordinator = yield* Coordinator.make({
      run: "table",
      ranks: world,
      job,
      heartbeatTimeoutMs: 60_000,
      checkpointPath: join(dir, "checkpoint.json"),
      resume: undefined,
      rootState: () => undefined,
      send: (targets, order) => Effect.sync(() => targets.forEach((rank) => orders.set(rank, [...(orders.get(rank) ?? []), show(order)]))),
      loseRanks: () => Effect.void,
      drained: Effect.void,
      onEnter: (ranks, epoch) => Effect.sync(() => entries.push(`${ranks.join(",")} at ${epoch}`))
    })
    // The coordinator's handlers are synchronous: a few turns let its mailbox empty.
    const settle = Effect.gen(function*() {
      for (let turn = 0; turn < 20; turn++) yield* Effect.yieldNow()
    })
    yield* coordinator.cohortFormed
    yield* script({
      say: (rank, report) => Effect.zipRight(coordinator.report(rank, report), settle),
      join: (ranks) => Effect.zipRight(coordinator.join(ranks), settle),
      dies: (ranks) => Effect.zipRight(coordinator.ranksDead(ranks, "killed by the table"), settle)
    })
  })
  return Effect.runPromise(
    Effect.scoped(program).pipe(Effect.provide(TestContext.TestContext), Effect.provide(Logger.minimumLogLevel(LogLevel.None)))
  )
    .then(() => ({ orders: Object.fromEntries([...orders].sort(([a], [b]) => a - b)), entries }))
    .finally(() => rmSync(dir, { recursive: true, force: true }))
}

const progress = (epoch: number, done: number) => new Progress({ epoch, done })

describe("re-planning through the Coordinator", () => {
  test("a newcomer waits for the boundary, the grown epoch is split equally, its welcome carries the consensus", async () => {
    const { entries, orders } = await drive([0, 1], jobOf(10, 2), ({ join, say }) =>
      Effect.gen(function*() {
        yield* say(0, new Attach())
        yield* say(1, new Attach()) // every member attached: epoch 1 is 10 over 2, [0, 5) and [5, 10)
        yield* join([2])
        yield* say(2, new Attach()) // held: nothing is sent to rank 2 before its boundary
        yield* say(0, progress(1, 5))
        // Epoch 1 is done: rank 2 enters; epoch 2 is 10 over 3 = 4 + 3 + 3: [0, 4), [4, 7), [7, 10).
        // Rank 2's start waits for the consensus of epoch 1.
        yield* say(1, progress(1, 5))
        yield* say(0, new CheckpointSave({ epoch: 1, state: "w1" })) // 1 of epoch 1's 2 members: no majority yet
        yield* say(1, new CheckpointSave({ epoch: 1, state: "w1" })) // both: the consensus, and rank 2 is welcomed with it
        yield* say(0, progress(2, 4))
        yield* say(1, progress(2, 3))
        yield* say(2, progress(2, 3))
      }))
    expect(entries).toEqual(["2 at 2"])
    expect(orders).toEqual({
      0: ["Welcome first=1", "EpochStart 1 [0,5)", "EpochEnd 1", "EpochStart 2 [0,4)", "CheckpointSaved 1", "EpochEnd 2", "TrainingDone"],
      1: ["Welcome first=1", "EpochStart 1 [5,10)", "EpochEnd 1", "EpochStart 2 [4,7)", "CheckpointSaved 1", "EpochEnd 2", "TrainingDone"],
      2: ["Welcome first=2 from=w1", "EpochStart 2 [7,10)", "EpochEnd 2", "TrainingDone"]
    })
  })

  test("a dead rank's remainder goes to the survivors; a newcomer without a checkpoint starts once a member has begun its epoch", async () => {
    const { entries, orders } = await drive([0, 1, 2], jobOf(9, 2), ({ dies, join, say }) =>
      Effect.gen(function*() {
        for (const rank of [0, 1, 2]) yield* say(rank, new Attach()) // epoch 1: [0, 3), [3, 6), [6, 9)
        yield* say(0, progress(1, 2))
        // Rank 0 dies after 2: [2, 3) is left, 1 sample over ranks 1 and 2 = 1 + 0: rank 1 gets it.
        yield* dies([0])
        yield* join([3])
        yield* say(3, new Attach())
        yield* say(1, progress(1, 4)) // [3, 6) and [2, 3)
        // Epoch 1 is done: rank 3 enters; epoch 2 is 9 over ranks 1, 2, 3: [0, 3), [3, 6), [6, 9).
        yield* say(2, progress(1, 3))
        // No checkpoint is offered: once rank 1 reports progress in epoch 2, rank 3 starts without one.
        yield* say(1, progress(2, 1))
        yield* say(1, progress(2, 3))
        yield* say(2, progress(2, 3))
        yield* say(3, progress(2, 3))
      }))
    expect(entries).toEqual(["3 at 2"])
    expect(orders).toEqual({
      0: ["Welcome first=1", "EpochStart 1 [0,3)"],
      1: ["Welcome first=1", "EpochStart 1 [3,6)", "EpochExtend 1 [2,3)", "EpochEnd 1", "EpochStart 2 [0,3)", "EpochEnd 2", "TrainingDone"],
      2: ["Welcome first=1", "EpochStart 1 [6,9)", "EpochEnd 1", "EpochStart 2 [3,6)", "EpochEnd 2", "TrainingDone"],
      3: ["Welcome first=2", "EpochStart 2 [6,9)", "EpochEnd 2", "TrainingDone"]
    })
  })

  test("every member dies mid-epoch: the attached newcomers enter at once and split what is left", async () => {
    const { entries, orders } = await drive([0], jobOf(6, 1), ({ dies, join, say }) =>
      Effect.gen(function*() {
        yield* say(0, new Attach()) // epoch 1: [0, 6)
        yield* join([1, 2])
        yield* say(1, new Attach())
        yield* say(2, new Attach())
        yield* say(0, progress(1, 2))
        // Rank 0 dies after 2: [2, 6) is orphaned; ranks 1 and 2 enter at epoch 1 and take 2 + 2.
        yield* dies([0])
        yield* say(1, progress(1, 2))
        yield* say(2, progress(1, 2))
      }))
    expect(entries).toEqual(["1,2 at 1"])
    expect(orders).toEqual({
      0: ["Welcome first=1", "EpochStart 1 [0,6)"],
      1: ["Welcome first=1", "EpochStart 1 [2,4)", "EpochEnd 1", "TrainingDone"],
      2: ["Welcome first=1", "EpochStart 1 [4,6)", "EpochEnd 1", "TrainingDone"]
    })
  })

  test("a rescue waits for every joiner to attach before the newcomers enter", async () => {
    const { entries, orders } = await drive([0], jobOf(6, 1), ({ dies, join, say }) =>
      Effect.gen(function*() {
        yield* say(0, new Attach())
        yield* join([1, 2])
        yield* say(1, new Attach())
        yield* say(0, progress(1, 3))
        yield* dies([0]) // [3, 6) orphaned; rank 2 has not attached: nobody enters yet
        yield* say(2, new Attach()) // now both enter: 3 over 2 = 2 + 1
        yield* say(1, progress(1, 2))
        yield* say(2, progress(1, 1))
      }))
    expect(entries).toEqual(["1,2 at 1"])
    expect(orders).toEqual({
      0: ["Welcome first=1", "EpochStart 1 [0,6)"],
      1: ["Welcome first=1", "EpochStart 1 [3,5)", "EpochEnd 1", "TrainingDone"],
      2: ["Welcome first=1", "EpochStart 1 [5,6)", "EpochEnd 1", "TrainingDone"]
    })
  })

  test("a rank that attaches after the last epoch is told training is done, with the final consensus", async () => {
    const { entries, orders } = await drive([0], jobOf(2, 1), ({ join, say }) =>
      Effect.gen(function*() {
        yield* say(0, new Attach()) // epoch 1: [0, 2)
        yield* join([1])
        yield* say(0, progress(1, 2)) // the last epoch ends: training is done
        yield* say(1, new Attach()) // too late to enter: its welcome waits for epoch 1's consensus
        yield* say(0, new CheckpointSave({ epoch: 1, state: "final" }))
      }))
    expect(entries).toEqual([])
    expect(orders).toEqual({
      0: ["Welcome first=1", "EpochStart 1 [0,2)", "EpochEnd 1", "TrainingDone", "CheckpointSaved 1"],
      1: ["Welcome first=2 from=final", "TrainingDone"]
    })
  })
})
