/**
 * The launcher started the way a user starts it, in a process group of its
 * own, and looked at from outside through /proc: `setsid bun run launch FILE`
 * (or the launcher directly, optionally under `nohup`), its lines with their
 * arrival times, the launcher's pid, every pid of the run, and the markers the
 * rank fixture's `save=MS:DIR` option writes. Signals go to the group
 * (`process.kill(-pgid, …)`, as a terminal's Ctrl-C does) or to one pid.
 * `killEverything` is for afterEach: SIGKILL to the launcher's group and to
 * every pid the run was seen with, and remove the run's temp dir.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { repoRoot } from "./launch-scenario.ts"
import { allPids, collectLines, commandLine, isRunning, parentOf, pidFiles, waitFor } from "./processes.ts"

/** Lines of a stream, each with the time (performance.now()) it arrived. */
export type TimedLines = ReturnType<typeof collectLines>

/** The process group of a pid (/proc/<pid>/stat field 5), or undefined when it is gone. */
export const processGroupOf = (pid: number): number | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    // Fields after the parenthesised command name: state, ppid, pgrp, …
    const pgrp = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]
    return pgrp === undefined ? undefined : Number(pgrp)
  } catch {
    return undefined
  }
}

/** Every descendant of `root` (children, their children, …) alive now, through /proc ppid links. */
export const descendantsOf = (root: number): Array<number> => {
  const parents = new Map<number, number>()
  for (const pid of allPids()) {
    const parent = parentOf(pid)
    if (parent !== undefined) parents.set(pid, parent)
  }
  const found: Array<number> = []
  const frontier = [root]
  while (frontier.length > 0) {
    const parent = frontier.pop()!
    for (const [pid, ppid] of parents) {
      if (ppid === parent && !found.includes(pid)) {
        found.push(pid)
        frontier.push(pid)
      }
    }
  }
  return found
}

export interface LauncherRun {
  /** The temp dir: the cluster file, the ranks' pid files, their saved markers. */
  readonly dir: string
  readonly file: string
  /** `setsid …`: after setsid's exec, `bun run` (or the launcher itself when started directly). */
  readonly proc: Bun.Subprocess<"ignore", "pipe", "pipe">
  /** The run's process group: the pid of `proc`, which setsid made a group leader. */
  readonly pgid: number
  readonly stdout: TimedLines
  readonly stderr: TimedLines
  /** Every pid seen in the run so far (see `collectPids`). */
  readonly seen: Set<number>
  readonly via: "bun-run" | "direct"
}

export interface StartOptions {
  /** `bun run launch FILE` (the default, as a user types it) or `bun src/cli/launch.ts FILE` directly. */
  readonly via?: "bun-run" | "direct"
  /** Put `nohup` between setsid and bun (SIGHUP ignored from the start). */
  readonly nohup?: boolean
  readonly flags?: ReadonlyArray<string>
}

/** Write `text` (with `$DIR` replaced by a fresh temp dir) as that dir's cluster.yml. */
export const writeCluster = (text: (dir: string) => string): { readonly dir: string; readonly file: string } => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-stop-"))
  const file = join(dir, "cluster.yml")
  writeFileSync(file, text(dir))
  return { dir, file }
}

/**
 * Start the launcher under `setsid` in the repository root, as a user does: `bun run` finds `bun` on
 * PATH, so the directory of this Bun is put first. Resolves once setsid has made the process the leader
 * of its own group (pgid = pid) and exec'd.
 */
export const startLauncher = async (
  cluster: { readonly dir: string; readonly file: string },
  options: StartOptions = {}
): Promise<LauncherRun> => {
  const bun = process.execPath
  const program = options.via === "direct" ? [bun, "src/cli/launch.ts"] : [bun, "run", "launch"]
  const argv = ["setsid", ...(options.nohup === true ? ["nohup"] : []), ...program, cluster.file, ...(options.flags ?? [])]
  const proc = Bun.spawn(argv, {
    cwd: repoRoot,
    env: { ...process.env, PATH: `${dirname(bun)}:${process.env.PATH ?? ""}` },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe"
  })
  const run: LauncherRun = {
    ...cluster,
    proc,
    pgid: proc.pid,
    stdout: collectLines(proc.stdout),
    stderr: collectLines(proc.stderr),
    seen: new Set([proc.pid]),
    via: options.via ?? "bun-run"
  }
  started.push(run)
  // setsid execs (it is not a group leader when Bun spawns it), as does nohup: the pid is the group's, and
  // bun's, once both have run.
  await waitFor(() => processGroupOf(proc.pid) === proc.pid && commandLine(proc.pid).startsWith(`${bun} `), "setsid to make the launcher a group leader and exec bun", 5_000)
  return run
}

