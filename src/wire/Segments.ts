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
import { closeSync, existsSync, ftruncateSync, openSync } from "node:fs"

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

/** Mappings of other processes' segments, by path, remembered per owner (a rank has a few: its staging segment and its tensors). */
export class SegmentMaps {
  private readonly byOwner = new Map<number, Map<string, Uint8Array>>()

  map(owner: number, path: string): Uint8Array {
    const mine = this.byOwner.get(owner) ?? new Map<string, Uint8Array>()
    this.byOwner.set(owner, mine)
    const known = mine.get(path)
    if (known !== undefined) return known
    const bytes = Bun.mmap(path)
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
