/**
 * StateJson: checkpoint states are plain JSON except that Float32Array and
 * Float64Array survive the trip (base64 of their bytes), views at an offset
 * included; plain JSON is unchanged; a user object that merely has a `$f32`
 * (or `$f64`) key among others is left alone.
 */
import { describe, expect, test } from "bun:test"
import fc from "fast-check"
import { parseState, stringifyState } from "../src/wire/StateJson.ts"

const roundTrip = (state: unknown) => parseState(stringifyState(state))

/** Same type, same length, same bits (NaN and -0 included). */
const sameBits = (actual: unknown, expected: Float32Array | Float64Array) => {
  expect(actual).toBeInstanceOf(expected.constructor as typeof Float32Array)
  const got = actual as Float32Array | Float64Array
  expect(got.length).toBe(expected.length)
  expect(new Uint8Array(got.buffer, got.byteOffset, got.byteLength)).toEqual(
    new Uint8Array(expected.buffer, expected.byteOffset, expected.byteLength)
  )
}

describe("StateJson", () => {
  test("Float32Array and Float64Array survive, special values bit for bit", () => {
    const f32 = Float32Array.from([0, -0, 1.5, -3.25, Number.NaN, Infinity, -Infinity, 1e-45, 3.4e38])
    const f64 = Float64Array.from([0, -0, Math.PI, -1e300, Number.NaN, Infinity, 5e-324])
    const back = roundTrip({ weights: f32, moments: f64 }) as { weights: unknown; moments: unknown }
    sameBits(back.weights, f32)
    sameBits(back.moments, f64)
  })

  test("empty arrays survive", () => {
    const back = roundTrip({ a: new Float32Array(0), b: new Float64Array(0) }) as { a: unknown; b: unknown }
    sameBits(back.a, new Float32Array(0))
    sameBits(back.b, new Float64Array(0))
  })

  test("subarray views at an offset carry only their own elements", () => {
    const f32 = Float32Array.from([9, 9, 1, 2, 3, 9])
    const f64 = Float64Array.from([9, 4, 5, 9, 9])
    const f32View = f32.subarray(2, 5)
    const f64View = f64.subarray(1, 3)
    expect(f32View.byteOffset).toBe(8)
    expect(f64View.byteOffset).toBe(8)
    const back = roundTrip({ f32View, f64View }) as { f32View: Float32Array; f64View: Float64Array }
    sameBits(back.f32View, Float32Array.from([1, 2, 3]))
    sameBits(back.f64View, Float64Array.from([4, 5]))
  })

  test("a Float32Array view at a byte offset that a Float64Array could not have", () => {
    const buffer = new ArrayBuffer(32)
    const view = new Float32Array(buffer, 4, 3)
    view.set([7, 8, 9])
    const back = roundTrip([view])
    sameBits((back as Array<unknown>)[0], Float32Array.from([7, 8, 9]))
  })

  test("arrays nested in arrays and objects, beside plain values", () => {
    const state = {
      epoch: 3,
      layers: [{ w: Float32Array.from([1, 2]), b: Float32Array.from([3]) }, { w: Float64Array.from([0.1]) }],
      name: "mlp",
      extra: null
    }
    const back = roundTrip(state) as typeof state
    expect(back.epoch).toBe(3)
    expect(back.name).toBe("mlp")
    expect(back.extra).toBeNull()
    sameBits(back.layers[0]!.w, Float32Array.from([1, 2]))
    sameBits(back.layers[0]!.b, Float32Array.from([3]))
    sameBits(back.layers[1]!.w, Float64Array.from([0.1]))
  })

  test("a top-level typed array survives", () => {
    sameBits(roundTrip(Float32Array.from([1, 2, 3])), Float32Array.from([1, 2, 3]))
  })

  test("the parsed arrays own their memory (fresh, aligned buffers)", () => {
    const back = roundTrip({ a: Float64Array.from([1, 2]), b: Float32Array.from([3]) }) as { a: Float64Array; b: Float32Array }
    expect(back.a.byteOffset).toBe(0)
    expect(back.a.buffer.byteLength).toBe(16)
    expect(back.b.buffer.byteLength).toBe(4)
  })

  test("the encoding is JSON: a typed array is an object with one base64 field", () => {
    const text = stringifyState({ w: Float32Array.from([1]) })
    expect(JSON.parse(text)).toEqual({ w: { $f32: Buffer.from(Float32Array.from([1]).buffer).toString("base64") } })
  })

  test("plain JSON is unchanged", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(stringifyState(value)).toBe(JSON.stringify(value))
        expect(parseState(JSON.stringify(value))).toEqual(JSON.parse(JSON.stringify(value)))
      }),
      { seed: 77, numRuns: 300, includeErrorInReport: true }
    )
  })

  test("a user object with a $f32 or $f64 key beside other keys is left alone", () => {
    const state = {
      a: { $f32: "AACAPw==", other: 1 },
      b: { $f64: "AAAAAAAA8D8=", note: "mine" },
      c: { $f32: "AACAPw==", $f64: "AAAAAAAA8D8=" }
    }
    expect(roundTrip(state)).toEqual(state)
  })

  test("a $f32 or $f64 key whose value is not a string is left alone", () => {
    const state = { a: { $f32: 5 }, b: { $f64: ["x"] }, c: { $f32: null } }
    expect(roundTrip(state)).toEqual(state)
  })

  // A user's object shaped like an encoded array is escaped on the way out, not mistaken on the way back.
  test("a user object whose only key is $f32 round-trips unchanged", () => {
    expect(roundTrip({ label: { $f32: "AACAPw==" } })).toEqual({ label: { $f32: "AACAPw==" } })
    expect(roundTrip({ label: { $f32: "hi" } })).toEqual({ label: { $f32: "hi" } })
    expect(roundTrip({ a: { $esc: { k: "$f32", v: "x" } }, b: { $f64: new Float64Array([1.5]) } })).toEqual({ a: { $esc: { k: "$f32", v: "x" } }, b: { $f64: new Float64Array([1.5]) } })
  })

  test("arrays are never mistaken for typed arrays", () => {
    expect(roundTrip([["$f32"], { list: ["AACAPw=="] }])).toEqual([["$f32"], { list: ["AACAPw=="] }])
  })

  test("property: random Float32/Float64 contents and view offsets survive", () => {
    const arbitrary = fc.record({
      f32: fc.float32Array({ maxLength: 40 }),
      f64: fc.float64Array({ maxLength: 40 }),
      start: fc.nat(40),
      end: fc.nat(40)
    })
    fc.assert(
      fc.property(arbitrary, ({ f32, f64, start, end }) => {
        const f32View = f32.subarray(Math.min(start, end), Math.max(start, end))
        const f64View = f64.subarray(Math.min(start, end), Math.max(start, end))
        const back = roundTrip({ f32: f32View, f64: f64View, rest: [f32] }) as Record<string, unknown>
        sameBits(back.f32, f32View)
        sameBits(back.f64, f64View)
        sameBits((back.rest as Array<unknown>)[0], f32)
      }),
      { seed: 99, numRuns: 300, includeErrorInReport: true }
    )
  })
})
