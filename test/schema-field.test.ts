/**
 * The bridge from `effect/Schema` to a cluster file's messages: every refusal
 * a schema makes comes back at its YAML path, line and column, in the
 * hand-written readers' words. Expected messages are written out by hand.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { Millis, Restart } from "../src/kernel/policy/Strategy.ts"
import { durationText } from "../src/config/reading/DurationSchema.ts"
import { expectedAt, expecting, rangeOf } from "../src/config/reading/Expected.ts"
import { keyGroups } from "../src/config/reading/Mapping.ts"
import { decodeField } from "../src/config/reading/SchemaField.ts"
import { parse } from "../src/config/reading/Yaml.ts"

/** Decode the `section` key of `text` with `schema`: the value, or every message, one per line. */
const read = <A, I>(schema: Schema.Schema<A, I>, text: string) =>
  Effect.runPromise(Effect.either(parse(text, "f.yml", (root) => decodeField(root.get("section"), schema)))).then((result) =>
    result._tag === "Right" ? { value: result.right } : { problems: result.left.message.split("\n") }
  )

const Port = Schema.Int.pipe(Schema.between(1, 65_535), expecting("a port from 1 to 65535"))
const Server = Schema.Struct({
  host: Schema.String,
  port: Port,
  tags: Schema.optional(Schema.Array(Schema.String))
})

describe("a refusal is placed and worded as the hand-written readers place and word it", () => {
  test("a value of the wrong kind: its path, line and column, what is expected and what is there", async () => {
    expect(await read(Server, "section:\n  host: a\n  port: lots\n")).toEqual({
      problems: [`f.yml: section.port (line 3, col 9): expected a port from 1 to 65535, got "lots"`]
    })
  })

  test("a list item: its index in the path", async () => {
    expect(await read(Server, "section: { host: a, port: 80, tags: [x, 7, y] }")).toEqual({
      problems: ["f.yml: section.tags[1] (line 1, col 41): expected a string, got 7"]
    })
  })

  test("an absent key: got nothing, at the mapping that lacks it", async () => {
    expect(await read(Server, "section: { port: 80 }")).toEqual({
      problems: ["f.yml: section.host (line 1, col 10): expected a string, got nothing"]
    })
  })

  test("an unknown key: at the key, with the known keys in order and the closest one", async () => {
    expect(await read(Server, "section: { host: a, port: 80, prot: 81, colour: red }")).toEqual({
      problems: [
        `f.yml: section (line 1, col 31): unknown key "prot" (did you mean "port"?); known keys: host, port, tags`,
        `f.yml: section (line 1, col 41): unknown key "colour"; known keys: host, port, tags`
      ]
    })
  })

  test("not a mapping: the keys it should have", async () => {
    expect(await read(Server, "section: [a, 80]")).toEqual({
      problems: ["f.yml: section (line 1, col 10): expected a mapping with keys host, port, tags, got a list"]
    })
  })

  test("every mistake at once, in document order", async () => {
    expect(await read(Server, "section:\n  tags: [1]\n  port: 0\n  hots: a\n")).toEqual({
      problems: [
        "f.yml: section.host (line 2, col 3): expected a string, got nothing",
        "f.yml: section.tags[0] (line 2, col 10): expected a string, got 1",
        "f.yml: section.port (line 3, col 9): expected a port from 1 to 65535, got 0",
        `f.yml: section (line 4, col 3): unknown key "hots" (did you mean "host"?); known keys: host, port, tags`
      ]
    })
  })

  test("what is there is read from the file, whatever a transformation made of it", async () => {
    const doubled = Schema.transform(Schema.NumberFromString, Schema.Number.pipe(Schema.lessThan(10)), {
      strict: true,
      decode: (n) => n * 2,
      encode: (n) => n / 2
    }).pipe(expecting("a number below 5, written as a string"))
    expect(await read(doubled, `section: "7"`)).toEqual({
      problems: [`f.yml: section (line 1, col 10): expected a number below 5, written as a string, got "7"`]
    })
  })

  test("an alias has no plain value here: something else", async () => {
    expect(await read(Server, "section: { host: &h a, port: *h }")).toEqual({
      problems: ["f.yml: section.port (line 1, col 30): expected a port from 1 to 65535, got something else"]
    })
  })
})

