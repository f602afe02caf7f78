/**
 * Failure rules (issue 23): matching against hand-written tables and a reference model written
 * differently from `matches` (field by field, from the rule's YAML-like description); `decide`
 * carrying out the first match (fail, elastic, ignore, restart with its own intensity) and falling
 * back to the phase's strategy when none matches; the rules' YAML with every mistake placed; the
 * `--dry-run` table.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import fc from "fast-check"
import { ChildExit } from "../src/kernel/ChildExit.ts"
import type { ChildSpec } from "../src/kernel/ChildSpec.ts"
import { decide, type Directive, initialState, SupervisionEvent, type SupervisorState } from "../src/kernel/policy/decide.ts"
import {
  type Cause,
  type Death,
  DropRanks,
  ExitCodes,
  FailRun,
  FailureRule,
  codesText,
  firstMatch,
  globMatches,
  IgnoreExit,
  matches,
  matchesEverything,
  RuleList,
  RuleWhen
} from "../src/kernel/policy/FailureRules.ts"
import * as Schema from "effect/Schema"
import { policyTable, strategyWords } from "../src/kernel/policy/PolicyTable.ts"
import { Backoff, Count, Elastic, KillAll, Percent, Phased, Restart, type Simple } from "../src/kernel/policy/Strategy.ts"
import { encodeFailurePolicy, parseFailurePolicy } from "../src/config/FailurePolicy.ts"
import { anyShutdown } from "./fixtures/child-specs.ts"

const death = (over: Partial<Death> = {}): Death => ({ cause: "exit", exitCode: 1, ranks: [3], host: "gpu-a", phase: "after_formation", ...over })

describe("globs", () => {
  test.each([
    ["spot-*", "spot-7", true],
    ["spot-*", "spot-", true],
    ["spot-*", "ondemand-1", false],
    ["gpu-?", "gpu-a", true],
    ["gpu-?", "gpu-ab", false],
    ["1*", "12", true],
    ["1", "12", false],
    ["a.b", "axb", false],
    ["a.b", "a.b", true],
    ["(x)", "(x)", true]
  ] as const)("%p on %p: %p", (pattern, text, expected) => {
    expect(globMatches(pattern, text)).toBe(expected)
  })
})

describe("a rule's when, field by field", () => {
  test.each([
    ["no field: everything", {}, death(), true],
    ["exit_code in, listed", { exitCodes: new ExitCodes({ op: "in", values: [1, 2] }) }, death({ exitCode: 2 }), true],
    ["exit_code in, not listed", { exitCodes: new ExitCodes({ op: "in", values: [1, 2] }) }, death({ exitCode: 3 }), false],
    ["exit_code not_in, listed", { exitCodes: new ExitCodes({ op: "not_in", values: [0, 143] }) }, death({ exitCode: 143 }), false],
    ["exit_code not_in, not listed", { exitCodes: new ExitCodes({ op: "not_in", values: [0, 143] }) }, death({ exitCode: 1 }), true],
    ["exit_code of a death without one", { exitCodes: new ExitCodes({ op: "not_in", values: [0] }) }, death({ cause: "heartbeat", exitCode: undefined }), false],
    ["signal named", { signals: ["SIGTERM" as const] }, death({ cause: "signal", exitCode: undefined, signal: "SIGTERM" }), true],
    ["signal another", { signals: ["SIGTERM" as const] }, death({ cause: "signal", exitCode: undefined, signal: "SIGKILL" }), false],
    ["cause listed", { causes: ["heartbeat" as const, "host_lost" as const] }, death({ cause: "host_lost" }), true],
    ["cause not listed", { causes: ["heartbeat" as const] }, death({ cause: "exit" }), false],
    ["hosts glob", { hosts: ["spot-*"] }, death({ host: "spot-3" }), true],
    ["hosts glob, another host", { hosts: ["spot-*"] }, death({ host: "gpu-a" }), false],
    ["hosts of a death with no host", { hosts: ["*"] }, death({ host: undefined }), false],
    ["ranks: one of the death's", { ranks: ["1?"] }, death({ ranks: [3, 12] }), true],
    ["ranks: none of them", { ranks: ["0", "1"] }, death({ ranks: [3, 12] }), false],
    ["phase", { phase: "before_formation" as const }, death({ phase: "after_formation" }), false],
    ["log found", { log: "CUDA error|NCCL WARN" }, death({ lines: ["step 3", "NCCL WARN timeout"] }), true],
    ["log not found", { log: "CUDA error" }, death({ lines: ["step 3"] }), false],
    ["log without lines", { log: "." }, death(), false],
    ["same_error_on reached", { sameErrorOn: 2 }, death({ sameErrorOn: 2 }), true],
    ["same_error_on passed", { sameErrorOn: 2 }, death({ sameErrorOn: 5 }), true],
    ["same_error_on not reached", { sameErrorOn: 3 }, death({ sameErrorOn: 2 }), false],
    ["same_error_on of a death with no count (no signature, or secondary)", { sameErrorOn: 2 }, death(), false],
    ["every field must hold", { causes: ["exit" as const], exitCodes: new ExitCodes({ op: "in", values: [1] }), hosts: ["gpu-b"] }, death(), false]
  ])("%s", (_, when, given, expected) => {
    expect(matches(new RuleWhen(when), given)).toBe(expected)
  })
})

// ---------------------------------------------------------------------------------------------------------
// The first match, against a model: each rule as a list of yes/no questions, asked in order.
// ---------------------------------------------------------------------------------------------------------

interface ModelRule {
  readonly codes?: { readonly in: boolean; readonly values: ReadonlyArray<number> }
  readonly causes?: ReadonlyArray<Cause>
  readonly hostPrefix?: string
  readonly phase?: Death["phase"]
}

const asRule = (model: ModelRule, index: number) =>
  new FailureRule({
    name: `r${index}`,
    when: new RuleWhen({
      ...(model.codes === undefined ? {} : { exitCodes: new ExitCodes({ op: model.codes.in ? "in" : "not_in", values: model.codes.values }) }),
      ...(model.causes === undefined ? {} : { causes: model.causes }),
      ...(model.hostPrefix === undefined ? {} : { hosts: [`${model.hostPrefix}*`] }),
      ...(model.phase === undefined ? {} : { phase: model.phase })
    }),
    then: new IgnoreExit()
  })

/** The model's answer: the index of the first rule none of whose questions says no. */
const modelFirst = (rules: ReadonlyArray<ModelRule>, given: Death): number | undefined => {
  for (let index = 0; index < rules.length; index++) {
    const rule = rules[index]!
    const answers: Array<boolean> = []
    if (rule.codes !== undefined) answers.push(given.exitCode !== undefined && rule.codes.values.includes(given.exitCode) === rule.codes.in)
    if (rule.causes !== undefined) answers.push(rule.causes.includes(given.cause))
    if (rule.hostPrefix !== undefined) answers.push(given.host !== undefined && given.host.startsWith(rule.hostPrefix))
    if (rule.phase !== undefined) answers.push(rule.phase === given.phase)
    if (answers.every(Boolean)) return index
  }
  return undefined
}

