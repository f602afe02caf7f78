/**
 * The launcher's terminal: the live line (drawn on a terminal, replaced by
 * periodic plain lines elsewhere), the filters, the per-source log files,
 * terminal controls in forwarded lines (escaped, or passed by `rawOutput`)
 * and the end-of-run table.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as RunView from "../src/launcher/view/RunView.ts"
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
  { event: "world_formed", at: 40, world: 3, hosts: [{ host: "a", ranks: [0, 1], devices: ["cpu", "cpu"], labels: ["cpu", "cpu"] }, { host: "b", ranks: [2], devices: ["0"], labels: ["NVIDIA H200"] }] },
  { event: "phase", at: 40, phase: "forming" },
  { event: "rank_started", at: formedAt, rank: 0, pid: 1 },
  { event: "rank_started", at: formedAt, rank: 1, pid: 2 },
  { event: "rank_started", at: formedAt, rank: 2, pid: 3 },
  { event: "phase", at: formedAt + 50, phase: "training" },
  { event: "progress", at: formedAt + 500, epoch: 3, epochs: 10, samplesDone: 24_000, datasetSize: 50_000, samplesPerSec: 15_234.4, metrics: { loss: 0.1234, accuracy: 0.981 } }
] satisfies ReadonlyArray<RunView.RunEvent>

const replay = (events: ReadonlyArray<RunView.RunEvent>) => events.reduce(RunView.apply, RunView.initial("t", 0))

/** HH:MM:SS of this machine's clock, from the date's own fields. */
const hms = (ms: number) => {
  const date = new Date(ms)
  return [date.getHours(), date.getMinutes(), date.getSeconds()].map((part) => String(part).padStart(2, "0")).join(":")
}

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

  test("elsewhere: no live line; a long join window is reported every 10 s as a plain line, at once when what it waits for changes", () => {
    const { console, text, tick } = capture()
    const rule = { event: "run_started", at: 0, run: "t", hosts: [{ host: "a", ranks: 2 }, { host: "b", ranks: 1 }], join: { quorum: 3, start: "auto" } } satisfies RunView.RunEvent
    let state = RunView.initial("t", 0)
    const tell = (event: RunView.RunEvent) => console.onEvent(event, state = RunView.apply(state, event))
    for (const event of [rule, ...base.slice(1)]) tell(event)
    expect(text("stderr")).toBe("")
    // The launcher's countdown comes every half second: the same news is not repeated before 10 s.
    const countdown = (at: number) => ({ event: "join_window", at, windowRemainingMs: Math.max(0, 24_420 - at), capRemainingMs: 50_020 - at }) satisfies RunView.RunEvent
    for (let at = 500; at < 10_000; at += 500) {
      tick(500)
      tell(countdown(at))
    }
    expect(text("stderr")).toBe("")
    tick(500)
    tell(countdown(10_000))
    // The countdown moves on between the window's events: 24.42 s from 0, so 15 s left at 10 s.
    expect(text("stderr")).toBe("cohort: joined 2/3 ranks on 1/2 hosts, window 15 s left\n")
    // The window closes without the quorum: said at once, with what it waits for and until when.
    for (let at = 10_500; at <= 24_500; at += 500) {
      tick(500)
      tell(countdown(at))
    }
    const lines = text("stderr").trimEnd().split("\n")
    expect(lines).toEqual([
      "cohort: joined 2/3 ranks on 1/2 hosts, window 15 s left",
      "cohort: joined 2/3 ranks on 1/2 hosts, window 5 s left",
      `cohort: joined 2/3 ranks on 1/2 hosts; window closed: waiting for the quorum (2/3 ranks) until the hard cap at ${hms(50_020)} (26 s)`
    ])
    // Then every 10 s while it waits, the time left going down; 85 s of waiting is not 17 lines.
    for (let at = 25_000; at <= 50_000; at += 500) {
      tick(500)
      tell(countdown(at))
    }
    expect(text("stderr").trimEnd().split("\n").slice(3)).toEqual([
      `cohort: joined 2/3 ranks on 1/2 hosts; window closed: waiting for the quorum (2/3 ranks) until the hard cap at ${hms(50_020)} (16 s)`,
      `cohort: joined 2/3 ranks on 1/2 hosts; window closed: waiting for the quorum (2/3 ranks) until the hard cap at ${hms(50_020)} (6 s)`
    ])
  })

  test("the join line says what the window waits for: its end, the quorum, the operator's start (manual), or, from an older launcher, more ranks", () => {
    const at = 1_000
    const waiting = (start: "auto" | "manual" | "hybrid" | undefined, joined: number, windowRemainingMs: number) =>
      [
        { event: "run_started", at: 0, run: "t", hosts: [{ host: "a", ranks: 2 }, { host: "b", ranks: 2 }], ...(start === undefined ? {} : { join: { quorum: 4, start } }) },
        ...(joined > 0 ? [{ event: "host_joined", at: 10, host: "a", ranks: [0, 1] } as const] : []),
        ...(joined > 2 ? [{ event: "host_joined", at: 20, host: "b", ranks: [2, 3] } as const] : []),
        { event: "join_window", at, windowRemainingMs, capRemainingMs: 85_000 }
      ] satisfies ReadonlyArray<RunView.RunEvent>
    const cap = hms(at + 85_000)
    expect(liveLine(replay(waiting("auto", 2, 12_000)), at)).toBe("joined 2/4 ranks on 1/2 hosts, window 12 s left")
    expect(liveLine(replay(waiting("auto", 2, 0)), at)).toBe(`joined 2/4 ranks on 1/2 hosts; window closed: waiting for the quorum (2/4 ranks) until the hard cap at ${cap} (85 s)`)
    expect(liveLine(replay(waiting("hybrid", 2, 0)), at + 5_000)).toBe(`joined 2/4 ranks on 1/2 hosts; window closed: waiting for the quorum (2/4 ranks) until the hard cap at ${cap} (80 s)`)
    // Manual: the window's end means nothing; the quorum first, then the operator.
    expect(liveLine(replay(waiting("manual", 2, 12_000)), at)).toBe(`joined 2/4 ranks on 1/2 hosts; waiting for the quorum (2/4 ranks) until the hard cap at ${cap} (85 s)`)
    expect(liveLine(replay(waiting("manual", 4, 0)), at)).toBe(`joined 4/4 ranks on 2/2 hosts; waiting for the operator's start (bun run status --start) until the hard cap at ${cap} (85 s)`)
    expect(liveLine(replay(waiting(undefined, 2, 0)), at)).toBe(`joined 2/4 ranks on 1/2 hosts; window closed: waiting for more ranks until the hard cap at ${cap} (85 s)`)
    // Past the cap (the verdict is on its way): 0 s, not a negative count.
    expect(liveLine(replay(waiting("auto", 2, 0)), at + 90_000)).toBe(`joined 2/4 ranks on 1/2 hosts; window closed: waiting for the quorum (2/4 ranks) until the hard cap at ${cap} (0 s)`)
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

describe("terminal controls in forwarded lines", () => {
  // What a hostile or careless rank prints, and what the operator's terminal and the log files get.
  const hostile = "[a:cpu:r0] \u001b[2J\u001b]0;owned\u0007\rcohort: run completed\u009b31m\u202eabc\tdef\u007f"
  const escaped = "[a:cpu:r0] \\x1b[2J\\x1b]0;owned\\x07\\x0dcohort: run completed\\x9b31m\\u202eabc\tdef\\x7f"

  const withLogs = (options: Parameters<typeof make>[0] = {}) => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-controls-"))
    dirs.push(dir)
    const captured = capture({ logDir: dir, ...options })
    return { ...captured, log: (name: string) => readFileSync(join(dir, name), "utf8") }
  }

  test("escaped on the terminal and in each source's log file, whatever the source; tab kept", () => {
    const { console, log, text } = withLogs()
    console.output(hostile, "stdout")
    console.output("[a:relay] \u001b[31mrelay\u001b[0m", "stderr")
    console.output("cohort agent b: \u001b[1Aup a line", "stderr")
    console.output("ssh: \u0007bell", "stderr")
    expect(text("stdout")).toBe(`${escaped}\n`)
    expect(text("stderr")).toBe("[a:relay] \\x1b[31mrelay\\x1b[0m\ncohort agent b: \\x1b[1Aup a line\nssh: \\x07bell\n")
    expect(log("rank-0.log")).toBe("\\x1b[2J\\x1b]0;owned\\x07\\x0dcohort: run completed\\x9b31m\\u202eabc\tdef\\x7f\n")
    expect(log("relay-a.log")).toBe("\\x1b[31mrelay\\x1b[0m\n")
    expect(log("agent-b.log")).toBe("\\x1b[1Aup a line\n")
    expect(log("launcher.log")).toBe("ssh: \\x07bell\n")
  })

  test("on a terminal the prefix is still coloured, and only cohort's colour codes are raw", () => {
    const { console, text } = capture({ stdoutIsTty: true })
    console.output("[a:cpu:r0] \u001b[2Jx", "stdout")
    expect(text("stdout")).toBe("\u001b[36m[a:cpu:r0] \u001b[0m\\x1b[2Jx\n")
  })

  test("--quiet: a dead rank's last lines come back escaped", () => {
    const { console, text } = capture({ quiet: true })
    console.output("[a:cpu:r1] \u001b[2Jbefore the crash", "stderr")
    console.onEvent({ event: "rank_exited", at: 1, rank: 1, exit: "status 1", clean: false }, replay(formed))
    expect(text("stderr")).toBe("cohort: rank 1 ended with status 1; its last 1 line(s):\n[a:cpu:r1] \\x1b[2Jbefore the crash\n")
  })

  test("rawOutput (--raw-output): the lines as printed, on the terminal and in the log files", () => {
    const { console, log, text } = withLogs({ rawOutput: true })
    console.output(hostile, "stdout")
    console.output("[a:relay] \u001b[31mrelay\u001b[0m", "stderr")
    expect(text("stdout")).toBe(`${hostile}\n`)
    expect(text("stderr")).toBe("[a:relay] \u001b[31mrelay\u001b[0m\n")
    expect(log("rank-0.log")).toBe("\u001b[2J\u001b]0;owned\u0007\rcohort: run completed\u009b31m\u202eabc\tdef\u007f\n")
  })

  test("cohort's own lines are escaped always, --raw-output or not: a verdict quotes what a rank threw", () => {
    for (const rawOutput of [false, true]) {
      const { console, log, text } = withLogs({ rawOutput })
      console.cohortLine("cohort: run failed: rank 2 exited with status 1 (Error: \u001b[2Jgone\r)\ncohort: host\trank\n")
      expect(text("stderr")).toBe("cohort: run failed: rank 2 exited with status 1 (Error: \\x1b[2Jgone\\x0d)\ncohort: host\trank\n")
      expect(log("launcher.log")).toBe("cohort: run failed: rank 2 exited with status 1 (Error: \\x1b[2Jgone\\x0d)\ncohort: host\trank\n")
    }
  })

  test("a metric's name in the live line is a rank's text too: escaped", () => {
    const state = RunView.apply(replay(formed), {
      event: "progress",
      at: formedAt + 600,
      epoch: 3,
      epochs: 10,
      samplesDone: 24_000,
      datasetSize: 50_000,
      samplesPerSec: null,
      metrics: { "\u001b[2Jloss": 0.5 }
    })
    expect(liveLine(state, formedAt + 600)).toBe("epoch 3/10 [##########----------] 48% · 15,234 samples/s · \\x1b[2Jloss 0.500 · 3/3 ranks")
  })
})

describe("the end-of-run table", () => {
  test("the inventory, then per host and rank: device, exit (code or signal), restarts, run time", () => {
    const end = replay([
      ...formed,
      { event: "rank_exited", at: formedAt + 2_000, rank: 1, exit: "signal SIGKILL", clean: false },
      { event: "rank_exited", at: formedAt + 12_400, rank: 0, exit: "status 0", clean: true },
      { event: "rank_exited", at: formedAt + 12_600, rank: 2, exit: "status 0", clean: true }
    ])
    expect(summaryTable(end)).toBe([
      "inventory: a: 2 × cpu; b: 1 × NVIDIA H200",
      "host  rank  device  exit     restarts  run time",
      "a        0  cpu     0               0      12 s",
      "a        1  cpu     SIGKILL         0     2.0 s",
      "b        2  0       0               0      13 s"
    ].join("\n"))
    expect(summaryTable(replay(base))).toBe("")
  })

  test("a failed run's failures line says it covers the time before the failure; a completed one's does not", () => {
    const lost: ReadonlyArray<RunView.RunEvent> = [...formed, { event: "rank_lost", at: formedAt + 2_005, ranks: [1], cause: "rank 1 lost: exited with signal SIGKILL", diedAt: formedAt + 2_000 }]
    const failures = (state: RunView.RunState) => summaryTable(state).split("\n").filter((line) => line.startsWith("failures: "))
    expect(failures(replay(lost))).toEqual([expect.stringMatching(/^failures: 1 death\(s\): detected in 5 ms, none recovered/)])
    const failed = RunView.apply(replay(lost), { event: "verdict", at: formedAt + 3_000, outcome: "failed", exitCode: 1, summary: "run failed: max_failure exceeded" })
    expect(failures(failed)).toEqual([expect.stringMatching(/^failures: 1 death\(s\) before the run failed: detected in 5 ms, none recovered(; effective training [\d.]+% until the run failed)?$/)])
  })
})
