/**
 * `bun run launch <cluster.yml> [options] [-- args]`, or without a file,
 * `bun run launch -n 4 -- program args`: run a cluster (see `LaunchArgs`).
 *
 * Exit status: 0 completed (degraded included), 1 failed by the policy,
 * 2 bad input (file, arguments, environment), and when stopped by a signal
 * 128 + its number (129 SIGHUP, 130 SIGINT, 143 SIGTERM). The last line on
 * stderr is the verdict. Copies of one stop (a terminal's Ctrl-C reaches
 * both `bun run` and this process) count once; a second, later one stops
 * waiting for the grace period: the launcher exits at once and its children
 * die with it. When the process that started it dies, it stops as for
 * SIGTERM.
 *
 * The arguments, the output paths, the overrides (`--set`, `--policy`, the
 * quick form, `--from-slurm`, the words after `--`) and the file's presence
 * are checked before the library is loaded (effect and its Schema are most of
 * a launch's start-up): `--help` and a bad argument answer at once. The
 * overrides are decoded with the file, by the library (`launch.ts`'s
 * `loadCluster`). `launch.ts` next to this file runs this program from
 * cohort's bundle (`bundle.ts`), where the library is part of the same file.
 */
import { existsSync, readlinkSync, realpathSync } from "node:fs"
import { hostname } from "node:os"
import { join, relative, resolve } from "node:path"
import type { Plan } from "../launcher/run/Plan.ts"
import type { Strategy } from "../kernel/policy/Strategy.ts"
import { parseLaunchArgs, usageOf } from "./args/LaunchArgs.ts"
import { checkEventsFile, checkLogDir, makeLogDir } from "./OutputPaths.ts"
import { invokedAs } from "../kernel/ProgramName.ts"
import { argsOverride, type Override, parseSet } from "./args/Overrides.ts"
import { freeName, parseRanksPerHost, policyOverride, quickForm, slurmOverrides } from "./args/QuickForm.ts"
import { isLive, readEntries, type RunEntry } from "../launcher/run/RunEntries.ts"
import { make as makeConsole, summaryTable } from "./RunConsole.ts"
import { slurmAllocation } from "./args/Slurm.ts"
import { listenForStops } from "../kernel/signals.ts"
import { exitStatusFor, type StopRequest } from "../kernel/StopRequests.ts"

const repoRoot = resolve(import.meta.dir, "../..")

/** Where cohort's own lines go: stderr, and once the run's console exists, through it (so `launcher.log` has them too). */
let say = (line: string): void => void process.stderr.write(`${line}\n`)

const fail = (message: string): never => {
  // Every line is cohort's: several problems at once come one per line, each prefixed.
  for (const line of message.split("\n")) say(`cohort: ${line}`)
  process.exit(2)
}

/** How the user ran this program (`bun run launch`, or `cohort launch` installed): said back in the usage and the hints. */
const program = invokedAs("launch")
const argv = process.argv.slice(2)
const parsed = parseLaunchArgs(argv, program)
if (parsed._tag === "Help") {
  console.log(usageOf(program))
  process.exit(0)
}
if (parsed._tag === "Refused") fail(parsed.problem)
const args = (parsed as Extract<typeof parsed, { _tag: "Run" }>).args
// The whole run's level: the launcher's logger reads it, and every agent, relay and rank is given it.
if (args.verbose) process.env.COHORT_LOG_LEVEL = "debug"

// Every mistake on the command line at once: where the run writes (probed, nothing made yet), the file, the overrides.
const problems: Array<string> = [
  args.logDir === undefined ? undefined : checkLogDir(args.logDir),
  args.events === undefined ? undefined : checkEventsFile(args.events)
].filter((problem): problem is string => problem !== undefined)

/** The folder `bun run` was typed in, when it is not ours: `bun run` starts its scripts in the package's folder. */
const typedIn = (): string | undefined => {
  try {
    const parent = readlinkSync(`/proc/${process.ppid}/cwd`)
    return parent === process.cwd() ? undefined : parent
  } catch {
    return undefined
  }
}

