/**
 * `bun run status [HOST:PORT] [--run ID] [--json] [--watch] [--start]`: a
 * running launcher's state, read from its status endpoint (`GET /state.json`
 * on its one port), as a table (statusTable.ts) or as the JSON served.
 * `--start` closes a `start: manual` join window instead (`POST /start`, with
 * the start token the launcher keeps in its 0600 registry file).
 *
 * The state needs the run's page token (StatusBoard), sent in a header. A
 * run found in .cohort/runs/ has it in its entry (its page URL carries it).
 * For an address given, it is the `?token=` of the page URL given (which
 * other local users can read in this process's command line while it runs),
 * else `COHORT_PAGE_TOKEN`, else the entry of this checkout's run on that
 * port.
 *
 * Without HOST:PORT it finds the runs this checkout is running: each
 * launcher keeps `.cohort/runs/<id>.json` (id `<name>-<pid>`, address, port,
 * pid, page) while it runs (RunRegistry.ts). One running: it is shown.
 * Several: they are listed, and `--run ID` (or a name only one of them has)
 * chooses. Entries of launchers that are gone are skipped.
 *
 * `--watch` follows the run's own stream (`GET /events`), which ends with
 * the verdict: the final state is shown, then how the run ended, and it
 * exits. A launcher without the stream is asked every second instead.
 *
 * Exit status: 0 shown (with --watch: the run ended, or its launcher went
 * away after answering), 1 nothing answered or no run found, 2 bad
 * arguments (several runs and none chosen, for --json, --watch and
 * --start), 130 interrupted. Nothing of the launcher is loaded, only the
 * state's Schema (RunStateSchema.ts) once there is a launcher to ask: it
 * answers at once.
 */
import { join } from "node:path"
import type { RunState } from "../launcher/view/RunView.ts"
import { isLive, readEntries, type RunEntry } from "../launcher/run/RunEntries.ts"
import { didYouMean } from "../config/reading/DidYouMean.ts"
import { invokedAs } from "../kernel/ProgramName.ts"

/** `bun run status`, or `cohort status` installed: the usage and the hints say it as the user ran it. */
const invoked = invokedAs("status")

const usage = `usage: ${invoked} [HOST:PORT] [--run ID] [--json] [--watch] [--start]

Shows a running launcher's state: phase, training, every rank, the deaths, the verdict.

  HOST:PORT   the launcher's port, as its "listening on HOST:PORT" line prints it
              (its page URL works too). Without it: the run started from this
              checkout, found in .cohort/runs/ (several: they are listed)
  --run ID    which run, when several run from this checkout: its id, as the
              launcher's first line prints it (name-pid), or its name
  --json      the state as the launcher serves it (GET /state.json)
  --watch     follow the run until it ends, then say how it ended
  --start     close a start: manual join window (POST /start with the run's start
              token, read from .cohort/runs/: only the launch's user can)
  -h, --help  show this help

The run's page token: a run of this checkout has it in .cohort/runs/. With an address,
it is the page URL's ?token= (other local users can read a command line: prefer
COHORT_PAGE_TOKEN), else COHORT_PAGE_TOKEN, else the entry of this checkout's run on that port.

Exit status: 0 shown, 1 no launcher answered or no run found, 2 bad arguments, 130 interrupted.
Example: ${invoked} 127.0.0.1:41235 --watch`

const FETCH_TIMEOUT_MS = 2_000
const WATCH_INTERVAL_MS = 1_000
/** A live `/events` stream sends a keep-alive every 15 s: this long without a byte, it is stuck. */
const STREAM_SILENCE_MS = 20_000
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
  /** The page token a page URL carried (`?token=`). */
  readonly token?: string | undefined
}

const isPort = (text: string) => /^\d{1,5}$/.test(text) && Number(text) >= 1 && Number(text) <= 65535

