/**
 * flodl's keys in a cluster file: a file written for flodl (or for fdl-cli,
 * whose fdl.yml holds it under `cluster:`) loads as it is written.
 *
 * - Keys cohort has under another name are read as cohort's (`withFlodlKeys`),
 *   each noted at load (a warning with its place) so that the user can rename it.
 * - Keys for what cohort does not do (fdl-cli's pre-flight build and probe,
 *   flodl's libtorch and data paths, walk-ins) are left out
 *   (`withoutFlodlOnly`), each noted with what it does there and what cohort
 *   does instead; a value that asks for something cohort would do otherwise
 *   in a way that matters (a port bound wider than the file says) is refused.
 */
import * as Schema from "effect/Schema"
import { isMap, isScalar, type Node, Pair, Scalar, YAMLMap } from "yaml"
import { ConfigError } from "./reading/ConfigError.ts"
import { expecting, rangeOf } from "./reading/Expected.ts"
import { decodeField } from "./reading/SchemaField.ts"
import { Field, writtenAs } from "./reading/Yaml.ts"

/** A key flodl's cluster files use, read as cohort's `key`; `seconds`: flodl's whole seconds, read as a duration. */
export interface FlodlAlias {
  readonly flodl: string
  readonly key: string
  readonly seconds?: boolean
}

/** flodl's `*_secs` keys: whole seconds, at most the week any duration may be. */
const FlodlSeconds = Schema.Int.pipe(Schema.between(1, 604_800))
const flodlSeconds = FlodlSeconds.pipe(expecting(`a whole number of seconds from ${rangeOf(FlodlSeconds).min} to ${rangeOf(FlodlSeconds).max}`))

/** A note at `field`'s place, said like a ConfigError (file, path, line, column). */
export const noteAt = (field: Field, at: Node | null, note: string): ConfigError => {
  const offset = at?.range?.[0]
  const pos = offset === undefined ? undefined : field.source.lines.linePos(offset)
  return new ConfigError({ file: field.source.file, path: field.path, line: pos?.line, col: pos?.col, problem: note })
}

/**
 * `field` (a mapping) with flodl's key names read as cohort's: each is noted, and the mapping decoded
 * is a copy with the key renamed (its value, and so every place a mistake is said, is the file's own).
 * Both names given is a mistake: they would say the same thing twice, perhaps differently.
 */
export const withFlodlKeys = (field: Field, aliases: ReadonlyArray<FlodlAlias>, notes: Array<ConfigError>): Field => {
  const node = field.node
  if (!isMap(node)) return field
  const keyOf = (pair: Pair<unknown, unknown>) => (isScalar(pair.key) ? String(pair.key.value) : undefined)
  const flodlKeys = aliases.map((alias) => alias.flodl)
  if (!node.items.some((pair) => flodlKeys.includes(keyOf(pair) ?? ""))) return field
  const copy = new YAMLMap<unknown, unknown>()
  copy.range = node.range
  copy.flow = node.flow
  // flodl's names read so far, by cohort's key: two names of one key (`join_timeout`, `join_timeout_secs`) are one key given twice.
  const read = new Map<string, string>()
  copy.items = node.items.flatMap((pair) => {
    const alias = aliases.find((candidate) => candidate.flodl === keyOf(pair))
    if (alias === undefined) return [pair]
    const given = field.get(alias.flodl)
    const keyNode = pair.key as Node | null
    if (field.has(alias.key)) {
      given.report(`${alias.flodl} is flodl's name for ${alias.key}, which is given too: keep one of them`, keyNode)
      return []
    }
    const first = read.get(alias.key)
    if (first !== undefined) {
      given.report(`${alias.flodl} and ${first} both name ${alias.key}: keep one of them`, keyNode)
      return []
    }
    read.set(alias.key, alias.flodl)
    notes.push(noteAt(given, keyNode, `${alias.flodl} is flodl's name: cohort reads it as ${alias.key}${alias.seconds === true ? " (flodl's whole seconds, as a duration)" : ""}; rename it to ${alias.key} to quiet this note`))
    let value = pair.value as Node | null
    const key = new Scalar(alias.key)
    key.range = keyNode?.range
    if (alias.seconds === true) {
      const seconds = given.attempt(() => decodeField(given, flodlSeconds))
      if (seconds === undefined) return []
      const duration = new Scalar(`${seconds}s`)
      duration.range = (pair.value as Node | null)?.range
      value = duration
      writtenAs(key, alias.flodl, { node: duration, found: given.found })
    } else {
      writtenAs(key, alias.flodl)
    }
    return [new Pair(key, value)]
  })
  return new Field(field.path, copy, field.source, field.anchor)
}

/**
 * A key of flodl's (or fdl-cli's) that cohort does not read: what it `does` there, and what a cohort user
 * does `instead` when there is something to do. `refuse` names the values that cannot be left out
 * (leaving them out would run something other than the file says): their refusal, said at the key.
 */
export interface FlodlOnly {
  readonly flodl: string
  readonly does: string
  readonly instead?: string
  readonly owner?: "flodl" | "fdl-cli"
  readonly refuse?: (value: unknown) => string | undefined
}

/** The key node of `key` in `field`'s mapping, where a note or refusal about the key itself is said. */
const keyNodeOf = (field: Field, key: string): Node | null => {
  const node = field.node
  if (!isMap(node)) return null
  return (node.items.find((pair) => isScalar(pair.key) && String(pair.key.value) === key)?.key as Node | null | undefined) ?? null
}

/**
 * `field` (a mapping) without the keys in `keys` that it has: a copy, each key noted once at its own place
 * (or refused there, see `FlodlOnly.refuse`), so that the section's own decoder never sees them.
 */
export const withoutFlodlOnly = (field: Field, keys: ReadonlyArray<FlodlOnly>, notes: Array<ConfigError>): Field => {
  if (!isMap(field.node)) return field
  const present = keys.filter((key) => field.has(key.flodl))
  if (present.length === 0) return field
  for (const key of present) {
    const given = field.get(key.flodl)
    const keyNode = keyNodeOf(field, key.flodl)
    const refusal = key.refuse?.(given.scalar)
    if (refusal !== undefined) {
      given.report(refusal, keyNode)
      continue
    }
    const instead = key.instead === undefined ? "" : `; ${key.instead}`
    notes.push(noteAt(given, keyNode, `${key.flodl} is ${key.owner ?? "flodl"}'s (${key.does}): cohort does not read it${instead}; remove it to quiet this note`))
  }
  return field.without(present.map((key) => key.flodl))
}
