/**
 * The launcher's terminal: every line it prints goes through here.
 *
 * - On a terminal, one live line at the bottom (stderr) says where the run
 *   is: the join window's count and countdown, then the ranks starting, then
 *   the epoch, samples/s and the ranks' metrics. Other lines are printed
 *   above it (it is cleared, the line written, then it is drawn again).
 *   Elsewhere (a pipe, a file, CI) there is no live line; the join window is
 *   reported when what it waits for changes (its end, then the quorum until
 *   the hard cap, or the operator's start) and every JOIN_LINE_EVERY_MS
 *   otherwise, and training by the coordinator's own epoch lines.
 * - Rank, relay and agent lines: prefixes coloured per host on a terminal;
 *   `ranks` shows only those ranks' lines; `quiet` shows none of them, but
 *   keeps each source's last lines and prints them when that rank dies.
 * - `logDir`: one file per rank (`rank-N.log`), per relay (`relay-HOST.log`)
 *   and per agent (`agent-HOST.log`, this machine's in-process one too),
 *   prefixes stripped, each made at its first line; cohort's own
 *   lines and anything else go to `launcher.log`. Written whatever the
 *   filters, so nothing is lost.
 * - Every forwarded line reaches the terminal and the log files escaped
 *   (`printableLine`: C0 controls but tab, DEL, C1, bidirectional
 *   overrides), whichever host it came from and whichever way (this
 *   machine's agent, an ssh session, a self-deployed agent's forwarding):
 *   they all pass here. `rawOutput` (`--raw-output`) passes them as
 *   printed, for ranks that draw on the terminal on purpose. cohort's own
 *   lines are escaped always (they quote what ranks threw).
 */
import { mkdirSync } from "node:fs"
import { appendPrivate, preparePrivateAppend } from "../launcher/run/PrivateFiles.ts"
import { join } from "node:path"
import * as Inventory from "../launcher/membership/Inventory.ts"
import { effectiveTrainingAt, type RunEvent, type RunState } from "../launcher/view/RunView.ts"
import * as RecoveryFigures from "../launcher/view/RecoveryFigures.ts"
import { printable, printableLine } from "../wire/Printable.ts"
import { exitCell } from "./statusTable.ts"
import * as TurnWriter from "./TurnWriter.ts"
import { invokedAs } from "../kernel/ProgramName.ts"

export interface RunConsoleOptions {
  readonly quiet?: boolean
  /** Show only these ranks' lines. */
  readonly ranks?: ReadonlySet<number> | undefined
  readonly logDir?: string | undefined
  /** Pass forwarded lines to the terminal and the log files as printed, terminal controls and all (`--raw-output`). */
  readonly rawOutput?: boolean | undefined
  /** Whether stderr (the live line) and stdout (rank lines) are terminals; default: ask the streams. */
  readonly stderrIsTty?: boolean
  readonly stdoutIsTty?: boolean
  /** Where text goes; default: the process's streams. */
  readonly write?: (text: string, stream: "stdout" | "stderr") => void
  /** The clock, for the plain join lines' pacing. */
  readonly now?: () => number
}

export interface RunConsole {
  /** A rank's, relay's or agent's line, prefix included. */
  readonly output: (line: string, stream: "stdout" | "stderr") => void
  /** One of cohort's own lines (already `cohort: `-prefixed). */
  readonly cohortLine: (text: string) => void
  /** The run recorded something: the live line follows. */
  readonly onEvent: (event: RunEvent, state: RunState) => void
  /** The last state seen (for the summary). */
  readonly lastState: () => RunState | undefined
  /** Clear the live line for good. */
  readonly close: () => void
}

/** Without a live line, the join window's state is printed when what it waits for changes, and at least this often. */
const JOIN_LINE_EVERY_MS = 10_000
const REDRAW_EVERY_MS = 100
/** Lines kept per rank under `quiet`, shown when it dies. */
const KEPT_LINES = 20

const PALETTE = [36, 33, 35, 32, 34, 31, 96, 93, 95, 92, 94, 91]

/** A line's source, from its prefix. */
type Source = { readonly kind: "rank"; readonly rank: number; readonly host: string } | { readonly kind: "relay" | "agent"; readonly host: string } | { readonly kind: "other" }

const RANK_PREFIX = /^\[([^\]:]+):[^\]]*:r(\d+)\] /
const RELAY_PREFIX = /^\[([^\]:]+):relay\] /
const AGENT_PREFIX = /^cohort agent ([^:]+): /

