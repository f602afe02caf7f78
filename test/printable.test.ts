/**
 * A peer's text printed safely: controls escaped, cut to a length; a rank's
 * line escaped the same way but tab kept and uncut; and the host-name rule.
 * Literal tables.
 */
import { describe, expect, test } from "bun:test"
import { isHostName, printable, printableLine } from "../src/wire/Printable.ts"

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

describe("printableLine: a rank's line on its way to the terminal and the log files", () => {
  const table: ReadonlyArray<readonly [string, string, string]> = [
    ["clear the screen, then home", "\u001b[2J\u001b[Hwiped", "\\x1b[2J\\x1b[Hwiped"],
    ["a colour and its reset", "\u001b[31mred\u001b[0m", "\\x1b[31mred\\x1b[0m"],
    ["an OSC window title, ended by BEL", "\u001b]0;pwned\u0007after", "\\x1b]0;pwned\\x07after"],
    ["an OSC title ended by ST (ESC \\)", "\u001b]2;title\u001b\\after", "\\x1b]2;title\\x1b\\after"],
    ["an OSC 8 hyperlink", "\u001b]8;;http://evil\u001b\\click\u001b]8;;\u001b\\", "\\x1b]8;;http://evil\\x1b\\click\\x1b]8;;\\x1b\\"],
    ["a carriage return that would hide the line's start", "epoch 3 loss nan\rcohort: run completed", "epoch 3 loss nan\\x0dcohort: run completed"],
    ["a progress bar redrawn with CR", "\r 10%|#  |\r 20%|## |", "\\x0d 10%|#  |\\x0d 20%|## |"],
    ["BEL, backspace, NUL, vertical tab, form feed", "ding\u0007 back\bspace nul\u0000 vt\u000b ff\u000c", "ding\\x07 back\\x08space nul\\x00 vt\\x0b ff\\x0c"],
    ["a newline inside a forwarded line (JSON carries one)", "one\ntwo", "one\\x0atwo"],
    ["the last C0 control", "us\u001f", "us\\x1f"],
    ["DEL", "del\u007fete", "del\\x7fete"],
    ["C1: the first, NEL, CSI, OSC, the last", "\u0080 \u0085 \u009b2J \u009d0;t \u009f", "\\x80 \\x85 \\x9b2J \\x9d0;t \\x9f"],
    ["bidi embeddings and overrides, U+202A to U+202E", "\u202a\u202b\u202c\u202d\u202e", "\\u202a\\u202b\\u202c\\u202d\\u202e"],
    ["a right-to-left override in a file name", "invoice\u202efdp.exe", "invoice\\u202efdp.exe"],
    ["bidi isolates, U+2066 to U+2069", "a\u2066b\u2067c\u2068d\u2069e", "a\\u2066b\\u2067c\\u2068d\\u2069e"],
    ["tab is kept: a traceback's indentation", "Traceback (most recent call last):\tFile \"train.py\"", "Traceback (most recent call last):\tFile \"train.py\""],
    ["tab between table columns", "epoch\tloss\t0.31", "epoch\tloss\t0.31"],
    ["ordinary UTF-8 is kept", "ünïcødé ✓ 学习率 🎉 e\u0301", "ünïcødé ✓ 学习率 🎉 e\u0301"],
    ["just past the escaped ranges: U+00A0, U+2029, U+202F, U+206A", "\u00a0\u2029\u202f\u206a", "\u00a0\u2029\u202f\u206a"],
    ["a backslash the rank printed is left as it is", "C:\\x1b is text", "C:\\x1b is text"],
    ["an ordinary line", "[gpu-a:0:r3] epoch 1: loss 0.1851", "[gpu-a:0:r3] epoch 1: loss 0.1851"]
  ]
  for (const [what, input, expected] of table) test(what, () => expect(printableLine(input)).toBe(expected))

  test("nothing is cut, however long the line", () => {
    expect(printableLine(`${"x".repeat(100_000)}\u001b`)).toBe(`${"x".repeat(100_000)}\\x1b`)
  })

  test("escaping twice changes nothing: the escapes are printable", () => {
    for (const [, input, expected] of table) expect(printableLine(printableLine(input))).toBe(expected)
  })

  test("printable (a peer's string for cohort's own lines) escapes tab too; printableLine does not", () => {
    expect(printable("a\tb")).toBe("a\\x09b")
    expect(printableLine("a\tb")).toBe("a\tb")
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
