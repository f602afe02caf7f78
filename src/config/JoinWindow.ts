/**
 * `controller.join` of a cluster file: when the join window closes, and who
 * may join once the cohort has formed.
 *
 * ```yaml
 * join: { min_ranks: 4, target_ranks: 4, timeout: 30s, max_timeout: 120s, open_admission: false, start: auto }
 * # join: { …, after_formation: accept, max_ranks: 16 }   # grow: agents that dial in later join at the next epoch
 * ```
 *
 * The rank knobs default from the declared capacity (min = target = every
 * declared rank), so the window closes the instant everyone is in. Knobs
 * checked against each other are read as one group (see `Mapping`), so a
 * mistake elsewhere in the section does not hide theirs.
 */
import * as Schema from "effect/Schema"
import { Millis } from "../kernel/policy/Strategy.ts"
import { MAX_DURATION_MS } from "./reading/Duration.ts"
import { durationText } from "./reading/DurationSchema.ts"
import { expectedAt, expecting, rangeOf } from "./reading/Expected.ts"
import { keyGroups, keyOr, optionalKey } from "./reading/Mapping.ts"
import { decodeField } from "./reading/SchemaField.ts"
import type { Field } from "./reading/Yaml.ts"

export const StartMode = Schema.Literal("auto", "manual", "hybrid")
export type StartMode = typeof StartMode.Type

export interface JoinWindow {
  /** Quorum; undefined until capacity is known (a worker with `devices: all`). */
  readonly minRanks: number | undefined
  /** Close as soon as this many joined; undefined: every declared rank. */
  readonly targetRanks: number | undefined
  readonly timeoutMs: number
  readonly maxTimeoutMs: number
  readonly openAdmission: boolean
  readonly start: StartMode
  /** Agents that dial in once the cohort has formed: refused (the default), or admitted and grown into the run. */
  readonly afterFormation: "reject" | "accept"
  /** With `accept`: the most ranks the run may have had in all (undefined: no cap). */
  readonly maxRanks: number | undefined
}

const RankCount = Schema.Int.pipe(Schema.between(1, 1_000_000))
// Both ends said: a count past the top is refused with the top named, not with "≥ 1", which it is.
const rankCount = RankCount.pipe(expecting(`a number of ranks from ${rangeOf(RankCount).min} to ${rangeOf(RankCount).max}`))

const WrittenRanks = Schema.Struct({
  min_ranks: optionalKey(rankCount),
  target_ranks: optionalKey(rankCount),
  start: optionalKey(StartMode),
  after_formation: optionalKey(Schema.Literal("reject", "accept")),
  max_ranks: optionalKey(rankCount)
})
type WrittenRanks = typeof WrittenRanks.Type

/** The rank knobs with their defaults: min and target are the declared capacity, and a manual start has no target. */
const rankSettings = (written: WrittenRanks, capacity: number | undefined) => {
  const start = written.start ?? "auto"
  return {
    minRanks: written.min_ranks ?? capacity,
    targetRanks: written.target_ranks ?? (start === "manual" ? undefined : capacity),
    start,
    afterFormation: written.after_formation ?? "reject",
    maxRanks: written.max_ranks
  }
}

/** What is wrong between the rank knobs, each said at the knob to change. */
const rankMistakes = (written: WrittenRanks, capacity: number | undefined) => {
  const { afterFormation, maxRanks, minRanks, start, targetRanks } = rankSettings(written, capacity)
  const mistakes: Array<Schema.FilterOutput> = []
  if (minRanks !== undefined && targetRanks !== undefined && targetRanks < minRanks) {
    mistakes.push(
      written.target_ranks !== undefined
        ? expectedAt(`at least min_ranks (${minRanks})`, ["target_ranks"])
        : expectedAt(`at most the ${targetRanks} ranks the workers declare`, ["min_ranks"])
    )
  }
  if (start === "manual" && written.target_ranks !== undefined) {
    mistakes.push({ path: ["target_ranks"], message: "a manual start closes the window on the operator's word: remove target_ranks, or use start: hybrid" })
  }
  if (maxRanks !== undefined && afterFormation !== "accept") {
    mistakes.push({ path: ["max_ranks"], message: "max_ranks caps growth after formation: add after_formation: accept, or remove max_ranks" })
  } else if (maxRanks !== undefined && minRanks !== undefined && maxRanks < minRanks) {
    mistakes.push(expectedAt(`at least min_ranks (${minRanks})`, ["max_ranks"]))
  }
  return mistakes
}

const WindowDuration = durationText(Millis.pipe(Schema.greaterThan(0)))

const WrittenTimeouts = Schema.Struct({ timeout: optionalKey(WindowDuration), max_timeout: optionalKey(WindowDuration) })
type WrittenTimeouts = typeof WrittenTimeouts.Type

/**
 * A minute to join by default; the hard limit at least two minutes and twice the timeout, but never past the
 * week any duration may be: a limit no one could have written is no default.
 */
const timeoutSettings = (written: WrittenTimeouts) => {
  const timeoutMs = written.timeout ?? 60_000
  return { timeoutMs, maxTimeoutMs: written.max_timeout ?? Math.min(MAX_DURATION_MS, Math.max(120_000, 2 * timeoutMs)) }
}

const joinKeys = (capacity: number | undefined) =>
  keyGroups(
    {
      ranks: WrittenRanks.pipe(Schema.filter((written) => rankMistakes(written, capacity))),
      timeouts: WrittenTimeouts.pipe(
        Schema.filter((written) => {
          const { maxTimeoutMs, timeoutMs } = timeoutSettings(written)
          return maxTimeoutMs >= timeoutMs || expectedAt("a duration ≥ timeout", ["max_timeout"])
        })
      ),
      admission: Schema.Struct({ open_admission: keyOr(Schema.Boolean, false) })
    },
    ["min_ranks", "target_ranks", "timeout", "max_timeout", "open_admission", "start", "after_formation", "max_ranks"]
  )

/** Read `controller.join` for workers that declare `capacity` ranks (undefined: known only once probed); absent, every knob takes its default. */
export const decodeJoin = (field: Field, capacity: number | undefined): JoinWindow => {
  const { admission, ranks, timeouts } = decodeField(field, joinKeys(capacity), { whenAbsent: {} })
  return { ...rankSettings(ranks, capacity), ...timeoutSettings(timeouts), openAdmission: admission.open_admission }
}
