/**
 * torchrun's flags at the launch, both spellings: `--max-restarts N` runs as `--policy restart:N`,
 * `--standalone` and an agreeing `--nnodes` change nothing, and the rest are refused in one line
 * that says what to use instead. Each row is the whole command line and what the launch makes of it.
 */
import { describe, expect, test } from "bun:test"
import { parseLaunchArgs } from "../src/cli/args/LaunchArgs.ts"

/** What a command line comes to: the run's policy and workers, or the refusal's first line. */
const outcome = (argv: ReadonlyArray<string>) => {
  const parsed = parseLaunchArgs(argv)
  if (parsed._tag === "Refused") return { refused: parsed.problem.split("\n")[0] }
  if (parsed._tag === "Help") return { help: true }
  const { policy, ranksPerHost, hosts, file, rest } = parsed.args
  return { policy, ranksPerHost, hosts, file, rest }
}

const quick = (policy?: string, extra: { hosts?: string; ranksPerHost?: string } = {}) => ({
  policy,
  ranksPerHost: "ranksPerHost" in extra ? extra.ranksPerHost : "4",
  hosts: extra.hosts,
  file: undefined,
  rest: ["python3", "train.py"]
})

const WORKERS_FROM = "cohort's workers come from the cluster file's workers, from --hosts A:N,B:N, or from --from-slurm inside an allocation"
const OWN_RENDEZVOUS = "cohort is its own rendezvous: the launcher's one port, which every host's agent dials"
const MASTER_FROM = "cohort gives the ranks MASTER_ADDR and MASTER_PORT itself (rank 0's host, and a free port there for its store)"

