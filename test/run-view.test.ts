/**
 * RunView: a run's story, event by event, and the state each step leaves.
 */
import { describe, expect, test } from "bun:test"
import * as Either from "effect/Either"
import { decodeRunState } from "../src/launcher/view/RunStateSchema.ts"
import * as RunView from "../src/launcher/view/RunView.ts"

const story: ReadonlyArray<RunView.RunEvent> = [
  { event: "run_started", at: 1_000, run: "demo", hosts: [{ host: "a", ranks: 2 }, { host: "b", ranks: 1 }] },
  { event: "listening", at: 1_001, address: "0.0.0.0", port: 4000 },
  { event: "join_window", at: 1_002, windowRemainingMs: 30_000, capRemainingMs: 60_000 },
  { event: "host_joined", at: 1_100, host: "a", ranks: [0, 1] },
  { event: "join_rejected", at: 1_150, peer: "10.0.0.9:5000", reason: "host c is not among the workers" },
  { event: "join_window", at: 1_502, windowRemainingMs: 29_500, capRemainingMs: 59_500 },
  { event: "host_joined", at: 1_600, host: "b", ranks: [2] },
  { event: "world_formed", at: 1_601, world: 3, hosts: [{ host: "a", ranks: [0, 1], devices: ["0", "1"], labels: ["NVIDIA H200", "NVIDIA H200"] }, { host: "b", ranks: [2], devices: ["cpu"], labels: ["cpu"] }] },
  { event: "phase", at: 1_601, phase: "forming" },
  { event: "rank_started", at: 1_650, rank: 0, pid: 100 },
  { event: "rank_started", at: 1_651, rank: 1, pid: 101 },
  { event: "rank_started", at: 1_652, rank: 2, pid: 200 },
  { event: "cohort_formed", at: 1_700 },
  { event: "phase", at: 1_700, phase: "training" },
  { event: "progress", at: 2_000, epoch: 1, epochs: 2, samplesDone: 300, datasetSize: 900, samplesPerSec: null, metrics: { loss: 1 } },
  { event: "progress", at: 2_500, epoch: 1, epochs: 2, samplesDone: 600, datasetSize: 900, samplesPerSec: 600, metrics: { loss: 0.5 } },
  { event: "resources", at: 2_600, host: "b", samples: [{ rank: 2, cpu: 0.9, rssBytes: 1 << 20, gpuMemoryBytes: null, gpuUtilization: null }] },
  // A host may only speak for its own ranks: this sample names a rank of host a.
  { event: "resources", at: 2_601, host: "b", samples: [{ rank: 0, cpu: 5, rssBytes: 1, gpuMemoryBytes: null, gpuUtilization: null }] },
  { event: "rank_exited", at: 2_700, rank: 1, exit: "signal SIGKILL", clean: false },
  { event: "rank_lost", at: 2_701, ranks: [1], cause: "exited with signal SIGKILL" },
  { event: "decision", at: 2_701, decision: "Note", detail: "continuing with 2 of 3 ranks" },
  { event: "epoch_done", at: 3_000, epoch: 1, epochs: 2, seconds: 1.3, samples: 900, metrics: { loss: 0.4 } },
  { event: "checkpoint", at: 3_001, epoch: 1, path: "/tmp/c.json", reason: "checkpoint" },
  { event: "host_gone", at: 3_500, host: "b", reason: "none of its ranks has beaten for 2000 ms" },
  { event: "rank_exited", at: 4_000, rank: 0, exit: "status 0", clean: true },
  { event: "phase", at: 4_010, phase: "done" },
  { event: "verdict", at: 4_010, outcome: "degraded", exitCode: 0, summary: "run completed DEGRADED: 1 of 3 rank(s) lost" }
]

const replay = (events: ReadonlyArray<RunView.RunEvent>) => events.reduce(RunView.apply, RunView.initial("demo", 0))