/** A cluster file that is not there: the absolute path tried, and where a file of that name is. */
const missingFile = (file: string): string => {
  const tried = resolve(file)
  const started = typedIn()
  const fromThere = started === undefined ? undefined : resolve(started, file)
  const besides = [fromThere, join(repoRoot, "examples", file), join(repoRoot, file)]
    .filter((candidate): candidate is string => candidate !== undefined && candidate !== tried && existsSync(candidate))
  const found = besides[0]
  const why = found !== undefined && found === fromThere
    ? ` (bun run starts its scripts in the package's folder, ${process.cwd()}, not in ${started})`
    : ""
  const hint = found === undefined ? "" : `; did you mean ${relative(process.cwd(), found) || found}?${why}`
  return `${file}: no such file (looked for ${tried})${hint}`
}
if (args.file !== undefined && !existsSync(args.file)) problems.push(missingFile(args.file))

const samePlace = (a: string, b: string): boolean => {
  try {
    return realpathSync(a) === realpathSync(b)
  } catch {
    return resolve(a) === resolve(b)
  }
}
// --sync copies cohort's own folder over every ssh host's path (rsync --delete). Run from the checkout, that folder
// is the launch's; an installed cohort (`cohort launch` in a project) would put its package in place of the project.
if (args.sync && !samePlace(process.cwd(), repoRoot)) {
  problems.push(
    `--sync copies cohort's own folder (${repoRoot}) to every ssh host's path, but this launch runs in ${process.cwd()}: ` +
      "it would replace what is there with cohort's files. Copy your project to the hosts yourself (rsync), or use --sync from a cohort checkout"
  )
}

const shortName = hostname().split(".")[0]!
const isThisMachine = (name: string) => name === "localhost" || name === hostname() || name === shortName

/** What the command line changes in the file (or, without one, the whole file it stands for). */
const overrides: Array<Override> = []
let input: string | Readonly<Record<string, unknown>> = args.file ?? {}
const perHost = args.ranksPerHost === undefined ? undefined : parseRanksPerHost(args.ranksPerHost, "--nproc-per-node")
const allocation = !args.fromSlurm ? undefined : slurmAllocation(process.env, {
  isThisMachine,
  hostName: shortName,
  ranksPerNode: perHost !== undefined && "ranks" in perHost && typeof perHost.ranks === "number" ? perHost.ranks : undefined
})
if (typeof allocation === "string") problems.push(allocation)
const slurm = typeof allocation === "string" ? undefined : allocation
if (args.file === undefined) {
  const quick = quickForm({ ranksPerHost: args.ranksPerHost, hosts: args.hosts, slurm, command: args.rest ?? [], checkout: process.cwd(), hostName: shortName })
  if (typeof quick === "string") problems.push(quick)
  else {
    input = quick.base
    overrides.push(...quick.overrides)
  }
} else if (slurm !== undefined) overrides.push(...slurmOverrides(slurm, process.cwd(), "default"))
if (args.policy !== undefined) {
  const policy = policyOverride(args.policy)
  if (typeof policy === "string") problems.push(policy)
  else overrides.push(policy)
}
for (const text of args.sets) {
  const set = parseSet(text)
  if (typeof set === "string") problems.push(set)
  else overrides.push(set)
}
if (args.file !== undefined && args.rest !== undefined && args.rest.length > 0) overrides.push(argsOverride(args.rest))
if (problems.length > 0) fail(problems.join("\n"))

/** RunRegistry's RUNS_DIR, not imported from there: RunRegistry loads effect, which these checks do without. */
const RUNS_DIR = ".cohort/runs"
/**
 * The quick form's name taken by a run live in this folder: this one takes the next free one (`freeName`), and
 * says so. Not under `--resume` (it continues the name's own checkpoint), nor where `--set name=` chose one.
 */
