/**
 * torchrun's own flags, as a torchrun user types them at `launch`: each one
 * cohort has an answer for is mapped onto cohort's flag, accepted where it
 * changes nothing, or refused with what to use instead, never a bare
 * "unknown option". Both spellings torchrun takes (`--max-restarts`,
 * `--max_restarts`) are understood. (`--nproc-per-node` is cohort's own flag,
 * in `LaunchArgs`.)
 *
 * | torchrun                         | cohort                                                        |
 * |----------------------------------|---------------------------------------------------------------|
 * | `--max-restarts N`               | `--policy restart:N`                                          |
 * | `--standalone`                   | accepted with `-n N` alone: one machine is what it runs       |
 * | `--nnodes N`                     | accepted where it agrees (1 with `-n`, the count of `--hosts`); else refused: the workers come from the file, `--hosts` or `--from-slurm` |
 * | `--rdzv-endpoint HOST:PORT`      | refused: `--set controller.host=HOST --set controller.port=PORT` |
 * | `--rdzv-backend`, `--rdzv-conf`  | refused: cohort is its own rendezvous                         |
 * | `--rdzv-id ID`                   | refused: a run is named by `name` (`--set name=ID`)           |
 * | `--master-addr`, `--master-port` | refused: cohort sets the ranks' MASTER_ADDR/PORT; the launcher's address is `--set controller.host=…`, `--set controller.port=…` |
 * | `--node-rank`                    | refused: one launch starts every host (`--hosts`, a file, `agent: self`) |
 */

/** Each flag by its one name (the dashed spelling), and whether a value follows it. */
const flags: Record<string, "switch" | "valued"> = {
  "--max-restarts": "valued",
  "--standalone": "switch",
  "--nnodes": "valued",
  "--rdzv-endpoint": "valued",
  "--rdzv-backend": "valued",
  "--rdzv-conf": "valued",
  "--rdzv-id": "valued",
  "--master-addr": "valued",
  "--master-port": "valued",
  "--node-rank": "valued"
}

/** The names, for "did you mean" among the launch's flags. */
export const torchrunFlagNames: ReadonlyArray<string> = Object.keys(flags)

/** torchrun's flag named `name` (either spelling: `--rdzv_endpoint` is `--rdzv-endpoint`), or undefined. */
export const torchrunFlag = (name: string): { readonly name: string; readonly takes: "switch" | "valued" } | undefined => {
  if (!name.startsWith("--")) return undefined
  const dashed = `--${name.slice(2).replaceAll("_", "-")}`
  const takes = flags[dashed]
  return takes === undefined ? undefined : { name: dashed, takes }
}

/** What the rest of the command line says of the workers, against which `--standalone` and `--nnodes` are judged. */
export interface Workers {
  /** A cluster file was given. */
  readonly file: boolean
  /** `--hosts`, as written. */
  readonly hosts: string | undefined
  readonly fromSlurm: boolean
}

export type Answer =
  /** Changes nothing: what the command line says already. */
  | { readonly _tag: "Accepted" }
  /** Stands for `--policy VALUE`. */
  | { readonly _tag: "Policy"; readonly policy: string }
  | { readonly _tag: "Refused"; readonly problem: string }

const accepted: Answer = { _tag: "Accepted" }
const refused = (problem: string): Answer => ({ _tag: "Refused", problem })

const WORKERS_FROM = "cohort's workers come from the cluster file's workers, from --hosts A:N,B:N, or from --from-slurm inside an allocation"
const MASTER_FROM = "cohort gives the ranks MASTER_ADDR and MASTER_PORT itself (rank 0's host, and a free port there for its store)"
const OWN_RENDEZVOUS = "cohort is its own rendezvous: the launcher's one port, which every host's agent dials"

/** `HOST:PORT` (or `[v6]:PORT`) as --set words; the address as given when it is not that. */
const endpointSets = (value: string): string => {
  const match = /^(?:\[([^\]]+)\]|([^:\s]+)):(\d+)$/.exec(value.trim())
  if (match === null) return "--set controller.host=HOST --set controller.port=PORT"
  return `--set controller.host=${match[1] ?? match[2]} --set controller.port=${match[3]}`
}

/**
 * What torchrun's flag `name` (its dashed spelling) with `value` (undefined for a switch, or a valued flag
 * given no value) comes to here, given what the rest of the command line says of the workers.
 */
export const answer = (name: string, value: string | undefined, workers: Workers): Answer => {
  const said = value === undefined ? name : `${name} ${value}`
  switch (name) {
    case "--max-restarts":
      if (value === undefined || !/^\d+$/.test(value.trim())) return refused(`${name} takes a number of restarts (like ${name} 3), which cohort runs as --policy restart:N`)
      return { _tag: "Policy", policy: `restart:${value.trim()}` }
    case "--standalone":
      if (workers.file) return refused(`--standalone: a cluster file says its own workers; leave --standalone out (without a file, -n N runs on this machine alone, as torchrun --standalone does)`)
      if (workers.hosts !== undefined || workers.fromSlurm) {
        return refused(`--standalone runs on this machine alone, but ${workers.hosts !== undefined ? `--hosts ${workers.hosts}` : "--from-slurm"} says other hosts: give one of them`)
      }
      // -n N already is a run on this machine alone, its rendezvous the launcher's own port.
      return accepted
    case "--nnodes": {
      const count = value === undefined ? undefined : /^\s*(\d+)\s*$/.exec(value)?.[1]
      const hosts = workers.hosts?.split(",").length
      if (count !== undefined && !workers.file && !workers.fromSlurm && Number(count) === (hosts ?? 1)) return accepted
      if (value !== undefined && /^\s*\d+\s*:\s*\d+\s*$/.test(value)) {
        return refused(`${said}: ${WORKERS_FROM}; for hosts that join and leave, use --policy elastic and controller.join.after_formation: accept (--set controller.join.after_formation=accept)`)
      }
      return refused(`${said}: ${WORKERS_FROM}, so there is no node count to give${hosts === undefined ? "" : ` (--hosts ${workers.hosts} is ${hosts} host(s))`}`)
    }
    case "--rdzv-endpoint":
      return refused(`${said}: ${OWN_RENDEZVOUS}; to choose its address, use ${value === undefined ? endpointSets("") : endpointSets(value)}`)
    case "--rdzv-backend":
    case "--rdzv-conf":
      return refused(`${said}: ${OWN_RENDEZVOUS}, so there is no backend to choose or configure; leave ${name} out`)
    case "--rdzv-id":
      return refused(`${said}: a cohort run is its launcher, named by the file's name (or the program's): to name it, use --set name=${value ?? "ID"}`)
    case "--master-addr":
      return refused(`${said}: ${MASTER_FROM}; the address every host dials is the launcher's: --set controller.host=${value ?? "ADDR"} chooses it`)
    case "--master-port":
      return refused(`${said}: ${MASTER_FROM}; the port every host dials is the launcher's one port: --set controller.port=${value ?? "PORT"} chooses it`)
    case "--node-rank":
      return refused(`${said}: one cohort launch starts every host's agent itself, so no host is started with its own rank: run one launch with --hosts A:N,B:N or a cluster file (a host that starts its own agent: agent: self in its worker)`)
    default:
      return refused(`${name}: torchrun's flag has no answer in cohort`)
  }
}
