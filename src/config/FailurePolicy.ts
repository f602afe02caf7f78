/**
 * The `failure_policy` section of a cluster file: the user-facing form of the
 * supervision strategies in `kernel/policy/Strategy`.
 *
 * ```yaml
 * failure_policy:
 *   before_formation: kill_all                 # default; { kill_all: { grace: 0s } } kills the siblings at once
 *   after_formation:
 *     elastic: { max_failure: 25% }            # or a count: 2; omitted: 50%; none tolerates any partial loss
 *   # after_formation:
 *   #   restart: { max_restarts: 3, within: 10m, backoff: { initial: 1s, max: 30s, factor: 2, jitter: 0.2 }, scope: all }
 *   grace: 5s                                  # SIGTERM → SIGKILL
 *   heartbeat_timeout: 30s                     # a rank silent this long is dead (scaled by COHORT_NET_TIMEOUT_SCALE)
 *   max_failure_base: formation                # or current: a max_failure percentage of every rank the run has had
 * ```
 *
 * A single strategy is written `kill_all`, `elastic` (max_failure 50%),
 * `{ elastic: { max_failure: … } }` or `{ restart: { … } }`; a phased one as a
 * mapping with `before_formation` and `after_formation`.
 *
 * Each form is a Schema transformed into the classes of `kernel/policy/Strategy`.
 * A written value is checked by the field schema of the class it goes into
 * (`Restart.fields.maxRestarts`, `Strategy.Millis`, …), so every bound is
 * defined once, there, and the messages read theirs from it (`rangeOf`).
 * `encodeStrategy` is `Schema.encode` of the same schemas: what it writes,
 * `decodeStrategy` reads back to the same value.
 */
import type * as Effect from "effect/Effect"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { stringify } from "yaml"
import { Backoff, Count, Elastic, FailureBase, KillAll, Millis, Percent, Phased, Restart, Simple, type Strategy } from "../kernel/policy/Strategy.ts"
import {
  Cause,
  causes,
  codeRuns,
  DropRanks,
  ExitCode,
  ExitCodes,
  FailRun,
  FailureRule,
  Glob,
  IgnoreExit,
  matchesEverything,
  Pattern,
  PolicyPhase,
  RuleAction,
  RuleList,
  RuleWhen,
  SameErrorOn,
  SignalName,
  signalNames
} from "../kernel/policy/FailureRules.ts"
import { formatDuration } from "./reading/Duration.ts"
import { durationText } from "./reading/DurationSchema.ts"
import { expectedAt, expecting, rangeOf } from "./reading/Expected.ts"
import { keyGroups, keyOr, optionalKey } from "./reading/Mapping.ts"
import { decodeField } from "./reading/SchemaField.ts"
import { type ConfigErrors, type Field, parse } from "./reading/Yaml.ts"

export interface FailurePolicy {
  readonly strategy: Phased
  /** SIGTERM → SIGKILL, in milliseconds. */
  readonly grace: number
  /** A rank (or, seen from a rank, the coordinator) silent this long is dead, in milliseconds, before scaling. */
  readonly heartbeatTimeout: number
  /** The exit status of a run that completed with ranks lost (DEGRADED): 0 by default, any other for a CI that must see it. */
  readonly degradedExit: number
}

/** The status a Python rank exits with when it leaves `cohort.MemberLost` uncaught (python/cohort/_errors.py). */
export const MEMBER_LOST_STATUS = 75

/**
 * The rules a file gets when it says none and its `after_formation` is elastic: a bug is what repeats. One
 * rank's error may be its own machine's (a bad GPU, a flaky read: what elasticity is for), and a death
 * that followed another (a survivor's collective failing as its peer went) is `peer_lost`, never a bug;
 * but the same error on a second rank, neither of them secondary, is a bug every rank will meet, and the
 * run fails with it rather than finishing DEGRADED (a bug CI would pass). Before formation kill_all
 * already fails the run. `rules: []` turns them off; a file's own rules replace them.
 */
