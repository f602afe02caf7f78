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
 * mistake is reported at once with its place (see `Yaml`). `controller.join`,
 * `job` and `failure_policy` are decoded by Schemas (see `SchemaField`); the
 * workers, `env` and the checks across sections are read here.
 */
import * as Effect from "effect/Effect"
import { type Document, isMap, isScalar, type Node, Pair, Scalar, YAMLMap } from "yaml"
import { ConfigError } from "./ConfigError.ts"
import { decodeEnv } from "./Env.ts"
import { decodeFailurePolicy, defaultFailurePolicy, type FailurePolicy } from "./FailurePolicy.ts"
import { decodeJoin, type JoinWindow } from "./JoinWindow.ts"
import { decodeJob, type Job } from "./Job.ts"
import { type ConfigErrors, Field, parse } from "./Yaml.ts"

export type { Backend, Job, JobProgram } from "./Job.ts"
export type { JoinWindow, StartMode } from "./JoinWindow.ts"

/** `devices: 4` (CPU slots), `[0, 1]` (GPU indices) or `"all"` (probed on the host); `0` or `[]`: runs nothing. */
export type Devices =
  | { readonly _tag: "Count"; readonly count: number }
  | { readonly _tag: "Indices"; readonly indices: ReadonlyArray<number> }
  | { readonly _tag: "All" }

export interface SshOptions {
  readonly target: string | undefined
  readonly user: string | undefined
  readonly port: number | undefined
  readonly identityFile: string | undefined
  /**
   * ssh's own argv words, in the file's order: an entry written `Key=Value` (flodl's form, and ssh_config's)
   * is `-o Key=Value` here; a flag (`-o`, `-oKey=Value`, `-4`) and the word after a flag that takes one are as written.
   */
  readonly options: ReadonlyArray<string>
}

export interface Worker {
  readonly host: string
  readonly devices: Devices
  readonly path: string
  readonly env: Readonly<Record<string, string>>
  readonly ssh: SshOptions | undefined
  readonly tunnel: boolean
  /**
   * How the host's agent starts: `ssh` (the launcher starts it over ssh; the
   * default for another machine, or when `ssh:` is given) or `self` (started
   * by hand or by a scheduler: `bun run agent`). Undefined: this machine's
   * agent runs inside the launcher, or `ssh` elsewhere.
   */
  readonly agent: "ssh" | "self" | undefined
}

export interface ClusterConfig {
  readonly name: string
  readonly controller: {
    readonly host: string
    readonly port: number
    readonly join: JoinWindow
    /**
     * Encrypt every frame's payload, not only authenticate it (AES-128-GCM, the frame keys): for networks you
     * do not trust. Each link's listener (the launcher) tells its dialer in the handshake (`Link`). Absent: false.
     */
    readonly encrypt?: boolean | undefined
  }
  readonly workers: ReadonlyArray<Worker>
  readonly env: Readonly<Record<string, string>>
  readonly job: Job
  readonly failurePolicy: FailurePolicy
  /** What the file says that cohort reads another way (flodl's key names), one line each: warned at load. */
  readonly notes?: ReadonlyArray<string> | undefined
}

/** Ranks the workers declare, when every count is known. */
export const declaredRanks = (workers: ReadonlyArray<Worker>): number | undefined => {
  let total = 0
  for (const { devices } of workers) {
    if (devices._tag === "All") return undefined
    total += devices._tag === "Count" ? devices.count : devices.indices.length
  }
  return total
}

const topKeys = ["name", "controller", "workers", "env", "job", "failure_policy"]

const devicesWhat = `a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all"`

