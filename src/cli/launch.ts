/**
 * `bun run launch <cluster.yml> [--dry-run] [--resume] [--sync]`: run a cluster.
 *
 * Exit status: 0 completed (degraded included), 1 failed by the policy,
 * 2 bad input (file, arguments, environment), 130 interrupted. The last line
 * on stderr is the verdict. A second Ctrl-C stops waiting for the grace
 * period: the launcher exits at once and its children die with it.
 *
 * The arguments are read before the launcher is loaded (effect and its
 * Schema take a few hundred milliseconds to load): `--help` and a bad
 * argument answer at once. The launcher itself comes from its bundle
 * (`bundle.ts`).
 */
import { loadLibrary } from "./bundle.ts"

const usage = `usage: bun run launch <cluster.yml> [--dry-run] [--resume] [--sync]

Runs the job of a cluster file: one port, an agent per host, a rank per device,
supervised under the file's failure_policy.

  --dry-run   print the plan (hosts, ranks, devices, commands, env, policy) and start nothing
  --resume    continue from the consensus checkpoint (job.checkpoint, by default
              .cohort/checkpoints/<name>.json): epochs start after the saved one
  --sync      copy this checkout to every ssh host's path first (rsync, else tar over ssh)
  -h, --help  show this help

Exit status: 0 completed (also DEGRADED), 1 failed, 2 bad input, 130 interrupted.
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
const flags = args.filter((arg) => arg.startsWith("-"))
const files = args.filter((arg) => !arg.startsWith("-"))
const unknown = flags.filter((flag) => !["--dry-run", "--resume", "--sync"].includes(flag))
if (unknown.length > 0) fail(`unknown option ${unknown.join(", ")}\n\n${usage}`)
if (files.length !== 1) fail(`${files.length === 0 ? "no cluster file given" : `one cluster file at a time, got ${files.join(", ")}`}\n\n${usage}`)
const file = files[0]!

const cohort = await loadLibrary()

/** A mistake of input is exit 2 with its message; anything else is a bug in cohort: its whole story, exit 1. */
const refuse = (error: unknown): never => {
  if (typeof error === "object" && error !== null && "_tag" in error && error instanceof Error) fail(error.message)
  console.error("cohort: internal error (please report it):", error)
  process.exit(1)
}

if (flags.includes("--dry-run")) {
  console.log(await cohort.dryRun(file).catch(refuse))
  process.exit(0)
}

// A second signal while stopping: the operator insists. Children die with us (PR_SET_PDEATHSIG).
let signals = 0
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(signal, () => {
    signals += 1
    if (signals > 1) {
      process.stderr.write("cohort: run failed: interrupted again: exiting now without waiting for the ranks\n")
      process.exit(130)
    }
  })
}

const result = await cohort.launch(file, { handleSignals: true, resume: flags.includes("--resume"), sync: flags.includes("--sync") }).catch(refuse)
process.stderr.write(`cohort: ${result.summary}\n`)
process.exit(result.exitCode)
