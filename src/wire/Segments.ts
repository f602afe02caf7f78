/**
 * Shared-memory segments: files in the host's private run directory (on
 * /dev/shm where it exists), mapped with MAP_SHARED by the rank that writes
 * a contribution and by the relay that folds it. A tensor crosses from rank
 * to relay without a socket copy.
 *
 * A segment never shrinks or is truncated while mapped (that would fault
 * every process mapping it); a larger tensor gets a new, larger segment, and
 * the run directory goes with the run.
 *
 * Effect-free on purpose: it is on every rank's start-up path.
 */
import { closeSync, existsSync, ftruncateSync, openSync, realpathSync, statSync } from "node:fs"
import { isAbsolute, sep } from "node:path"
import { printable } from "./Printable.ts"

/** Capacity for `bytes`: a power of two, at least one page, so growth is rare. */
export const segmentCapacity = (bytes: number): number => {
  let capacity = 4096
  while (capacity < bytes) capacity *= 2
  return capacity
}

/** Create (or reuse) a segment file of `capacity` bytes and map it. */
export const createSegment = (path: string, capacity: number): Uint8Array => {
  const descriptor = openSync(path, existsSync(path) ? "r+" : "w+", 0o600)
  try {
    ftruncateSync(descriptor, capacity)
  } finally {
    closeSync(descriptor)
  }
  return Bun.mmap(path)
}

/** A segment path that names no segment of the run directory: said to the rank that sent it, never mapped. */
export class SegmentPathError extends Error {
  override readonly name = "SegmentPathError"
}

/**
 * Where `path` really is, when it names a regular file under `dir` (whose real path is `realDir`): links
 * followed and `..` resolved before the check, so neither leads out. Throws SegmentPathError otherwise.
 */
export const segmentUnder = (realDir: string, path: string): string => {
  const shown = `"${printable(path, 200)}"`
  const outside = `the segment ${shown} is not in the host's run directory ${realDir}: a rank's segments are files it made in its envelope's dir`
  if (!isAbsolute(path)) throw new SegmentPathError(`the segment ${shown} is not an absolute path: name a file in the host's run directory ${realDir}`)
  let real: string
  try {
    real = realpathSync(path)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message
    throw new SegmentPathError(`the segment ${shown} cannot be opened (${code}): name a file the rank made in the host's run directory ${realDir}`)
  }
  if (!real.startsWith(realDir + sep)) throw new SegmentPathError(outside)
  // A FIFO would block the relay in open(2), a directory cannot be mapped.
  if (!statSync(real).isFile()) throw new SegmentPathError(`the segment ${shown} is not a regular file`)
  return real
}

/**
 * Mappings of other processes' segments, by path, remembered per owner (a rank has a few: its staging segment
 * and its tensors). Given the run directory (the relay), a path is mapped only when it names a file under it
 * (`segmentUnder`): a rank names its segments, and must not make the relay map, and write results into,
 * any other file its user can open.
 */
export class SegmentMaps {
  private readonly byOwner = new Map<number, Map<string, Uint8Array>>()
  private readonly realDir: string | undefined

  constructor(within?: string) {
    this.realDir = within === undefined ? undefined : realpathSync(within)
  }

  /** The segment at `path`, mapped once per owner; throws SegmentPathError for a path outside the run directory. */
  map(owner: number, path: string): Uint8Array {
    const mine = this.byOwner.get(owner) ?? new Map<string, Uint8Array>()
    this.byOwner.set(owner, mine)
    const known = mine.get(path)
    if (known !== undefined) return known
    // The real path is mapped, not the one given: a link swapped after the check leads nowhere new.
    const bytes = Bun.mmap(this.realDir === undefined ? path : segmentUnder(this.realDir, path))
    mine.set(path, bytes)
    return bytes
  }

  forget(owner: number): void {
    this.byOwner.delete(owner)
  }
}

/** A Float32Array over the first `bytes` of a segment. */
export const floats = (segment: Uint8Array, bytes: number): Float32Array =>
  new Float32Array(segment.buffer, segment.byteOffset, bytes / 4)
