/**
 * `bun run status`'s text: a `RunState` (RunView.ts) as a header, what the
 * launcher still cleans up after the verdict, a training line, the cohort's
 * inventory, a summary of the ranks by state, an aligned table of the ranks,
 * the deaths, the hosts gone and the verdict.
 *
 * Pure: the clock comes in as `now`, nothing is printed. `readState` takes
 * the JSON as served and fills what an older launcher leaves out, so the
 * text never depends on every field being there.
 */
import * as Inventory from "../actors/launcher/Inventory.ts"
import type { Cleanup, Death, HostStatus, RankStatus, ResourceSample, RunState, Training } from "../actors/launcher/RunView.ts"
import { printable } from "../wire/Printable.ts"

const NONE = "—"

type Json = Record<string, unknown>

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)
const text = (value: unknown, fallback: string): string =>
  typeof value === "string" ? value : typeof value === "number" ? String(value) : fallback
const num = (value: unknown): number | null => (typeof value === "number" && Number.isFinite(value) ? value : null)
const list = (value: unknown): ReadonlyArray<unknown> => (Array.isArray(value) ? value : [])

const readResources = (value: unknown): ResourceSample | null =>
  isObject(value)
    ? {
      cpu: num(value.cpu) ?? 0,
      rssBytes: num(value.rssBytes) ?? 0,
      gpuMemoryBytes: num(value.gpuMemoryBytes),
      gpuUtilization: num(value.gpuUtilization),
      at: num(value.at) ?? 0
    }
    : null

const readRank = (value: unknown): ReadonlyArray<RankStatus> => {
  if (!isObject(value) || num(value.rank) === null) return []
  return [{
    rank: num(value.rank)!,
    host: text(value.host, "?"),
    device: text(value.device, "?"),
    pid: num(value.pid),
    state: text(value.state, "?") as RankStatus["state"],
    exit: typeof value.exit === "string" ? value.exit : null,
    restarts: num(value.restarts) ?? 0,
    startedAt: num(value.startedAt),
    endedAt: num(value.endedAt),
    resources: readResources(value.resources),
    lastResources: readResources(value.lastResources)
  }]
}

const readTraining = (value: unknown): Training | null => {
  if (!isObject(value) || num(value.epoch) === null) return null
  const metrics = isObject(value.metrics)
    ? Object.fromEntries(Object.entries(value.metrics).filter((entry): entry is [string, number] => num(entry[1]) !== null))
    : {}
  return {
    epoch: num(value.epoch)!,
    epochs: num(value.epochs) ?? 0,
    samplesDone: num(value.samplesDone) ?? 0,
    datasetSize: num(value.datasetSize) ?? 0,
    samplesPerSec: num(value.samplesPerSec),
    metrics
  }
}

const readInventory = (value: unknown): Inventory.Inventory =>
  list(value).flatMap((host): Inventory.Inventory =>
    isObject(host) && typeof host.host === "string"
      ? [{
        host: host.host,
        devices: list(host.devices).flatMap((device) =>
          isObject(device)
            ? [{ device: text(device.device, "?"), label: text(device.label, "?"), ranks: list(device.ranks).flatMap((rank) => num(rank) ?? []) }]
            : []
        )
      }]
      : []
  )

const readCleanup = (value: unknown): Cleanup | null =>
  isObject(value) && typeof value.detail === "string" ? { since: num(value.since) ?? 0, detail: value.detail } : null

/**
 * The state in `json`, or undefined when it is not a cohort run state at all
 * (a phase and a list of ranks are the least a launcher has ever served).
 * Missing fields read as unknown: `startedAt` 0, empty lists, nulls.
 */
