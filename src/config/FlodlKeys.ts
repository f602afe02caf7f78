/**
 * flodl's key names in a cluster file, read as cohort's: a file written for
 * flodl loads, and each such key is noted at load (a warning with its place)
 * so that the user can rename it.
 */
import * as Schema from "effect/Schema"
import { isMap, isScalar, type Node, Pair, Scalar, YAMLMap } from "yaml"
import { ConfigError } from "./ConfigError.ts"
import { expecting, rangeOf } from "./Expected.ts"
import { decodeField } from "./SchemaField.ts"
import { Field } from "./Yaml.ts"

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
  copy.items = node.items.flatMap((pair) => {
    const alias = aliases.find((candidate) => candidate.flodl === keyOf(pair))
    if (alias === undefined) return [pair]
    const given = field.get(alias.flodl)
    const keyNode = pair.key as Node | null
    if (field.has(alias.key)) {
      given.report(`${alias.flodl} is flodl's name for ${alias.key}, which is given too: keep one of them`, keyNode)
      return []
    }
    notes.push(noteAt(given, keyNode, `${alias.flodl} is flodl's name: cohort reads it as ${alias.key}${alias.seconds === true ? " (flodl's whole seconds, as a duration)" : ""}; rename it to ${alias.key} to quiet this note`))
    let value = pair.value as Node | null
    if (alias.seconds === true) {
      const seconds = given.attempt(() => decodeField(given, flodlSeconds))
      if (seconds === undefined) return []
      const duration = new Scalar(`${seconds}s`)
      duration.range = (pair.value as Node | null)?.range
      value = duration
    }
    const key = new Scalar(alias.key)
    key.range = keyNode?.range
    return [new Pair(key, value)]
  })
  return new Field(field.path, copy, field.source, field.anchor)
}