const sourceOf = (line: string): { source: Source; body: string } => {
  const rank = RANK_PREFIX.exec(line)
  if (rank !== null) return { source: { kind: "rank", rank: Number(rank[2]), host: rank[1]! }, body: line.slice(rank[0].length) }
  const relay = RELAY_PREFIX.exec(line)
  if (relay !== null) return { source: { kind: "relay", host: relay[1]! }, body: line.slice(relay[0].length) }
  const agent = AGENT_PREFIX.exec(line)
  if (agent !== null) return { source: { kind: "agent", host: agent[1]! }, body: line.slice(agent[0].length) }
  return { source: { kind: "other" }, body: line }
}

const fileName = (source: Source): string => {
  const safe = (host: string) => host.replace(/[^A-Za-z0-9_.-]/g, "_")
  switch (source.kind) {
    case "rank":
      return `rank-${source.rank}.log`
    case "relay":
      return `relay-${safe(source.host)}.log`
    case "agent":
      return `agent-${safe(source.host)}.log`
    case "other":
      return "launcher.log"
  }
}

const thousands = (value: number): string => Math.round(value).toLocaleString("en-US")

const metricText = (metrics: Readonly<Record<string, number>>): string =>
  // A metric's name is a rank's text.
  Object.entries(metrics).map(([name, value]) => `${printable(name, 64)} ${Math.abs(value) >= 100 ? value.toFixed(1) : value.toPrecision(3)}`).join(" · ")

/** What the join window waits for: its end, the quorum, or the operator's start (`start: manual`). */
type JoinStage = "window" | "quorum" | "start"

/** HH:MM:SS of this machine's clock. */
const clockTime = (ms: number): string => new Date(ms).toTimeString().slice(0, 8)

/** The window's state at `now`, from the last countdown; undefined before the first. */
const joinWait = (state: RunState, now: number): { stage: JoinStage; windowLeftMs: number; capLeftMs: number; capAt: number } | undefined => {
  if (state.windowRemainingMs === null) return undefined
  // An older launcher's state has only the remainders as of its last update.
  const since = now - state.updatedAt
  const windowLeftMs = Math.max(0, state.windowClosesAt != null ? state.windowClosesAt - now : state.windowRemainingMs - since)
  const capAt = state.hardCapAt ?? state.updatedAt + (state.capRemainingMs ?? 0)
  const capLeftMs = Math.max(0, capAt - now)
  const rule = state.joinRule ?? null
  const quorumIn = rule !== null && state.joinedRanks >= rule.quorum
  // Manual: only the operator closes it, once the quorum is in. Otherwise its end closes it, with a quorum;
  // a window still open past its end has none.
  const stage: JoinStage = rule?.start === "manual" ? (quorumIn ? "start" : "quorum") : windowLeftMs > 0 ? "window" : "quorum"
  return { stage, windowLeftMs, capLeftMs, capAt }
}

const seconds = (ms: number) => Math.ceil(ms / 1000)

/** The join window's line: who has joined, and what it waits for until when. */
const waitingLine = (state: RunState, now: number): string => {
  const joined = `joined ${state.joinedRanks}/${state.world} ranks on ${state.joinedHosts}/${state.hosts.length} hosts`
  const wait = joinWait(state, now)
  if (wait === undefined) return joined
  const until = `until the hard cap at ${clockTime(wait.capAt)} (${seconds(wait.capLeftMs)} s)`
  switch (wait.stage) {
    case "window":
      return `${joined}, window ${seconds(wait.windowLeftMs)} s left`
    case "quorum": {
      const rule = state.joinRule ?? null
      const closed = rule?.start === "manual" ? "" : "window closed: "
      const quorum = rule === null ? "more ranks" : `the quorum (${state.joinedRanks}/${rule.quorum} ranks)`
      return `${joined}; ${closed}waiting for ${quorum} ${until}`
    }
    case "start":
      return `${joined}; waiting for the operator's start (${invokedAs("status")} --start) ${until}`
  }
}

