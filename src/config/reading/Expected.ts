/**
 * What a value in a cluster file should be, said to a person.
 *
 * A schema that decodes part of the file says, in an `Expected` annotation,
 * the words that follow "expected" when it refuses a value (`a duration like
 * "5s"`); `SchemaField` finishes the sentence with what the file has there.
 * A number's range is read from the schema that checks it (`rangeOf`), so a
 * bound is written once, where it is enforced, and every message naming it
 * follows.
 */
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import type * as Schema from "effect/Schema"
import * as AST from "effect/SchemaAST"

export const ExpectedId: unique symbol = Symbol.for("cohort/config/Expected")

/** Say what a person should write where `schema` decodes. */
export const expecting = (what: string) => <S extends Schema.Annotable.All>(schema: S): Schema.Annotable.Self<S> =>
  schema.annotations({ [ExpectedId]: what }) as Schema.Annotable.Self<S>

/** What `ast` says it expects, when it says. */
export const expectedOf = (ast: AST.Annotated): string | undefined => {
  const what = ast.annotations[ExpectedId]
  return typeof what === "string" ? what : undefined
}

/**
 * A refusal from a decoder's own check (one that no single field's schema can
 * make, such as one field against another): the value at `path`, below the
 * place being decoded, should have been `what`. It outranks the schemas
 * around it, which only know what they expect in general.
 */
export const expectedAt = (what: string, path: ReadonlyArray<PropertyKey> = []): ParseResult.ParseIssue => {
  const refusal = new ParseResult.Type(AST.annotations(AST.neverKeyword, { [ExpectedId]: what }), undefined)
  return path.length === 0 ? refusal : new ParseResult.Pointer(path as ParseResult.Path, undefined, refusal)
}

/** The values a number schema lets through: from `min` (itself excluded when `minIsExclusive`) to `max`. */
export interface Range {
  readonly min: number
  readonly minIsExclusive: boolean
  readonly max: number
}

/**
 * The range a number schema checks, read from its refinements (`between`,
 * `greaterThan`, `lessThanOrEqualTo`, … each records its bound for JSON
 * Schema): the tightest bound on each side wins.
 */
export const rangeOf = (schema: Schema.Schema.Any): Range => {
  let range: Range = { min: -Infinity, minIsExclusive: false, max: Infinity }
  for (let ast: AST.AST = schema.ast; AST.isRefinement(ast); ast = ast.from) {
    const bounds = Option.getOrUndefined(AST.getJSONSchemaAnnotation(ast)) as Readonly<Record<string, unknown>> | undefined
    const { exclusiveMinimum, maximum, minimum } = bounds ?? {}
    if (typeof minimum === "number" && minimum > range.min) range = { ...range, min: minimum, minIsExclusive: false }
    if (typeof exclusiveMinimum === "number" && exclusiveMinimum >= range.min) range = { ...range, min: exclusiveMinimum, minIsExclusive: true }
    if (typeof maximum === "number" && maximum < range.max) range = { ...range, max: maximum }
  }
  return range
}