export const defaultRules: ReadonlyArray<FailureRule> = [
  // A Python rank that left cohort.MemberLost uncaught (status 75) only lost a peer during a collective of its own:
  // it comes back (at the next epoch boundary, from the consensus weights) rather than count as dead. One restart per
  // survivor of each death: the bound is for a loop, not for the deaths of a long run.
  new FailureRule({
    name: "member-lost",
    when: new RuleWhen({ causes: ["peer_lost"], exitCodes: new ExitCodes({ op: "in", values: [MEMBER_LOST_STATUS] }), phase: "after_formation" }),
    then: new Restart({ maxRestarts: 1_000, within: 600_000, backoff: new Backoff({ initial: 0, max: 30_000, factor: 2, jitter: 0 }), scope: "one" })
  }),
  new FailureRule({ name: "repeated-error", when: new RuleWhen({ sameErrorOn: 2, phase: "after_formation" }), then: new FailRun() })
]

/**
 * `max_failure` when a file (or `--policy elastic`) leaves it out: half the world. A run that lost half its
 * ranks fails with the consensus checkpoint, as a torchrun user expects a job that lost its nodes to
 * fail, instead of finishing with a quarter of its ranks and exit 0. `max_failure: none` tolerates any
 * partial loss.
 */
export const defaultMaxFailure = new Percent({ p: 50 })

/** The elastic strategy with its defaults: what `elastic` and `{ elastic: {} }` say. */
const defaultElastic = new Elastic({ maxFailure: defaultMaxFailure })

/** The rules of a policy: its file's, else the defaults under an elastic after_formation, else none (no key). */
const rulesOf = (written: ReadonlyArray<FailureRule> | undefined, afterFormation: Simple): { readonly rules?: ReadonlyArray<FailureRule> } =>
  written !== undefined ? { rules: written } : afterFormation._tag === "Elastic" ? { rules: defaultRules } : {}

export const defaultFailurePolicy: FailurePolicy = {
  strategy: new Phased({ beforeFormation: new KillAll(), afterFormation: defaultElastic, rules: defaultRules }),
  grace: 5_000,
  heartbeatTimeout: 30_000,
  degradedExit: 0
}

const defaultRestart = new Restart({
  maxRestarts: 3,
  within: 600_000,
  backoff: new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0.2 }),
  scope: "one"
})

/** At least 2 s: beats go out every second at the fastest (`beatEveryMs`), and one late beat must not be a death. */
const HeartbeatTimeout = Millis.pipe(Schema.greaterThanOrEqualTo(2_000))

/**
 * A YAML form read into `target`, whose own schema checks what the form gives
 * it: the bounds stay the target's, and a value its constructor would throw
 * on is a refusal instead. Encoding writes the target back in the YAML form.
 */
const readInto = <F extends Schema.Schema.AnyNoContext, T extends Schema.Schema.AnyNoContext>(
  form: F,
  target: T,
  read: (written: Schema.Schema.Type<F>) => Schema.Schema.Encoded<T>,
  write: (value: Schema.Schema.Type<T>) => Schema.Schema.Type<F>
) =>
  Schema.transformOrFail(form, Schema.typeSchema(target), {
    strict: true,
    decode: (written, options) => ParseResult.decodeUnknownEither(target)(read(written), options),
    encode: (value) => ParseResult.succeed(write(value))
  })

/** `max_failure: 2`. */
const FailureCount = readInto(Count.fields.n, Count, (n) => ({ _tag: "Count" as const, n }), ({ n }) => n)