/** The live line for a state; undefined when there is nothing to show. */
export const liveLine = (state: RunState, now: number): string | undefined => {
  switch (state.phase) {
    case "waiting":
      return waitingLine(state, now)
    case "forming": {
      const running = state.ranks.filter((rank) => rank.state === "running").length
      return `starting ranks: ${running}/${state.ranks.length} running`
    }
    case "training": {
      const training = state.training
      const dead = state.ranks.filter((rank) => rank.state === "dead").length
      const alive = state.ranks.filter((rank) => rank.state === "running").length
      const ranks = `${alive}/${state.ranks.length} ranks${dead > 0 ? ` (${dead} dead)` : ""}`
      if (training === null) return `training · ${ranks}`
      const share = training.datasetSize > 0 ? training.samplesDone / training.datasetSize : 0
      const width = 20
      const filled = Math.min(width, Math.round(share * width))
      const bar = `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${Math.floor(share * 100)}%`
      const rate = training.samplesPerSec === null ? "" : ` · ${thousands(training.samplesPerSec)} samples/s`
      const metrics = metricText(training.metrics)
      return `epoch ${training.epoch}/${training.epochs} ${bar}${rate}${metrics === "" ? "" : ` · ${metrics}`} · ${ranks}`
    }
    default:
      return undefined
  }
}

/**
 * The end-of-run table: the cohort's inventory (each host's devices as its agent named them), then per host
 * and rank, device, how it ended, restarts, run time.
 */
export const summaryTable = (state: RunState): string => {
  if (state.ranks.length === 0) return ""
  // Short, like every cell: a lost host's rank says `host lost`, a silent one how long (exitCell).
  const exitOf = (rank: RunState["ranks"][number]) => {
    const exit = exitCell(rank, state.deaths)
    return exit === null ? (rank.state === "dead" ? "lost" : "–") : exit.replace(/^status /, "").replace(/^signal /, "")
  }
  const runTime = (startedAt: number | null, endedAt: number | null) => {
    if (startedAt === null) return "–"
    const seconds = ((endedAt ?? state.updatedAt) - startedAt) / 1000
    return `${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)} s`
  }
  const rows = [...state.ranks]
    .sort((a, b) => a.host.localeCompare(b.host) || a.rank - b.rank)
    .map((rank) => [rank.host, String(rank.rank), rank.device, exitOf(rank), String(rank.restarts), runTime(rank.startedAt, rank.endedAt)])
  const header = ["host", "rank", "device", "exit", "restarts", "run time"]
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)))
  const format = (row: ReadonlyArray<string>) => row.map((cell, column) => (column === 1 || column >= 4 ? cell.padStart(widths[column]!) : cell.padEnd(widths[column]!))).join("  ").trimEnd()
  const inventory = state.inventory ?? []
  // The recovery figures, when the policy carried a death: how fast it was known and recovered from.
  const recovery = state.recovery ?? RecoveryFigures.empty
  const figures = recovery.deaths.length === 0
    ? undefined
    : RecoveryFigures.describeFigures(recovery, effectiveTrainingAt(state), state.phase === "failed")
  return [
    ...(inventory.length === 0 ? [] : [`inventory: ${Inventory.describe(inventory)}`]),
    format(header),
    ...rows.map(format),
    ...(figures === undefined ? [] : [`failures: ${figures}`])
  ].join("\n")
}