let renamed: { readonly name: string; readonly other: RunEntry } | undefined
const nameGiven = overrides.some((override) => override.path.length === 1 && override.path[0] === "name")
if (args.file === undefined && !args.resume && !args.dryRun && !nameGiven) {
  const own = String((input as Readonly<Record<string, unknown>>).name)
  const live = readEntries(RUNS_DIR).map(({ entry }) => entry).filter((entry) => isLive(entry))
  const name = freeName(own, new Set(live.map((entry) => entry.run)))
  const other = live.find((entry) => entry.run === own)
  if (name !== own && other !== undefined) {
    input = { ...(input as Readonly<Record<string, unknown>>), name }
    renamed = { name, other }
  }
}
// A run makes its log directory now (0700), before anything starts; a dry run made nothing.
if (args.logDir !== undefined && !args.dryRun) {
  const problem = makeLogDir(args.logDir)
  if (problem !== undefined) fail(problem)
}

const restarts = (strategy: Strategy): boolean =>
  strategy._tag === "Restart" || (strategy._tag === "Phased" && (restarts(strategy.beforeFormation) || restarts(strategy.afterFormation)))

/** `--ranks` against the plan: a rank the world can never have is a mistake; one a restart or a newcomer may get, a note. */
const checkPlan = (plan: Plan): ReadonlyArray<string> => {
  // A world counted only as hosts join (devices: all elsewhere) has no bound to hold --ranks to yet.
  if (plan.world === undefined) return []
  const size = plan.world
  const absent = (args.ranks ?? []).filter((rank) => rank >= size)
  if (absent.length === 0) return []
  const ranks = `rank${absent.length === 1 ? "" : "s"} ${absent.join(", ")}`
  const world = `the world has ranks 0 to ${size - 1} (${size} rank(s) on ${plan.hosts.length} host(s))`
  if (plan.config.controller.join.afterFormation === "accept" || restarts(plan.config.failurePolicy.strategy)) {
    say(`cohort: --ranks ${args.ranks!.join(",")}: ${world}; ${ranks} will show only if a restarted rank or a newcomer gets that number`)
    return []
  }
  return [`--ranks ${args.ranks!.join(",")}: ${world}, so ${ranks} never run${absent.length === 1 ? "s" : ""}: give numbers from 0 to ${size - 1}`]
}