/** HOST:PORT, [IPv6]:PORT, a bare PORT (this machine), or the status URL the launcher prints. */
const parseEndpoint = (text: string): Endpoint | undefined => {
  if (isPort(text)) return { host: "127.0.0.1", port: Number(text) }
  if (/^https?:\/\//.test(text)) {
    try {
      const url = new URL(text)
      return url.port !== "" && isPort(url.port)
        ? { host: url.hostname.replace(/^\[(.*)\]$/, "$1"), port: Number(url.port), token: url.searchParams.get("token") ?? undefined }
        : undefined
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
    if (value === undefined || value.startsWith("-")) badArguments("--run needs a run id (name-pid) or name")
    runName = value
  } else if (arg.startsWith("-")) badArguments(`unknown option ${arg}${didYouMean(arg, ["--run", "--json", "--watch", "--start", "--help"])}`)
  else positional.push(arg)
}
if (positional.length > 1) badArguments(`one launcher at a time, got ${positional.join(", ")}`)
if (positional.length === 1 && runName !== undefined) badArguments("give HOST:PORT or --run ID, not both")
const given = positional[0] === undefined ? undefined : parseEndpoint(positional[0])
if (positional[0] !== undefined && given === undefined) badArguments(`${positional[0]} is not HOST:PORT (e.g. 127.0.0.1:41235)`)

// ---- finding the run when no address is given

/** A registry entry (RunEntries reads them without loading the launcher's modules: status answers at once). */
type RunFile = RunEntry

const readRunFiles = (dir: string): Array<RunFile> => readEntries(dir).map(({ entry }) => entry)

/** Whether its launcher still runs; another host's cannot be told. */
const isAlive = (file: RunFile): boolean => isLive(file)

/** An older launcher's entry has no start token. */
const tokenOf = (file: RunFile): string | undefined => (file.startToken === "" ? undefined : file.startToken)

/** The page token in the entry's page URL (`…/?token=…`); an older launcher's page has none. */
const pageTokenOf = (file: RunFile): string | undefined => {
  try {
    return new URL(file.page).searchParams.get("token") ?? undefined
  } catch {
    return undefined
  }
}

const runsDir = () => join(process.cwd(), ".cohort", "runs")

/** The page token of the live run of this checkout that listens on `endpoint`'s port, if there is one. */
const pageTokenAt = (endpoint: Endpoint): string | undefined => {
  const matches = readRunFiles(runsDir()).filter((file) => file.port === endpoint.port && isAlive(file))
  // The address too where several runs (of several hosts' launchers sharing the checkout) have the port.
  const chosen = matches.length === 1 ? matches[0] : matches.find((file) => file.address === endpoint.host)
  return chosen === undefined ? undefined : pageTokenOf(chosen)
}

const clockTime = (ms: number) => new Date(ms).toTimeString().slice(0, 8)

/** The running runs as a table: id, name, pid, start, page. */
const runList = (runs: ReadonlyArray<RunFile>): string => {
  const rows = runs.map((file) => [file.id, file.run, String(file.pid), clockTime(file.startedAt), file.port === 0 ? "(starting)" : file.page || `http://${file.address}:${file.port}/`])
  const header = ["ID", "NAME", "PID", "STARTED", "PAGE"]
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)))
  const line = (cells: ReadonlyArray<string>) => cells.map((cell, column) => (column === cells.length - 1 ? cell : cell.padEnd(widths[column]!))).join("  ")
  return [line(header), ...rows.map(line)].join("\n")
}

interface Found {
  readonly endpoint: Endpoint
  readonly origin: string
  readonly startToken: string | undefined
  readonly pageToken: string | undefined
  /** The run's id, when it was found in .cohort/runs/. */
  readonly id?: string
}

