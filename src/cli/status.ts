/**
 * `bun run status [HOST:PORT] [--run NAME] [--json] [--watch] [--start]`: a
 * running launcher's state, read from its status endpoint (`GET /state.json`
 * on its one port), as a table (statusTable.ts) or as the JSON served.
 * `--start` closes a `start: manual` join window instead (`POST /start`, with
 * the start token the launcher keeps in its 0600 registry file).
 *
 * Without HOST:PORT it finds the run this checkout is running: the launcher
 * keeps `.cohort/runs/<run>.json` (address, port, pid) while it runs.
 *
 * Exit status: 0 shown (with --watch: the run ended, or its launcher went
 * away after answering), 1 nothing answered or no run found, 2 bad
 * arguments, 130 interrupted. Nothing heavy is loaded: it answers at once.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { hasEnded, readState, render } from "./statusTable.ts"
import type { RunState } from "../actors/launcher/RunView.ts"

const usage = `usage: bun run status [HOST:PORT] [--run NAME] [--json] [--watch] [--start]

Shows a running launcher's state: phase, training, every rank, the deaths, the verdict.

  HOST:PORT   the launcher's port, as its "listening on HOST:PORT" line prints it
              (its status URL works too). Without it: the run started from this
              checkout, found in .cohort/runs/
  --run NAME  which run, when several run from this checkout
  --json      the state as the launcher serves it (GET /state.json)
  --watch     refresh every second until the run ends
  --start     close a start: manual join window (POST /start with the run's start
              token, read from .cohort/runs/: only the launch's user can)
  -h, --help  show this help

Exit status: 0 shown, 1 no launcher answered or no run found, 2 bad arguments, 130 interrupted.
Example: bun run status 127.0.0.1:41235 --watch`

const FETCH_TIMEOUT_MS = 2_000
const WATCH_INTERVAL_MS = 1_000
/** Failures in a row, other than a refused connection, before a watched launcher counts as gone. */
const GONE_AFTER_FAILURES = 3
const CLEAR_SCREEN = "\x1b[H\x1b[2J"
const WHERE_TO_LOOK = `check that the launcher runs and that the address is the one its "listening on HOST:PORT" line prints`

const say = (message: string) => process.stderr.write(`cohort status: ${message}\n`)

const fail = (code: 1 | 2, message: string): never => {
  say(message)
  process.exit(code)
}

const badArguments = (message: string): never => fail(2, `${message}\n\n${usage}`)

interface Endpoint {
  readonly host: string
  readonly port: number
}

const isPort = (text: string) => /^\d{1,5}$/.test(text) && Number(text) >= 1 && Number(text) <= 65535

/** HOST:PORT, [IPv6]:PORT, a bare PORT (this machine), or the status URL the launcher prints. */
const parseEndpoint = (text: string): Endpoint | undefined => {
  if (isPort(text)) return { host: "127.0.0.1", port: Number(text) }
  if (/^https?:\/\//.test(text)) {
    try {
      const url = new URL(text)
      return url.port !== "" && isPort(url.port) ? { host: url.hostname.replace(/^\[(.*)\]$/, "$1"), port: Number(url.port) } : undefined
    } catch {
      return undefined
    }
  }
  const match = /^(?:\[([^\]]+)\]|([^:\s\[\]]+)):(\d+)$/.exec(text)
  if (match === null || !isPort(match[3]!)) return undefined
  return { host: match[1] ?? match[2]!, port: Number(match[3]) }
}

/** A launcher bound to every interface is reached on this machine's loopback. */
const reachable = (endpoint: Endpoint): Endpoint =>
  endpoint.host === "0.0.0.0" ? { ...endpoint, host: "127.0.0.1" } : endpoint.host === "::" ? { ...endpoint, host: "::1" } : endpoint

const addressOf = (endpoint: Endpoint) => (endpoint.host.includes(":") ? `[${endpoint.host}]:${endpoint.port}` : `${endpoint.host}:${endpoint.port}`)

// ---- arguments