const decodeDevices = (field: Field): Devices => {
  const value = field.scalar
  if (value === "all") return { _tag: "All" }
  if (typeof value === "number") return { _tag: "Count", count: field.int(0, 256, devicesWhat) }
  if (!field.present || field.found !== "a list") return field.expected(devicesWhat)
  // An empty list, like 0, declares a host that runs nothing (see `runsNothing`).
  const indices = field.list().map((item) => item.int(0, 255, "a GPU index from 0 to 255"))
  const duplicate = indices.find((index, at) => indices.indexOf(index) !== at)
  if (duplicate !== undefined) field.fail(`device ${duplicate} is listed twice`)
  return { _tag: "Indices", indices }
}

/**
 * A worker declared with `devices: 0` or `devices: []`: it is in the file (flodl's orchestrator-only entry,
 * kept so a preflight or a tool can read it) but runs no rank, so no agent starts there and it counts in
 * neither the world nor the join window.
 */
export const runsNothing = (worker: Worker): boolean =>
  worker.devices._tag === "Count" ? worker.devices.count === 0 : worker.devices._tag === "Indices" && worker.devices.indices.length === 0

/** ssh's flags that take the next word as their value (OpenSSH's ssh(1)). */
const sshFlagsWithValue = new Set(["-B", "-b", "-c", "-D", "-E", "-e", "-F", "-I", "-i", "-J", "-L", "-l", "-m", "-O", "-o", "-P", "-p", "-Q", "-R", "-S", "-W", "-w"])

/** An ssh_config setting: a keyword, then `=` (spaces around it allowed), then a value. */
const SSH_SETTING = /^\s*[A-Za-z][A-Za-z0-9]*\s*=\s*\S/

const sshOptionWhat = `an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value`

/** `ssh.options` as ssh's argv words: settings become `-o` options, flags and their values stay as written. */
const decodeSshOptions = (field: Field): ReadonlyArray<string> => {
  const items = field.list("a list of ssh options, like [\"StrictHostKeyChecking=no\"]")
  const words: Array<string> = []
  items.forEach((item, index) => {
    const option = item.string(sshOptionWhat)
    const previous = index > 0 ? items[index - 1]!.scalar : undefined
    if (typeof previous === "string" && sshFlagsWithValue.has(previous)) words.push(option)
    else if (option.startsWith("-")) words.push(option)
    else if (SSH_SETTING.test(option)) words.push("-o", option.trim())
    else item.report(`expected ${sshOptionWhat}, got "${option}"`)
  })
  const last = items.at(-1)?.scalar
  if (typeof last === "string" && sshFlagsWithValue.has(last)) items.at(-1)!.report(`ssh's ${last} takes a value: give it as the next entry, or write the setting alone, like "ServerAliveInterval=30"`)
  return words
}

const decodeSsh = (field: Field): SshOptions => {
  const keys = field.map(["target", "user", "port", "identity_file", "options"])
  return {
    target: keys.target.readOr((f) => f.string("a host name or address"), undefined),
    user: keys.user.readOr((f) => f.string("a user name"), undefined),
    port: keys.port.readOr((f) => f.int(1, 65_535, "an ssh port from 1 to 65535"), undefined),
    identityFile: keys.identity_file.readOr((f) => f.string("a path to a private key"), undefined),
    options: keys.options.readOr(decodeSshOptions, [])
  }
}

const decodeWorker = (written: Field, notes: Array<ConfigError>): Worker => {
  const field = withFlodlKeys(written, workerAliases, notes, ["nccl_socket_ifname"])
  const keys = field.map(["host", "devices", "path", "env", "ssh", "tunnel", "agent"])
  const host = keys.host.string("a host name (the worker's name, and its ssh target unless ssh.target says otherwise)")
  return {
    host,
    devices: keys.devices.present ? decodeDevices(keys.devices) : keys.devices.expected("a devices entry: a number of CPU ranks, GPU indices like [0, 1], or \"all\""),
    path: keys.path.readOr((f) => f.string("the project checkout's path on that host"), "."),
    env: ncclSocketIfname(written, keys.env.readOr(decodeEnv, {}), notes),
    ssh: keys.ssh.readOr(decodeSsh, undefined),
    agent: keys.agent.readOr((f) => f.literal(["ssh", "self"] as const), undefined),
    tunnel: keys.tunnel.readOr((f) => boolean(f), false)
  }
}

