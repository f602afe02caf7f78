/**
 * Frames: how every message crosses a cohort connection (wire protocol 2).
 *
 * ```
 *  0  u32 LE  payload length
 *  4  u8      kind          (which message of the channel's union)
 *  5  u8      flags         (bit 0: the payload is encrypted; the other bits 0)
 *  6  u8[2]   reserved, 0
 *  8  u64 LE  sequence      (per direction, from 0, +1 per frame)
 * 16  payload (CBOR; its ciphertext when the link encrypts)
 *  …  16-byte tag: AES-128-GCM(direction key, nonce = sequence) over header ‖ payload (`FrameCipher`)
 * ```
 *
 * The tag is a trailer so both ends can hash while the bytes move: the
 * sender as it writes, the receiver as it reads, never holding a second copy.
 * The direction key is derived per connection (see `Keys`), and the sequence
 * must be exactly the next one, so a frame cannot be replayed, reordered, or
 * moved to another connection or direction. The flags say in the clear what
 * the link's keys already fix (a link encrypts every frame or none): a frame
 * of the other mode is refused from its header with a reason, before any
 * cryptography.
 *
 * The length is checked against the channel's ceiling before anything is
 * allocated, and a large payload is kept as the chunks that arrived, so
 * memory follows the bytes actually received.
 *
 * A receiver that is done with each payload before the next frame (a link
 * decodes it into a message at once) takes them lent: the decoder then writes
 * each payload straight into memory it keeps, the next one that fits into the
 * same memory. Fresh memory costs a page fault per 4 KiB on first touch, about
 * as much as moving the bytes through loopback, and gradients come in frames
 * of one size round after round.
 */
import * as Schema from "effect/Schema"
import { type FrameKey, type FrameOpener, opener, sealer, TAG_BYTES } from "./FrameCipher.ts"

export const HEADER_BYTES = 16
/** A large payload is received into blocks of this size, allocated as bytes arrive. */
const BLOCK_BYTES = 4 << 20
/** Blocks a decoder keeps for reuse after a large frame: up to 64 MiB. */
const MAX_SPARE_BLOCKS = 16
/** The largest payload memory a lending decoder keeps for the next frame. */
const MAX_LENT_BYTES = MAX_SPARE_BLOCKS * BLOCK_BYTES
/** The trailer: GCM's tag. */
export const MAC_BYTES = TAG_BYTES
/** Bit 0 of the flags byte: the payload is encrypted. */
export const ENCRYPTED = 0x01
/** The largest length the header can carry. */
export const MAX_LENGTH = 0xffff_ffff

export const FrameErrorReason = Schema.Literal("too-large", "bad-header", "bad-mac", "bad-sequence")
export type FrameErrorReason = typeof FrameErrorReason.Type

/** Why a frame was refused. A Schema like every error that leaves its process: it ends the link, as its `LinkError`. */
export class FrameError extends Schema.TaggedError<FrameError>()("FrameError", {
  reason: FrameErrorReason,
  detail: Schema.String
}) {
  override get message(): string {
    return `${this.reason}: ${this.detail}`
  }
}

export interface Frame {
  readonly kind: number
  readonly sequence: bigint
  readonly payload: Uint8Array
}

const header = (key: FrameKey, kind: number, sequence: bigint, length: number): Uint8Array => {
  if (length > MAX_LENGTH) throw new RangeError(`payload of ${length} bytes exceeds the frame limit`)
  const bytes = new Uint8Array(HEADER_BYTES)
  const view = new DataView(bytes.buffer)
  view.setUint32(0, length, true)
  view.setUint8(4, kind)
  view.setUint8(5, key.encrypt ? ENCRYPTED : 0)
  view.setBigUint64(8, sequence, true)
  return bytes
}

/**
 * The pieces of one frame, ready to write in order: header, payload, tag.
 * An authenticated payload is not copied; an encrypted one is its ciphertext.
 */
export const encodeFrame = (key: FrameKey, kind: number, sequence: bigint, payload: Uint8Array): [Uint8Array, Uint8Array, Uint8Array] => {
  const head = header(key, kind, sequence, payload.length)
  const cipher = sealer(key, sequence, head)
  const body = cipher.payload(payload)
  return [head, body, cipher.tag()]
}

