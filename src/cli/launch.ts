/**
 * `bun run launch <cluster.yml> [options]`: run a cluster (see the usage below).
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
 * The arguments are read before the launcher is loaded (effect and its
 * Schema take a few hundred milliseconds to load): `--help` and a bad
 * argument answer at once. The launcher itself comes from its bundle
 * (`bundle.ts`).
 */
import { loadLibrary } from "./bundle.ts"
import { make as makeConsole, summaryTable } from "./RunConsole.ts"
import { listenForStops } from "../actors/signals.ts"
import { exitStatusFor, type StopRequest } from "../actors/StopRequests.ts"

const usage = `usage: bun run launch <cluster.yml> [--dry-run] [--resume] [--sync]
                  [--quiet] [--ranks 0,3] [--log-dir DIR] [--events FILE]

Runs the job of a cluster file: one port, an agent per host, a rank per device,
supervised under the file's failure_policy.

  --dry-run        print the plan (hosts, ranks, devices, commands, env, policy) and start nothing
  --resume         continue from the consensus checkpoint (job.checkpoint, by default
                   .cohort/checkpoints/<name>.json): epochs start after the saved one
  --sync           copy this checkout to every ssh host's path first (rsync, else tar over ssh)
  --quiet          show only cohort's own lines, and a dead rank's last lines
  --ranks 0,3      show only these ranks' lines
  --log-dir DIR    also write each rank's, relay's and agent's lines to a file of its own in DIR
  --events FILE    write every join, death, restart, decision and the verdict as JSON lines
  -h, --help       show this help

While it runs: a live page at http://<its address>/ , metrics at /metrics, and
\`bun run status\` in this directory.

Exit status: 0 completed (also DEGRADED), 1 failed, 2 bad input; stopped by a signal:
129 SIGHUP, 130 SIGINT, 143 SIGTERM.
Example: bun run launch examples/local.yml`

const fail = (message: string): never => {
  // Every line is cohort's: several problems at once come one per line, each prefixed.
  process.stderr.write(message.split("\n").map((line) => `cohort: ${line}\n`).join(""))
  process.exit(2)
}

const args = process.argv.slice(2)
if (args.includes("--help") || args.includes("-h")) {
  console.log(usage)
  process.exit(0)
}
const switches = ["--dry-run", "--resume", "--sync", "--quiet"]
const valued = ["--ranks", "--log-dir", "--events"]
const flags = new Set<string>()
const values = new Map<string, string>()
const files: Array<string> = []
for (let i = 0; i < args.length; i++) {
  const arg = args[i]!
  if (switches.includes(arg)) flags.add(arg)
  else if (valued.includes(arg)) {
    const value = args[++i]
    if (value === undefined || value.startsWith("--")) fail(`${arg} needs a value\n\n${usage}`)
    values.set(arg, value!)
  } else if (arg.startsWith("-")) fail(`unknown option ${arg}\n\n${usage}`)
  else files.push(arg)
}
if (files.length !== 1) fail(`${files.length === 0 ? "no cluster file given" : `one cluster file at a time, got ${files.join(", ")}`}\n\n${usage}`)
const file = files[0]!
const rankList = values.get("--ranks")
const ranks = rankList === undefined ? undefined : rankList.split(",").map((part) => part.trim())
if (ranks !== undefined && (ranks.length === 0 || ranks.some((rank) => !/^\d+$/.test(rank)))) {
  fail(`--ranks takes rank numbers separated by commas (like 0,3), got ${rankList}`)
}

// Stops are listened for before the launcher loads: a Ctrl-C during start-up is not lost.
let requestStop!: (request: StopRequest) => void
const stopRequested = new Promise<StopRequest>((resolve) => (requestStop = resolve))
let closeConsole = () => {}
listenForStops({
  stop: (request) => requestStop(request),
  // The operator insists: children die with us (PR_SET_PDEATHSIG).
  insist: (signal) => {
    closeConsole()
    process.stderr.write("cohort: run failed: interrupted again: exiting now without waiting for the ranks\n")
    process.exit(exitStatusFor(signal))
  },
  watchParent: true
})

const cohort = await loadLibrary()

/** A mistake of input is exit 2 with its message; anything else is a bug in cohort: its whole story, exit 1. */
const refuse = (error: unknown): never => {
  if (typeof error === "object" && error !== null && "_tag" in error && error instanceof Error) fail(error.message)
  console.error("cohort: internal error (please report it):", error)
  process.exit(1)
}

if (flags.has("--dry-run")) {
  console.log(await cohort.dryRun(file).catch(refuse))
  process.exit(0)
}

const runConsole = makeConsole({
  quiet: flags.has("--quiet"),
  ranks: ranks === undefined ? undefined : new Set(ranks.map(Number)),
  logDir: values.get("--log-dir")
})

closeConsole = () => runConsole.close()

const result = await cohort.launch(file, {
  interrupt: stopRequested,
  stopHint: "press Ctrl-C again to exit at once",
  resume: flags.has("--resume"),
  sync: flags.has("--sync"),
  eventsFile: values.get("--events"),
  output: runConsole.output,
  logLine: runConsole.cohortLine,
  onEvent: runConsole.onEvent
}).catch((error) => {
  runConsole.close()
  return refuse(error)
})
const last = runConsole.lastState()
const table = last === undefined ? "" : summaryTable(last)
runConsole.close()
if (table !== "") process.stderr.write(`${table}\n`)
// A run that did not complete says where its work is and how to go on from it, just before the verdict.
if (result.checkpoint !== undefined && result.outcome !== "completed" && result.outcome !== "degraded") {
  process.stderr.write(`cohort: checkpoint: ${result.checkpoint.path} (epoch ${result.checkpoint.epoch}); continue with: bun run launch ${file} --resume\n`)
}
process.stderr.write(`cohort: ${result.summary}\n`)
process.exit(result.exitCode)
