/**
 * A peer's text printed safely: controls escaped, cut to a length; and the
 * host-name rule. Literal tables.
 */
import { describe, expect, test } from "bun:test"
import { isHostName, printable } from "../src/wire/Printable.ts"

describe("printable", () => {
  const table: ReadonlyArray<readonly [string, string]> = [
    ["gpu-b", "gpu-b"],
    // Clear the line, return, and print a fake verdict: every control shows.
    ["\u001b[2K\rcohort: run completed", "\\x1b[2K\\x0dcohort: run completed"],
    ["tab\there\nnewline", "tab\\x09here\\x0anewline"],
    ["del\u007f c1\u009b", "del\\x7f c1\\x9b"],
    // A right-to-left override would reorder what follows on the screen.
    ["abc\u202edcba", "abc\\u202edcba"],
    ["ünïcødé ok", "ünïcødé ok"]
  ]
  for (const [input, expected] of table) test(JSON.stringify(input), () => expect(printable(input)).toBe(expected))

  test("cut to the length, marked", () => {
    expect(printable("x".repeat(10), 4)).toBe("xxxx…")
    expect(printable("x".repeat(4), 4)).toBe("xxxx")
  })
})

describe("host names", () => {
  test.each([["gpu-b", true], ["node01.cluster.local", true], ["10.0.0.7", true], ["fe80::1", true], ["host_2", true], ["x".repeat(253), true]])(
    "%s is one",
    (host, expected) => expect(isHostName(host)).toBe(expected)
  )
  test.each([["", false], ["-dash", false], ["a b", false], ["evil\u001b[31m", false], ["x".repeat(254), false], ["a/b", false]])(
    "%p is not one",
    (host, expected) => expect(isHostName(host)).toBe(expected)
  )
})
