/**
 * What a live run shows the outside, through the real CLI (real processes,
 * real sockets): three CPU ranks of examples/train.ts under an elastic
 * policy, a join window that waits for an operator's start, and rank 1
 * SIGKILLed mid-run, so the run ends DEGRADED with exit 0.
 * - `GET /metrics`, parsed strictly as Prometheus text 0.0.4 while waiting,
 *   while training and after the death: the key families and their values.
 * - `--events FILE`: JSON lines telling the whole story, in order, with no
 *   view-only (ephemeral) event: the verdict before the cleanup after it;
 *   the world formed with each device's label (`cpu` here), which
 *   /state.json's inventory and the end-of-run table show too.
 * - `GET /events` (SSE): a state at once, more as the run moves, and the
 *   run's end before the stream closes.
 * - The run's own id (`<name>-<pid>`) and a page address one can open, in
 *   its first line and its registry entry; what the manual window waits for;
 *   each checkpoint written, in --events; the dead rank's use cleared.
 * - The end-of-run table and the verdict on stderr; `--log-dir`, `--quiet`.
 * A second, small launch checks `--ranks 0` (with `--log-dir`).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { RunState } from "../src/launcher/view/RunView.ts"
import { fetchState, repoRoot, spawnLaunch } from "./support/launch-scenario.ts"
import { waitFor } from "./support/processes.ts"
import { decodeState } from "./support/run-records.ts"

// ---- a strict reader of the Prometheus text exposition format, version 0.0.4 ----

interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

interface Family {
  readonly name: string
  readonly type: string
  readonly help: string
  readonly samples: Array<Sample>
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/
const FLOAT = /^[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)$/
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"])

const parseValue = (text: string): number | undefined => {
  if (text === "+Inf") return Number.POSITIVE_INFINITY
  if (text === "-Inf") return Number.NEGATIVE_INFINITY
  if (text === "NaN") return Number.NaN
  return FLOAT.test(text) ? Number(text) : undefined
}

/** `{a="x",b="y\"z"}` at the start of `text`: the labels and what follows. */
const parseLabels = (text: string, fail: (why: string) => never): { labels: Record<string, string>; rest: string } => {
  const labels: Record<string, string> = {}
  let at = 1
  while (true) {
    if (text[at] === "}") return { labels, rest: text.slice(at + 1) }
    const name = LABEL_NAME.exec(text.slice(at))?.[0]
    if (name === undefined) fail(`bad label name at ${JSON.stringify(text.slice(at, at + 20))}`)
    if (name in labels) fail(`label ${name} given twice`)
    at += name.length
    if (text[at] !== "=" || text[at + 1] !== "\"") fail(`label ${name}: expected ="…"`)
    at += 2
    let value = ""
    while (text[at] !== "\"") {
      if (at >= text.length || text[at] === "\n") fail(`label ${name}: unterminated value`)
      if (text[at] === "\\") {
        const next = text[at + 1]
        if (next === "\\") value += "\\"
        else if (next === "\"") value += "\""
        else if (next === "n") value += "\n"
        else fail(`label ${name}: bad escape \\${next ?? ""}`)
        at += 2
      } else value += text[at++]
    }
    labels[name] = value
    at += 1
    if (text[at] === ",") at += 1
    else if (text[at] !== "}") fail(`after label ${name}: expected , or }`)
  }
}

const seriesKey = (sample: Sample, without?: string) =>
  `${sample.name}{${Object.keys(sample.labels).filter((key) => key !== without).sort().map((key) => `${key}=${JSON.stringify(sample.labels[key])}`).join(",")}}`

/**
 * Every family by name; throws naming the line for anything the format
 * forbids: a sample without a `# HELP` and `# TYPE` before it, a family's
 * samples split by another's, a bad name, label or value, the same series
 * twice, a negative counter, and histograms whose buckets are not ascending
 * in `le` and non-decreasing, or whose `+Inf` bucket differs from `_count`.
 */
