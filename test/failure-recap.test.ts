/**
 * The test runner's recap of failures (scripts/failureRecap.ts), on a
 * transcript written the way `bun test` prints one.
 */
import { expect, test } from "bun:test"
import { failureRecap } from "../scripts/failureRecap.ts"

const transcript = `bun test v1.4.4 (38afee6c8)

test/a.test.ts:
(pass) a > one [1.00ms]
error: expect(received).toBe(expected)

Expected: 2
Received: 3

      at /work/main/test/a.test.ts:9:10
(fail) a > two [2.00ms]
(pass) a > three [1.00ms]

test/b.e2e.test.ts:
a line a launcher printed
(fail) b > timed out [5000.00ms]
(fail) b > right after another [1.00ms]

 3 pass
 3 fail

3 tests failed:
(fail) a > two [2.00ms]
(fail) b > timed out [5000.00ms]
(fail) b > right after another [1.00ms]
`.split("\n")

test("each failed test with what it printed since the line before it; the closing summary adds none", () => {
  expect(failureRecap(transcript)).toEqual([
    ["error: expect(received).toBe(expected)", "", "Expected: 2", "Received: 3", "", "      at /work/main/test/a.test.ts:9:10", "(fail) a > two [2.00ms]"],
    ["a line a launcher printed", "(fail) b > timed out [5000.00ms]"],
    ["(fail) b > right after another [1.00ms]"]
  ])
})

test("at most the last `keep` lines of a long one; none when nothing failed", () => {
  expect(failureRecap(transcript, 3)[0]).toEqual(["", "      at /work/main/test/a.test.ts:9:10", "(fail) a > two [2.00ms]"])
  expect(failureRecap(["test/a.test.ts:", "(pass) a > one", " 1 pass", " 0 fail"])).toEqual([])
})
