/**
 * flodl's files as they are found (issue 38): an fdl.yml with its `cluster:` wrapper beside fdl-cli's
 * own keys, an `fdl.<env>.yml` overlay, and a bare cluster.yml, all under test/fixtures/flodl/ in the
 * shapes fdl-cli's schema gives them. Each loads once it has a job, with the keys cohort maps read as
 * cohort's and the keys it leaves out each said once, at its line and column; without a job, one line
 * says what to add. Every expected value is typed out here.
 *
 * Pure parsing, no processes: this file is in the fast tier.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { type ClusterConfig, parseCluster } from "../src/config/ClusterConfig.ts"
import { loadWithWarnings } from "./support/config-load.ts"

const fixture = (name: string): string => readFileSync(join(import.meta.dir, "fixtures", "flodl", name), "utf8")

/** The job a cohort user adds; appended, so every line above keeps its number. */
const withJob = (text: string): string => `${text}job: { entry: examples/train.ts }\n`

/** The config and the warnings its load said, in the order said. */
const load = (text: string, file: string) => loadWithWarnings(text, file)

const quiet = Logger.replace(Logger.defaultLogger, Logger.none)

/** Every refusal, one line each, in document order. */
const refused = (text: string, file = "cluster.yml"): Promise<ReadonlyArray<string>> =>
  Effect.runPromise(Effect.flip(parseCluster(text, file)).pipe(Effect.provide(quiet))).then((errors) => errors.errors.map((error) => error.message))

/** What a fixture reads as: the facts a flodl user would check, cohort's names for flodl's. */
interface Read {
  readonly controller: { readonly host: string; readonly port: number }
  readonly join: { readonly minRanks: number | undefined; readonly timeoutMs: number; readonly maxTimeoutMs: number; readonly start: string }
  readonly workers: ReadonlyArray<{ readonly host: string; readonly devices: unknown; readonly path: string; readonly env: Readonly<Record<string, string>>; readonly sshTarget: string | undefined }>
  readonly env: Readonly<Record<string, string>>
}

const readOf = (config: ClusterConfig): Read => ({
  controller: { host: config.controller.host, port: config.controller.port },
  join: { minRanks: config.controller.join.minRanks, timeoutMs: config.controller.join.timeoutMs, maxTimeoutMs: config.controller.join.maxTimeoutMs, start: config.controller.join.start },
  workers: config.workers.map((worker) => ({ host: worker.host, devices: worker.devices, path: worker.path, env: worker.env, sshTarget: worker.ssh?.target })),
  env: config.env
})

const pathNote = (file: string, at: string) =>
  `${file}: ${at}: path is flodl's (the controller's project checkout, where fdl-cli builds before a run): cohort does not read it; the launcher works in the directory it is started in, and finds job.entry from there; remove it to quiet this note`
const secondsNote = (file: string, at: string, flodl: string, key: string) =>
  `${file}: ${at}: ${flodl} is flodl's name: cohort reads it as ${key} (flodl's whole seconds, as a duration); rename it to ${key} to quiet this note`
const devicesNote = (file: string, at: string) => `${file}: ${at}: local_devices is flodl's name: cohort reads it as devices; rename it to devices to quiet this note`
const ifnameNote = (file: string, at: string, name: string) =>
  `${file}: ${at}: nccl_socket_ifname is flodl's name: cohort reads it as env NCCL_SOCKET_IFNAME (the ranks' env on this host); write env: { NCCL_SOCKET_IFNAME: ${name} } to quiet this note`
const workerArchNote = (file: string, at: string) =>
  `${file}: ${at}: arch is flodl's (the libtorch variant under path/libtorch/ that flodl puts on the ranks' LD_LIBRARY_PATH): cohort does not read it; set LD_LIBRARY_PATH in this worker's env if its ranks need that library; remove it to quiet this note`
const workerDataNote = (file: string, at: string) =>
  `${file}: ${at}: data_path is flodl's (the dataset root flodl hands this host's ranks as their data directory): cohort does not read it; give your program the path in job.args or this worker's env; remove it to quiet this note`
const workerDockerNote = (file: string, at: string) =>
  `${file}: ${at}: docker is flodl's (the Docker image fdl probe takes NCCL from on this host): cohort does not read it; remove it to quiet this note`
const ramShareNote = (file: string, at: string) =>
  `${file}: ${at}: gpu_ram_share is flodl's (the share of host RAM flodl's data loader leaves an integrated GPU): cohort does not read it; remove it to quiet this note`

