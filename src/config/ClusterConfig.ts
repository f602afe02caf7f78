/**
 * cluster.yml: the one file a user writes.
 *
 * ```yaml
 * name: demo
 * controller:
 *   host: 127.0.0.1          # the address workers dial
 *   port: 0                  # the mux port; 0 picks a free one
 *   join: { min_ranks: 4, target_ranks: 4, timeout: 30s, max_timeout: 120s, open_admission: false, start: auto }
 *   # join: { …, after_formation: accept, max_ranks: 16 }   # grow: agents that dial in later join at the next epoch
 *   encrypt: false           # true: every frame's payload encrypted too, not only authenticated (networks you do not trust)
 * workers:
 *   - host: localhost
 *     devices: 4             # N CPU ranks, [0, 1] GPU indices, or "all"; 0 or []: declared, runs nothing
 *     path: .
 *     env: { OMP_NUM_THREADS: "1" }
 * env: {}
 * job:
 *   entry: examples/train.ts
 *   args: []
 *   backend: cpu_sync        # cpu_sync | cpu_cadence | cpu_async | nccl
 *   dataset_size: 50000      # samples per epoch, split by the coordinator
 *   epochs: 10
 *   cadence: 8               # cpu_cadence: steps between averages
 *   outer_optimizer: { kind: diloco, lr: 0.7, momentum: 0.9 }   # cpu_cadence / cpu_async, optional
 *   async_alpha: 0.5         # cpu_async: the elastic averaging's moving rate
 *   checkpoint: .cohort/checkpoints/demo.json   # consensus checkpoint (default: under .cohort/checkpoints)
 * failure_policy: { … }      # see FailurePolicy
 * ```
 *
 * Ranks are never written by the user: they are numbered in admission order.
 * The join knobs default from the declared capacity (min = target = every
 * declared rank), so the window closes the instant everyone is in. Every
 * mistake is reported at once with its place (see `Yaml`). `controller`,
 * `workers`, `job` and `failure_policy` are decoded by Schemas (see
 * `SchemaField`, and each section's module); the top level, the run's name,
 * `env` and the checks across sections are read here.
 *
 * fdl-cli's fdl.yml holds a flodl cluster under `cluster:`, beside keys of
 * its own (`description`, `commands`, `join`, `publish`), which are noted and
 * left out. Such a file is read as it is written: `controller`, `workers` and
 * `env` inside `cluster:`, cohort's own `name`, `job` and `failure_policy`
 * beside it or inside it. Every place said is the file's own.
 */
import * as Effect from "effect/Effect"
import { type Document, isSeq } from "yaml"
import type { ConfigError } from "./reading/ConfigError.ts"
import { type Controller, decodeController } from "./Controller.ts"
import { declaredRanks } from "./Devices.ts"
import { decodeEnv } from "./Env.ts"
import { decodeFailurePolicy, defaultFailurePolicy, type FailurePolicy } from "./FailurePolicy.ts"
import { type FlodlOnly, withoutFlodlOnly } from "./FlodlKeys.ts"
import { restartsForFixedWorld } from "./FixedWorldRestarts.ts"
import { decodeJob, isCoordinated, type Job } from "./Job.ts"
import { decodeWorkers, type Worker } from "./Worker.ts"
import { type ConfigErrors, type Field, parse } from "./reading/Yaml.ts"

export { declaredRanks, type Devices, runsNothing } from "./Devices.ts"
export type { Backend, Job, JobProgram } from "./Job.ts"
export type { JoinWindow, StartMode } from "./JoinWindow.ts"
export type { SshOptions } from "./Ssh.ts"
export type { Worker } from "./Worker.ts"

export interface ClusterConfig {
  readonly name: string
  readonly controller: Controller
  readonly workers: ReadonlyArray<Worker>
  readonly env: Readonly<Record<string, string>>
  readonly job: Job
  readonly failurePolicy: FailurePolicy
  /** What the file says that cohort reads another way (flodl's key names), one line each: warned at load. */
  readonly notes?: ReadonlyArray<string> | undefined
}

const topKeys = ["name", "controller", "workers", "env", "job", "failure_policy"] as const
type TopKey = (typeof topKeys)[number]

/** cohort's sections, which an fdl.yml may give beside its `cluster:` (fdl-cli reads no such key) or inside it. */
const ownKeys = ["name", "job", "failure_policy"] as const

/** flodl's cluster-wide key that cohort has no use for (beside `controller` and `workers`). */
const clusterOnly: ReadonlyArray<FlodlOnly> = [
  { flodl: "gpu_ram_share", does: "the share of host RAM flodl's data loader leaves an integrated GPU" }
]

/** fdl-cli's own keys of an fdl.yml, beside its `cluster:`. */
const fdlOnly: ReadonlyArray<FlodlOnly> = [
  { flodl: "description", owner: "fdl-cli", does: "the project's description in fdl's help" },
  { flodl: "commands", owner: "fdl-cli", does: "the commands fdl runs", instead: "the job section says what every rank runs" },
  { flodl: "join", owner: "fdl-cli", does: "fdl join's defaults for a host that dials in", instead: "a host whose agent you start runs cohort agent, or bun run agent in a checkout (agent: self)" },
  { flodl: "publish", owner: "fdl-cli", does: "fdl publish's defaults" }
]

/**
 * The file's sections, each at its own place: the top level of a cluster file, or an fdl.yml's `cluster:`
 * and what it has beside it. `wrapped` says which, for the words of a refusal.
 */
