/**
 * The keys derived from the salt, against known answers computed outside
 * this code: RFC 5869 written out by hand with Python's hmac module (empty
 * HKDF salt, so PRK = HMAC-SHA256(32 zero bytes, salt)), for the salt
 * 00 01 … 0f. Each scoped key depends on its label and its party's name.
 */
import { describe, expect, test } from "bun:test"
import { hostKey, rankKey, scopedKeyFromHex, startToken } from "../src/wire/Keys.ts"

const salt = Uint8Array.from({ length: 16 }, (_, index) => index)
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex")

describe("scoped keys", () => {
  test("a host's key and a rank's key are HKDF-SHA256 of the salt under their own labels", () => {
    expect(hex(hostKey(salt, "nsh1"))).toBe("f1452058aec0db392fd11915b0b5e7b9f4a0426ad31ccbf939d3ee67f21d82cd")
    expect(hex(rankKey(salt, 3))).toBe("41d46d5e83b1782d52dbb713024789d56783bbf8879d45ce7ce71c69721b7ef3")
    expect(startToken(salt)).toBe("a44b42660d9d5c4881da749a6d64418c625103035892f0d72b76a3f27123c38c")
  })

  test("no two parties share a key, and none is the salt", () => {
    const keys = [hostKey(salt, "nsh1"), hostKey(salt, "nsh2"), hostKey(salt, "3"), rankKey(salt, 3), rankKey(salt, 4), rankKey(salt, 30)].map(hex)
    expect(new Set(keys).size).toBe(keys.length)
    for (const key of keys) expect(key.includes(hex(salt))).toBe(false)
  })

  test("scoped keys travel as 64 hex digits, nothing else", () => {
    expect(scopedKeyFromHex("ab".repeat(32))).toEqual(new Uint8Array(32).fill(0xab))
    for (const bad of ["ab".repeat(16), "ab".repeat(33), `${"ab".repeat(31)}zz`, ""]) expect(scopedKeyFromHex(bad)).toBeUndefined()
  })
})