const parseExposition = (text: string): Map<string, Family> => {
  if (!text.endsWith("\n")) throw new Error("exposition: the text must end with a newline")
  const families = new Map<string, Family>()
  const helps = new Map<string, string>()
  const closed = new Set<string>()
  const series = new Set<string>()
  let current: string | undefined
  const switchTo = (name: string) => {
    if (current !== undefined && current !== name) closed.add(current)
    current = name
  }
  const familyOf = (sampleName: string): Family | undefined => {
    const exact = families.get(sampleName)
    if (exact !== undefined && exact.type !== "histogram" && exact.type !== "summary") return exact
    for (const suffix of ["_bucket", "_sum", "_count"]) {
      if (!sampleName.endsWith(suffix)) continue
      const base = families.get(sampleName.slice(0, -suffix.length))
      if (base?.type === "histogram" || (base?.type === "summary" && suffix !== "_bucket")) return base
    }
    return undefined
  }
  text.slice(0, -1).split("\n").forEach((line, index) => {
    const fail = (why: string): never => {
      throw new Error(`exposition line ${index + 1} (${JSON.stringify(line)}): ${why}`)
    }
    if (line.trim() === "") return
    if (line.startsWith("#")) {
      const match = /^#[ \t]+(HELP|TYPE)[ \t]+(\S+)(?:[ \t]+(.*))?$/.exec(line)
      if (match === null) return // any other comment
      const [, keyword, name, rest = ""] = match
      if (METRIC_NAME.exec(name!)?.[0] !== name) fail(`bad metric name ${name}`)
      if (closed.has(name!) || families.get(name!)?.samples.length) fail(`# ${keyword} ${name} after its samples`)
      switchTo(name!)
      if (keyword === "HELP") {
        if (helps.has(name!)) fail(`second # HELP for ${name}`)
        if (/\\(?![\\n])/.test(rest)) fail("bad escape in the docstring")
        helps.set(name!, rest)
      } else {
        if (families.has(name!)) fail(`second # TYPE for ${name}`)
        if (!TYPES.has(rest)) fail(`unknown type ${rest}`)
        families.set(name!, { name: name!, type: rest, help: helps.get(name!) ?? "", samples: [] })
      }
      return
    }
    const name = METRIC_NAME.exec(line)?.[0] ?? fail("a sample must start with a metric name")
    let rest = line.slice(name.length)
    let labels: Record<string, string> = {}
    if (rest.startsWith("{")) ({ labels, rest } = parseLabels(rest, fail))
    const fields = /^[ \t]+(\S+)(?:[ \t]+(-?\d+))?$/.exec(rest) ?? fail("expected a value (and an optional timestamp) after the series")
    const value = parseValue(fields[1]!) ?? fail(`bad value ${fields[1]}`)
    const family = familyOf(name) ?? fail(`sample ${name} has no # TYPE before it`)
    if (!helps.has(family.name)) fail(`family ${family.name} has no # HELP before its samples`)
    if (closed.has(family.name)) fail(`family ${family.name}'s samples are not together`)
    switchTo(family.name)
    const sample: Sample = { name, labels, value }
    const key = seriesKey(sample)
    if (series.has(key)) fail(`series ${key} given twice`)
    series.add(key)
    if (family.type === "counter" && !(value >= 0)) fail(`counter ${name} is ${value}`)
    if (name.endsWith("_bucket") && family.type === "histogram") {
      if (labels.le === undefined) fail("a histogram bucket needs le")
      if (labels.le !== "+Inf" && !FLOAT.test(labels.le)) fail(`bad le ${labels.le}`)
    } else if ("le" in labels && family.type === "histogram") fail("le on a histogram's _sum or _count")
    family.samples.push(sample)
  })
  for (const family of families.values()) {
    if (!helps.has(family.name)) throw new Error(`exposition: ${family.name} has a # TYPE but no # HELP`)
    if (family.type !== "histogram") continue
    const buckets = new Map<string, Array<Sample>>()
    for (const sample of family.samples.filter((s) => s.name === `${family.name}_bucket`)) {
      const key = seriesKey({ ...sample, name: family.name }, "le")
      buckets.set(key, [...(buckets.get(key) ?? []), sample])
    }
    for (const [key, list] of buckets) {
      const bounds = list.map((sample) => parseValue(sample.labels.le!)!)
      for (let i = 1; i < list.length; i++) {
        if (!(bounds[i]! > bounds[i - 1]!)) throw new Error(`exposition: ${key}: le not ascending (${list[i - 1]!.labels.le} then ${list[i]!.labels.le})`)
        if (!(list[i]!.value >= list[i - 1]!.value)) throw new Error(`exposition: ${key}: bucket counts decrease at le=${list[i]!.labels.le}`)
      }
      if (bounds.at(-1) !== Number.POSITIVE_INFINITY) throw new Error(`exposition: ${key}: no +Inf bucket`)
      const { le: _, ...plain } = list[0]!.labels
      const partner = (suffix: string) => family.samples.find((s) => s.name === `${family.name}${suffix}` && seriesKey(s, "le") === seriesKey({ ...s, labels: plain }))
      const count = partner("_count")
      if (count === undefined || partner("_sum") === undefined) throw new Error(`exposition: ${key}: _sum or _count missing`)
      if (count.value !== list.at(-1)!.value) throw new Error(`exposition: ${key}: the +Inf bucket (${list.at(-1)!.value}) is not _count (${count.value})`)
    }
  }
  return families
}

/** The one sample of `family` whose labels include `labels`. */
const valueOf = (families: Map<string, Family>, family: string, labels: Record<string, string> = {}, name = family): number => {
  const found = families.get(family)?.samples.filter((sample) =>
    sample.name === name && Object.entries(labels).every(([key, value]) => sample.labels[key] === value)) ?? []
  if (found.length !== 1) throw new Error(`expected one ${name}${JSON.stringify(labels)}, found ${found.length}`)
  return found[0]!.value
}

// ---- the run ----

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

const RANKS = 3
const VICTIM = 1
const EPOCHS = 8
const DATASET = 240_000

const clusterFile = (dir: string, name: string, extra: { ranks: number; datasetSize: number; epochs: number; manualStart: boolean }) => {
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: ${name}
controller:
  host: 127.0.0.1
  port: 0
${extra.manualStart ? "  join: { start: manual, timeout: 60s }\n" : ""}workers:
  - { host: localhost, devices: ${extra.ranks}, path: ${repoRoot}, env: { OMP_NUM_THREADS: "1" } }
job: { entry: examples/train.ts, dataset_size: ${extra.datasetSize}, epochs: ${extra.epochs}, checkpoint: ${join(dir, "checkpoint.json")} }
failure_policy:
  after_formation:
    elastic: { max_failure: 50% }
  grace: 2s
`)
  return file
}

/**
 * `POST /start` as the launch's user makes it: with the run's start token, from its registry entry
 * (`.cohort/runs/<name>-<pid>.json` under the launch's working directory, the repository root here).
 */
const postStart = async (port: number, run: string, pid: number): Promise<Response> => {
  const file = join(repoRoot, ".cohort", "runs", `${run}-${pid}.json`)
  await waitFor(() => existsSync(file), `the registry entry of run ${run}`, 10_000)
  const { startToken } = JSON.parse(readFileSync(file, "utf8")) as { startToken: string }
  return fetch(`http://127.0.0.1:${port}/start`, { method: "POST", headers: { Authorization: `Bearer ${startToken}` } })
}

