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

/**
 * Reassembles frames from a byte stream's chunks, in order.
 *
 * A large frame (a checkpoint's JSON) arrives in hundreds of reads. The bytes
 * of the frame under way are kept as the pieces they came in, and joined
 * once, when the frame is whole: each byte is copied at most twice, however
 * many reads the frame took (joining everything pending on every read cost
 * a 32 MiB frame two seconds of the relay's CPU). A frame that lies within
 * one read is decoded where it lies.
 */
export class LocalFrameReader {
  /** The next frame's header, as far as it has come. */
  private readonly head = new Uint8Array(4)
  private headFilled = 0
  /** The body length the header announced; undefined while the header is incomplete. */
  private bodyLength: number | undefined
  /** Bytes of the body under way, copied out of earlier reads (the caller may reuse its buffer). */
  private pieces: Array<Uint8Array> = []
  private piecesLength = 0
  private copied = 0

  /** Bytes this reader has copied into memory of its own so far (for the benchmark and the tests). */
  get copiedBytes(): number {
    return this.copied
  }

  /** The whole messages this chunk completes; throws LocalFrameError on an oversized or malformed frame. */
  push(chunk: Uint8Array): Array<unknown> {
    const messages: Array<unknown> = []
    let at = 0
    while (at < chunk.length) {
      if (this.bodyLength === undefined) {
        const take = Math.min(4 - this.headFilled, chunk.length - at)
        this.head.set(chunk.subarray(at, at + take), this.headFilled)
        this.headFilled += take
        at += take
        if (this.headFilled < 4) break
        const length = new DataView(this.head.buffer).getUint32(0, true)
        // Refused from the header alone: nothing of an oversized body is ever kept.
        if (length > LOCAL_FRAME_MAX) throw new LocalFrameError(`a local frame of ${length} bytes is over the ${LOCAL_FRAME_MAX}-byte ceiling`)
        this.bodyLength = length
      }
      const missing = this.bodyLength - this.piecesLength
      if (chunk.length - at < missing) {
        // The body goes on in a later read: keep this read's part of it.
        this.keep(chunk.subarray(at))
        break
      }
      messages.push(decode(this.body(chunk.subarray(at, at + missing))))
      at += missing
      this.headFilled = 0
      this.bodyLength = undefined
    }
    return messages
  }

  private keep(part: Uint8Array): void {
    if (part.length === 0) return
    this.pieces.push(part.slice())
    this.piecesLength += part.length
    this.copied += part.length
  }

  /** The whole body: the pieces kept so far, then `tail` (the rest of it, in the current read). */
  private body(tail: Uint8Array): Uint8Array {
    if (this.pieces.length === 0) return tail
    const body = new Uint8Array(this.piecesLength + tail.length)
    let at = 0
    for (const piece of this.pieces) {
      body.set(piece, at)
      at += piece.length
    }
    body.set(tail, at)
    this.copied += body.length
    this.pieces = []
    this.piecesLength = 0
    return body
  }
}

const utf8 = new TextDecoder()

const decode = (body: Uint8Array): unknown => {
  const text = utf8.decode(body)
  try {
    return JSON.parse(text)
  } catch {
    throw new LocalFrameError("a local frame is not JSON")
  }
}
