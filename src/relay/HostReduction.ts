/**
 * The arithmetic of one reduction round on a host, and where its result goes.
 *
 * A contribution is either a rank's `ctx.tensor` (reduced where it lies: the
 * result must be written back into it) or a staged copy (the rank copies the
 * result out itself). When every contribution is a tensor, the first one
 * takes the result in place and the others get copies; otherwise the result
 * goes into the relay's own result segment, staged ranks copy from there, and
 * tensors get copies. The result segment is rewritten only by the next round,
 * which cannot start before every rank of this one has called again, so a
 * staged rank's copy is never overwritten under it.
 */
import { join } from "node:path"
import type { Kernels } from "../native/Native.ts"
import { createSegment, floats, segmentCapacity } from "../wire/Segments.ts"
import type { Contribution } from "./FoldBarrier.ts"
import type { RelayToRank } from "../wire/messages/LocalMessages.ts"

/** Where a contribution lies and whether the result must be written back into it. */
export interface Source {
  readonly bytes: Uint8Array
  readonly inPlace: boolean
}

export type Round = ReadonlyArray<Contribution<Source>>

/** Below this a result is copied with a plain `set`; above it on the kernel's threads. */
const PARALLEL_COPY_BYTES = 1 << 20

export class HostReduction {
  private result = { path: "", bytes: new Uint8Array(0) as Uint8Array, generation: 0 }

  constructor(private readonly kernels: Kernels, private readonly dir: string) {}

  /**
   * Fold the round into the place its result will be read from: the average
   * when `final` (this host finishes the round), else the weighted sum for
   * the controller. Returns that place.
   */
  fold(round: Round, final: boolean): Float32Array {
    const { bytes, op } = round[0]!
    const inputs = round.map(({ source }) => floats(source.bytes, bytes))
    const out = round.every(({ source }) => source.inPlace) ? inputs[0]! : floats(this.resultSegment(bytes), bytes)
    if (bytes === 0) return out
    const weight = round.reduce((sum, contribution) => sum + contribution.weight, 0)
    const average = final && op === "avg"
    // Weights of one: the kernel's mean. Any others (even ones that add up to the number of ranks): the
    // contributions come weighted, so their sum over the weights' sum, as the controller divides across hosts.
    const unweighted = round.every((contribution) => contribution.weight === 1)
    if (average && unweighted) this.kernels.average("f32", inputs, out)
    else this.kernels.sum("f32", inputs, out)
    if (average && !unweighted && weight > 0) this.kernels.scale("f32", out, 1 / weight)
    return out
  }

  /** Copy the result into every tensor that does not hold it yet; each rank's reply, in round order. */
  deliver(round: Round, out: Float32Array): Array<[number, RelayToRank]> {
    const { bytes } = round[0]!
    return round.map(({ rank, source }) => {
      if (!source.inPlace) return [rank, { t: "reduced", bytes, seg: this.result.path }]
      const target = floats(source.bytes, bytes)
      if (bytes > 0 && (target.buffer !== out.buffer || target.byteOffset !== out.byteOffset)) {
        // Large: a one-input sum, which is a copy on the kernel's threads. Small: a plain copy beats the call.
        if (bytes >= PARALLEL_COPY_BYTES) this.kernels.sum("f32", [out], target)
        else target.set(out)
      }
      return [rank, { t: "reduced", bytes }]
    })
  }

  private resultSegment(bytes: number): Uint8Array {
    if (this.result.path !== "" && this.result.bytes.length >= bytes) return this.result.bytes
    const generation = this.result.generation + 1
    const path = join(this.dir, `result-${generation}.seg`)
    this.result = { path, bytes: createSegment(path, segmentCapacity(bytes)), generation }
    return this.result.bytes
  }
}
