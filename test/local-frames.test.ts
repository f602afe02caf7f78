/**
 * Frames between a rank and its relay: length-prefixed UTF-8 JSON.
 *
 * Round trips of many messages through `LocalFrameReader` with the byte
 * stream cut at every possible boundary (and, as a property, at random
 * boundaries); an oversized length refused from the 4-byte header alone,
 * before the body arrives or is allocated; a body that is not JSON refused.
 * A large frame fed in many reads is copied a bounded number of times (at
 * most twice per byte, however many reads), and a reader that reuses its
 * read buffer loses nothing.
 */
import { describe, expect, test } from "bun:test"
import fc from "fast-check"
import { encodeLocal, LOCAL_FRAME_MAX, LocalFrameError, LocalFrameReader } from "../src/wire/LocalFrames.ts"

const concat = (parts: ReadonlyArray<Uint8Array>) => {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0))
  let at = 0
  for (const part of parts) {
    out.set(part, at)
    at += part.length
  }
  return out
}

/** Feed the stream to a fresh reader, cut at the given (ascending) offsets. */
const readCut = (stream: Uint8Array, cuts: ReadonlyArray<number>) => {
  const reader = new LocalFrameReader()
  const messages: Array<unknown> = []
  let from = 0
  for (const cut of [...cuts, stream.length]) {
    messages.push(...reader.push(stream.subarray(from, cut)))
    from = cut
  }
  return messages
}

/** What JSON makes of a message (e.g. -0 becomes 0). */
const viaJson = (message: unknown) => JSON.parse(JSON.stringify(message)) as unknown

const header = (length: number) => {
  const bytes = new Uint8Array(4)
  new DataView(bytes.buffer).setUint32(0, length, true)
  return bytes
}

describe("encodeLocal", () => {
  test("a 4-byte little-endian length, then the UTF-8 JSON", () => {
    const frame = encodeLocal({ t: "hello", rank: 3, name: "é" })
    const body = new TextEncoder().encode(JSON.stringify({ t: "hello", rank: 3, name: "é" }))
    expect(new DataView(frame.buffer, frame.byteOffset).getUint32(0, true)).toBe(body.length)
    expect(frame.subarray(4)).toEqual(body)
  })
})

describe("LocalFrameReader", () => {
  const messages: Array<unknown> = [
    { t: "hello", rank: 0 },
    { t: "reduce", bytes: 4096, op: "avg", seg: "/tmp/x/rank-0-1.seg", weight: 1 },
    [],
    "a string with ✓ multibyte ünïcødé and 🎉",
    0,
    null,
    { nested: { deep: [1, 2, { three: true }] } },
    { t: "idle" }
  ]
  const stream = concat(messages.map(encodeLocal))

  test("the whole stream in one chunk", () => {
    expect(new LocalFrameReader().push(stream)).toEqual(messages)
  })

  test("cut once at every possible boundary", () => {
    for (let cut = 0; cut <= stream.length; cut++) expect(readCut(stream, [cut])).toEqual(messages)
  })

  test("cut twice at every pair of boundaries", () => {
    // Pairs over a shorter stream keep this quick: still every header and body straddle.
    const short = concat(messages.slice(0, 3).map(encodeLocal))
    for (let first = 0; first <= short.length; first++) {
      for (let second = first; second <= short.length; second++) {
        expect(readCut(short, [first, second])).toEqual(messages.slice(0, 3))
      }
    }
  })

  test("one byte at a time", () => {
    const reader = new LocalFrameReader()
    const got: Array<unknown> = []
    for (let i = 0; i < stream.length; i++) got.push(...reader.push(stream.subarray(i, i + 1)))
    expect(got).toEqual(messages)
  })

  test("a chunk that completes nothing returns nothing; empty chunks are harmless", () => {
    const reader = new LocalFrameReader()
    expect(reader.push(new Uint8Array(0))).toEqual([])
    expect(reader.push(stream.subarray(0, 3))).toEqual([])
    expect(reader.push(new Uint8Array(0))).toEqual([])
    expect(reader.push(stream.subarray(3))).toEqual(messages)
  })

  test("chunks that are views into a larger buffer", () => {
    const backing = new Uint8Array(stream.length + 10).fill(0x7b)
    backing.set(stream, 5)
    const view = backing.subarray(5, 5 + stream.length)
    expect(readCut(view, [1, 9, 30])).toEqual(messages)
  })

  test("property: any messages, cut at any boundaries, come back in order", () => {
    const arbitrary = fc.array(fc.jsonValue(), { minLength: 1, maxLength: 12 }).chain((batch) => {
      const bytes = concat(batch.map(encodeLocal))
      return fc.tuple(
        fc.constant(batch),
        fc.constant(bytes),
        fc.uniqueArray(fc.integer({ min: 0, max: bytes.length }), { maxLength: 16 }).map((cuts) => cuts.sort((a, b) => a - b))
      )
    })
    fc.assert(
      fc.property(arbitrary, ([batch, bytes, cuts]) => {
        expect(readCut(bytes, cuts)).toEqual(batch.map(viaJson))
      }),
      { seed: 424_242, numRuns: 200, includeErrorInReport: true }
    )
  })

  test("a frame of exactly the ceiling is not refused by its header", () => {
    const reader = new LocalFrameReader()
    expect(reader.push(header(LOCAL_FRAME_MAX))).toEqual([])
  })

  test("an oversized length is refused from its header, before any body arrives", () => {
    const reader = new LocalFrameReader()
    expect(() => reader.push(header(LOCAL_FRAME_MAX + 1))).toThrow(LocalFrameError)
    expect(() => new LocalFrameReader().push(header(0xffff_ffff))).toThrow(/over the .*-byte ceiling/)
  })

  test("an oversized length after a good frame: the header alone is enough to refuse", () => {
    const reader = new LocalFrameReader()
    expect(reader.push(encodeLocal({ ok: 1 }))).toEqual([{ ok: 1 }])
    expect(reader.push(header(LOCAL_FRAME_MAX + 1).subarray(0, 2))).toEqual([])
    let thrown: unknown
    try {
      reader.push(header(LOCAL_FRAME_MAX + 1).subarray(2))
    } catch (error) {
      thrown = error
    }
    expect(thrown).toBeInstanceOf(LocalFrameError)
    expect((thrown as Error).message).toContain(`${LOCAL_FRAME_MAX + 1} bytes`)
  })

  test("a body that is not JSON is refused", () => {
    const body = new TextEncoder().encode("{not json")
    const frame = concat([header(body.length), body])
    expect(() => new LocalFrameReader().push(frame)).toThrow(new LocalFrameError("a local frame is not JSON"))
    // An empty body is not JSON either.
    expect(() => new LocalFrameReader().push(header(0))).toThrow(LocalFrameError)
  })

  test("a bad frame after a good one in the same chunk is still refused", () => {
    const body = new TextEncoder().encode("nope")
    const chunk = concat([encodeLocal({ fine: true }), header(body.length), body])
    expect(() => new LocalFrameReader().push(chunk)).toThrow(LocalFrameError)
  })
})

