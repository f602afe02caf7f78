/**
 * A lost host, and a frozen rank, in the lines a person reads: literal inputs, literal lines.
 * - The session's last words: only the agent's own lines (never a rank's or relay's, which carry their
 *   `[host:dev:rN] ` prefix), one line, cut at 160 characters; the reason says who ended (the ssh session
 *   here, its connection, or the agent there) without the host, which the line that says it names once.
 * - The verdict's deaths: a lost host's ranks said once, with the host and the cause (`sayHostsOnce`,
 *   `chainText`); the DEGRADED verdict names losses the policy counted without a report (a silent rank).
 * - The end tables' exit cell: `host lost`, `silent for 2.0 s`, not the whole story.
 */
import { describe, expect, test } from "bun:test"
import { ChildExit } from "../src/kernel/ChildExit.ts"
import { chainText, type DeathRecord, sayHostsOnce } from "../src/kernel/policy/SecondaryDeaths.ts"
import { endedReason, isOwnLine, lastWords } from "../src/launcher/hosts/SshSession.ts"
import { lossesToSay } from "../src/launcher/run/Teardown.ts"
import { exitCell } from "../src/cli/statusTable.ts"
import { summaryTable } from "../src/cli/RunConsole.ts"
import * as RunView from "../src/launcher/view/RunView.ts"

describe("a lost host's session: its last words and its reason", () => {
  test("a rank's or relay's line is never the agent's last words; the agent's, its shell's and ssh's on stderr are", () => {
    expect([
      ["[127.0.0.1:cpu:r2] init: rank 2 of 4 on cpu", "stdout"],
      ["[127.0.0.1:cpu:r2] Traceback (most recent call last):", "stderr"],
      ["[gpu-b:0:r11] epoch 3: loss 0.2", "stderr"],
      ["[gpu-b:relay] relay: 2 rank(s) attached", "stderr"],
      ["cohort agent gpu-b: the launcher went silent", "stderr"],
      ["cohort agent gpu-b: progress", "stdout"],
      ["Connection to 10.0.0.2 closed by remote host.", "stderr"],
      ["   ", "stderr"]
    ].map(([line, stream]) => isOwnLine(line!, stream as "stdout" | "stderr"))).toEqual([false, false, false, false, true, false, true, false])
  })

  test("the reason says who ended, and the agent's last words in one short line", () => {
    const said = "cohort agent gpu-b: the launcher went silent"
    expect([
      endedReason("gpu-b", ChildExit.Signaled({ signal: "SIGKILL" }), undefined),
      endedReason("gpu-b", ChildExit.Signaled({ signal: "SIGTERM" }), said),
      endedReason("gpu-b", ChildExit.Exited({ code: 137 }), undefined),
      endedReason("gpu-b", ChildExit.Exited({ code: 1 }), said),
      endedReason("gpu-b", ChildExit.Exited({ code: 255 }), "Connection to 10.0.0.2 closed by remote host.")
    ]).toEqual([
      "its ssh session ended with signal SIGKILL",
      "its ssh session ended with signal SIGTERM: the launcher went silent",
      "its agent ended with signal SIGKILL",
      "its agent ended with status 1: the launcher went silent",
      "its ssh connection was lost: Connection to 10.0.0.2 closed by remote host."
    ])
  })

  test("last words longer than 160 characters are cut there, with an ellipsis", () => {
    const long = `cohort agent gpu-b: ${"x".repeat(300)}`
    const cut = lastWords("gpu-b", long)
    expect(cut).toBe(`${"x".repeat(159)}…`)
    expect(cut.length).toBe(160)
    expect(lastWords("gpu-b", `${"y".repeat(160)}`)).toBe("y".repeat(160))
    // Another host's prefix is kept: only the host's own is said by the reason already.
    expect(lastWords("gpu-b", "cohort agent gpu-c: hello")).toBe("cohort agent gpu-c: hello")
  })
})

const record = (ranks: ReadonlyArray<number>, what: string, at: number): DeathRecord => ({ ranks, what, at, cause: "host_lost", secondary: false })