export const readState = (json: unknown): RunState | undefined => {
  if (!isObject(json) || typeof json.phase !== "string" || !Array.isArray(json.ranks)) return undefined
  const ranks = json.ranks.flatMap(readRank)
  return {
    run: text(json.run, ""),
    phase: json.phase as RunState["phase"],
    startedAt: num(json.startedAt) ?? 0,
    updatedAt: num(json.updatedAt) ?? 0,
    world: num(json.world) ?? 0,
    joinedRanks: num(json.joinedRanks) ?? 0,
    joinedHosts: num(json.joinedHosts) ?? 0,
    windowRemainingMs: num(json.windowRemainingMs),
    capRemainingMs: num(json.capRemainingMs),
    windowClosesAt: num(json.windowClosesAt),
    hardCapAt: num(json.hardCapAt),
    joinRule: isObject(json.joinRule) && num(json.joinRule.quorum) !== null &&
        (json.joinRule.start === "auto" || json.joinRule.start === "manual" || json.joinRule.start === "hybrid")
      ? { quorum: num(json.joinRule.quorum)!, start: json.joinRule.start }
      : null,
    hosts: list(json.hosts).flatMap((host): ReadonlyArray<HostStatus> =>
      isObject(host) && typeof host.host === "string"
        ? [{
          host: host.host,
          declaredRanks: num(host.declaredRanks) ?? 0,
          state: text(host.state, "?") as HostStatus["state"],
          reason: typeof host.reason === "string" ? host.reason : null
        }]
        : []
    ),
    ranks,
    deaths: list(json.deaths).flatMap((death): ReadonlyArray<Death> =>
      isObject(death) && num(death.rank) !== null
        ? [{ rank: num(death.rank)!, host: text(death.host, "?"), cause: text(death.cause, "?"), at: num(death.at) ?? 0 }]
        : []
    ),
    training: readTraining(json.training),
    throughput: [],
    verdict: typeof json.verdict === "string" ? json.verdict : null,
    joinedAfterFormation: num(json.joinedAfterFormation) ?? 0,
    worldSizes: list(json.worldSizes).flatMap((point) =>
      isObject(point) && num(point.at) !== null && num(point.ranks) !== null
        ? [{ at: num(point.at)!, ranks: num(point.ranks)!, alive: num(point.alive) ?? num(point.ranks)! }]
        : []
    ),
    inventory: readInventory(json.inventory),
    cleanup: readCleanup(json.cleanup)
  }
}

export const hasEnded = (state: RunState): boolean => state.phase === "done" || state.phase === "failed"

/** 45s, 3m07s, 2h05m, 1d03h: two units at most, enough to read at a glance. */
export const duration = (ms: number): string => {
  const seconds = Math.max(0, Math.floor(ms / 1000))
  const two = (n: number) => String(n).padStart(2, "0")
  if (seconds < 60) return `${seconds}s`
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m${two(seconds % 60)}s`
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h${two(Math.floor(seconds / 60) % 60)}m`
  return `${Math.floor(seconds / 86400)}d${two(Math.floor(seconds / 3600) % 24)}h`
}

const MIB = 1024 * 1024
const mib = (bytes: number | null | undefined): string => (bytes == null ? NONE : String(Math.round(bytes / MIB)))
const percent = (share: number | null | undefined): string => {
  if (share == null) return NONE
  const value = share * 100
  return value < 10 ? value.toFixed(1) : value.toFixed(0)
}
/** Four significant digits, without trailing noise (0.1851, 98.8, 12350). */
const metric = (value: number): string => String(Number(value.toPrecision(4)))
const grouped = (value: number): string => Math.round(value).toLocaleString("en-US")

type Align = "left" | "right"

/** Columns padded to their widest cell; the last column is not padded on the right. */
const table = (header: ReadonlyArray<string>, align: ReadonlyArray<Align>, rows: ReadonlyArray<ReadonlyArray<string>>): Array<string> => {
  const widths = header.map((title, column) => rows.reduce((widest, row) => Math.max(widest, row[column]!.length), title.length))
  const line = (cells: ReadonlyArray<string>) =>
    cells.map((cell, column) => {
      const last = column === cells.length - 1
      if (align[column] === "right") return cell.padStart(widths[column]!)
      return last ? cell : cell.padEnd(widths[column]!)
    }).join("  ")
  return [line(header), ...rows.map(line)]
}

const RANK_HEADER = ["RANK", "HOST", "DEVICE", "STATE", "PID", "EXIT", "RESTARTS", "CPU %", "RSS MiB", "GPU MiB", "GPU %"]
const RANK_ALIGN: ReadonlyArray<Align> = ["right", "left", "left", "left", "right", "left", "right", "right", "right", "right", "right"]

const rankEnded = (rank: RankStatus) => rank.state === "exited" || rank.state === "dead"
/** An ended rank uses nothing: whatever an older launcher still serves for it is not shown as its use. */
const resourcesOf = (rank: RankStatus) => (rankEnded(rank) ? null : rank.resources)
/** What an ended rank last used (an older launcher kept it as its use). */
const lastResourcesOf = (rank: RankStatus | undefined) => (rank === undefined || !rankEnded(rank) ? null : rank.lastResources ?? rank.resources)