const args = process.argv.slice(2)
if (args.includes("--help") || args.includes("-h")) {
  console.log(usage)
  process.exit(0)
}
let json = false
let watch = false
let start = false
let runName: string | undefined
const positional: Array<string> = []
for (let i = 0; i < args.length; i++) {
  const arg = args[i]!
  if (arg === "--json") json = true
  else if (arg === "--watch") watch = true
  else if (arg === "--start") start = true
  else if (arg === "--run") {
    const value = args[++i]
    if (value === undefined || value.startsWith("-")) badArguments("--run needs a run name")
    runName = value
  } else if (arg.startsWith("-")) badArguments(`unknown option ${arg}`)
  else positional.push(arg)
}
if (positional.length > 1) badArguments(`one launcher at a time, got ${positional.join(", ")}`)
if (positional.length === 1 && runName !== undefined) badArguments("give HOST:PORT or --run NAME, not both")
const given = positional[0] === undefined ? undefined : parseEndpoint(positional[0])
if (positional[0] !== undefined && given === undefined) badArguments(`${positional[0]} is not HOST:PORT (e.g. 127.0.0.1:41235)`)

// ---- finding the run when no address is given

interface RunFile {
  readonly run: string
  readonly address: string
  readonly port: number
  readonly pid: number
  readonly startedAt: number
  readonly startToken?: string
}

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: it exists, as another user's process.
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

const readRunFiles = (dir: string): Array<RunFile> => {
  let names: Array<string>
  try {
    names = readdirSync(dir).filter((name) => name.endsWith(".json"))
  } catch {
    return []
  }
  return names.flatMap((name) => {
    try {
      const file = JSON.parse(readFileSync(join(dir, name), "utf8")) as Partial<RunFile>
      // A pid of 0 or below would signal a whole process group: such a file is not one of ours.
      const valid = typeof file.run === "string" && typeof file.address === "string" && typeof file.port === "number" &&
        Number.isInteger(file.pid) && file.pid! > 0 && typeof file.startedAt === "number"
      return valid ? [file as RunFile] : []
    } catch {
      // Half-written, or not ours: another file may still name the run.
      return []
    }
  })
}

const findRun = (): { readonly endpoint: Endpoint; readonly origin: string; readonly startToken: string | undefined } => {
  const dir = join(process.cwd(), ".cohort", "runs")
  const files = readRunFiles(dir)
  const running = files.filter((file) => isAlive(file.pid)).sort((a, b) => b.startedAt - a.startedAt)
  const hint = `give the launcher's HOST:PORT (its "listening on HOST:PORT" line prints it)`
  let chosen: RunFile | undefined
  if (runName !== undefined) {
    chosen = running.find((file) => file.run === runName)
    if (chosen === undefined) {
      const stale = files.find((file) => file.run === runName)
      if (stale !== undefined) fail(1, `run ${runName} is not running here: its launcher (pid ${stale.pid}) is gone`)
      const others = running.length > 0 ? ` (running: ${running.map((file) => file.run).join(", ")})` : ""
      fail(1, `no run ${runName} is running from ${process.cwd()}${others}; ${hint}`)
    }
  } else {
    chosen = running[0]
    if (chosen === undefined) fail(1, `no running launcher found in ${dir}; ${hint}`)
    if (running.length > 1) {
      say(`${running.length} runs are running here (${running.map((file) => file.run).join(", ")}): showing ${chosen!.run}, the newest; choose with --run NAME`)
    }
  }
  return { endpoint: { host: chosen!.address, port: chosen!.port }, origin: ` (run ${chosen!.run}, from .cohort/runs/)`, startToken: chosen!.startToken }
}

if (start && given !== undefined) badArguments("--start finds the run in .cohort/runs/ (its token is there): give --run NAME, not HOST:PORT")
const { endpoint, origin, startToken } = given !== undefined ? { endpoint: given, origin: "", startToken: undefined } : findRun()
const target = reachable(endpoint)
const address = addressOf(target)
const url = `http://${address}/state.json`

// ---- asking the launcher

type Answer =
  | { readonly kind: "state"; readonly state: RunState; readonly body: unknown }
  /** 503: the launcher is there, its run has published nothing yet. */
  | { readonly kind: "starting" }
  /** Nothing (usable) answered; `refused` means no one listens there at all. */
  | { readonly kind: "silent"; readonly why: string; readonly refused: boolean }

