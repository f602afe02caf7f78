/**
 * Frames: round trips across any chunking, in both modes (authenticated,
 * encrypted), and every kind of tampering rejected with its reason.
 */
import { describe, expect, test } from "bun:test"
import * as fc from "fast-check"
import { FrameDecoder, FrameError, frameBytes, HEADER_BYTES, MAC_BYTES } from "../src/wire/Frame.ts"
import { type FrameKey, frameKey } from "../src/wire/FrameCipher.ts"
import { deriveKeys, newNonce, newSalt } from "../src/wire/Keys.ts"
import { magic } from "../src/wire/Channel.ts"

const key = frameKey(new Uint8Array(16).fill(7), false)
const encrypting = frameKey(new Uint8Array(16).fill(7), true)
const modes: ReadonlyArray<readonly [string, FrameKey]> = [["authenticated", key], ["encrypted", encrypting]]
const seeded = (seed: number, numRuns = 200) => ({ seed, numRuns })

/** Split `bytes` at the given cut points (any order, duplicates allowed). */
const split = (bytes: Uint8Array, cuts: ReadonlyArray<number>): Array<Uint8Array> => {
  const points = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b)
  const pieces: Array<Uint8Array> = []
  let from = 0
  for (const point of [...points, bytes.length]) {
    pieces.push(bytes.subarray(from, point))
    from = point
  }
  return pieces
}

const feed = (decoder: FrameDecoder, pieces: ReadonlyArray<Uint8Array>) => {
  const frames = []
  for (const piece of pieces) {
    const out = decoder.push(piece)
    if (out instanceof FrameError) return out
    frames.push(...out)
  }
  return frames
}

const payloads = fc.array(fc.uint8Array({ maxLength: 300 }), { minLength: 1, maxLength: 6 })