type Row = readonly [fixture: string, read: Read, warnings: ReadonlyArray<string>]

const rows: ReadonlyArray<Row> = [
  [
    "fdl.yml",
    {
      controller: { host: "192.168.1.10", port: 1337 },
      join: { minRanks: 2, timeoutMs: 120_000, maxTimeoutMs: 600_000, start: "auto" },
      workers: [
        { host: "localhost", devices: { _tag: "Indices", indices: [0, 1] }, path: "/opt/flodl", env: { NCCL_SOCKET_IFNAME: "enp1s0" }, sshTarget: undefined },
        { host: "node-b", devices: { _tag: "Indices", indices: [0] }, path: "/srv/flodl", env: { NCCL_SOCKET_IFNAME: "virbr0" }, sshTarget: "node-b.lan" }
      ],
      env: { NCCL_P2P_DISABLE: "1" }
    },
    [
      "fdl.yml: description (line 2, col 1): description is fdl-cli's (the project's description in fdl's help): cohort does not read it; remove it to quiet this note",
      "fdl.yml: commands (line 3, col 1): commands is fdl-cli's (the commands fdl runs): cohort does not read it; the job section says what every rank runs; remove it to quiet this note",
      pathNote("fdl.yml", "cluster.controller.path (line 11, col 5)"),
      "fdl.yml: cluster.controller.docker (line 12, col 5): docker is flodl's (the Docker Compose service fdl-cli's pre-flight build runs in): cohort does not read it; nothing is built before a cohort run; remove it to quiet this note",
      "fdl.yml: cluster.controller.arch (line 13, col 5): arch is flodl's (the libtorch variant fdl-cli's pre-flight build links): cohort does not read it; nothing is built before a cohort run; remove it to quiet this note",
      "fdl.yml: cluster.controller.data_path (line 14, col 5): data_path is flodl's (the dataset root fdl probe checks on the controller): cohort does not read it; remove it to quiet this note",
      "fdl.yml: cluster.controller.join.min_rank_start (line 16, col 7): min_rank_start is flodl's name: cohort reads it as min_ranks; rename it to min_ranks to quiet this note",
      secondsNote("fdl.yml", "cluster.controller.join.join_timeout (line 17, col 7)", "join_timeout", "timeout"),
      secondsNote("fdl.yml", "cluster.controller.join.max_join_timeout (line 18, col 7)", "max_join_timeout", "max_timeout"),
      "fdl.yml: cluster.controller.join.discovery (line 19, col 7): discovery is flodl's (a window that hosts not under workers join with fdl join): cohort does not read it; cohort admits only the hosts under workers: declare each one, with agent: self for a host whose agent you start (cohort agent, or bun run agent in a checkout); remove it to quiet this note",
      devicesNote("fdl.yml", "cluster.workers[0].local_devices (line 22, col 7)"),
      ifnameNote("fdl.yml", "cluster.workers[0].nccl_socket_ifname (line 23, col 7)", "enp1s0"),
      workerArchNote("fdl.yml", "cluster.workers[0].arch (line 25, col 7)"),
      workerDataNote("fdl.yml", "cluster.workers[0].data_path (line 26, col 7)"),
      devicesNote("fdl.yml", "cluster.workers[1].local_devices (line 28, col 7)"),
      ifnameNote("fdl.yml", "cluster.workers[1].nccl_socket_ifname (line 29, col 7)", "virbr0"),
      workerArchNote("fdl.yml", "cluster.workers[1].arch (line 31, col 7)"),
      workerDataNote("fdl.yml", "cluster.workers[1].data_path (line 32, col 7)"),
      workerDockerNote("fdl.yml", "cluster.workers[1].docker (line 33, col 7)")
    ]
  ],
  [
    "fdl.vm.yml",
    {
      controller: { host: "10.0.0.1", port: 0 },
      // No rank count before localhost's GPUs are listed: the quorum is every declared host then.
      join: { minRanks: undefined, timeoutMs: 30_000, maxTimeoutMs: 90_000, start: "auto" },
      workers: [{ host: "localhost", devices: { _tag: "All" }, path: "/opt/flodl", env: { NCCL_SOCKET_IFNAME: "virbr0" }, sshTarget: undefined }],
      env: {}
    },
    [
      ramShareNote("fdl.vm.yml", "cluster.gpu_ram_share (line 3, col 3)"),
      pathNote("fdl.vm.yml", "cluster.controller.path (line 6, col 5)"),
      secondsNote("fdl.vm.yml", "cluster.controller.join.join_timeout (line 7, col 13)", "join_timeout", "timeout"),
      secondsNote("fdl.vm.yml", "cluster.controller.join.max_join_timeout (line 7, col 31)", "max_join_timeout", "max_timeout"),
      "fdl.vm.yml: cluster.controller.join.token (line 7, col 53): token is flodl's (a pre-shared salt that hosts joining with fdl join present): cohort does not read it; cohort makes a salt for each run and writes it under .cohort/salts/ for the agents you start yourself; remove it to quiet this note",
      devicesNote("fdl.vm.yml", "cluster.workers[0].local_devices (line 9, col 26)"),
      ifnameNote("fdl.vm.yml", "cluster.workers[0].nccl_socket_ifname (line 9, col 46)", "virbr0"),
      ramShareNote("fdl.vm.yml", "cluster.workers[0].gpu_ram_share (line 9, col 92)")
    ]
  ],
  [
    "cluster.yml",
    {
      controller: { host: "10.0.0.1", port: 0 },
      join: { minRanks: 1, timeoutMs: 45_000, maxTimeoutMs: 300_000, start: "hybrid" },
      workers: [{ host: "localhost", devices: { _tag: "Indices", indices: [0] }, path: "/opt/flodl", env: { NCCL_SOCKET_IFNAME: "eth0" }, sshTarget: undefined }],
      env: { OMP_NUM_THREADS: "1" }
    },
    [
      pathNote("cluster.yml", "controller.path (line 4, col 3)"),
      "cluster.yml: controller.join.min_rank_start (line 5, col 11): min_rank_start is flodl's name: cohort reads it as min_ranks; rename it to min_ranks to quiet this note",
      secondsNote("cluster.yml", "controller.join.join_timeout (line 5, col 30)", "join_timeout", "timeout"),
      secondsNote("cluster.yml", "controller.join.max_join_timeout (line 5, col 48)", "max_join_timeout", "max_timeout"),
      devicesNote("cluster.yml", "workers[0].local_devices (line 8, col 5)"),
      ifnameNote("cluster.yml", "workers[0].nccl_socket_ifname (line 9, col 5)", "eth0"),
      workerDockerNote("cluster.yml", "workers[0].docker (line 11, col 5)")
    ]
  ]
]