describe("RunView", () => {
  test("each rank's own metrics: a report replaces the rank's last one whole; others keep theirs; /state.json gives them back", () => {
    const training = replay(story.slice(0, 18))
    const once = RunView.apply(training, { event: "rank_metrics", at: 2_550, ranks: [{ rank: 0, metrics: { loss: 0.5, val_acc: 0.75 } }, { rank: 2, metrics: { loss: 0.25 } }] })
    const twice = RunView.apply(once, { event: "rank_metrics", at: 3_050, ranks: [{ rank: 0, metrics: { val_acc: 0.875 } }] })
    expect(twice.ranks.map((rank) => [rank.rank, rank.metrics])).toEqual([[0, { val_acc: 0.875 }], [1, undefined], [2, { loss: 0.25 }]])
    // A rank's metrics go out as JSON and come back decoded (a NaN as JSON's null, read back as NaN).
    const served = JSON.parse(JSON.stringify(RunView.apply(twice, { event: "rank_metrics", at: 3_100, ranks: [{ rank: 1, metrics: { loss: Number.NaN } }] })))
    const decoded = decodeRunState(served)
    expect(Either.isRight(decoded)).toBe(true)
    if (Either.isRight(decoded)) expect(decoded.right.ranks.map((rank) => [rank.rank, rank.metrics])).toEqual([[0, { val_acc: 0.875 }], [1, { loss: Number.NaN }], [2, { loss: 0.25 }]])
    // Too frequent for the events file, like progress.
    expect(RunView.isEphemeral({ event: "rank_metrics", at: 1, ranks: [] })).toBe(true)
  })

  test("the join window: declared hosts, who joined, the countdown while waiting", () => {
    const waiting = replay(story.slice(0, 7))
    expect(waiting).toMatchObject({ phase: "waiting", world: 3, joinedRanks: 3, joinedHosts: 2, windowRemainingMs: 29_500, capRemainingMs: 59_500 })
    expect(waiting.hosts).toEqual([
      { host: "a", declaredRanks: 2, state: "joined", reason: null },
      { host: "b", declaredRanks: 1, state: "joined", reason: null }
    ])
    expect(replay(story.slice(0, 4)).joinedHosts).toBe(1)
  })

  test("formation lists every rank with its host and device; starts give pids; the countdown freezes", () => {
    const formed = replay(story.slice(0, 12))
    expect(formed.phase).toBe("forming")
    expect(formed.ranks.map((rank) => [rank.rank, rank.host, rank.device, rank.pid, rank.state])).toEqual([
      [0, "a", "0", 100, "running"],
      [1, "a", "1", 101, "running"],
      [2, "b", "cpu", 200, "running"]
    ])
    const later = RunView.apply(replay(story.slice(0, 14)), { event: "join_window", at: 1_800, windowRemainingMs: 1, capRemainingMs: 1 })
    expect(later.windowRemainingMs).toBe(29_500)
  })

  test("the cohort's inventory: none before formation, then each host's devices as its agent named them, with their ranks", () => {
    expect(replay(story.slice(0, 7)).inventory).toEqual([])
    const a = { host: "a", devices: [{ device: "0", label: "NVIDIA H200", ranks: [0] }, { device: "1", label: "NVIDIA H200", ranks: [1] }] }
    const b = { host: "b", devices: [{ device: "cpu", label: "cpu", ranks: [2] }] }
    expect(replay(story.slice(0, 8)).inventory).toEqual([a, b])
    // Rank 1 restarts as 3, then as 4, on GPU 1 of a; host c joins late with two CPU slots.
    const grown = replay([
      ...story.slice(0, 12),
      { event: "world_grew", at: 2_100, world: 4, host: "a", ranks: [3], devices: ["1"], labels: ["NVIDIA H200"], replaces: 1 },
      { event: "world_grew", at: 2_600, world: 5, host: "a", ranks: [4], devices: ["1"], labels: ["NVIDIA H200"], replaces: 3 },
      { event: "world_grew", at: 2_700, world: 7, host: "c", ranks: [5, 6], devices: ["cpu", "cpu"], labels: ["cpu", "cpu"] }
    ])
    expect(grown.inventory).toEqual([
      { host: "a", devices: [{ device: "0", label: "NVIDIA H200", ranks: [0] }, { device: "1", label: "NVIDIA H200", ranks: [1, 3, 4] }] },
      b,
      { host: "c", devices: [{ device: "cpu", label: "cpu", ranks: [5] }, { device: "cpu", label: "cpu", ranks: [6] }] }
    ])
  })

  test("training: progress, throughput points, and resource samples only for the host's own ranks", () => {
    const training = replay(story.slice(0, 18))
    expect(training.phase).toBe("training")
    expect(training.training).toEqual({ epoch: 1, epochs: 2, samplesDone: 600, datasetSize: 900, samplesPerSec: 600, metrics: { loss: 0.5 } })
    expect(training.throughput).toEqual([{ at: 2_500, samplesPerSec: 600 }])
    expect(training.ranks[2]!.resources).toEqual({ cpu: 0.9, rssBytes: 1 << 20, gpuMemoryBytes: null, gpuUtilization: null, at: 2_600 })
    expect(training.ranks[0]!.resources).toBeNull()
  })

  test("a death: the rank is dead with its exit, the death is listed with its cause; a host gone keeps its reason", () => {
    const end = replay(story)
    expect(end.ranks[1]).toMatchObject({ state: "dead", exit: "signal SIGKILL", endedAt: 2_700 })
    expect(end.deaths).toEqual([{ rank: 1, host: "a", cause: "exited with signal SIGKILL", at: 2_701, kind: null, rule: null }])
    // A death a failure rule decided keeps its cause's name and the rule's.
    const ruled = RunView.apply(end, { event: "rank_lost", at: 2_800, ranks: [0], cause: "rank 0 exited with signal SIGKILL (the OOM killer) (rule memory)", kind: "oom", rule: "memory" })
    expect(ruled.deaths.at(-1)).toEqual({ rank: 0, host: "a", cause: "rank 0 exited with signal SIGKILL (the OOM killer) (rule memory)", at: 2_800, kind: "oom", rule: "memory" })
    expect(end.hosts[1]).toEqual({ host: "b", declaredRanks: 1, state: "gone", reason: "none of its ranks has beaten for 2000 ms" })
    expect(end.ranks[0]).toMatchObject({ state: "exited", exit: "status 0" })
    expect(end).toMatchObject({ phase: "done", verdict: "run completed DEGRADED: 1 of 3 rank(s) lost", updatedAt: 4_010 })
    expect(end.training).toMatchObject({ epoch: 1, samplesDone: 900, metrics: { loss: 0.4 } })
  })

  test("growth: a late host's ranks are listed after the others, the world grows, and its size is kept over time", () => {
    const formed = replay(story.slice(0, 12))
    const grown = replay([
      ...story.slice(0, 12),
      { event: "host_joined", at: 1_800, host: "c", ranks: [3, 4] },
      { event: "world_grew", at: 1_801, world: 5, host: "c", ranks: [3, 4], devices: ["cpu", "cpu"], labels: ["cpu", "cpu"] },
      { event: "ranks_entered", at: 2_900, ranks: [3, 4], epoch: 2 },
      { event: "rank_lost", at: 3_000, ranks: [1], cause: "exited with signal SIGKILL" }
    ])
    expect(formed.worldSizes).toEqual([{ at: 1_601, ranks: 3, alive: 3 }])
    expect(grown.world).toBe(5)
    expect(grown.joinedAfterFormation).toBe(2)
    expect(grown.ranks.map((rank) => [rank.rank, rank.host, rank.state])).toEqual([[0, "a", "running"], [1, "a", "dead"], [2, "b", "running"], [3, "c", "starting"], [4, "c", "starting"]])
    expect(grown.worldSizes).toEqual([{ at: 1_601, ranks: 3, alive: 3 }, { at: 1_801, ranks: 5, alive: 5 }, { at: 3_000, ranks: 5, alive: 4 }])
    // The late ranks are found by index like the others: a start moves the right one.
    expect(RunView.apply(grown, { event: "rank_started", at: 3_100, rank: 4, pid: 400 }).ranks[4]).toMatchObject({ rank: 4, pid: 400, state: "running" })
  })

  test("a restart counts, and the new incarnation is running again", () => {
    const restarted = replay([
      ...story.slice(0, 12),
      { event: "rank_exited", at: 2_000, rank: 2, exit: "status 3", clean: false },
      { event: "decision", at: 2_000, decision: "Restart", detail: "restart rank-2 in 500 ms" },
      { event: "rank_started", at: 2_500, rank: 2, pid: 201 }
    ])
    expect(restarted.ranks[2]).toMatchObject({ pid: 201, state: "running", restarts: 1, startedAt: 2_500, endedAt: null })
  })

  test("a restart under a new number is a restart: counted on the new number, not as growth; the old number is history", () => {
    const restarted = replay([
      ...story.slice(0, 12),
      { event: "rank_exited", at: 2_000, rank: 1, exit: "signal SIGKILL", clean: false },
      { event: "world_grew", at: 2_100, world: 4, host: "a", ranks: [3], devices: ["1"], labels: ["NVIDIA H200"], replaces: 1 },
      { event: "rank_started", at: 2_200, rank: 3, pid: 301 },
      { event: "rank_exited", at: 2_500, rank: 3, exit: "status 3", clean: false },
      { event: "world_grew", at: 2_600, world: 5, host: "a", ranks: [4], devices: ["1"], labels: ["NVIDIA H200"], replaces: 3 }
    ])
    expect(restarted.joinedAfterFormation).toBe(0)
    expect(restarted.ranks.map((rank) => [rank.rank, rank.state, rank.restarts, rank.replacedBy])).toEqual([
      [0, "running", 0, undefined],
      [1, "dead", 0, 3],
      [2, "running", 0, undefined],
      [3, "dead", 1, 4],
      [4, "starting", 2, undefined]
    ])
    // A late host is still growth.
    const grown = RunView.apply(restarted, { event: "world_grew", at: 2_700, world: 6, host: "c", ranks: [5], devices: ["cpu"], labels: ["cpu"] })
    expect([grown.joinedAfterFormation, grown.ranks.at(-1)!.restarts]).toEqual([1, 0])
  })

  test("the verdict ends the run at once; the cleanup after it is shown while it lasts, and changes neither phase nor verdict", () => {
    const ended = replay(story)
    const cleaning = RunView.apply(ended, { event: "cleanup_started", at: 4_020, detail: "waiting up to 3 s for 1 agent(s) to leave" })
    expect(ended.cleanup).toBeNull()
    expect(cleaning).toMatchObject({ phase: "done", verdict: "run completed DEGRADED: 1 of 3 rank(s) lost", cleanup: { since: 4_020, detail: "waiting up to 3 s for 1 agent(s) to leave" } })
    const clean = RunView.apply(cleaning, { event: "cleanup_done", at: 6_000 })
    expect(clean).toMatchObject({ phase: "done", verdict: "run completed DEGRADED: 1 of 3 rank(s) lost", cleanup: null, updatedAt: 6_000 })
  })

  test("a failed verdict fails the phase; ephemeral events stay out of the events file", () => {
    const failed = replay([...story.slice(0, 12), { event: "verdict", at: 3_000, outcome: "failed", exitCode: 1, summary: "run failed: max_failure exceeded" }])
    expect(failed.phase).toBe("failed")
    expect(story.filter(RunView.isEphemeral).map((event) => event.event)).toEqual(["join_window", "join_window", "progress", "progress", "resources", "resources"])
  })

  test("the join rule comes with the start; each countdown fixes when the window closes and when the hard cap falls", () => {
    const started = replay([{ event: "run_started", at: 1_000, run: "demo", id: "demo-42", hosts: [{ host: "a", ranks: 2 }], join: { quorum: 2, start: "manual" } }])
    expect([started.joinRule, started.windowClosesAt, started.hardCapAt]).toEqual([{ quorum: 2, start: "manual" }, null, null])
    const counted = RunView.apply(started, { event: "join_window", at: 1_500, windowRemainingMs: 29_000, capRemainingMs: 89_000 })
    expect([counted.windowClosesAt, counted.hardCapAt]).toEqual([30_500, 90_500])
    // A launcher that does not say (an older one): no rule.
    expect(replay(story.slice(0, 1)).joinRule).toBeNull()
  })

  test("an ended rank shows no use: its live sample is cleared (kept as its last), and a sample that arrives after its end is not taken", () => {
    const sampled = replay(story.slice(0, 17))
    const sample = { cpu: 0.9, rssBytes: 1 << 20, gpuMemoryBytes: null, gpuUtilization: null, at: 2_600 }
    expect(sampled.ranks[2]!.resources).toEqual(sample)
    // Rank 2 is lost (its host's link ended, say): no exit came first.
    const lost = RunView.apply(sampled, { event: "rank_lost", at: 2_700, ranks: [2], cause: "host b is gone" })
    expect(lost.ranks[2]).toMatchObject({ state: "dead", resources: null, lastResources: sample })
    // Its agent's last sample, taken before the end, comes after it.
    const late = RunView.apply(lost, { event: "resources", at: 2_800, host: "b", samples: [{ rank: 2, cpu: 0.5, rssBytes: 2, gpuMemoryBytes: null, gpuUtilization: null }] })
    expect(late.ranks[2]).toMatchObject({ resources: null, lastResources: sample })
    // An exit, clean or not, clears it too; a rank that never had a sample has no last one.
    const exited = RunView.apply(sampled, { event: "rank_exited", at: 2_700, rank: 2, exit: "status 0", clean: true })
    expect(exited.ranks[2]).toMatchObject({ state: "exited", resources: null, lastResources: sample })
    const never = RunView.apply(sampled, { event: "rank_exited", at: 2_700, rank: 0, exit: "signal SIGKILL", clean: false })
    expect(never.ranks[0]!.resources).toBeNull()
    expect(never.ranks[0]!.lastResources ?? null).toBeNull()
    // A restart of the same number starts afresh.
    const again = RunView.apply(exited, { event: "rank_started", at: 3_000, rank: 2, pid: 201 })
    expect(again.ranks[2]).toMatchObject({ state: "running", resources: null, lastResources: null })
    const resampled = RunView.apply(again, { event: "resources", at: 3_100, host: "b", samples: [{ rank: 2, cpu: 0.3, rssBytes: 3, gpuMemoryBytes: null, gpuUtilization: null }] })
    expect(resampled.ranks[2]!.resources).toEqual({ cpu: 0.3, rssBytes: 3, gpuMemoryBytes: null, gpuUtilization: null, at: 3_100 })
  })

  test("the throughput series keeps the newest points only", () => {
    let state = replay(story.slice(0, 14))
    for (let i = 0; i < RunView.THROUGHPUT_POINTS + 10; i++) {
      state = RunView.apply(state, { event: "progress", at: 3_000 + i, epoch: 1, epochs: 2, samplesDone: i, datasetSize: 900, samplesPerSec: i, metrics: {} })
    }
    expect(state.throughput).toHaveLength(RunView.THROUGHPUT_POINTS)
    expect(state.throughput.at(-1)).toEqual({ at: 3_000 + RunView.THROUGHPUT_POINTS + 9, samplesPerSec: RunView.THROUGHPUT_POINTS + 9 })
  })
})

