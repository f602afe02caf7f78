/**
 * Tensors in shared memory: each `tensor(length)` is a Float32Array over a
 * segment file of its own in the host's run directory. The relay maps the
 * same file, so a collective on such a tensor (or a view of it) is reduced
 * where it lies and its result written back there: no copy in, no copy out.
 *
 * Effect-free on purpose: it is on every rank's start-up path.
 */
import { join } from "node:path"
import { createSegment } from "../wire/Segments.ts"
import { RankCallError } from "./RankContext.ts"

export interface Placement {
  readonly path: string
  /** The view's byte offset in its segment file. */
  readonly offset: number
}

export class SharedTensors {
  private readonly segments = new WeakMap<ArrayBufferLike, { path: string; base: number }>()
  private count = 0

  constructor(private readonly dir: string, private readonly rank: number) {}

  tensor(length: number): Float32Array {
    if (!Number.isInteger(length) || length < 0) throw new RankCallError(`tensor(length) needs a whole number ≥ 0, got ${length}`)
    this.count += 1
    const path = join(this.dir, `r${this.rank}-t${this.count}.seg`)
    const mapped = createSegment(path, Math.max(4096, length * 4))
    this.segments.set(mapped.buffer, { path, base: mapped.byteOffset })
    return new Float32Array(mapped.buffer, mapped.byteOffset, length)
  }

  /** Where a view lies, if it is a view of one of these tensors. */
  locate(view: Float32Array): Placement | undefined {
    const segment = this.segments.get(view.buffer)
    return segment === undefined ? undefined : { path: segment.path, offset: view.byteOffset - segment.base }
  }
}