const ask = async (): Promise<Answer> => {
  let response: Response
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS), redirect: "manual" })
  } catch (error) {
    const { name, code, message } = error as { name?: string; code?: string; message?: string }
    if (name === "TimeoutError" || name === "AbortError") {
      return { kind: "silent", why: `${address} did not answer within ${FETCH_TIMEOUT_MS / 1000} s`, refused: false }
    }
    if (code === "ConnectionRefused" || code === "ECONNREFUSED") {
      return { kind: "silent", why: `nothing listens on ${address} (connection refused)`, refused: true }
    }
    if (code === "ECONNRESET") return { kind: "silent", why: `${address} closed the connection without answering`, refused: false }
    if (/malformed/i.test(code ?? "")) return { kind: "silent", why: `${address} answered, but not over HTTP`, refused: false }
    return { kind: "silent", why: `no HTTP answer from ${address} (${code ?? message ?? String(error)})`, refused: false }
  }
  if (response.status === 503) {
    await response.body?.cancel()
    return { kind: "starting" }
  }
  const notCohort = (what: string): Answer => ({ kind: "silent", why: `${address} answered ${what}, not a cohort run state`, refused: false })
  if (response.status !== 200) {
    await response.body?.cancel()
    return notCohort(`HTTP ${response.status}`)
  }
  let body: unknown
  try {
    body = await response.json()
  } catch {
    return notCohort("something that is not JSON")
  }
  const state = readState(body)
  return state === undefined ? notCohort("JSON") : { kind: "state", state, body }
}

const startingMessage = `the run at ${address} is still starting: it has no state to show yet`

const show = (answer: Extract<Answer, { kind: "state" }>, fitScreen: boolean): string =>
  json
    ? `${JSON.stringify(answer.body, null, 2)}\n`
    : render(answer.state, {
      now: Date.now(),
      // Less the watch's own two lines, and one so the cursor's line does not scroll the top away.
      fitLines: fitScreen ? (process.stdout.rows ?? 40) - 3 : undefined
    })

/** All of it written before the process may exit: a large table to a pipe takes more than one write. */
const out = async (text: string) => {
  await Bun.write(Bun.stdout, text)
}

// Ctrl-C: the user is done looking.
process.on("SIGINT", () => process.exit(130))

const once = async (): Promise<number> => {
  const answer = await ask()
  if (answer.kind === "starting") return fail(1, `${startingMessage}; try again in a moment, or use --watch`)
  if (answer.kind === "silent") return fail(1, `${answer.why}${origin}; ${WHERE_TO_LOOK}`)
  await out(show(answer, false))
  return 0
}

const watchLoop = async (): Promise<number> => {
  const tty = process.stdout.isTTY === true
  let answered = false
  let shownState = false
  let failures = 0
  let frames = 0
  const frame = async (body: string) => {
    if (tty) await out(`${CLEAR_SCREEN}cohort status ${address} · every ${WATCH_INTERVAL_MS / 1000} s · ${new Date().toTimeString().slice(0, 8)} · Ctrl-C to stop\n\n${body}`)
    else await out(`${frames > 0 ? "\n" : ""}${body}`)
    frames += 1
  }
  let lastStarting = false
  while (true) {
    const began = performance.now()
    const answer = await ask()
    if (answer.kind === "state") {
      answered = true
      shownState = true
      failures = 0
      lastStarting = false
      await frame(show(answer, tty))
      if (hasEnded(answer.state)) return 0
    } else if (answer.kind === "starting") {
      answered = true
      failures = 0
      // A pipe gets the news once, not once a second.
      if (tty || !lastStarting) await frame(`${startingMessage}; waiting\n`)
      lastStarting = true
    } else {
      if (!answered) return fail(1, `${answer.why}${origin}; ${WHERE_TO_LOOK}`)
      failures += 1
      // A closed port is final; a slow answer may be a busy launcher, so it gets a few tries.
      if (answer.refused || failures >= GONE_AFTER_FAILURES) {
        say(shownState ? "the launcher is gone; last state above" : `the launcher is gone (${answer.why})`)
        return 0
      }
    }
    await Bun.sleep(Math.max(0, WATCH_INTERVAL_MS - (performance.now() - began)))
  }
}

/** POST /start with the run's token: 0 armed, 1 refused or unanswered. */
const arm = async (): Promise<number> => {
  if (startToken === undefined) return fail(1, `the run's registry file has no start token${origin}: its launcher predates --start`)
  try {
    const response = await fetch(`http://${address}/start`, {
      method: "POST",
      headers: { Authorization: `Bearer ${startToken}` },
      signal: AbortSignal.timeout(FETCH_TIMEOUT_MS)
    })
    const body = (await response.json().catch(() => ({}))) as { error?: string }
    if (response.status === 200) {
      say(`armed the start of the join window${origin}`)
      return 0
    }
    return fail(1, `the launcher refused the start (${response.status}): ${body.error ?? "no reason given"}`)
  } catch (error) {
    return fail(1, `no answer from ${address}${origin}: ${(error as Error).message}; ${WHERE_TO_LOOK}`)
  }
}

process.exit(start ? await arm() : watch ? await watchLoop() : await once())
