/**
 * Running a local cluster from a test through the library entry: a cluster
 * file of the rank fixture in a temp dir, every line the ranks print, the
 * port (for the status endpoint), and the run's result.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { launchEffect } from "../../src/launch.ts"
import { collectLines, pidFiles, waitFor } from "./processes.ts"
import type { RunResult } from "../../src/launcher/run/Launcher.ts"
import type { RunState } from "../../src/launcher/view/StatusBoard.ts"
import { decodeState } from "./run-records.ts"

export const repoRoot = resolve(import.meta.dir, "../..")

export interface ScenarioSpec {
  readonly devices: number
  readonly args: ReadonlyArray<string>
  /** The `failure_policy` section, as YAML lines under it. */
  readonly policy?: string
  readonly name?: string
  /** The `controller.join` section, as a flow mapping. */
  readonly join?: string
}

export interface Scenario {
  readonly dir: string
  readonly file: string
  readonly lines: Array<{ readonly line: string; readonly stream: "stdout" | "stderr" }>
  readonly port: Promise<number>
  /** Every phase the run entered, in order. */
  readonly phases: Array<string>
  readonly result: Promise<RunResult>
  /** The pids the ranks wrote (with the `pidfile` option). */
  readonly pids: () => ReadonlyArray<number>
}

export const clusterFile = (spec: ScenarioSpec, dir: string): string => `
name: ${spec.name ?? "e2e"}
${spec.join === undefined ? "" : `controller:\n  join: ${spec.join}`}
workers:
  - host: localhost
    devices: ${spec.devices}
    path: ${repoRoot}
job:
  entry: test/fixtures/rank-fixture.ts
  args: ${JSON.stringify([...spec.args.map((arg) => arg.replaceAll("$DIR", dir)), `pidfile=${dir}`])}
failure_policy:
${spec.policy ?? "  grace: 2s"}
`

const quiet = process.env.COHORT_TEST_LOGS ? Logger.pretty : Logger.minimumLogLevel(LogLevel.None)

export const startScenario = (spec: ScenarioSpec): Scenario => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-e2e-"))
  const file = join(dir, "cluster.yml")
  writeFileSync(file, clusterFile(spec, dir))
  const lines: Scenario["lines"] = []
  const phases: Array<string> = []
  let listening!: (port: number) => void
  const port = new Promise<number>((resolve) => (listening = resolve))
  const result = Effect.runPromise(
    launchEffect(file, {
      output: (line, stream) => lines.push({ line, stream }),
      onListening: listening,
      onPhase: (phase) => phases.push(phase)
    }).pipe(Effect.provide(quiet))
  )
  return { dir, file, lines, port, phases, result, pids: () => pidFiles(dir) }
}

/**
 * The registry entries (`.cohort/runs/<name>-<pid>.json` under the launch's working directory: the repository
 * root here) of the runs listening on `port`, as the launch's user reads them.
 */
const entriesAt = (port: number): ReadonlyArray<{ run?: string; port?: number; page?: string; startToken?: string }> => {
  const dir = join(repoRoot, ".cohort", "runs")
  return (existsSync(dir) ? readdirSync(dir) : []).filter((name) => name.endsWith(".json")).flatMap((name) => {
    try {
      const read = JSON.parse(readFileSync(join(dir, name), "utf8")) as { run?: string; port?: number; page?: string; startToken?: string }
      return read.port === port ? [read] : []
    } catch {
      return []
    }
  })
}

/** The page token of the run listening on `port`, from the page URL its registry entry holds (as `bun run status` finds it). */
export const pageToken = async (port: number, timeoutMs = 10_000): Promise<string> => {
  const token = () => entriesAt(port).flatMap((entry) => /[?&]token=([0-9a-f]+)/.exec(entry.page ?? "")?.[1] ?? [])[0]
  // The entry gains its page a moment after the port listens.
  await waitFor(() => token() !== undefined, `the registry entry of the run on port ${port}`, timeoutMs)
  return token()!
}

/** The URL of one of the run's pages (`/state.json`, `/events`, `/metrics`, `/`), with the run's page token. */
export const pageUrl = async (port: number, path: string, address = "127.0.0.1"): Promise<string> =>
  `http://${address}:${port}${path}?token=${await pageToken(port)}`

/** The run's `/state.json`; undefined while it cannot be fetched. A state that does not decode fails the caller. */
export const fetchState = async (port: number): Promise<RunState | undefined> => {
  let json: unknown
  try {
    const response = await fetch(await pageUrl(port, "/state.json"))
    if (response.status !== 200) return undefined
    json = await response.json()
  } catch {
    return undefined
  }
  return decodeState(json, `http://127.0.0.1:${port}/state.json`)
}

/** Wait until the status endpoint shows `phase`. */
export const waitForPhase = async (port: number, phase: RunState["phase"], timeoutMs = 10_000): Promise<RunState> => {
  const deadline = performance.now() + timeoutMs
  while (performance.now() < deadline) {
    const state = await fetchState(port)
    if (state?.phase === phase) return state
    await Bun.sleep(10)
  }
  throw new Error(`the run never reached phase ${phase} within ${timeoutMs} ms`)
}

/** `bun src/cli/launch.ts <file>` as a real process, its output collected line by line. */
export const spawnLaunch = (file: string, env: Readonly<Record<string, string>> = {}, flags: ReadonlyArray<string> = []) => {
  const proc = Bun.spawn([process.execPath, "src/cli/launch.ts", file, ...flags], {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdout: "pipe",
    stderr: "pipe"
  })
  return { proc, stdout: collectLines(proc.stdout), stderr: collectLines(proc.stderr) }
}

/** The port a launcher says it listens on, once its `listening on` line is among `lines` (its stderr, as it grows). */
export const listeningPort = async (lines: ReadonlyArray<string>, timeoutMs = 15_000): Promise<number> => {
  const listening = /listening on [\d.]+:(\d+)/
  await waitFor(() => lines.some((line) => listening.test(line)), "the launcher to listen", timeoutMs)
  return Number(listening.exec(lines.find((line) => listening.test(line))!)![1])
}

/**
 * `POST /start` as the launch's user makes it: with the run's start token, read from the launcher's registry
 * file (`.cohort/runs/<run>.json` under the launch's working directory: the repository root here).
 */
export const postStart = async (port: number, run: string): Promise<Response> => {
  // Each run has its own entry, `<name>-<pid>.json`: the one of this run listening on this port.
  const token = () => entriesAt(port).flatMap((read) => (read.run === run && typeof read.startToken === "string" ? [read.startToken] : []))[0]
  await waitFor(() => token() !== undefined, `the registry entry of run ${run}`, 10_000)
  return fetch(`http://127.0.0.1:${port}/start`, { method: "POST", headers: { Authorization: `Bearer ${token()!}` } })
}

