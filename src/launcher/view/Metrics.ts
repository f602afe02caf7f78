/**
 * `GET /metrics`: the run in Prometheus' text format (version 0.0.4), for
 * the monitoring people already run. Everything comes from the RunView, the
 * wire counters and the ranks' all-reduce latencies; nothing is sampled
 * here.
 *
 * What was not measured has no sample: no join window yet, no samples/s
 * before the second progress report, no utilisation from a GPU that cannot
 * tell (a MIG slice) print no line for that series, never a 0 that reads as
 * a measurement. The family's # HELP and # TYPE lines stay: the format only
 * asks that a TYPE line come before the family's first sample, and a family
 * with none is valid (Prometheus' parser reads it as metadata alone).
 *
 * The join window's gauge reads 0 once the world has formed: the window is closed, and a gauge frozen at the
 * seconds it had left (59.994 mid-training) read as a window still open. Growth after formation
 * (`after_formation: accept`) has no window of its own to count down: its ranks are
 * cohort_ranks_joined_after_formation_total.
 *
 * The all-reduce histogram is a TypeScript rank's measurement (an `entry:` job's ranks time their reductions
 * and send them with their progress). A Python or plain command job's ranks reduce through torch, which
 * cohort does not time: for those the family is left out, with a comment line saying so, rather than a
 * histogram whose `_count` of 0 reads as "no reductions". Until the job's kind is said (the training plane
 * says it as the world forms), the histogram of no calls is shown while the run waits and forms.
 */
import { ALLREDUCE_BUCKETS_S, type LatencyCounts } from "../../wire/LatencyBuckets.ts"
import type { ChannelCounts } from "../../wire/WireCounters.ts"
import { effectiveTrainingAt, type RankState, type RunState } from "./RunView.ts"
import * as RecoveryFigures from "./RecoveryFigures.ts"

export interface LatencyHistogram {
  readonly add: (counts: LatencyCounts) => void
  /** Per bucket (not cumulative), then the sum in seconds. */
  readonly counts: () => { readonly counts: ReadonlyArray<number>; readonly sum: number }
  /** Whether the job's ranks time their all-reduce calls (an `entry:` job's do; a Python or command job's do not). */
  readonly measuredByRanks: (measured: boolean) => void
  /** Whether the histogram is a measurement; undefined while no one has said (see `render`). A reported call says yes. */
  readonly measured: () => boolean | undefined
}

/** `measuredByRanks`: whether the job's ranks time their calls, when the caller knows it from the start. */
export const latencyHistogram = (measuredByRanks?: boolean): LatencyHistogram => {
  const totals = new Array<number>(ALLREDUCE_BUCKETS_S.length + 1).fill(0)
  let sum = 0
  let measured = measuredByRanks
  return {
    add: (counts) => {
      measured = true
      counts.counts.forEach((count, index) => {
        if (index < totals.length) totals[index]! += count
      })
      sum += counts.sum
    },
    counts: () => ({ counts: [...totals], sum }),
    measuredByRanks: (ranks) => {
      measured = measured === true || ranks
    },
    measured: () => measured
  }
}

/** What /metrics says in place of the all-reduce histogram of a job whose ranks do not time their calls. */
export const ALLREDUCE_NOT_MEASURED =
  "# cohort_allreduce_latency_seconds: not measured for this job (its ranks are python/command ranks, whose all-reduce calls cohort does not time)"

/** A label value, escaped as the format asks. */
const label = (value: string): string => value.replaceAll("\\", "\\\\").replaceAll("\"", "\\\"").replaceAll("\n", "\\n")

const number = (value: number): string => (Number.isFinite(value) ? String(value) : value > 0 ? "+Inf" : value < 0 ? "-Inf" : "NaN")

const STATES: ReadonlyArray<RankState> = ["starting", "running", "exited", "dead"]

/** Upper bounds of the failure histograms, in seconds: milliseconds on one host to minutes of heartbeat timeout. */
const FAILURE_BUCKETS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]

