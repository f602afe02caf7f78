/**
 * What a stop signal means (StopRequests.react), as a literal table, and the
 * process-level facts it rests on, read from real processes: whether SIGHUP
 * was ignored at start (nohup), and the exit statuses shells expect.
 */
import { describe, expect, test } from "bun:test"
import { repoRoot } from "./support/launch-scenario.ts"
import { exitStatusFor, react, type Delivery } from "../src/kernel/StopRequests.ts"

const at = (signal: Delivery["signal"], ms: number): Delivery => ({ signal, at: ms })

describe("one stop, however delivered", () => {
  // [first delivery (if any), this delivery, the reaction expected]
  const table: ReadonlyArray<readonly [Delivery | undefined, Delivery, string]> = [
    [undefined, at("SIGINT", 0), "Stop SIGINT"],
    [undefined, at("SIGTERM", 5), "Stop SIGTERM"],
    [undefined, at("SIGHUP", 5), "Stop SIGHUP"],
    // A terminal's Ctrl-C: the launcher's own copy and the one `bun run` forwards, a millisecond apart.
    [at("SIGINT", 100), at("SIGINT", 101), "Same"],
    // A scheduler's group SIGTERM, forwarded too; a closing terminal's SIGHUP with a SIGTERM behind it.
    [at("SIGTERM", 100), at("SIGTERM", 100), "Same"],
    [at("SIGHUP", 100), at("SIGTERM", 400), "Same"],
    [at("SIGINT", 100), at("SIGINT", 1_099), "Same"],
    // Pressed again after the launcher said it is stopping: the operator insists.
    [at("SIGINT", 100), at("SIGINT", 1_100), "Insist SIGINT"],
    [at("SIGTERM", 0), at("SIGINT", 5_000), "Insist SIGINT"],
    [at("SIGINT", 0), at("SIGTERM", 30_000), "Insist SIGTERM"]
  ]
  for (const [first, delivery, expected] of table) {
    test(`${first === undefined ? "nothing before" : `${first.signal} at ${first.at}`}, then ${delivery.signal} at ${delivery.at}: ${expected}`, () => {
      const reaction = react(first, delivery)
      expect(reaction._tag === "Same" ? "Same" : `${reaction._tag} ${reaction.signal}`).toBe(expected)
    })
  }

  test("exit statuses are 128 + the signal's number", () => {
    expect([exitStatusFor("SIGHUP"), exitStatusFor("SIGINT"), exitStatusFor("SIGTERM")]).toEqual([129, 130, 143])
  })
})

describe("SIGHUP under nohup", () => {
  const probe = `import { hangupIgnored } from "./src/kernel/signals.ts"; console.log(hangupIgnored())`
  const run = async (prefix: ReadonlyArray<string>) => {
    const proc = Bun.spawn([...prefix, process.execPath, "-e", probe], { cwd: repoRoot, stdout: "pipe", stderr: "pipe" })
    const [out] = await Promise.all([new Response(proc.stdout).text(), proc.exited])
    return out.trim()
  }

  test("a process started by nohup sees SIGHUP ignored; one started plainly does not", async () => {
    expect(await run(["nohup"])).toBe("true")
    expect(await run([])).toBe("false")
  })
})
