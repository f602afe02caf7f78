/**
 * The frame cipher and the frame keys against known answers computed outside this code, with Python's
 * `cryptography` (AESGCM and HKDF, version 48):
 *
 * ```python
 * header = struct.pack("<IBBHQ", len(payload), kind, flags, 0, sequence); nonce = b"\0" * 4 + struct.pack(">Q", sequence)
 * AESGCM(bytes([7]) * 16).encrypt(nonce, b"", header + payload)        # authenticated: the tag
 * AESGCM(bytes([7]) * 16).encrypt(nonce, payload, header)              # encrypted: ciphertext ‖ tag
 * HKDF(SHA256(), 16, salt=dialer_nonce + listener_nonce, info=b"cohort/2 frame key <direction> <mode> " + magic).derive(salt)
 * ```
 *
 * The authenticated frame is fed at odd cuts: the tag of additional data given in slices must be the tag of
 * the whole, which is what streaming rests on (`FrameCipher`).
 */
import { describe, expect, test } from "bun:test"
import { magic } from "../src/wire/Channel.ts"
import { FrameDecoder, FrameError, frameBytes, frameParts } from "../src/wire/Frame.ts"
import { frameKey } from "../src/wire/FrameCipher.ts"
import { deriveKeys } from "../src/wire/Keys.ts"

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex")
const key = new Uint8Array(16).fill(7)
const thousand = Uint8Array.from({ length: 1000 }, (_, index) => (index * 7) & 0xff)

describe("frame cipher", () => {
  test("an authenticated frame's tag is AES-128-GCM's over header ‖ payload, with the sequence as nonce", () => {
    const frame = frameBytes(frameKey(key, false), 3, 5n, thousand)
    expect(hex(frame.subarray(0, 16))).toBe("e803000003000000" + "0500000000000000")
    expect(Buffer.from(frame.subarray(16, 1016)).equals(Buffer.from(thousand))).toBe(true)
    expect(hex(frame.subarray(1016))).toBe("e36d60d767f488f5458c4ba095c5b595")
  })

  test("the same tag when the payload is hashed in slices of odd sizes, sending and receiving", () => {
    for (const slice of [1, 7, 16, 17, 333, 999]) {
      const parts = [...frameParts(frameKey(key, false), 3, 5n, thousand, slice)]
      expect({ slice, tag: hex(parts[parts.length - 1]!) }).toEqual({ slice, tag: "e36d60d767f488f5458c4ba095c5b595" })
    }
    const frame = frameBytes(frameKey(key, false), 3, 5n, thousand)
    // The decoder's expected sequence is 0: the right tag passes, and only then is the sequence refused.
    const decoder = new FrameDecoder(frameKey(key, false), 1 << 20)
    let out: ReturnType<FrameDecoder["push"]> = []
    for (let at = 0; at < frame.length; at += 13) out = decoder.push(frame.subarray(at, at + 13))
    expect((out as FrameError).reason).toBe("bad-sequence")
  })

  test("an encrypted frame is header ‖ ciphertext ‖ tag, the header as additional data", () => {
    const payload = new TextEncoder().encode("cohort frames, encrypted")
    const frame = frameBytes(frameKey(key, true), 4, 9n, payload)
    expect(hex(frame)).toBe(
      "1800000004010000" + "0900000000000000" + "2b404de8829a16865b996413b9ddc4c9f8c45e5b67893604" + "1fc076ef153cc6b13eda876f9df20823"
    )
  })

  test("frame keys are HKDF-SHA256 of the key, salted with both nonces, labelled with direction, mode and channel", () => {
    const salt = Uint8Array.from({ length: 16 }, (_, index) => index)
    const [dialerNonce, listenerNonce] = [new Uint8Array(16).fill(0x11), new Uint8Array(16).fill(0x22)]
    const join = deriveKeys(salt, magic.join, dialerNonce, listenerNonce, false)
    const joinEncrypted = deriveKeys(salt, magic.join, dialerNonce, listenerNonce, true)
    const control = deriveKeys(salt, magic.control, dialerNonce, listenerNonce, false)
    expect([hex(join.dialer.key), join.dialer.encrypt]).toEqual(["85418e7a324415f5304fb40ef3b28033", false])
    expect([hex(joinEncrypted.listener.key), joinEncrypted.listener.encrypt]).toEqual(["f12911630332f9adbb7f6c5e92675b10", true])
    expect(hex(control.listener.key)).toBe("a104b39bf27b1a20d3ace000f7c6d776")
  })

  test("a frame key of any other length than 16 bytes is refused at once, saying why", () => {
    expect(() => frameKey(new Uint8Array(32), false)).toThrow("a frame key is 16 bytes (AES-128), not 32")
  })
})