const causeArb = fc.constantFrom<Cause>("exit", "signal", "heartbeat", "host_lost", "oom")
const modelRuleArb: fc.Arbitrary<ModelRule> = fc.record(
  {
    codes: fc.record({ in: fc.boolean(), values: fc.uniqueArray(fc.integer({ min: 0, max: 4 }), { minLength: 1, maxLength: 3 }) }),
    causes: fc.uniqueArray(causeArb, { minLength: 1, maxLength: 3 }),
    hostPrefix: fc.constantFrom("spot-", "gpu-", "g"),
    phase: fc.constantFrom<Death["phase"]>("before_formation", "after_formation")
  },
  { requiredKeys: [] }
)
const deathArb: fc.Arbitrary<Death> = fc.record({
  cause: causeArb,
  exitCode: fc.option(fc.integer({ min: 0, max: 4 }), { nil: undefined }),
  ranks: fc.constant([0]),
  host: fc.option(fc.constantFrom("spot-1", "gpu-a", "ondemand"), { nil: undefined }),
  phase: fc.constantFrom<Death["phase"]>("before_formation", "after_formation")
})

test("the first rule that matches decides, none matching is undefined: as the model says", () => {
  fc.assert(
    fc.property(fc.array(modelRuleArb, { maxLength: 6 }), deathArb, (models, given) => {
      const found = firstMatch(models.map(asRule), given)
      expect(found?.index).toBe(modelFirst(models, given))
      if (found !== undefined) expect(found.rule.name).toBe(`r${found.index}`)
    }),
    { seed: 2301, numRuns: 2_000 }
  )
})

