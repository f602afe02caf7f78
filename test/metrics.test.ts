/**
 * `/metrics` text: what was measured has a sample; what was not (no join
 * window yet, no samples/s before the second progress report, a GPU that
 * cannot tell its utilisation, as a MIG slice cannot) has no line for that
 * series, never a 0 that reads as a measurement. The families' # HELP and
 * # TYPE lines stay (a family with no sample is valid text 0.0.4). Expected
 * texts are written out here, never computed.
 */
import { describe, expect, test } from "bun:test"
import * as Metrics from "../src/launcher/view/Metrics.ts"
import type { RankStatus, RunState } from "../src/launcher/view/RunView.ts"

const waiting: RunState = {
  run: "demo",
  phase: "waiting",
  startedAt: 0,
  updatedAt: 0,
  world: 2,
  joinedRanks: 0,
  joinedHosts: 0,
  windowRemainingMs: null,
  capRemainingMs: null,
  hosts: [],
  ranks: [],
  deaths: [],
  training: null,
  throughput: [],
  verdict: null,
  joinedAfterFormation: 0,
  worldSizes: []
}

const rank = (number: number, device: string, gpuMemoryBytes: number | null, gpuUtilization: number | null): RankStatus => ({
  rank: number,
  host: "gpu1",
  device,
  pid: 100 + number,
  state: "running",
  exit: null,
  restarts: 0,
  startedAt: 1,
  endedAt: null,
  resources: { cpu: 1.5, rssBytes: 2048, gpuMemoryBytes, gpuUtilization, at: 5 }
})

const training = (samplesPerSec: number | null, windowRemainingMs: number | null): RunState => ({
  ...waiting,
  phase: "training",
  joinedRanks: 2,
  joinedHosts: 1,
  windowRemainingMs,
  capRemainingMs: windowRemainingMs,
  // Rank 0 a whole GPU; rank 1 a MIG slice: memory known, utilisation not.
  ranks: [rank(0, "0", 4096, 0.75), rank(1, "1", 1024, null)],
  training: { epoch: 1, epochs: 3, samplesDone: 300, datasetSize: 900, samplesPerSec, metrics: { loss: 0.5 } }
})

/** A Python or command job's: its ranks do not time their all-reduce calls. */
const noLatency = Metrics.latencyHistogram(false)
/** An entry: job's, before any reduction was reported: a measured histogram of none. */
const entryLatency = Metrics.latencyHistogram()
entryLatency.measuredByRanks(true)

const header = (window: string) => `# HELP cohort_world_size Ranks in the world (declared until it forms; every rank the run has had once it grows).
# TYPE cohort_world_size gauge
cohort_world_size{run="demo"} 2
# HELP cohort_ranks_joined_after_formation_total Ranks admitted after the cohort formed (elastic growth).
# TYPE cohort_ranks_joined_after_formation_total counter
cohort_ranks_joined_after_formation_total{run="demo"} 0
# HELP cohort_phase 1 for the run's current phase.
# TYPE cohort_phase gauge
cohort_phase{run="demo",phase="waiting"} 0
cohort_phase{run="demo",phase="forming"} 0
cohort_phase{run="demo",phase="training"} 1
cohort_phase{run="demo",phase="done"} 0
cohort_phase{run="demo",phase="failed"} 0
# HELP cohort_ranks Ranks by state.
# TYPE cohort_ranks gauge
cohort_ranks{run="demo",state="starting"} 0
cohort_ranks{run="demo",state="running"} 2
cohort_ranks{run="demo",state="exited"} 0
cohort_ranks{run="demo",state="dead"} 0
# HELP cohort_joined_ranks Ranks admitted by the join window.
# TYPE cohort_joined_ranks gauge
cohort_joined_ranks{run="demo"} 2
# HELP cohort_joined_hosts Hosts admitted by the join window.
# TYPE cohort_joined_hosts gauge
cohort_joined_hosts{run="demo"} 1
# HELP cohort_join_window_remaining_seconds Time left in the join window while the run waits for its world; 0 once the world formed.
# TYPE cohort_join_window_remaining_seconds gauge
${window}# HELP cohort_deaths_total Ranks lost.
# TYPE cohort_deaths_total counter
cohort_deaths_total{run="demo"} 0
# HELP cohort_restarts_total Rank restarts.
# TYPE cohort_restarts_total counter
cohort_restarts_total{run="demo"} 0
${noFailures}`

