/**
 * `bun run launch` as a user meets it when the input is wrong: the CLI in a
 * real process, for every kind of mistake in the file, in the plan (what a
 * file cannot show), in the environment and in the arguments. Each one is
 * refused with status 2 and a `cohort: ` message that names the field, host
 * or variable and says what to do: never a stack trace, never Bun's uncaught
 * `error:`, and nothing started. The good paths (`--help`, `--dry-run`) print
 * what they promise. (The decoder's own table is in cluster-config.test.ts;
 * here every row goes through the process a user runs.)
 *
 * Every process costs about half a second of CPU (the CLI loads the whole
 * launcher before it reads its arguments), so the rows are all started in
 * `beforeAll`, one per CPU at a time, and each test awaits its own outcome.
 */
import type { TCPSocketListener } from "bun"
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { availableParallelism, tmpdir } from "node:os"
import { dirname, join } from "node:path"

const root = join(import.meta.dir, "..")
const cli = join(root, "src", "cli", "launch.ts")

/** The runner's environment without cohort's own variables: a row sets exactly the ones it names. */
const baseEnv: Record<string, string> = Object.fromEntries(
  Object.entries(process.env).filter((entry): entry is [string, string] => !entry[0].startsWith("COHORT_") && entry[1] !== undefined)
)