// ---------------------------------------------------------------------------------------------------------
// decide with rules
// ---------------------------------------------------------------------------------------------------------

const rank = (n: number, host = "gpu-a"): ChildSpec => ({ id: `r${n}`, label: `rank ${n} of ${host}`, ranks: [n], group: host, restart: "transient", significant: false, shutdown: anyShutdown })
const noJitter = new Backoff({ initial: 100, max: 100, factor: 1, jitter: 0 })
const rule = (name: string, when: ConstructorParameters<typeof RuleWhen>[0], then: FailureRule["then"]) => new FailureRule({ name, when: new RuleWhen(when), then })

const supervise = (rules: ReadonlyArray<FailureRule>, after: Simple = new Elastic({}), children = [rank(0), rank(1), rank(2, "spot-1"), rank(3, "spot-2")]) => {
  const strategy = new Phased({ beforeFormation: new KillAll(), afterFormation: after, rules })
  let state: SupervisorState = initialState(children)
  const step = (event: SupervisionEvent, now = 0): ReadonlyArray<Directive> => {
    const [directives, next] = decide(strategy, state, event, now)
    state = next
    return directives
  }
  step(SupervisionEvent.Boot())
  step(SupervisionEvent.CohortFormed())
  return {
    step,
    /** Without the operator's notes. */
    act: (event: SupervisionEvent, now = 0) => step(event, now).filter((directive) => directive._tag !== "Note"),
    get state() {
      return state
    }
  }
}

const exited = (id: string, code: number) => SupervisionEvent.ChildExited({ id, exit: ChildExit.Exited({ code }) })
const signaled = (id: string, signal: string) => SupervisionEvent.ChildExited({ id, exit: ChildExit.Signaled({ signal }) })