describe("flodl's files, with a job added, load as written", () => {
  test.each(rows)("%s: flodl's keys read as cohort's, the others each warned once at their place", async (name, read, warnings) => {
    const loaded = await load(withJob(fixture(name)), name)
    expect(readOf(loaded.config)).toEqual(read)
    expect(loaded.warnings).toEqual(warnings)
  })
})

describe("a file with no job", () => {
  test.each([
    ["fdl.yml", "fdl.yml: no job: add `job: { entry: train.ts }` (a TypeScript module every rank runs) or `job: { command: [python3, train.py] }` (any program) at the top level, beside cluster:"],
    ["fdl.vm.yml", "fdl.vm.yml: no job: add `job: { entry: train.ts }` (a TypeScript module every rank runs) or `job: { command: [python3, train.py] }` (any program) at the top level, beside cluster:"],
    ["cluster.yml", "cluster.yml: no job: add `job: { entry: train.ts }` (a TypeScript module every rank runs) or `job: { command: [python3, train.py] }` (any program)"]
  ])("%s is refused in one line that says what to add, with no place", async (name, says) => {
    expect(await refused(fixture(name), name)).toEqual([says])
  })

  test("a job: written with nothing is said where its value goes, as before", async () => {
    expect(await refused("workers: [{ host: a, devices: 1 }]\njob:\n")).toEqual(["cluster.yml: job (line 2, col 5): expected a job section with entry or command"])
  })
})

