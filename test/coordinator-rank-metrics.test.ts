/**
 * Each rank's own metrics, from its progress reports to the view, through the real Coordinator on a TestClock:
 * what is shown is bounded (wire/ReportedMetrics.ts: at most 16 names of 1 to 64 characters, finite numbers),
 * the rest dropped with one warning per rank; the reports' samples still count, and the averages the machine
 * makes (the `progress` event's metrics) are of the bounded figures. The ranks' figures reach the view at most
 * every 500 ms (PROGRESS_EVERY_MS), and at the next beat after the last report: a metric reported once an
 * epoch's samples are done is shown too. Expected events and lines are literals.
 */
import { describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as TestClock from "effect/TestClock"
import * as TestContext from "effect/TestContext"
import type { Job } from "../src/config/ClusterConfig.ts"
import * as Coordinator from "../src/launcher/training/Coordinator.ts"
import type { RunEvent } from "../src/launcher/view/RunView.ts"
import { Attach, Progress } from "../src/wire/messages/CoordinatorMessages.ts"

const job: Job = {
  program: { _tag: "Entry", entry: "train.ts" },
  args: [],
  backend: "cpu_sync",
  datasetSize: 100,
  epochs: 1,
  cadence: 8,
  checkpoint: undefined,
  outerOptimizer: undefined,
  asyncAlpha: 0.5
}

const longName = "n".repeat(65)

const run = async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-rank-metrics-"))
  const events: Array<RunEvent> = []
  const warnings: Array<string> = []
  const logger = Logger.make(({ logLevel, message }) => {
    if (logLevel._tag === "Warning") warnings.push(Array.isArray(message) ? message.join(" ") : String(message))
  })
  const program = Effect.gen(function*() {
    const coordinator = yield* Coordinator.make({
      run: "metrics",
      ranks: [0, 1],
      job,
      // Beats every 1 s (the floor of beatEveryMs).
      heartbeatTimeoutMs: 6_000,
      checkpointPath: join(dir, "checkpoint.json"),
      resume: undefined,
      rootState: () => undefined,
      send: () => Effect.void,
      loseRanks: () => Effect.void,
      drained: Effect.void,
      onEvent: (event) => Effect.sync(() => events.push(event))
    })
    const settle = Effect.gen(function*() {
      for (let turn = 0; turn < 20; turn++) yield* Effect.yieldNow()
    })
    const say = (rank: number, done: number, metrics: Record<string, number>) =>
      Effect.zipRight(coordinator.report(rank, new Progress({ epoch: 1, done, metrics })), settle)
    yield* coordinator.cohortFormed
    yield* coordinator.report(0, new Attach({}))
    yield* coordinator.report(1, new Attach({}))
    yield* settle
    const seen = () => events.filter((event) => event.event === "rank_metrics" || event.event === "progress")
    // t = 0: rank 0's first report is told at once, without the name of 65 characters.
    yield* say(0, 10, { loss: 0.5, [longName]: 1 })
    const first = seen()
    // Still t = 0: rank 1's report waits for 500 ms to have passed; rank 0's second bad name is not warned of again.
    yield* say(1, 10, { loss: 0.25 })
    yield* say(0, 20, { loss: 0.375, [longName]: 2 })
    const second = seen()
    // The next beat (1 s) tells what waited: each rank's latest figures.
    yield* TestClock.adjust(Duration.seconds(1))
    yield* settle
    return { first, second, third: seen() }
  })
  try {
    const result = await Effect.runPromise(Effect.scoped(program).pipe(Effect.provide(TestContext.TestContext), Effect.provide(Logger.replace(Logger.defaultLogger, logger))))
    return { ...result, warnings }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

describe("the Coordinator tells the view each rank's own metrics, bounded", () => {
  test("bounded, warned once per rank, told at most every 500 ms and at the next beat", async () => {
    const { first, second, third, warnings } = await run()
    // The ranks' figures are told as the report is heard; the machine's averages as it handles it, just after.
    expect(first).toEqual([
      { event: "rank_metrics", at: 0, ranks: [{ rank: 0, metrics: { loss: 0.5 } }] },
      { event: "progress", at: 0, epoch: 1, epochs: 1, samplesDone: 10, datasetSize: 100, samplesPerSec: null, metrics: { loss: 0.5 } }
    ])
    // Nothing new within the 500 ms (progress too is told at most that often).
    expect(second).toEqual(first)
    expect(third).toEqual([
      ...first,
      { event: "rank_metrics", at: 1_000, ranks: [{ rank: 0, metrics: { loss: 0.375 } }, { rank: 1, metrics: { loss: 0.25 } }] }
    ])
    expect(warnings).toEqual([
      `rank 0 reported metric "${"n".repeat(64)}…": not shown, its name has 65 characters (1 to 64) (its other metrics out of bounds are dropped without a word)`
    ])
  })
})