const rankRow = (rank: RankStatus): Array<string> => [
  String(rank.rank),
  rank.host,
  rank.device,
  rank.state,
  rank.pid === null ? NONE : String(rank.pid),
  rank.exit ?? NONE,
  String(rank.restarts),
  percent(resourcesOf(rank)?.cpu),
  mib(resourcesOf(rank)?.rssBytes),
  mib(resourcesOf(rank)?.gpuMemoryBytes),
  percent(resourcesOf(rank)?.gpuUtilization)
]

/** The order ranks are counted in: the healthy first, then what needs a look. */
const STATE_ORDER = ["running", "starting", "exited", "dead"]

const byState = (ranks: ReadonlyArray<RankStatus>): string => {
  const counts = new Map<string, number>()
  for (const rank of ranks) counts.set(rank.state, (counts.get(rank.state) ?? 0) + 1)
  const states = [...counts.keys()].sort((a, b) => {
    const order = (state: string) => (STATE_ORDER.includes(state) ? STATE_ORDER.indexOf(state) : STATE_ORDER.length)
    return order(a) - order(b) || a.localeCompare(b)
  })
  return states.map((state) => `${counts.get(state)} ${state}`).join(", ")
}

/**
 * At most `limit` ranks, in rank order: those that are not running come
 * first (they are what someone watching wants to see), the rest fill up.
 */
const chooseRanks = (ranks: ReadonlyArray<RankStatus>, limit: number): ReadonlyArray<RankStatus> => {
  if (ranks.length <= limit) return ranks
  const notable = ranks.filter((rank) => rank.state !== "running")
  const running = ranks.filter((rank) => rank.state === "running")
  return [...notable, ...running].slice(0, limit).sort((a, b) => a.rank - b.rank)
}

const headerLine = (state: RunState, now: number): string => {
  const parts = [state.run === "" ? "run" : `run ${state.run}`, state.cleanup == null ? state.phase : `${state.phase} (cleaning up)`]
  if (state.startedAt > 0) {
    // A finished run's clock stops at its last update.
    const end = hasEnded(state) && state.updatedAt > 0 ? state.updatedAt : now
    parts.push(`up ${duration(end - state.startedAt)}`)
  }
  const world = state.world > 0 ? state.world : state.ranks.length
  parts.push(state.joinedAfterFormation > 0 ? `world ${world} (${state.joinedAfterFormation} joined after formation)` : `world ${world}`)
  const hosts = state.hosts.length > 0 ? `${state.joinedHosts}/${state.hosts.length}` : String(state.joinedHosts)
  parts.push(`joined ${state.joinedRanks}/${world} ranks on ${hosts} hosts`)
  if (state.phase === "waiting" && state.windowRemainingMs !== null) parts.push(joinWindowText(state))
  return parts.join(" · ")
}

/**
 * The join window as of the state: while it is open, when it closes; once it has closed without a quorum
 * (or, `start: manual`, without the operator's start), what it waits for and how long it still may.
 */
const joinWindowText = (state: RunState): string => {
  const cap = state.capRemainingMs === null ? "" : `hard cap in ${duration(state.capRemainingMs)}`
  const rule = state.joinRule ?? null
  if (rule?.start === "manual") {
    const waitingFor = state.joinedRanks >= rule.quorum
      ? "the operator's start (bun run status --start)"
      : `the quorum (${state.joinedRanks}/${rule.quorum} ranks)`
    return `join window waits for ${waitingFor}${cap === "" ? "" : `, ${cap}`}`
  }
  if (state.windowRemainingMs! > 0 || rule === null && state.capRemainingMs === null) {
    return `join window closes in ${duration(state.windowRemainingMs!)}${cap === "" ? "" : ` (${cap})`}`
  }
  const quorum = rule === null ? "more ranks" : `the quorum (${state.joinedRanks}/${rule.quorum} ranks)`
  return `join window closed: waiting for ${quorum}${cap === "" ? "" : `, ${cap}`}`
}

