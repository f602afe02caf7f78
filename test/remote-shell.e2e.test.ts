/**
 * The shell an ssh session runs for a host's agent (SshFanOut.remoteAgentScript),
 * run for real under `bash -c` against a stand-in checkout: node_modules/.bin/bun
 * is this Bun, and src/cli/agent.ts is test/fixtures/term-ignoring-agent-fixture.ts,
 * which reads its spec from descriptor 3, ignores SIGTERM and records what it gets.
 *
 * The README's promise: the remote shell passes SIGHUP (sshd hanging the
 * session up), SIGTERM and SIGINT on to the agent as SIGTERM at once, then
 * SIGKILL after `grace` for an agent that is still there, and exits 143.
 */
import { afterAll, describe, expect, test } from "bun:test"
import * as Duration from "effect/Duration"
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { remoteAgentScript } from "../src/launcher/hosts/SshFanOut.ts"
import type { Worker } from "../src/config/ClusterConfig.ts"
import { isRunning, waitFor } from "./support/processes.ts"

const checkouts: Array<string> = []
afterAll(() => checkouts.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

/** A directory that passes the script's checks: an executable bun in node_modules/.bin and a src/cli/agent.ts. */
const standInCheckout = (): string => {
  const checkout = mkdtempSync(join(tmpdir(), "cohort-remote-shell-"))
  checkouts.push(checkout)
  mkdirSync(join(checkout, "src", "cli"), { recursive: true })
  mkdirSync(join(checkout, "node_modules", ".bin"), { recursive: true })
  symlinkSync(process.execPath, join(checkout, "node_modules", ".bin", "bun"))
  copyFileSync(join(import.meta.dir, "fixtures", "term-ignoring-agent-fixture.ts"), join(checkout, "src", "cli", "agent.ts"))
  return checkout
}

const worker = (path: string): Worker => ({
  host: "node-b",
  devices: { _tag: "Count", count: 1 },
  path,
  env: {},
  ssh: undefined,
  tunnel: false,
  agent: undefined
})

type Entry = { readonly up?: number; readonly spec?: string; readonly argv?: ReadonlyArray<string>; readonly got?: string; readonly at: number }
const entries = (checkout: string): Array<Entry> => {
  const file = join(checkout, "agent-record.jsonl")
  if (!existsSync(file)) return []
  return readFileSync(file, "utf8").split("\n").filter(Boolean).map((line) => JSON.parse(line) as Entry)
}

/** The grace the script is given (whole seconds: it sleeps that long before the KILL). */
const GRACE_MS = 2_000

describe("the remote agent shell", () => {
  test.each(["SIGHUP", "SIGTERM", "SIGINT"] as const)(
    "%s to the shell: the agent gets SIGTERM at once, SIGKILL after grace, and the shell exits 143",
    async (signal) => {
      const checkout = standInCheckout()
      const spec = `{"host":"node-b","saltHex":"${"5a".repeat(16)}"}`
      const shell = Bun.spawn(["bash", "-c", remoteAgentScript(worker(checkout), "run/node-b", Duration.millis(GRACE_MS), 1)], {
        stdin: "pipe",
        stdout: "pipe",
        stderr: "pipe"
      })
      try {
        // The spec line, as the launcher writes it down the session; the session's stdin stays open.
        shell.stdin.write(`${spec}\n`)
        shell.stdin.flush()
        await waitFor(() => entries(checkout).some((entry) => entry.up !== undefined), "the stand-in agent to start", 10_000)
        const up = entries(checkout).find((entry) => entry.up !== undefined)!
        const agent = up.up!
        // It was started as the script promises: its spec on descriptor 3, tagged for cleanup.
        expect(up.spec).toBe(spec)
        expect(up.argv).toEqual(["--tag", "run/node-b"])

        const sentAt = performance.now()
        shell.kill(signal)
        // TERM reaches the agent at once: well within the grace, while it is still alive.
        await waitFor(() => entries(checkout).some((entry) => entry.got === "SIGTERM"), "the agent to record SIGTERM", GRACE_MS / 2)
        expect(isRunning(agent)).toBe(true)
        // It ignores TERM, so only the KILL after the grace ends it: not well before the grace, not long after.
        await waitFor(() => !isRunning(agent), "the agent to be killed", GRACE_MS + 3_000)
        const elapsed = performance.now() - sentAt
        expect(elapsed).toBeGreaterThan(GRACE_MS * 0.75)
        expect(elapsed).toBeLessThan(GRACE_MS + 3_000)
        expect(await shell.exited).toBe(143)
        // The agent got TERM and nothing else: the shell's own signal is not passed on as is.
        expect(entries(checkout).filter((entry) => entry.got !== undefined).map((entry) => entry.got)).toEqual(["SIGTERM"])
      } finally {
        shell.kill("SIGKILL")
        const up = entries(checkout).find((entry) => entry.up !== undefined)
        if (up?.up !== undefined && isRunning(up.up)) process.kill(up.up, "SIGKILL")
      }
    },
    20_000
  )
})
