/**
 * The strategies' arithmetic and schemas, against tables worked out by hand:
 * the death threshold (ceil of p × world, with the float-noise rule), the
 * elastic limit's floor of 1 and its base, how kill_all stops the siblings,
 * which strategy is in force before and after formation, and every bound the
 * schemas put on a cluster file's numbers; and the start's warning for a
 * max_failure count that can never trip.
 */
import { describe, expect, test } from "bun:test"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import {
  Backoff,
  Count,
  defaultStrategy,
  Elastic,
  elasticLimit,
  FailureBase,
  failureLimit,
  inForce,
  KillAll,
  killAllStop,
  Millis,
  Percent,
  Phased,
  Restart,
  RestartType
} from "../src/kernel/policy/Strategy.ts"
import { unreachableLimits } from "../src/launcher/run/RunEnv.ts"

describe("failureLimit: how many dead ranks trip max_failure", () => {
  // [max_failure, world, limit, why]
  const table: ReadonlyArray<readonly [Count | Percent, number, number, string]> = [
    [new Count({ n: 0 }), 10, 0, "a count is the count, whatever the world"],
    [new Count({ n: 3 }), 2, 3, "even a count above the world"],
    [new Percent({ p: 10 }), 30, 3, "0.1 × 30 is 3.0000000000000004 in floats: still 3"],
    [new Percent({ p: 30 }), 10, 3, "0.3 × 10 is 3.0000000000000004 too"],
    [new Percent({ p: 7 }), 100, 7, "0.07 × 100 is 7.000000000000001"],
    [new Percent({ p: 20 }), 5, 1, "exactly 1"],
    [new Percent({ p: 25 }), 4, 1, "exactly 1"],
    [new Percent({ p: 25 }), 5, 2, "1.25 rounds up"],
    [new Percent({ p: 12.5 }), 8, 1, "exactly 1"],
    [new Percent({ p: 12.5 }), 9, 2, "1.125 rounds up"],
    [new Percent({ p: 50 }), 3, 2, "1.5 rounds up"],
    [new Percent({ p: 33.3 }), 3, 1, "0.999 rounds up"],
    [new Percent({ p: 1 }), 1, 1, "0.01 rounds up"],
    [new Percent({ p: 100 }), 7, 7, "everyone"],
    [new Percent({ p: 0 }), 100, 0, "0% is nobody"],
    [new Percent({ p: 50 }), 0, 0, "no world, no limit"]
  ]
  for (const [maxFailure, world, limit, why] of table) {
    const what = maxFailure._tag === "Count" ? `${maxFailure.n}` : `${maxFailure.p}%`
    test(`${what} of ${world} is ${limit}: ${why}`, () => expect(failureLimit(maxFailure, world)).toBe(limit))
  }
})

describe("elasticLimit: the threshold an elastic strategy stops at", () => {
  test("no max_failure: no limit", () => {
    expect(elasticLimit(new Elastic({}), 4, 10)).toBeUndefined()
    expect(elasticLimit(new Elastic({ base: "current" }), 4, 10)).toBeUndefined()
  })

  test("a limit of 0 (a count of 0, or 0%) trips at the first death: 1", () => {
    expect(elasticLimit(new Elastic({ maxFailure: new Count({ n: 0 }) }), 4, 4)).toBe(1)
    expect(elasticLimit(new Elastic({ maxFailure: new Percent({ p: 0 }) }), 4, 4)).toBe(1)
  })

  test("a percentage is of the world at formation, unless base is current: then of every rank so far", () => {
    const half = new Percent({ p: 50 })
    expect(elasticLimit(new Elastic({ maxFailure: half }), 4, 10)).toBe(2)
    expect(elasticLimit(new Elastic({ maxFailure: half, base: "formation" }), 4, 10)).toBe(2)
    expect(elasticLimit(new Elastic({ maxFailure: half, base: "current" }), 4, 10)).toBe(5)
    // A count does not depend on either world.
    expect(elasticLimit(new Elastic({ maxFailure: new Count({ n: 3 }), base: "current" }), 4, 10)).toBe(3)
  })
})