describe("decide with failure rules", () => {
  const rules = [
    rule("user-bug", { exitCodes: new ExitCodes({ op: "in", values: [1, 2] }) }, new FailRun()),
    rule("spot", { causes: ["host_lost", "heartbeat"], hosts: ["spot-*"] }, new DropRanks()),
    rule("asked", { signals: ["SIGTERM"], phase: "after_formation" }, new IgnoreExit())
  ]

  test("fail: the run fails with the death as its root cause, naming the rule; the siblings get their grace", () => {
    const run = supervise(rules)
    expect(run.act(exited("r1", 2))).toEqual([
      { _tag: "RuleMatched", rule: "user-bug", action: "fail", ranks: [1] },
      { _tag: "Terminate", ids: ["r3", "r2", "r0"], mode: "graceful", reason: "rank 1 of gpu-a exited with status 2 (rule user-bug): stopping every sibling" }
    ])
    for (const id of ["r0", "r2", "r3"]) run.step(signaled(id, "SIGTERM"))
    expect(run.state.verdict).toMatchObject({ _tag: "Failed", kind: "child-failed", message: "rank 1 of gpu-a exited with status 2 (rule user-bug)" })
  })

  test("no rule matches: the phase's strategy decides (elastic here: the rank is reported dead)", () => {
    const run = supervise(rules)
    expect(run.act(exited("r1", 3))).toEqual([{ _tag: "ReportDead", ranks: [1], cause: "rank 1 of gpu-a exited with status 3", kind: "exit" }])
    expect(run.state.dead).toEqual([1])
  })

  test("ignore: not a death, not counted, not reported", () => {
    const run = supervise(rules, new Elastic({ maxFailure: new Count({ n: 1 }) }))
    expect(run.act(signaled("r0", "SIGTERM"))).toEqual([{ _tag: "RuleMatched", rule: "asked", action: "ignore", ranks: [0] }])
    expect(run.state.dead).toEqual([])
    expect(run.state.children.find((child) => child.spec.id === "r0")?.status).toBe("exited")
    for (const id of ["r1", "r2", "r3"]) run.step(exited(id, 0))
    expect(run.state.verdict).toEqual(expect.objectContaining({ _tag: "Completed", dead: 0, tolerated: 0 }))
  })

  test("a lost host's ranks (cause host_lost) on a spot host: elastic by the rule; on another host the phase decides", () => {
    const lost = (id: string, host: string) => SupervisionEvent.ChildExited({ id, exit: ChildExit.Crashed({ detail: `lost the agent of ${host}`, cause: "host_lost" }) })
    const run = supervise(rules, new KillAll())
    expect(run.act(lost("r2", "spot-1"))).toEqual([{ _tag: "RuleMatched", rule: "spot", action: "elastic", ranks: [2] }, { _tag: "ReportDead", ranks: [2], cause: "rank 2 of spot-1 exited with crash: lost the agent of spot-1 (rule spot)", kind: "host_lost", rule: "spot" }])
    const [stop] = run.act(lost("r0", "gpu-a"))
    expect(stop).toMatchObject({ _tag: "Terminate", mode: "graceful", reason: "rank 0 of gpu-a exited with crash: lost the agent of gpu-a: terminating every sibling (kill_all)" })
  })

  test("silence (RanksLost, heartbeat) matched by host: counted as the rule says, and the rank's exit after it is not judged again", () => {
    const run = supervise([rule("spot", { causes: ["heartbeat"], hosts: ["spot-*"] }, new DropRanks()), rule("sigkill", { signals: ["SIGKILL"] }, new FailRun())])
    expect(run.act(SupervisionEvent.RanksLost({ ranks: [3], reason: "no heartbeat for 30.0 s", cause: "heartbeat" }))).toEqual([
      { _tag: "RuleMatched", rule: "spot", action: "elastic", ranks: [3] }
    ])
    expect(run.state.dead).toEqual([3])
    // Killed for its silence: the end of the loss the rule judged, not a SIGKILL to fail the run for.
    expect(run.act(signaled("r3", "SIGKILL"))).toEqual([])
    expect(run.state.failure).toBeUndefined()
  })

  test("a loss a rule judged ends at the child's exit, even one a group restart asked for: the new incarnation's death is judged afresh", () => {
    const groupRestart = new Restart({ maxRestarts: 5, within: 600_000, backoff: noJitter, scope: "all" })
    const run = supervise(
      [rule("spot-silence", { causes: ["heartbeat"], hosts: ["spot-*"] }, new Restart({ maxRestarts: 5, within: 600_000, backoff: noJitter, scope: "one" })), rule("bug", { exitCodes: new ExitCodes({ op: "in", values: [3] }) }, new FailRun())],
      groupRestart
    )
    // Rank 2 falls silent: the rule will restart it at its exit.
    expect(run.act(SupervisionEvent.RanksLost({ ranks: [2], reason: "no heartbeat for 30.0 s", cause: "heartbeat" }))).toEqual([
      { _tag: "RuleMatched", rule: "spot-silence", action: "restart", ranks: [2] }
    ])
    // Before its exit comes, rank 0 fails: the whole group is stopped and comes back, rank 2 with it.
    expect(run.act(exited("r0", 1), 10)).toContainEqual(expect.objectContaining({ _tag: "Terminate", ids: ["r3", "r2", "r1"], mode: "graceful" }))
    for (const id of ["r1", "r2", "r3"]) run.step(signaled(id, "SIGTERM"), 20)
    for (const id of ["r0", "r1", "r2", "r3"]) run.step(SupervisionEvent.RestartDue({ id }), 200)
    expect(run.state.children.map((child) => [child.spec.id, child.status])).toEqual([["r0", "running"], ["r1", "running"], ["r2", "running"], ["r3", "running"]])
    // The new rank 2 dies of the bug: the bug rule fails the run (not the old silence's restart).
    const directives = run.act(exited("r2", 3), 1_000)
    expect(directives[0]).toEqual({ _tag: "RuleMatched", rule: "bug", action: "fail", ranks: [2] })
    expect(run.state.failure).toBeDefined()
  })

  test("restart rules keep their own intensity, apart from the strategy's and from each other", () => {
    const restartOnce = new Restart({ maxRestarts: 1, within: 600_000, backoff: noJitter, scope: "one" })
    const run = supervise([rule("oom-ish", { exitCodes: new ExitCodes({ op: "in", values: [137] }) }, restartOnce)], new Restart({ maxRestarts: 5, within: 600_000, backoff: noJitter, scope: "one" }))
    // The strategy's own restarts (status 3) do not use up the rule's one.
    for (let at = 0; at < 3; at++) {
      expect(run.act(exited("r0", 3), at * 1_000)).toEqual([{ _tag: "Restart", id: "r0", after: 100 }])
      run.step(SupervisionEvent.RestartDue({ id: "r0" }), at * 1_000 + 100)
    }
    expect(run.act(exited("r1", 137), 10_000)).toEqual([{ _tag: "RuleMatched", rule: "oom-ish", action: "restart", ranks: [1] }, { _tag: "Restart", id: "r1", after: 100 }])
    run.step(SupervisionEvent.RestartDue({ id: "r1" }), 10_100)
    // The rule's second restart within its window escalates, though the strategy still has room.
    const escalated = run.act(exited("r1", 137), 11_000).filter((directive) => directive._tag !== "RuleMatched")
    expect(escalated[0]).toMatchObject({ _tag: "Escalate" })
    expect((escalated[0] as Extract<Directive, { _tag: "Escalate" }>).cause).toContain("(rule oom-ish); restart intensity exceeded: rank 1 of gpu-a would be restart 2 within 10m (max_restarts 1)")
  })

  test("ignore never counts, whatever the death: a property over exits and rules that ignore some of them", () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 1, max: 5 }), { minLength: 1, maxLength: 3 }), fc.array(fc.integer({ min: 1, max: 5 }), { minLength: 4, maxLength: 4 }), (ignored, codes) => {
        const run = supervise([rule("ignored", { exitCodes: new ExitCodes({ op: "in", values: ignored }) }, new IgnoreExit())])
        codes.forEach((code, index) => run.step(exited(`r${index}`, code)))
        const expectedDead = codes.flatMap((code, index) => (ignored.includes(code) ? [] : [index]))
        expect(run.state.dead).toEqual(expectedDead)
        expect(run.state.verdict?._tag).toBe(expectedDead.length === 4 ? "Failed" : "Completed")
        if (run.state.verdict?._tag === "Completed") expect(run.state.verdict.tolerated).toBe(0)
      }),
      { seed: 2302, numRuns: 300 }
    )
  })
})

