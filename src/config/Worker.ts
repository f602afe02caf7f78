/**
 * `workers:` of a cluster file: the hosts a run uses, each with its devices
 * and how the launcher reaches it.
 *
 * ```yaml
 * workers:
 *   - host: localhost
 *     devices: 4             # N CPU ranks, [0, 1] GPU indices, or "all"; 0 or []: declared, runs nothing
 *     path: .
 *     env: { OMP_NUM_THREADS: "1" }
 *     # ssh: { target: …, user: …, port: …, identity_file: …, options: […] }   tunnel: false   agent: ssh | self
 * ```
 *
 * Each worker is decoded by a Schema on its own (see `SchemaField`), every
 * mistake in it at once; its `env` is read by `Env`. flodl's `local_devices`
 * is read as `devices`, its `nccl_socket_ifname` as the ranks'
 * `NCCL_SOCKET_IFNAME` (see `FlodlKeys`); its `arch`, `data_path`, `docker`
 * and `gpu_ram_share`, which cohort has no use for, are noted and left out.
 */
import * as Schema from "effect/Schema"
import { isMap, isScalar, isSeq, type Node } from "yaml"
import type { ConfigError } from "./reading/ConfigError.ts"
import { type Devices, DevicesKey } from "./Devices.ts"
import { decodeEnv } from "./Env.ts"
import { expecting } from "./reading/Expected.ts"
import { type FlodlAlias, type FlodlOnly, noteAt, withFlodlKeys, withoutFlodlOnly } from "./FlodlKeys.ts"
import { keyOr, optionalKey } from "./reading/Mapping.ts"
import { decodeField } from "./reading/SchemaField.ts"
import { type SshOptions, SshKeys, sshOptionsOf } from "./Ssh.ts"
import { Field } from "./reading/Yaml.ts"

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

const text = (what: string) => Schema.NonEmptyString.pipe(expecting(what))


/** How the launcher reaches the worker, apart from where its ranks run. */
const WorkerReach = Schema.Struct({
  path: keyOr(text("the project checkout's path on that host"), "."),
  ssh: optionalKey(SshKeys),
  tunnel: keyOr(Schema.Boolean, false),
  agent: optionalKey(Schema.Literal("ssh", "self"))
})
const reachKeys = Object.keys(WorkerReach.fields)

/**
 * The worker itself: its host and devices, which every worker gives and which count toward the ranks the
 * join window is checked against. The other keys are known here, so that a refusal lists every one, but
 * read by their own decoders.
 */
const WorkerPlacement = Schema.Struct({
  host: text("a host name (the worker's name, and its ssh target unless ssh.target says otherwise)"),
  devices: DevicesKey,
  path: optionalKey(Schema.Unknown),
  env: optionalKey(Schema.Unknown),
  ssh: optionalKey(Schema.Unknown),
  tunnel: optionalKey(Schema.Unknown),
  agent: optionalKey(Schema.Unknown)
})

const workerAliases: ReadonlyArray<FlodlAlias> = [{ flodl: "local_devices", key: "devices" }]

/**
 * flodl's worker keys for what cohort does not do. What a rank needs from two of them (a library path, a
 * data directory) reaches it under cohort through the worker's env or the job's args.
 */
const workerOnly: ReadonlyArray<FlodlOnly> = [
  {
    flodl: "arch",
    does: "the libtorch variant under path/libtorch/ that flodl puts on the ranks' LD_LIBRARY_PATH",
    instead: "set LD_LIBRARY_PATH in this worker's env if its ranks need that library"
  },
  {
    flodl: "data_path",
    does: "the dataset root flodl hands this host's ranks as their data directory",
    instead: "give your program the path in job.args or this worker's env"
  },
  { flodl: "docker", does: "the Docker image fdl probe takes NCCL from on this host" },
  { flodl: "gpu_ram_share", does: "the share of host RAM flodl's data loader leaves an integrated GPU" }
]