/**
 * The pieces of one frame for streaming: the header, the payload in
 * `chunkBytes` slices, then the tag. Each slice is hashed (or encrypted) only
 * when it is pulled, so a sender that writes a slice before pulling the next
 * one hashes while the kernel moves the previous slice.
 */
export function* frameParts(
  key: FrameKey,
  kind: number,
  sequence: bigint,
  payload: Uint8Array,
  chunkBytes = 4 << 20
): Generator<Uint8Array> {
  const head = header(key, kind, sequence, payload.length)
  const cipher = sealer(key, sequence, head)
  yield head
  for (let at = 0; at < payload.length; at += chunkBytes) {
    yield cipher.payload(payload.subarray(at, Math.min(payload.length, at + chunkBytes)))
  }
  yield cipher.tag()
}

/** One frame as a single buffer (tests, small control messages). */
export const frameBytes = (key: FrameKey, kind: number, sequence: bigint, payload: Uint8Array): Uint8Array =>
  concat(encodeFrame(key, kind, sequence, payload), payload.length + HEADER_BYTES + MAC_BYTES)

type Stage = "header" | "payload" | "mac"

/**
 * Whose a decoded payload is. `owned`: the receiver's, to keep. `lent`: the decoder's, valid only until
 * `onFrame` returns; the next frame's payload may overwrite it (`push`, which returns several frames at
 * once, hands out copies).
 */
export type PayloadOwnership = "owned" | "lent"

/**
 * Turns a byte stream into verified frames, whatever the chunk boundaries.
 * After the first error the decoder is poisoned: a connection that sent one
 * bad frame is closed, never resynchronised.
 */
export class FrameDecoder {
  private stage: Stage = "header"
  private readonly head = new Uint8Array(HEADER_BYTES)
  private readonly mac = new Uint8Array(MAC_BYTES)
  private filled = 0
  private length = 0
  private kind = 0
  private sequence = 0n
  private chunks: Array<Uint8Array> = []
  private blockFilled = 0
  private spare: Array<Uint8Array> = []
  private cipher: FrameOpener | undefined
  private expected = 0n
  private failed: FrameError | undefined
  /** Lending: the memory of the last payload, which the next one that fits is written into. */
  private reusable: Uint8Array | undefined
  /** Lending, a frame that fits `reusable`: where its payload goes, and how much of it the cipher has had. */
  private target: Uint8Array | undefined
  private absorbed = 0

  /**
   * `ceiling` bounds every frame; `firstCeiling` (at most `ceiling`) bounds frames until one has
   * authenticated: a listener's guard against strangers who announce large frames and never send them.
   */
  constructor(
    private key: FrameKey,
    private readonly ceiling: number,
    private readonly firstCeiling = ceiling,
    private readonly payloads: PayloadOwnership = "owned"
  ) {}

  /** Verify the frames after the current one with another key (open admission switches to the run's salt). */
  setKey(key: FrameKey): void {
    this.key = key
  }

  /**
   * Payload bytes of the frame in progress received so far. Blocks are
   * allocated as bytes arrive, at most one 4 MiB block ahead, and pages the
   * peer never filled are never touched.
   */
  get buffered(): number {
    return this.stage === "payload" ? this.filled : 0
  }

  /** Feed bytes; returns the frames they complete, or the error that ends the connection. */
  push(bytes: Uint8Array): Array<Frame> | FrameError {
    const frames: Array<Frame> = []
    const handOut = this.payloads === "lent" ? (frame: Frame) => ({ ...frame, payload: frame.payload.slice() }) : (frame: Frame) => frame
    return this.pushEach(bytes, (frame) => void frames.push(handOut(frame))) ?? frames
  }

  /**
   * Feed bytes and hand over each frame as soon as it is complete, before the
   * next one is parsed: `onFrame` may change the key for the frames after it.
   */
  pushEach(bytes: Uint8Array, onFrame: (frame: Frame) => void): FrameError | undefined {
    this.pushWhile(bytes, (frame) => {
      onFrame(frame)
      return true
    })
    return this.failed
  }

