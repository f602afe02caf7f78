/**
 * The quick form: a run without a cluster file, spelt as torchrun and mpirun
 * users spell it.
 *
 * ```sh
 * bun run launch --nproc-per-node 4 -- python3 train.py --lr 0.1     # -n 4: four ranks on this machine
 * bun run launch --hosts a:4,b:4 -- python3 train.py                 # four on a, four on b (ssh)
 * bun run launch -n 4 --policy elastic:25% -- python3 train.py       # and a failure policy
 * ```
 *
 * The flags stand for a cluster file: its `workers`, a `command:` job (the
 * words after `--`), and `failure_policy.after_formation` for `--policy`.
 * They are given as overrides of a document holding only the run's name, so
 * the file is decoded by the same decoder as any other, every check applies,
 * and a mistake names the flag that made it. `--dry-run` prints that file.
 */
import { basename } from "node:path"
import type { Override } from "./Overrides.ts"
import type { SlurmAllocation } from "./Slurm.ts"

/** Ranks per host: a count, or every GPU of the host (`devices: all`). */
export type RanksPerHost = number | "all"

/** `--nproc-per-node` as torchrun takes it: a count, or `gpu` (also `all`) for every GPU of the host; or why not. */
export const parseRanksPerHost = (text: string, flag: string): { readonly ranks: RanksPerHost } | { readonly problem: string } => {
  const trimmed = text.trim()
  if (trimmed === "gpu" || trimmed === "all") return { ranks: "all" }
  if (/^\d+$/.test(trimmed)) return { ranks: Number(trimmed) }
  return { problem: `${flag} ${text}: expected a number of ranks per host (like 4), or gpu for every GPU of the host` }
}

export interface HostSlots {
  readonly host: string
  readonly ranks: RanksPerHost | undefined
}

/** `--hosts a:4,b:4` (mpirun's `-H`): each host, with its ranks when given; or why not. */
export const parseHosts = (text: string): Array<HostSlots> | string => {
  const hosts: Array<HostSlots> = []
  for (const part of text.split(",")) {
    const match = /^([^:\s]+)(?::(.+))?$/.exec(part.trim())
    if (match === null) return `--hosts ${text}: "${part}" is not HOST or HOST:RANKS (like gpu-a:4)`
    const ranks = match[2] === undefined ? undefined : parseRanksPerHost(match[2], "")
    if (ranks !== undefined && "problem" in ranks) return `--hosts ${text}: "${part}": expected HOST:RANKS with a number of ranks (like gpu-a:4), or HOST:gpu`
    if (hosts.some((host) => host.host === match[1])) return `--hosts ${text}: ${match[1]} is named twice`
    hosts.push({ host: match[1]!, ranks: ranks?.ranks })
  }
  return hosts
}

const policyWhat = "kill_all, kill_all:0s, elastic, elastic:25%, elastic:2, restart or restart:3"

/** `--policy elastic:25%` as `failure_policy.after_formation`; its value is checked by the decoder, like the file's. */
export const policyOverride = (spec: string): Override | string => {
  const said = `--policy ${spec}`
  const match = /^(kill_all|elastic|restart)(?::(.*))?$/.exec(spec.trim())
  if (match === null) return `${said}: expected one of ${policyWhat}`
  const [, strategy, option] = match
  if (option === undefined) return { said, path: ["failure_policy", "after_formation"], value: strategy, mode: "set" }
  if (option.trim() === "") return `${said}: say what follows the colon, or leave it out: expected one of ${policyWhat}`
  // A number stays a number (`elastic:2` is a count); anything else is the decoder's to judge (`25%`, `0s`, `lots`).
  const value = /^\d+$/.test(option.trim()) ? Number(option.trim()) : option.trim()
  const key = strategy === "kill_all" ? "grace" : strategy === "elastic" ? "max_failure" : "max_restarts"
  return { said, path: ["failure_policy", "after_formation"], value: { [strategy!]: { [key]: value } }, mode: "set" }
}

/** The run's name, from the script it runs (`python3 train.py` → `train`), else the program. */
export const runName = (command: ReadonlyArray<string>): string => {
  const script = command.slice(1).find((word) => !word.startsWith("-") && /\.\w+$/.test(word)) ?? command[0] ?? "quick"
  const name = basename(script).replace(/\.\w+$/, "").replace(/[^A-Za-z0-9_-]/g, "_")
  return /^[A-Za-z0-9]/.test(name) ? name : "quick"
}