/** A histogram with nothing in it, bucket by bucket (the failure figures' bounds, 5 ms to 5 min). */
const emptyHistogram = (name: string, help: string) =>
  `# HELP ${name} ${help}\n# TYPE ${name} histogram\n` +
  ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "120", "300", "+Inf"]
    .map((bound) => `${name}_bucket{run="demo",le="${bound}"} 0\n`).join("") +
  `${name}_sum{run="demo"} 0\n${name}_count{run="demo"} 0\n`

/** The recovery figures of a run that lost nobody: empty histograms, no rule matched, no ETTR yet (no wall time). */
const noFailures = emptyHistogram("cohort_failure_detect_seconds", "From a death (its exit, a silent rank's last beat) to cohort knowing it.") +
  emptyHistogram("cohort_failure_recover_seconds", "From a death to the survivors holding its work, or its restart running user code again.") +
  `# HELP cohort_failure_rule_matches_total Deaths a failure rule decided, whatever its action, by rule.
# TYPE cohort_failure_rule_matches_total counter
# HELP cohort_effective_training_ratio Time with every rank alive, plus time with fewer weighted by the share alive, over the run's wall time.
# TYPE cohort_effective_training_ratio gauge
`

const epoch = (rate: string) => `# HELP cohort_epoch The current epoch.
# TYPE cohort_epoch gauge
cohort_epoch{run="demo"} 1
# HELP cohort_epoch_samples_done Samples done in the current epoch.
# TYPE cohort_epoch_samples_done gauge
cohort_epoch_samples_done{run="demo"} 300
# HELP cohort_samples_per_second Samples per second across ranks.
# TYPE cohort_samples_per_second gauge
${rate}# HELP cohort_metric The ranks' reported metrics, averaged.
# TYPE cohort_metric gauge
cohort_metric{run="demo",name="loss"} 0.5
`

const wire = `# HELP cohort_frames_total Frames through the launcher's links.
# TYPE cohort_frames_total counter
# HELP cohort_bytes_total Bytes through the launcher's links (framing included).
# TYPE cohort_bytes_total counter
`

/** A Python or command job: the family left out, and why, on a comment line. */
const latencyNotMeasured =
  "# cohort_allreduce_latency_seconds: not measured for this job (its ranks are python/command ranks, whose all-reduce calls cohort does not time)\n"

const wireAndLatency = `${wire}# HELP cohort_allreduce_latency_seconds Latency of the ranks' all-reduce calls, as they measure it.
# TYPE cohort_allreduce_latency_seconds histogram
cohort_allreduce_latency_seconds_bucket{run="demo",le="0.0005"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="0.001"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="0.0025"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="0.005"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="0.01"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="0.025"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="0.05"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="0.1"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="0.25"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="0.5"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="1"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="2.5"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="5"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="10"} 0
cohort_allreduce_latency_seconds_bucket{run="demo",le="+Inf"} 0
cohort_allreduce_latency_seconds_sum{run="demo"} 0
cohort_allreduce_latency_seconds_count{run="demo"} 0
`

const resources = (utilization: string) => `# HELP cohort_rank_cpu_ratio A rank's CPU use in cores, over the agent's last sampling interval.
# TYPE cohort_rank_cpu_ratio gauge
cohort_rank_cpu_ratio{run="demo",rank="0",host="gpu1",device="0"} 1.5
cohort_rank_cpu_ratio{run="demo",rank="1",host="gpu1",device="1"} 1.5
# HELP cohort_rank_resident_memory_bytes A rank's resident set size.
# TYPE cohort_rank_resident_memory_bytes gauge
cohort_rank_resident_memory_bytes{run="demo",rank="0",host="gpu1",device="0"} 2048
cohort_rank_resident_memory_bytes{run="demo",rank="1",host="gpu1",device="1"} 2048
# HELP cohort_rank_gpu_memory_bytes Memory in use on a rank's GPU.
# TYPE cohort_rank_gpu_memory_bytes gauge
cohort_rank_gpu_memory_bytes{run="demo",rank="0",host="gpu1",device="0"} 4096
cohort_rank_gpu_memory_bytes{run="demo",rank="1",host="gpu1",device="1"} 1024
# HELP cohort_rank_gpu_utilization_ratio A rank's GPU utilisation (0-1).
# TYPE cohort_rank_gpu_utilization_ratio gauge
${utilization}`