interface Outcome {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const launch = async (args: ReadonlyArray<string>, env: Readonly<Record<string, string>> = {}): Promise<Outcome> => {
  const child = Bun.spawn([process.execPath, cli, ...args], {
    cwd: root,
    env: { ...baseEnv, ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    // A check that regressed would start a real run: it must not hang the file.
    timeout: 30_000,
    killSignal: "SIGKILL"
  })
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  return { code, stdout, stderr }
}

/** At most `n` tasks at a time; a finished task hands its slot to the next waiting one. */
const limiter = (n: number) => {
  let active = 0
  const waiting: Array<() => void> = []
  return async <A>(task: () => Promise<A>): Promise<A> => {
    if (active < n) active += 1
    else await new Promise<void>((resume) => waiting.push(resume))
    try {
      return await task()
    } finally {
      const next = waiting.shift()
      if (next !== undefined) next()
      else active -= 1
    }
  }
}

/** What a row may depend on: the temp dir, the port a live listener holds, the row's own file. */
interface Context {
  readonly dir: string
  readonly port: number
  readonly file: string
}
type Lazy<A> = A | ((context: Context) => A)
const force = <A>(value: Lazy<A>, context: Context): A =>
  typeof value === "function" ? (value as (context: Context) => A)(context) : value

interface BadInput {
  readonly name: string
  /** The cluster file's text, written to `context.file`; none for rows about arguments. */
  readonly yaml?: Lazy<string>
  /** Default: the file alone, a real launch (every check runs before anything starts). */
  readonly args?: Lazy<ReadonlyArray<string>>
  readonly env?: Readonly<Record<string, string>>
  /** Fragments stderr must contain: the place, the problem, the advice. */
  readonly says: Lazy<ReadonlyArray<string>>
  /** The whole refusal is this one line: no usage, nothing else. */
  readonly oneLine?: boolean
}

const lines = (...parts: ReadonlyArray<string>) => `${parts.join("\n")}\n`
const workers = "workers:\n  - { host: localhost, devices: 2 }" // lines 1–2
const entry = "job: { entry: examples/train.ts }"
const usage = "usage: bun run launch <cluster.yml> [--dry-run]"
const knownTopKeys = "known keys: name, controller, workers, env, job, failure_policy"

const rows: ReadonlyArray<BadInput> = [
  // The file as YAML.
  {
    name: "a YAML syntax error (an unclosed flow map)",
    yaml: lines("workers:", "  - { host: localhost, devices: 2", entry),
    says: ({ file }) => [`${file}: (top level) (line 3, col 1): not valid YAML`, "end with a }"]
  },
  {
    name: "an unknown top-level key",
    yaml: lines(workers, entry, "ranks: 4"),
    says: [`(top level) (line 4, col 1): unknown key "ranks"`, knownTopKeys]
  },
  // workers
  {
    name: "no workers",
    yaml: lines(entry),
    says: ["workers (line 1, col 1): expected a list of workers, each with host and devices"]
  },
  {
    name: "an empty workers list",
    yaml: lines("workers: []", entry),
    says: ["workers (line 1, col 10): expected at least one worker"]
  },
  {
    name: "a worker without devices",
    yaml: lines("workers:", "  - { host: localhost }", entry),
    says: ["workers[0].devices (line 2, col 5): expected a devices entry", "GPU indices like [0, 1]", "got nothing"]
  },
  {
    name: "devices: 257",
    yaml: lines("workers:", "  - { host: localhost, devices: 257 }", entry),
    says: ["workers[0].devices (line 2, col 33): expected a number of CPU ranks (0 to 256)", `or "all", got 257`]
  },
  {
    name: `devices: "some"`,
    yaml: lines("workers:", `  - { host: localhost, devices: "some" }`, entry),
    says: ["workers[0].devices (line 2, col 33): expected a number of CPU ranks", `got "some"`]
  },
  {
    name: "a device index listed twice",
    yaml: lines("workers:", "  - { host: localhost, devices: [0, 1, 0] }", entry),
    says: ["workers[0].devices (line 2, col 33): device 0 is listed twice"]
  },
  {
    name: "a host declared twice",
    yaml: lines("workers:", "  - { host: localhost, devices: 1 }", "  - { host: localhost, devices: 1 }", entry),
    says: [`workers[1].host (line 3, col 13): host "localhost" is already workers[0]: give each host one entry`]
  },
  // env
  {
    name: "reserved keys in the cluster env",
    yaml: lines(workers, "env: { COHORT_X: '1', CUDA_VISIBLE_DEVICES: '0' }", entry),
    says: [
      "env.COHORT_X (line 3, col 8): COHORT_X is reserved for cohort's own processes",
      "env.CUDA_VISIBLE_DEVICES (line 3, col 23): CUDA_VISIBLE_DEVICES is reserved: device scoping belongs in `devices:`"
    ]
  },
  {
    name: "reserved keys in a host's env",
    yaml: lines("workers:", "  - { host: localhost, devices: 2, env: { CUDA_VISIBLE_DEVICES: '0', COHORT_X: '1' } }", entry),
    says: [
      "workers[0].env.CUDA_VISIBLE_DEVICES (line 2, col 43): CUDA_VISIBLE_DEVICES is reserved: device scoping belongs in `devices:` of the worker",
      "workers[0].env.COHORT_X (line 2, col 70): COHORT_X is reserved for cohort's own processes"
    ]
  },
  // job
  {
    name: "a job with both entry and command",
    yaml: lines(workers, "job: { entry: examples/train.ts, command: [echo] }"),
    says: ["job (line 3, col 6): give either entry (a TypeScript module) or command (any program), not both"]
  },
  {
    name: "no job",
    yaml: lines(workers),
    says: [".yml: no job: add `job: { entry: train.ts }`"]
  },
  {
    name: "an empty command",
    yaml: lines(workers, "job: { command: [] }"),
    says: ["job.command (line 3, col 17): expected a command as a list of words, got an empty list"]
  },
  {
    name: "an unknown backend",
    yaml: lines(workers, "job: { entry: examples/train.ts, backend: gloo }"),
    says: [`job.backend (line 3, col 43): expected one of "cpu_sync", "cpu_cadence", "cpu_async", "nccl", got "gloo"`]
  },
  // failure_policy
  {
    name: "an unknown failure strategy",
    yaml: lines(workers, entry, "failure_policy: { after_formation: retry }"),
    says: ["failure_policy.after_formation (line 4, col 36): expected one of kill_all, elastic", `got "retry"`]
  },
  {
    name: "max_failure: 150%",
    yaml: lines(workers, entry, "failure_policy:", "  after_formation:", "    elastic: { max_failure: 150% }"),
    says: [`failure_policy.after_formation.elastic.max_failure (line 6, col 29): expected a count ≥ 0, a percentage like "25%", or none, got "150%"`]
  },
  {
    name: "a restart backoff whose max is below its initial",
    yaml: lines(workers, entry, "failure_policy:", "  after_formation:", "    restart: { backoff: { initial: 10s, max: 1s } }"),
    says: [`failure_policy.after_formation.restart.backoff.max (line 6, col 46): expected a duration ≥ backoff.initial (10s), got "1s"`]
  },
  // controller
  {
    name: "join min_ranks above target_ranks",
    yaml: lines("controller: { join: { min_ranks: 2, target_ranks: 1 } }", workers, entry),
    says: ["controller.join.target_ranks (line 1, col 51): expected at least min_ranks (2), got 1"]
  },
  {
    name: "join max_timeout below timeout",
    yaml: lines("controller: { join: { timeout: 2m, max_timeout: 30s } }", workers, entry),
    says: [`controller.join.max_timeout (line 1, col 49): expected a duration ≥ timeout, got "30s"`]
  },
  {
    name: "port 70000",
    yaml: lines("controller: { port: 70000 }", workers, entry),
    says: ["controller.port (line 1, col 21): expected a port from 0 to 65535 (0 picks a free one), got 70000"]
  },
  // The plan: what the file cannot show.
  {
    name: "another machine's worker while the workers are told to dial loopback",
    yaml: lines("workers:", "  - { host: gpu-node-7.example, devices: 2 }", entry),
    says: ["controller.host: 127.0.0.1 is this machine's loopback, which gpu-node-7.example cannot reach", "tunnel: true"]
  },
  {
    name: "a tunnel on the launcher's own host",
    yaml: lines("workers:", "  - { host: localhost, devices: 2, tunnel: true }", entry),
    says: ["workers[0].tunnel: localhost is this machine: its agent runs inside the launcher, there is nothing to tunnel"]
  },
  {
    name: "a tunnel under backend nccl",
    yaml: lines("workers:", "  - { host: gpu-node-7.example, devices: [0], tunnel: true }", "job: { entry: examples/train.ts, backend: nccl }"),
    says: ["workers[0].tunnel: backend nccl connects the ranks to each other directly"]
  },
  {
    name: "a tunnel on a self-deployed agent",
    yaml: lines("workers:", "  - { host: gpu-node-7.example, devices: 2, tunnel: true, agent: self }", entry),
    says: ["workers[0].tunnel: a tunnel rides the launcher's ssh session, and gpu-node-7.example starts its own agent"]
  },
  {
    name: "a job.entry that does not exist",
    yaml: lines(workers, "job: { entry: examples/no-such-module.ts }"),
    says: [`job.entry: examples/no-such-module.ts does not exist (looked for ${join(root, "examples", "no-such-module.ts")})`, "give the path of a TypeScript module"]
  },
  {
    name: "a job.entry that does not exist, under --dry-run",
    yaml: lines(workers, "job: { entry: examples/no-such-module.ts }"),
    args: ({ file }) => [file, "--dry-run"],
    says: ["job.entry: examples/no-such-module.ts does not exist", "give the path of a TypeScript module"]
  },
  {
    name: "a job.command whose program is not on PATH",
    yaml: lines(workers, "job: { command: [cohort-no-such-program, train.py] }"),
    says: [`job.command: "cohort-no-such-program" is not found on PATH; install it or give its full path`]
  },
  {
    name: "a worker path that is not a directory",
    yaml: ({ file }) => lines("workers:", `  - { host: localhost, devices: 2, path: ${file} }`, entry),
    says: ({ file }) => [`workers[0].path: ${file} is not a directory on localhost`, "give the project checkout's path"]
  },
  {
    name: "min_ranks (with target_ranks) above the declared ranks",
    yaml: lines("controller: { join: { min_ranks: 5, target_ranks: 5 } }", workers, entry),
    says: ["controller.join.min_ranks: 5 ranks can never join: the workers bring 2"]
  },
  {
    // No native library and PATH holding only bun's own folder: the row means the same on a GPU machine.
    name: "devices: all without the native library, where nvidia-smi is not on PATH",
    yaml: lines("workers:", "  - { host: localhost, devices: all }", entry),
    env: { PATH: dirname(process.execPath), COHORT_NATIVE_LIB: "/nonexistent/libcohort_native.so" },
    says: ["workers[0].devices: host localhost has devices: all, but no GPU was found there (nvidia-smi is not on PATH)", "give a number of CPU ranks (devices: 4)"]
  },
  {
    name: "GPU indices without the native library, where nvidia-smi is not on PATH",
    yaml: lines("workers:", "  - { host: localhost, devices: [0, 1] }", entry),
    env: { PATH: dirname(process.execPath), COHORT_NATIVE_LIB: "/nonexistent/libcohort_native.so" },
    says: ["workers[0].devices: host localhost lists GPU indices [0, 1], but its GPUs cannot be listed (nvidia-smi is not on PATH)", "give a number of CPU ranks (devices: 4)"]
  },
  {
    // Probed through the native library, with a CUDA runtime that cannot be loaded: the same on any machine.
    name: "devices: all where the CUDA runtime cannot be loaded",
    yaml: lines("workers:", "  - { host: localhost, devices: all }", entry),
    env: { COHORT_CUDART_LIB: "/nonexistent/libcudart.so" },
    says: ["workers[0].devices: host localhost has devices: all, but no GPU was found there (", "/nonexistent/libcudart.so", "COHORT_CUDART_LIB", "give a number of CPU ranks (devices: 4)"]
  },
  // The launcher's environment.
  {
    name: "COHORT_NET_TIMEOUT_SCALE=abc",
    yaml: lines(workers, entry),
    env: { COHORT_NET_TIMEOUT_SCALE: "abc" },
    says: [`COHORT_NET_TIMEOUT_SCALE must be a finite number ≥ 0.1 (e.g. 2 for twice as long), got "abc"`]
  },
  {
    name: "COHORT_NET_TIMEOUT_SCALE=0.01",
    yaml: lines(workers, entry),
    env: { COHORT_NET_TIMEOUT_SCALE: "0.01" },
    says: [`COHORT_NET_TIMEOUT_SCALE must be a finite number ≥ 0.1`, `got "0.01"`]
  },
  {
    name: "COHORT_LOG_LEVEL=loud",
    yaml: lines(workers, entry),
    env: { COHORT_LOG_LEVEL: "loud" },
    says: [`COHORT_LOG_LEVEL must be one of trace, debug, info, warning or error, got "loud"`]
  },
  {
    name: "COHORT_LOCAL_SLOT set alone",
    yaml: lines(workers, entry),
    env: { COHORT_LOCAL_SLOT: "1" },
    says: [
      "inconsistent role variables",
      "COHORT_AGENT_SPEC=unset, COHORT_RELAY_SPEC=unset, COHORT_RANK_ENVELOPE=unset, COHORT_LOCAL_SLOT=set",
      "unset them"
    ]
  },
  {
    name: "an agent's role variable in the launcher's environment",
    yaml: lines(workers, entry),
    env: { COHORT_AGENT_SPEC: "{}" },
    says: ["COHORT_AGENT_SPEC is set, so this is a cohort agent's environment, not a launcher's", "unset them"]
  },
  {
    name: "--dry-run checks the environment too",
    yaml: lines(workers, entry),
    args: ({ file }) => ["--dry-run", file],
    env: { COHORT_NET_TIMEOUT_SCALE: "abc" },
    says: [`COHORT_NET_TIMEOUT_SCALE must be a finite number ≥ 0.1`]
  },
  // Arguments.
  { name: "no argument", args: [], says: ["cohort: no cluster file given", usage] },
  { name: "an unknown flag", yaml: lines(workers, entry), args: ({ file }) => ["--bogus", file], says: ["cohort: unknown option --bogus", usage] },
  {
    name: "two files",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, file],
    says: ({ file }) => [`cohort: one cluster file at a time, got ${file}, ${file}`, usage]
  },
  {
    name: "a file that does not exist",
    args: ({ dir }) => [join(dir, "missing.yml")],
    says: ({ dir }) => [`cohort: ${join(dir, "missing.yml")}: no such file (looked for ${join(dir, "missing.yml")})\n`],
    oneLine: true
  },
  {
    name: "a relative file that is not where it is looked for, but is in examples/: the path tried, and the one meant",
    args: ["local.yml"],
    says: [`cohort: local.yml: no such file (looked for ${join(root, "local.yml")}); did you mean examples/local.yml?\n`],
    oneLine: true
  },
  // Where the run writes: one line, exit 2, before anything starts; a dry run checks the same.
  {
    name: "--log-dir where no directory can be made (/proc/nope)",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--log-dir", "/proc/nope"],
    says: ["cohort: --log-dir /proc/nope: cannot be made in /proc (", "); give a directory you can write (it is made if missing)\n"],
    oneLine: true
  },
  {
    name: "--log-dir /proc/nope under --dry-run",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--dry-run", "--log-dir", "/proc/nope"],
    says: ["cohort: --log-dir /proc/nope: cannot be made in /proc ("],
    oneLine: true
  },
  {
    name: "--log-dir naming a regular file",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--log-dir", file],
    says: ({ file }) => [`cohort: --log-dir ${file}: is a file, not a directory; give a directory you can write (it is made if missing)\n`],
    oneLine: true
  },
  {
    name: "--log-dir below a regular file, under --dry-run",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--dry-run", "--log-dir", join(file, "logs")],
    says: ({ file }) => [`cohort: --log-dir ${join(file, "logs")}: cannot be made: ${file} is a file, not a directory`],
    oneLine: true
  },
  {
    name: "--events naming a directory",
    yaml: lines(workers, entry),
    args: ({ dir, file }) => [file, "--events", dir],
    says: ({ dir }) => [`cohort: --events ${dir}: is a directory; give the path of a file you can write`],
    oneLine: true
  },
  {
    name: "--events naming a directory, under --dry-run",
    yaml: lines(workers, entry),
    args: ({ dir, file }) => [file, "--dry-run", "--events", dir],
    says: ({ dir }) => [`cohort: --events ${dir}: is a directory`],
    oneLine: true
  },
  {
    name: "--events in a directory that cannot be made, under --dry-run",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--dry-run", "--events", "/proc/nope/events.jsonl"],
    says: ["cohort: --events /proc/nope/events.jsonl: its directory /proc/nope cannot be made in /proc ("],
    oneLine: true
  },
  // Flags checked against the plan.
  {
    name: "--ranks naming a rank the world does not have",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--ranks", "0,9"],
    says: ["cohort: --ranks 0,9: the world has ranks 0 to 1 (2 rank(s) on 1 host(s)), so rank 9 never runs: give numbers from 0 to 1\n"],
    oneLine: true
  },
  {
    name: "--ranks naming a rank the world does not have, under --dry-run",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--dry-run", "--ranks", "5,9"],
    says: ["cohort: --ranks 5,9: the world has ranks 0 to 1 (2 rank(s) on 1 host(s)), so ranks 5, 9 never run"],
    oneLine: true
  },
  // Overrides: checked like the file, said as the flag's.
  {
    name: "--set with a value the file's decoder refuses",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--set", "failure_policy.grace=10x"],
    says: [`cohort: --set failure_policy.grace=10x: expected a duration like "250ms", "5s", "10m" or "1h", got "10x"\n`],
    oneLine: true
  },
  {
    name: "--set with a path the schema does not know, under --dry-run",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--dry-run", "--set", "job.epoch=20"],
    says: [`cohort: --set job.epoch=20: unknown key "epoch" (did you mean "epochs"?); known keys: entry, command, args`],
    oneLine: true
  },
  {
    name: "--set without a value",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--set", "job.epochs"],
    says: ["cohort: --set job.epochs: expected PATH=VALUE, like --set job.epochs=20"],
    oneLine: true
  },
  {
    name: "--policy with an unknown strategy",
    yaml: lines(workers, entry),
    args: ({ file }) => [file, "--policy", "retry"],
    says: ["cohort: --policy retry: expected one of kill_all, kill_all:0s, elastic, elastic:25%, elastic:2, restart or restart:3\n"],
    oneLine: true
  },
  {
    name: "the quick form with too many ranks",
    args: ["--nproc-per-node", "300", "--", "true"],
    says: [`cohort: --nproc-per-node 300: workers[0].devices: expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got 300\n`],
    oneLine: true
  },
  {
    name: "the quick form without a program after --",
    args: ["-n", "4"],
    says: ["cohort: without a cluster file, give the program every rank runs after --, like  bun run launch --nproc-per-node 4 -- python3 train.py", usage]
  },
  {
    name: "--from-slurm outside an allocation",
    args: ["--from-slurm", "--", "true"],
    says: ["cohort: --from-slurm: SLURM_JOB_NODELIST is not set: run inside a Slurm allocation (sbatch, salloc or srun)\n"],
    oneLine: true
  },
  {
    name: "a directory instead of a file",
    args: ({ dir }) => [dir],
    says: ({ dir }) => [`${dir}: this is a directory: give the path of a cluster file inside it`]
  },
  // The port.
  {
    name: "a port a live listener holds",
    yaml: ({ port }) => lines(`controller: { port: ${port} }`, workers, entry),
    says: ({ port }) => [`cannot listen on 127.0.0.1:${port}`, "already in use", "port: 0"]
  }
]

/** Refused as bad input: status 2, the fragments on stderr, no trace of a crash, nothing on stdout. */
const expectRefused = (outcome: Outcome, says: ReadonlyArray<string>, oneLine = false) => {
  const shown = `stderr was:\n${outcome.stderr}`
  if (oneLine) expect(outcome.stderr.trimEnd().split("\n"), shown).toHaveLength(1)
  expect(outcome.stderr, shown).toStartWith("cohort: ")
  for (const fragment of says) expect(outcome.stderr, shown).toContain(fragment)
  expect(outcome.stderr, `a stack trace; ${shown}`).not.toMatch(/^\s+at /m)
  expect(outcome.stderr, `Bun's uncaught handler; ${shown}`).not.toMatch(/^error:|^Bun v\d/m)
  expect(outcome.stderr, `an unfilled value; ${shown}`).not.toMatch(/undefined|NaN|\[object /)
  expect(outcome.stdout, shown).toBe("")
  expect(outcome.code, shown).toBe(2)
}

describe("bun run launch refuses bad input with status 2", () => {
  let dir = ""
  let holder: TCPSocketListener | undefined
  const outcomes = new Map<string, { readonly says: ReadonlyArray<string>; readonly oneLine: boolean; readonly outcome: Promise<Outcome> }>()

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "cohort-launch-input-"))
    holder = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } })
    const slot = limiter(availableParallelism())
    rows.forEach((row, index) => {
      const context: Context = { dir, port: holder!.port, file: join(dir, `row-${index}.yml`) }
      if (row.yaml !== undefined) writeFileSync(context.file, force(row.yaml, context))
      const args = row.args === undefined ? [context.file] : force(row.args, context)
      outcomes.set(row.name, { says: force(row.says, context), oneLine: row.oneLine === true, outcome: slot(() => launch(args, row.env)) })
    })
  })

  afterAll(async () => {
    await Promise.allSettled([...outcomes.values()].map(({ outcome }) => outcome))
    holder?.stop(true)
    rmSync(dir, { recursive: true, force: true })
  })

  test("the table covers at least 20 mistakes", () => {
    expect(rows.length).toBeGreaterThanOrEqual(20)
    expect(new Set(rows.map((row) => row.name)).size).toBe(rows.length)
  })

  for (const row of rows) {
    test(row.name, async () => {
      const { oneLine, outcome, says } = outcomes.get(row.name)!
      expectRefused(await outcome, says, oneLine)
    }, 30_000)
  }
})