describe("a lost host in the verdict: the host and the cause once", () => {
  const why = "its ssh session ended with signal SIGKILL"
  test("its ranks' deaths, given up together then ended one by one, are one", () => {
    const history = [
      record([2, 3], `rank(s) 2, 3 lost: host gpu-b lost (${why})`, 100),
      record([2], `rank 2 of gpu-b exited with crash: host gpu-b lost (${why})`, 300),
      record([3], `rank 3 of gpu-b exited with crash: host gpu-b lost (${why})`, 500)
    ]
    expect(chainText(history, history[0], [])).toBe(`; root cause: host gpu-b lost with ranks 2, 3 (${why})`)
  })

  test("another death stays in its place; two hosts, or one host's two causes, are not one", () => {
    const history = [
      { ...record([0], "rank 0 of gpu-a exited with status 3 (KeyError: 'x')", 50), cause: "exit" as const },
      record([2], `rank 2 of gpu-b exited with crash: host gpu-b lost (${why})`, 100),
      record([4], "rank 4 of gpu-c exited with crash: host gpu-c lost (the peer closed the connection)", 150),
      record([3], `rank 3 of gpu-b exited with crash: host gpu-b lost (${why})`, 200),
      record([5], "rank 5 of gpu-c exited with crash: host gpu-c lost (its agent ended with status 1: bind (port 29500) refused)", 250),
      record([6], "rank 6 of gpu-c exited with crash: host gpu-c lost (its agent ended with status 1: bind (port 29500) refused)", 260)
    ]
    expect(chainText(history, history[0], [])).toBe(
      "; root cause: rank 0 of gpu-a exited with status 3 (KeyError: 'x'); other deaths: " +
        `host gpu-b lost with ranks 2, 3 (${why}); host gpu-c lost with rank 4 (the peer closed the connection); ` +
        "host gpu-c lost with ranks 5, 6 (its agent ended with status 1: bind (port 29500) refused)"
    )
  })

  test("a death that only happened on a lost host (a rule's, an echo) is not taken for its loss", () => {
    expect(sayHostsOnce([
      { ranks: [2], what: `rank 2 of gpu-b exited with crash: host gpu-b lost (${why}) (rule spot)` },
      { ranks: [3], what: "rank 3 of gpu-b exited with status 1" }
    ]).map((death) => death.what)).toEqual([`rank 2 of gpu-b exited with crash: host gpu-b lost (${why}) (rule spot)`, "rank 3 of gpu-b exited with status 1"])
  })

  test("a DEGRADED verdict names the losses the policy counted without reporting them: a silent rank, a lost host's", () => {
    const ranks = [0, 1, 2, 3, 4].map((rank) => ({ rank, state: rank === 0 ? "exited" as const : "dead" as const }))
    const view = {
      ranks: [...ranks, { rank: 5, state: "running" as const }].map((rank) => rank as unknown as RunView.RankStatus),
      deaths: [
        { rank: 1, host: "a", cause: "rank 1 of a went silent: no heartbeat for 2.0 s", at: 10, kind: "heartbeat" },
        { rank: 2, host: "b", cause: `rank 2 of b lost: host b lost (${why})`, at: 20, kind: "host_lost" },
        { rank: 3, host: "b", cause: `rank 3 of b lost: host b lost (${why})`, at: 20, kind: "host_lost" },
        // Reported by the policy: said once, as membership has it.
        { rank: 4, host: "a", cause: "rank 4 of a exited with status 3", at: 30, kind: "exit" },
        // Given up, then restarted: not lost.
        { rank: 5, host: "a", cause: "rank 5 of a went silent: no heartbeat for 2.0 s", at: 40, kind: "heartbeat" }
      ]
    }
    expect(lossesToSay([{ ranks: [4], cause: "rank 4 of a exited with status 3" }], { ...view, hosts: [] })).toEqual([
      { ranks: [4], cause: "rank 4 of a exited with status 3" },
      { ranks: [1], cause: "rank 1 of a went silent: no heartbeat for 2.0 s" },
      { ranks: [2, 3], cause: `host b lost with ranks 2, 3 (${why})` }
    ])
    expect(lossesToSay([], undefined)).toEqual([])
    // Its ranks went with its link, its session said why after: the host's reason is the one said.
    const linkEnded = view.deaths.map((death) => ({ ...death, cause: death.cause.replace(why, "the peer closed the connection") }))
    const hosts = [{ host: "a", declaredRanks: 3, state: "joined" as const, reason: null }, { host: "b", declaredRanks: 2, state: "gone" as const, reason: "its agent ended with signal SIGKILL" }]
    expect(lossesToSay([], { ...view, deaths: linkEnded, hosts })).toEqual([
      { ranks: [1], cause: "rank 1 of a went silent: no heartbeat for 2.0 s" },
      { ranks: [2, 3], cause: "host b lost with ranks 2, 3 (its agent ended with signal SIGKILL)" },
      { ranks: [4], cause: "rank 4 of a exited with status 3" }
    ])
  })
})

