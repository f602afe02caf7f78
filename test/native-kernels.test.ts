/**
 * The native CPU kernels against a TypeScript reference that adds in the
 * same order with the same rounding: sums and averages of N buffers (f32
 * and bf16), in-place add and scale, over lengths from 0 to a million,
 * views at any element offset, outputs that are one of the inputs, and
 * NaN, ±Infinity and -0 among the values.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import fc from "fast-check"
import * as Native from "../src/native/Native.ts"

const native = Effect.runSync(Native.load())
const f = Math.fround

// bf16 is the high half of an f32, rounded to nearest-even; NaN stays a (quiet) NaN.
const bits = new Uint32Array(1)
const float = new Float32Array(bits.buffer)
const bf16ToF32 = (value: number) => {
  bits[0] = value << 16
  return float[0]!
}
const f32ToBf16 = (value: number) => {
  float[0] = value
  const b = bits[0]!
  if (Number.isNaN(value)) return ((b >>> 16) | 0x40) & 0xffff
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff
}

type Op = "sum" | "average"
const referenceF32 = (op: Op, inputs: ReadonlyArray<Float32Array>, length: number) =>
  Float32Array.from({ length }, (_, i) => {
    let acc = inputs[0]![i]!
    for (const input of inputs.slice(1)) acc = f(acc + input[i]!)
    return op === "average" ? f(acc / inputs.length) : acc
  })
const referenceBf16 = (op: Op, inputs: ReadonlyArray<Uint16Array>, length: number) =>
  Uint16Array.from({ length }, (_, i) => {
    let acc = bf16ToF32(inputs[0]![i]!)
    for (const input of inputs.slice(1)) acc = f(acc + bf16ToF32(input[i]!))
    return f32ToBf16(op === "average" ? f(acc / inputs.length) : acc)
  })

/** Equal element by element, NaN equal to any NaN (payloads are not part of the contract). */
const sameF32 = (actual: Float32Array, expected: Float32Array) => {
  expect(actual.length).toBe(expected.length)
  for (let i = 0; i < actual.length; i++) {
    const [a, e] = [actual[i]!, expected[i]!]
    if (!(Number.isNaN(a) && Number.isNaN(e)) && !Object.is(a, e)) throw new Error(`element ${i}: got ${a}, expected ${e}`)
  }
}
const sameBf16 = (actual: Uint16Array, expected: Uint16Array) => {
  for (let i = 0; i < actual.length; i++) {
    const [a, e] = [actual[i]!, expected[i]!]
    const bothNaN = Number.isNaN(bf16ToF32(a)) && Number.isNaN(bf16ToF32(e))
    if (!bothNaN && a !== e) throw new Error(`element ${i}: got 0x${a.toString(16)}, expected 0x${e.toString(16)}`)
  }
}

/** A view of `length` elements at element offset `offset` into a larger buffer, filled by `fill`. */
const view = <T extends Float32Array | Uint16Array>(make: (buffer: ArrayBuffer, offset: number, length: number) => T, bytes: number, offset: number, length: number, fill: (i: number) => number): T => {
  const out = make(new ArrayBuffer((offset + length + 3) * bytes), offset, length)
  for (let i = 0; i < length; i++) out[i] = fill(i)
  return out
}
const f32View = (offset: number, length: number, fill: (i: number) => number) =>
  view((buffer, at, n) => new Float32Array(buffer, at * 4, n), 4, offset, length, fill)
const bf16View = (offset: number, length: number, fill: (i: number) => number) =>
  view((buffer, at, n) => new Uint16Array(buffer, at * 2, n), 2, offset, length, fill)

/** A value source: mostly ordinary numbers, sometimes NaN, ±Infinity, -0, huge or tiny. */
const special = [Number.NaN, Infinity, -Infinity, -0, 3.4e38, -3.4e38, 1e-45, 0.1]
const valueAt = (seed: number, i: number) => {
  const h = Math.imul(seed ^ (i * 0x9e3779b1), 0x85ebca6b) >>> 0
  return h % 97 === 0 ? special[h % special.length]! : ((h % 20001) - 10000) / 128
}

const scenario = fc.record({
  length: fc.oneof(fc.integer({ min: 0, max: 64 }), fc.integer({ min: 0, max: 1_000_000 })),
  count: fc.integer({ min: 1, max: 8 }),
  offsets: fc.array(fc.integer({ min: 0, max: 7 }), { minLength: 9, maxLength: 9 }),
  seed: fc.integer(),
  op: fc.constantFrom<Op>("sum", "average"),
  inPlace: fc.boolean()
})