test("`bun run launch local.yml` typed in examples/: the path tried, the one meant, and why (bun run starts in the package's folder)", async () => {
  const child = Bun.spawn([process.execPath, "run", "launch", "local.yml"], {
    cwd: join(root, "examples"),
    env: baseEnv,
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    timeout: 30_000,
    killSignal: "SIGKILL"
  })
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  // `bun run` echoes the script's command line on stderr first: the refusal is the line after it.
  expect(stderr.trimEnd().split("\n").at(-1), stderr).toBe(
    `cohort: local.yml: no such file (looked for ${join(root, "local.yml")}); did you mean examples/local.yml? ` +
      `(bun run starts its scripts in the package's folder, ${root}, not in ${join(root, "examples")})`
  )
  expect(stdout).toBe("")
  expect(code).toBe(2)
}, 30_000)

describe("bun run launch, the good paths", () => {
  test("--ranks past the world under a restart policy is a note, not a refusal: a restarted rank may get that number", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-launch-input-"))
    try {
      const file = join(dir, "restart.yml")
      writeFileSync(file, lines(workers, entry, "failure_policy: { after_formation: restart }"))
      const { code, stderr, stdout } = await launch([file, "--dry-run", "--ranks", "3"])
      expect(stderr).toBe("cohort: --ranks 3: the world has ranks 0 to 1 (2 rank(s) on 1 host(s)); rank 3 will show only if a restarted rank or a newcomer gets that number\n")
      expect(stdout).toContain("run restart: 2 rank(s) on 1 host(s)")
      expect(code).toBe(0)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 15_000)

  test("--dry-run shows --set and the arguments after -- in the plan", async () => {
    const { code, stderr, stdout } = await launch(["examples/local.yml", "--dry-run", "--set", "job.epochs=3", "--set", "failure_policy.grace=2s", "--", "lr=0.2", "batch=64"])
    expect(stderr).toBe("")
    expect(code).toBe(0)
    expect(stdout).toContain("50000 samples × 3 epoch(s)")
    expect(stdout).toContain("# runs examples/train.ts with args lr=0.2 batch=64")
    expect(stdout).toContain("failure policy (grace 2s):")
  }, 15_000)

  test("--help prints the usage on stdout and exits 0", async () => {
    const { code, stderr, stdout } = await launch(["--help"])
    expect(stdout).toContain(usage)
    expect(stdout).toContain("--dry-run        print the plan")
    expect(stdout).toContain("Exit status: 0 completed (also DEGRADED), 1 failed, 2 bad input; stopped by a signal:\n129 SIGHUP, 130 SIGINT, 143 SIGTERM.")
    expect(stderr).toBe("")
    expect(code).toBe(0)
  }, 15_000)

  test("--dry-run examples/local.yml prints the plan and starts nothing", async () => {
    const { code, stderr, stdout } = await launch(["--dry-run", "examples/local.yml"])
    expect(stderr).toBe("") // no "listening on", no rank output
    expect(code).toBe(0)
    for (
      const fragment of [
        "run local: 4 rank(s) on 1 host(s)",
        "port: 127.0.0.1:<a free port, printed at start>",
        "join window: min 4, target 4, timeout 1m, max 2m, start auto",
        "backend: cpu_sync",
        `[localhost:cpu:r0] in ${root}: bun `,
        "/rank.",
        "examples/train.ts",
        "[localhost:cpu:r3]",
        "OMP_NUM_THREADS=1",
        "COHORT_LOCAL_SLOT=0",
        "COHORT_LOCAL_SLOT=3",
        "failure policy (grace 5s):",
        "before_formation: kill_all",
        // 50% is the default limit: the policy is the bare word, and the table says the limit.
        "after_formation: elastic\n",
        "exit        after      the same error on 2 ranks: fail [repeated-error]; else elastic (max_failure 50%)"
      ]
    ) expect(stdout).toContain(fragment)
    expect(stdout).not.toContain("[localhost:cpu:r4]")
    expect(stdout).not.toMatch(/^\s+(RANK|WORLD_SIZE|MASTER_ADDR)=/m) // an entry job gets no torchrun variables
  }, 15_000)

  test("--dry-run on a command: job shows the torchrun variables of each rank", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cohort-launch-input-"))
    try {
      const file = join(dir, "torch.yml")
      writeFileSync(
        file,
        lines(
          "name: torch",
          "workers:",
          "  - { host: 127.0.0.1, devices: 2, env: { NCCL_DEBUG: INFO } }",
          `job: { command: [sh, -c, 'echo "$RANK"'], args: [--lr, "0.1"] }`
        )
      )
      const { code, stderr, stdout } = await launch([file, "--dry-run"])
      expect(stderr).toBe("")
      expect(code).toBe(0)
      for (
        const fragment of [
          "run torch: 2 rank(s) on 1 host(s)",
          `[127.0.0.1:cpu:r0] in ${root}: sh -c 'echo "$RANK"' --lr 0.1`,
          "[127.0.0.1:cpu:r1]",
          "NCCL_DEBUG=INFO",
          "RANK=0",
          "RANK=1",
          "LOCAL_RANK=1",
          "WORLD_SIZE=2",
          "LOCAL_WORLD_SIZE=2",
          "GROUP_RANK=0",
          "MASTER_ADDR=127.0.0.1",
          "MASTER_PORT=<a free port, picked at start>",
          "COHORT_LOCAL_SLOT=1",
          "after_formation: elastic"
        ]
      ) expect(stdout).toContain(fragment)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 15_000)
})
