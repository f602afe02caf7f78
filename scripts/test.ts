/**
 * `bun run test`'s runner: `bun test` with its arguments, its output passed
 * through as it comes, and, when tests failed, what each printed above its
 * `(fail)` line said again at the very end (`failureRecap`), where a log read
 * from its tail shows it. The exit status is `bun test`'s.
 */
import { failureRecap } from "./failureRecap.ts"

const child = Bun.spawn([process.execPath, "test", ...process.argv.slice(2)], {
  stdin: "inherit",
  stdout: "inherit",
  stderr: "pipe"
})

// Bun's test reporter writes to stderr: pass it on as it comes and keep it, line by line.
const lines: Array<string> = []
let partial = ""
const decoder = new TextDecoder()
for await (const chunk of child.stderr) {
  process.stderr.write(chunk)
  const text = partial + decoder.decode(chunk, { stream: true })
  const parts = text.split("\n")
  partial = parts.pop()!
  for (const part of parts) lines.push(part)
}
if (partial !== "") lines.push(partial)
const code = await child.exited

const recaps = failureRecap(lines)
if (recaps.length > 0) {
  const shown = recaps.slice(0, 10)
  process.stderr.write(`\n── what the ${recaps.length} failed test(s) printed (up to 60 lines each${recaps.length > shown.length ? `, the first ${shown.length}` : ""}) ──\n`)
  for (const recap of shown) process.stderr.write(`\n${recap.join("\n")}\n`)
}
process.exit(code)
