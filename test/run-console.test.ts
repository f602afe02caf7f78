/**
 * The launcher's terminal: the live line (drawn on a terminal, replaced by
 * periodic plain lines elsewhere), the filters, the per-source log files and
 * the end-of-run table.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as RunView from "../src/actors/launcher/RunView.ts"
import { liveLine, make, summaryTable } from "../src/cli/RunConsole.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const formedAt = 10_000
const base = [
  { event: "run_started", at: 0, run: "t", hosts: [{ host: "a", ranks: 2 }, { host: "b", ranks: 1 }] },
  { event: "host_joined", at: 10, host: "a", ranks: [0, 1] },
  { event: "join_window", at: 20, windowRemainingMs: 24_400, capRemainingMs: 50_000 }
] satisfies ReadonlyArray<RunView.RunEvent>
const formed = [
  ...base,
  { event: "host_joined", at: 30, host: "b", ranks: [2] },
  { event: "world_formed", at: 40, world: 3, hosts: [{ host: "a", ranks: [0, 1], devices: ["cpu", "cpu"] }, { host: "b", ranks: [2], devices: ["0"] }] },
  { event: "phase", at: 40, phase: "forming" },
  { event: "rank_started", at: formedAt, rank: 0, pid: 1 },
  { event: "rank_started", at: formedAt, rank: 1, pid: 2 },
  { event: "rank_started", at: formedAt, rank: 2, pid: 3 },
  { event: "phase", at: formedAt + 50, phase: "training" },
  { event: "progress", at: formedAt + 500, epoch: 3, epochs: 10, samplesDone: 24_000, datasetSize: 50_000, samplesPerSec: 15_234.4, metrics: { loss: 0.1234, accuracy: 0.981 } }
] satisfies ReadonlyArray<RunView.RunEvent>

const replay = (events: ReadonlyArray<RunView.RunEvent>) => events.reduce(RunView.apply, RunView.initial("t", 0))

/** A console writing into arrays, with a clock the test moves. */
const capture = (options: Parameters<typeof make>[0] = {}) => {
  const written: Array<{ text: string; stream: "stdout" | "stderr" }> = []
  let clock = 0
  const console = make({ stderrIsTty: false, stdoutIsTty: false, ...options, write: (text, stream) => void written.push({ text, stream }), now: () => clock })
  return { console, written, text: (stream: "stdout" | "stderr") => written.filter((entry) => entry.stream === stream).map((entry) => entry.text).join(""), tick: (ms: number) => void (clock += ms) }
}

describe("the live line", () => {
  test("the join window, the ranks starting, then the epoch with samples/s and the metrics", () => {
    expect(liveLine(replay(base), 20)).toBe("joined 2/3 ranks on 1/2 hosts, window 25 s left")
    expect(liveLine(replay(formed.slice(0, 7)), formedAt)).toBe("starting ranks: 1/3 running")
    expect(liveLine(replay(formed), formedAt + 500)).toBe("epoch 3/10 [##########----------] 48% · 15,234 samples/s · loss 0.123 · accuracy 0.981 · 3/3 ranks")
    const dead = RunView.apply(replay(formed), { event: "rank_lost", at: formedAt + 600, ranks: [1], cause: "killed" })
    expect(liveLine(dead, formedAt + 600)).toEndWith("· 2/3 ranks (1 dead)")
    expect(liveLine(RunView.apply(dead, { event: "phase", at: 1, phase: "done" }), 0)).toBeUndefined()
  })

  test("on a terminal: drawn on stderr, cleared before any other line and drawn again after it", () => {
    const { console, tick, written } = capture({ stderrIsTty: true })
    let state = RunView.initial("t", 0)
    for (const event of base) {
      console.onEvent(event, state = RunView.apply(state, event))
      tick(100)
    }
    expect(written.map((entry) => entry.text)).toEqual([
      "joined 0/3 ranks on 0/2 hosts",
      "\r\x1b[2K",
      "joined 2/3 ranks on 1/2 hosts",
      "\r\x1b[2K",
      "joined 2/3 ranks on 1/2 hosts, window 25 s left"
    ])
    expect(written.every((entry) => entry.stream === "stderr")).toBe(true)
    console.output("[a:cpu:r0] hello", "stdout")
    expect(written.slice(5).map((entry) => entry.text)).toEqual(["\r\x1b[2K", "[a:cpu:r0] hello\n", "joined 2/3 ranks on 1/2 hosts, window 25 s left"])
    console.close()
    expect(written.at(-1)!.text).toBe("\r\x1b[2K")
  })

  test("elsewhere: no live line; a long join window is reported every 5 s as a plain line", () => {
    const { console, text, tick } = capture()
    let state = RunView.initial("t", 0)
    for (const event of base) console.onEvent(event, state = RunView.apply(state, event))
    expect(text("stderr")).toBe("")
    tick(5_000)
    console.onEvent(base[2], state)
    // The countdown moves on between the window's events: 24.4 s left at 20 ms, so 20 s at 5 s.
    expect(text("stderr")).toBe("cohort: joined 2/3 ranks on 1/2 hosts, window 20 s left\n")
    console.onEvent(base[2], state)
    expect(text("stderr").split("\n")).toHaveLength(2)
  })
})