/** `nccl_socket_ifname` (flodl's worker key): the ranks' NCCL_SOCKET_IFNAME there, unless `env:` sets it too. */
const ncclSocketIfname = (field: Field, env: Readonly<Record<string, string>>, notes: Array<ConfigError>): Readonly<Record<string, string>> => {
  const given = field.get("nccl_socket_ifname")
  if (!given.present) return env
  const name = decodeField(given, text("a network interface name, like eth0"))
  const keyNode = isMap(field.node) ? (field.node.items.find((pair) => isScalar(pair.key) && pair.key.value === "nccl_socket_ifname")?.key as Node | null) : null
  if (env.NCCL_SOCKET_IFNAME !== undefined && env.NCCL_SOCKET_IFNAME !== name) {
    given.report(`env sets NCCL_SOCKET_IFNAME to ${env.NCCL_SOCKET_IFNAME} and nccl_socket_ifname says ${name}: keep one of them`, keyNode)
    return env
  }
  notes.push(noteAt(given, keyNode, `nccl_socket_ifname is flodl's name: cohort reads it as env NCCL_SOCKET_IFNAME (the ranks' env on this host); write env: { NCCL_SOCKET_IFNAME: ${name} } to quiet this note`))
  return { ...env, NCCL_SOCKET_IFNAME: name }
}

/**
 * One entry of `workers:`. A mistake in its host or devices (or a key no
 * worker has) abandons it; one in how it is reached, or in its env, leaves it
 * in the run's count of ranks, so that the join window is not checked against
 * a count without it. Either way every mistake in it is said.
 */
const decodeWorker = (entry: Field, notes: Array<ConfigError>): Worker => {
  // An entry written with nothing is a mapping with no keys, its missing keys said at the list.
  const written = entry.present ? entry : new Field(entry.path, undefined, entry.source, entry.anchor)
  const field = withoutFlodlOnly(withFlodlKeys(written, workerAliases, notes), workerOnly, notes)
  // nccl_socket_ifname is flodl's, read below: no key a worker has.
  const placement = field.attempt(() => decodeField(field.without(["nccl_socket_ifname"]), WorkerPlacement, { whenAbsent: {} }))
  // An entry that is no mapping has no keys to read: its one mistake is said above.
  const reach = field.present && field.found !== "a mapping"
    ? undefined
    : field.attempt(() => decodeField(field.only(reachKeys), WorkerReach, { whenAbsent: {} }))
  const env = written.attempt(() => ncclSocketIfname(written, field.get("env").readOr(decodeEnv, {}), notes))
  if (placement === undefined || env === undefined) return entry.abandon()
  return {
    host: placement.host,
    devices: placement.devices,
    path: reach?.path ?? ".",
    env,
    ssh: reach?.ssh === undefined ? undefined : sshOptionsOf(reach.ssh),
    agent: reach?.agent,
    tunnel: reach?.tunnel ?? false
  }
}

const workersWhat = "a list of workers, each with host and devices"

/**
 * Every worker the file declares, each decoded on its own: one worker's
 * mistake neither hides another's nor drops the others from the count of
 * ranks (a Schema of the whole list decodes all of them or none). Two entries
 * for one host are a mistake too, said from the file, so that it is said
 * whatever else either entry gets wrong.
 */
export const decodeWorkers = (field: Field, notes: Array<ConfigError>): ReadonlyArray<Worker> => {
  if (!field.present) {
    field.report(`expected ${workersWhat}`)
    return []
  }
  if (!isSeq(field.node)) {
    field.report(`expected ${workersWhat}, got ${field.found}`)
    return []
  }
  const entries = field.node.items.map((_, index) => field.item(index))
  if (entries.length === 0) field.report("expected at least one worker")
  const workers = entries.flatMap((entry) => entry.attempt(() => [decodeWorker(entry, notes)]) ?? [])
  const seen = new Map<string, number>()
  entries.forEach((entry, index) => {
    const host = entry.get("host").scalar
    if (typeof host !== "string") return
    const first = seen.get(host)
    if (first !== undefined) entry.get("host").report(`host "${host}" is already workers[${first}]: give each host one entry`)
    else seen.set(host, index)
  })
  return workers
}
