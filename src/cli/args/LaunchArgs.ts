/**
 * `bun run launch`'s arguments, read before the launcher is loaded (it takes
 * a few hundred milliseconds): `--help` and a mistake answer at once.
 *
 * Two forms: a cluster file (`bun run launch cluster.yml [options] [-- args]`,
 * the words after `--` appended to `job.args`), or the quick form without one
 * (`bun run launch -n 4 [options] -- program args`, see `QuickForm`). Valued
 * flags take their value as the next word or after `=` (`--nproc-per-node=4`),
 * and torchrun's underscore spelling `--nproc_per_node` is understood.
 * torchrun's other flags get their cohort answer (`TorchrunFlags`), and an
 * unknown option the known one it is nearest to (`DidYouMean`).
 *
 * The usage says the program as the user called it: `bun run launch` from
 * the checkout, `cohort launch` installed (`ProgramName`).
 */
import { didYouMean } from "../../config/reading/DidYouMean.ts"
import { answer as torchrunAnswer, torchrunFlag, torchrunFlagNames } from "./TorchrunFlags.ts"

/** The usage of the launch as `program` runs it (`bun run launch`, `cohort launch`). */
export const usageOf = (program: string): string => {
  // Under the first form's flags, as the script's usage has always been laid out.
  const indent = " ".repeat(program.length + 4)
  return `usage: ${program} <cluster.yml> [--dry-run] [--resume] [--sync]
${indent}[--quiet] [-v] [--ranks 0,3] [--log-dir DIR] [--events FILE] [--raw-output]
${indent}[--set PATH=VALUE]... [--policy POLICY] [--from-slurm] [-- ARGS...]
       ${program} --nproc-per-node N [--hosts A:N,B:N] [options] -- PROGRAM [ARGS...]

Runs the job of a cluster file: one port, an agent per host, a rank per device,
supervised under the file's failure_policy.

  --dry-run        print the plan (hosts, ranks, devices, commands, env, policy) and start nothing
  --resume         continue from the consensus checkpoint (job.checkpoint, by default
                   .cohort/checkpoints/<name>.json): epochs start after the saved one
  --sync           copy this checkout to every ssh host's path first (rsync, else tar over ssh)
  --quiet          show only cohort's own lines, and a dead rank's last lines
  -v, --verbose    cohort's debug lines too, from the launcher, every agent and relay
                   (COHORT_LOG_LEVEL=debug, which the ranks' env gets as well)
  --ranks 0,3      show only these ranks' lines
  --log-dir DIR    also write each rank's, relay's and agent's lines to a file of its own in DIR
  --events FILE    write every join, death, restart, decision and the verdict as JSON lines;
                   a run empties FILE first, a --resume run adds to it (one log for both)
  --raw-output     the ranks' and relays' lines as printed, terminal controls and all; by default
                   escape sequences, \\r, bidi overrides and other controls in them show as \\xNN
  --set PATH=VALUE change the file before it is read, checked like the file: --set job.epochs=20,
                   --set failure_policy.grace=10s, --set 'job.args=[lr=0.1]' (repeatable)
  --policy POLICY  failure_policy.after_formation: kill_all, elastic, elastic:25%, elastic:2,
                   restart or restart:3 (at most 3 restarts; torchrun's --max-restarts 3)
  --from-slurm     inside a Slurm allocation: the workers are its nodes (SLURM_JOB_NODELIST),
                   with SLURM_NTASKS_PER_NODE ranks each (one per GPU with SLURM_GPUS_ON_NODE)
  -- ARGS...       appended to job.args (a command: job's argv, an entry: job's ctx.args)
  -h, --help       show this help

Without a file (torchrun's and mpirun's spelling), a command: job under the default policy:
  -n, --nproc-per-node N   ranks on this machine (gpu: one per GPU)
  --hosts A:N,B:N          ranks on those hosts instead, reached over ssh in this checkout's path
  -- PROGRAM [ARGS...]     what every rank runs; --dry-run prints the cluster file it stands for
The run is named after the script (train.py: train); where a run of that name runs in this
directory already, this one takes train-2 (then train-3, ...) and says so; --set name=NAME chooses.
torchrun's --standalone, --nnodes, --rdzv-*, --master-* and --node-rank are answered with
what to use instead.

While it runs: a live page at http://<its address>/ , metrics at /metrics, and
\`${program.replace(/launch$/, "status")}\` in this directory.

Exit status: 0 completed (also DEGRADED), 1 failed, 2 bad input; stopped by a signal:
129 SIGHUP, 130 SIGINT, 143 SIGTERM.
Examples: ${program} examples/local.yml
          ${program} --nproc-per-node 4 -- python3 train.py --lr 0.1`
}

