/**
 * Decoding a part of a cluster file with an `effect/Schema`, reporting each
 * mistake the way the hand-written readers of `Yaml` do: at its line and
 * column, under its YAML path, as "expected …, got …", unknown keys with the
 * known ones and a did-you-mean.
 *
 * The subtree's plain value is decoded with every error kept and excess keys
 * refused. The `ParseResult` issue tree is then read into problems, each at a
 * path of keys and indices that `Field.at` follows back to the YAML node:
 *
 * - a refusal is said by the nearest schema that says what it `expects` (see
 *   `Expected`), or else by what the refused schema is (`a mapping with keys
 *   …`, `one of "one", "all"`); what the file has there is always read from
 *   the file itself, whatever the transformations made of it;
 * - a union is one expectation (its own, or its members' joined with "or")
 *   unless a member got further than refusing the kind of value (into a
 *   mapping, or to a check of its own): that member was meant, and only its
 *   problems are said;
 * - a message that a check gives (`Schema.filter` returning a string) is said
 *   as it is.
 */
import * as Either from "effect/Either"
import type * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as AST from "effect/SchemaAST"
import { isMap, isScalar, isSeq, type Node, type Scalar } from "yaml"
import { expectedOf } from "./Expected.ts"
import { isKeyGroup } from "./Mapping.ts"
import type { Field } from "./Yaml.ts"

/**
 * Read `field` with `schema`; a refused value is reported at its place and
 * abandoned (see `Field.attempt`). `whenAbsent` is what an absent field (or
 * one written with nothing) reads as: `{}` for a section whose every key has
 * a default, or for an entry whose required keys are then asked for one by
 * one. It is decoded as the file's own value would be, so it need not be one
 * the schema accepts.
 */
export const decodeField = <A, I>(field: Field, schema: Schema.Schema<A, I, never>, options: { readonly whenAbsent?: unknown } = {}): A => {
  const written = !field.present && "whenAbsent" in options ? options.whenAbsent : plainValue(field)
  const decoded = Schema.decodeUnknownEither(schema, { errors: "all", onExcessProperty: "error" })(written)
  if (Either.isRight(decoded)) return decoded.right
  for (const problem of problemsOf(decoded.left.issue, [])) report(field, problem)
  return field.abandon()
}

type Path = ReadonlyArray<PropertyKey>

type Problem =
  /** The value at `path` is refused: said as what `what` (or else `refused` itself) expects, and what is there. */
  | { readonly _tag: "Expected"; readonly path: Path; readonly what: string | undefined; readonly refused: AST.AST }
  /** A check's own message about the value at `path`. */
  | { readonly _tag: "Said"; readonly path: Path; readonly problem: string }
  /** The mapping at `path` has a key no schema knows. */
  | { readonly _tag: "UnknownKey"; readonly path: Path; readonly key: string; readonly known: ReadonlyArray<string> }

const report = (root: Field, problem: Problem): void => {
  const field = root.at(problem.path)
  switch (problem._tag) {
    case "Expected": {
      // A mapping was meant, but one of its keys is no plain word: that is what to fix, at that key.
      const oddKey = readsMapping(problem.refused) ? firstOddKey(field) : undefined
      if (oddKey !== undefined) return field.report("keys must be plain words", oddKey)
      return field.report(`expected ${problem.what ?? describe(problem.refused)}, got ${field.found}`)
    }
    case "Said":
      return field.report(problem.problem)
    case "UnknownKey":
      return field.reportUnknownKey(problem.key, problem.known)
  }
}

const problemsOf = (issue: ParseResult.ParseIssue, path: Path): ReadonlyArray<Problem> => {
  switch (issue._tag) {
    case "Pointer":
      return problemsOf(issue.issue, [...path, ...(Array.isArray(issue.path) ? issue.path : [issue.path])])
    case "Type":
      return [issue.message === undefined ? { _tag: "Expected", path, what: expectedOf(issue.ast), refused: issue.ast } : { _tag: "Said", path, problem: issue.message }]
    case "Missing":
      // `issue.ast` is the absent key's signature; what it expects is its type's.
      return [{ _tag: "Expected", path, what: expectedOf(issue.ast.type), refused: issue.ast.type }]
    case "Unexpected": {
      // Excess keys are reported by the mapping around them, which knows the keys it has.
      const key = path[path.length - 1]
      return typeof key === "string"
        ? [{ _tag: "UnknownKey", path: path.slice(0, -1), key, known: [] }]
        : [{ _tag: "Said", path, problem: issue.message ?? "is not expected here" }]
    }
    case "Forbidden":
      return [{ _tag: "Said", path, problem: issue.message ?? "cannot be read here" }]
    case "Refinement":
    case "Transformation":
      return expectedBy(issue.ast, path, problemsOf(issue.issue, path))
    case "Composite": {
      const ast = issue.ast
      const inner = (Array.isArray(issue.issues) ? issue.issues : [issue.issues]).flatMap((each) =>
        // A group of keys is not a mapping below this one: its keys are this mapping's own.
        AST.isTypeLiteral(ast) && each._tag === "Pointer" && isGroupOf(ast, each.path) ? problemsOf(each.issue, path) : problemsOf(each, path)
      )
      if (AST.isTypeLiteral(ast)) return withKnownKeys(ast, path, inner)
      if (AST.isUnion(ast)) return expectedBy(ast, path, oneOf(ast, path, inner))
      return expectedBy(ast, path, inner)
    }
  }
}