const rows: ReadonlyArray<{ readonly argv: ReadonlyArray<string>; readonly is: ReturnType<typeof outcome> }> = [
  // --max-restarts: the policy.
  { argv: ["-n", "4", "--max-restarts", "3", "--", "python3", "train.py"], is: quick("restart:3") },
  { argv: ["-n", "4", "--max_restarts=3", "--", "python3", "train.py"], is: quick("restart:3") },
  { argv: ["-n", "4", "--max-restarts=0", "--", "python3", "train.py"], is: quick("restart:0") },
  {
    argv: ["cluster.yml", "--max_restarts", "2"],
    is: { policy: "restart:2", ranksPerHost: undefined, hosts: undefined, file: "cluster.yml", rest: undefined }
  },
  {
    argv: ["-n", "4", "--max-restarts", "3", "--policy", "elastic", "--", "python3", "train.py"],
    is: { refused: "--max-restarts 3 stands for --policy restart:3, and the policy is given already (--policy elastic): give one of them" }
  },
  {
    argv: ["-n", "4", "--max-restarts", "many", "--", "python3", "train.py"],
    is: { refused: "--max-restarts takes a number of restarts (like --max-restarts 3), which cohort runs as --policy restart:N" }
  },
  {
    argv: ["-n", "4", "--max-restarts", "--", "python3", "train.py"],
    is: { refused: "--max-restarts takes a number of restarts (like --max-restarts 3), which cohort runs as --policy restart:N" }
  },
  // --standalone: this machine alone, which -n N is.
  { argv: ["--standalone", "-n", "4", "--", "python3", "train.py"], is: quick(undefined) },
  { argv: ["--standalone", "--nproc_per_node=4", "--", "python3", "train.py"], is: quick(undefined) },
  {
    argv: ["--standalone", "--hosts", "a:2,b:2", "--", "python3", "train.py"],
    is: { refused: "--standalone runs on this machine alone, but --hosts a:2,b:2 says other hosts: give one of them" }
  },
  {
    argv: ["--standalone", "cluster.yml"],
    is: { refused: "--standalone: a cluster file says its own workers; leave --standalone out (without a file, -n N runs on this machine alone, as torchrun --standalone does)" }
  },
  { argv: ["--standalone=1", "-n", "4", "--", "python3", "train.py"], is: { refused: "--standalone takes no value (got --standalone=1)" } },
  // --nnodes: accepted where it agrees, else where the workers come from.
  { argv: ["--nnodes", "1", "-n", "4", "--", "python3", "train.py"], is: quick(undefined) },
  { argv: ["--nnodes=2", "--hosts", "a:2,b:2", "--", "python3", "train.py"], is: quick(undefined, { hosts: "a:2,b:2", ranksPerHost: undefined }) },
  {
    argv: ["--nnodes", "2", "-n", "4", "--", "python3", "train.py"],
    is: { refused: `--nnodes 2: ${WORKERS_FROM}, so there is no node count to give` }
  },
  {
    argv: ["--nnodes", "3", "--hosts", "a:2,b:2", "--", "python3", "train.py"],
    is: { refused: `--nnodes 3: ${WORKERS_FROM}, so there is no node count to give (--hosts a:2,b:2 is 2 host(s))` }
  },
  {
    argv: ["--nnodes", "1", "cluster.yml"],
    is: { refused: `--nnodes 1: ${WORKERS_FROM}, so there is no node count to give` }
  },
  {
    argv: ["--nnodes=1:4", "-n", "4", "--", "python3", "train.py"],
    is: {
      refused: `--nnodes 1:4: ${WORKERS_FROM}; for hosts that join and leave, use --policy elastic and controller.join.after_formation: accept (--set controller.join.after_formation=accept)`
    }
  },
  // The rendezvous: cohort's own.
  {
    argv: ["-n", "4", "--rdzv-endpoint", "10.0.0.1:29400", "--", "python3", "train.py"],
    is: { refused: `--rdzv-endpoint 10.0.0.1:29400: ${OWN_RENDEZVOUS}; to choose its address, use --set controller.host=10.0.0.1 --set controller.port=29400` }
  },
  {
    argv: ["-n", "4", "--rdzv_endpoint=[fe80::1]:29400", "--", "python3", "train.py"],
    is: { refused: `--rdzv-endpoint [fe80::1]:29400: ${OWN_RENDEZVOUS}; to choose its address, use --set controller.host=fe80::1 --set controller.port=29400` }
  },
  {
    argv: ["-n", "4", "--rdzv-endpoint", "head", "--", "python3", "train.py"],
    is: { refused: `--rdzv-endpoint head: ${OWN_RENDEZVOUS}; to choose its address, use --set controller.host=HOST --set controller.port=PORT` }
  },
  {
    argv: ["-n", "4", "--rdzv_backend", "c10d", "--", "python3", "train.py"],
    is: { refused: `--rdzv-backend c10d: ${OWN_RENDEZVOUS}, so there is no backend to choose or configure; leave --rdzv-backend out` }
  },
  {
    argv: ["-n", "4", "--rdzv-conf=timeout=900", "--", "python3", "train.py"],
    is: { refused: `--rdzv-conf timeout=900: ${OWN_RENDEZVOUS}, so there is no backend to choose or configure; leave --rdzv-conf out` }
  },
  {
    argv: ["-n", "4", "--rdzv-id", "job42", "--", "python3", "train.py"],
    is: { refused: "--rdzv-id job42: a cohort run is its launcher, named by the file's name (or the program's): to name it, use --set name=job42" }
  },
  // torchrun's static world.
  {
    argv: ["-n", "4", "--master_addr", "10.0.0.1", "--", "python3", "train.py"],
    is: { refused: `--master-addr 10.0.0.1: ${MASTER_FROM}; the address every host dials is the launcher's: --set controller.host=10.0.0.1 chooses it` }
  },
  {
    argv: ["-n", "4", "--master-port=29500", "--", "python3", "train.py"],
    is: { refused: `--master-port 29500: ${MASTER_FROM}; the port every host dials is the launcher's one port: --set controller.port=29500 chooses it` }
  },
  {
    argv: ["-n", "4", "--node_rank", "0", "--", "python3", "train.py"],
    is: {
      refused:
        "--node-rank 0: one cohort launch starts every host's agent itself, so no host is started with its own rank: run one launch with --hosts A:N,B:N or a cluster file (a host that starts its own agent: agent: self in its worker)"
    }
  },
  // After --, torchrun's flags are the program's.
  {
    argv: ["-n", "4", "--", "python3", "train.py", "--nnodes", "2", "--max-restarts", "3"],
    is: { policy: undefined, ranksPerHost: "4", hosts: undefined, file: undefined, rest: ["python3", "train.py", "--nnodes", "2", "--max-restarts", "3"] }
  }
]

describe("torchrun's flags", () => {
  for (const { argv, is } of rows) test(argv.join(" "), () => expect(outcome(argv)).toEqual(is))

  test("a torchrun line answers for its torchrun flag before the program's place (no -- yet)", () => {
    // torchrun --nnodes 2 --nproc-per-node 4 train.py: the node count is what cohort answers first.
    expect(outcome(["--nnodes", "2", "--nproc-per-node", "4", "train.py"])).toEqual({ refused: `--nnodes 2: ${WORKERS_FROM}, so there is no node count to give` })
  })
})