describe("killAllStop: how kill_all stops the siblings", () => {
  test("no grace: SIGTERM and the policy's grace; a grace: that one; 0: SIGKILL at once", () => {
    expect(killAllStop(new KillAll())).toStrictEqual({ mode: "graceful" })
    expect(killAllStop(new KillAll({ grace: 2_500 }))).toStrictEqual({ mode: "graceful", graceMs: 2_500 })
    expect(killAllStop(new KillAll({ grace: 1 }))).toStrictEqual({ mode: "graceful", graceMs: 1 })
    expect(killAllStop(new KillAll({ grace: 0 }))).toStrictEqual({ mode: "kill" })
  })
})

describe("inForce: the strategy that governs an event", () => {
  const before = new KillAll({ grace: 100 })
  const after = new Elastic({ maxFailure: new Count({ n: 2 }) })
  const phased = new Phased({ beforeFormation: before, afterFormation: after })
  test("phased: the before-formation one until the cohort forms, the after-formation one from then on", () => {
    expect(inForce(phased, false)).toBe(before)
    expect(inForce(phased, true)).toBe(after)
  })

  test("a simple strategy is in force in both phases", () => {
    for (const simple of [before, after, new Restart({ maxRestarts: 1, within: 1, backoff: new Backoff({ initial: 0, max: 0, factor: 1, jitter: 0 }), scope: "one" })]) {
      expect(inForce(simple, false)).toBe(simple)
      expect(inForce(simple, true)).toBe(simple)
    }
  })

  test("the default: kill_all (no grace of its own) before formation, elastic until half the world is lost after", () => {
    expect(inForce(defaultStrategy, false)).toStrictEqual(new KillAll())
    expect(inForce(defaultStrategy, true)).toStrictEqual(new Elastic({ maxFailure: new Percent({ p: 50 }) }))
  })
})

describe("the schemas' bounds", () => {
  const accepts = <A, I>(schema: Schema.Schema<A, I>, value: unknown) => Either.isRight(Schema.decodeUnknownEither(schema)(value))
  const backoff = (fields: Partial<{ initial: number; max: number; factor: number; jitter: number }>) => ({ initial: 100, max: 1_000, factor: 2, jitter: 0, ...fields })

  test("milliseconds: whole, from 0 to a week", () => {
    const week = 7 * 24 * 3_600_000
    expect([0, 1, week].map((value) => accepts(Millis, value))).toEqual([true, true, true])
    expect([-1, week + 1, 1.5, Number.NaN].map((value) => accepts(Millis, value))).toEqual([false, false, false, false])
  })

  test("a count: whole, 0 to a million; a percentage: 0 to 100", () => {
    expect([0, 1_000_000].map((n) => accepts(Count, { _tag: "Count", n }))).toEqual([true, true])
    expect([-1, 1_000_001, 2.5].map((n) => accepts(Count, { _tag: "Count", n }))).toEqual([false, false, false])
    expect([0, 12.5, 100].map((p) => accepts(Percent, { _tag: "Percent", p }))).toEqual([true, true, true])
    expect([-0.1, 100.1].map((p) => accepts(Percent, { _tag: "Percent", p }))).toEqual([false, false])
  })

  test("a backoff: factor 1 to 100, jitter 0 to 1, max at least initial", () => {
    expect([1, 100].map((factor) => accepts(Backoff, backoff({ factor })))).toEqual([true, true])
    expect([0.99, 100.5].map((factor) => accepts(Backoff, backoff({ factor })))).toEqual([false, false])
    expect([0, 1].map((jitter) => accepts(Backoff, backoff({ jitter })))).toEqual([true, true])
    expect([-0.01, 1.01].map((jitter) => accepts(Backoff, backoff({ jitter })))).toEqual([false, false])
    expect(accepts(Backoff, backoff({ initial: 1_000, max: 1_000 }))).toBe(true)
    const refused = Schema.decodeUnknownEither(Backoff)(backoff({ initial: 1_001, max: 1_000 }))
    // The schema names itself in the error: a cluster file's mistake says which part of the policy it is in.
    expect(Either.isLeft(refused) && refused.left.message.split("\n")).toEqual([
      "(Backoff (Encoded side) <-> Backoff)",
      "└─ Encoded side transformation failure",
      "   └─ Backoff (Encoded side)",
      "      └─ Predicate refinement failure",
      "         └─ backoff max must be ≥ initial"
    ])
  })

  test("a restart: max_restarts 0 to 1000, within above 0, scope one or all", () => {
    const restart = (fields: Record<string, unknown>) => ({ _tag: "Restart", maxRestarts: 3, within: 1_000, backoff: backoff({}), scope: "one", ...fields })
    expect([0, 1_000].map((maxRestarts) => accepts(Restart, restart({ maxRestarts })))).toEqual([true, true])
    expect([-1, 1_001].map((maxRestarts) => accepts(Restart, restart({ maxRestarts })))).toEqual([false, false])
    expect([1, 0].map((within) => accepts(Restart, restart({ within })))).toEqual([true, false])
    expect(["one", "all", "some"].map((scope) => accepts(Restart, restart({ scope })))).toEqual([true, true, false])
  })

  test("the base of a percentage and a child's restart type are closed lists", () => {
    expect(["formation", "current", "now"].map((base) => accepts(FailureBase, base))).toEqual([true, true, false])
    expect(["permanent", "transient", "temporary", "never"].map((type) => accepts(RestartType, type))).toEqual([true, true, true, false])
  })
})

