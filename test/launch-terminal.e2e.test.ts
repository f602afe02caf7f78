/**
 * The launcher on a real terminal: `script` (util-linux) gives it a
 * pseudo-terminal, as a person's shell would. The live line is drawn and
 * moves through the join, the ranks starting and the epochs, every other
 * line is printed on a cleared line, and nothing of it is left once the
 * end-of-run table is printed.
 */
import { describe, expect, test } from "bun:test"
import { repoRoot } from "./support/launch-scenario.ts"

const script = Bun.which("script")
if (script === null) console.log("terminal test skipped: util-linux's `script` is not on PATH (apt-get install -y bsdutils)")

describe.skipIf(script === null)("on a terminal", () => {
  test("a live line for the join and the epochs, cleared before every other line and gone before the table", async () => {
    const command = `stty cols 160; exec ${process.execPath} src/cli/launch.ts examples/local.yml --ranks 0`
    const proc = Bun.spawn([script!, "-qec", command, "/dev/null"], { cwd: repoRoot, stdout: "pipe", stderr: "pipe", stdin: "pipe" })
    const [text, code] = await Promise.all([new Response(proc.stdout).text(), proc.exited])
    expect(code).toBe(0)
    const clear = "\r\x1b[2K"
    expect(text).toContain("joined 0/4 ranks on 0/1 hosts")
    expect(text).toMatch(/epoch 1\/10 \[[#-]{20}\] \d+%/)
    expect(text).toMatch(/samples\/s · loss \d/)
    // Rank 0's prefix is coloured; the other ranks' lines are filtered out.
    expect(text).toContain("\x1b[36m[localhost:cpu:r0] \x1b[0mfinal weights checksum")
    expect(text).not.toContain("[localhost:cpu:r1]")
    // Every cohort line starts on a cleared line while the live line is up; the table comes after the last clear.
    const afterLastClear = text.slice(text.lastIndexOf(clear) + clear.length)
    expect(afterLastClear.split("\r\n").filter(Boolean)).toEqual([
      "inventory: localhost: 4 × cpu",
      "host       rank  device  exit  restarts  run time",
      ...[0, 1, 2, 3].map((rank) => expect.stringMatching(new RegExp(`^localhost     ${rank}  cpu     0            0 +\\d+\\.\\d s$`))),
      "cohort: run completed"
    ])
  }, 60_000)
})