// ---------------------------------------------------------------------------------------------------------
// The file, and --dry-run's table
// ---------------------------------------------------------------------------------------------------------

const policyOf = (yaml: string) => Effect.runPromise(Effect.either(parseFailurePolicy(yaml, "cluster.yml")))

describe("rules in the file", () => {
  test("the issue's example decodes to its rules, in order, a rule without a name named by its place", async () => {
    const read = await policyOf([
      "failure_policy:",
      "  after_formation: { elastic: { max_failure: 25% } }",
      "  rules:",
      "    - name: user-bug",
      "      when: { exit_code: [1, 2] }",
      "      then: fail",
      "    - name: oom",
      "      when: { cause: [oom] }",
      "      then: { restart: { max_restarts: 2, within: 10m } }",
      "    - name: spot",
      "      when: { cause: [host_lost, heartbeat], hosts: [\"spot-*\"] }",
      "      then: elastic",
      "    - when: { exit_code: { not_in: [0, 143] }, ranks: [0, \"1*\"] }",
      "      then: ignore"
    ].join("\n"))
    if (read._tag === "Left") throw new Error(read.left.message)
    const rules = read.right.strategy.rules!
    expect(rules.map((each) => [each.name, each.then._tag])).toEqual([["user-bug", "FailRun"], ["oom", "Restart"], ["spot", "DropRanks"], ["rule 4", "IgnoreExit"]])
    expect(rules[0]!.when.exitCodes).toEqual(new ExitCodes({ op: "in", values: [1, 2] }))
    expect(rules[1]!.then).toMatchObject({ maxRestarts: 2, within: 600_000 })
    expect(rules[2]!.when).toMatchObject({ causes: ["host_lost", "heartbeat"], hosts: ["spot-*"] })
    expect(rules[3]!.when).toMatchObject({ exitCodes: { op: "not_in", values: [0, 143] }, ranks: ["0", "1*"] })
  })

  test("exit codes as ranges: read as every status in them, written back as ranges where three or more run on", async () => {
    const read = await policyOf("failure_policy:\n  rules: [{ when: { exit_code: [1, 2, \"64-66\", 70, \" 8 - 9 \"] }, then: fail }]")
    if (read._tag === "Left") throw new Error(read.left.message)
    expect(read.right.strategy.rules![0]!.when.exitCodes).toEqual(new ExitCodes({ op: "in", values: [1, 2, 64, 65, 66, 70, 8, 9] }))
    expect(encodeFailurePolicy(read.right)).toMatchObject({ rules: [{ when: { exit_code: [1, 2, "64-66", 70, 8, 9] } }] })
    const backwards = await policyOf("failure_policy:\n  rules: [{ when: { exit_code: [\"9-3\"] }, then: fail }]")
    expect(backwards._tag === "Left" ? backwards.left.message : "").toContain(`expected an exit code from 0 to 255, or a range like "1-127", got "9-3"`)
  })

  test("every mistake at once, each at its line and column", async () => {
    const read = await policyOf([
      "failure_policy:",
      "  rules:",
      "    - when: { cause: [oops], signal: [SIGFOO], log: \"(\", exit_code: [300], color: red }",
      "      then: explode"
    ].join("\n"))
    expect(read._tag === "Left" ? read.left.message.split("\n") : []).toEqual([
      `cluster.yml: failure_policy.rules[0].when.cause[0] (line 3, col 23): expected one of exit, signal, exception, oom, heartbeat, host_lost, relay_lost, nccl, rendezvous, peer_lost, got "oops"`,
      `cluster.yml: failure_policy.rules[0].when.signal[0] (line 3, col 39): expected a signal name like SIGTERM (33 known), got "SIGFOO"`,
      `cluster.yml: failure_policy.rules[0].when.log (line 3, col 53): expected a regular expression, got "(" (missing ))`,
      `cluster.yml: failure_policy.rules[0].when.exit_code[0] (line 3, col 70): expected an exit code from 0 to 255, or a range like "1-127", got 300`,
      `cluster.yml: failure_policy.rules[0].when (line 3, col 76): unknown key "color"; known keys: exit_code, signal, cause, ranks, hosts, phase, log, same_error_on`,
      `cluster.yml: failure_policy.rules[0].then (line 4, col 13): expected one of fail, elastic, ignore or { restart: { … } }, got "explode"`
    ])
  })

  test("a rule after one with an empty when can never match: refused at the later rule", async () => {
    const read = await policyOf(["failure_policy:", "  rules:", "    - then: fail", "    - when: { cause: [exit] }", "      then: elastic"].join("\n"))
    expect(read._tag === "Left" ? read.left.message : "").toBe(
      "cluster.yml: failure_policy.rules[1] (line 4, col 7): this rule can never match: rules[0] before it has an empty when, which matches every death"
    )
  })
})

