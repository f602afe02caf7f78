/**
 * Reading YAML with a finger on the source.
 *
 * A `Field` is one place in a parsed document: its YAML path, its node (or
 * none, for a key that is absent) and a way back to line and column. Its
 * readers either return a typed value or record a `ConfigError` naming that
 * place, what was expected and what was found, and abandon the value being
 * read. Decoders wrap independent parts in `attempt`, so one bad value does
 * not hide the next: `parse` reports every error at once (or the YAML syntax
 * error), in document order. A part may instead be decoded by an
 * `effect/Schema` (`SchemaField.decodeField`), whose refusals are reported
 * here the same way.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import { type Document, isMap, isScalar, isSeq, LineCounter, type Node, parseDocument, YAMLMap } from "yaml"
import { ConfigError } from "./ConfigError.ts"
import { nearestWithin } from "./DidYouMean.ts"

interface Source {
  readonly file: string | undefined
  readonly lines: LineCounter
  readonly errors: Array<ConfigError>
}

/**
 * Nodes a reader puts in place of the file's own (flodl's key names, read as cohort's: see `FlodlKeys`), and
 * what the file wrote there: a mistake is said under the key's own name, with the value as written.
 */
const keysWritten = new WeakMap<Node, string>()
const valuesWritten = new WeakMap<Node, string>()

/** `key` stands for the key the file writes as `name`; `value`, when given, for the value it writes as `found`. */
export const writtenAs = (key: Node, name: string, value?: { readonly node: Node; readonly found: string }): void => {
  keysWritten.set(key, name)
  if (value !== undefined) valuesWritten.set(value.node, value.found)
}

/** Thrown past a value that could not be read; its error is already recorded. */
class Abandoned {}

/** Every mistake found in one file, in document order. */
export class ConfigErrors extends Data.TaggedError("ConfigErrors")<{ readonly errors: ReadonlyArray<ConfigError> }> {
  override get message(): string {
    return this.errors.map((error) => error.message).join("\n")
  }
}

export class Field {
  constructor(
    readonly path: string,
    readonly node: Node | null | undefined,
    readonly source: Source,
    /** Where to point when this field is absent: its parent. */
    readonly anchor?: Node | null | undefined
  ) {}

  get present(): boolean {
    return this.node !== undefined && this.node !== null && !(isScalar(this.node) && this.node.value === null)
  }

  /** Record a ConfigError at this field (or at `at`, a key node) and abandon the value being read. */
  fail(problem: string, at?: Node | null): never {
    this.report(problem, at)
    throw new Abandoned()
  }

  /** Record a ConfigError at this field (or at `at`) and carry on reading. */
  report(problem: string, at?: Node | null): void {
    const node = at ?? this.node ?? this.anchor
    const offset = node?.range?.[0]
    const pos = offset === undefined ? undefined : this.source.lines.linePos(offset)
    this.source.errors.push(new ConfigError({ file: this.source.file, path: this.path, line: pos?.line, col: pos?.col, problem }))
  }

  /**
   * Record a ConfigError about the file as a whole (a section it lacks), with no place: the top of the
   * file is not where anything is wrong, and a place there would send the reader to look at it.
   */
  reportMissing(problem: string): void {
    this.source.errors.push(new ConfigError({ file: this.source.file, path: "", line: undefined, col: undefined, problem }))
  }

  /** An optional field: absent gives `fallback`; a bad value is reported and also gives `fallback`, so reading goes on. */
  readOr<A>(read: (field: Field) => A, fallback: A): A {
    return this.present ? this.attempt(() => read(this)) ?? fallback : fallback
  }

  /** Read one independent part; if it is abandoned, the error is kept and the result is undefined. */
  attempt<A>(read: () => A): A | undefined {
    try {
      return read()
    } catch (error) {
      if (error instanceof Abandoned) return undefined
      throw error
    }
  }

  /** Throw "expected …, got …" with a short rendering of what is there. */
  expected(what: string): never {
    return this.fail(`expected ${what}, got ${this.found}`)
  }

  /** How the value reads to a person: `"lots"`, `12`, `a mapping`, `nothing`. */
  get found(): string {
    const node = this.node
    const written = node === null || node === undefined ? undefined : valuesWritten.get(node)
    if (written !== undefined) return written
    if (!this.present) return "nothing"
    if (isMap(node)) return "a mapping"
    if (isSeq(node)) return "a list"
    if (isScalar(node)) return JSON.stringify(node.value) ?? String(node.value)
    return "something else"
  }

  /** Give up on the value being read, its errors already reported: the nearest `attempt` or `readOr` carries on. */
  abandon(): never {
    throw new Abandoned()
  }

  get scalar(): unknown {
    return isScalar(this.node) ? this.node.value : undefined
  }

  /**
   * A mapping whose keys must all be known: its known keys, each a Field (an
   * absent one too: it reads as its default). An unknown key is reported (see
   * `reportUnknownKey`) and reading goes on.
   */
  map<const K extends string>(known: ReadonlyArray<K>): Record<K, Field> {
    // An absent section reads as an empty one: every key takes its default.
    if (!this.present) return Object.fromEntries(known.map((key) => [key, new Field(this.child(key), undefined, this.source, this.anchor)])) as Record<K, Field>
    if (!isMap(this.node)) this.expected(`a mapping with keys ${known.join(", ")}`)
    const fields: Partial<Record<K, Field>> = {}
    for (const pair of this.node.items) {
      const key = isScalar(pair.key) ? String(pair.key.value) : undefined
      const keyNode = pair.key as Node | null
      if (key === undefined) this.fail("keys must be plain words", keyNode)
      if (!(known as ReadonlyArray<string>).includes(key)) {
        // Reported, not fatal: the known keys beside it are still read.
        this.reportUnknownKey(key, known)
        continue
      }
      fields[key as K] = new Field(this.childAt(key, keyNode), pair.value as Node | null, this.source, keyNode)
    }
    for (const key of known) {
      fields[key] ??= new Field(this.child(key), undefined, this.source, this.node)
    }
    return fields as Record<K, Field>
  }

