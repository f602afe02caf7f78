/**
 * What `bun test` said about each failing test, gathered again for the end of
 * the run. Bun prints a failure's error where the test ran, above its
 * `(fail)` line; a long run's log is often read from its tail only (CI keeps
 * the last lines), where the summary names the failure but not why.
 */

/** A line that ends what the test before it printed: a test's verdict, or the header of the next file. */
const boundary = /^(\((pass|fail|skip|todo)\) |\S+\.test\.[cm]?[tj]sx?:$)/
/** Where Bun's closing summary lists the failures again, by name only. */
const summary = /^\s*\d+ tests? failed:$/

/** The output of each failed test, its `(fail)` line last, at most `keep` lines of it, in order. */
export const failureRecap = (lines: ReadonlyArray<string>, keep = 60): Array<Array<string>> => {
  const end = lines.findIndex((line) => summary.test(line))
  const recaps: Array<Array<string>> = []
  let since = 0
  for (const [at, line] of lines.slice(0, end === -1 ? lines.length : end).entries()) {
    if (!boundary.test(line)) continue
    if (line.startsWith("(fail) ")) recaps.push(lines.slice(Math.max(since, at + 1 - keep), at + 1))
    since = at + 1
  }
  return recaps
}