describe("--dry-run's table", () => {
  test("per cause and phase: the rules that may decide, with what they still ask, then the strategy; one row when both phases agree", () => {
    const strategy = new Phased({
      beforeFormation: new KillAll(),
      afterFormation: new Elastic({ maxFailure: new Percent({ p: 25 }) }),
      rules: [
        rule("user-bug", { exitCodes: new ExitCodes({ op: "in", values: [1, 2] }) }, new FailRun()),
        rule("spot", { causes: ["host_lost", "heartbeat"], hosts: ["spot-*"] }, new DropRanks()),
        rule("oom", { causes: ["oom"] }, new Restart({ maxRestarts: 2, within: 600_000, backoff: noJitter, scope: "one" })),
        rule("asked", { signals: ["SIGTERM"], phase: "after_formation" }, new IgnoreExit())
      ]
    })
    expect(policyTable(strategy)).toEqual([
      "cause       formation  what happens",
      "exit        before     exit_code 1, 2: fail [user-bug]; else kill_all",
      "exit        after      exit_code 1, 2: fail [user-bug]; else elastic (max_failure 25%)",
      "signal      before     kill_all",
      "signal      after      signal SIGTERM: ignore [asked]; else elastic (max_failure 25%)",
      "exception   before     exit_code 1, 2: fail [user-bug]; else kill_all",
      "exception   after      exit_code 1, 2: fail [user-bug]; else elastic (max_failure 25%)",
      "oom         both       restart (2 within 10m) [oom]",
      "heartbeat   before     hosts spot-*: elastic [spot]; else kill_all",
      "heartbeat   after      hosts spot-*: elastic [spot]; else elastic (max_failure 25%)",
      "host_lost   before     hosts spot-*: elastic [spot]; else kill_all",
      "host_lost   after      hosts spot-*: elastic [spot]; else elastic (max_failure 25%)",
      "relay_lost  before     kill_all",
      "relay_lost  after      elastic (max_failure 25%)",
      "nccl        before     kill_all",
      "nccl        after      elastic (max_failure 25%)",
      "rendezvous  before     kill_all",
      "rendezvous  after      elastic (max_failure 25%)",
      // A secondary death keeps its exit status: a rule on exit codes alone may still take it.
      "peer_lost   before     exit_code 1, 2: fail [user-bug]; else kill_all",
      "peer_lost   after      exit_code 1, 2: fail [user-bug]; else elastic (max_failure 25%)"
    ])
  })

  test("the default rule: the same error on 2 ranks fails the run, after formation, for the deaths that have a signature", () => {
    const strategy = new Phased({
      beforeFormation: new KillAll(),
      afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }),
      rules: [rule("repeated-error", { sameErrorOn: 2, phase: "after_formation" }, new FailRun())]
    })
    expect(policyTable(strategy)).toEqual([
      "cause       formation  what happens",
      "exit        before     kill_all",
      "exit        after      the same error on 2 ranks: fail [repeated-error]; else elastic (max_failure 50%)",
      "signal      before     kill_all",
      "signal      after      elastic (max_failure 50%)",
      "exception   before     kill_all",
      "exception   after      the same error on 2 ranks: fail [repeated-error]; else elastic (max_failure 50%)",
      "oom         before     kill_all",
      "oom         after      elastic (max_failure 50%)",
      "heartbeat   before     kill_all",
      "heartbeat   after      elastic (max_failure 50%)",
      "host_lost   before     kill_all",
      "host_lost   after      elastic (max_failure 50%)",
      "relay_lost  before     kill_all",
      "relay_lost  after      elastic (max_failure 50%)",
      "nccl        before     kill_all",
      "nccl        after      the same error on 2 ranks: fail [repeated-error]; else elastic (max_failure 50%)",
      "rendezvous  before     kill_all",
      "rendezvous  after      elastic (max_failure 50%)",
      // A secondary death is never counted as a repeat of an error.
      "peer_lost   before     kill_all",
      "peer_lost   after      elastic (max_failure 50%)"
    ])
  })
})

