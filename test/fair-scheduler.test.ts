/**
 * The launcher's scheduler gives the event loop a turn while many fibers are busy: a timer due now fires
 * within a few budgets, however many fibers have work (the status endpoint and every socket read wait for
 * exactly such a turn).
 */
import { expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import { fairScheduler, TURN_BUDGET_MS } from "../src/actors/FairScheduler.ts"

/** 500 fibers, each yielding 400 times with a little work between: about a second of Effect work in all. */
const busy = Effect.forEach(
  Array.from({ length: 500 }, (_, index) => index),
  (index) =>
    Effect.gen(function*() {
      let sum = index
      for (let round = 0; round < 400; round++) {
        for (let step = 0; step < 200; step++) sum = (sum * 31 + step) % 1_000_003
        yield* Effect.yieldNow()
      }
      return sum
    }),
  { concurrency: "unbounded", discard: true }
)

test("a timer due while 500 fibers are busy fires within a few turn budgets, not after their work", async () => {
  const gaps: Array<number> = []
  let last = performance.now()
  const ticker = setInterval(() => {
    const now = performance.now()
    gaps.push(now - last)
    last = now
  }, 1)
  const started = performance.now()
  await Effect.runPromise(busy.pipe(Effect.withScheduler(fairScheduler)))
  const took = performance.now() - started
  clearInterval(ticker)
  // The work took many budgets, and the ticker ran all along, never starved for more than a few budgets
  // (a round of 500 fibers' tasks, a collection): Effect's default scheduler held it for the whole run.
  expect(took).toBeGreaterThan(20 * TURN_BUDGET_MS)
  expect(gaps.length).toBeGreaterThan(10)
  expect(Math.max(...gaps)).toBeLessThan(Math.max(60, took / 4))
})
