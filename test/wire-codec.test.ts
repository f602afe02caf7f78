/**
 * Join messages through the codec and the frame layer: every member of the
 * union round-trips, and bad payloads are typed errors, never crashes.
 */
import { describe, expect, test } from "bun:test"
import * as Arbitrary from "effect/Arbitrary"
import { Encoder } from "cbor-x"
import * as Either from "effect/Either"
import * as fc from "fast-check"
import * as Codec from "../src/wire/Codec.ts"
import { FrameDecoder, FrameError, frameBytes } from "../src/wire/Frame.ts"
import { frameKey } from "../src/wire/FrameCipher.ts"
import { Abort, Hello, JoinMessage } from "../src/wire/messages/JoinMessages.ts"

const join = Codec.make("join", JoinMessage)
const key = frameKey(new Uint8Array(16).fill(1), false)
// effect bundles fast-check 3; hand its lazy arbitrary our fast-check 4.
const anyJoinMessage = (Arbitrary.makeLazy(JoinMessage) as unknown as (f: typeof fc) => fc.Arbitrary<JoinMessage>)(fc)

describe("join codec", () => {
  test("every join message survives encode → frame → any chunking → decode", () => {
    fc.assert(
      fc.property(fc.array(anyJoinMessage, { minLength: 1, maxLength: 5 }), fc.array(fc.nat(), { maxLength: 8 }), (messages, cuts) => {
        const stream = Buffer.concat(messages.map((message, index) => {
          const { kind, payload } = join.encode(message)
          return frameBytes(key, kind, BigInt(index), payload)
        }))
        const decoder = new FrameDecoder(key, 16 << 20)
        const points = [...new Set(cuts.map((cut) => cut % (stream.length + 1))), stream.length].sort((a, b) => a - b)
        const received: Array<JoinMessage> = []
        let from = 0
        for (const point of points) {
          const frames = decoder.push(new Uint8Array(stream.subarray(from, point)))
          from = point
          if (frames instanceof FrameError) throw frames
          for (const frame of frames) received.push(Either.getOrThrow(join.decode(frame.kind, frame.payload)))
        }
        expect(received).toEqual(messages)
      }),
      { seed: 3, numRuns: 300 }
    )
  })

  test("each union member has its own kind", () => {
    const hello = new Hello({ host: "a", devices: [0], deviceLabels: ["cpu"], pid: 1, version: "0.1.0" })
    expect(join.encode(hello).kind).toBe(0)
    expect(join.encode(new Abort({ reason: "x" })).kind).toBe(5)
  })

  test("garbage, a mismatched kind and an invalid field are typed errors naming the channel", () => {
    const abort = join.encode(new Abort({ reason: "x" }))
    const reason = (kind: number, payload: Uint8Array) => {
      const out = join.decode(kind, payload)
      return Either.isLeft(out) ? out.left.message : "decoded"
    }
    expect(reason(abort.kind, abort.payload)).toBe("decoded")
    expect(reason(0, abort.payload)).toBe("undecodable join message: kind 0 (Hello) does not match the payload")
    expect(reason(99, abort.payload)).toBe("undecodable join message: unknown kind 99")
    expect(reason(5, new Uint8Array([0xff, 0xff, 0x00]))).toStartWith("undecodable join message:")
    const wrong = new Encoder({ useRecords: false }).encode({ _tag: "Hello", host: "", devices: [-1], deviceLabels: [], pid: 1, version: "1" })
    expect(reason(0, wrong)).toContain("undecodable join message:")
    expect(reason(0, wrong)).toContain("host")
  })

  test("random payloads never throw", () => {
    fc.assert(
      fc.property(fc.nat(10), fc.uint8Array({ maxLength: 200 }), (kind, bytes) => {
        expect(() => join.decode(kind, bytes)).not.toThrow()
      }),
      { seed: 4, numRuns: 2_000 }
    )
  })
})