describe("rank lines", () => {
  test("--ranks shows only those ranks; relay and cohort lines still show", () => {
    const { console, text } = capture({ ranks: new Set([2]) })
    console.output("[a:cpu:r0] zero", "stdout")
    console.output("[b:0:r2] two", "stdout")
    console.output("[b:relay] relay says", "stderr")
    console.cohortLine("cohort: world formed\n")
    expect(text("stdout")).toBe("[b:0:r2] two\n")
    expect(text("stderr")).toBe("[b:relay] relay says\ncohort: world formed\n")
  })

  test("--quiet hides them, and shows a rank's last lines when it dies", () => {
    const { console, text } = capture({ quiet: true })
    for (let i = 0; i < 25; i++) console.output(`[a:cpu:r1] step ${i}`, i % 2 === 0 ? "stdout" : "stderr")
    console.output("[a:cpu:r0] fine", "stdout")
    console.output("cohort agent b: dialling", "stderr")
    expect(text("stdout")).toBe("")
    expect(text("stderr")).toBe("")
    console.output("cohort agent b: error: the relay exited with status 1", "stderr")
    expect(text("stderr")).toBe("cohort agent b: error: the relay exited with status 1\n")
    const before = text("stderr").length
    console.onEvent({ event: "rank_exited", at: 1, rank: 0, exit: "status 0", clean: true }, replay(formed))
    expect(text("stderr")).toHaveLength(before)
    console.onEvent({ event: "rank_exited", at: 1, rank: 1, exit: "signal SIGSEGV", clean: false }, replay(formed))
    const lines = text("stderr").slice(before).trimEnd().split("\n")
    expect(lines[0]).toBe("cohort: rank 1 ended with signal SIGSEGV; its last 20 line(s):")
    expect(lines.slice(1)).toEqual(Array.from({ length: 20 }, (_, i) => `[a:cpu:r1] step ${i + 5}`))
  })

  test("prefixes are coloured per host on a terminal, the same colour for the same host", () => {
    const { console, text } = capture({ stdoutIsTty: true })
    console.output("[a:cpu:r0] x", "stdout")
    console.output("[b:0:r2] y", "stdout")
    console.output("[a:cpu:r1] z", "stdout")
    const [first, second, third] = text("stdout").trimEnd().split("\n")
    expect(first).toBe("\x1b[36m[a:cpu:r0] \x1b[0mx")
    expect(second).toBe("\x1b[33m[b:0:r2] \x1b[0my")
    expect(third).toStartWith("\x1b[36m")
  })

  test("--log-dir: a file per rank, relay and agent without their prefixes; cohort's lines in launcher.log; whatever the filters", () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-logs-"))
    dirs.push(dir)
    const { console } = capture({ logDir: join(dir, "logs"), quiet: true, ranks: new Set([0]) })
    console.output("[a:cpu:r0] zero", "stdout")
    console.output("[b:0:r2] two", "stderr")
    console.output("[b:relay] relay", "stderr")
    console.output("cohort agent b: agent", "stderr")
    console.output("ssh: warning", "stderr")
    console.cohortLine("cohort: one\ncohort: two\n")
    const read = (name: string) => readFileSync(join(dir, "logs", name), "utf8")
    expect(readdirSync(join(dir, "logs")).sort()).toEqual(["agent-b.log", "launcher.log", "rank-0.log", "rank-2.log", "relay-b.log"])
    expect(read("rank-0.log")).toBe("zero\n")
    expect(read("rank-2.log")).toBe("two\n")
    expect(read("relay-b.log")).toBe("relay\n")
    expect(read("agent-b.log")).toBe("agent\n")
    expect(read("launcher.log")).toBe("ssh: warning\ncohort: one\ncohort: two\n")
  })
})

describe("the end-of-run table", () => {
  test("per host and rank: device, exit (code or signal), restarts, run time", () => {
    const end = replay([
      ...formed,
      { event: "rank_exited", at: formedAt + 2_000, rank: 1, exit: "signal SIGKILL", clean: false },
      { event: "rank_exited", at: formedAt + 12_400, rank: 0, exit: "status 0", clean: true },
      { event: "rank_exited", at: formedAt + 12_600, rank: 2, exit: "status 0", clean: true }
    ])
    expect(summaryTable(end)).toBe([
      "host  rank  device  exit     restarts  run time",
      "a        0  cpu     0               0      12 s",
      "a        1  cpu     SIGKILL         0     2.0 s",
      "b        2  0       0               0      13 s"
    ].join("\n"))
    expect(summaryTable(replay(base))).toBe("")
  })
})
