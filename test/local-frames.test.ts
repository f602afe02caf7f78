/**
 * Frames between a rank and its relay: length-prefixed UTF-8 JSON.
 *
 * Round trips of many messages through `LocalFrameReader` with the byte
 * stream cut at every possible boundary (and, as a property, at random
 * boundaries); an oversized length refused from the 4-byte header alone,
 * before the body arrives or is allocated; a body that is not JSON refused.
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
