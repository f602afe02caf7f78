/**
 * The reduction kernels' contract: what both the native library's kernels
 * and the TypeScript ones (PortableKernels) provide. Kept apart from Native.ts
 * so the portable kernels need not import the loader that falls back on them.
 */
export type Element = "f32" | "bf16"
type Buffer<E extends Element> = E extends "f32" ? Float32Array : Uint16Array

export interface Kernels {
  /** out[i] = inputs[0][i] + inputs[1][i] + …, in that order (out may be one of the inputs). */
  readonly sum: <E extends Element>(element: E, inputs: ReadonlyArray<Buffer<E>>, out: Buffer<E>) => void
  /** The sum divided by the number of inputs. */
  readonly average: <E extends Element>(element: E, inputs: ReadonlyArray<Buffer<E>>, out: Buffer<E>) => void
  /** acc[i] += x[i]. */
  readonly add: <E extends Element>(element: E, acc: Buffer<E>, x: Buffer<E>) => void
  /** buffer[i] *= factor. */
  readonly scale: <E extends Element>(element: E, buffer: Buffer<E>, factor: number) => void
}
