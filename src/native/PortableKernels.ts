/**
 * The CPU kernels in TypeScript: what reductions run on where cohort's
 * native library cannot be loaded (no cargo when it was installed, a broken
 * Rust toolchain, a library left from another version). A run then works,
 * only slower on large tensors (`Native.cpuKernels` says so once).
 *
 * The results are the native kernels' to the bit: additions in input order,
 * each rounded to f32 (a Float32Array store, or `Math.fround`), an average
 * divided once at the end, a scale factor taken as an f32 (as the library's
 * FFI argument is), and bf16 accumulated in f32 and rounded to nearest-even
 * on store. Rounding an f64 sum or quotient of two f32 values to f32 gives
 * the correctly rounded f32 result (53 ≥ 2·24 + 2 bits), so nothing is lost
 * by computing in doubles between stores. An output may be one of the
 * inputs, as the library allows.
 */
import type { Element, Kernels } from "./Kernels.ts"

type Buffer = Float32Array | Uint16Array

// bf16 is the high half of an f32; one scratch word converts both ways.
const word = new Uint32Array(1)
const single = new Float32Array(word.buffer)

const bf16ToF32 = (bits: number): number => {
  word[0] = bits << 16
  return single[0]!
}

const f32ToBf16 = (value: number): number => {
  single[0] = value
  const bits = word[0]!
  // A NaN stays a quiet NaN, whatever its payload.
  if (Number.isNaN(value)) return ((bits >>> 16) | 0x40) & 0xffff
  // Round to nearest, ties to even; `>>>` wraps the sum as the library's u32 does.
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff
}

const checkLengths = (inputs: ReadonlyArray<Buffer>, out: Buffer, what: string) => {
  if (inputs.length === 0) throw new RangeError(`${what} needs at least one input`)
  for (const input of inputs) {
    if (input.length !== out.length) throw new RangeError(`${what}: every buffer must have ${out.length} elements, one has ${input.length}`)
  }
}

/** Whether two views share any byte. */
const overlaps = (a: ArrayBufferView, b: ArrayBufferView) =>
  a.buffer === b.buffer && a.byteOffset < b.byteOffset + b.byteLength && b.byteOffset < a.byteOffset + a.byteLength

const identical = (a: ArrayBufferView, b: ArrayBufferView) => a.buffer === b.buffer && a.byteOffset === b.byteOffset

/**
 * f32, one input at a time into `out` (a Float32Array store rounds each partial sum to f32): straight loops
 * the engine runs fast, `count - 1` passes in all. The first pass reads inputs 0 and 1 before it writes, so
 * either may be `out`; a later input that shares bytes with `out` would be overwritten before it is read,
 * and then it goes element by element.
 */
const reduceF32 = (inputs: ReadonlyArray<Float32Array>, out: Float32Array, average: boolean) => {
  const count = inputs.length
  const length = out.length
  const first = inputs[0]!
  if (count === 1) {
    if (!identical(first, out)) out.set(first)
    return
  }
  const passes = inputs.slice(0, 2).every((input) => identical(input, out) || !overlaps(input, out)) &&
    !inputs.slice(2).some((input) => overlaps(input, out))
  if (!passes) {
    for (let i = 0; i < length; i++) {
      let acc = first[i]!
      for (let k = 1; k < count; k++) acc = Math.fround(acc + inputs[k]![i]!)
      out[i] = average ? acc / count : acc
    }
    return
  }
  const second = inputs[1]!
  if (count === 2 && average) {
    for (let i = 0; i < length; i++) out[i] = Math.fround(first[i]! + second[i]!) / 2
    return
  }
  for (let i = 0; i < length; i++) out[i] = first[i]! + second[i]!
  for (let k = 2; k < count - 1; k++) {
    const input = inputs[k]!
    for (let i = 0; i < length; i++) out[i] = out[i]! + input[i]!
  }
  if (count === 2) return
  const last = inputs[count - 1]!
  if (average) for (let i = 0; i < length; i++) out[i] = Math.fround(out[i]! + last[i]!) / count
  else for (let i = 0; i < length; i++) out[i] = out[i]! + last[i]!
}

const reduceBf16 = (inputs: ReadonlyArray<Uint16Array>, out: Uint16Array, average: boolean) => {
  const count = inputs.length
  // Element by element: every input's element is read before the output's is written.
  for (let i = 0; i < out.length; i++) {
    let acc = bf16ToF32(inputs[0]![i]!)
    for (let k = 1; k < count; k++) acc = Math.fround(acc + bf16ToF32(inputs[k]![i]!))
    out[i] = f32ToBf16(average ? Math.fround(acc / count) : acc)
  }
}

const reduce = (what: "sum" | "average") => <E extends Element>(element: E, inputs: ReadonlyArray<Buffer>, out: Buffer) => {
  checkLengths(inputs, out, what)
  if (element === "f32") reduceF32(inputs as ReadonlyArray<Float32Array>, out as Float32Array, what === "average")
  else reduceBf16(inputs as ReadonlyArray<Uint16Array>, out as Uint16Array, what === "average")
}

export const portableKernels: Kernels = {
  sum: reduce("sum") as Kernels["sum"],
  average: reduce("average") as Kernels["average"],
  add: (element, acc, x) => {
    checkLengths([x], acc, "add")
    if (element === "f32") {
      const [a, b] = [acc as Float32Array, x as Float32Array]
      for (let i = 0; i < a.length; i++) a[i] = a[i]! + b[i]!
    } else {
      const [a, b] = [acc as Uint16Array, x as Uint16Array]
      for (let i = 0; i < a.length; i++) a[i] = f32ToBf16(Math.fround(bf16ToF32(a[i]!) + bf16ToF32(b[i]!)))
    }
  },
  scale: (element, buffer, factor) => {
    // The library takes the factor as an f32.
    const by = Math.fround(factor)
    if (element === "f32") {
      const values = buffer as Float32Array
      for (let i = 0; i < values.length; i++) values[i] = values[i]! * by
    } else {
      const values = buffer as Uint16Array
      for (let i = 0; i < values.length; i++) values[i] = f32ToBf16(Math.fround(bf16ToF32(values[i]!) * by))
    }
  }
}