/** The usage as the checkout's script says it. */
export const usage = usageOf("bun run launch")

export interface LaunchArgs {
  /** The cluster file; undefined for the quick form. */
  readonly file: string | undefined
  readonly dryRun: boolean
  readonly resume: boolean
  readonly sync: boolean
  readonly quiet: boolean
  /** `-v`/`--verbose`: COHORT_LOG_LEVEL=debug for the whole run. */
  readonly verbose: boolean
  readonly ranks: ReadonlyArray<number> | undefined
  readonly logDir: string | undefined
  readonly events: string | undefined
  /** `--raw-output`: forwarded lines as printed, terminal controls unescaped. */
  readonly rawOutput: boolean
  /** Each `--set`, as written after it. */
  readonly sets: ReadonlyArray<string>
  readonly policy: string | undefined
  readonly fromSlurm: boolean
  /** `--nproc-per-node` / `-n`, as written. */
  readonly ranksPerHost: string | undefined
  readonly hosts: string | undefined
  /** The words after `--`: the file's extra `job.args`, or the quick form's program; undefined without `--`. */
  readonly rest: ReadonlyArray<string> | undefined
}

export type Parsed = { readonly _tag: "Help" } | { readonly _tag: "Run"; readonly args: LaunchArgs } | { readonly _tag: "Refused"; readonly problem: string }

const switches: Record<string, "dryRun" | "resume" | "sync" | "quiet" | "verbose" | "fromSlurm" | "rawOutput"> = {
  "--dry-run": "dryRun",
  "--verbose": "verbose",
  "-v": "verbose",
  "--resume": "resume",
  "--sync": "sync",
  "--quiet": "quiet",
  "--from-slurm": "fromSlurm",
  "--raw-output": "rawOutput"
}

/** Each valued flag, by every spelling, under its one name. */
const valued: Record<string, string> = {
  "--ranks": "--ranks",
  "--log-dir": "--log-dir",
  "--events": "--events",
  "--set": "--set",
  "--policy": "--policy",
  "--nproc-per-node": "--nproc-per-node",
  "--nproc_per_node": "--nproc-per-node",
  "-n": "--nproc-per-node",
  "--hosts": "--hosts"
}

/** Every flag by the spelling the usage gives, for "did you mean": cohort's own, then torchrun's. */
const knownFlags: ReadonlyArray<string> = [
  ...Object.keys(switches),
  ...Object.keys(valued).filter((spelling) => !spelling.includes("_")),
  "--help",
  "-h",
  ...torchrunFlagNames
]

/**
 * Read the launch's arguments (the process's, after the script's name); `program` is how the user ran it,
 * for the usage and the examples in a refusal.
 */
