/**
 * The cipher of frames: AES-128-GCM, one invocation per frame, under the key of the frame's connection and
 * direction (`Keys.deriveKeys`), with the frame's sequence number as its nonce.
 *
 * - **Authenticated** (the default): GCM as a MAC (GMAC). Nothing is encrypted; the header and the payload
 *   are the additional data, and the 16-byte tag is the frame's trailer.
 * - **Encrypted** (`controller.encrypt: true`): the header is the additional data, the payload is encrypted,
 *   and the tag covers both.
 *
 * Why not HMAC-SHA256 any more: GCM's hash (GHASH) runs on the CPU's carry-less multiply, about 11 GB/s per
 * core against HMAC-SHA256's 1.6, so authenticating a frame no longer costs more than moving it.
 *
 * Streaming: both ends feed the cipher slice by slice while the bytes move. In authenticated mode every
 * slice is additional data (`setAAD` once per slice, never after `update`): GHASH absorbs additional data in
 * 16-byte blocks and pads it once, at its end, so slices of any sizes give the tag of the whole (BoringSSL,
 * under Bun's node:crypto, keeps the partial block between calls; `test/frame-cipher.test.ts` checks tags
 * against ones computed by Python's `cryptography`, with the payload cut at odd offsets). In encrypted mode
 * the slices go through `update`, which GCM streams by construction.
 *
 * Nonces: 4 zero bytes, then the sequence number (u64, big-endian). A key sees each nonce once: a key belongs
 * to one connection and one direction (both ends' fresh nonces go into it), and the sender numbers its frames
 * from 0 and never goes back, also across open admission's switch of keys. Nonce reuse is what breaks GCM,
 * and this construction has none.
 *
 * Verifying is GCM's own (`Decipher.final`): a constant-time comparison of the whole 16-byte tag; a tag of
 * any other length is refused. Plaintext decrypted before the tag is checked never leaves the decoder
 * unless the tag is right.
 */
import { createCipheriv, createDecipheriv } from "node:crypto"

export const TAG_BYTES = 16
/** AES-128. */
export const FRAME_KEY_BYTES = 16

/** The key of one direction of one connection, and whether its payloads are encrypted. */
export interface FrameKey {
  readonly key: Uint8Array
  readonly encrypt: boolean
}

/** A frame key from its bytes; anything but 16 bytes is a programming error, said at once. */
export const frameKey = (key: Uint8Array, encrypt: boolean): FrameKey => {
  if (key.length !== FRAME_KEY_BYTES) throw new RangeError(`a frame key is ${FRAME_KEY_BYTES} bytes (AES-128), not ${key.length}`)
  return { key, encrypt }
}

const ALGORITHM = "aes-128-gcm"

/** The 96-bit GCM nonce of a frame: 4 zero bytes, then its sequence number, big-endian. */
export const nonceOf = (sequence: bigint): Uint8Array => {
  const nonce = new Uint8Array(12)
  new DataView(nonce.buffer).setBigUint64(4, sequence, false)
  return nonce
}

const bytesOf = (buffer: Buffer): Uint8Array => new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength)

/** What both ends have of GCM: a cipher and a decipher alike. */
interface Gcm {
  setAAD(data: Uint8Array): unknown
  update(data: Uint8Array): Buffer
}

/**
 * What one frame's cipher (or decipher) does with each slice of the payload, chosen once per frame:
 * authenticated, adds it to the additional data and passes it on; encrypted, `update`.
 */
const payloadOf = (gcm: Gcm, encrypt: boolean): (slice: Uint8Array) => Uint8Array =>
  encrypt
    ? (slice) => bytesOf(gcm.update(slice))
    : (slice) => {
      gcm.setAAD(slice)
      return slice
    }

/** The sending end of one frame: the payload's slices in order, then the tag. */
export interface FrameSealer {
  /** What goes on the wire for this slice of the payload: the slice itself, or its ciphertext. */
  readonly payload: (slice: Uint8Array) => Uint8Array
  /** The trailer; after every slice. */
  readonly tag: () => Uint8Array
}

/** Start one frame whose header is `header`. */
export const sealer = (key: FrameKey, sequence: bigint, header: Uint8Array): FrameSealer => {
  const cipher = createCipheriv(ALGORITHM, key.key, nonceOf(sequence))
  cipher.setAAD(header)
  return {
    payload: payloadOf(cipher, key.encrypt),
    tag: () => {
      // Encrypted: GCM (CTR underneath) has no block left over, so `final` adds nothing.
      cipher.final()
      return bytesOf(cipher.getAuthTag())
    }
  }
}

/** The receiving end of one frame: the payload's slices in order, then the tag to check. */
export interface FrameOpener {
  /** The plaintext of this slice (the slice itself when nothing is encrypted); trust it only once `verify` has said yes. */
  readonly payload: (slice: Uint8Array) => Uint8Array
  /** Whether `tag` is this frame's. */
  readonly verify: (tag: Uint8Array) => boolean
}

export const opener = (key: FrameKey, sequence: bigint, header: Uint8Array): FrameOpener => {
  const decipher = createDecipheriv(ALGORITHM, key.key, nonceOf(sequence))
  decipher.setAAD(header)
  return {
    payload: payloadOf(decipher, key.encrypt),
    verify: (tag) => {
      if (tag.length !== TAG_BYTES) return false
      decipher.setAuthTag(tag)
      try {
        decipher.final()
        return true
      } catch {
        return false
      }
    }
  }
}