const trainingLine = (training: Training): string => {
  const parts = [`epoch ${training.epoch}/${training.epochs}`]
  if (training.datasetSize > 0) {
    const share = Math.min(100, Math.floor((training.samplesDone / training.datasetSize) * 100))
    parts.push(`${share}% of epoch (${grouped(training.samplesDone)}/${grouped(training.datasetSize)} samples)`)
  }
  if (training.samplesPerSec !== null) parts.push(`${grouped(training.samplesPerSec)} samples/s`)
  const metrics = Object.entries(training.metrics).map(([name, value]) => `${name} ${metric(value)}`)
  if (metrics.length > 0) parts.push(metrics.join(" "))
  return `training: ${parts.join(" · ")}`
}

export interface RenderOptions {
  /** Now, ms since the epoch: the uptime of a run still going. */
  readonly now: number
  /**
   * Fit a screen of this many lines: only the latest deaths, and as many
   * ranks as there is room for (the ones not running first).
   */
  readonly fitLines?: number
}

/** Deaths shown when fitting a screen; the rest are counted. */
const SCREEN_DEATHS = 10
/** Hosts named in the inventory line when fitting a screen; the rest are counted. */
const SCREEN_INVENTORY_HOSTS = 8
/** Rank rows shown however small the screen. */
const MIN_RANK_ROWS = 3

/** The state as lines of text, ending with a newline. */
export const render = (state: RunState, options: RenderOptions): string => {
  const fitting = options.fitLines !== undefined
  const top = [headerLine(state, options.now)]
  // The verdict is out, the launcher still works: what it does is what a watcher waits for.
  if (state.cleanup != null) top.push(`cleaning up: ${printable(state.cleanup.detail, 512)}`)
  if (state.training !== null) top.push(trainingLine(state.training))
  const inventory = state.inventory ?? []
  if (inventory.length > 0) {
    const shown = fitting ? inventory.slice(0, SCREEN_INVENTORY_HOSTS) : inventory
    const more = inventory.length - shown.length
    top.push(`inventory: ${Inventory.describe(shown)}${more > 0 ? `; … ${more} more host(s) (--json has them all)` : ""}`)
  }

  const bottom: Array<string> = []
  if (state.deaths.length > 0) {
    const deaths = fitting ? state.deaths.slice(-SCREEN_DEATHS) : state.deaths
    const earlier = state.deaths.length - deaths.length
    bottom.push("", `deaths: ${state.deaths.length}${earlier > 0 ? ` (the latest ${deaths.length} shown)` : ""}`)
    // The memory a rank had when it died says whether it was killed for it: shown when any is known.
    const byNumber = new Map(state.ranks.map((rank) => [rank.rank, rank]))
    const lastRss = deaths.map((death) => lastResourcesOf(byNumber.get(death.rank))?.rssBytes)
    const withRss = lastRss.some((rss) => rss != null)
    bottom.push(...table(
      ["RANK", "HOST", "AFTER", ...(withRss ? ["LAST RSS MiB"] : []), "CAUSE"],
      ["right", "left", "right", ...(withRss ? ["right" as const] : []), "left"],
      deaths.map((death, index) => [
        String(death.rank),
        death.host,
        state.startedAt > 0 && death.at > 0 ? duration(death.at - state.startedAt) : NONE,
        ...(withRss ? [mib(lastRss[index])] : []),
        death.cause
      ])
    ))
  }
  const gone = state.hosts.filter((host) => host.state === "gone")
  if (gone.length > 0) {
    bottom.push("", `hosts gone: ${gone.length}`)
    bottom.push(...table(["HOST", "REASON"], ["left", "left"], gone.map((host) => [host.host, host.reason ?? NONE])))
  }
  if (state.verdict !== null) bottom.push("", `verdict: ${state.verdict}`)

  const middle: Array<string> = []
  if (state.ranks.length === 0) middle.push("", "ranks: none yet")
  else {
    middle.push("", `ranks: ${byState(state.ranks)}`)
    // Room left for rows: less the blank line, the summary, the column titles and the "more" line.
    const room = fitting ? Math.max(MIN_RANK_ROWS, options.fitLines! - top.length - bottom.length - 4) : state.ranks.length
    const shown = chooseRanks(state.ranks, room)
    middle.push(...table(RANK_HEADER, RANK_ALIGN, shown.map(rankRow)))
    if (shown.length < state.ranks.length) {
      middle.push(`… ${state.ranks.length - shown.length} more running ranks not shown (the screen is full; --json has them all)`)
    }
  }
  return `${[...top, ...middle, ...bottom].join("\n")}\n`
}