/** The launcher's pid: the child of `bun run` running src/cli/launch.ts (the process itself when started directly). */
export const launcherPid = async (run: LauncherRun, timeoutMs = 10_000): Promise<number> => {
  const isLauncher = (pid: number) => commandLine(pid).includes("src/cli/launch.ts")
  let found: number | undefined
  await waitFor(() => {
    found = isLauncher(run.proc.pid) ? run.proc.pid : descendantsOf(run.proc.pid).find(isLauncher)
    return found !== undefined
  }, "the launcher process (src/cli/launch.ts)", timeoutMs)
  run.seen.add(found!)
  return found!
}

/** Add every pid of the run alive now to `run.seen`: the descendants of `proc` and of `also`, and the rank pid files. */
export const collectPids = (run: LauncherRun, also: ReadonlyArray<number> = []): Set<number> => {
  for (const root of [run.proc.pid, ...also]) for (const pid of descendantsOf(root)) run.seen.add(pid)
  for (const pid of pidFiles(run.dir)) run.seen.add(pid)
  return run.seen
}

/**
 * The launcher's stderr lines as the user sees them. The project's bunfig.toml makes `bun run` silent (no
 * `$ bun src/cli/launch.ts …` echo first, no `error: script "launch" exited with code N` last), so through
 * `bun run` too the launcher's verdict is the very last line.
 */
export const launcherLines = (run: LauncherRun): Array<string> => [...run.stderr.lines]

/** The pids of `run.seen` still running (zombies count as gone: they hold nothing). */
export const leftRunning = (run: LauncherRun): Array<number> => [...run.seen].filter(isRunning)

/** Wait until `count` rank pid files exist (every rank runs user code), then collect the run's pids. */
export const ranksUp = async (run: LauncherRun, count: number, timeoutMs = 20_000): Promise<ReadonlyArray<number>> => {
  let exited = false
  void run.proc.exited.then(() => (exited = true))
  await waitFor(() => exited || pidFiles(run.dir).length === count, `${count} rank(s) running user code (pid files)`, timeoutMs).catch((error) => {
    throw new Error(`${(error as Error).message}\n${transcript(run)}`)
  })
  if (exited) throw new Error(`the launcher exited (status ${run.proc.exitCode}) before ${count} rank(s) ran user code\n${transcript(run)}`)
  collectPids(run)
  return pidFiles(run.dir)
}

/** The pid rank `rank` wrote to its pid file (the fixture's `pidfile=DIR`), or undefined before it has. */
export const rankPid = (dir: string, rank: number): number | undefined => {
  try {
    return Number(readFileSync(join(dir, `rank-${rank}.pid`), "utf8"))
  } catch {
    return undefined
  }
}

export interface Marker {
  readonly rank: number
  readonly pid: number
  readonly at: number
}

/** The `saved-<rank>` markers the fixture's `save=MS:DIR` wrote into `dir`, by rank. */
export const readMarkers = (dir: string): Array<Marker> =>
  readdirSync(dir)
    .filter((name) => /^saved-\d+$/.test(name))
    .map((name) => JSON.parse(readFileSync(join(dir, name), "utf8")) as Marker)
    .sort((a, b) => a.rank - b.rank)

/** A signal to every process of a group, as a terminal sends Ctrl-C. */
export const signalGroup = (pgid: number, signal: NodeJS.Signals): void => {
  process.kill(-pgid, signal)
}

/** Everything a failing assertion should show: the launcher's stderr (and the tail of its stdout). */
export const transcript = (run: LauncherRun): string =>
  `--- launcher stderr ---\n${run.stderr.lines.join("\n")}\n--- stdout (last 20) ---\n${run.stdout.lines.slice(-20).join("\n")}`

/** The exit status, within `timeoutMs`, or undefined if it has not exited by then. */
export const exitWithin = async (run: LauncherRun, timeoutMs: number): Promise<number | undefined> => {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), timeoutMs)))
  const status = await Promise.race([run.proc.exited, timeout])
  clearTimeout(timer)
  return status
}

const started: Array<LauncherRun> = []

/**
 * For afterEach: SIGKILL every group started here (the launcher's, `bun run`'s) and every pid of those
 * runs still running whose command line is still one of ours (a rank's, the relay's: a pid reused by
 * another program is left alone), remove their temp dirs, then forget them.
 */
export const killEverything = async (): Promise<void> => {
  for (const run of started.splice(0)) {
    collectPids(run)
    try {
      process.kill(-run.pgid, "SIGKILL")
    } catch {
      // The group is gone already.
    }
    for (const pid of run.seen) {
      if (!isRunning(pid) || !/bun|cohort|setpriv|rank|relay/.test(commandLine(pid))) continue
      try {
        process.kill(-pid, "SIGKILL")
      } catch {
        // Not a group leader (or gone): the pid itself.
      }
      try {
        process.kill(pid, "SIGKILL")
      } catch {
        // Gone.
      }
    }
    await run.proc.exited
    rmSync(run.dir, { recursive: true, force: true })
  }
}
