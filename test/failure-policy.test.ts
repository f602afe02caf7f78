import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import { Backoff, Count, Elastic, KillAll, Percent, Phased, Restart } from "../src/kernel/policy/Strategy.ts"
import { defaultFailurePolicy, parseFailurePolicy } from "../src/config/FailurePolicy.ts"
import { beatEveryMs } from "../src/config/Heartbeat.ts"
import { formatDuration, parseDuration } from "../src/config/reading/Duration.ts"
import { readmeDefaultRules, withDefaultRules } from "./support/default-rules.ts"

const decode = (text: string) => Effect.runPromise(parseFailurePolicy(text, "cluster.yml"))
const problem = (text: string) =>
  Effect.runPromise(Effect.flip(parseFailurePolicy(text, "cluster.yml"))).then((error) => error.message)

describe("failure_policy", () => {
  test("an absent section gives kill_all before formation and elastic up to 50% after, with the default rules", async () => {
    // The README's defaults, typed here: a 5 s grace, a 30 s heartbeat timeout, exit status 0 when DEGRADED.
    const readmeDefaults = {
      strategy: new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }), rules: readmeDefaultRules }),
      grace: 5_000,
      heartbeatTimeout: 30_000,
      degradedExit: 0
    }
    expect(await decode("name: demo\n")).toEqual(readmeDefaults)
    expect(await decode("")).toEqual(readmeDefaults)
    expect(defaultFailurePolicy).toEqual(readmeDefaults)
  })

  test("the default rules come with an elastic after_formation only; rules: [] turns them off; a file's own replace them", async () => {
    expect((await decode("failure_policy: { after_formation: kill_all }")).strategy.rules).toBeUndefined()
    expect((await decode("failure_policy: { after_formation: restart }")).strategy.rules).toBeUndefined()
    expect((await decode("failure_policy: { after_formation: elastic, rules: [] }")).strategy.rules).toEqual([])
    const own = await decode("failure_policy: { rules: [{ name: mine, when: { exit_code: [3] }, then: ignore }] }")
    expect(own.strategy.rules?.map((rule) => rule.name)).toEqual(["mine"])
  })

  test("the documented example decodes to the strategies it names", async () => {
    const policy = await decode(`
failure_policy:
  before_formation: kill_all
  after_formation:
    elastic: { max_failure: 25% }
  grace: 250ms
`)
    expect(policy).toEqual({
      strategy: withDefaultRules(new Phased({
        beforeFormation: new KillAll(),
        afterFormation: new Elastic({ maxFailure: new Percent({ p: 25 }) })
      })),
      grace: 250,
      heartbeatTimeout: 30_000,
      degradedExit: 0
    })
  })

  test("a count limit and a restart policy with every field", async () => {
    expect((await decode("failure_policy: { after_formation: { elastic: { max_failure: 2 } } }")).strategy)
      .toEqual(withDefaultRules(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Count({ n: 2 }) }) })))
    const restart = await decode(`
failure_policy:
  after_formation:
    restart: { max_restarts: 3, within: 10m, backoff: { initial: 1s, max: 30s, factor: 2, jitter: 0.2 }, scope: all }
`)
    expect(restart.strategy.afterFormation).toEqual(
      new Restart({
        maxRestarts: 3,
        within: 600_000,
        backoff: new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0.2 }),
        scope: "all"
      })
    )
  })

  test("an invalid max_failure names the path, line and column, what was expected and what was found", async () => {
    const text = [
      "name: demo",
      "controller: { host: 127.0.0.1 }",
      "workers: []",
      "job: {}",
      "env: {}",
      "failure_policy:",
      "  before_formation: kill_all",
      "  after_formation:",
      "    elastic: { max_failure: lots }"
    ].join("\n")
    expect(await problem(text)).toBe(
      `cluster.yml: failure_policy.after_formation.elastic.max_failure (line 9, col 29): ` +
        `expected a count ≥ 0, a percentage like "25%", or none, got "lots"`
    )
  })

  test.each([
    ["failure_policy: { grace: soon }", `failure_policy.grace (line 1, col 26): expected a duration like "250ms", "5s", "10m" or "1h", got "soon"`],
    ["failure_policy: { grace: 5 }", `failure_policy.grace (line 1, col 26): expected a duration like "250ms", "5s", "10m" or "1h", got 5`],
    ["failure_policy: { after_formation: { elastic: { max_failure: 150% } } }", `max_failure (line 1, col 62): expected a count ≥ 0, a percentage like "25%", or none, got "150%"`],
    ["failure_policy: { after_formation: { elastic: { max_failure: -1 } } }", `expected a count ≥ 0, a percentage like "25%", or none, got -1`],
    ["failure_policy: { after_formation: { elastic: { max_failure: 1.5 } } }", `got 1.5`],
    ["failure_policy: { before_formation: shrug }", `failure_policy.before_formation (line 1, col 37): expected one of kill_all, elastic`],
    ["failure_policy: { after_formation: { elastic: {}, kill_all: {} } }", `expected exactly one of kill_all, elastic, restart, got 2`],
    ["failure_policy: { after_formation: { restart: { scope: some } } }", `restart.scope (line 1, col 56): expected one of "one", "all", got "some"`],
    ["failure_policy: { after_formation: { restart: { within: 0ms } } }", `restart.within (line 1, col 57): expected a duration`],
    ["failure_policy: { after_formation: { restart: { backoff: { jitter: 2 } } } }", `backoff.jitter (line 1, col 68): expected a jitter fraction from 0 to 1, got 2`],
    ["failure_policy: { after_formation: { restart: { backoff: { initial: 5s, max: 1s } } } }", `backoff.max (line 1, col 78): expected a duration ≥ backoff.initial (5s), got "1s"`],
    ["failure_policy: { after_formation: { restart: { max_restarts: many } } }", `restart.max_restarts (line 1, col 63): expected a whole number of restarts from 0 to 1000, got "many"`],
    ["failure_policy: { grase: 5s }", `failure_policy (line 1, col 19): unknown key "grase" (did you mean "grace"?); known keys: before_formation, after_formation, rules, grace`],
    ["failure_policy: { after_formation: { elastic: { limit: 2 } } }", `unknown key "limit"; known keys: max_failure, max_failure_base`],
    ["failure_policy: [kill_all]", `failure_policy (line 1, col 17): expected a mapping with keys before_formation, after_formation, rules, grace, heartbeat_timeout, max_failure_base, degraded_exit, got a list`],
    ["failure_policy: {", `(top level) (line 1, col 18): not valid YAML`],
    ["failure_policy: { heartbeat_timeout: 1999ms }", `failure_policy.heartbeat_timeout (line 1, col 38): expected a duration like "250ms", "5s", "10m" or "1h" of at least 2s, got "1999ms"`],
    ["failure_policy: { after_formation: 5 }", `failure_policy.after_formation (line 1, col 36): expected one of kill_all, elastic, { elastic: { max_failure: … } } or { restart: { … } }, got 5`],
    ["failure_policy: { after_formation: { kill_all: 5 } }", `failure_policy.after_formation.kill_all (line 1, col 48): expected a mapping with keys grace, got 5`]
  ])("rejects %p", async (text, expected) => {
    expect(await problem(text)).toContain(expected)
  })

  test("a check between keys is made although another key beside them is wrong", async () => {
    expect((await problem("failure_policy: { after_formation: { restart: { backoff: { initial: 2m, max: 1m, factor: 0 } } } }")).split("\n")).toEqual([
      `cluster.yml: failure_policy.after_formation.restart.backoff.max (line 1, col 78): expected a duration ≥ backoff.initial (2m), got "1m"`,
      "cluster.yml: failure_policy.after_formation.restart.backoff.factor (line 1, col 90): expected a growth factor from 1 to 100, got 0"
    ])
    expect((await problem("failure_policy: { after_formation: { elastic: {}, kill_all: {}, resart: 1 } }")).split("\n")).toEqual([
      "cluster.yml: failure_policy.after_formation (line 1, col 36): expected exactly one of kill_all, elastic, restart, got 2",
      `cluster.yml: failure_policy.after_formation (line 1, col 65): unknown key "resart" (did you mean "restart"?); known keys: kill_all, elastic, restart`
    ])
    expect((await problem("failure_policy: { after_formation: kill_all, max_failure_base: current, grace: soon }")).split("\n")).toEqual([
      "cluster.yml: failure_policy.max_failure_base (line 1, col 64): only an elastic after_formation policy with a max_failure has a base: add one, or remove max_failure_base",
      `cluster.yml: failure_policy.grace (line 1, col 80): expected a duration like "250ms", "5s", "10m" or "1h", got "soon"`
    ])
  })

  test("a check between keys waits for the keys it relates: a base is not judged against an after_formation that cannot be read", async () => {
    expect(await problem("failure_policy: { after_formation: shrug, max_failure_base: current }")).toBe(
      `cluster.yml: failure_policy.after_formation (line 1, col 36): expected one of kill_all, elastic, { elastic: { max_failure: … } } or { restart: { … } }, got "shrug"`
    )
  })

  test("every mistake in the file is reported at once, in document order", async () => {
    const text = [
      "failure_policy:",
      "  before_formation: shrug",
      "  after_formation:",
      "    restart: { max_restarts: many, within: soon, scope: some, backoff: { jitter: 2 } }",
      "  grase: 5s",
      "  grace: later"
    ].join("\n")
    expect((await problem(text)).split("\n")).toEqual([
      "cluster.yml: failure_policy.before_formation (line 2, col 21): expected one of kill_all, elastic, { elastic: { max_failure: … } } or { restart: { … } }, got \"shrug\"",
      "cluster.yml: failure_policy.after_formation.restart.max_restarts (line 4, col 30): expected a whole number of restarts from 0 to 1000, got \"many\"",
      "cluster.yml: failure_policy.after_formation.restart.within (line 4, col 44): expected a duration like \"250ms\", \"5s\", \"10m\" or \"1h\" above 0ms, got \"soon\"",
      "cluster.yml: failure_policy.after_formation.restart.scope (line 4, col 57): expected one of \"one\", \"all\", got \"some\"",
      "cluster.yml: failure_policy.after_formation.restart.backoff.jitter (line 4, col 82): expected a jitter fraction from 0 to 1, got 2",
      "cluster.yml: failure_policy (line 5, col 3): unknown key \"grase\" (did you mean \"grace\"?); known keys: before_formation, after_formation, rules, grace, heartbeat_timeout, max_failure_base, degraded_exit",
      "cluster.yml: failure_policy.grace (line 6, col 10): expected a duration like \"250ms\", \"5s\", \"10m\" or \"1h\", got \"later\""
    ])
  })

  test("kill_all may name the grace its siblings get: 0s kills them at once; none leaves the policy's", async () => {
    const killAll = async (text: string) => (await decode(`failure_policy: { before_formation: ${text} }`)).strategy.beforeFormation
    expect(await killAll("{ kill_all: { grace: 0s } }")).toEqual(new KillAll({ grace: 0 }))
    expect(await killAll("{ kill_all: { grace: 30s } }")).toEqual(new KillAll({ grace: 30_000 }))
    expect(await killAll("{ kill_all: {} }")).toEqual(new KillAll())
    expect(((await killAll("kill_all")) as KillAll).grace).toBeUndefined()
    expect(await problem("failure_policy: { before_formation: { kill_all: { grace: soon } } }")).toContain(
      `kill_all.grace (line 1, col 58): expected a duration like "250ms", "5s", "10m" or "1h", got "soon"`
    )
  })

  test("bare words and empty mappings are accepted where they read naturally", async () => {
    const policy = await decode("failure_policy: { before_formation: { kill_all: {} }, after_formation: elastic }")
    expect(policy.strategy).toEqual(withDefaultRules(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }) })))
    const restart = await decode("failure_policy: { after_formation: restart }")
    expect(restart.strategy.afterFormation._tag).toBe("Restart")
  })
})

describe("durations", () => {
  test.each([["250ms", 250], ["5s", 5_000], ["1.5s", 1_500], ["10m", 600_000], ["1h", 3_600_000], ["0ms", 0]])(
    "%s is %d ms",
    (text, ms) => {
      expect(parseDuration(text)).toBe(ms)
      expect(parseDuration(formatDuration(ms))).toBe(ms)
    }
  )
  test.each(["5", "5 sec", "-1s", "0.5ms", "1d", "", "s"])("%p is not a duration", (text) => {
    expect(parseDuration(text)).toBeUndefined()
  })
})

describe("beat interval", () => {
  test("a sixth of the heartbeat timeout, between 1 s and 5 s: at least twice per timeout, every 5 s at the default", () => {
    expect([2_000, 6_000, 12_000, 30_000, 600_000].map(beatEveryMs)).toEqual([1_000, 1_000, 2_000, 5_000, 5_000])
    for (let timeout = 2_000; timeout <= 3_600_000; timeout += 997) expect(beatEveryMs(timeout) * 2).toBeLessThanOrEqual(timeout)
  })
})
