/**
 * RunView: what people see of a run, in one value. The launcher records
 * `RunEvent`s as things happen; `apply` folds each into the `RunState` that
 * the status endpoint, the live page, `bun run status`, /metrics and the
 * terminal all read. The events themselves are the `--events` file, one JSON
 * object per line: a run's whole story, for machines.
 *
 * Pure: no clock of its own (every event carries `at`, ms since the epoch),
 * no I/O.
 */
import * as Inventory from "../membership/Inventory.ts"
import * as RecoveryFigures from "./RecoveryFigures.ts"
import type { RunEvent } from "./RunEvents.ts"
import type { Death, HostStatus, RankStatus, RunState, WorldSize } from "./RunStateSchema.ts"

// The state and the events are Schemas (RunStateSchema.ts, RunEvents.ts), so that what is read back (the
// status endpoint's JSON, an events file) is decoded, not trusted; their types are named here as before.
export type { RunEvent } from "./RunEvents.ts"
export type { Cleanup, Death, HostStatus, JoinRule, Phase, RankState, RankStatus, ResourceSample, RunState, Training, WorldSize } from "./RunStateSchema.ts"

export const THROUGHPUT_POINTS = 240

/**
 * Events too frequent for the `--events` file, or said from a link's reader without waiting for the file:
 * they only move the view (a rank running again is a restart's recovery, in /state.json and /metrics).
 */
export const isEphemeral = (event: RunEvent): boolean =>
  event.event === "progress" || event.event === "rank_metrics" || event.event === "resources" || event.event === "join_window" ||
  event.event === "rank_running"

export const initial = (run: string, at: number): RunState => ({
  run,
  phase: "waiting",
  startedAt: at,
  updatedAt: at,
  world: 0,
  joinedRanks: 0,
  joinedHosts: 0,
  windowRemainingMs: null,
  capRemainingMs: null,
  windowClosesAt: null,
  hardCapAt: null,
  joinRule: null,
  hosts: [],
  ranks: [],
  deaths: [],
  training: null,
  throughput: [],
  verdict: null,
  joinedAfterFormation: 0,
  worldSizes: [],
  inventory: [],
  cleanup: null,
  recovery: RecoveryFigures.empty,
  endedAt: null,
  ruleMatches: {},
  effectiveTraining: null
})

/** A rank the world has just been told of: not started yet. */
const newRank = (rank: number, host: string, device: string | undefined): RankStatus => ({
  rank,
  host,
  device: device ?? "?",
  pid: null,
  state: "starting",
  exit: null,
  restarts: 0,
  startedAt: null,
  endedAt: null,
  resources: null
})

/** The world size series with a point for now (a point at the same instant is replaced). */
const withWorldSize = (state: RunState, at: number, ranks: number, alive: number): ReadonlyArray<WorldSize> => {
  const last = state.worldSizes.at(-1)
  const kept = last !== undefined && last.at === at ? state.worldSizes.slice(0, -1) : state.worldSizes
  return [...kept, { at, ranks, alive }].slice(-THROUGHPUT_POINTS)
}

/** Where `rank` is in `ranks`: its own index when the ranks are 0…n−1 in order (always, once formed), else -1. */
const slotOf = (ranks: ReadonlyArray<RankStatus>, rank: number): number => (ranks[rank]?.rank === rank ? rank : -1)

/**
 * The rank arrays made during the `applyAll` under way: no one outside has seen them yet, so later events of
 * the same batch change them in place. Copying 8,000 ranks for each of 8,000 `rank_started` was 0.5 GB of
 * garbage as a big world started.
 */
let batchOwned: WeakSet<ReadonlyArray<RankStatus>> | undefined

/** A copy of the ranks that this change may write: the array itself when the batch under way made it. */
const writableRanks = (ranks: ReadonlyArray<RankStatus>): Array<RankStatus> => {
  if (batchOwned?.has(ranks) === true) return ranks as Array<RankStatus>
  const copy = ranks.slice()
  batchOwned?.add(copy)
  return copy
}