const findRun = (): Found => {
  const dir = runsDir()
  const files = readRunFiles(dir)
  const running = files.filter(isAlive).sort((a, b) => b.startedAt - a.startedAt)
  const hint = `give the launcher's HOST:PORT (its "listening on HOST:PORT" line prints it)`
  let chosen: RunFile | undefined
  if (runName !== undefined) {
    // An id is one run; a name may be several runs' (the same file with another job.checkpoint).
    const byId = running.find((file) => file.id === runName)
    const byName = running.filter((file) => file.run === runName)
    if (byId === undefined && byName.length > 1) {
      badChoice(`${byName.length} runs named ${runName} are running here: choose one with --run ID`, byName)
    }
    chosen = byId ?? byName[0]
    if (chosen === undefined) {
      const stale = files.find((file) => file.id === runName || file.run === runName)
      if (stale !== undefined) fail(1, `run ${runName} is not running here: its launcher (pid ${stale.pid}) is gone`)
      const others = running.length > 0 ? ` (running: ${running.map((file) => file.id).join(", ")})` : ""
      fail(1, `no run ${runName} is running from ${process.cwd()}${others}; ${hint}`)
    }
  } else {
    chosen = running[0]
    if (chosen === undefined) fail(1, `no running launcher found in ${dir}; ${hint}`)
    if (running.length > 1) {
      // Which one is meant is the user's to say: a table or a stream of the wrong run would mislead.
      if (!json && !watch && !start) {
        process.stdout.write(`${runList(running)}\n`)
        say(`${running.length} runs are running here: ${invoked} --run ID shows one`)
        process.exit(0)
      }
      badChoice(`${running.length} runs are running here: choose one with --run ID`, running)
    }
  }
  if (chosen!.port === 0 && !watch) {
    fail(1, `run ${chosen!.id} is still starting (it does not listen yet); try again in a moment, or use --watch`)
  }
  return {
    endpoint: { host: chosen!.address, port: chosen!.port },
    origin: ` (run ${chosen!.id}, from .cohort/runs/)`,
    startToken: tokenOf(chosen!),
    pageToken: pageTokenOf(chosen!),
    id: chosen!.id
  }
}

/** A run found before it listens (it registers first): its entry gains the port a moment later. */
const untilListening = async (found: Found): Promise<Found> => {
  const dir = runsDir()
  say(`run ${found.id} is still starting (it does not listen yet); waiting`)
  for (;;) {
    const file = readRunFiles(dir).find((each) => each.id === found.id)
    if (file === undefined || !isAlive(file)) return fail(1, `run ${found.id} ended before it listened`)
    if (file.port !== 0) return { ...found, endpoint: { host: file.address, port: file.port }, startToken: tokenOf(file), pageToken: pageTokenOf(file) }
    await Bun.sleep(100)
  }
}

/** Several runs could be meant: they are listed, and the user chooses (exit 2). */
const badChoice = (message: string, runs: ReadonlyArray<RunFile>): never => {
  say(`${message}\n${runList(runs)}`)
  process.exit(2)
}

if (start && given !== undefined) badArguments("--start finds the run in .cohort/runs/ (its token is there): give --run ID, not HOST:PORT")
const found: Found = given !== undefined
  ? { endpoint: given, origin: "", startToken: undefined, pageToken: given.token ?? (process.env.COHORT_PAGE_TOKEN || undefined) ?? pageTokenAt(given) }
  : findRun()
const { endpoint, origin, pageToken, startToken } = found.endpoint.port === 0 ? await untilListening(found) : found
const target = reachable(endpoint)
const address = addressOf(target)
const url = `http://${address}/state.json`
/** The page token goes in a header: a URL's query ends up in logs. */
const pageHeaders: Record<string, string> = pageToken === undefined ? {} : { Authorization: `Bearer ${pageToken}` }
const NO_TOKEN = `give the page URL the launcher printed (live page: …?token=…) or set COHORT_PAGE_TOKEN, or run ${invoked} in the folder the launch was started from`

// ---- asking the launcher

// Decoding the state loads effect's Schema (about 0.1 s on these machines): loaded once there is a launcher to
// ask, so that --help and a bad argument still answer at once.
const { hasEnded, readState, render } = await import("./statusTable.ts")

type Answer =
  | { readonly kind: "state"; readonly state: RunState; readonly body: unknown }
  /** 503: the launcher is there, its run has published nothing yet. */
  | { readonly kind: "starting" }
  /** Nothing (usable) answered; `refused` means no one listens there at all. */
  | { readonly kind: "silent"; readonly why: string; readonly refused: boolean }