describe("/metrics prints no sample for what was not measured", () => {
  test("measured (an entry: job): samples/s, the all-reduce histogram and the whole GPU's utilisation have their samples; the MIG slice's utilisation has none", () => {
    expect(Metrics.render(training(600, 12_500), entryLatency, new Map())).toBe(
      // Formed: the window is closed, whatever it had left when the world formed.
      header(`cohort_join_window_remaining_seconds{run="demo"} 0\n`) +
        epoch(`cohort_samples_per_second{run="demo"} 600\n`) +
        wireAndLatency +
        resources(`cohort_rank_gpu_utilization_ratio{run="demo",rank="0",host="gpu1",device="0"} 0.75\n`)
    )
  })

  test("not measured (a Python job): no samples/s yet prints no sample; the all-reduce histogram is left out, said on a comment line", () => {
    expect(Metrics.render(training(null, null), noLatency, new Map())).toBe(
      header(`cohort_join_window_remaining_seconds{run="demo"} 0\n`) + epoch("") + wire + latencyNotMeasured +
        resources(`cohort_rank_gpu_utilization_ratio{run="demo",rank="0",host="gpu1",device="0"} 0.75\n`)
    )
  })

  test("the join window's gauge: its time left while the run waits, no sample before its first countdown, 0 once the world formed", () => {
    const cases: ReadonlyArray<readonly [RunState["phase"], number | null, string]> = [
      ["waiting", 12_500, `cohort_join_window_remaining_seconds{run="demo"} 12.5\n`],
      ["waiting", 0, `cohort_join_window_remaining_seconds{run="demo"} 0\n`],
      ["waiting", null, ""],
      // The trial's reading: 59.994 s frozen at formation, shown mid-training as if the window were open.
      ["forming", 59_994, `cohort_join_window_remaining_seconds{run="demo"} 0\n`],
      ["training", 59_994, `cohort_join_window_remaining_seconds{run="demo"} 0\n`],
      ["done", 59_994, `cohort_join_window_remaining_seconds{run="demo"} 0\n`],
      ["failed", null, `cohort_join_window_remaining_seconds{run="demo"} 0\n`]
    ]
    for (const [phase, windowRemainingMs, line] of cases) {
      const text = Metrics.render({ ...training(600, windowRemainingMs), phase }, noLatency, new Map())
      const family = text.split("# TYPE cohort_join_window_remaining_seconds gauge\n")[1]!.split("# HELP cohort_deaths_total")[0]
      expect([phase, windowRemainingMs, family]).toEqual([phase, windowRemainingMs, line])
    }
  })

  test("before the job's kind is said: the histogram of no calls while the run waits and forms, left out once it trains", () => {
    const cases: ReadonlyArray<readonly [RunState["phase"], boolean]> = [["waiting", true], ["forming", true], ["training", false], ["done", false], ["failed", false]]
    for (const [phase, histogram] of cases) {
      const text = Metrics.render({ ...training(600, null), phase }, Metrics.latencyHistogram(), new Map())
      expect([phase, text.includes('\ncohort_allreduce_latency_seconds_count{run="demo"} 0\n'), text.includes(latencyNotMeasured)]).toEqual([phase, histogram, !histogram])
    }
  })

  test("an entry: job's reported latencies: cumulative buckets, their sum and count", () => {
    // Said by the reports alone: a call reported is a measurement, whatever was said of the job.
    const latency = Metrics.latencyHistogram(false)
    // 3 calls under 0.5 ms, 1 under 2.5 ms, 1 over 10 s: bucket by bucket (not cumulative), then the sum.
    latency.add({ counts: [3, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], sum: 12.5 })
    const text = Metrics.render(training(600, null), latency, new Map())
    expect(text).toContain(
      'cohort_allreduce_latency_seconds_bucket{run="demo",le="0.001"} 3\ncohort_allreduce_latency_seconds_bucket{run="demo",le="0.0025"} 4\n'
    )
    expect(text).toContain(
      'cohort_allreduce_latency_seconds_bucket{run="demo",le="10"} 4\ncohort_allreduce_latency_seconds_bucket{run="demo",le="+Inf"} 5\n' +
        'cohort_allreduce_latency_seconds_sum{run="demo"} 12.5\ncohort_allreduce_latency_seconds_count{run="demo"} 5\n'
    )
    expect(text).not.toContain("not measured")
  })

  test("each rank's own metrics, by rank and name (names escaped); a rank that reported none has no line", () => {
    const state: RunState = {
      ...training(600, null),
      ranks: [
        { ...rank(0, "0", null, null), resources: null, metrics: { loss: 0.25, val_acc: 0.875 } },
        { ...rank(1, "1", null, null), resources: null, metrics: { "top\"5\"": 1 } },
        { ...rank(2, "2", null, null), resources: null }
      ]
    }
    expect(Metrics.render(state, noLatency, new Map()).split(latencyNotMeasured)[1]).toBe(`# HELP cohort_rank_metric A rank's latest reported metric (ctx.progress), by name.
# TYPE cohort_rank_metric gauge
cohort_rank_metric{run="demo",rank="0",name="loss"} 0.25
cohort_rank_metric{run="demo",rank="0",name="val_acc"} 0.875
cohort_rank_metric{run="demo",rank="1",name="top\\"5\\""} 1
`)
  })

  test("a measured zero is still printed: a join window closed at 0 s left, 0 samples/s, an idle GPU", () => {
    const idle: RunState = { ...training(0, 0), ranks: [rank(0, "0", 4096, 0)] }
    const text = Metrics.render(idle, noLatency, new Map())
    expect(text).toContain(`\ncohort_join_window_remaining_seconds{run="demo"} 0\n`)
    expect(text).toContain(`\ncohort_samples_per_second{run="demo"} 0\n`)
    expect(text).toContain(`\ncohort_rank_gpu_utilization_ratio{run="demo",rank="0",host="gpu1",device="0"} 0\n`)
  })

  test("no rank reports a GPU utilisation: the family's HELP and TYPE, no sample", () => {
    const mig: RunState = { ...training(600, 12_500), ranks: [rank(1, "1", 1024, null)] }
    expect(Metrics.render(mig, noLatency, new Map()).split("# HELP cohort_rank_gpu_memory_bytes")[1]).toBe(` Memory in use on a rank's GPU.
# TYPE cohort_rank_gpu_memory_bytes gauge
cohort_rank_gpu_memory_bytes{run="demo",rank="1",host="gpu1",device="1"} 1024
# HELP cohort_rank_gpu_utilization_ratio A rank's GPU utilisation (0-1).
# TYPE cohort_rank_gpu_utilization_ratio gauge
`)
  })

  test("restarts: a seat restarted twice under new numbers is 2, not the sum over the numbers it ran as", () => {
    const history: RunState = {
      ...training(600, 12_500),
      ranks: [
        { ...rank(1, "1", null, null), state: "dead", restarts: 0, replacedBy: 3 },
        { ...rank(3, "1", null, null), state: "dead", restarts: 1, replacedBy: 4 },
        { ...rank(4, "1", null, null), restarts: 2 },
        { ...rank(0, "0", null, null), restarts: 1 }
      ]
    }
    expect(Metrics.render(history, noLatency, new Map())).toContain('\ncohort_restarts_total{run="demo"} 3\n')
  })
})