describe("native CPU kernels", () => {
  test("f32 sum and average match the reference", () => {
    fc.assert(
      fc.property(scenario, ({ count, inPlace, length, offsets, op, seed }) => {
        const inputs = Array.from({ length: count }, (_, k) => f32View(offsets[k]!, length, (i) => valueAt(seed + k, i)))
        const expected = referenceF32(op, inputs, length)
        const out = inPlace ? inputs[0]! : f32View(offsets[8]!, length, () => 7)
        native.kernels[op]("f32", inputs, out)
        sameF32(out, expected)
      }),
      { numRuns: 40, seed: 4242 }
    )
  }, 60_000)

  test("bf16 sum and average match the reference, rounding to nearest-even", () => {
    fc.assert(
      fc.property(scenario, ({ count, inPlace, length, offsets, op, seed }) => {
        const inputs = Array.from({ length: count }, (_, k) => bf16View(offsets[k]!, length, (i) => f32ToBf16(valueAt(seed + k, i))))
        const expected = referenceBf16(op, inputs, length)
        const out = inPlace ? inputs[0]! : bf16View(offsets[8]!, length, () => 7)
        native.kernels[op]("bf16", inputs, out)
        sameBf16(out, expected)
      }),
      { numRuns: 40, seed: 4243 }
    )
  }, 60_000)

  test("add and scale in place match the reference", () => {
    fc.assert(
      fc.property(scenario, fc.float({ noDefaultInfinity: false }), ({ length, offsets, seed }, factor) => {
        const acc = f32View(offsets[0]!, length, (i) => valueAt(seed, i))
        const x = f32View(offsets[1]!, length, (i) => valueAt(seed + 1, i))
        const added = Float32Array.from(acc, (value, i) => f(value + x[i]!))
        native.kernels.add("f32", acc, x)
        sameF32(acc, added)
        const scaled = Float32Array.from(acc, (value) => f(value * f(factor)))
        native.kernels.scale("f32", acc, factor)
        sameF32(acc, scaled)

        const hAcc = bf16View(offsets[2]!, length, (i) => f32ToBf16(valueAt(seed + 2, i)))
        const hX = bf16View(offsets[3]!, length, (i) => f32ToBf16(valueAt(seed + 3, i)))
        const hAdded = Uint16Array.from(hAcc, (value, i) => f32ToBf16(f(bf16ToF32(value) + bf16ToF32(hX[i]!))))
        native.kernels.add("bf16", hAcc, hX)
        sameBf16(hAcc, hAdded)
        const hScaled = Uint16Array.from(hAcc, (value) => f32ToBf16(f(bf16ToF32(value) * f(factor))))
        native.kernels.scale("bf16", hAcc, factor)
        sameBf16(hAcc, hScaled)
      }),
      { numRuns: 30, seed: 4244 }
    )
  }, 60_000)

  test("f32 outputs large enough for streaming stores: same values, any offset, in place too", () => {
    const length = (1 << 20) + 37
    // The streaming (AVX) path where the CPU has AVX, the chunked loop elsewhere.
    for (const [offset, inPlace, count] of [[1, false, 3], [2, true, 4], [3, false, 7], [1, true, 8]] as const) {
      for (const op of ["sum", "average"] as const) {
        const inputs = Array.from({ length: count }, (_, k) => f32View(offset + k, length, (i) => valueAt(99 + k, i)))
        const expected = referenceF32(op, inputs, length)
        const out = inPlace ? inputs[1]! : f32View(offset, length, () => 7)
        native.kernels[op]("f32", inputs, out)
        sameF32(out, expected)
      }
    }
  }, 30_000)

  test("bf16 rounding: exact halves go to even, NaN stays NaN, infinities stay infinite", () => {
    const one = f32ToBf16(1)
    const inputs = [new Uint16Array([one, 0x7f80, 0x7fc0, 0xff80]), new Uint16Array([0, 0, one, 0])]
    const out = new Uint16Array(4)
    native.kernels.sum("bf16", inputs, out)
    expect([...out].map((value) => bf16ToF32(value))).toEqual([1, Infinity, Number.NaN, -Infinity])
  })

  test("mismatched lengths and no inputs are refused before the library is called", () => {
    expect(() => native.kernels.sum("f32", [new Float32Array(3)], new Float32Array(4))).toThrow("every buffer must have 4 elements, one has 3")
    expect(() => native.kernels.average("f32", [], new Float32Array(4))).toThrow("needs at least one input")
  })
})