const boolean = (field: Field): boolean => {
  const value = field.scalar
  if (typeof value !== "boolean") field.expected("true or false")
  return value as boolean
}

/** Stands in for a join section that could not be read; the run is refused anyway. */
const unreadableJoin: JoinWindow = {
  minRanks: undefined,
  targetRanks: undefined,
  timeoutMs: 60_000,
  maxTimeoutMs: 120_000,
  openAdmission: false,
  start: "auto",
  afterFormation: "reject",
  maxRanks: undefined
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

/** A key flodl's cluster files use, read as cohort's `key`; `seconds`: flodl's whole seconds, read as a duration. */
interface FlodlAlias {
  readonly flodl: string
  readonly key: string
  readonly seconds?: boolean
}

const joinAliases: ReadonlyArray<FlodlAlias> = [
  { flodl: "min_rank_start", key: "min_ranks" },
  { flodl: "join_timeout_secs", key: "timeout", seconds: true },
  { flodl: "max_join_timeout_secs", key: "max_timeout", seconds: true }
]

const workerAliases: ReadonlyArray<FlodlAlias> = [{ flodl: "local_devices", key: "devices" }]

/** A note at `field`'s place, said like a ConfigError (file, path, line, column). */
const noteAt = (field: Field, at: Node | null, note: string): ConfigError => {
  const offset = at?.range?.[0]
  const pos = offset === undefined ? undefined : field.source.lines.linePos(offset)
  return new ConfigError({ file: field.source.file, path: field.path, line: pos?.line, col: pos?.col, problem: note })
}

/**
 * `field` (a mapping) with flodl's key names read as cohort's: each is noted, and the mapping decoded
 * is a copy with the key renamed (its value, and so every place a mistake is said, is the file's own).
 * Both names given is a mistake: they would say the same thing twice, perhaps differently. The keys
 * `readElsewhere` are left out of the copy: their reader takes them from `field` itself.
 */
const withFlodlKeys = (field: Field, aliases: ReadonlyArray<FlodlAlias>, notes: Array<ConfigError>, readElsewhere: ReadonlyArray<string> = []): Field => {
  const node = field.node
  if (!isMap(node)) return field
  const keyOf = (pair: Pair<unknown, unknown>) => (isScalar(pair.key) ? String(pair.key.value) : undefined)
  const flodlKeys = [...aliases.map((alias) => alias.flodl), ...readElsewhere]
  if (!node.items.some((pair) => flodlKeys.includes(keyOf(pair) ?? ""))) return field
  const copy = new YAMLMap<unknown, unknown>()
  copy.range = node.range
  copy.flow = node.flow
  copy.items = node.items.flatMap((pair) => {
    if (readElsewhere.includes(keyOf(pair) ?? "")) return []
    const alias = aliases.find((candidate) => candidate.flodl === keyOf(pair))
    if (alias === undefined) return [pair]
    const given = field.get(alias.flodl)
    const keyNode = pair.key as Node | null
    if (field.has(alias.key)) {
      given.report(`${alias.flodl} is flodl's name for ${alias.key}, which is given too: keep one of them`, keyNode)
      return []
    }
    notes.push(noteAt(given, keyNode, `${alias.flodl} is flodl's name: cohort reads it as ${alias.key}${alias.seconds === true ? " (flodl's whole seconds, as a duration)" : ""}; rename it to ${alias.key} to quiet this note`))
    let value = pair.value as Node | null
    if (alias.seconds === true) {
      const seconds = given.attempt(() => given.int(1, 604_800, "a whole number of seconds from 1 to 604800"))
      if (seconds === undefined) return []
      const duration = new Scalar(`${seconds}s`)
      duration.range = (pair.value as Node | null)?.range
      value = duration
    }
    const key = new Scalar(alias.key)
    key.range = keyNode?.range
    return [new Pair(key, value)]
  })
  return new Field(field.path, copy, field.source, field.anchor)
}

/** `nccl_socket_ifname` (flodl's worker key): the ranks' NCCL_SOCKET_IFNAME there, unless `env:` sets it too. */
const ncclSocketIfname = (field: Field, env: Readonly<Record<string, string>>, notes: Array<ConfigError>): Readonly<Record<string, string>> => {
  const given = field.get("nccl_socket_ifname")
  if (!given.present) return env
  const name = given.string("a network interface name, like eth0")
  const keyNode = isMap(field.node) ? (field.node.items.find((pair) => isScalar(pair.key) && pair.key.value === "nccl_socket_ifname")?.key as Node | null) : null
  if (env.NCCL_SOCKET_IFNAME !== undefined && env.NCCL_SOCKET_IFNAME !== name) {
    given.report(`env sets NCCL_SOCKET_IFNAME to ${env.NCCL_SOCKET_IFNAME} and nccl_socket_ifname says ${name}: keep one of them`, keyNode)
    return env
  }
  notes.push(noteAt(given, keyNode, `nccl_socket_ifname is flodl's name: cohort reads it as env NCCL_SOCKET_IFNAME (the ranks' env on this host); write env: { NCCL_SOCKET_IFNAME: ${name} } to quiet this note`))
  return { ...env, NCCL_SOCKET_IFNAME: name }
}

/** Decode a whole cluster file; `fallbackName` names the run when the file does not. */
export const decodeCluster = (root: Field, fallbackName: string): ClusterConfig => {
  const top = root.map(topKeys)
  const workersField = top.workers
  if (!workersField.present) workersField.report("expected a list of workers, each with host and devices")
  const items = workersField.attempt(() => workersField.list("a list of workers, each with host and devices")) ?? []
  if (workersField.present && items.length === 0 && workersField.found === "a list") {
    workersField.report("expected at least one worker")
  }
  const notes: Array<ConfigError> = []
  const workers = items.flatMap((item) => item.attempt(() => [decodeWorker(item, notes)]) ?? [])
  const seen = new Map<string, number>()
  items.forEach((item, index) => {
    const host = item.get("host").scalar
    if (typeof host !== "string") return
    const first = seen.get(host)
    if (first !== undefined) item.get("host").report(`host "${host}" is already workers[${first}]: give each host one entry`)
    else seen.set(host, index)
  })
  const controller = top.controller.attempt(() => top.controller.map(["host", "port", "join", "encrypt"]))
  const job = top.job.attempt(() =>
    top.job.present ? decodeJob(top.job) : top.job.fail("expected a job section with entry or command")
  )
  // Read from the file, not the decoded sections: a mistake elsewhere in either must not hide this one.
  const growth = controller?.join.present === true ? controller.join.get("after_formation") : undefined
  // A command job that plans epochs runs the Python client, whose groups take newcomers at an epoch boundary.
  if (growth?.scalar === "accept" && top.job.get("command").present && !top.job.get("dataset_size").present) {
    growth.report(
      "a plain command job (torchrun-style) has a fixed world: growth needs an entry job, or a command that uses the Python client " +
        "(with job.dataset_size), or after_formation: reject"
    )
  }
  return {
    name: top.name.readOr(runName, plainName(fallbackName)),
    controller: {
      host: controller?.host.readOr((f) => f.string("the address workers dial, like 127.0.0.1"), "127.0.0.1") ?? "127.0.0.1",
      port: controller?.port.readOr((f) => f.int(0, 65_535, "a port from 0 to 65535 (0 picks a free one)"), 0) ?? 0,
      encrypt: controller?.encrypt.readOr((f) => boolean(f), false) ?? false,
      join: (controller === undefined ? undefined : controller.join.attempt(() => decodeJoin(withFlodlKeys(controller.join, joinAliases, notes), declaredRanks(workers)))) ??
        unreadableJoin
    },
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
