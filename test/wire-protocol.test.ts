/**
 * The wire protocol's number, carried by each channel's magic: this cohort's is routed, another's is named.
 */
import { describe, expect, test } from "bun:test"
import { otherProtocol, route, WIRE_PROTOCOL } from "../src/wire/Channel.ts"

const ascii = (text: string) => new TextEncoder().encode(text)

describe("wire protocol", () => {
  test("protocol 2's magics go to their channels", () => {
    expect(WIRE_PROTOCOL).toBe(2)
    expect(["CoJ2", "CoR2", "CoD2", "CoC2"].map((text) => route(ascii(text)))).toEqual([
      { _tag: "Channel", channel: "join" },
      { _tag: "Channel", channel: "rendezvous" },
      { _tag: "Channel", channel: "data" },
      { _tag: "Channel", channel: "control" }
    ])
  })

  test("another protocol's magic is recognised as such; anything else stays unknown", () => {
    expect(route(ascii("CoJ1"))).toEqual({ _tag: "OtherProtocol", channel: "join", protocol: 1 })
    expect(route(ascii("CoR3"))).toEqual({ _tag: "OtherProtocol", channel: "rendezvous", protocol: 3 })
    for (const text of ["CoJx", "CoX1", "cOJ1", "CoJ"]) expect({ text, route: route(ascii(text)) }).toEqual({ text, route: { _tag: "Unknown" } })
  })

  test("the refusal names both protocols and who should update", () => {
    expect(otherProtocol("join", 1)).toBe(
      "a join connection in cohort's wire protocol 1 (magic CoJ1); this launcher speaks protocol 2 (CoJ2): " +
        "run the same cohort version on every host (update cohort on the dialing host)"
    )
    expect(otherProtocol("rendezvous", 3)).toBe(
      "a rendezvous connection in cohort's wire protocol 3 (magic CoR3); this launcher speaks protocol 2 (CoR2): " +
        "run the same cohort version on every host (update this launcher's cohort)"
    )
  })
})