  /** No frame is under way: the next byte starts a header (a reader may stop here, and only here). */
  get betweenFrames(): boolean {
    return this.stage === "header" && this.filled === 0
  }

  /** The error that ended the stream, once one has. */
  get error(): FrameError | undefined {
    return this.failed
  }

  /**
   * Like `pushEach`, but stop right after a frame for which `onFrame` answers false (a reader whose inbox
   * is full); returns how many bytes were used. The rest is the caller's to feed again later. After an
   * error (see `error`) nothing more is used.
   */
  pushWhile(bytes: Uint8Array, onFrame: (frame: Frame) => boolean): number {
    if (this.failed !== undefined) return 0
    let at = 0
    while (at < bytes.length) {
      if (this.stage === "header") {
        at = this.fill(this.head, bytes, at)
        if (this.filled < HEADER_BYTES) break
        const problem = this.startPayload()
        if (problem !== undefined) {
          this.fail(problem)
          return at
        }
      } else if (this.stage === "payload" && this.target !== undefined) {
        at = this.fillTarget(this.target, bytes, at)
      } else if (this.stage === "payload") {
        // Copy into blocks allocated as the bytes come (the caller may reuse
        // its buffer); each block is hashed (or decrypted) once it is full.
        let block = this.chunks[this.chunks.length - 1]
        if (block === undefined || this.blockFilled === block.length) {
          const size = Math.min(BLOCK_BYTES, this.length - this.filled)
          // Blocks of a large frame are reused for the next one: fresh memory
          // costs a page fault per 4 KiB, more than the copy itself.
          block = this.spare.pop()?.subarray(0, size) ?? new Uint8Array(size)
          this.chunks.push(block)
          this.blockFilled = 0
        }
        const take = Math.min(block.length - this.blockFilled, bytes.length - at)
        block.set(bytes.subarray(at, at + take), this.blockFilled)
        this.blockFilled += take
        this.filled += take
        at += take
        if (this.blockFilled === block.length) this.absorb(block)
        if (this.filled === this.length) {
          this.stage = "mac"
          this.filled = 0
        }
      } else {
        at = this.fill(this.mac, bytes, at)
        if (this.filled < MAC_BYTES) break
        const frame = this.finish()
        if (frame instanceof FrameError) {
          this.fail(frame)
          return at
        }
        if (!onFrame(frame)) return at
      }
    }
    return at
  }

  /** Copy what fits of `bytes` (from `at`) into a fixed-size field; returns where the copy stopped. */
  private fill(field: Uint8Array, bytes: Uint8Array, at: number): number {
    const take = Math.min(field.length - this.filled, bytes.length - at)
    field.set(bytes.subarray(at, at + take), this.filled)
    this.filled += take
    return at + take
  }

  /** Lending: copy straight into the reused payload memory; the cipher takes it a block at a time. */
  private fillTarget(target: Uint8Array, bytes: Uint8Array, at: number): number {
    const take = Math.min(this.length - this.filled, bytes.length - at)
    target.set(bytes.subarray(at, at + take), this.filled)
    this.filled += take
    while (this.filled - this.absorbed >= BLOCK_BYTES || (this.filled === this.length && this.absorbed < this.length)) {
      const end = Math.min(this.length, this.absorbed + BLOCK_BYTES)
      const region = target.subarray(this.absorbed, end)
      const plain = this.cipher!.payload(region)
      if (plain !== region) target.set(plain, this.absorbed)
      this.absorbed = end
    }
    if (this.filled === this.length) {
      this.stage = "mac"
      this.filled = 0
    }
    return at + take
  }

  /** A full block of the payload: into the tag, and, when the link encrypts, swapped for its plaintext. */
  private absorb(block: Uint8Array): void {
    const plain = this.cipher!.payload(block)
    if (plain === block) return
    this.chunks[this.chunks.length - 1] = plain
    // The ciphertext's block can take the next one's bytes.
    if (block.buffer.byteLength === BLOCK_BYTES && this.spare.length < MAX_SPARE_BLOCKS) this.spare.push(new Uint8Array(block.buffer))
  }

