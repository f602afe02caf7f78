/**
 * The `failure_policy` section of a cluster file: the user-facing form of the
 * supervision strategies in `actors/Strategy`.
 *
 * ```yaml
 * failure_policy:
 *   before_formation: kill_all                 # default; { kill_all: { grace: 0s } } kills the siblings at once
 *   after_formation:
 *     elastic: { max_failure: 25% }            # or a count: 2; omit it to tolerate any partial loss
 *   # after_formation:
 *   #   restart: { max_restarts: 3, within: 10m, backoff: { initial: 1s, max: 30s, factor: 2, jitter: 0.2 }, scope: all }
 *   grace: 5s                                  # SIGTERM → SIGKILL
 *   heartbeat_timeout: 30s                     # a rank silent this long is dead (scaled by COHORT_NET_TIMEOUT_SCALE)
 *   max_failure_base: formation                # or current: a max_failure percentage of every rank the run has had
 * ```
 *
 * A single strategy is written `kill_all`, `elastic` (no limit),
 * `{ elastic: { max_failure: … } }` or `{ restart: { … } }`; a phased one as a
 * mapping with `before_formation` and `after_formation`. `encodeStrategy`
 * writes exactly what `decodeStrategy` reads, so every strategy survives the
 * round trip through YAML.
 */
import type * as Effect from "effect/Effect"
import { stringify } from "yaml"
import {
  Backoff,
  Count,
  Elastic,
  KillAll,
  type MaxFailure,
  Percent,
  Phased,
  Restart,
  type Simple,
  type Strategy
} from "../actors/Strategy.ts"
import { formatDuration } from "./Duration.ts"
import { type ConfigErrors, type Field, parse } from "./Yaml.ts"

export interface FailurePolicy {
  readonly strategy: Phased
  /** SIGTERM → SIGKILL, in milliseconds. */
  readonly grace: number
  /** A rank (or, seen from a rank, the coordinator) silent this long is dead, in milliseconds, before scaling. */
  readonly heartbeatTimeout: number
}

/**
 * How often liveness crosses the network for a heartbeat timeout: each relay's `HostBeats` and the
 * coordinator's beats down to the ranks. A sixth of the timeout, between 1 s and 5 s: every silence is
 * seen within a few beats, and at the default 30 s a 1,000-host world sends 400 beat frames a second
 * instead of 2,000. (Ranks still beat to their relay every second: that stays on the host.)
 */
export const beatEveryMs = (heartbeatTimeoutMs: number): number => Math.min(5_000, Math.max(1_000, Math.round(heartbeatTimeoutMs / 6)))

export const defaultFailurePolicy: FailurePolicy = {
  strategy: new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({}) }),
  grace: 5_000,
  heartbeatTimeout: 30_000
}

const policyKeys = ["before_formation", "after_formation", "grace", "heartbeat_timeout", "max_failure_base"] as const
const simpleKeys = ["kill_all", "elastic", "restart"] as const
const restartDefaults = {
  maxRestarts: 3,
  within: 600_000,
  backoff: new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0.2 }),
  scope: "one" as const
}

/** Read a `failure_policy` section; an absent one gives the defaults. */
export const decodeFailurePolicy = (field: Field): FailurePolicy => {
  if (!field.present) return defaultFailurePolicy
  const keys = field.map(policyKeys)
  const defaults = defaultFailurePolicy.strategy
  // Each part is read on its own, so every mistake in the section is reported together.
  const afterFormation = keys.after_formation.readOr(decodeSimple, defaults.afterFormation)
  const base = keys.max_failure_base.readOr((f) => f.literal(["formation", "current"] as const), undefined)
  if (base !== undefined && (afterFormation._tag !== "Elastic" || afterFormation.maxFailure === undefined)) {
    keys.max_failure_base.report("only an elastic after_formation policy with a max_failure has a base: add one, or remove max_failure_base")
  }
  return {
    strategy: new Phased({
      beforeFormation: keys.before_formation.readOr(decodeSimple, defaults.beforeFormation),
      afterFormation: base !== undefined && afterFormation._tag === "Elastic" ? new Elastic({ ...afterFormation, base }) : afterFormation
    }),
    grace: keys.grace.readOr((grace) => grace.duration(), defaultFailurePolicy.grace),
    heartbeatTimeout: keys.heartbeat_timeout.readOr((timeout) => timeout.duration(2_000), defaultFailurePolicy.heartbeatTimeout)
  }
}

/** Any strategy: a single one, or `{ before_formation, after_formation }`. */
export const decodeStrategy = (field: Field): Strategy => {
  const isPhased = field.has("before_formation") || field.has("after_formation")
  if (!isPhased) return decodeSimple(field)
  const keys = field.map(["before_formation", "after_formation"])
  return new Phased({
    beforeFormation: decodeSimple(keys.before_formation),
    afterFormation: decodeSimple(keys.after_formation)
  })
}