const ask = async (): Promise<Answer> => {
  let response: Response
  try {
    response = await fetch(url, { headers: pageHeaders, signal: AbortSignal.timeout(FETCH_TIMEOUT_MS), redirect: "manual" })
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
  if (response.status === 401 || response.status === 403) {
    await response.body?.cancel()
    return fail(1, pageToken === undefined
      ? `${address} wants the run's page token (HTTP 401)${origin}: ${NO_TOKEN}`
      : `${address} refused the page token (HTTP ${response.status})${origin}: it is not this run's; ${NO_TOKEN}`)
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
  const reading = readState(body)
  if (reading.kind === "not-cohort") return notCohort("JSON")
  if (reading.kind === "unreadable") return unreadable(reading.problem)
  return { kind: "state", state: reading.state, body }
}

/** A run state this version cannot read: shown anyway, it would mislead, and asking again will not change it. */
const unreadable = (problem: string): never =>
  fail(1, `${address} answered a run state this status cannot read (${problem})${origin}: its launcher is of another cohort version; run ${invoked} from the checkout that started it`)

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

/** How the run ended, once it has: the verdict (the table above has it too, but not always on screen). */
const sayEnded = (state: RunState) => say(`${state.run === "" ? "the run" : `run ${state.run}`} is over: ${state.verdict ?? state.phase}`)

/**
 * Follow `GET /events`: `onState` is told each state as the launcher publishes it (at most four a second), and
 * returns true to stop. The launcher ends the stream after its verdict's state. "unavailable": no stream there
 * (an older launcher, or the stream limit reached).
 */
const follow = async (onState: (answer: Extract<Answer, { kind: "state" }>) => Promise<boolean>): Promise<"unavailable" | "ended"> => {
  const controller = new AbortController()
  const headTimer = setTimeout(() => controller.abort(), FETCH_TIMEOUT_MS)
  let response: Response
  try {
    response = await fetch(`http://${address}/events`, { headers: pageHeaders, signal: controller.signal, redirect: "manual" })
  } catch {
    return "unavailable"
  } finally {
    clearTimeout(headTimer)
  }
  if (response.status !== 200 || !(response.headers.get("content-type") ?? "").startsWith("text/event-stream") || response.body === null) {
    await response.body?.cancel()
    return "unavailable"
  }
  const reader = response.body.getReader()
  const decoder = new TextDecoder()
  // A live stream says something at least every 15 s (a keep-alive comment): longer silence is a stuck one.
  let silence: ReturnType<typeof setTimeout> | undefined
  const heard = () => {
    clearTimeout(silence)
    silence = setTimeout(() => controller.abort(), STREAM_SILENCE_MS)
  }
  heard()
  let buffer = ""
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return "ended"
      heard()
      buffer += decoder.decode(value, { stream: true })
      let end: number
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const data = /^event: state\ndata: (.*)$/s.exec(buffer.slice(0, end))
        buffer = buffer.slice(end + 2)
        if (data === null) continue
        let body: unknown
        try {
          body = JSON.parse(data[1]!)
        } catch {
          continue
        }
        const reading = readState(body)
        if (reading.kind === "unreadable") unreadable(reading.problem)
        if (reading.kind === "state" && await onState({ kind: "state", state: reading.state, body })) {
          await reader.cancel().catch(() => {})
          return "ended"
        }
      }
    }
  } catch {
    // Reset, or stuck and aborted: the launcher is asked again below.
    return "ended"
  } finally {
    clearTimeout(silence)
  }
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

  // The stream first: every change as it happens, and the verdict before the port closes (a once-a-second
  // poll often came after it had).
  let latest: Extract<Answer, { kind: "state" }> | undefined
  let latestShown = true
  let lastFrameAt = Number.NEGATIVE_INFINITY
  let pending: ReturnType<typeof setTimeout> | undefined
  let drawing = Promise.resolve()
  const draw = () => {
    clearTimeout(pending)
    pending = undefined
    if (latest === undefined || latestShown) return drawing
    const answer = latest
    latestShown = true
    shownState = true
    lastFrameAt = performance.now()
    drawing = drawing.then(() => frame(show(answer, tty)))
    return drawing
  }
  await follow(async (answer) => {
    answered = true
    latest = answer
    latestShown = false
    const ended = hasEnded(answer.state)
    // At most a frame a second; the last one of a burst is drawn when its second is up.
    if (ended || performance.now() - lastFrameAt >= WATCH_INTERVAL_MS) await draw()
    else pending ??= setTimeout(() => void draw(), lastFrameAt + WATCH_INTERVAL_MS - performance.now())
    return ended
  })
  await draw()
  if (latest !== undefined && hasEnded(latest.state)) {
    sayEnded(latest.state)
    return 0
  }
  // No stream, or it ended without a verdict: ask every second, as an older launcher is asked.
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
      if (hasEnded(answer.state)) {
        sayEnded(answer.state)
        return 0
      }
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