const sectionsOf = (root: Field, notes: Array<ConfigError>): { readonly top: Record<TopKey, Field>; readonly wrapped: boolean } => {
  if (!root.has("cluster")) return { top: withoutFlodlOnly(root, clusterOnly, notes).map(topKeys), wrapped: false }
  const beside = withoutFlodlOnly(root, fdlOnly, notes).map(["cluster", ...ownKeys])
  const inside = withoutFlodlOnly(beside.cluster, clusterOnly, notes).map(topKeys)
  const own = Object.fromEntries(
    ownKeys.map((key) => {
      if (beside[key].present && inside[key].present) {
        inside[key].report(`${key} is given beside cluster: too: keep one of them`, inside[key].anchor)
      }
      return [key, beside[key].present ? beside[key] : inside[key]]
    })
  )
  return { top: { ...inside, ...own }, wrapped: true }
}

/**
 * A run name names files (`.cohort/checkpoints/<name>.json`, `.cohort/runs/<name>-<pid>.json`): a plain name,
 * so that it can never lead out of those folders (`my run/../x` would have).
 */
const RUN_NAME = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$/
const runName = (field: Field): string => {
  const name = field.string("a run name")
  if (!RUN_NAME.test(name)) field.expected("a plain run name: 1 to 128 letters, digits, '-', '_' or '.', not starting with '.'")
  return name
}

/** A file's name as a run name: whatever would not do in one becomes `_`. */
const plainName = (name: string): string => {
  const plain = name.replace(/[^A-Za-z0-9_.-]/g, "_").replace(/^\./, "_").slice(0, 128)
  return plain === "" ? "run" : plain
}

/** Decode a whole cluster file; `fallbackName` names the run when the file does not. */
export const decodeCluster = (root: Field, fallbackName: string): ClusterConfig => {
  const notes: Array<ConfigError> = []
  const { top, wrapped } = sectionsOf(root, notes)
  const workers = decodeWorkers(top.workers, notes)
  const controller = decodeController(top.controller, declaredRanks(workers), notes)
  const job = top.job.attempt(() => {
    if (top.job.present) return decodeJob(top.job)
    // `job:` written with nothing: said at the key. No key at all: said of the file, with what to add.
    if (top.job.node !== undefined) return top.job.fail("expected a job section with entry or command")
    top.job.reportMissing(
      `no job: add \`job: { entry: train.ts }\` (a TypeScript module every rank runs) or \`job: { command: [python3, train.py] }\` (any program)${wrapped ? " at the top level, beside cluster:" : ""}`
    )
    return top.job.abandon()
  })
  // flodl's roster-free window: an empty workers list is what it is for, and cohort has no walk-ins to fill it.
  const discovery = top.controller.get("join").get("discovery")
  if (discovery.scalar === true && isSeq(top.workers.node) && top.workers.node.items.length === 0) {
    discovery.report(
      "discovery: true forms the world from hosts that dial in with fdl join: cohort admits only the hosts under workers, so list each one there (agent: self for a host whose agent you start)",
      discovery.anchor
    )
  }
  // Read from the file, not the decoded sections: a mistake elsewhere in either must not hide this one.
  const growth = top.controller.get("join").get("after_formation")
  // A command job that plans epochs runs the Python client, whose groups take newcomers at an epoch boundary.
  if (growth.scalar === "accept" && top.job.get("command").present && !top.job.get("dataset_size").present) {
    growth.report(
      "a plain command job (torchrun-style) has a fixed world: growth needs an entry job, or a command that uses the Python client " +
        "(with job.dataset_size: N, or --set job.dataset_size=N on the command line: the samples an epoch covers), or after_formation: reject"
    )
  }
  const failurePolicy = top.failure_policy.attempt(() => decodeFailurePolicy(top.failure_policy)) ?? defaultFailurePolicy
  return {
    name: top.name.readOr(runName, plainName(fallbackName)),
    controller,
    workers,
    env: top.env.readOr(decodeEnv, {}),
    job: job ?? { program: { _tag: "Entry", entry: "" }, args: [], backend: "cpu_sync", datasetSize: 0, epochs: 1, cadence: 8, checkpoint: undefined, outerOptimizer: undefined, asyncAlpha: 0.5 },
    failurePolicy: job !== undefined && !isCoordinated(job) ? restartsForFixedWorld(failurePolicy, top.failure_policy, notes) : failurePolicy,
    // In document order, as the mistakes are.
    ...(notes.length === 0 ? {} : { notes: notes.sort((a, b) => (a.line ?? 0) - (b.line ?? 0) || (a.col ?? 0) - (b.col ?? 0)).map((note) => note.message) })
  }
}

/** Parse a cluster file's text; `edit` changes the parsed document before it is decoded (see `Yaml.parse`). */
export const parseCluster = (
  text: string,
  file: string,
  edit?: (doc: Document.Parsed) => ReadonlyArray<ConfigError>
): Effect.Effect<ClusterConfig, ConfigErrors> =>
  parse(text, file, (root) => decodeCluster(root, file.replace(/^.*\//, "").replace(/\.ya?ml$/, "")), edit).pipe(
    // Said at load, so a launch and --dry-run both say it.
    Effect.tap((config) => Effect.forEach(config.notes ?? [], (note) => Effect.logWarning(note), { discard: true }))
  )