// Events come one rank at a time, thousands of them as a big world starts: find the rank by index, not by a scan.
const withRank = (state: RunState, rank: number, change: (status: RankStatus) => RankStatus): ReadonlyArray<RankStatus> => {
  const slot = slotOf(state.ranks, rank)
  if (slot === -1) return state.ranks.map((status) => (status.rank === rank ? change(status) : status))
  const ranks = writableRanks(state.ranks)
  ranks[slot] = change(ranks[slot]!)
  return ranks
}

/** A rank that has just ended: its live figures become its last ones. */
const ended = (rank: RankStatus): RankStatus =>
  rank.resources === null ? rank : { ...rank, resources: null, lastResources: rank.resources }

const withHost = (state: RunState, host: string, change: (status: HostStatus) => HostStatus): ReadonlyArray<HostStatus> =>
  state.hosts.map((status) => (status.host === host ? change(status) : status))

/**
 * The state after every one of `events`, in order: the same as applying them one by one, but rank arrays are
 * copied once per batch instead of once per event.
 */
export const applyAll = (state: RunState, events: ReadonlyArray<RunEvent>): RunState => {
  batchOwned = new WeakSet()
  try {
    return events.reduce(apply, state)
  } finally {
    batchOwned = undefined
  }
}

/** The state after `event`. */
export const apply = (state: RunState, event: RunEvent): RunState => {
  const next = step(state, event)
  if (next === state) return state
  const updatedAt = Math.max(state.updatedAt, event.at)
  return ettrMoves.has(event.event) ? { ...next, updatedAt, effectiveTraining: effectiveTrainingAt(next, updatedAt) ?? null } : { ...next, updatedAt }
}

/** The events after which the ETTR is said again: membership, recovery, training's ticks and the verdict. */
const ettrMoves: ReadonlySet<RunEvent["event"]> = new Set<RunEvent["event"]>([
  "world_formed", "world_grew", "rank_lost", "survivors_stepped", "ranks_entered", "rank_restarting", "rank_running", "progress", "epoch_done", "verdict"
])

/** The run's effective training ratio as of `at` (its verdict's moment once said; RecoveryFigures); undefined before it can be said. */
export const effectiveTrainingAt = (state: RunState, at: number = state.updatedAt): number | undefined =>
  RecoveryFigures.effectiveTrainingRatio(state.recovery ?? RecoveryFigures.empty, state.startedAt, state.endedAt ?? at)