  private startPayload(): FrameError | undefined {
    const view = new DataView(this.head.buffer)
    this.length = view.getUint32(0, true)
    this.kind = view.getUint8(4)
    this.sequence = view.getBigUint64(8, true)
    const flags = view.getUint8(5)
    if ((flags & ~ENCRYPTED) !== 0 || view.getUint16(6, true) !== 0) {
      return new FrameError({ reason: "bad-header", detail: "reserved header bits are not zero" })
    }
    if (((flags & ENCRYPTED) !== 0) !== this.key.encrypt) {
      return new FrameError({
        reason: "bad-header",
        detail: this.key.encrypt
          ? "an authenticated frame on a link that encrypts every frame"
          : "an encrypted frame on a link that only authenticates"
      })
    }
    // `expected` moves past 0 once a frame has authenticated.
    const limit = this.expected === 0n ? Math.min(this.firstCeiling, this.ceiling) : this.ceiling
    if (this.length > limit) {
      return new FrameError({
        reason: "too-large",
        detail: `frame of ${this.length} bytes exceeds ${this.expected === 0n && limit < this.ceiling ? "the ceiling before authentication" : "this channel's ceiling"} of ${limit} bytes`
      })
    }
    this.cipher = opener(this.key, this.sequence, this.head)
    this.chunks = []
    this.filled = 0
    this.absorbed = 0
    this.target = this.payloads === "lent" && this.length > 0 ? this.lentTarget() : undefined
    this.stage = this.length === 0 ? "mac" : "payload"
    return undefined
  }

  /**
   * Lending: where this frame's payload goes. The memory of the last one when it fits; otherwise, once the
   * peer has authenticated, new memory for a frame of up to a block (what the block path would allocate at
   * its first byte anyway), kept for the next ones. A larger frame comes in blocks, so memory follows the
   * bytes received whatever length a peer announces; its payload, once whole, is the memory kept (`keep`).
   */
  private lentTarget(): Uint8Array | undefined {
    if (this.reusable !== undefined && this.length <= this.reusable.length) return this.reusable.subarray(0, this.length)
    if (this.expected === 0n || this.length > BLOCK_BYTES) return undefined
    this.keep(new Uint8Array(this.length))
    return this.reusable
  }

  /** Lending: keep this memory for the next payloads that fit. Blocks then only serve larger frames: let them go. */
  private keep(memory: Uint8Array): void {
    this.reusable = memory
    this.spare = []
  }

  private finish(): Frame | FrameError {
    const verified = this.cipher!.verify(this.mac)
    this.cipher = undefined
    this.stage = "header"
    this.filled = 0
    if (!verified) {
      return new FrameError({ reason: "bad-mac", detail: `frame ${this.sequence} failed authentication` })
    }
    if (this.sequence !== this.expected) {
      return new FrameError({
        reason: "bad-sequence",
        detail: `expected frame ${this.expected}, got ${this.sequence} (replayed, reordered or spliced)`
      })
    }
    this.expected += 1n
    if (this.target !== undefined) {
      const payload = this.target
      this.target = undefined
      return { kind: this.kind, sequence: this.sequence, payload }
    }
    const payload = this.chunks.length === 1 ? this.chunks[0]! : concat(this.chunks, this.length)
    if (this.chunks.length > 1) {
      // The payload is a copy: its blocks can serve the next large frame.
      for (const block of this.chunks) {
        if (block.buffer.byteLength === BLOCK_BYTES && this.spare.length < MAX_SPARE_BLOCKS) {
          this.spare.push(new Uint8Array(block.buffer))
        }
      }
      // Lending, a payload this decoder joined in memory of its own: the next ones of its size go there.
      if (this.payloads === "lent" && this.length <= MAX_LENT_BYTES) this.keep(payload)
    }
    this.chunks = []
    return { kind: this.kind, sequence: this.sequence, payload }
  }

  private fail(error: FrameError): FrameError {
    this.failed = error
    this.chunks = []
    this.cipher = undefined
    this.target = undefined
    this.reusable = undefined
    return error
  }
}

const concat = (chunks: ReadonlyArray<Uint8Array>, length: number): Uint8Array => {
  const out = new Uint8Array(length)
  let at = 0
  for (const chunk of chunks) {
    out.set(chunk, at)
    at += chunk.length
  }
  return out
}