const portOf = async (lines: ReadonlyArray<string>): Promise<number> => {
  await waitFor(() => lines.some((line) => /listening on [\d.]+:\d+/.test(line)), "the launcher to listen", 20_000)
  return Number(/listening on [\d.]+:(\d+)/.exec(lines.find((line) => /listening on [\d.]+:\d+/.test(line))!)![1])
}

/** The page token in the page URL of the launcher's `listening on` line (`live page: http://…/?token=…`). */
const pageTokenIn = (lines: ReadonlyArray<string>): string => {
  const token = /live page: http:\/\/[^ ]+\/\?token=([0-9a-f]{32}) ;/.exec(lines.find((line) => /listening on/.test(line)) ?? "")?.[1]
  if (token === undefined) throw new Error(`no page token in the listening line: ${lines.find((line) => /listening on/.test(line))}`)
  return token
}

/** What a request without the page token, or with another, gets back: its status, CORS header and body. */
const refused = async (port: number, path: string, headers: Record<string, string> = {}) => {
  const response = await fetch(`http://127.0.0.1:${port}${path}`, { headers, keepalive: false })
  return { path, status: response.status, cors: response.headers.get("access-control-allow-origin"), body: await response.text() }
}

/** Poll `check` (async) until it yields a value; throws with `what` after `timeoutMs`. */
const until = async <A>(check: () => Promise<A | undefined>, what: string, timeoutMs: number): Promise<A> => {
  const deadline = performance.now() + timeoutMs
  while (performance.now() < deadline) {
    const value = await check()
    if (value !== undefined) return value
    await Bun.sleep(50)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`)
}

const metrics = async (port: number) => {
  const response = await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { Authorization: `Bearer ${run.token}` } })
  return { status: response.status, contentType: response.headers.get("content-type"), text: await response.text() }
}

interface Received {
  readonly ms: number
  readonly event: string
  readonly state: RunState
}

/** `GET /events` read to its end: every SSE event with when it came (ms after the request). */
const readEvents = (port: number) => {
  const started = performance.now()
  const received: Array<Received> = []
  const done = (async () => {
    const response = await fetch(`http://127.0.0.1:${port}/events?token=${run.token}`)
    const contentType = response.headers.get("content-type")
    const decoder = new TextDecoder()
    let pending = ""
    let ending = "end of stream"
    try {
      for await (const chunk of response.body!) {
        pending += decoder.decode(chunk, { stream: true })
        let blank: number
        while ((blank = pending.indexOf("\n\n")) !== -1) {
          const block = pending.slice(0, blank).split("\n")
          pending = pending.slice(blank + 2)
          if (block.every((line) => line.startsWith(":"))) continue // keep-alive comment
          const event = block.find((line) => line.startsWith("event: "))?.slice(7) ?? "message"
          const data = block.filter((line) => line.startsWith("data: ")).map((line) => line.slice(6)).join("\n")
          received.push({ ms: performance.now() - started, event, state: decodeState(JSON.parse(data), `GET /events, event ${received.length + 1} (${event})`) })
        }
      }
    } catch (error) {
      ending = `stream error: ${String(error)}`
    }
    return { status: response.status, contentType, ending, leftover: pending }
  })()
  return { received, done }
}

type Stream = ReturnType<typeof readEvents>
type StreamEnd = Awaited<Stream["done"]>
type Parsed = Map<string, Family>

const run = {} as {
  dir: string
  events: string
  logDir: string
  code: number
  stdout: Array<string>
  stderr: Array<string>
  waiting: { status: number; contentType: string | null; families: Parsed }
  training: Parsed
  afterDeath: Parsed
  sse: Stream
  sseEnd: StreamEnd
  victimPid: number
  launcherPid: number
  port: number
  /** The run's page token, from its first line. */
  token: string
  /** The state's pages asked without the token, with a wrong one, and with the token as the page passes it. */
  unauthorised: Array<Awaited<ReturnType<typeof refused>>>
  authorised: Array<{ path: string; status: number; cors: string | null }>
  checkpoint: string
  /** The run's registry entry as the launcher wrote it, once it listened. */
  entry: Record<string, unknown>
  /** The state once the death is in. */
  deadState: RunState
}