const shellWord = (word: string) => (/^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`)

/** This command line with `--resume` added (and the name the quick form took, `--set name=`): how to go on from a run's checkpoint. */
const resumeCommand = (): string => {
  const dashes = argv.indexOf("--")
  const added = renamed === undefined ? ["--resume"] : ["--set", `name=${renamed.name}`, "--resume"]
  const words = dashes === -1 ? [...argv, ...added] : [...argv.slice(0, dashes), ...added, ...argv.slice(dashes)]
  return `${program} ${words.filter((word, index) => word !== "--resume" || index === words.lastIndexOf("--resume")).map(shellWord).join(" ")}`
}

// Stops are listened for before the launcher loads: a Ctrl-C during start-up is not lost.
let requestStop!: (request: StopRequest) => void
const stopRequested = new Promise<StopRequest>((resolve) => (requestStop = resolve))
let closeConsole = () => {}
listenForStops({
  stop: (request) => requestStop(request),
  // The operator insists: children die with us (PR_SET_PDEATHSIG).
  insist: (signal) => {
    say("cohort: run failed: interrupted again: exiting now without waiting for the ranks")
    closeConsole()
    process.exit(exitStatusFor(signal))
  },
  watchParent: true
})

/** A mistake of input is exit 2 with its message; anything else is a bug in cohort: its whole story, exit 1. */
const refuse = (error: unknown): never => {
  if (typeof error === "object" && error !== null && "_tag" in error && error instanceof Error) fail(error.message)
  console.error("cohort: internal error (please report it):", error)
  process.exit(1)
}

/**
 * The run itself, once the command line holds. Not top-level await: this module is built into a
 * CommonJS bytecode bundle (see `bundle.ts`), which has none.
 */
const main = async (): Promise<never> => {
  // Loaded only now: the checks above answer without it.
  const cohort = await import("../launch.ts")
  if (args.dryRun && args.file !== undefined) {
    console.log(await cohort.dryRun(input, { overrides, checkPlan }).catch(refuse))
    process.exit(0)
  }
  if (args.dryRun) {
    // The quick form: the cluster file it stands for, to save and grow from, with its plan as comments. A file
    // that decodes is printed even when its plan cannot run here (a host unreachable, a program not on PATH).
    const planned = await cohort.dryRun(input, { overrides, checkPlan }).then(
      (plan) => ({ plan, error: undefined }),
      (error: unknown) => ({ plan: undefined, error })
    )
    const error = planned.error as { readonly _tag?: unknown } | undefined
    if (error !== undefined && error._tag !== "LaunchInputError") refuse(error)
    const file = await cohort.clusterDocument(input, { overrides }).catch(refuse)
    const typed = argv.filter((word, index) => word !== "--dry-run" || index > argv.indexOf("--"))
    console.log([
      `# The cluster file of: ${program} ${typed.map(shellWord).join(" ")}`,
      `# Save it (this output, > cluster.yml) and run it with: ${program} cluster.yml`,
      file.trimEnd(),
      ...(planned.plan === undefined ? [] : ["# The plan:", ...planned.plan.split("\n").map((line) => `#   ${line}`)])
    ].join("\n"))
    if (error !== undefined) refuse(error)
    process.exit(0)
  }

  const runConsole = makeConsole({
    quiet: args.quiet,
    ranks: args.ranks === undefined ? undefined : new Set(args.ranks),
    logDir: args.logDir,
    rawOutput: args.rawOutput
  })
  say = (line) => runConsole.cohortLine(line)
  closeConsole = () => runConsole.close()
  if (renamed !== undefined) {
    const where = renamed.other.host === shortName || renamed.other.host === hostname() ? "here" : `on ${renamed.other.host}`
    say(
      `cohort: another run named ${renamed.other.run} is running ${where} (pid ${renamed.other.pid}): ` +
        `this one is named ${renamed.name} (--set name=NAME names it yourself)`
    )
  }

  const result = await cohort.launch(input, {
    interrupt: stopRequested,
    stopHint: "press Ctrl-C again to exit at once",
    resume: args.resume,
    sync: args.sync,
    eventsFile: args.events,
    output: runConsole.output,
    logLine: runConsole.cohortLine,
    onEvent: runConsole.onEvent,
    overrides,
    checkPlan
  }).catch((error) => {
    // An input error found once the launcher runs (a busy port): in launcher.log too, then the console is done.
    if (typeof error === "object" && error !== null && "_tag" in error && error instanceof Error) {
      for (const line of error.message.split("\n")) say(`cohort: ${line}`)
      runConsole.close()
      process.exit(2)
    }
    runConsole.close()
    return refuse(error)
  })
  const last = runConsole.lastState()
  const table = last === undefined ? "" : summaryTable(last)
  // The table and the verdict go through the console before it closes: launcher.log gets them as the terminal does.
  if (table !== "") say(table)
  // A run that did not complete says where its work is and how to go on from it, just before the verdict.
  if (result.checkpoint !== undefined && result.outcome !== "completed" && result.outcome !== "degraded") {
    const where = result.checkpoint.resumes === undefined ? `epoch ${result.checkpoint.epoch}` : `resumes ${result.checkpoint.resumes}`
    say(`cohort: checkpoint: ${result.checkpoint.path} (${where}); continue with: ${resumeCommand()}`)
  }
  say(`cohort: ${result.summary}`)
  runConsole.close()
  process.exit(result.exitCode)
}

main().catch(refuse)