describe("who says what is expected", () => {
  test("a schema that says nothing: what it is", async () => {
    expect(await read(Schema.Struct({ mode: Schema.Literal("one", "all") }), "section: { mode: some }")).toEqual({
      problems: [`f.yml: section.mode (line 1, col 18): expected one of "one", "all", got "some"`]
    })
    expect(await read(Schema.Struct({ on: Schema.Boolean }), "section: { on: yes please }")).toEqual({
      problems: [`f.yml: section.on (line 1, col 16): expected true or false, got "yes please"`]
    })
  })

  test("the nearest schema that says what it expects speaks for the ones inside it", async () => {
    const inner = Schema.Number.pipe(expecting("a small number"))
    const outer = Schema.Struct({ n: inner.pipe(Schema.lessThan(3), expecting("a number below 3")) })
    expect(await read(outer, "section: { n: x }")).toEqual({ problems: [`f.yml: section.n (line 1, col 15): expected a small number, got "x"`] })
    expect(await read(outer, "section: { n: 4 }")).toEqual({ problems: ["f.yml: section.n (line 1, col 15): expected a number below 3, got 4"] })
  })

  test("a union is one expectation: its own, or its members' joined", async () => {
    const said = Schema.Union(Schema.Number, Schema.Literal("all")).pipe(expecting(`a count or "all"`))
    expect(await read(said, "section: many")).toEqual({ problems: [`f.yml: section (line 1, col 10): expected a count or "all", got "many"`] })
    const joined = Schema.Union(Schema.Number.pipe(expecting("a count")), Schema.Literal("all").pipe(expecting(`"all"`)))
    expect(await read(joined, "section: many")).toEqual({ problems: [`f.yml: section (line 1, col 10): expected a count or "all", got "many"`] })
  })

  test("a union member that got further than the kind of value is the one meant: only its problems are said", async () => {
    const form = Schema.Union(Schema.Literal("off"), Schema.Struct({ every: Port })).pipe(expecting(`"off" or { every: … }`))
    expect(await read(form, "section: { every: 0 }")).toEqual({
      problems: ["f.yml: section.every (line 1, col 19): expected a port from 1 to 65535, got 0"]
    })
    expect(await read(form, "section: 5")).toEqual({ problems: [`f.yml: section (line 1, col 10): expected "off" or { every: … }, got 5`] })
  })

  test("a check's own message is said as it is, at the path it names", async () => {
    const range = Schema.Struct({ low: Schema.Number, high: Schema.Number }).pipe(
      Schema.filter(({ high, low }) => low <= high || { path: ["high"], message: `high must be at least low (${low})` })
    )
    expect(await read(range, "section: { low: 5, high: 1 }")).toEqual({ problems: ["f.yml: section.high (line 1, col 26): high must be at least low (5)"] })
    const whole = Schema.Struct({}).pipe(Schema.filter(() => "nothing is ever good enough"))
    expect(await read(whole, "section: {}")).toEqual({ problems: ["f.yml: section (line 1, col 10): nothing is ever good enough"] })
  })

  test("a decoder's own expectation outranks the schemas around it, and the file says what is there", async () => {
    const even = Schema.transformOrFail(Schema.Number, Schema.Number, {
      strict: true,
      decode: (n) => (n % 2 === 0 ? ParseResult.succeed(n) : ParseResult.fail(expectedAt("an even number"))),
      encode: ParseResult.succeed
    }).pipe(expecting("a number"))
    expect(await read(Schema.Struct({ n: even }), "section: { n: 3 }")).toEqual({ problems: ["f.yml: section.n (line 1, col 15): expected an even number, got 3"] })
  })
})

describe("key groups", () => {
  const Window = keyGroups(
    {
      sizes: Schema.Struct({ min: Schema.Int, max: Schema.Int }).pipe(
        Schema.filter(({ max, min }) => min <= max || { path: ["max"], message: `expected at least min (${min}), got ${max}` })
      ),
      names: Schema.Struct({ label: Schema.String })
    },
    ["label", "min", "max"]
  )

  test("a group's check runs although another group has a mistake; an unknown key hides neither", async () => {
    expect(await read(Window, "section: { label: 7, min: 3, max: 2, maxx: 1 }")).toEqual({
      problems: [
        "f.yml: section.label (line 1, col 19): expected a string, got 7",
        "f.yml: section.max (line 1, col 35): expected at least min (3), got 2",
        `f.yml: section (line 1, col 38): unknown key "maxx" (did you mean "max"?); known keys: label, min, max`
      ]
    })
  })

  test("the groups read as one mapping, written back in the listed order", async () => {
    expect(await read(Window, "section: { min: 1, max: 2, label: w }")).toEqual({ value: { sizes: { min: 1, max: 2 }, names: { label: "w" } } })
    expect(Object.keys(Schema.encodeSync(Window)({ sizes: { min: 1, max: 2 }, names: { label: "w" } }))).toEqual(["label", "min", "max"])
    expect(await read(Window, "section: 5")).toEqual({ problems: ["f.yml: section (line 1, col 10): expected a mapping with keys label, min, max, got 5"] })
  })
})

describe("durations and ranges", () => {
  test("a range is read from the schema that checks it", () => {
    expect(rangeOf(Millis)).toEqual({ min: 0, minIsExclusive: false, max: 604_800_000 })
    expect(rangeOf(Restart.fields.within)).toEqual({ min: 0, minIsExclusive: true, max: 604_800_000 })
    expect(rangeOf(Schema.Number.pipe(Schema.greaterThanOrEqualTo(2), Schema.lessThanOrEqualTo(9)))).toEqual({ min: 2, minIsExclusive: false, max: 9 })
    expect(rangeOf(Schema.Number)).toEqual({ min: -Infinity, minIsExclusive: false, max: Infinity })
  })

  test("a duration names its lower bound always, its upper bound when it is exceeded", async () => {
    const timeout = Schema.Struct({ timeout: durationText(Millis.pipe(Schema.greaterThanOrEqualTo(2_000))) })
    expect(await read(timeout, "section: { timeout: 90s }")).toEqual({ value: { timeout: 90_000 } })
    expect(await read(timeout, "section: { timeout: soon }")).toEqual({
      problems: [`f.yml: section.timeout (line 1, col 21): expected a duration like "250ms", "5s", "10m" or "1h" of at least 2s, got "soon"`]
    })
    expect(await read(timeout, "section: { timeout: 1s }")).toEqual({
      problems: [`f.yml: section.timeout (line 1, col 21): expected a duration like "250ms", "5s", "10m" or "1h" of at least 2s, got "1s"`]
    })
    expect(await read(timeout, "section: { timeout: 169h }")).toEqual({
      problems: [`f.yml: section.timeout (line 1, col 21): expected a duration like "250ms", "5s", "10m" or "1h" of at least 2s up to 168h, got "169h"`]
    })
    expect(await read(Schema.Struct({ within: durationText(Restart.fields.within) }), "section: { within: 0ms }")).toEqual({
      problems: [`f.yml: section.within (line 1, col 20): expected a duration like "250ms", "5s", "10m" or "1h" above 0ms, got "0ms"`]
    })
    expect(Schema.encodeSync(timeout)({ timeout: 90_000 })).toEqual({ timeout: "90s" })
  })
})