describe("the rules' smaller parts", () => {
  test("a strategy in a few words: each elastic limit, and none said as such", () => {
    expect(strategyWords(new Elastic({}))).toBe("elastic (no limit)")
    expect(strategyWords(new Elastic({ maxFailure: new Percent({ p: 50 }) }))).toBe("elastic (max_failure 50%)")
    expect(strategyWords(new Elastic({ maxFailure: new Count({ n: 2 }) }))).toBe("elastic (max_failure 2)")
  })

  test.each([
    [[1, 2, 3, 7], "1-3, 7"],
    [[1, 2], "1, 2"],
    [[5], "5"],
    [[], ""],
    [[3, 4, 5, 6, 9, 10, 11], "3-6, 9-11"],
    [[1, 3, 2], "1, 3, 2"],
    [[0, 1, 2, 4, 5, 6, 255], "0-2, 4-6, 255"]
  ] as const)("exit codes %p are written %p", (codes, text) => {
    expect(codesText(codes)).toBe(text)
  })

  test("a when matches everything only with no field at all", () => {
    expect(matchesEverything(new RuleWhen({}))).toBe(true)
    for (const field of [
      { exitCodes: new ExitCodes({ op: "in", values: [1] }) },
      { signals: ["SIGTERM" as const] },
      { causes: ["exit" as const] },
      { ranks: ["0"] },
      { hosts: ["a"] },
      { phase: "after_formation" as const },
      { log: "x" },
      { sameErrorOn: 2 }
    ]) expect(matchesEverything(new RuleWhen(field))).toBe(false)
  })

  test("the rule list refuses a rule after a catch-all, and only then", () => {
    const catchAll = rule("all", {}, new FailRun())
    const some = rule("some", { causes: ["exit"] }, new DropRanks())
    const read = (rules: ReadonlyArray<FailureRule>) => Schema.decodeUnknownEither(RuleList)(rules)
    expect(read([]) ._tag).toBe("Right")
    expect(read([catchAll])._tag).toBe("Right")
    expect(read([some, catchAll])._tag).toBe("Right")
    const refused = read([some, catchAll, some])
    expect(refused._tag === "Left" ? refused.left.message : "").toContain("rules after rules[1] can never match: its empty when matches every death")
  })

  test.each([
    ["one of several signals", { signals: ["SIGTERM" as const, "SIGKILL" as const] }, death({ cause: "signal", exitCode: undefined, signal: "SIGKILL" }), true],
    ["one of several rank globs", { ranks: ["0", "1?"] }, death({ ranks: [12] }), true],
    ["one of several host globs", { hosts: ["a*", "spot-*"] }, death({ host: "spot-3" }), true]
  ])("a list matches when %s does", (_, when, given, expected) => {
    expect(matches(new RuleWhen(when), given)).toBe(expected)
  })
})