describe("frames", () => {
  for (const [mode, modeKey] of modes) {
    test(`a sequence of ${mode} frames survives any split of the byte stream`, () => {
      fc.assert(
        fc.property(payloads, fc.array(fc.nat(), { maxLength: 20 }), fc.nat(255), (bodies, cuts, kind) => {
          const stream = Buffer.concat(bodies.map((body, index) => frameBytes(modeKey, kind, BigInt(index), body)))
          const frames = feed(new FrameDecoder(modeKey, 1 << 20), split(new Uint8Array(stream), cuts))
          expect(frames).toEqual(bodies.map((payload, index) => ({ kind, sequence: BigInt(index), payload })))
        }),
        seeded(1)
      )
    })
  }

  test("an encrypted frame does not carry its payload in the clear; an authenticated one does", () => {
    const payload = new TextEncoder().encode("a secret that is long enough to spot")
    const hidden = frameBytes(encrypting, 1, 0n, payload)
    const clear = frameBytes(key, 1, 0n, payload)
    expect(Buffer.from(clear).includes(Buffer.from(payload))).toBe(true)
    expect(Buffer.from(hidden).includes(Buffer.from(payload.subarray(0, 8)))).toBe(false)
    // Same length: GCM adds nothing but the tag. The flags byte says which.
    expect([hidden.length, hidden[5], clear[5]]).toEqual([clear.length, 1, 0])
  })

  test("a frame of the other mode is refused from its header, saying so", () => {
    const refused = (decoderKey: FrameKey, frame: Uint8Array) => {
      const out = new FrameDecoder(decoderKey, 1024).push(frame.subarray(0, HEADER_BYTES))
      return out instanceof FrameError ? `${out.reason}: ${out.detail}` : "accepted"
    }
    expect(refused(key, frameBytes(encrypting, 1, 0n, new Uint8Array([1])))).toBe("bad-header: an encrypted frame on a link that only authenticates")
    expect(refused(encrypting, frameBytes(key, 1, 0n, new Uint8Array([1])))).toBe("bad-header: an authenticated frame on a link that encrypts every frame")
  })

  test("a large encrypted frame streams through 4 MiB blocks and back, in pieces of any size", () => {
    const payload = new Uint8Array(9 << 20 | 13).map((_, index) => (index * 31) & 0xff)
    const frame = frameBytes(encrypting, 2, 0n, payload)
    const decoder = new FrameDecoder(encrypting, 1 << 30)
    const frames = feed(decoder, split(frame, [65_536, 4 << 20, (4 << 20) + 7, 8 << 20, (9 << 20) + 20]))
    expect(Array.isArray(frames) && frames.length === 1 && Buffer.from(frames[0]!.payload).equals(Buffer.from(payload))).toBe(true)
  })

  test("a reader that stops after a frame gets exactly that frame's bytes used, and the rest later", () => {
    // Frames of 3, 0 and 5 payload bytes: 35, 32 and 37 bytes on the wire (16-byte header, 16-byte tag).
    const bodies = [new Uint8Array([1, 2, 3]), new Uint8Array(0), new Uint8Array([9, 8, 7, 6, 5])]
    const stream = new Uint8Array(Buffer.concat(bodies.map((body, index) => frameBytes(key, 4, BigInt(index), body))))
    const decoder = new FrameDecoder(key, 1 << 20)
    const seen: Array<number> = []
    // Stop after the first frame.
    expect(decoder.pushWhile(stream, (frame) => seen.push(frame.payload.length) < 1)).toBe(35)
    expect([seen, decoder.betweenFrames]).toEqual([[3], true])
    // Then take the rest in pieces, one of which ends inside a header: not between frames there.
    expect(decoder.pushWhile(stream.subarray(35, 44), () => true)).toBe(9)
    expect(decoder.betweenFrames).toBe(false)
    expect(decoder.pushWhile(stream.subarray(44), (frame) => seen.push(frame.payload.length) > 0)).toBe(104 - 44)
    expect([seen, decoder.betweenFrames, decoder.error]).toEqual([[3, 0, 5], true, undefined])
  })

  for (const [mode, modeKey] of modes) {
    test(`every single-bit flip of an ${mode} frame is rejected`, () => {
      fc.assert(
        fc.property(fc.uint8Array({ maxLength: 64 }), (body) => {
          const frame = frameBytes(modeKey, 3, 0n, body)
          for (let bit = 0; bit < frame.length * 8; bit++) {
            const flipped = frame.slice()
            flipped[bit >> 3]! ^= 1 << (bit & 7)
            const out = new FrameDecoder(modeKey, 1 << 20).push(flipped)
            // A flip in the length field may leave the frame incomplete instead: still nothing is accepted.
            const accepted = Array.isArray(out) ? out.length : 0
            expect({ bit, accepted }).toEqual({ bit, accepted: 0 })
          }
        }),
        seeded(2, 60)
      )
    })
  }

  test("a length over the ceiling is refused from the header alone, before any payload arrives", () => {
    const decoder = new FrameDecoder(key, 1024)
    const frame = frameBytes(key, 1, 0n, new Uint8Array(2048))
    const out = decoder.push(frame.subarray(0, HEADER_BYTES))
    expect(out).toBeInstanceOf(FrameError)
    expect((out as FrameError).reason).toBe("too-large")
    expect(decoder.buffered).toBe(0)
  })

  test("before a frame has authenticated, the first ceiling holds; after, the channel's", () => {
    // Ceiling 4096, first ceiling 100: a 2,000-byte first frame is refused at its header…
    const first = new FrameDecoder(key, 4096, 100).push(frameBytes(key, 1, 0n, new Uint8Array(2000)).subarray(0, HEADER_BYTES))
    expect((first as FrameError).reason).toBe("too-large")
    expect((first as FrameError).detail).toBe("frame of 2000 bytes exceeds the ceiling before authentication of 100 bytes")
    // …while after one small authenticated frame the same frame passes, and 5,000 bytes is over the channel's.
    const decoder = new FrameDecoder(key, 4096, 100)
    expect(decoder.push(frameBytes(key, 1, 0n, new Uint8Array([7])))).toEqual([{ kind: 1, sequence: 0n, payload: new Uint8Array([7]) }])
    expect(decoder.push(frameBytes(key, 1, 1n, new Uint8Array(2000)))).toEqual([{ kind: 1, sequence: 1n, payload: new Uint8Array(2000) }])
    expect((decoder.push(frameBytes(key, 1, 2n, new Uint8Array(5000)).subarray(0, HEADER_BYTES)) as FrameError).detail)
      .toBe("frame of 5000 bytes exceeds this channel's ceiling of 4096 bytes")
  })

  test("a huge declared length holds only the bytes that arrived", () => {
    const decoder = new FrameDecoder(key, 1 << 30)
    const header = frameBytes(key, 1, 0n, new Uint8Array(0)).subarray(0, HEADER_BYTES).slice()
    new DataView(header.buffer).setUint32(0, 1 << 30, true)
    expect(decoder.push(header)).toEqual([])
    expect(decoder.push(new Uint8Array(1000))).toEqual([])
    expect(decoder.buffered).toBe(1000)
  })

  test("replayed, reordered and skipped frames are rejected as bad-sequence", () => {
    const f0 = frameBytes(key, 1, 0n, new Uint8Array([1]))
    const f1 = frameBytes(key, 1, 1n, new Uint8Array([2]))
    const f2 = frameBytes(key, 1, 2n, new Uint8Array([3]))
    const reason = (...frames: Array<Uint8Array>) => {
      const out = feed(new FrameDecoder(key, 1024), frames)
      return out instanceof FrameError ? out.reason : "accepted"
    }
    expect(reason(f0, f1, f2)).toBe("accepted")
    expect(reason(f0, f0)).toBe("bad-sequence")
    expect(reason(f1, f0)).toBe("bad-sequence")
    expect(reason(f0, f2)).toBe("bad-sequence")
  })

  for (const encrypt of [false, true]) {
    test(`a frame from another connection, channel or direction fails the tag (${encrypt ? "encrypted" : "authenticated"})`, () => {
      const salt = newSalt()
      const [dialerNonce, listenerNonce] = [newNonce(), newNonce()]
      const a = deriveKeys(salt, magic.join, dialerNonce, listenerNonce, encrypt)
      const b = deriveKeys(salt, magic.join, newNonce(), newNonce(), encrypt)
      const control = deriveKeys(salt, magic.control, dialerNonce, listenerNonce, encrypt)
      const frame = frameBytes(a.dialer, 1, 0n, new Uint8Array([42]))
      expect((new FrameDecoder(b.dialer, 1024).push(frame) as FrameError).reason).toBe("bad-mac")
      expect((new FrameDecoder(a.listener, 1024).push(frame) as FrameError).reason).toBe("bad-mac")
      expect((new FrameDecoder(control.dialer, 1024).push(frame) as FrameError).reason).toBe("bad-mac")
      expect(new FrameDecoder(a.dialer, 1024).push(frame)).toEqual([{ kind: 1, sequence: 0n, payload: new Uint8Array([42]) }])
    })
  }

  test("the same connection's keys differ by mode: a frame whose flag is cleared on the way fails its tag", () => {
    const salt = newSalt()
    const [dialerNonce, listenerNonce] = [newNonce(), newNonce()]
    const encrypted = deriveKeys(salt, magic.join, dialerNonce, listenerNonce, true)
    const authenticated = deriveKeys(salt, magic.join, dialerNonce, listenerNonce, false)
    const frame = frameBytes(encrypted.dialer, 1, 0n, new Uint8Array([42]))
    frame[5] = 0
    expect((new FrameDecoder(authenticated.dialer, 1024).push(frame) as FrameError).reason).toBe("bad-mac")
  })

  test("after one bad frame the decoder stays closed", () => {
    const decoder = new FrameDecoder(key, 1024)
    const bad = frameBytes(key, 1, 0n, new Uint8Array([1]))
    bad[bad.length - 1]! ^= 1
    expect(decoder.push(bad)).toBeInstanceOf(FrameError)
    expect(decoder.push(frameBytes(key, 1, 0n, new Uint8Array([1])))).toBeInstanceOf(FrameError)
  })

  describe("lent payloads", () => {
    /** Feed the pieces to a lending decoder; each payload is copied while it is lent, as a link decodes it. */
    const feedLent = (decoder: FrameDecoder, pieces: ReadonlyArray<Uint8Array>) => {
      const frames: Array<{ kind: number; sequence: bigint; payload: Uint8Array }> = []
      for (const piece of pieces) {
        const failed = decoder.pushEach(piece, (frame) => void frames.push({ ...frame, payload: frame.payload.slice() }))
        if (failed !== undefined) return { frames, failed }
      }
      return { frames, failed: undefined }
    }

    for (const [mode, modeKey] of modes) {
      test(`${mode}: every payload as sent across any split, though their memory is reused; a tampered frame still fails`, () => {
        fc.assert(
          fc.property(payloads, fc.array(fc.nat(), { maxLength: 20 }), fc.nat(), (bodies, cuts, flip) => {
            const frames = bodies.map((body, index) => frameBytes(modeKey, 3, BigInt(index), body))
            const stream = new Uint8Array(Buffer.concat(frames))
            const clean = feedLent(new FrameDecoder(modeKey, 1 << 20, 1 << 20, "lent"), split(stream, cuts))
            expect(clean).toEqual({ frames: bodies.map((payload, index) => ({ kind: 3, sequence: BigInt(index), payload })), failed: undefined })
            // One bit of one frame's payload or tag flipped: the frames before it pass, that one fails its tag.
            const victim = flip % frames.length
            const start = frames.slice(0, victim).reduce((sum, frame) => sum + frame.length, 0)
            const inFrame = HEADER_BYTES + (flip % (frames[victim]!.length - HEADER_BYTES))
            const tampered = stream.slice()
            tampered[start + inFrame]! ^= 0x10
            const out = feedLent(new FrameDecoder(modeKey, 1 << 20, 1 << 20, "lent"), split(tampered, cuts))
            expect(out.frames.map((frame) => frame.payload)).toEqual(bodies.slice(0, victim))
            expect(out.failed?.reason).toBe("bad-mac")
          }),
          seeded(2)
        )
      })

      test(`${mode}: frames of several 4 MiB blocks, one after another in the same memory, each as sent`, () => {
        const decoder = new FrameDecoder(modeKey, 1 << 30, 1 << 30, "lent")
        const sizes = [9 << 20, 9 << 20, (5 << 20) + 3, 100]
        const bodies = sizes.map((size, index) => {
          const body = new Uint8Array(size)
          for (let at = 0; at < size; at++) body[at] = (at * 31 + index * 7) & 0xff
          return body
        })
        const stream = new Uint8Array(Buffer.concat(bodies.map((body, index) => frameBytes(modeKey, 1, BigInt(index), body))))
        const seen: Array<{ payload: Uint8Array; memory: ArrayBufferLike }> = []
        for (let at = 0; at < stream.length; at += 65_521) {
          const failed = decoder.pushEach(stream.subarray(at, at + 65_521), (frame) => void seen.push({ payload: frame.payload.slice(), memory: frame.payload.buffer }))
          expect(failed).toBeUndefined()
        }
        expect(seen.map(({ payload }) => payload.length)).toEqual(sizes)
        seen.forEach(({ payload }, index) => expect(Buffer.from(payload).equals(Buffer.from(bodies[index]!))).toBe(true))
        // The first frame comes in blocks, joined in memory that then carries every later one.
        expect(seen.map(({ memory }) => memory === seen[0]!.memory)).toEqual([true, true, true, true])
      })
    }

    test("memory is kept once the peer has authenticated, reused for frames that fit, replaced for a larger one; push hands out copies", () => {
      const decoder = new FrameDecoder(key, 1 << 20, 1 << 20, "lent")
      const memories: Array<ArrayBufferLike> = []
      const take = (size: number, sequence: bigint) =>
        decoder.pushEach(frameBytes(key, 1, sequence, new Uint8Array(size).fill(size & 0xff)), (frame) => {
          expect(frame.payload).toEqual(new Uint8Array(size).fill(size & 0xff))
          memories.push(frame.payload.buffer)
        })
      ;[1024, 1024, 512, 2048, 100].forEach((size, index) => expect(take(size, BigInt(index))).toBeUndefined())
      // The first frame is taken before the peer has authenticated: in memory of its own, not kept.
      expect(memories.map((memory) => memory === memories[1])).toEqual([false, true, true, false, false])
      expect(memories[4]).toBe(memories[3]!)
      const both = decoder.push(Buffer.concat([frameBytes(key, 1, 5n, new Uint8Array([5])), frameBytes(key, 1, 6n, new Uint8Array([6]))]))
      expect(both).toEqual([{ kind: 1, sequence: 5n, payload: new Uint8Array([5]) }, { kind: 1, sequence: 6n, payload: new Uint8Array([6]) }])
      const [five, six] = both as Array<{ payload: Uint8Array }>
      expect(five!.payload.buffer === six!.payload.buffer || five!.payload.buffer === memories[3]).toBe(false)
    })
  })

  test("frame overhead is a 16-byte header and a 16-byte tag, in both modes", () => {
    expect([HEADER_BYTES, MAC_BYTES]).toEqual([16, 16])
    expect(frameBytes(key, 0, 0n, new Uint8Array(10)).length).toBe(42)
    expect(frameBytes(encrypting, 0, 0n, new Uint8Array(10)).length).toBe(42)
  })
})