describe("LocalFrameReader with large frames", () => {
  /** One frame holding a JSON string of `bytes` bytes, quotes included (a checkpoint's state is one). */
  const bigFrame = (bytes: number) => encodeLocal("x".repeat(bytes - 2))
  const CHUNK = 64 << 10

  test("a 32 MiB frame in 64 KiB reads: each byte copied at most twice, not once per read", () => {
    const frame = bigFrame(32 << 20)
    const reader = new LocalFrameReader()
    const got: Array<unknown> = []
    for (let at = 0; at < frame.length; at += CHUNK) got.push(...reader.push(frame.subarray(at, at + CHUNK)))
    expect(got).toHaveLength(1)
    expect((got[0] as string).length).toBe((32 << 20) - 2)
    // 513 reads. Joining what is pending on every read would copy about 513 × 16 MiB on average: 8 GiB.
    expect(reader.copiedBytes).toBeLessThanOrEqual(2 * frame.length)
    expect(reader.copiedBytes).toBeGreaterThanOrEqual(frame.length)
  })

  test("four times the frame, about four times the copying: 8 MiB and 32 MiB", () => {
    const copied = [8 << 20, 32 << 20].map((bytes) => {
      const frame = bigFrame(bytes)
      const reader = new LocalFrameReader()
      for (let at = 0; at < frame.length; at += CHUNK) reader.push(frame.subarray(at, at + CHUNK))
      return reader.copiedBytes
    })
    expect(copied[1]! / copied[0]!).toBeGreaterThan(3.99)
    expect(copied[1]! / copied[0]!).toBeLessThan(4.01)
  })

  test("a frame inside one read is decoded where it lies: nothing copied", () => {
    const reader = new LocalFrameReader()
    expect(reader.push(concat([encodeLocal({ a: 1 }), encodeLocal({ b: 2 })]))).toEqual([{ a: 1 }, { b: 2 }])
    expect(reader.copiedBytes).toBe(0)
  })

  test("a caller that reuses its read buffer: every frame still comes back whole", () => {
    const messages = [{ t: "report", report: { _tag: "CheckpointSave", epoch: 1, state: "s".repeat(200_000) } }, { t: "idle", epoch: 2 }, "y".repeat(70_000)]
    const stream = concat(messages.map(encodeLocal))
    const buffer = new Uint8Array(4096)
    const reader = new LocalFrameReader()
    const got: Array<unknown> = []
    for (let at = 0; at < stream.length; at += buffer.length) {
      const part = stream.subarray(at, at + buffer.length)
      buffer.set(part)
      got.push(...reader.push(buffer.subarray(0, part.length)))
      // The next read overwrites the buffer: whatever the reader kept must be its own.
      buffer.fill(0x7b)
    }
    expect(got).toEqual(messages)
  })
})