describe("the exit cell: the cause, short", () => {
  const deaths = [
    { rank: 1, cause: "rank 1 of a went silent: no heartbeat for 2.0 s", kind: "heartbeat" },
    { rank: 2, cause: "rank 2 of b lost: host b lost (its ssh session ended with signal SIGKILL)", kind: "host_lost" }
  ]
  test("a lost host's rank says host lost; a silent one how long; every other its end", () => {
    const long = "crash: host 127.0.0.1 lost (its ssh session ended with signal SIGKILL)"
    expect([
      exitCell({ rank: 3, state: "dead", exit: long }, deaths),
      exitCell({ rank: 2, state: "dead", exit: "signal SIGTERM" }, deaths),
      exitCell({ rank: 1, state: "dead", exit: "signal SIGKILL" }, deaths),
      exitCell({ rank: 1, state: "dead", exit: "signal SIGKILL" }, [{ rank: 1, cause: "rank 1 silent", kind: "heartbeat" }]),
      // Restarted and running again: its earlier silence is history.
      exitCell({ rank: 1, state: "running", exit: "signal SIGKILL" }, deaths),
      exitCell({ rank: 0, state: "dead", exit: "status 3" }, deaths),
      exitCell({ rank: 0, state: "running", exit: null }, deaths)
    ]).toEqual(["host lost", "host lost", "silent for 2.0 s", "silent", "signal SIGKILL", "status 3", null])
  })

  test("the end-of-run table of a lost host's ranks and a frozen one", () => {
    const events: ReadonlyArray<RunView.RunEvent> = [
      { event: "run_started", at: 0, run: "t", hosts: [{ host: "a", ranks: 2 }, { host: "127.0.0.1", ranks: 2 }] },
      {
        event: "world_formed",
        at: 40,
        world: 4,
        hosts: [{ host: "a", ranks: [0, 1], devices: ["cpu", "cpu"], labels: ["cpu", "cpu"] }, { host: "127.0.0.1", ranks: [2, 3], devices: ["cpu", "cpu"], labels: ["cpu", "cpu"] }]
      },
      ...[0, 1, 2, 3].map((rank) => ({ event: "rank_started" as const, at: 1_000, rank, pid: 10 + rank })),
      { event: "rank_lost", at: 3_000, ranks: [1], cause: "rank 1 of a went silent: no heartbeat for 5.0 s", kind: "heartbeat", diedAt: 2_000 },
      { event: "rank_exited", at: 3_010, rank: 1, exit: "signal SIGKILL", clean: false },
      { event: "rank_lost", at: 4_000, ranks: [2], cause: "rank 2 of 127.0.0.1 lost: host 127.0.0.1 lost (its ssh session ended with signal SIGKILL)", kind: "host_lost" },
      { event: "rank_lost", at: 4_000, ranks: [3], cause: "rank 3 of 127.0.0.1 lost: host 127.0.0.1 lost (its ssh session ended with signal SIGKILL)", kind: "host_lost" },
      ...[2, 3].map((rank) => ({ event: "rank_exited" as const, at: 4_200, rank, exit: "crash: host 127.0.0.1 lost (its ssh session ended with signal SIGKILL)", clean: false })),
      { event: "rank_exited", at: 9_000, rank: 0, exit: "status 0", clean: true }
    ]
    const table = summaryTable(events.reduce(RunView.apply, RunView.initial("t", 0))).split("\n")
    expect(table.slice(1, 6)).toEqual([
      "host       rank  device  exit              restarts  run time",
      "127.0.0.1     2  cpu     host lost                0     3.2 s",
      "127.0.0.1     3  cpu     host lost                0     3.2 s",
      "a             0  cpu     0                        0     8.0 s",
      "a             1  cpu     silent for 5.0 s         0     2.0 s"
    ])
  })
})