const samePath = (a: Path, b: Path): boolean => a.length === b.length && a.every((step, index) => step === b[index])

/** A refusal of the value at `path` itself (not below it) that no schema has put in words yet. */
const unsaid = (problem: Problem, path: Path): problem is Extract<Problem, { _tag: "Expected" }> =>
  problem._tag === "Expected" && problem.what === undefined && samePath(problem.path, path)

/** The nearest schema that says what it expects speaks for refusals below it at its own place. */
const expectedBy = (ast: AST.AST, path: Path, problems: ReadonlyArray<Problem>): ReadonlyArray<Problem> => {
  const what = expectedOf(ast)
  return what === undefined ? problems : problems.map((problem) => (unsaid(problem, path) ? { ...problem, what } : problem))
}

const isGroupOf = (mapping: AST.TypeLiteral, key: ParseResult.Path): boolean =>
  mapping.propertySignatures.some((signature) => signature.name === key && isKeyGroup(signature.type))

/** The innermost mapping around an unknown key lists the keys it knows. */
const withKnownKeys = (mapping: AST.TypeLiteral, path: Path, problems: ReadonlyArray<Problem>): ReadonlyArray<Problem> => {
  const known = mapping.propertySignatures.map((signature) => String(signature.name))
  return problems.map((problem) =>
    problem._tag === "UnknownKey" && problem.known.length === 0 && samePath(problem.path, path) ? { ...problem, known } : problem
  )
}

const oneOf = (union: AST.Union, path: Path, problems: ReadonlyArray<Problem>): ReadonlyArray<Problem> => {
  const refusedKind = (problem: Problem) => problem._tag === "Expected" && samePath(problem.path, path)
  const meant = problems.filter((problem) => !refusedKind(problem))
  if (meant.length > 0) return meant
  // Every member refused the value as the wrong kind: one expectation, the union's own or its members'.
  const members = [...new Set(problems.flatMap((problem) => (problem._tag === "Expected" && problem.what !== undefined ? [problem.what] : [])))]
  const what = expectedOf(union) ?? (members.length > 0 ? members.join(" or ") : undefined)
  return [{ _tag: "Expected", path, what, refused: union }]
}

/** What a schema that says nothing of its own expects, in a person's words. */
const describe = (ast: AST.AST): string => {
  const what = expectedOf(ast)
  if (what !== undefined) return what
  switch (ast._tag) {
    case "TypeLiteral":
      return `a mapping with keys ${ast.propertySignatures.map((signature) => String(signature.name)).join(", ")}`
    case "Union": {
      // `null` and `undefined` members only make a key optional: nobody is asked to write them.
      const members = unionMembers(ast).filter((member) => !AST.isUndefinedKeyword(member) && !(AST.isLiteral(member) && member.literal === null))
      if (members.every(AST.isLiteral)) return `one of ${members.map((member) => JSON.stringify(member.literal)).join(", ")}`
      return members.map(describe).join(" or ")
    }
    case "Literal":
      return JSON.stringify(ast.literal)
    case "StringKeyword":
      return "a string"
    case "NumberKeyword":
      return "a number"
    case "BooleanKeyword":
      return "true or false"
    case "TupleType":
      return "a list"
    case "Refinement":
    case "Transformation":
      return describe(ast.from)
    default:
      return String(ast)
  }
}

/** A union's members, a member that is itself a union (as `Schema.NullOr` makes) taken apart. */
const unionMembers = (union: AST.Union): ReadonlyArray<AST.AST> => union.types.flatMap((member) => (AST.isUnion(member) ? unionMembers(member) : [member]))

/**
 * Stands for a node that has no plain value: an alias (it reads as "something else"), or a mapping with a
 * key that is no plain word (said as such where a mapping was meant, and as a mapping where it was not).
 * No schema but `Schema.Unknown` accepts it, which leaves the node to a reader of its own.
 */
const unreadable = Symbol("unreadable")

/** The first key of `field`'s mapping that is no plain word (a list, a mapping, an alias). */
const firstOddKey = (field: Field): Node | undefined => {
  const node = field.node
  return isMap(node) ? (node.items.find((pair) => !isScalar(pair.key))?.key as Node | undefined) : undefined
}

/** Whether `ast` (or one member of it) decodes a mapping. */
const readsMapping = (ast: AST.AST): boolean => {
  switch (ast._tag) {
    case "TypeLiteral":
      return true
    case "Union":
      return ast.types.some(readsMapping)
    case "Refinement":
    case "Transformation":
      return readsMapping(ast.from)
    default:
      return false
  }
}

/** The subtree as plain data: mappings as objects, lists as arrays, scalars as their values, absent as undefined. */
const plainValue = (field: Field): unknown => {
  const node = field.node
  if (node === undefined || node === null) return node
  if (isScalar(node)) return node.value
  if (isSeq(node)) return node.items.map((_, index) => plainValue(field.item(index)))
  if (!isMap(node) || firstOddKey(field) !== undefined) return unreadable
  return Object.fromEntries(
    node.items.map((pair) => {
      const key = String((pair.key as Scalar).value)
      return [key, plainValue(field.get(key))]
    })
  )
}