describe("a live run seen from outside: /metrics, --events, /events, the terminal", () => {
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-observe-"))
    dirs.push(dir)
    run.dir = dir
    run.events = join(dir, "events.jsonl")
    run.logDir = join(dir, "logs")
    // Epochs of most of a second: at 60,000 samples a fast machine trained all 8 in under 2 s, before the
    // ranks' first resource samples (every 2 s) were in.
    const file = clusterFile(dir, "observe", { ranks: RANKS, datasetSize: DATASET, epochs: EPOCHS, manualStart: true })
    const launch = spawnLaunch(file, {}, ["--events", run.events, "--log-dir", run.logDir, "--quiet"])
    run.launcherPid = launch.proc.pid
    run.checkpoint = join(dir, "checkpoint.json")
    try {
      const port = await portOf(launch.stderr.lines)
      run.port = port
      run.token = pageTokenIn(launch.stderr.lines)
      run.sse = readEvents(port)
      // Anyone who reaches the port, without the run's page token or with another: nothing of the run.
      run.unauthorised = []
      for (const path of ["/", "/state.json", "/events", "/metrics"]) {
        run.unauthorised.push(await refused(port, path))
        run.unauthorised.push(await refused(port, `${path}?token=${"0".repeat(32)}`))
        run.unauthorised.push(await refused(port, path, { Authorization: `Bearer ${"f".repeat(32)}` }))
      }
      run.authorised = []
      for (const path of ["/", "/state.json", "/metrics"]) {
        const response = await fetch(`http://127.0.0.1:${port}${path}?token=${run.token}`, { keepalive: false })
        await response.body?.cancel()
        run.authorised.push({ path, status: response.status, cors: response.headers.get("access-control-allow-origin") })
      }

      // The window waits for the operator: its countdown runs.
      const waiting = await metrics(port)
      run.waiting = { status: waiting.status, contentType: waiting.contentType, families: parseExposition(waiting.text) }
      await waitFor(() => run.sse.received.length > 0, "the first state on /events", 5_000)
      run.entry = JSON.parse(readFileSync(join(repoRoot, ".cohort", "runs", `observe-${launch.proc.pid}.json`), "utf8")) as Record<string, unknown>
      // Every host in, the window waits for the operator alone, and says so.
      await waitFor(() => launch.stderr.lines.some((line) => line.includes("waiting for the operator's start (bun run status --start)")), "the window to say it waits for the operator", 15_000)
      const start = await postStart(port, "observe", launch.proc.pid)
      expect(start.status).toBe(200)

      // Training, mid-epoch 2, with the ranks' resource samples (every 2 s) and all-reduce latencies in.
      run.training = await until(async () => {
        const state = await fetchState(port)
        if (state?.phase !== "training" || (state.training?.epoch ?? 0) < 2 || (state.training?.samplesDone ?? 0) === 0) return undefined
        const families = parseExposition((await metrics(port)).text)
        const sampled = families.get("cohort_rank_cpu_ratio")?.samples.length ?? 0
        const count = families.get("cohort_allreduce_latency_seconds")?.samples.find((s) => s.name.endsWith("_count"))?.value ?? 0
        return sampled === RANKS && count > 0 ? families : undefined
      }, "training in epoch 2 with every rank's resource sample and some all-reduce latencies", 30_000)

      const victim = (await fetchState(port))?.ranks.find((rank) => rank.rank === VICTIM)?.pid
      if (typeof victim !== "number") throw new Error(`the status endpoint shows no pid for rank ${VICTIM}`)
      run.victimPid = victim
      process.kill(victim, "SIGKILL")
      run.deadState = await until(async () => {
        const state = await fetchState(port)
        return (state?.deaths.length ?? 0) > 0 ? state : undefined
      }, "the death in the state", 15_000)
      // The death is said first (rank_lost), its work handed on a moment later (work_moved, from the coordinator,
      // which hears of the loss from membership): the figures are read once both are in.
      run.afterDeath = await until(async () => {
        const families = parseExposition((await metrics(port)).text)
        const recovered = families.get("cohort_failure_recover_seconds")?.samples.find((sample) => sample.name.endsWith("_count"))?.value ?? 0
        return recovered > 0 ? families : undefined
      }, "the death's recovery in /metrics", 15_000)

      run.code = await launch.proc.exited
      await Promise.all([launch.stdout.done, launch.stderr.done])
      run.sseEnd = await run.sse.done
    } finally {
      launch.proc.kill("SIGKILL")
      run.stdout = launch.stdout.lines
      run.stderr = launch.stderr.lines
    }
  }, 90_000)

  test("the run ends DEGRADED, exit 0", () => {
    expect(run.stderr.at(-1)).toBe(`cohort: run completed DEGRADED (1 of ${RANKS} ranks lost: rank ${VICTIM} of localhost exited with signal SIGKILL)`)
    expect(run.code).toBe(0)
  })

  test("the first line names the run's id and a page one can open, with its page token; its registry entry says the same, and goes with the run", () => {
    const id = `observe-${run.launcherPid}`
    const page = `http://127.0.0.1:${run.port}/?token=${run.token}`
    expect(run.stderr).toContainEqual(
      `cohort: observe: listening on 127.0.0.1:${run.port} (run ${id}; live page: ${page} ; bun run status); waiting for ${RANKS} rank(s) on 1 host(s)`
    )
    expect(run.entry).toMatchObject({ id, run: "observe", address: "127.0.0.1", port: run.port, page, pid: run.launcherPid, checkpoint: run.checkpoint })
    expect(existsSync(join(repoRoot, ".cohort", "runs", `${id}.json`))).toBe(false)
  })

  test("the page, /state.json, /events and /metrics: 401 without the page token and 403 with another, saying nothing of the run; no CORS header", () => {
    const none = {
      status: 401,
      cors: null,
      body: JSON.stringify({
        error: "this run's pages need its page token: open the page URL the launcher printed (live page: …/?token=…), add ?token=<page token>, or send Authorization: Bearer <page token>; bun run status finds it in .cohort/runs/"
      })
    }
    const wrong = { status: 403, cors: null, body: JSON.stringify({ error: "wrong page token for this run" }) }
    expect(run.unauthorised).toEqual(["/", "/state.json", "/events", "/metrics"].flatMap((path) => [
      { path, ...none },
      { path: `${path}?token=${"0".repeat(32)}`, ...wrong },
      { path, ...wrong }
    ]))
    // With the token, as the printed URL carries it: served, and still no CORS header.
    expect(run.authorised).toEqual([{ path: "/", status: 200, cors: null }, { path: "/state.json", status: 200, cors: null }, { path: "/metrics", status: 200, cors: null }])
  })

  test("the manual window says what it waits for (the quorum, then the operator's start), not a countdown stuck at 0", () => {
    const joinLines = run.stderr.filter((line) => /^cohort: joined \d+\/3 ranks/.test(line))
    expect(joinLines.length).toBeGreaterThan(0)
    expect(joinLines.at(-1)).toMatch(/^cohort: joined 3\/3 ranks on 1\/1 hosts; waiting for the operator's start \(bun run status --start\) until the hard cap at \d\d:\d\d:\d\d \(\d+ s\)$/)
    expect(joinLines.filter((line) => line.includes("window 0 s left"))).toEqual([])
  })

  test("a dead rank shows no CPU or memory of its own; its last sample is kept with it", () => {
    const victim = run.deadState.ranks.find((rank) => rank.rank === VICTIM)!
    expect(victim.state).toBe("dead")
    expect(victim.resources).toBeNull()
    expect(victim.lastResources?.rssBytes).toBeGreaterThan(1024 * 1024)
    for (const rank of run.deadState.ranks.filter((each) => each.rank !== VICTIM)) expect(rank.state).toBe("running")
  })

  test("each epoch's line gives the mean of the epoch's reports", () => {
    const epochLines = run.stderr.filter((line) => /^cohort: epoch \d+\/8 done/.test(line))
    expect(epochLines).toHaveLength(8)
    for (const line of epochLines) expect(line).toMatch(/; loss [\d.]+ \(mean of the epoch's reports\)$/)
  })

  test("/metrics: Prometheus text 0.0.4 with the key families, while waiting, training and after the death", () => {
    const { contentType, families: waiting, status } = run.waiting
    expect(status).toBe(200)
    expect(contentType).toBe("text/plain; version=0.0.4; charset=utf-8")
    const types: Record<string, string> = {
      cohort_ranks: "gauge",
      cohort_deaths_total: "counter",
      cohort_restarts_total: "counter",
      cohort_join_window_remaining_seconds: "gauge",
      cohort_frames_total: "counter",
      cohort_bytes_total: "counter",
      cohort_allreduce_latency_seconds: "histogram"
    }
    for (const families of [waiting, run.training, run.afterDeath]) {
      for (const [name, type] of Object.entries(types)) expect({ name, type: families.get(name)?.type }).toEqual({ name, type })
      expect(families.get("cohort_ranks")!.samples.map((sample) => sample.labels.state).sort()).toEqual(["dead", "exited", "running", "starting"])
      expect(valueOf(families, "cohort_restarts_total")).toBe(0)
    }

    // Waiting for the operator: nobody in yet, the window counting down, no traffic, no latencies.
    const window = valueOf(waiting, "cohort_join_window_remaining_seconds")
    expect(window).toBeGreaterThan(0)
    expect(window).toBeLessThanOrEqual(60)
    expect(valueOf(waiting, "cohort_phase", { phase: "waiting" })).toBe(1)
    expect(valueOf(waiting, "cohort_allreduce_latency_seconds", {}, "cohort_allreduce_latency_seconds_count")).toBe(0)
    expect(waiting.has("cohort_rank_cpu_ratio")).toBe(false)

    // Training: every rank running, traffic per channel and direction, latencies, resources per rank.
    const training = run.training
    expect(valueOf(training, "cohort_phase", { phase: "training" })).toBe(1)
    expect(valueOf(training, "cohort_ranks", { state: "running" })).toBe(RANKS)
    expect(valueOf(training, "cohort_deaths_total")).toBe(0)
    for (const family of ["cohort_frames_total", "cohort_bytes_total"]) {
      const channels = new Set(training.get(family)!.samples.map((sample) => sample.labels.channel))
      expect([...channels]).toEqual(expect.arrayContaining(["control", "join"]))
      for (const channel of channels) {
        for (const direction of ["in", "out"]) expect(valueOf(training, family, { channel: channel!, direction })).toBeGreaterThan(0)
      }
    }
    expect(valueOf(training, "cohort_allreduce_latency_seconds", {}, "cohort_allreduce_latency_seconds_count")).toBeGreaterThan(0)
    expect(valueOf(training, "cohort_allreduce_latency_seconds", {}, "cohort_allreduce_latency_seconds_sum")).toBeGreaterThan(0)
    for (const family of ["cohort_rank_cpu_ratio", "cohort_rank_resident_memory_bytes"]) {
      expect(training.get(family)?.type).toBe("gauge")
      const samples = training.get(family)!.samples
      expect(samples.map((sample) => sample.labels.rank).sort()).toEqual(["0", "1", "2"])
      for (const sample of samples) {
        expect(sample.labels).toMatchObject({ host: "localhost", device: "cpu", run: "observe" })
        expect(Number.isFinite(sample.value) && sample.value >= 0).toBe(true)
      }
    }
    for (const rank of ["0", "1", "2"]) expect(valueOf(training, "cohort_rank_resident_memory_bytes", { rank })).toBeGreaterThan(1024 * 1024)
    expect(valueOf(training, "cohort_epoch")).toBeGreaterThanOrEqual(2)

    // After the death: one dead, counted; counters only went up.
    const after = run.afterDeath
    expect(valueOf(after, "cohort_ranks", { state: "dead" })).toBe(1)
    expect(valueOf(after, "cohort_ranks", { state: "running" })).toBe(RANKS - 1)
    expect(valueOf(after, "cohort_deaths_total")).toBe(1)
    for (const family of ["cohort_frames_total", "cohort_bytes_total"]) {
      for (const sample of training.get(family)!.samples) expect(valueOf(after, family, sample.labels)).toBeGreaterThanOrEqual(sample.value)
    }
    const count = (families: Parsed) => valueOf(families, "cohort_allreduce_latency_seconds", {}, "cohort_allreduce_latency_seconds_count")
    expect(count(after)).toBeGreaterThanOrEqual(count(training))

    // The recovery figures: the one death, known and its work handed on within a heartbeat timeout; the run's ETTR.
    for (const name of ["cohort_failure_detect_seconds", "cohort_failure_recover_seconds"]) {
      expect(after.get(name)?.type).toBe("histogram")
      expect(valueOf(training, name, {}, `${name}_count`)).toBe(0)
      expect(valueOf(after, name, {}, `${name}_count`)).toBe(1)
      const seconds = valueOf(after, name, {}, `${name}_sum`)
      expect(seconds).toBeGreaterThanOrEqual(0)
      expect(seconds).toBeLessThan(30)
    }
    const ettr = valueOf(after, "cohort_effective_training_ratio")
    expect(ettr).toBeGreaterThan(0)
    expect(ettr).toBeLessThan(1)
  })

  test("--events: valid JSON lines telling the whole story in order, without the view-only events", () => {
    const lines = readFileSync(run.events, "utf8").split("\n")
    expect(lines.at(-1)).toBe("") // every line whole
    const events = lines.slice(0, -1).map((line, index) => {
      try {
        return JSON.parse(line) as { event: string; at: number } & Record<string, unknown>
      } catch {
        throw new Error(`events line ${index + 1} is not JSON: ${line}`)
      }
    })
    for (const event of events) {
      expect(typeof event.event).toBe("string")
      expect(typeof event.at).toBe("number")
      expect(Number.isFinite(event.at)).toBe(true)
    }
    const ats = events.map((event) => event.at)
    expect(ats).toEqual([...ats].sort((a, b) => a - b))
    expect(events.filter((event) => ["progress", "resources", "join_window"].includes(event.event))).toEqual([])

    const first = (name: string, where: (event: Record<string, unknown>) => boolean = () => true) => {
      const index = events.findIndex((event) => event.event === name && where(event))
      if (index === -1) throw new Error(`no ${name} event${where.length > 0 ? " of the kind expected" : ""} in ${run.events}`)
      return index
    }
    const started = [0, 1, 2].map((rank) => first("rank_started", (event) => event.rank === rank))
    const victimExit = first("rank_exited", (event) => event.rank === VICTIM)
    const lost = first("rank_lost", (event) => (event.ranks as Array<number>).includes(VICTIM))
    // The death's moment (its agent saw the exit) came before cohort knew it; its samples went to the survivors after.
    expect(events[lost]!.diedAt as number).toBeLessThanOrEqual(events[lost]!.at)
    expect(events[lost]!.diedAt as number).toBeGreaterThanOrEqual(events[victimExit]!.at - 5_000)
    const moved = first("work_moved", (event) => event.rank === VICTIM)
    expect(moved).toBeGreaterThan(lost - 1)
    expect((events[moved]!.survivors as Array<number>).sort()).toEqual([0, 1, 2].filter((rank) => rank !== VICTIM))
    // The survivors' next counted step, after the hand-over, from one of them: the death's recovery.
    const stepped = first("survivors_stepped", (event) => (event.ranks as Array<number>).includes(VICTIM))
    expect(stepped).toBeGreaterThan(moved)
    expect([0, 1, 2].filter((rank) => rank !== VICTIM)).toContain(events[stepped]!.rank as number)
    // And the death's figures, said once it recovered: known, then recovered, from its moment.
    const figures = events[first("death_recovered", (event) => event.rank === VICTIM)]!
    expect(figures).toMatchObject({ how: "dropped", kind: "signal", rule: null })
    expect(figures.detectMs as number).toBe(events[lost]!.at - (events[lost]!.diedAt as number))
    // The step's moment is when it was heard; its line may be said as of the line above it (RunJournal), never before.
    expect(figures.recoveredAt as number).toBeLessThanOrEqual(events[stepped]!.at)
    expect(figures.recoveredAt as number).toBeGreaterThanOrEqual(events[lost]!.diedAt as number)
    expect(figures.recoverMs as number).toBe((figures.recoveredAt as number) - (events[lost]!.diedAt as number))
    const story = [
      first("run_started"),
      first("listening"),
      first("host_joined"),
      first("world_formed"),
      Math.max(...started),
      first("cohort_formed"),
      first("epoch_done"),
      victimExit,
      lost,
      events.length - 1
    ]
    expect(story).toEqual([...story].sort((a, b) => a - b))
    expect(Math.min(...started)).toBeGreaterThan(first("world_formed"))
    expect(events[victimExit]).toMatchObject({ exit: "signal SIGKILL", clean: false })
    expect(events[victimExit]!.rank).toBe(VICTIM)
    expect(events[started[VICTIM]!]!.pid).toBe(run.victimPid)
    expect(String(events[lost]!.cause)).toContain("SIGKILL")
    expect(events[0]).toMatchObject({ event: "run_started", run: "observe", hosts: [{ host: "localhost", ranks: RANKS }] })
    expect(events[first("host_joined")]).toMatchObject({ host: "localhost", ranks: [0, 1, 2] })
    expect(events[first("world_formed")]).toMatchObject({
      world: RANKS,
      hosts: [{ host: "localhost", ranks: [0, 1, 2], devices: ["cpu", "cpu", "cpu"], labels: ["cpu", "cpu", "cpu"] }]
    })
    // Epoch 1 before the death, the survivors carry on to the last epoch after it.
    const epochs = events.filter((event) => event.event === "epoch_done").map((event) => event.epoch)
    expect(epochs).toEqual(Array.from({ length: EPOCHS }, (_, i) => i + 1))
    expect(events.slice(lost).some((event) => event.event === "epoch_done")).toBe(true)
    // The others end cleanly.
    for (const rank of [0, 2]) expect(events[first("rank_exited", (event) => event.rank === rank)]).toMatchObject({ exit: "status 0", clean: true })
    // Each consensus checkpoint written is an event: the ranks save one per epoch.
    const checkpoints = events.filter((event) => event.event === "checkpoint")
    expect(checkpoints.map((event) => [event.epoch, event.path, event.reason])).toEqual(Array.from({ length: EPOCHS }, (_, i) => [i + 1, run.checkpoint, "checkpoint"]))
    expect(events[0]).toMatchObject({ id: `observe-${run.launcherPid}`, join: { quorum: RANKS, start: "manual" } })
    // The verdict as soon as it is known, then the cleanup after it (the agents leaving), said as such.
    expect(events.slice(-4).map((event) => event.event)).toEqual(["phase", "verdict", "cleanup_started", "cleanup_done"])
    expect(events.at(-4)).toMatchObject({ phase: "done" })
    expect(events.at(-3)).toMatchObject({
      event: "verdict",
      outcome: "degraded",
      exitCode: 0,
      summary: run.stderr.at(-1)!.replace(/^cohort: /, "")
    })
    expect(events.at(-2)!.detail).toBe("telling the hosts the run is over and waiting up to 3 s for 1 agent(s) to leave")
  })

  test("/events: a state at once, then more as the run moves", () => {
    const { received } = run.sse
    expect(run.sseEnd.status).toBe(200)
    expect(run.sseEnd.contentType).toBe("text/event-stream")
    expect(run.sseEnd.leftover).toBe("")
    expect(received.length).toBeGreaterThan(5)
    expect(received.every((entry) => entry.event === "state")).toBe(true)
    // The first at once (the window waits: nothing else would send it).
    expect(received[0]!.ms).toBeLessThan(1_000)
    expect(received[0]!.state.phase).toBe("waiting")
    expect(received[0]!.state.run).toBe("observe")
    // Never backwards, and the run's progress shows.
    const updated = received.map((entry) => entry.state.updatedAt)
    expect(updated).toEqual([...updated].sort((a, b) => a - b))
    const phases = received.map((entry) => entry.state.phase).filter((phase, i, all) => phase !== all[i - 1])
    expect(phases.slice(0, 1)).toEqual(["waiting"])
    expect(phases).toContain("training")
    const progress = received.flatMap((entry) => entry.state.training === null ? [] : [`${entry.state.training.epoch}:${entry.state.training.samplesDone}`])
    expect(new Set(progress).size).toBeGreaterThan(3)
    const epochs = received.flatMap((entry) => entry.state.training?.epoch ?? [])
    expect(epochs).toEqual([...epochs].sort((a, b) => a - b))
    expect(epochs.at(-1)!).toBeGreaterThan(epochs[0]!)
    expect(received.some((entry) => entry.state.deaths.some((death) => death.rank === VICTIM))).toBe(true)
  })

  test("/events: the run's end (phase done, the verdict, the cleanup over) is sent before the stream closes", () => {
    const last = run.sse.received.at(-1)!.state
    expect({ phase: last.phase, verdict: last.verdict, cleanup: last.cleanup }).toEqual({ phase: "done", verdict: run.stderr.at(-1)!.replace(/^cohort: /, ""), cleanup: null })
  })

  test("/state.json: the cohort's inventory, each device slot as its agent named it, with its rank", () => {
    expect(run.deadState.inventory).toEqual([{
      host: "localhost",
      devices: [{ device: "cpu", label: "cpu", ranks: [0] }, { device: "cpu", label: "cpu", ranks: [1] }, { device: "cpu", label: "cpu", ranks: [2] }]
    }])
  })

  test("stderr: the end-of-run table, one row per rank, the killed rank's exit SIGKILL, then the verdict", () => {
    const header = run.stderr.findIndex((line) => /^host\s+rank\s+device\s+exit\s+restarts\s+run time$/.test(line))
    expect(header).toBeGreaterThanOrEqual(0)
    expect(run.stderr[header - 1]).toBe("inventory: localhost: 3 × cpu")
    // The rows, then the recovery figures of the one death, then the verdict.
    const rows = run.stderr.slice(header + 1, -2)
    expect(run.stderr.at(-2)).toMatch(/^failures: 1 death\(s\): detected in \d+ ms, recovered in \d+ ms; effective training \d+\.\d%$/)
    expect(rows).toHaveLength(RANKS)
    const cells = rows.map((row) => /^(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+([\d.]+ s)$/.exec(row)?.slice(1) ?? row)
    expect(cells.map((cell) => cell.slice(0, 5))).toEqual([
      ["localhost", "0", "cpu", "0", "0"],
      ["localhost", "1", "cpu", "SIGKILL", "0"],
      ["localhost", "2", "cpu", "0", "0"]
    ])
    expect(run.stderr.at(-1)).toMatch(/^cohort: run completed DEGRADED/)
  })

  test("--quiet hides rank lines; --log-dir keeps them per rank, unprefixed, and cohort's own in launcher.log", () => {
    const rankLine = /^\[[^\]]+:r\d+\] /
    expect(run.stdout.filter((line) => rankLine.test(line))).toEqual([])
    // Quiet shows a dead rank's last lines, once it is dead.
    const notice = run.stderr.findIndex((line) => new RegExp(`^cohort: rank ${VICTIM} ended with signal SIGKILL; its last (\\d+) line\\(s\\):$`).test(line))
    expect(notice).toBeGreaterThanOrEqual(0)
    const shown = notice === -1 ? [] : run.stderr.slice(notice + 1, notice + 1 + Number(/its last (\d+)/.exec(run.stderr[notice]!)![1]))
    expect(run.stderr.filter((line, index) => rankLine.test(line) && !(index > notice && index <= notice + shown.length))).toEqual([])

    const log = (name: string) => readFileSync(join(run.logDir, name), "utf8").split("\n").slice(0, -1)
    for (const rank of [0, 1, 2]) {
      expect(existsSync(join(run.logDir, `rank-${rank}.log`))).toBe(true)
      const lines = log(`rank-${rank}.log`)
      expect(lines.length).toBeGreaterThan(0)
      expect(lines.filter((line) => line.startsWith("[") || line.startsWith("cohort: "))).toEqual([])
      expect(lines).toContainEqual(expect.stringMatching(/^epoch 1: loss [\d.]+ accuracy [\d.]+%/))
    }
    expect(log("rank-0.log")[0]).toMatch(new RegExp(`^spirals: ${DATASET} samples × ${EPOCHS} epochs`))
    for (const rank of [0, 2]) expect(log(`rank-${rank}.log`).at(-1)).toMatch(/^final weights checksum [0-9a-f]+$/)
    expect(log(`rank-${VICTIM}.log`).some((line) => line.startsWith("final weights"))).toBe(false)
    // What quiet showed of the dead rank is its file's tail.
    const victim = log(`rank-${VICTIM}.log`)
    expect(shown.map((line) => line.replace(rankLine, ""))).toEqual(victim.slice(victim.length - shown.length))

    const launcher = log("launcher.log")
    expect(launcher.filter((line) => rankLine.test(line))).toEqual([])
    expect(launcher).toContainEqual(expect.stringMatching(/^cohort: world formed: 3 rank\(s\) on 1 host\(s\)/))
    expect(launcher).toContainEqual(expect.stringMatching(/^cohort: epoch 1\/8 done/))
    expect(launcher).toContainEqual(expect.stringMatching(/rank 1 lost/))
    // Every line there is one cohort printed.
    const printed = new Set(run.stderr)
    expect(launcher.filter((line) => !printed.has(line))).toEqual([])
  })
})

test("--ranks 0 shows only rank 0's lines; --log-dir still keeps every rank's", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-observe-ranks-"))
  dirs.push(dir)
  const logDir = join(dir, "logs")
  const file = clusterFile(dir, "ranks", { ranks: 2, datasetSize: 4_000, epochs: 2, manualStart: false })
  const launch = spawnLaunch(file, {}, ["--ranks", "0", "--log-dir", logDir])
  expect(await launch.proc.exited).toBe(0)
  await Promise.all([launch.stdout.done, launch.stderr.done])
  expect(launch.stderr.lines.at(-1)).toBe("cohort: run completed")
  const all = [...launch.stdout.lines, ...launch.stderr.lines]
  const rankLines = all.filter((line) => /^\[[^\]]+:r\d+\] /.test(line))
  expect(rankLines.length).toBeGreaterThan(0)
  expect(rankLines.filter((line) => !line.startsWith("[localhost:cpu:r0] "))).toEqual([])
  expect(launch.stdout.lines.some((line) => /^\[localhost:cpu:r0\] final weights checksum [0-9a-f]+$/.test(line))).toBe(true)
  // The file holds exactly what the terminal showed of rank 0, unprefixed; rank 1's lines are kept too.
  const log = (name: string) => readFileSync(join(logDir, name), "utf8").split("\n").slice(0, -1)
  expect(log("rank-0.log").sort()).toEqual(rankLines.map((line) => line.replace("[localhost:cpu:r0] ", "")).sort())
  expect(log("rank-1.log")).toContainEqual(expect.stringMatching(/^final weights checksum [0-9a-f]+$/))
}, 30_000)

