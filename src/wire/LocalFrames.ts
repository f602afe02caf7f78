/**
 * Frames between a rank and its host's relay: a 4-byte little-endian length,
 * then that many bytes of UTF-8 JSON. Only control-sized messages travel
 * here; tensors go through shared-memory segments (see `Segments`).
 *
 * The socket is a Unix socket in a directory only the run's user can enter,
 * so these frames carry no MAC: the file system is the trust boundary.
 *
 * Effect-free on purpose: it is on every rank's start-up path.
 */

/**
 * The version of the rank ↔ relay protocol (docs/protocol.md): in every rank's envelope and its `hello`. A
 * client of another version (a Python client from another checkout) is refused with both numbers.
 */
export const LOCAL_PROTOCOL_VERSION = 2

/** The largest local frame: a checkpoint's JSON may be large, a tensor never travels here. */
export const LOCAL_FRAME_MAX = 256 << 20

export const encodeLocal = (message: unknown): Uint8Array => {
  const body = new TextEncoder().encode(JSON.stringify(message))
  const frame = new Uint8Array(4 + body.length)
  new DataView(frame.buffer).setUint32(0, body.length, true)
  frame.set(body, 4)
  return frame
}

export class LocalFrameError extends Error {
  override readonly name = "LocalFrameError"
}

/** Reassembles frames from a byte stream's chunks, in order. */
export class LocalFrameReader {
  private pending = new Uint8Array(0)

  /** The whole messages this chunk completes; throws LocalFrameError on an oversized or malformed frame. */
  push(chunk: Uint8Array): Array<unknown> {
    const joined = new Uint8Array(this.pending.length + chunk.length)
    joined.set(this.pending)
    joined.set(chunk, this.pending.length)
    const messages: Array<unknown> = []
    const view = new DataView(joined.buffer)
    let at = 0
    while (joined.length - at >= 4) {
      const length = view.getUint32(at, true)
      if (length > LOCAL_FRAME_MAX) throw new LocalFrameError(`a local frame of ${length} bytes is over the ${LOCAL_FRAME_MAX}-byte ceiling`)
      if (joined.length - at - 4 < length) break
      const text = new TextDecoder().decode(joined.subarray(at + 4, at + 4 + length))
      try {
        messages.push(JSON.parse(text))
      } catch {
        throw new LocalFrameError("a local frame is not JSON")
      }
      at += 4 + length
    }
    this.pending = joined.slice(at)
    return messages
  }
}