export const render = (
  state: RunState,
  latency: LatencyHistogram,
  wire: ReadonlyMap<string, Readonly<ChannelCounts>>
): string => {
  const lines: Array<string> = []
  const family = (name: string, type: "gauge" | "counter" | "histogram", help: string) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`)
  }
  const run = `run="${label(state.run)}"`

  family("cohort_world_size", "gauge", "Ranks in the world (declared until it forms; every rank the run has had once it grows).")
  lines.push(`cohort_world_size{${run}} ${state.world}`)
  family("cohort_ranks_joined_after_formation_total", "counter", "Ranks admitted after the cohort formed (elastic growth).")
  lines.push(`cohort_ranks_joined_after_formation_total{${run}} ${state.joinedAfterFormation}`)
  family("cohort_phase", "gauge", "1 for the run's current phase.")
  for (const phase of ["waiting", "forming", "training", "done", "failed"] as const) {
    lines.push(`cohort_phase{${run},phase="${phase}"} ${state.phase === phase ? 1 : 0}`)
  }
  family("cohort_ranks", "gauge", "Ranks by state.")
  for (const rankState of STATES) {
    lines.push(`cohort_ranks{${run},state="${rankState}"} ${state.ranks.filter((rank) => rank.state === rankState).length}`)
  }
  family("cohort_joined_ranks", "gauge", "Ranks admitted by the join window.")
  lines.push(`cohort_joined_ranks{${run}} ${state.joinedRanks}`)
  family("cohort_joined_hosts", "gauge", "Hosts admitted by the join window.")
  lines.push(`cohort_joined_hosts{${run}} ${state.joinedHosts}`)
  family("cohort_join_window_remaining_seconds", "gauge", "Time left in the join window while the run waits for its world; 0 once the world formed.")
  // Frozen in the state at formation (the page and the console say how early it closed); closed, here.
  const windowMs = state.phase === "waiting" ? state.windowRemainingMs : 0
  if (windowMs !== null) lines.push(`cohort_join_window_remaining_seconds{${run}} ${number(windowMs / 1000)}`)
  family("cohort_deaths_total", "counter", "Ranks lost.")
  lines.push(`cohort_deaths_total{${run}} ${state.deaths.length}`)
  family("cohort_restarts_total", "counter", "Rank restarts.")
  // A seat's current rank carries every restart of it; the numbers it replaced are history, not counted again.
  lines.push(`cohort_restarts_total{${run}} ${state.ranks.reduce((sum, rank) => sum + (rank.replacedBy === undefined ? rank.restarts : 0), 0)}`)

  // Recovery figures: each death the policy carried, from its moment to cohort knowing, and to recovering.
  const recovery = state.recovery ?? RecoveryFigures.empty
  const { detect, recover } = RecoveryFigures.times(recovery)
  const secondsHistogram = (name: string, help: string, valuesMs: ReadonlyArray<number>) => {
    family(name, "histogram", help)
    for (const bound of FAILURE_BUCKETS_S) lines.push(`${name}_bucket{${run},le="${bound}"} ${valuesMs.filter((ms) => ms / 1000 <= bound).length}`)
    lines.push(`${name}_bucket{${run},le="+Inf"} ${valuesMs.length}`)
    lines.push(`${name}_sum{${run}} ${number(valuesMs.reduce((sum, ms) => sum + ms, 0) / 1000)}`)
    lines.push(`${name}_count{${run}} ${valuesMs.length}`)
  }
  secondsHistogram("cohort_failure_detect_seconds", "From a death (its exit, a silent rank's last beat) to cohort knowing it.", detect)
  secondsHistogram("cohort_failure_recover_seconds", "From a death to the survivors holding its work, or its restart running user code again.", recover)
  family("cohort_failure_rule_matches_total", "counter", "Deaths a failure rule decided, whatever its action, by rule.")
  for (const [rule, count] of Object.entries(state.ruleMatches ?? {})) lines.push(`cohort_failure_rule_matches_total{${run},rule="${label(rule)}"} ${count}`)
  const ettr = effectiveTrainingAt(state)
  family("cohort_effective_training_ratio", "gauge", "Time with every rank alive, plus time with fewer weighted by the share alive, over the run's wall time.")
  if (ettr !== undefined) lines.push(`cohort_effective_training_ratio{${run}} ${number(ettr)}`)

  if (state.training !== null) {
    family("cohort_epoch", "gauge", "The current epoch.")
    lines.push(`cohort_epoch{${run}} ${state.training.epoch}`)
    family("cohort_epoch_samples_done", "gauge", "Samples done in the current epoch.")
    lines.push(`cohort_epoch_samples_done{${run}} ${state.training.samplesDone}`)
    family("cohort_samples_per_second", "gauge", "Samples per second across ranks.")
    if (state.training.samplesPerSec !== null) lines.push(`cohort_samples_per_second{${run}} ${number(state.training.samplesPerSec)}`)
    family("cohort_metric", "gauge", "The ranks' reported metrics, averaged.")
    for (const [name, value] of Object.entries(state.training.metrics)) lines.push(`cohort_metric{${run},name="${label(name)}"} ${number(value)}`)
  }

  family("cohort_frames_total", "counter", "Frames through the launcher's links.")
  for (const [channel, counts] of wire) {
    lines.push(`cohort_frames_total{${run},channel="${channel}",direction="in"} ${counts.framesIn}`)
    lines.push(`cohort_frames_total{${run},channel="${channel}",direction="out"} ${counts.framesOut}`)
  }
  family("cohort_bytes_total", "counter", "Bytes through the launcher's links (framing included).")
  for (const [channel, counts] of wire) {
    lines.push(`cohort_bytes_total{${run},channel="${channel}",direction="in"} ${counts.bytesIn}`)
    lines.push(`cohort_bytes_total{${run},channel="${channel}",direction="out"} ${counts.bytesOut}`)
  }

  // Not said yet (the training plane says it as the world forms, and a plain command job has none): before the
  // cohort trains, a histogram of no calls is true of every job; from then on, only of one whose ranks time them.
  if (latency.measured() ?? (state.phase === "waiting" || state.phase === "forming")) {
    family("cohort_allreduce_latency_seconds", "histogram", "Latency of the ranks' all-reduce calls, as they measure it.")
    const histogram = latency.counts()
    let cumulative = 0
    ALLREDUCE_BUCKETS_S.forEach((bound, index) => {
      cumulative += histogram.counts[index] ?? 0
      lines.push(`cohort_allreduce_latency_seconds_bucket{${run},le="${bound}"} ${cumulative}`)
    })
    cumulative += histogram.counts[ALLREDUCE_BUCKETS_S.length] ?? 0
    lines.push(`cohort_allreduce_latency_seconds_bucket{${run},le="+Inf"} ${cumulative}`)
    lines.push(`cohort_allreduce_latency_seconds_sum{${run}} ${number(histogram.sum)}`)
    lines.push(`cohort_allreduce_latency_seconds_count{${run}} ${cumulative}`)
  } else {
    lines.push(ALLREDUCE_NOT_MEASURED)
  }

  // Each rank's latest reported metrics (the averages are cohort_metric), by rank and name.
  const reporting = state.ranks.filter((rank) => rank.metrics !== undefined && Object.keys(rank.metrics).length > 0)
  if (reporting.length > 0) {
    family("cohort_rank_metric", "gauge", "A rank's latest reported metric (ctx.progress), by name.")
    for (const rank of reporting) {
      for (const [name, value] of Object.entries(rank.metrics!)) lines.push(`cohort_rank_metric{${run},rank="${rank.rank}",name="${label(name)}"} ${number(value)}`)
    }
  }

  const sampled = state.ranks.filter((rank) => rank.resources !== null)
  if (sampled.length > 0) {
    const rankLabels = (rank: (typeof sampled)[number]) => `${run},rank="${rank.rank}",host="${label(rank.host)}",device="${label(rank.device)}"`
    family("cohort_rank_cpu_ratio", "gauge", "A rank's CPU use in cores, over the agent's last sampling interval.")
    for (const rank of sampled) lines.push(`cohort_rank_cpu_ratio{${rankLabels(rank)}} ${number(rank.resources!.cpu)}`)
    family("cohort_rank_resident_memory_bytes", "gauge", "A rank's resident set size.")
    for (const rank of sampled) lines.push(`cohort_rank_resident_memory_bytes{${rankLabels(rank)}} ${rank.resources!.rssBytes}`)
    const gpu = sampled.filter((rank) => rank.resources!.gpuMemoryBytes !== null)
    if (gpu.length > 0) {
      family("cohort_rank_gpu_memory_bytes", "gauge", "Memory in use on a rank's GPU.")
      for (const rank of gpu) lines.push(`cohort_rank_gpu_memory_bytes{${rankLabels(rank)}} ${rank.resources!.gpuMemoryBytes}`)
      family("cohort_rank_gpu_utilization_ratio", "gauge", "A rank's GPU utilisation (0-1).")
      for (const rank of gpu) {
        const utilization = rank.resources!.gpuUtilization
        if (utilization !== null) lines.push(`cohort_rank_gpu_utilization_ratio{${rankLabels(rank)}} ${number(utilization)}`)
      }
    }
  }
  return `${lines.join("\n")}\n`
}