test("the effective training ratio is said again at membership changes and training ticks, as of their moment", () => {
  const events: ReadonlyArray<RunView.RunEvent> = [
    { event: "run_started", at: 0, run: "ettr", hosts: [{ host: "a", ranks: 4 }] },
    { event: "world_formed", at: 10, world: 4, hosts: [{ host: "a", ranks: [0, 1, 2, 3], devices: ["cpu", "cpu", "cpu", "cpu"], labels: ["cpu", "cpu", "cpu", "cpu"] }] },
    { event: "rank_lost", at: 50, ranks: [3], cause: "rank 3 exited with signal SIGKILL", kind: "signal", diedAt: 49 }
  ]
  const lost = events.reduce(RunView.apply, RunView.initial("ettr", 0))
  // As of the loss at 50: (50 − 10) × 1 over 50.
  expect(lost.effectiveTraining).toBeCloseTo(40 / 50, 10)
  const ticked = RunView.apply(lost, { event: "progress", at: 100, epoch: 1, epochs: 2, samplesDone: 10, datasetSize: 100, samplesPerSec: 5, metrics: {} })
  // As of 100: 40 + 50 × 3/4 over 100.
  expect(ticked.effectiveTraining).toBeCloseTo(0.775, 10)
  // A host joining says nothing new of it.
  expect(RunView.apply(ticked, { event: "host_joined", at: 120, host: "b", ranks: [] }).effectiveTraining).toBeCloseTo(0.775, 10)
})
