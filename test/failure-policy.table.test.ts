/**
 * The `failure_policy` section against tables written by hand: the YAML each
 * strategy is written as, every spelling of a strategy and of max_failure
 * that is read, the defaults each omitted field takes, and the exact error,
 * path and place of each mistake.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import { FailRun, FailureRule, RuleWhen } from "../src/kernel/policy/FailureRules.ts"
import { Backoff, Count, Elastic, KillAll, Percent, Phased, Restart, type Strategy } from "../src/kernel/policy/Strategy.ts"
import { defaultFailurePolicy, encodeFailurePolicy, encodeStrategy, parseFailurePolicy, parseStrategy, strategyToYaml } from "../src/config/FailurePolicy.ts"
import { readmeDefaultRules, withDefaultRules } from "./support/default-rules.ts"

const policy = (text: string) => Effect.runPromise(parseFailurePolicy(text, "cluster.yml"))
const policyProblem = (text: string) => Effect.runPromise(Effect.flip(parseFailurePolicy(text, "cluster.yml"))).then((error) => error.message)
const strategy = (text: string) => Effect.runPromise(parseStrategy(text, "policy.yml"))
const strategyProblem = (text: string) => Effect.runPromise(Effect.flip(parseStrategy(text, "policy.yml"))).then((error) => error.message)
const after = async (text: string) => (await policy(`failure_policy: { after_formation: ${text} }`)).strategy.afterFormation

/** What `elastic`, `{ elastic: {} }` and an absent after_formation say: half the world. */
const halfTheWorld = new Elastic({ maxFailure: new Percent({ p: 50 }) })

const defaults = new Restart({ maxRestarts: 3, within: 600_000, backoff: new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0.2 }), scope: "one" })

describe("written as YAML", () => {
  const table: ReadonlyArray<readonly [Strategy, string]> = [
    [new KillAll(), "kill_all\n"],
    [new KillAll({ grace: 0 }), "kill_all:\n  grace: 0ms\n"],
    [new KillAll({ grace: 90_000 }), "kill_all:\n  grace: 90s\n"],
    [halfTheWorld, "elastic\n"],
    [new Elastic({}), "elastic:\n  max_failure: none\n"],
    [new Elastic({ maxFailure: new Count({ n: 2 }) }), "elastic:\n  max_failure: 2\n"],
    [new Elastic({ maxFailure: new Percent({ p: 25 }), base: "current" }), "elastic:\n  max_failure: 25%\n  max_failure_base: current\n"],
    [new Elastic({ maxFailure: new Percent({ p: 50 }), base: "formation" }), "elastic:\n  max_failure: 50%\n  max_failure_base: formation\n"],
    [new Elastic({ base: "formation" }), "elastic:\n  max_failure: none\n  max_failure_base: formation\n"],
    [
      new Restart({ maxRestarts: 4, within: 600_000, backoff: new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0.2 }), scope: "all" }),
      "restart:\n  max_restarts: 4\n  within: 10m\n  backoff:\n    initial: 1s\n    max: 30s\n    factor: 2\n    jitter: 0.2\n  scope: all\n"
    ],
    [new Phased({ beforeFormation: new KillAll(), afterFormation: halfTheWorld }), "before_formation: kill_all\nafter_formation: elastic\n"],
    [new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({}) }), "before_formation: kill_all\nafter_formation:\n  elastic:\n    max_failure: none\n"]
  ]
  for (const [value, yaml] of table) {
    test(`${JSON.stringify(yaml)}, and read back`, async () => {
      expect(strategyToYaml(value)).toBe(yaml)
      expect(await strategy(yaml)).toEqual(value)
    })
  }

  test("no key is written for a field that is not set (not even as undefined)", () => {
    expect(encodeStrategy(new Elastic({ maxFailure: new Count({ n: 1 }) }))).toStrictEqual({ elastic: { max_failure: 1 } })
    expect(encodeStrategy(new Elastic({ maxFailure: new Percent({ p: 25 }) }))).toStrictEqual({ elastic: { max_failure: "25%" } })
    // No limit is not the default (50%), so it is written, as the word a file uses for it.
    expect(encodeStrategy(new Elastic({}))).toStrictEqual({ elastic: { max_failure: "none" } })
    expect(encodeStrategy(new Elastic({ base: "current" }))).toStrictEqual({ elastic: { max_failure: "none", max_failure_base: "current" } })
  })

  test("a whole section: the strategy's keys, then grace and heartbeat_timeout", () => {
    expect(encodeFailurePolicy(defaultFailurePolicy)).toEqual({
      before_formation: "kill_all",
      after_formation: "elastic",
      rules: [
        {
          name: "member-lost",
          when: { cause: ["peer_lost"], exit_code: [75], phase: "after_formation" },
          then: { restart: { max_restarts: 1000, within: "10m", backoff: { initial: "0ms", max: "30s", factor: 2, jitter: 0 }, scope: "one" } }
        },
        { name: "repeated-error", when: { same_error_on: 2, phase: "after_formation" }, then: "fail" }
      ],
      grace: "5s",
      heartbeat_timeout: "30s",
      degraded_exit: 0
    })
  })
})