  /** Report `key` of this mapping as unknown, at the key, listing the known ones and the closest when it is near enough to be a typo. */
  reportUnknownKey(key: string, known: ReadonlyArray<string>): void {
    const near = closest(key, known)
    const hint = near === undefined ? "" : ` (did you mean "${near}"?)`
    this.report(`unknown key "${key}"${hint}; known keys: ${known.join(", ")}`, this.get(key).anchor)
  }

  /** Every key of a mapping whose keys are free-form (environment variables); the caller checks the names. */
  entries(what = "a mapping"): Array<readonly [string, Field]> {
    if (!this.present) return []
    if (!isMap(this.node)) this.expected(what)
    return this.node.items.map((pair) => {
      const key = isScalar(pair.key) ? String(pair.key.value) : ""
      return [key, new Field(this.child(key), pair.value as Node | null, this.source, pair.key as Node | null)] as const
    })
  }

  /** One key of a mapping, leaving the others alone (for sections owned by different modules). */
  get(key: string): Field {
    const pair = isMap(this.node) ? this.node.items.find((item) => isScalar(item.key) && String(item.key.value) === key) : undefined
    return pair === undefined
      ? new Field(this.child(key), undefined, this.source, this.node ?? this.anchor)
      : new Field(this.childAt(key, pair.key as Node | null), pair.value as Node | null, this.source, pair.key as Node | null)
  }

  /** One item of a list (absent past its end, or when this is not a list). */
  item(index: number): Field {
    const node = isSeq(this.node) ? (this.node.items[index] as Node | null | undefined) : undefined
    return new Field(`${this.path}[${index}]`, node, this.source, this.node ?? this.anchor)
  }

  /** The field `path` below this one: keys of mappings and indices of lists, as a Schema issue names them. */
  at(path: ReadonlyArray<PropertyKey>): Field {
    return path.reduce<Field>((field, step) => (typeof step === "number" ? field.item(step) : field.get(String(step))), this)
  }

  /**
   * This mapping without `keys`, which their own readers take from this field: a copy whose other pairs (and
   * so every place a mistake is said) are the file's own. This field itself when it is no mapping.
   */
  without(keys: ReadonlyArray<string>): Field {
    return this.keeping((key) => key === undefined || !keys.includes(key))
  }

  /** This mapping with only `keys` (a copy, as `without` makes); this field itself when it is no mapping. */
  only(keys: ReadonlyArray<string>): Field {
    return this.keeping((key) => key !== undefined && keys.includes(key))
  }

  private keeping(keep: (key: string | undefined) => boolean): Field {
    const node = this.node
    if (!isMap(node)) return this
    const copy = new YAMLMap<unknown, unknown>()
    copy.range = node.range
    copy.flow = node.flow
    copy.items = node.items.filter((pair) => keep(isScalar(pair.key) ? String(pair.key.value) : undefined))
    return new Field(this.path, copy, this.source, this.anchor)
  }

  has(key: string): boolean {
    return isMap(this.node) && this.node.items.some((item) => isScalar(item.key) && String(item.key.value) === key)
  }

  /** The path of `key`, under the name the file writes it with (see `writtenAs`). */
  private childAt(key: string, keyNode: Node | null): string {
    return this.child((keyNode === null ? undefined : keysWritten.get(keyNode)) ?? key)
  }

  child(key: string): string {
    return this.path === "" ? key : `${this.path}.${key}`
  }

  string(what = "a string"): string {
    const value = this.scalar
    if (typeof value !== "string" || value.length === 0) this.expected(what)
    return value
  }
}

/**
 * Parse `text` and hand its root to `decode`; every error recorded inside makes the result a failure.
 * `edit` changes the parsed document first (the command line's overrides); its refusals are errors too.
 */
export const parse = <A>(
  text: string,
  file: string | undefined,
  decode: (root: Field) => A,
  edit?: (doc: Document.Parsed) => ReadonlyArray<ConfigError>
): Effect.Effect<A, ConfigErrors> =>
  Effect.suspend(() => {
    const lines = new LineCounter()
    const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true })
    const syntax = doc.errors[0]
    if (syntax !== undefined) {
      const pos = lines.linePos(syntax.pos[0])
      return Effect.fail(
        new ConfigErrors({
          errors: [new ConfigError({ file, path: "", line: pos.line, col: pos.col, problem: `not valid YAML: ${syntax.message}` })]
        })
      )
    }
    // What an edit refuses is reported with what the decoder finds in the rest: every mistake at once.
    const source: Source = { file, lines, errors: [...(edit?.(doc) ?? [])] }
    const root = new Field("", doc.contents as Node | null, source)
    const value = root.attempt(() => decode(root))
    if (source.errors.length > 0 || value === undefined) {
      const errors = [...source.errors].sort((a, b) => (a.line ?? 0) - (b.line ?? 0) || (a.col ?? 0) - (b.col ?? 0))
      return Effect.fail(new ConfigErrors({ errors }))
    }
    return Effect.succeed(value)
  })

/** The known key nearest to a misspelt one, if it is near enough to be a typo (a third of its letters, at least 2). */
const closest = (word: string, known: ReadonlyArray<string>): string | undefined => nearestWithin(word, known, Math.max(2, Math.floor(word.length / 3)))
