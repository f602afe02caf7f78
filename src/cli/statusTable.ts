/**
 * `bun run status`'s text: a `RunState` (RunView.ts) as a header, what the
 * launcher still cleans up after the verdict, a training line, the cohort's
 * inventory, a summary of the ranks by state, an aligned table of the ranks,
 * the deaths, the hosts gone and the verdict.
 *
 * Pure: the clock comes in as `now`, nothing is printed. `readState` decodes
 * the JSON as served with the state's Schema (RunStateSchema.ts), which fills
 * what an older launcher leaves out, so the text never depends on every
 * field being there.
 */
import * as Either from "effect/Either"
import * as Inventory from "../launcher/membership/Inventory.ts"
import type { Death, RankStatus, RunState, Training } from "../launcher/view/RunView.ts"
import { decodeRunState, problemOf } from "../launcher/view/RunStateSchema.ts"
import { printable } from "../wire/Printable.ts"
import { invokedAs } from "../kernel/ProgramName.ts"

const NONE = "—"

/** What a status endpoint's JSON is. */
export type StateReading =
  | { readonly kind: "state"; readonly state: RunState }
  /** No cohort run state at all: a phase and a list of ranks are the least a launcher has ever served. */
  | { readonly kind: "not-cohort" }
  /** A cohort run state that does not decode (another version's): what is wrong in it, in a line. */
  | { readonly kind: "unreadable"; readonly problem: string }

/** The state in `json`, or why there is none. Missing fields read as unknown: `startedAt` 0, empty lists, nulls. */
export const readState = (json: unknown): StateReading => {
  const shaped = typeof json === "object" && json !== null && "phase" in json && typeof json.phase === "string" && "ranks" in json && Array.isArray(json.ranks)
  if (!shaped) return { kind: "not-cohort" }
  return Either.match(decodeRunState(json), {
    onLeft: (error) => ({ kind: "unreadable", problem: problemOf(error) }),
    onRight: (state) => ({ kind: "state", state })
  })
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

/** A rank's end as a lost host's crash says it (RemoteRanks, `hostLostDetail`). */
const HOST_LOST_EXIT = /^crash: host \S+ lost\b/

/**
 * A rank's end as a table's cell: short, its cause, not its whole story. A rank that went with its host is
 * `host lost` (the host's line and the verdict say why, once: a cell per rank said it five times over); one
 * given up for silence is `silent for 5.0 s` (the SIGKILL that ended it is cohort's, not its cause). Else
 * how it ended (`status 3`, `signal SIGKILL`); null before it has.
 */
export const exitCell = (rank: Pick<RankStatus, "rank" | "state" | "exit">, deaths: ReadonlyArray<Pick<Death, "rank" | "cause" | "kind">>): string | null => {
  if (rank.exit !== null && HOST_LOST_EXIT.test(rank.exit)) return "host lost"
  const death = rank.state === "dead" ? deaths.find((each) => each.rank === rank.rank) : undefined
  if (death?.kind === "host_lost") return "host lost"
  if (death?.kind === "heartbeat") {
    const silence = /no heartbeat for ([\d.]+ s)/.exec(death.cause)?.[1]
    return silence === undefined ? "silent" : `silent for ${silence}`
  }
  return rank.exit
}

const rankRow = (deaths: ReadonlyArray<Death>) => (rank: RankStatus): Array<string> => [
  String(rank.rank),
  rank.host,
  rank.device,
  rank.state,
  rank.pid === null ? NONE : String(rank.pid),
  exitCell(rank, deaths) ?? NONE,
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
      ? `the operator's start (${invokedAs("status")} --start)`
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
    middle.push(...table(RANK_HEADER, RANK_ALIGN, shown.map(rankRow(state.deaths))))
    if (shown.length < state.ranks.length) {
      middle.push(`… ${state.ranks.length - shown.length} more running ranks not shown (the screen is full; --json has them all)`)
    }
  }
  return `${[...top, ...middle, ...bottom].join("\n")}\n`
}
