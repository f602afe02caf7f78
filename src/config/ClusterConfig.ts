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
 */
import * as Effect from "effect/Effect"
import type { Document } from "yaml"
import type { ConfigError } from "./ConfigError.ts"
import { type Controller, decodeController } from "./Controller.ts"
import { declaredRanks } from "./Devices.ts"
import { decodeEnv } from "./Env.ts"
import { decodeFailurePolicy, defaultFailurePolicy, type FailurePolicy } from "./FailurePolicy.ts"
import { decodeJob, type Job } from "./Job.ts"
import { decodeWorkers, type Worker } from "./Worker.ts"
import { type ConfigErrors, type Field, parse } from "./Yaml.ts"

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

const topKeys = ["name", "controller", "workers", "env", "job", "failure_policy"]

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
  const top = root.map(topKeys)
  const notes: Array<ConfigError> = []
  const workers = decodeWorkers(top.workers, notes)
  const controller = decodeController(top.controller, declaredRanks(workers), notes)
  const job = top.job.attempt(() =>
    top.job.present ? decodeJob(top.job) : top.job.fail("expected a job section with entry or command")
  )
  // Read from the file, not the decoded sections: a mistake elsewhere in either must not hide this one.
  const growth = top.controller.get("join").get("after_formation")
  // A command job that plans epochs runs the Python client, whose groups take newcomers at an epoch boundary.
  if (growth.scalar === "accept" && top.job.get("command").present && !top.job.get("dataset_size").present) {
    growth.report(
      "a plain command job (torchrun-style) has a fixed world: growth needs an entry job, or a command that uses the Python client " +
        "(with job.dataset_size), or after_formation: reject"
    )
  }
  return {
    name: top.name.readOr(runName, plainName(fallbackName)),
    controller,
    workers,
    env: top.env.readOr(decodeEnv, {}),
    job: job ?? { program: { _tag: "Entry", entry: "" }, args: [], backend: "cpu_sync", datasetSize: 0, epochs: 1, cadence: 8, checkpoint: undefined, outerOptimizer: undefined, asyncAlpha: 0.5 },
    failurePolicy: top.failure_policy.attempt(() => decodeFailurePolicy(top.failure_policy)) ?? defaultFailurePolicy,
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