describe("max_failure counts that can never trip (the launcher's warning at start, RunEnv.unreachableLimits)", () => {
  const plan = (world: number, policy: { before?: Elastic | KillAll; after: Elastic | KillAll | Restart }, growth?: { maxRanks?: number }) => ({
    world,
    config: {
      controller: { join: { afterFormation: growth === undefined ? ("reject" as const) : ("accept" as const), maxRanks: growth?.maxRanks } },
      failurePolicy: { strategy: new Phased({ beforeFormation: policy.before ?? new KillAll(), afterFormation: policy.after }) }
    }
  }) as unknown as Parameters<typeof unreachableLimits>[0]
  const count = (n: number) => new Elastic({ maxFailure: new Count({ n }) })
  const advice = "the run fails only when every rank is lost; lower it (a count of dead ranks, or a percentage like 25%), or leave it out to tolerate any partial loss"

  test("a count above the world, or of the whole world, is said, naming the world; one below it is not", () => {
    expect(unreachableLimits(plan(4, { after: count(9) }))).toEqual([
      `failure_policy.after_formation.elastic.max_failure: 9 can never trip in a world of 4 rank(s): ${advice}`
    ])
    // 4 of 4: the fourth death is every rank lost, which the verdict says instead.
    expect(unreachableLimits(plan(4, { after: count(4) }))).toEqual([
      `failure_policy.after_formation.elastic.max_failure: 4 can never trip in a world of 4 rank(s): ${advice}`
    ])
    expect(unreachableLimits(plan(4, { after: count(3) }))).toEqual([])
    expect(unreachableLimits(plan(4, { after: count(0) }))).toEqual([])
  })

  test("a percentage never asks for more than the world; no limit, kill_all and restart have no count", () => {
    expect(unreachableLimits(plan(4, { after: new Elastic({ maxFailure: new Percent({ p: 100 }) }) }))).toEqual([])
    expect(unreachableLimits(plan(4, { after: new Elastic({}) }))).toEqual([])
    expect(unreachableLimits(plan(1, { after: new KillAll() }))).toEqual([])
    expect(unreachableLimits(plan(1, { after: new Restart({ maxRestarts: 3, within: 60_000, backoff: new Backoff({ initial: 0, max: 0, factor: 1, jitter: 0 }), scope: "one" }) }))).toEqual([])
  })

  test("before formation too; a world that may grow has room up to max_ranks, and without max_ranks no bound", () => {
    expect(unreachableLimits(plan(2, { before: count(2), after: count(5) }))).toEqual([
      `failure_policy.before_formation.elastic.max_failure: 2 can never trip in a world of 2 rank(s): ${advice}`,
      `failure_policy.after_formation.elastic.max_failure: 5 can never trip in a world of 2 rank(s): ${advice}`
    ])
    expect(unreachableLimits(plan(4, { after: count(9) }, { maxRanks: 16 }))).toEqual([])
    expect(unreachableLimits(plan(4, { after: count(9) }, {}))).toEqual([])
    expect(unreachableLimits(plan(4, { after: count(9) }, { maxRanks: 8 }))).toEqual([
      `failure_policy.after_formation.elastic.max_failure: 9 can never trip in a run of at most 8 rank(s) (controller.join.max_ranks): ${advice}`
    ])
  })
})