describe("--dry-run's table, other forms", () => {
  test("a single strategy for both phases, its words, and every kind of condition", () => {
    const restartAll = new Restart({ maxRestarts: 4, within: 60_000, backoff: noJitter, scope: "all" })
    expect(policyTable(restartAll)).toEqual([
      "cause       formation  what happens",
      ...["exit", "signal", "exception", "oom", "heartbeat", "host_lost", "relay_lost", "nccl", "rendezvous", "peer_lost"].map((cause) => `${cause.padEnd(10)}  both       restart (4 within 1m, all)`)
    ])
    const strategy = new Phased({
      beforeFormation: new KillAll({ grace: 0 }),
      afterFormation: new Elastic({ maxFailure: new Count({ n: 2 }) }),
      rules: [
        rule("odd", { exitCodes: new ExitCodes({ op: "not_in", values: [0, 143] }), ranks: ["1*"] }, new IgnoreExit()),
        rule("loud", { signals: ["SIGINT", "SIGQUIT"], log: "panic" }, new FailRun())
      ]
    })
    const rows = policyTable(strategy)
    expect(rows).toContain("exit        before     exit_code not 0, 143 and ranks 1*: ignore [odd]; else kill_all (no grace)")
    expect(rows).toContain("exit        after      exit_code not 0, 143 and ranks 1*: ignore [odd]; else elastic (max_failure 2)")
    expect(rows).toContain("signal      before     signal SIGINT, SIGQUIT and log /panic/: fail [loud]; else kill_all (no grace)")
    expect(rows).toContain("oom         before     signal SIGINT, SIGQUIT and log /panic/: fail [loud]; else kill_all (no grace)")
    expect(rows).toContain("heartbeat   before     kill_all (no grace)")
  })
})