describe("the cluster: wrapper", () => {
  test("a mistake inside it is said at its own line and column, under cluster.", async () => {
    expect(await refused([
      "description: x",
      "cluster:",
      "  controller: { host: 10.0.0.1, port: 99999 }",
      "  workers:",
      "    - { host: a, local_devices: [0, 0] }",
      "job: { entry: t.ts }"
    ].join("\n"), "fdl.yml")).toEqual([
      "fdl.yml: cluster.controller.port (line 3, col 39): expected a port from 0 to 65535 (0 picks a free one), got 99999",
      "fdl.yml: cluster.workers[0].local_devices (line 5, col 33): device 0 is listed twice"
    ])
  })

  test("cohort's sections may sit inside it too, but not in both places", async () => {
    const inside = await load("cluster:\n  name: lab\n  workers: [{ host: a, devices: 1 }]\n  job: { entry: t.ts }\n", "fdl.yml")
    expect([inside.config.name, inside.config.job.program, inside.warnings]).toEqual(["lab", { _tag: "Entry", entry: "t.ts" }, []])
    expect(await refused("cluster:\n  workers: [{ host: a, devices: 1 }]\n  job: { entry: t.ts }\njob: { entry: u.ts }\n", "fdl.yml")).toEqual([
      "fdl.yml: cluster.job (line 3, col 3): job is given beside cluster: too: keep one of them"
    ])
  })

  test("a key that is neither fdl-cli's nor cohort's is refused beside it, listing what may be there", async () => {
    expect(await refused("cluster:\n  workers: [{ host: a, devices: 1 }]\njob: { entry: t.ts }\nworkers: []\n", "fdl.yml")).toEqual([
      `fdl.yml: (top level) (line 4, col 1): unknown key "workers"; known keys: cluster, name, job, failure_policy`
    ])
  })
})

describe("flodl's keys that cannot be left out, or are given twice", () => {
  const file = (join: string) => `controller:\n  join: ${join}\nworkers: [{ host: a, devices: 2 }]\njob: { entry: t.ts }\n`

  test.each([
    ["tunnel_only: true", "{ tunnel_only: true }", [
      "cluster.yml: controller.join.tunnel_only (line 2, col 11): tunnel_only is flodl's (the port bound to loopback only, for walk-ins that come through ssh forwards): cohort takes no walk-ins, and binds loopback only when every remote worker has tunnel: true; give them that and remove tunnel_only"
    ]],
    ["tunnel_only: yes", "{ tunnel_only: yes }", [
      "cluster.yml: controller.join.tunnel_only (line 2, col 11): tunnel_only is flodl's (the port bound to loopback only, for walk-ins that come through ssh forwards): cohort takes no walk-ins, and binds loopback only when every remote worker has tunnel: true; give them that and remove tunnel_only"
    ]],
    ["flodl's name and its launcher's", "{ join_timeout: 30, join_timeout_secs: 30 }", [
      "cluster.yml: controller.join.join_timeout_secs (line 2, col 29): join_timeout_secs and join_timeout both name timeout: keep one of them"
    ]],
    ["flodl's name and cohort's", "{ max_join_timeout: 90, max_timeout: 90s }", [
      "cluster.yml: controller.join.max_join_timeout (line 2, col 11): max_join_timeout is flodl's name for max_timeout, which is given too: keep one of them"
    ]],
    ["a window in seconds that is no whole number", "{ join_timeout: 1.5 }", [
      "cluster.yml: controller.join.join_timeout (line 2, col 25): expected a whole number of seconds from 1 to 604800, got 1.5"
    ]],
    ["a hard limit below the window", "{ join_timeout: 120, max_join_timeout: 60 }", [
      "cluster.yml: controller.join.max_join_timeout (line 2, col 48): expected a duration ≥ timeout, got 60"
    ]]
  ])("%s", async (_name, join, says) => {
    expect(await refused(file(join))).toEqual(says)
  })

  test("discovery: true with no workers cannot run: said at discovery, beside the empty list", async () => {
    expect(await refused("cluster:\n  controller:\n    join: { discovery: true, min_rank_start: 2 }\n  workers: []\njob: { entry: t.ts }\n", "fdl.yml")).toEqual([
      "fdl.yml: cluster.controller.join.discovery (line 3, col 13): discovery: true forms the world from hosts that dial in with fdl join: cohort admits only the hosts under workers, so list each one there (agent: self for a host whose agent you start)",
      // The quorum is checked against the workers as usual; it is the list that is wrong.
      "fdl.yml: cluster.controller.join.min_rank_start (line 3, col 46): expected at most the 0 ranks the workers declare, got 2",
      "fdl.yml: cluster.workers (line 4, col 12): expected at least one worker"
    ])
  })

  test("tunnel_only: false is only noted", async () => {
    const loaded = await load(file("{ tunnel_only: false }"), "cluster.yml")
    expect(loaded.warnings).toEqual([
      "cluster.yml: controller.join.tunnel_only (line 2, col 11): tunnel_only is flodl's (the port bound to loopback only): cohort does not read it; remove it to quiet this note"
    ])
  })
})