const decodeSimple = (field: Field): Simple => {
  const expected = `one of kill_all, elastic, { elastic: { max_failure: … } } or { restart: { … } }`
  const word = field.scalar
  if (typeof word === "string") {
    if (word === "kill_all") return new KillAll()
    if (word === "elastic") return new Elastic({})
    if (word === "restart") return new Restart(restartDefaults)
    return field.expected(expected)
  }
  if (!field.present) return field.expected(expected)
  const keys = field.map(simpleKeys)
  const given = simpleKeys.filter((key) => keys[key].node !== undefined)
  if (given.length !== 1) field.fail(`expected exactly one of ${simpleKeys.join(", ")}, got ${given.length}`)
  switch (given[0]!) {
    case "kill_all": {
      const options = keys.kill_all
      if (!options.present) return new KillAll()
      // `{ kill_all: { grace: 0s } }`: siblings are killed at once instead of getting SIGTERM and a grace.
      const grace = options.map(["grace"]).grace.readOr((f) => f.duration(), undefined)
      return new KillAll(grace === undefined ? {} : { grace })
    }
    case "elastic": {
      const options = keys.elastic
      if (!options.present) return new Elastic({})
      const elastic = options.map(["max_failure", "max_failure_base"])
      const maxFailure = elastic.max_failure.readOr(decodeMaxFailure, undefined)
      const base = elastic.max_failure_base.readOr((f) => f.literal(["formation", "current"] as const), undefined)
      return new Elastic({ ...(maxFailure === undefined ? {} : { maxFailure }), ...(base === undefined ? {} : { base }) })
    }
    case "restart":
      return decodeRestart(keys.restart)
  }
}

const maxFailureExpected = `a count ≥ 0 or a percentage like "25%"`

const decodeMaxFailure = (field: Field): MaxFailure => {
  const value = field.scalar
  if (typeof value === "number") {
    return new Count({ n: field.int(0, 1_000_000, maxFailureExpected) })
  }
  if (typeof value === "string") {
    // Exponents are accepted because that is how tiny fractions print ("1e-7%").
    const match = /^(\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*%$/i.exec(value.trim())
    const p = match === null ? NaN : Number(match[1])
    if (Number.isFinite(p) && p >= 0 && p <= 100) return new Percent({ p })
  }
  return field.expected(maxFailureExpected)
}

const decodeRestart = (field: Field): Restart => {
  if (!field.present) return new Restart(restartDefaults)
  const keys = field.map(["max_restarts", "within", "backoff", "scope"])
  return new Restart({
    maxRestarts: keys.max_restarts.readOr((f) => f.int(0, 1_000, "a whole number of restarts from 0 to 1000"), restartDefaults.maxRestarts),
    within: keys.within.readOr((f) => f.duration(1), restartDefaults.within),
    backoff: keys.backoff.readOr(decodeBackoff, restartDefaults.backoff),
    scope: keys.scope.readOr((f) => f.literal(["one", "all"]), restartDefaults.scope)
  })
}

const decodeBackoff = (field: Field): Backoff => {
  const keys = field.map(["initial", "max", "factor", "jitter"])
  const base = restartDefaults.backoff
  const initial = keys.initial.readOr((f) => f.duration(), base.initial)
  const factor = keys.factor.readOr((f) => f.number(1, 100, "a growth factor from 1 to 100"), base.factor)
  const jitter = keys.jitter.readOr((f) => f.number(0, 1, "a jitter fraction from 0 to 1"), base.jitter)
  const max = keys.max.present ? keys.max.duration() : Math.max(base.max, initial)
  if (max < initial) {
    keys.max.fail(`expected a duration ≥ backoff.initial (${formatDuration(initial)}), got ${keys.max.found}`)
  }
  return new Backoff({ initial, max, factor, jitter })
}

/** The YAML form of a strategy: what `decodeStrategy` reads back to the same value. */
export const encodeStrategy = (strategy: Strategy): unknown => {
  switch (strategy._tag) {
    case "Phased":
      return {
        before_formation: encodeStrategy(strategy.beforeFormation),
        after_formation: encodeStrategy(strategy.afterFormation)
      }
    case "KillAll":
      return strategy.grace === undefined ? "kill_all" : { kill_all: { grace: formatDuration(strategy.grace) } }
    case "Elastic":
      return strategy.maxFailure === undefined && strategy.base === undefined
        ? "elastic"
        : {
          elastic: {
            ...(strategy.maxFailure === undefined ? {} : { max_failure: encodeMaxFailure(strategy.maxFailure) }),
            ...(strategy.base === undefined ? {} : { max_failure_base: strategy.base })
          }
        }
    case "Restart":
      return {
        restart: {
          max_restarts: strategy.maxRestarts,
          within: formatDuration(strategy.within),
          backoff: {
            initial: formatDuration(strategy.backoff.initial),
            max: formatDuration(strategy.backoff.max),
            factor: strategy.backoff.factor,
            jitter: strategy.backoff.jitter
          },
          scope: strategy.scope
        }
      }
  }
}

const encodeMaxFailure = (maxFailure: MaxFailure): number | string =>
  maxFailure._tag === "Count" ? maxFailure.n : `${maxFailure.p}%`

/** The YAML form of a whole `failure_policy` section. */
export const encodeFailurePolicy = (policy: FailurePolicy): unknown => ({
  ...(encodeStrategy(policy.strategy) as object),
  grace: formatDuration(policy.grace),
  heartbeat_timeout: formatDuration(policy.heartbeatTimeout)
})

/** Read a cluster file's `failure_policy` section from YAML text; other top-level keys are not this module's business. */
export const parseFailurePolicy = (text: string, file?: string): Effect.Effect<FailurePolicy, ConfigErrors> =>
  parse(text, file, (root) => decodeFailurePolicy(root.get("failure_policy")))

/** A strategy as a YAML string, for logs and round-trip tests. */
export const strategyToYaml = (strategy: Strategy): string => stringify(encodeStrategy(strategy))

/** Parse a strategy written in its YAML form. */
export const parseStrategy = (text: string, file?: string): Effect.Effect<Strategy, ConfigErrors> =>
  parse(text, file, decodeStrategy)