describe("the failure figures in /metrics", () => {
  test("each rule's matches, its name escaped as a label; the ETTR over the run's wall time; a death's times in their buckets", () => {
    const state: RunState = {
      ...training(600, 12_500),
      startedAt: 0,
      updatedAt: 100_000,
      endedAt: 100_000,
      // Formed at 10 s with 2 ranks, one lost at 50 s: (40 + 50 × 0.5) / 100 = 0.65.
      worldSizes: [{ at: 10_000, ranks: 2, alive: 2 }, { at: 50_000, ranks: 2, alive: 1 }],
      ruleMatches: { "user-bug": 2, "say \"hi\"": 1 },
      recovery: {
        deaths: [{ rank: 1, kind: "signal", rule: null, how: "dropped", diedAt: 49_980, knownAt: 50_000, recoveredAt: 50_300 }],
        replacing: {},
        seats: [{ at: 10_000, seats: 2 }]
      }
    }
    const text = Metrics.render(state, noLatency, new Map())
    expect(text).toContain('\ncohort_failure_rule_matches_total{run="demo",rule="user-bug"} 2\ncohort_failure_rule_matches_total{run="demo",rule="say \\"hi\\""} 1\n')
    expect(text).toContain('\ncohort_effective_training_ratio{run="demo"} 0.65\n')
    // 20 ms to detect: not under 10 ms, under 25 ms; 320 ms to recover: under 0.5 s, not 0.25 s.
    expect(text).toContain('cohort_failure_detect_seconds_bucket{run="demo",le="0.01"} 0\ncohort_failure_detect_seconds_bucket{run="demo",le="0.025"} 1\n')
    expect(text).toContain('cohort_failure_recover_seconds_bucket{run="demo",le="0.25"} 0\ncohort_failure_recover_seconds_bucket{run="demo",le="0.5"} 1\n')
    expect(text).toContain('\ncohort_failure_detect_seconds_sum{run="demo"} 0.02\ncohort_failure_detect_seconds_count{run="demo"} 1\n')
  })
})