/** `max_failure: 25%`; exponents are accepted because that is how tiny fractions print (`1e-7%`). */
const FailurePercent = readInto(
  Schema.transformOrFail(Schema.String, Percent.fields.p, {
    strict: true,
    decode: (text, _, ast) => {
      const match = /^(\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*%$/i.exec(text.trim())
      return match === null ? ParseResult.fail(new ParseResult.Type(ast, text)) : ParseResult.succeed(Number(match[1]))
    },
    encode: (p) => ParseResult.succeed(`${p}%`)
  }),
  Percent,
  (p) => ({ _tag: "Percent" as const, p }),
  ({ p }) => p
)

const MaxFailure = Schema.Union(FailureCount, FailurePercent).pipe(
  expecting(`a count ≥ ${rangeOf(Count.fields.n).min}, a percentage like "25%", or none`)
)

/** `max_failure: none`: no limit, any partial loss is tolerated (losing every rank still fails the run). */
const NoLimit = Schema.Literal("none")

/** `kill_all: { grace: 0s }`: siblings are killed at once instead of getting SIGTERM and a grace. */
const KillAllOptions = readInto(
  Schema.Struct({ grace: optionalKey(durationText(Millis)) }),
  KillAll,
  ({ grace }) => ({ _tag: "KillAll" as const, ...(grace === undefined ? {} : { grace }) }),
  ({ grace }) => (grace === undefined ? {} : { grace })
)

const ElasticOptions = readInto(
  Schema.Struct({
    max_failure: keyOr(Schema.Union(NoLimit, MaxFailure).pipe(expecting(`a count ≥ ${rangeOf(Count.fields.n).min}, a percentage like "25%", or none`)), defaultMaxFailure),
    max_failure_base: optionalKey(FailureBase)
  }),
  Elastic,
  ({ max_failure, max_failure_base }) => ({
    _tag: "Elastic" as const,
    ...(max_failure === "none" ? {} : { maxFailure: max_failure }),
    ...(max_failure_base === undefined ? {} : { base: max_failure_base })
  }),
  ({ base, maxFailure }) => ({
    max_failure: maxFailure ?? ("none" as const),
    ...(base === undefined ? {} : { max_failure_base: base })
  })
)

const { max: maxRestarts, min: minRestarts } = rangeOf(Restart.fields.maxRestarts)
const factorRange = rangeOf(Backoff.fields.factor)
const jitterRange = rangeOf(Backoff.fields.jitter)

/** `initial` and `max`, read together: an absent max depends on initial, and may not be below it. */
const BackoffDelays = Schema.transformOrFail(
  Schema.Struct({ initial: optionalKey(durationText(Backoff.fields.initial)), max: optionalKey(durationText(Backoff.fields.max)) }),
  Schema.Struct({ initial: Backoff.fields.initial, max: Backoff.fields.max }),
  {
    strict: true,
    decode: (written) => {
      const defaults = defaultRestart.backoff
      const initial = written.initial ?? defaults.initial
      // No max: the default, or initial where that is larger.
      const max = written.max ?? Math.max(defaults.max, initial)
      // Backoff refuses it too, but cannot point at the key or name the initial delay.
      return max < initial
        ? ParseResult.fail(expectedAt(`a duration ≥ backoff.initial (${formatDuration(initial)})`, ["max"]))
        : ParseResult.succeed({ initial, max })
    },
    encode: ParseResult.succeed
  }
)

const BackoffGrowth = Schema.Struct({
  factor: keyOr(Backoff.fields.factor.pipe(expecting(`a growth factor from ${factorRange.min} to ${factorRange.max}`)), defaultRestart.backoff.factor),
  jitter: keyOr(Backoff.fields.jitter.pipe(expecting(`a jitter fraction from ${jitterRange.min} to ${jitterRange.max}`)), defaultRestart.backoff.jitter)
})

const BackoffOptions = readInto(
  keyGroups({ delays: BackoffDelays, growth: BackoffGrowth }),
  Backoff,
  ({ delays, growth }) => ({ ...delays, ...growth }),
  ({ factor, initial, jitter, max }) => ({ delays: { initial, max }, growth: { factor, jitter } })
)

const RestartOptions = readInto(
  Schema.Struct({
    max_restarts: keyOr(
      Restart.fields.maxRestarts.pipe(expecting(`a whole number of restarts from ${minRestarts} to ${maxRestarts}`)),
      defaultRestart.maxRestarts
    ),
    within: keyOr(durationText(Restart.fields.within), defaultRestart.within),
    backoff: keyOr(BackoffOptions, defaultRestart.backoff),
    scope: keyOr(Restart.fields.scope, defaultRestart.scope)
  }),
  Restart,
  (written) => ({ _tag: "Restart" as const, maxRestarts: written.max_restarts, within: written.within, backoff: written.backoff, scope: written.scope }),
  (restart) => ({ max_restarts: restart.maxRestarts, within: restart.within, backoff: restart.backoff, scope: restart.scope })
)

/**
 * A strategy as one word, with its defaults. Only a strategy that has them is
 * written so; a restart is always written out, so a plan shows its limits.
 */
const word = <const W extends string>(text: W, strategy: Simple, writtenAsWord: (value: Simple) => boolean) =>
  Schema.transformOrFail(Schema.Literal(text), Schema.typeSchema(Simple), {
    strict: true,
    decode: () => ParseResult.succeed(strategy),
    encode: (value, _, ast) => (writtenAsWord(value) ? ParseResult.succeed(text) : ParseResult.fail(new ParseResult.Type(ast, value)))
  })

const strategyKeys = ["kill_all", "elastic", "restart"] as const

/** `{ elastic: { … } }`: exactly one strategy's key, its options below it (or nothing, for its defaults). */
const StrategyMapping = Schema.transform(
  // A group of its own, so that an unknown key beside them does not hide a second strategy.
  keyGroups({
    given: Schema.Struct({
      // Here a key with nothing after it (`kill_all:`) is given: it names the strategy, with its defaults.
      kill_all: Schema.optionalWith(Schema.NullOr(KillAllOptions), { exact: true }),
      elastic: Schema.optionalWith(Schema.NullOr(ElasticOptions), { exact: true }),
      restart: Schema.optionalWith(Schema.NullOr(RestartOptions), { exact: true })
    }).pipe(
      Schema.filter((given) => {
        const count = Object.keys(given).length
        return count === 1 || `expected exactly one of ${strategyKeys.join(", ")}, got ${count}`
      })
    )
  }),
  Schema.typeSchema(Simple),
  {
    strict: true,
    decode: ({ given }) =>
      given.kill_all !== undefined
        ? given.kill_all ?? new KillAll()
        : given.elastic !== undefined
        ? given.elastic ?? defaultElastic
        : given.restart ?? defaultRestart,
    encode: (strategy) => ({
      given: strategy._tag === "KillAll" ? { kill_all: strategy } : strategy._tag === "Elastic" ? { elastic: strategy } : { restart: strategy }
    })
  }
)

/** A strategy that applies without regard to formation, in any of its YAML forms. */
const SimpleStrategy = Schema.Union(
  word("kill_all", new KillAll(), (value) => value._tag === "KillAll" && value.grace === undefined),
  word("elastic", defaultElastic, (value) =>
    value._tag === "Elastic" && value.maxFailure?._tag === "Percent" && value.maxFailure.p === defaultMaxFailure.p && value.base === undefined),
  word("restart", defaultRestart, () => false),
  StrategyMapping
).pipe(expecting("one of kill_all, elastic, { elastic: { max_failure: … } } or { restart: { … } }"))

// ---------------------------------------------------------------------------------------------------------
// Failure rules (`FailureRules`): `rules:` beside the phases.
// ---------------------------------------------------------------------------------------------------------

/** A list that must hold something: said as what is missing (Schema.minItems alone reads "expected a list, got a list"). */
const atLeastOne = (what: string) => <A, I>(list: Schema.Schema<ReadonlyArray<A>, I>) =>
  list.pipe(Schema.filter((items) => items.length > 0 || `expected at least one ${what}, got an empty list`))

/** `"1-127"`: every exit status from the first to the last. */
const CodeRange = Schema.transformOrFail(Schema.String, Schema.Tuple(ExitCode, ExitCode), {
  strict: true,
  decode: (text, _, ast) => {
    const match = /^\s*(\d+)\s*-\s*(\d+)\s*$/.exec(text)
    // An end past the last status is refused here, at the range: the tuple would point inside the string, at nothing.
    return match === null || Number(match[1]) > Number(match[2]) || Number(match[2]) > rangeOf(ExitCode).max
      ? ParseResult.fail(new ParseResult.Type(ast, text))
      : ParseResult.succeed([Number(match[1]), Number(match[2])] as const)
  },
  encode: ([first, last]) => ParseResult.succeed(`${first}-${last}`)
})

/** Runs of three or more consecutive statuses as ranges, the rest as they are: how a list is written back. */
const compressCodes = (codes: ReadonlyArray<number>): Array<number | readonly [number, number]> =>
  codeRuns(codes).flatMap(([first, last]): Array<number | readonly [number, number]> =>
    last - first >= 2 ? [[first, last] as const] : Array.from({ length: last - first + 1 }, (_, offset) => first + offset)
  )

/** A list of statuses and ranges (`[1, 2, "64-78"]`), as the statuses it stands for. */
const CodeList = Schema.transform(
  Schema.Array(Schema.Union(ExitCode, CodeRange).pipe(expecting(`an exit code from 0 to 255, or a range like "1-127"`))).pipe(atLeastOne("exit code")),
  Schema.Array(ExitCode),
  {
    strict: true,
    decode: (items) =>
      items.flatMap((item) => (typeof item === "number" ? [item] : Array.from({ length: item[1] - item[0] + 1 }, (_, offset) => item[0] + offset))),
    encode: compressCodes
  }
)

/** `exit_code: [1, 2]`, `{ in: [1, 2] }` or `{ not_in: [0, 143] }`; written back as a list, or `{ not_in }`. */
const ExitCodesForm = Schema.transform(
  Schema.Union(
    CodeList,
    // One mapping with either key, not a mapping per key: a mistake inside `not_in` is then said once, at it,
    // rather than also as a missing `in` and an unknown `not_in` by the other mapping.
    Schema.Struct({ in: optionalKey(CodeList), not_in: optionalKey(CodeList) }).pipe(
      Schema.filter((written) => (written.in === undefined) !== (written.not_in === undefined) || "give one of in or not_in")
    )
  ).pipe(
    expecting(`a list of exit codes from 0 to 255 (ranges like "1-127" too), { in: [...] } or { not_in: [...] }`)
  ),
  Schema.typeSchema(ExitCodes),
  {
    strict: true,
    decode: (written) => {
      if (Array.isArray(written)) return new ExitCodes({ op: "in", values: written })
      const { in: listed, not_in: excluded } = written as { readonly in?: ReadonlyArray<number>; readonly not_in?: ReadonlyArray<number> }
      return listed !== undefined ? new ExitCodes({ op: "in", values: listed }) : new ExitCodes({ op: "not_in", values: excluded ?? [] })
    },
    encode: (codes) => (codes.op === "in" ? codes.values : { not_in: codes.values })
  }
)

/** A glob in a list: rank numbers may be written as numbers. */
const GlobForm = Schema.Union(Glob, Schema.transform(Schema.Int, Glob, { strict: true, decode: String, encode: Number })).pipe(
  expecting("a rank number, a host name, or a pattern with * and ?")
)

const RuleWhenForm = readInto(
  keyGroups({
    given: Schema.Struct({
      exit_code: optionalKey(ExitCodesForm),
      signal: optionalKey(Schema.Array(SignalName.pipe(expecting(`a signal name like SIGTERM (${signalNames.length} known)`))).pipe(atLeastOne("signal name"))),
      cause: optionalKey(Schema.Array(Cause.pipe(expecting(`one of ${causes.join(", ")}`))).pipe(atLeastOne("cause"))),
      ranks: optionalKey(Schema.Array(GlobForm).pipe(atLeastOne("rank"))),
      hosts: optionalKey(Schema.Array(GlobForm).pipe(atLeastOne("host"))),
      phase: optionalKey(PolicyPhase),
      log: optionalKey(Pattern),
      same_error_on: optionalKey(SameErrorOn)
    })
  }, ["exit_code", "signal", "cause", "ranks", "hosts", "phase", "log", "same_error_on"]),
  RuleWhen,
  ({ given }) => renamed(given, fileToField),
  (when) => ({ given: renamed(when, fieldToFile) })
)

/** A `when`'s keys as the file writes them, and as RuleWhen names them. */
const fileToField = {
  exit_code: "exitCodes",
  signal: "signals",
  cause: "causes",
  ranks: "ranks",
  hosts: "hosts",
  phase: "phase",
  log: "log",
  same_error_on: "sameErrorOn"
} as const
const fieldToFile = Object.fromEntries(Object.entries(fileToField).map(([file, field]) => [field, file]))

/** The keys of `given` under their other names, the absent ones left out (never written as undefined). */
const renamed = (given: object, names: Readonly<Record<string, string>>): Record<string, unknown> =>
  Object.fromEntries(Object.entries(given).flatMap(([key, value]) => (value === undefined || names[key] === undefined ? [] : [[names[key], value]])))

const actionWordForm = <const W extends string>(text: W, action: RuleAction, isIt: (value: RuleAction) => boolean) =>
  Schema.transformOrFail(Schema.Literal(text), Schema.typeSchema(RuleAction), {
    strict: true,
    decode: () => ParseResult.succeed(action),
    encode: (value, _, ast) => (isIt(value) ? ParseResult.succeed(text) : ParseResult.fail(new ParseResult.Type(ast, value)))
  })

/** `then: fail | elastic | ignore | restart | { restart: { … } }`. */
const RuleActionForm = Schema.Union(
  actionWordForm("fail", new FailRun(), (value) => value._tag === "FailRun"),
  actionWordForm("elastic", new DropRanks(), (value) => value._tag === "DropRanks"),
  actionWordForm("ignore", new IgnoreExit(), (value) => value._tag === "IgnoreExit"),
  readInto(Schema.Struct({ restart: Schema.NullOr(RestartOptions) }), Restart, ({ restart }) => restart ?? defaultRestart, (restart) => ({ restart }))
).pipe(expecting("one of fail, elastic, ignore or { restart: { … } }"))

const RuleForm = keyGroups({
  given: Schema.Struct({ name: optionalKey(Schema.String.pipe(Schema.minLength(1))), when: keyOr(RuleWhenForm, new RuleWhen({})), then: RuleActionForm })
}, ["name", "when", "then"])

/** A rule that follows one matching every death can never decide: said at the later rule. */
const unreachable = (rules: ReadonlyArray<{ readonly when: RuleWhen }>): Array<Schema.FilterOutput> => {
  const everything = rules.findIndex((rule) => matchesEverything(rule.when))
  return everything === -1
    ? []
    : rules.slice(everything + 1).map((_, offset) => ({
      path: [everything + 1 + offset],
      message: `this rule can never match: rules[${everything}] before it has an empty when, which matches every death`
    }))
}

/** `rules:`, in order; a rule without a name is named by its place (`rule 1`). */
const RulesForm = Schema.transform(
  Schema.Array(RuleForm).pipe(
    Schema.filter((written) => {
      const problems = unreachable(written.map(({ given }) => given))
      return problems.length === 0 ? true : problems
    })
  ),
  Schema.typeSchema(RuleList),
  {
    strict: true,
    decode: (written) => written.map(({ given }, index) => new FailureRule({ name: given.name ?? `rule ${index + 1}`, when: given.when, then: given.then })),
    encode: (rules) => rules.map((rule) => ({ given: { name: rule.name, when: rule.when, then: rule.then } }))
  }
)

/** `{ before_formation, after_formation }`, both given, and the rules tried before them. */
const PhasedStrategy = readInto(
  Schema.Struct({ before_formation: SimpleStrategy, after_formation: SimpleStrategy, rules: optionalKey(RulesForm) }),
  Phased,
  (written) => ({
    _tag: "Phased" as const,
    beforeFormation: written.before_formation,
    afterFormation: written.after_formation,
    ...(written.rules === undefined ? {} : { rules: written.rules })
  }),
  (phased) => ({
    before_formation: phased.beforeFormation,
    after_formation: phased.afterFormation,
    ...(phased.rules === undefined ? {} : { rules: phased.rules })
  })
)

const onlyElasticHasBase = "only an elastic after_formation policy with a max_failure has a base: add one, or remove max_failure_base"

/** The phases, and the base that only an elastic after_formation policy with a max_failure has. */
const PolicyPhases = Schema.Struct({
  before_formation: keyOr(SimpleStrategy, defaultFailurePolicy.strategy.beforeFormation),
  after_formation: keyOr(SimpleStrategy, defaultFailurePolicy.strategy.afterFormation),
  max_failure_base: optionalKey(FailureBase)
}).pipe(
  Schema.filter(({ after_formation, max_failure_base }) =>
    max_failure_base === undefined || (after_formation._tag === "Elastic" && after_formation.maxFailure !== undefined) ||
    { path: ["max_failure_base"], message: onlyElasticHasBase }
  )
)

const PolicyTimeouts = Schema.Struct({
  grace: keyOr(durationText(Millis), defaultFailurePolicy.grace),
  heartbeat_timeout: keyOr(durationText(HeartbeatTimeout), defaultFailurePolicy.heartbeatTimeout)
})

const PolicyExit = Schema.Struct({ degraded_exit: keyOr(ExitCode, defaultFailurePolicy.degradedExit) })

/**
 * The whole section: both phases (each with its default), the grace, the
 * heartbeat timeout, and a `max_failure_base` that belongs to the elastic
 * after_formation policy (written inside it when encoded).
 */
const PolicyRules = Schema.Struct({ rules: optionalKey(RulesForm) })

const FailurePolicyFromYaml = readInto(
  keyGroups(
    { phases: PolicyPhases, timeouts: PolicyTimeouts, rules: PolicyRules, exit: PolicyExit },
    ["before_formation", "after_formation", "rules", "grace", "heartbeat_timeout", "max_failure_base", "degraded_exit"]
  ),
  Schema.Struct({ strategy: Phased, grace: Millis, heartbeatTimeout: HeartbeatTimeout, degradedExit: ExitCode }),
  ({ exit, phases, rules, timeouts }) => ({
    strategy: {
      _tag: "Phased" as const,
      beforeFormation: phases.before_formation,
      afterFormation: phases.max_failure_base === undefined ? phases.after_formation : { ...phases.after_formation, base: phases.max_failure_base },
      ...rulesOf(rules.rules, phases.after_formation)
    },
    grace: timeouts.grace,
    heartbeatTimeout: timeouts.heartbeat_timeout,
    degradedExit: exit.degraded_exit
  }),
  ({ degradedExit, grace, heartbeatTimeout, strategy }) => ({
    phases: { before_formation: strategy.beforeFormation, after_formation: strategy.afterFormation },
    timeouts: { grace, heartbeat_timeout: heartbeatTimeout },
    rules: strategy.rules === undefined ? {} : { rules: strategy.rules },
    exit: { degraded_exit: degradedExit }
  })
)

/** Read a `failure_policy` section; an absent one gives the defaults. */
export const decodeFailurePolicy = (field: Field): FailurePolicy =>
  field.present ? decodeField(field, FailurePolicyFromYaml) : defaultFailurePolicy

/** Any strategy: a single one, or `{ before_formation, after_formation }` when either phase is named. */
export const decodeStrategy = (field: Field): Strategy =>
  field.has("before_formation") || field.has("after_formation") ? decodeField(field, PhasedStrategy) : decodeField(field, SimpleStrategy)

/** Writing picks the form by the strategy's tag, as reading picks it by the phase keys. */
const AnyStrategy = Schema.Union(PhasedStrategy, SimpleStrategy)

/** The YAML form of a strategy: what `decodeStrategy` reads back to the same value. */
export const encodeStrategy: (strategy: Strategy) => unknown = Schema.encodeSync(AnyStrategy)

/** The YAML form of a whole `failure_policy` section. */
export const encodeFailurePolicy: (policy: FailurePolicy) => unknown = Schema.encodeSync(FailurePolicyFromYaml)

/** Read a cluster file's `failure_policy` section from YAML text; other top-level keys are not this module's business. */
export const parseFailurePolicy = (text: string, file?: string): Effect.Effect<FailurePolicy, ConfigErrors> =>
  parse(text, file, (root) => decodeFailurePolicy(root.get("failure_policy")))

/** A strategy as a YAML string, for logs and round-trip tests. */
export const strategyToYaml = (strategy: Strategy): string => stringify(encodeStrategy(strategy))

/** Parse a strategy written in its YAML form. */
export const parseStrategy = (text: string, file?: string): Effect.Effect<Strategy, ConfigErrors> =>
  parse(text, file, decodeStrategy)