test("the exposition reader is strict: it refuses what the format forbids", () => {
  const ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 3\n# HELP h H.\n# TYPE h histogram\n" +
    "h_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.7\nh_count 2\n# HELP g G.\n# TYPE g gauge\ng NaN\ng{y=\"q\\\"\\\\\\n\"} -Inf\n"
  const families = parseExposition(ok)
  expect(families.get("g")!.samples.map((sample): string | null => sample.labels.y ?? null)).toEqual([null, "q\"\\\n"])
  expect(Number.isNaN(families.get("g")!.samples[0]!.value)).toBe(true)
  expect(families.get("g")!.samples[1]!.value).toBe(Number.NEGATIVE_INFINITY)
  expect(families.get("h")!.samples.map((sample) => sample.name)).toEqual(["h_bucket", "h_bucket", "h_sum", "h_count"])
  const bad: Array<[string, string]> = [
    ["a 1\n", "no # TYPE"],
    ["# TYPE a gauge\na 1\n", "no # HELP"],
    ["# HELP a A.\n# TYPE a gauge\na 1", "end with a newline"],
    ["# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1\n# HELP b B.\n# TYPE b gauge\nb 1\na{x=\"2\"} 1\n", "not together"],
    ["# HELP a A.\n# TYPE a gauge\na{x=\"\\t\"} 1\n", "bad escape"],
    ["# HELP a A.\n# TYPE a gauge\na{x=1} 1\n", "expected"],
    ["# HELP a A.\n# TYPE a gauge\na one\n", "bad value"],
    ["# HELP a A.\n# TYPE a gauge\na 1\na 2\n", "twice"],
    ["# HELP a A.\n# TYPE a counter\na -1\n", "counter"],
    ["# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", "decrease"],
    ["# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", "ascending"],
    ["# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", "is not _count"],
    ["# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "no +Inf"]
  ]
  for (const [text, says] of bad) expect(() => parseExposition(text)).toThrow(says)
})