export const make = (options: RunConsoleOptions = {}): RunConsole => {
  // The process's streams are written once per turn of the event loop (`TurnWriter`).
  const turns = options.write === undefined ? TurnWriter.forProcess() : undefined
  const write = turns?.write ?? options.write!
  const now = options.now ?? Date.now
  const live = options.stderrIsTty ?? process.stderr.isTTY === true
  const colour = (options.stdoutIsTty ?? process.stdout.isTTY === true) && process.env.NO_COLOR === undefined
  const hostColours = new Map<string, number>()
  const kept = new Map<number, Array<string>>()
  let state: RunState | undefined
  let shown: string | undefined
  let lastDraw = Number.NEGATIVE_INFINITY
  let redraw: ReturnType<typeof setTimeout> | undefined
  let lastJoinLine = now()
  /** What the last printed join line said the window waits for: a change is news at once. */
  let lastJoinStage: JoinStage = "window"
  let closed = false
  if (options.logDir !== undefined) mkdirSync(options.logDir, { recursive: true, mode: 0o700 })
  /** Log files made this run: 0600, never through a link (they hold the ranks' output). */
  const made = new Set<string>()

  const toFile = (name: string, text: string) => {
    if (options.logDir === undefined) return
    try {
      const path = join(options.logDir, name)
      if (!made.has(path)) {
        preparePrivateAppend(path)
        made.add(path)
      }
      appendPrivate(path, `${text}\n`)
    } catch {
      // A full disk must not stop the run; the terminal still has the line.
    }
  }

  const clear = () => {
    if (shown !== undefined) write("\r\x1b[2K", "stderr")
  }
  const draw = () => {
    if (!live || closed || state === undefined) return
    const text = liveLine(state, now())
    // A pseudo-terminal without a size reports 0 columns.
    const columns = (process.stderr.columns ?? 0) >= 20 ? process.stderr.columns : 120
    const fitted = text === undefined ? undefined : text.length > columns - 1 ? `${text.slice(0, columns - 2)}…` : text
    if (fitted === shown) return
    clear()
    if (fitted !== undefined) write(fitted, "stderr")
    shown = fitted
    lastDraw = now()
  }
  /** Print a whole line above the live line. */
  const print = (text: string, stream: "stdout" | "stderr") => {
    const hadLive = shown !== undefined
    clear()
    shown = undefined
    write(`${text}\n`, stream)
    if (hadLive) draw()
  }

  const tinted = (line: string, host: string, prefixLength: number) => {
    if (!colour) return line
    let code = hostColours.get(host)
    if (code === undefined) hostColours.set(host, code = PALETTE[hostColours.size % PALETTE.length]!)
    return `\x1b[${code}m${line.slice(0, prefixLength)}\x1b[0m${line.slice(prefixLength)}`
  }

  return {
    output: (printed, stream) => {
      const line = options.rawOutput === true ? printed : printableLine(printed)
      const { body, source } = sourceOf(line)
      toFile(fileName(source), body)
      if (source.kind === "rank") {
        if (options.ranks !== undefined && !options.ranks.has(source.rank)) return
        if (options.quiet === true) {
          const lines = kept.get(source.rank) ?? []
          lines.push(line)
          if (lines.length > KEPT_LINES) lines.shift()
          kept.set(source.rank, lines)
          return
        }
        return print(tinted(line, source.host, line.length - body.length), stream)
      }
      // Quiet: a remote agent's warnings and errors are cohort's own lines too; the rest is chatter.
      if (options.quiet === true && source.kind !== "other" && !(source.kind === "agent" && /^(warning|error): /.test(body))) return
      if (source.kind === "relay" || source.kind === "agent") return print(tinted(line, source.host, line.length - body.length), stream)
      print(line, stream)
    },
    cohortLine: (text) => {
      // Escaped too: a verdict quotes what a rank's code threw, and a warning what a peer sent.
      const lines = text.replace(/\n$/, "").split("\n").map(printableLine)
      // The in-process agent's lines come this way (logger.ts says them as `cohort agent HOST:`): its agent-HOST.log.
      // The first line says whose message it is: a later one is the message's text (what a rank threw), never a prefix.
      const { body, source } = sourceOf(lines[0]!)
      if (source.kind === "agent") lines.forEach((line, index) => toFile(fileName(source), index === 0 ? body : line))
      else for (const line of lines) toFile("launcher.log", line)
      print(lines.join("\n"), "stderr")
    },
    onEvent: (event, next) => {
      state = next
      if (event.event === "rank_exited" && !event.clean && options.quiet === true) {
        const lines = kept.get(event.rank) ?? []
        kept.delete(event.rank)
        if (lines.length > 0) {
          print(`cohort: rank ${event.rank} ended with ${event.exit}; its last ${lines.length} line(s):`, "stderr")
          for (const line of lines) print(line, "stderr")
        }
      }
      if (!live) {
        // No live line: the join window's count now and then, so a long wait is not silent.
        if (event.event === "join_window" && next.phase === "waiting") {
          const stage = joinWait(next, now())?.stage ?? "window"
          if (stage === lastJoinStage && now() - lastJoinLine < JOIN_LINE_EVERY_MS) return
          lastJoinLine = now()
          lastJoinStage = stage
          const text = liveLine(next, now())
          if (text !== undefined) print(`cohort: ${text}`, "stderr")
        }
        return
      }
      if (now() - lastDraw >= REDRAW_EVERY_MS) draw()
      else if (redraw === undefined) {
        redraw = setTimeout(() => {
          redraw = undefined
          draw()
        }, REDRAW_EVERY_MS)
      }
    },
    lastState: () => state,
    close: () => {
      clearTimeout(redraw)
      clear()
      shown = undefined
      closed = true
      turns?.flush()
    }
  }
}
