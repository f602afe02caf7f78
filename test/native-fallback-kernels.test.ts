/**
 * The TypeScript kernels that stand in for the native library's
 * (PortableKernels): hand-worked values first, each chosen so that a wrong
 * rounding gives another answer (partial sums rounded to f32 one by one, an
 * average divided once, bf16 rounded to nearest-even, a NaN kept quiet);
 * outputs that are one of the inputs; then the same answers as the native
 * kernels, bit for bit, on random data; and `cpuKernels` choosing them where
 * the library cannot be loaded.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import fc from "fast-check"
import * as Native from "../src/native/Native.ts"
import { portableKernels as k } from "../src/native/PortableKernels.ts"

const f32 = (...values: Array<number>) => Float32Array.from(values)
const bf16 = (...bits: Array<number>) => Uint16Array.from(bits)
const hex = (values: Uint16Array) => [...values].map((value) => `0x${value.toString(16)}`)

describe("the portable kernels, by hand", () => {
  test("sums add in input order, each partial sum rounded to f32", () => {
    const out = new Float32Array(3)
    // 1e8 + 1 is 1e8 in f32 (its spacing there is 8): then - 1e8 leaves 0, where exact arithmetic leaves 1.
    k.sum("f32", [f32(1e8, 1, 0.5), f32(1, 2, 0.25), f32(-1e8, 3, 0.125)], out)
    expect([...out]).toEqual([0, 6, 0.875])
  })

  test("an average divides the f32 sum once, and rounds the quotient to f32", () => {
    const out = new Float32Array(2)
    k.average("f32", [f32(1, 3), f32(1, 4), f32(2, 5)], out)
    // 4 / 3 and 12 / 3 as f32.
    expect([...out]).toEqual([1.3333333730697632, 4])
    const rounded = new Float32Array(1)
    k.average("f32", [f32(1e8), f32(3), f32(3)], rounded)
    // The partial sums round first (1e8 + 3 → 1e8, twice), then a third: 33333334; exact arithmetic gives 33333336.
    expect([...rounded]).toEqual([33333334])
  })

  test("NaN, infinities and -0 pass through as IEEE arithmetic says", () => {
    const out = new Float32Array(4)
    k.sum("f32", [f32(Number.NaN, Infinity, -0, Infinity), f32(1, 1, -0, -Infinity)], out)
    expect(Number.isNaN(out[0]!)).toBe(true)
    expect(out[1]).toBe(Infinity)
    expect(Object.is(out[2], -0)).toBe(true)
    expect(Number.isNaN(out[3]!)).toBe(true)
  })

  test("the output may be the first input, or a later one", () => {
    const a = f32(1, 2)
    const b = f32(10, 20)
    const c = f32(100, 200)
    k.sum("f32", [a, b, c], a)
    expect([...a]).toEqual([111, 222])
    const d = f32(1, 2)
    const e = f32(10, 20)
    const g = f32(100, 200)
    k.average("f32", [d, e, g], g)
    expect([...g]).toEqual([37, 74])
    // A view sharing the buffer of a later input, at the same place.
    const buffer = new Float32Array([5, 6, 7, 8])
    const later = buffer.subarray(2)
    k.sum("f32", [f32(1, 1), f32(2, 2), later], new Float32Array(buffer.buffer, 8, 2))
    expect([...buffer]).toEqual([5, 6, 10, 11])
    // Element by element (the output is the last input), partial sums still rounded to f32 one by one.
    const last = f32(-1e8)
    k.sum("f32", [f32(1e8), f32(1), last], last)
    expect([...last]).toEqual([0])
  })

  test("one input: a sum is a copy, an average too", () => {
    const out = new Float32Array(2)
    k.sum("f32", [f32(1.5, -2)], out)
    expect([...out]).toEqual([1.5, -2])
    k.average("f32", [f32(3, 4)], out)
    expect([...out]).toEqual([3, 4])
  })

  test("bf16 accumulates in f32 and rounds to nearest, ties to even; a NaN stays a quiet NaN", () => {
    const out = new Uint16Array(4)
    // 1.0 + 2.0 = 3.0; 1.0 + 2^-8 is halfway: ties to even 1.0; 1.0078125 + 2^-8 is halfway: up to 1.015625;
    // a signalling NaN (0x7f81) comes out a quiet NaN (its payload is not part of the contract).
    k.sum("bf16", [bf16(0x3f80, 0x3f80, 0x3f81, 0x7f81), bf16(0x4000, 0x3b80, 0x3b80, 0x0000)], out)
    expect(hex(out.subarray(0, 3))).toEqual(["0x4040", "0x3f80", "0x3f82"])
    expect(out[3]! & 0x7fc0).toBe(0x7fc0)
    const average = new Uint16Array(1)
    k.average("bf16", [bf16(0x3f80), bf16(0x4000), bf16(0x4000)], average)
    // 5 / 3 = 1.6666666 → bf16 0x3fd5 (1.6640625).
    expect(hex(average)).toEqual(["0x3fd5"])
  })

  test("add and scale, f32 and bf16; the factor is taken as an f32, as the library's argument is", () => {
    const acc = f32(1, 2)
    k.add("f32", acc, f32(0.5, 0.25))
    expect([...acc]).toEqual([1.5, 2.25])
    const values = f32(1.37, 1)
    k.scale("f32", values, 0.1)
    // 0.1 as an f32 is 0.10000000149011612: f32(1.37) × it is 0.13700000941753387 (× 0.1 itself: 0.13699999451637268).
    expect([...values]).toEqual([0.13700000941753387, 0.10000000149011612])
    const halves = bf16(0x3f80, 0x4000)
    k.add("bf16", halves, bf16(0x3f80, 0x3f80))
    expect(hex(halves)).toEqual(["0x4000", "0x4040"])
    k.scale("bf16", halves, 0.5)
    expect(hex(halves)).toEqual(["0x3f80", "0x3fc0"])
  })

  test("mismatched lengths and no inputs are refused, as the binding refuses them", () => {
    expect(() => k.sum("f32", [new Float32Array(3)], new Float32Array(4))).toThrow("every buffer must have 4 elements, one has 3")
    expect(() => k.average("f32", [], new Float32Array(4))).toThrow("needs at least one input")
  })
})

describe("the portable kernels against the native ones", () => {
  const native = Effect.runSync(Native.load()).kernels
  const sameBits = (a: ArrayLike<number>, b: ArrayLike<number>) => {
    expect(a.length).toBe(b.length)
    for (let i = 0; i < a.length; i++) {
      if (!(Number.isNaN(a[i]!) && Number.isNaN(b[i]!)) && !Object.is(a[i], b[i])) throw new Error(`element ${i}: ${a[i]} against ${b[i]}`)
    }
  }
  const value = fc.oneof(
    { weight: 20, arbitrary: fc.float({ noNaN: true, noDefaultInfinity: true }) },
    { weight: 1, arbitrary: fc.constantFrom(Number.NaN, Infinity, -Infinity, -0) }
  )

  test("sum and average of 1 to 8 f32 buffers, in place or not: the same bits", () => {
    fc.assert(fc.property(
      fc.integer({ min: 1, max: 8 }),
      fc.integer({ min: 0, max: 300 }),
      fc.boolean(),
      fc.constantFrom<"sum" | "average">("sum", "average"),
      fc.integer(),
      (count, length, inPlace, op, seed) => {
        const inputs = Array.from({ length: count }, (_, input) =>
          Float32Array.from({ length }, (_, i) => fc.sample(value, { numRuns: 1, seed: seed + input * 1_000 + i })[0]!))
        const copies = () => inputs.map((input) => input.slice())
        const [nativeIn, portableIn] = [copies(), copies()]
        const nativeOut = inPlace ? nativeIn[0]! : new Float32Array(length)
        const portableOut = inPlace ? portableIn[0]! : new Float32Array(length)
        native[op]("f32", nativeIn, nativeOut)
        k[op]("f32", portableIn, portableOut)
        sameBits(portableOut, nativeOut)
      }
    ), { numRuns: 60 })
  })

  test("a large buffer (the native kernel's threads and streaming stores): the same bits", () => {
    const length = (1 << 20) + 37
    const inputs = Array.from({ length: 4 }, (_, input) => Float32Array.from({ length }, (_, i) => Math.sin(i * 0.37 + input) * 1e3))
    const [nativeOut, portableOut] = [new Float32Array(length), new Float32Array(length)]
    native.average("f32", inputs, nativeOut)
    k.average("f32", inputs, portableOut)
    sameBits(portableOut, nativeOut)
  })

  test("bf16 sums and averages: the same bits", () => {
    const inputs = Array.from({ length: 3 }, (_, input) => Uint16Array.from({ length: 4_096 }, (_, i) => (i * 2_654_435_761 + input * 40_503) & 0xffff))
    for (const op of ["sum", "average"] as const) {
      const [nativeOut, portableOut] = [new Uint16Array(4_096), new Uint16Array(4_096)]
      native[op]("bf16", inputs, nativeOut)
      k[op]("bf16", inputs, portableOut)
      // NaN payloads aside (not part of the contract), equal; NaNs compared as NaNs.
      const asF32 = (values: Uint16Array) => Float32Array.from(values, (bits) => new Float32Array(new Uint32Array([bits << 16]).buffer)[0]!)
      sameBits(asF32(portableOut), asF32(nativeOut))
    }
  })
})

describe("cpuKernels", () => {
  test("where the library cannot be loaded: the portable kernels, and why (with what to run)", () => {
    const chosen = Effect.runSync(Native.cpuKernels("/nonexistent/libcohort_native.so"))
    expect(chosen.kernels).toBe(k)
    expect(chosen.fallback).toBe(
      "cohort's native library cannot be loaded from /nonexistent/libcohort_native.so (no such file); " +
        "build it with `bun run build:native` (needs cargo), or point COHORT_NATIVE_LIB at it"
    )
  })

  test("where it loads: the library's own", () => {
    const chosen = Effect.runSync(Native.cpuKernels())
    expect(chosen.fallback).toBeUndefined()
    expect(chosen.kernels).not.toBe(k)
  })
})
