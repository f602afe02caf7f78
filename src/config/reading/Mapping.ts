/**
 * A mapping of a cluster file as a Schema: keys that may be left out (or
 * written with nothing after them), keys with defaults, and independent
 * groups of keys.
 *
 * A check across keys (a `Schema.filter` on a struct) runs only once every
 * key of that struct has read cleanly, so a mistake in one key would hide a
 * mistake between two others until the first is fixed. `keyGroups` puts keys
 * that are checked together in one group and decodes each group on its own:
 * its checks run whatever the other groups hold, and every mistake is
 * reported at once, as the hand-written readers' `attempt` does. In the file
 * the groups are one mapping: a key that no group knows is refused beside the
 * groups' own mistakes, with all the keys listed, and a problem inside a group
 * is placed at the mapping's own keys (`SchemaField` leaves the group's name
 * out of the path).
 */
import * as Schema from "effect/Schema"
import * as AST from "effect/SchemaAST"
import { expecting } from "./Expected.ts"

/** An optional key that may also be written with nothing after it (`grace:`): both leave it out. */
export const optionalKey = <S extends Schema.Schema.Any>(schema: S) => Schema.optionalWith(schema, { exact: true, nullable: true })

/** An optional key (or one written with nothing after it) that takes `fallback`; encoding always writes it. */
export const keyOr = <S extends Schema.Schema.AnyNoContext>(schema: S, fallback: Schema.Schema.Type<S>) =>
  Schema.optionalWith(schema, { nullable: true, default: () => fallback })

const KeyGroupId: unique symbol = Symbol.for("cohort/config/KeyGroup")

/** The name of the group that refuses the keys no other group reads (a name no cluster file can give a group). */
const unknownKeys = "(unknown keys)"

/** Whether `ast` is a group of its mapping's keys, not a mapping below it. */
export const isKeyGroup = (ast: AST.AST): boolean => ast.annotations[KeyGroupId] === true

/** The keys a group reads, as the file writes them. */
const keysOf = (group: Schema.Schema.Any): ReadonlyArray<string> => {
  const written = AST.encodedAST(group.ast)
  // A group that is not a mapping is a mistake in this program, not in a file.
  if (!AST.isTypeLiteral(written)) throw new Error(`a key group must read a mapping, not ${String(written)}`)
  return written.propertySignatures.map((signature) => String(signature.name))
}

/**
 * Each group decoded from its own keys of the one mapping; encoding writes the
 * groups' keys back into one. `listed` orders the keys where a refusal lists
 * them (and where encoding writes them), when group order is not the order a
 * person reads them in.
 */
export const keyGroups = <const Groups extends Readonly<Record<string, Schema.Schema.AnyNoContext>>>(
  groups: Groups,
  listed?: ReadonlyArray<string>
): KeyGroups<Groups> => {
  const names = Object.keys(groups)
  const keys = new Map(names.map((name) => [name, keysOf(groups[name]!)]))
  const all = [...keys.values()].flat()
  if (listed !== undefined && (listed.length !== all.length || !all.every((key) => listed.includes(key)))) {
    throw new Error(`the listed keys ${listed.join(", ")} are not the groups' keys ${all.join(", ")}`)
  }
  const order = listed ?? all
  // Any mapping is taken apart; the keys no group reads go to a group that knows them all and refuses
  // each one, so an unknown key is reported beside the groups' own mistakes instead of hiding them.
  const written = Schema.Record({ key: Schema.String, value: Schema.Unknown }).pipe(expecting(`a mapping with keys ${order.join(", ")}`))
  const refusesEveryKey = Schema.Struct(Object.fromEntries(order.map((key) => [key, Schema.optionalWith(Schema.Unknown, { exact: true })])))
  const grouped = Schema.Struct({
    ...Object.fromEntries(names.map((name) => [name, groups[name]!.annotations({ [KeyGroupId]: true })])),
    [unknownKeys]: Schema.optionalWith(refusesEveryKey.annotations({ [KeyGroupId]: true }), { exact: true })
  })
  const pick = (given: Readonly<Record<string, unknown>>, wanted: (key: string) => boolean) =>
    Object.fromEntries(Object.entries(given).filter(([key]) => wanted(key)))
  return Schema.transform(written, grouped, {
    strict: false,
    decode: (given) => {
      const unknown = pick(given, (key) => !all.includes(key))
      return {
        ...Object.fromEntries(names.map((name) => [name, pick(given, (key) => keys.get(name)!.includes(key))])),
        // Given only when there are some, and then refused: a value decoded never has it.
        ...(Object.keys(unknown).length === 0 ? {} : { [unknownKeys]: unknown })
      }
    },
    encode: (parts: Readonly<Record<string, Readonly<Record<string, unknown>>>>) =>
      Object.fromEntries(order.flatMap((key) => names.flatMap((name) => (key in parts[name]! ? [[key, parts[name]![key]]] : []))))
  }) as unknown as KeyGroups<Groups>
}

/** The groups' values, each by its name; written as one mapping of all their keys. */
export type KeyGroups<Groups extends Readonly<Record<string, Schema.Schema.AnyNoContext>>> = Schema.Schema<
  { readonly [Name in keyof Groups]: Schema.Schema.Type<Groups[Name]> },
  Readonly<Record<string, unknown>>
>