describe("read", () => {
  test("an absent section, or an empty one: kill_all, then elastic up to 50%; 5 s grace; 30 s heartbeat timeout", async () => {
    const expected = {
      strategy: new Phased({
        beforeFormation: new KillAll(),
        afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }),
        rules: readmeDefaultRules
      }),
      grace: 5_000,
      heartbeatTimeout: 30_000,
      degradedExit: 0
    }
    expect(await policy("name: x\n")).toEqual(expected)
    expect(await policy("failure_policy: {}\n")).toEqual(expected)
    expect(await policy("failure_policy: { grace: 250ms, heartbeat_timeout: 2s }")).toEqual({ ...expected, grace: 250, heartbeatTimeout: 2_000 })
  })

  test("one phase given: the other keeps its default", async () => {
    expect((await policy("failure_policy: { before_formation: elastic }")).strategy).toEqual(withDefaultRules(new Phased({ beforeFormation: halfTheWorld, afterFormation: halfTheWorld })))
    expect((await policy("failure_policy: { after_formation: kill_all }")).strategy).toEqual(new Phased({ beforeFormation: new KillAll(), afterFormation: new KillAll() }))
  })

  test("an absent after_formation is elastic with max_failure 50%, strictly (no base, no other key)", async () => {
    expect((await policy("failure_policy: { before_formation: kill_all }")).strategy.afterFormation).toStrictEqual(new Elastic({ maxFailure: new Percent({ p: 50 }) }))
    expect((await policy("failure_policy: { grace: 1s }")).strategy.afterFormation).toStrictEqual(new Elastic({ maxFailure: new Percent({ p: 50 }) }))
    expect(defaultFailurePolicy.strategy.afterFormation).toStrictEqual(new Elastic({ maxFailure: new Percent({ p: 50 }) }))
    // Written out, 50% is the same value as the bare word.
    expect(await after("{ elastic: { max_failure: 50% } }")).toStrictEqual(await after("elastic"))
  })

  test("max_failure: none: no limit, read as an elastic without one and written back as none", async () => {
    const read = await policy("failure_policy: { after_formation: { elastic: { max_failure: none } } }")
    expect(read.strategy.afterFormation).toStrictEqual(new Elastic({}))
    // Still elastic: the default rules come with it.
    expect(read.strategy).toEqual(withDefaultRules(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({}) })))
    const written = encodeFailurePolicy(read) as { readonly after_formation: unknown }
    expect(written.after_formation).toEqual({ elastic: { max_failure: "none" } })
    expect(await strategy("{ elastic: { max_failure: none } }")).toStrictEqual(new Elastic({}))
    expect(await strategy("{ elastic: { max_failure: none, max_failure_base: current } }")).toStrictEqual(new Elastic({ base: "current" }))
    // Only the word itself: `None` is not it.
    expect(await policyProblem("failure_policy: { after_formation: { elastic: { max_failure: None } } }")).toBe(
      `cluster.yml: failure_policy.after_formation.elastic.max_failure (line 1, col 62): expected a count ≥ 0, a percentage like "25%", or none, got "None"`
    )
  })

  test("same_error_on: a number of ranks from 2 to 1000000, refused on either side with the field's place", async () => {
    const rule = (written: string) => `failure_policy:\n  rules:\n    - { when: { same_error_on: ${written} }, then: fail }\n`
    const accepted = (ranks: number) => [new FailureRule({ name: "rule 1", when: new RuleWhen({ sameErrorOn: ranks }), then: new FailRun() })]
    expect((await policy(rule("2"))).strategy.rules).toEqual(accepted(2))
    expect((await policy(rule("1000000"))).strategy.rules).toEqual(accepted(1_000_000))
    const column = "    - { when: { same_error_on: ".length + 1
    for (const [written, quoted] of [["1", "1"], ["1000001", "1000001"], ["2.5", "2.5"], ["0", "0"], ["two", '"two"']] as const) {
      expect(await policyProblem(rule(written))).toBe(
        `cluster.yml: failure_policy.rules[0].when.same_error_on (line 3, col ${column}): expected a number of ranks from 2 to 1000000, got ${quoted}`
      )
    }
  })

  test("max_failure: a count, or a percentage (decimals, exponents, a space before %)", async () => {
    const table: ReadonlyArray<readonly [string, Count | Percent]> = [
      ["0", new Count({ n: 0 })],
      ["2", new Count({ n: 2 })],
      ["1000000", new Count({ n: 1_000_000 })],
      ["25%", new Percent({ p: 25 })],
      ["12.5%", new Percent({ p: 12.5 })],
      ['"25 %"', new Percent({ p: 25 })],
      ["0%", new Percent({ p: 0 })],
      ["100%", new Percent({ p: 100 })],
      ["1e-7%", new Percent({ p: 1e-7 })],
      ["1E+2%", new Percent({ p: 100 })],
      ["1e2%", new Percent({ p: 100 })],
      ["1e-10%", new Percent({ p: 1e-10 })],
      ["12.55%", new Percent({ p: 12.55 })],
      ['" 25%"', new Percent({ p: 25 })],
      ["2.5e-3%", new Percent({ p: 0.0025 })]
    ]
    for (const [text, maxFailure] of table) {
      expect({ text, read: await after(`{ elastic: { max_failure: ${text} } }`) }).toEqual({ text, read: new Elastic({ maxFailure }) })
    }
  })

  test("max_failure: what is not one is refused, quoting it", async () => {
    // [as written in YAML, as the error quotes it]: strings are quoted, numbers are not.
    const refused: ReadonlyArray<readonly [string, string]> = [
      ["101%", '"101%"'], ["100.5%", '"100.5%"'], ["-5%", '"-5%"'], ['"%25"', '"%25"'], ["25%%", '"25%%"'], ["25.%", '"25.%"'],
      ["2.5e%", '"2.5e%"'], ["abc25%", '"abc25%"'], ["25%x", '"25%x"'], ["x", '"x"'], ['"25"', '"25"'],
      ["1000001", "1000001"], ["-1", "-1"], ["1.5", "1.5"], ["true", "true"], ["[25%]", "a list"], ["{ p: 25 }", "a mapping"]
    ]
    const column = "failure_policy: { after_formation: { elastic: { max_failure: ".length + 1
    for (const [written, quoted] of refused) {
      expect(await policyProblem(`failure_policy: { after_formation: { elastic: { max_failure: ${written} } } }`)).toBe(
        `cluster.yml: failure_policy.after_formation.elastic.max_failure (line 1, col ${column}): expected a count ≥ 0, a percentage like "25%", or none, got ${quoted}`
      )
    }
  })

  test("a base: at the top (needs an elastic limit, the default 50% is one), or inside elastic", async () => {
    expect(await after("{ elastic: { max_failure: 50% } }")).toEqual(new Elastic({ maxFailure: new Percent({ p: 50 }) }))
    expect((await policy("failure_policy: { after_formation: { elastic: { max_failure: 50% } }, max_failure_base: current }")).strategy.afterFormation)
      .toEqual(new Elastic({ maxFailure: new Percent({ p: 50 }), base: "current" }))
    expect(await after("{ elastic: { max_failure: 2, max_failure_base: formation } }")).toEqual(new Elastic({ maxFailure: new Count({ n: 2 }), base: "formation" }))
    expect((await policy("failure_policy: { max_failure_base: current }")).strategy.afterFormation).toStrictEqual(new Elastic({ maxFailure: new Percent({ p: 50 }), base: "current" }))
    const why = "only an elastic after_formation policy with a max_failure has a base: add one, or remove max_failure_base"
    expect(await policyProblem("failure_policy: { after_formation: { elastic: { max_failure: none } }, max_failure_base: current }")).toBe(
      `cluster.yml: failure_policy.max_failure_base (line 1, col 90): ${why}`
    )
    expect(await policyProblem("failure_policy: { after_formation: kill_all, max_failure_base: current }")).toBe(`cluster.yml: failure_policy.max_failure_base (line 1, col 64): ${why}`)
    expect(await policyProblem("failure_policy: { after_formation: { elastic: { max_failure_base: now } } }")).toBe(
      `cluster.yml: failure_policy.after_formation.elastic.max_failure_base (line 1, col 67): expected one of "formation", "current", got "now"`
    )
  })

  test("bare words and empty mappings: each strategy with its defaults", async () => {
    expect(await after("kill_all")).toEqual(new KillAll())
    // Strictly: an omitted field is absent, not present as undefined.
    expect(await after("{ kill_all: }")).toStrictEqual(new KillAll())
    expect(await after("{ kill_all: {} }")).toStrictEqual(new KillAll())
    expect(await after("{ elastic: {} }")).toStrictEqual(halfTheWorld)
    expect(await after("{ elastic: { max_failure_base: current } }")).toStrictEqual(new Elastic({ maxFailure: new Percent({ p: 50 }), base: "current" }))
    expect(await after("{ elastic: { max_failure: 1 } }")).toStrictEqual(new Elastic({ maxFailure: new Count({ n: 1 }) }))
    expect(await after("{ elastic: { max_failure: none } }")).toStrictEqual(new Elastic({}))
    expect(await after("elastic")).toStrictEqual(halfTheWorld)
    expect(await after("{ elastic: }")).toStrictEqual(halfTheWorld)
    expect(await after("restart")).toEqual(defaults)
    expect(await after("{ restart: }")).toEqual(defaults)
    expect(await after("{ restart: {} }")).toEqual(defaults)
  })

  test("restart: each field given alone, the others their defaults", async () => {
    expect(await after("{ restart: { max_restarts: 0 } }")).toEqual(new Restart({ ...defaults, maxRestarts: 0 }))
    expect(await after("{ restart: { max_restarts: 1000 } }")).toEqual(new Restart({ ...defaults, maxRestarts: 1_000 }))
    expect(await after("{ restart: { within: 1ms } }")).toEqual(new Restart({ ...defaults, within: 1 }))
    expect(await after("{ restart: { scope: all } }")).toEqual(new Restart({ ...defaults, scope: "all" }))
    const backoff = async (text: string) => ((await after(`{ restart: { backoff: ${text} } }`)) as Restart).backoff
    expect(await backoff("{ factor: 1 }")).toEqual(new Backoff({ initial: 1_000, max: 30_000, factor: 1, jitter: 0.2 }))
    expect(await backoff("{ jitter: 0 }")).toEqual(new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0 }))
    // No max: the default 30 s, or initial where that is larger.
    expect(await backoff("{ initial: 2s }")).toEqual(new Backoff({ initial: 2_000, max: 30_000, factor: 2, jitter: 0.2 }))
    expect(await backoff("{ initial: 1m }")).toEqual(new Backoff({ initial: 60_000, max: 60_000, factor: 2, jitter: 0.2 }))
    // max equal to initial is fine.
    expect(await backoff("{ max: 1s }")).toEqual(new Backoff({ initial: 1_000, max: 1_000, factor: 2, jitter: 0.2 }))
    expect(await policyProblem("failure_policy: { after_formation: { restart: { backoff: { max: 999ms } } } }")).toBe(
      `cluster.yml: failure_policy.after_formation.restart.backoff.max (line 1, col 65): expected a duration ≥ backoff.initial (1s), got "999ms"`
    )
    expect(await policyProblem("failure_policy: { after_formation: { restart: { backoff: { factor: 0.5 } } } }")).toBe(
      `cluster.yml: failure_policy.after_formation.restart.backoff.factor (line 1, col 68): expected a growth factor from 1 to 100, got 0.5`
    )
    // A week is the longest duration anywhere: longer is refused with the place, never a crash (200h was one).
    expect(await after("{ restart: { within: 168h } }")).toEqual(new Restart({ ...defaults, within: 604_800_000 }))
    for (const [text, column, key] of [
      ["failure_policy: { after_formation: { restart: { within: 200h } } }", 57, "after_formation.restart.within"],
      ["failure_policy: { grace: 169h }", 26, "grace"],
      ["failure_policy: { after_formation: { restart: { backoff: { initial: 20000m } } } }", 69, "after_formation.restart.backoff.initial"],
      ["failure_policy: { before_formation: { kill_all: { grace: 1000h } } }", 58, "before_formation.kill_all.grace"]
    ] as const) {
      const found = /: (\d+[hm]) /.exec(text)![1]
      const above = key.endsWith("within") ? " above 0ms" : ""
      expect(await policyProblem(text)).toBe(
        `cluster.yml: failure_policy.${key} (line 1, col ${column}): expected a duration like "250ms", "5s", "10m" or "1h"${above} up to 168h, got "${found}"`
      )
    }
    expect(await policyProblem("failure_policy: { after_formation: { restart: { max_restarts: 1001 } } }")).toBe(
      `cluster.yml: failure_policy.after_formation.restart.max_restarts (line 1, col 63): expected a whole number of restarts from 0 to 1000, got 1001`
    )
  })

  test("a strategy on its own: one word, one key, or both phases", async () => {
    expect(await strategy("kill_all")).toEqual(new KillAll())
    expect(await strategy("{ elastic: { max_failure: 3 } }")).toEqual(new Elastic({ maxFailure: new Count({ n: 3 }) }))
    expect(await strategy("{ before_formation: elastic, after_formation: restart }")).toEqual(new Phased({ beforeFormation: halfTheWorld, afterFormation: defaults }))
    const expected = "expected one of kill_all, elastic, { elastic: { max_failure: … } } or { restart: { … } }"
    expect(await strategyProblem("{ before_formation: kill_all }")).toBe(`policy.yml: after_formation (line 1, col 1): ${expected}, got nothing`)
    expect(await strategyProblem("{ after_formation: kill_all }")).toBe(`policy.yml: before_formation (line 1, col 1): ${expected}, got nothing`)
    expect(await strategyProblem("{}")).toBe("policy.yml: (top level) (line 1, col 1): expected exactly one of kill_all, elastic, restart, got 0")
    expect(await strategyProblem("kill")).toBe(`policy.yml: (top level) (line 1, col 1): ${expected}, got "kill"`)
  })
})