export const parseLaunchArgs = (argv: ReadonlyArray<string>, program = "bun run launch"): Parsed => {
  const refuse = (problem: string): Parsed => ({ _tag: "Refused", problem })
  const usage = usageOf(program)
  const dashes = argv.indexOf("--")
  const own = dashes === -1 ? argv : argv.slice(0, dashes)
  const rest = dashes === -1 ? undefined : argv.slice(dashes + 1)
  if (own.includes("--help") || own.includes("-h")) return { _tag: "Help" }
  const flags = { dryRun: false, resume: false, sync: false, quiet: false, verbose: false, fromSlurm: false, rawOutput: false }
  const values = new Map<string, string>()
  const sets: Array<string> = []
  const files: Array<string> = []
  /** torchrun's flags as given, answered once the whole line is read (`--nnodes 1` agrees with `-n 4` alone). */
  const torchrun: Array<{ readonly name: string; readonly value: string | undefined }> = []
  for (let i = 0; i < own.length; i++) {
    const arg = own[i]!
    const equals = arg.startsWith("--") ? arg.indexOf("=") : -1
    const name = equals === -1 ? arg : arg.slice(0, equals)
    const torchrunOwn = torchrunFlag(name)
    if (Object.hasOwn(switches, arg)) flags[switches[arg]!] = true
    else if (torchrunOwn !== undefined) {
      if (torchrunOwn.takes === "switch" && equals !== -1) return refuse(`${name} takes no value (got ${arg})`)
      // A value that looks like a flag is the next flag: the answer then says what the value should have been.
      const next = own[i + 1]
      const value = torchrunOwn.takes === "switch" ? undefined : equals !== -1 ? arg.slice(equals + 1) : next !== undefined && !next.startsWith("-") ? own[++i] : undefined
      torchrun.push({ name: torchrunOwn.name, value })
    } else if (Object.hasOwn(valued, name)) {
      const flag = valued[name]!
      const value = equals === -1 ? own[++i] : arg.slice(equals + 1)
      if (value === undefined || (equals === -1 && value.startsWith("--"))) return refuse(`${name} needs a value\n\n${usage}`)
      if (flag === "--set") sets.push(value)
      else if (values.has(flag)) return refuse(`${flag} is given twice (${values.get(flag)} and ${value}): give it once`)
      else values.set(flag, value)
    } else if (arg.startsWith("-")) return refuse(`unknown option ${arg}${didYouMean(name, knownFlags)}\n\n${usage}`)
    else files.push(arg)
  }

  let policy = values.get("--policy")
  for (const { name, value } of torchrun) {
    const reply = torchrunAnswer(name, value, { file: files.length > 0, hosts: values.get("--hosts"), fromSlurm: flags.fromSlurm })
    if (reply._tag === "Refused") return refuse(reply.problem)
    if (reply._tag === "Policy") {
      if (policy !== undefined) {
        return refuse(`${name} ${value} stands for --policy ${reply.policy}, and the policy is given already (--policy ${policy}): give one of them`)
      }
      policy = reply.policy
    }
  }

  const quick = values.has("--nproc-per-node") || values.has("--hosts")
  if (quick && files.length > 0) {
    return refuse(
      rest === undefined
        ? `${values.has("--hosts") ? "--hosts" : "--nproc-per-node"} runs a program without a cluster file: put the program after --, like  ${program} -n 4 -- ${files.join(" ")}`
        : `${values.has("--hosts") ? "--hosts" : "--nproc-per-node"} is for a run without a cluster file; with ${files[0]}, say the ranks in its workers (or --set workers[0].devices=4)`
    )
  }
  if (values.has("--nproc-per-node") && values.has("--hosts") && values.get("--hosts")!.split(",").every((part) => part.includes(":"))) {
    return refuse(`--hosts ${values.get("--hosts")} gives every host its ranks already: leave out --nproc-per-node ${values.get("--nproc-per-node")}`)
  }
  if (values.has("--hosts") && flags.fromSlurm) return refuse("--hosts and --from-slurm both say the workers: give one of them")
  const withoutFile = quick || flags.fromSlurm
  if (files.length === 0 && withoutFile && (rest === undefined || rest.length === 0)) {
    return refuse(`without a cluster file, give the program every rank runs after --, like  ${program} --nproc-per-node 4 -- python3 train.py\n\n${usage}`)
  }
  if (files.length === 0 && !withoutFile) return refuse(`no cluster file given\n\n${usage}`)
  if (files.length > 1) return refuse(`one cluster file at a time, got ${files.join(", ")}\n\n${usage}`)

  const rankList = values.get("--ranks")
  const ranks = rankList === undefined ? undefined : rankList.split(",").map((part) => part.trim())
  if (ranks !== undefined && (ranks.length === 0 || ranks.some((rank) => !/^\d+$/.test(rank)))) {
    return refuse(`--ranks takes rank numbers separated by commas (like 0,3), got ${rankList}`)
  }
  return {
    _tag: "Run",
    args: {
      file: files[0],
      ...flags,
      ranks: ranks?.map(Number),
      logDir: values.get("--log-dir"),
      events: values.get("--events"),
      sets,
      policy,
      ranksPerHost: values.get("--nproc-per-node"),
      hosts: values.get("--hosts"),
      rest
    }
  }
}