/**
 * The quick form's name beside the runs live in this folder (`taken`, their names): the script's own when it is
 * free, else the first free of `train-2`, `train-3`, …. A sweep of one script (`--lr 0.1` beside `--lr 0.05`)
 * then just runs, as two torchrun or sbatch jobs started in one folder do, each with its own checkpoint
 * (`.cohort/checkpoints/<name>.json`) instead of the second being refused for the first's. A file's name is
 * the user's: it is never changed (the refusal names `--set name=`).
 */
export const freeName = (name: string, taken: ReadonlySet<string>): string => {
  if (!taken.has(name)) return name
  for (let suffix = 2;; suffix += 1) if (!taken.has(`${name}-${suffix}`)) return `${name}-${suffix}`
}

/**
 * `--from-slurm`: the allocation's nodes as the workers (the launcher's own node runs its agent in-process;
 * the others are reached over ssh in this checkout's path), and the node name they dial. With a cluster
 * file, `controllerMode: "default"` keeps the file's controller.host where it gives one.
 */
export const slurmOverrides = (allocation: SlurmAllocation, checkout: string, controllerMode: "set" | "default"): Array<Override> => [
  { said: "--from-slurm", path: ["controller", "host"], value: allocation.controllerHost, mode: controllerMode },
  {
    said: "--from-slurm",
    path: ["workers"],
    value: allocation.nodes.map((node) => ({ host: node.host, devices: node.devices, ...(node.launcher ? {} : { path: checkout }) })),
    mode: "set"
  }
]

export interface QuickFormInput {
  /** `--nproc-per-node N` / `-n N`, as written. */
  readonly ranksPerHost: string | undefined
  /** `--hosts a:4,b:4`, as written. */
  readonly hosts: string | undefined
  /** `--from-slurm`: the allocation's nodes. */
  readonly slurm: SlurmAllocation | undefined
  /** The words after `--`. */
  readonly command: ReadonlyArray<string>
  /** Where the checkout is: the path of every host reached over ssh (the same checkout there, as mpirun assumes). */
  readonly checkout: string
  /** This machine's host name: what other hosts dial. */
  readonly hostName: string
}

export interface QuickForm {
  /** The document the overrides go into. */
  readonly base: Readonly<Record<string, unknown>>
  readonly overrides: ReadonlyArray<Override>
}

/** The cluster file the quick form's flags stand for; or what is wrong with a flag. */
export const quickForm = (input: QuickFormInput): QuickForm | string => {
  const overrides: Array<Override> = []
  const nprocSaid = input.ranksPerHost === undefined ? undefined : `--nproc-per-node ${input.ranksPerHost}`
  const parsed = input.ranksPerHost === undefined ? undefined : parseRanksPerHost(input.ranksPerHost, "--nproc-per-node")
  if (parsed !== undefined && "problem" in parsed) return parsed.problem
  const perHost = parsed?.ranks
  if (input.slurm !== undefined) {
    overrides.push(...slurmOverrides(input.slurm, input.checkout, "set"))
  } else if (input.hosts !== undefined) {
    const hosts = parseHosts(input.hosts)
    if (typeof hosts === "string") return hosts
    const missing = hosts.find((host) => host.ranks === undefined && perHost === undefined)
    if (missing !== undefined) return `--hosts ${input.hosts}: ${missing.host} has no number of ranks: write ${missing.host}:4, or give --nproc-per-node for every host`
    const said = nprocSaid === undefined ? `--hosts ${input.hosts}` : `--hosts ${input.hosts} ${nprocSaid}`
    const workers = hosts.map((host) => ({ host: host.host, devices: host.ranks ?? perHost!, path: input.checkout }))
    // The other hosts dial this machine by its name; --set controller.host=ADDRESS where that does not resolve there.
    overrides.push({ said, path: ["controller", "host"], value: input.hostName, mode: "set" })
    overrides.push({ said, path: ["workers"], value: workers, mode: "set" })
  } else {
    overrides.push({ said: nprocSaid ?? "--nproc-per-node", path: ["workers"], value: [{ host: "localhost", devices: perHost ?? 1 }], mode: "set" })
  }
  overrides.push({ said: "the command after --", path: ["job", "command"], value: [...input.command], mode: "set" })
  return { base: { name: runName(input.command) }, overrides }
}