const step = (state: RunState, event: RunEvent): RunState => {
  switch (event.event) {
    case "run_started":
      return {
        ...initial(event.run, event.at),
        world: event.hosts.reduce((sum, host) => sum + host.ranks, 0),
        joinRule: event.join ?? null,
        hosts: event.hosts.map((host) => ({ host: host.host, declaredRanks: host.ranks, state: "waiting", reason: null }))
      }
    case "listening":
    case "decision":
    case "checkpoint":
    case "death_recovered":
    case "work_moved":
      return state
    case "rule_matched":
      return { ...state, ruleMatches: { ...state.ruleMatches, [event.rule]: (state.ruleMatches?.[event.rule] ?? 0) + 1 } }
    case "rank_restarting":
    case "survivors_stepped":
    case "rank_running":
      return { ...state, recovery: RecoveryFigures.apply(state.recovery ?? RecoveryFigures.empty, event) }
    case "join_window":
      return state.phase === "waiting"
        ? {
          ...state,
          windowRemainingMs: event.windowRemainingMs,
          capRemainingMs: event.capRemainingMs,
          windowClosesAt: event.at + event.windowRemainingMs,
          hardCapAt: event.at + event.capRemainingMs
        }
        : state
    case "host_joined": {
      // One pass per join, not three: a thousand hosts join within seconds.
      const at = state.hosts.findIndex((host) => host.host === event.host)
      const hosts = state.hosts.slice()
      if (at === -1) hosts.push({ host: event.host, declaredRanks: event.ranks.length, state: "joined", reason: null })
      else hosts[at] = { ...hosts[at]!, state: "joined" }
      const newlyJoined = at === -1 || state.hosts[at]!.state !== "joined"
      return { ...state, hosts, joinedHosts: state.joinedHosts + (newlyJoined ? 1 : 0), joinedRanks: state.joinedRanks + event.ranks.length }
    }
    case "join_rejected":
      return state
    case "world_formed":
      return {
        ...state,
        phase: "forming",
        world: event.world,
        worldSizes: withWorldSize(state, event.at, event.world, event.world),
        recovery: RecoveryFigures.apply(state.recovery ?? RecoveryFigures.empty, event),
        inventory: Inventory.withHosts([], event.hosts),
        ranks: event.hosts.flatMap((host) => host.ranks.map((rank, slot) => newRank(rank, host.host, host.devices[slot]))).sort((a, b) => a.rank - b.rank)
      }
    case "world_grew": {
      // A restart under a new number is the same seat coming back: it counts as a restart, not as growth.
      const replaced = event.replaces === undefined ? undefined : state.ranks.find((rank) => rank.rank === event.replaces)
      const joined = event.ranks.map((rank, slot) => ({
        ...newRank(rank, event.host, event.devices[slot]),
        restarts: replaced === undefined ? 0 : replaced.restarts + 1
      }))
      const alive = (state.worldSizes.at(-1)?.alive ?? state.world) + event.ranks.length
      const ranks = replaced === undefined
        ? state.ranks
        : state.ranks.map((rank) => (rank === replaced ? { ...rank, replacedBy: event.ranks[0] } : rank))
      return {
        ...state,
        recovery: RecoveryFigures.apply(state.recovery ?? RecoveryFigures.empty, event),
        world: event.world,
        joinedAfterFormation: state.joinedAfterFormation + (replaced === undefined ? event.ranks.length : 0),
        ranks: [...ranks, ...joined].sort((a, b) => a.rank - b.rank),
        worldSizes: withWorldSize(state, event.at, event.world, alive),
        inventory: replaced === undefined
          ? Inventory.withHost(state.inventory ?? [], event.host, event.ranks, event.devices, event.labels)
          : event.ranks.reduce((inventory, rank) => Inventory.withRank(inventory, event.host, replaced.rank, rank), state.inventory ?? [])
      }
    }
    case "ranks_entered":
      return { ...state, recovery: RecoveryFigures.apply(state.recovery ?? RecoveryFigures.empty, event) }
    case "rank_started":
      return {
        ...state,
        ranks: withRank(state, event.rank, (rank) => ({
          ...rank,
          pid: event.pid,
          state: "running",
          // A second start is a restart: the first incarnation's end stays in the deaths.
          restarts: rank.startedAt === null ? rank.restarts : rank.restarts + 1,
          startedAt: event.at,
          endedAt: null,
          // A new incarnation: the last one's end is history (the key is left out where it never had one).
          ...(rank.lastResources == null ? {} : { lastResources: null }),
          exit: rank.startedAt === null ? null : rank.exit
        }))
      }
    case "cohort_formed":
      return { ...state, phase: "training" }
    case "rank_exited":
      // An ended rank uses nothing: its last sample would read as a process still at work.
      return {
        ...state,
        ranks: withRank(state, event.rank, (rank) => ({ ...ended(rank), state: event.clean ? "exited" : "dead", exit: event.exit, endedAt: event.at }))
      }
    case "rank_lost": {
      const recovery = RecoveryFigures.apply(state.recovery ?? RecoveryFigures.empty, event)
      const deaths = event.ranks.map((rank): Death => {
        const slot = slotOf(state.ranks, rank)
        return {
          rank,
          host: (slot === -1 ? state.ranks.find((status) => status.rank === rank) : state.ranks[slot])?.host ?? "?",
          cause: event.cause,
          at: event.at,
          kind: event.kind ?? null,
          rule: event.rule ?? null
        }
      })
      const lost = new Set(event.ranks)
      const alive = Math.max(0, (state.worldSizes.at(-1)?.alive ?? state.world) - lost.size)
      return {
        ...state,
        ranks: state.ranks.map((rank) => (lost.has(rank.rank) && rank.state !== "exited" ? { ...ended(rank), state: "dead" } : rank)),
        recovery,
        deaths: [...state.deaths, ...deaths],
        worldSizes: withWorldSize(state, event.at, state.world, alive)
      }
    }
    case "host_gone":
      return { ...state, hosts: withHost(state, event.host, (host) => ({ ...host, state: "gone", reason: event.reason })) }
    case "progress": {
      const throughput = event.samplesPerSec === null
        ? state.throughput
        : [...state.throughput, { at: event.at, samplesPerSec: event.samplesPerSec }].slice(-THROUGHPUT_POINTS)
      return {
        ...state,
        throughput,
        training: {
          epoch: event.epoch,
          epochs: event.epochs,
          samplesDone: event.samplesDone,
          datasetSize: event.datasetSize,
          samplesPerSec: event.samplesPerSec ?? state.training?.samplesPerSec ?? null,
          metrics: event.metrics
        }
      }
    }
    case "rank_metrics": {
      // Each rank's own latest figures replace its last ones whole: a name it stopped reporting is not shown as current.
      const byRank = new Map(event.ranks.map((entry) => [entry.rank, entry.metrics]))
      if ([...byRank.keys()].every((rank) => slotOf(state.ranks, rank) !== -1)) {
        const ranks = writableRanks(state.ranks)
        for (const [rank, metrics] of byRank) ranks[rank] = { ...ranks[rank]!, metrics }
        return { ...state, ranks }
      }
      return { ...state, ranks: state.ranks.map((rank) => (byRank.has(rank.rank) ? { ...rank, metrics: byRank.get(rank.rank)! } : rank)) }
    }
    case "epoch_done":
      return {
        ...state,
        training: {
          epoch: event.epoch,
          epochs: event.epochs,
          samplesDone: event.samples,
          datasetSize: event.samples,
          samplesPerSec: state.training?.samplesPerSec ?? (event.seconds > 0 ? event.samples / event.seconds : null),
          metrics: Object.keys(event.metrics).length > 0 ? event.metrics : state.training?.metrics ?? {}
        }
      }
    case "resources": {
      const byRank = new Map(event.samples.map((sample) => [sample.rank, sample]))
      const sampled = (rank: RankStatus): RankStatus => {
        const sample = byRank.get(rank.rank)
        // A sample taken just before a rank ended may arrive after its end: an ended rank shows none.
        if (sample === undefined || rank.host !== event.host || rank.state === "exited" || rank.state === "dead") return rank
        const { rank: _, ...resources } = sample
        return { ...rank, resources: { ...resources, at: event.at } }
      }
      // Every host reports every few seconds: touch its own ranks, not the whole world.
      if ([...byRank.keys()].every((rank) => slotOf(state.ranks, rank) !== -1)) {
        const ranks = writableRanks(state.ranks)
        for (const rank of byRank.keys()) ranks[rank] = sampled(ranks[rank]!)
        return { ...state, ranks }
      }
      return { ...state, ranks: state.ranks.map(sampled) }
    }
    case "phase":
      // The countdowns stop where they were: join_window events move them only while waiting.
      return { ...state, phase: event.phase }
    case "verdict":
      return { ...state, phase: event.exitCode === 0 ? "done" : "failed", verdict: event.summary, endedAt: event.at }
    case "cleanup_started":
      return { ...state, cleanup: { since: event.at, detail: event.detail } }
    case "cleanup_done":
      return { ...state, cleanup: null }
  }
}
