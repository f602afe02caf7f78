/**
 * The quick form, `bun run launch -n 4 -- program args`: the flags stand for
 * a cluster file decoded by the file's own decoder. Checked three ways: the
 * flags' parsing (tables), the config they decode to (written out by hand),
 * and the CLI: `--dry-run` prints a cluster file that, saved, plans the same
 * run, and a real run gives every rank the program's words unchanged.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { parseLaunchArgs } from "../src/cli/args/LaunchArgs.ts"
import { parseHosts, parseRanksPerHost, policyOverride, type QuickFormInput, quickForm, runName } from "../src/cli/args/QuickForm.ts"
import type { Override } from "../src/cli/args/Overrides.ts"
import { loadCluster } from "../src/launch.ts"
import { Backoff, Count, Elastic, KillAll, Percent, Phased, Restart } from "../src/kernel/policy/Strategy.ts"
import { withDefaultRules } from "./support/default-rules.ts"

const root = resolve(import.meta.dir, "..")
const cli = join(root, "src", "cli", "launch.ts")
const dir = mkdtempSync(join(tmpdir(), "cohort-quick-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const input = (overrides: Partial<QuickFormInput>): QuickFormInput => ({
  ranksPerHost: undefined,
  hosts: undefined,
  slurm: undefined,
  command: ["python3", "train.py"],
  checkout: "/srv/cohort",
  hostName: "launcher-host",
  ...overrides
})

const decoded = async (form: QuickFormInput, extra: ReadonlyArray<Override> = []) => {
  const quick = quickForm(form)
  if (typeof quick === "string") throw new Error(quick)
  const result = await Effect.runPromise(Effect.either(loadCluster(quick.base, { overrides: [...quick.overrides, ...extra] })))
  if (Either.isLeft(result)) return result.left.errors.map((error) => error.message)
  return result.right
}

describe("the quick form's flags", () => {
  test.each([
    ["4", { ranks: 4 }],
    ["gpu", { ranks: "all" }],
    ["all", { ranks: "all" }],
    ["four", { problem: "--nproc-per-node four: expected a number of ranks per host (like 4), or gpu for every GPU of the host" }]
  ] as const)("--nproc-per-node %p → %p", (text, expected) => {
    expect(parseRanksPerHost(text, "--nproc-per-node")).toEqual(expected)
  })

  test("--hosts: each host with its ranks, or without (then --nproc-per-node says)", () => {
    expect(parseHosts("a:4,b:2,c,d:gpu")).toEqual([
      { host: "a", ranks: 4 },
      { host: "b", ranks: 2 },
      { host: "c", ranks: undefined },
      { host: "d", ranks: "all" }
    ])
    expect(parseHosts("a:4,a:2")).toBe("--hosts a:4,a:2: a is named twice")
    expect(parseHosts("a:x")).toBe(`--hosts a:x: "a:x": expected HOST:RANKS with a number of ranks (like gpu-a:4), or HOST:gpu`)
    expect(parseHosts("a:4,,b")).toBe(`--hosts a:4,,b: "" is not HOST or HOST:RANKS (like gpu-a:4)`)
  })

  test("--policy: each spelling as the failure_policy.after_formation it stands for", () => {
    const path = ["failure_policy", "after_formation"]
    expect(policyOverride("kill_all")).toEqual({ said: "--policy kill_all", path, value: "kill_all", mode: "set" })
    expect(policyOverride("kill_all:0s")).toEqual({ said: "--policy kill_all:0s", path, value: { kill_all: { grace: "0s" } }, mode: "set" })
    expect(policyOverride("elastic")).toEqual({ said: "--policy elastic", path, value: "elastic", mode: "set" })
    expect(policyOverride("elastic:25%")).toEqual({ said: "--policy elastic:25%", path, value: { elastic: { max_failure: "25%" } }, mode: "set" })
    expect(policyOverride("elastic:2")).toEqual({ said: "--policy elastic:2", path, value: { elastic: { max_failure: 2 } }, mode: "set" })
    expect(policyOverride("restart")).toEqual({ said: "--policy restart", path, value: "restart", mode: "set" })
    expect(policyOverride("restart:3")).toEqual({ said: "--policy restart:3", path, value: { restart: { max_restarts: 3 } }, mode: "set" })
    expect(policyOverride("retry")).toBe("--policy retry: expected one of kill_all, kill_all:0s, elastic, elastic:25%, elastic:2, restart or restart:3")
    expect(policyOverride("elastic:")).toStartWith("--policy elastic:: say what follows the colon")
  })

  test.each([
    [["python3", "train.py", "--lr", "0.1"], "train"],
    [["python3", "-u", "scripts/fine-tune.py"], "fine-tune"],
    [["./run.sh"], "run"],
    [["/usr/bin/env"], "env"],
    [["bun", "x.ts"], "x"],
    [["python3", "-c", "print(1)"], "python3"]
  ] as const)("the run's name of %p is %p", (command, name) => {
    expect(runName(command)).toBe(name)
  })
})

describe("what the quick form decodes to", () => {
  test("-n 4 -- python3 train.py --lr 0.1: four CPU ranks here, a command job, the default policy", async () => {
    const config = await decoded(input({ ranksPerHost: "4", command: ["python3", "train.py", "--lr", "0.1"] }))
    expect(config).toMatchObject({
      name: "train",
      controller: { host: "127.0.0.1", port: 0 },
      workers: [{ host: "localhost", devices: { _tag: "Count", count: 4 }, path: ".", env: {}, ssh: undefined, tunnel: false, agent: undefined }],
      env: {},
      job: { program: { _tag: "Command", command: ["python3", "train.py", "--lr", "0.1"] }, args: [], backend: "cpu_sync", epochs: 1, datasetSize: 0 },
      failurePolicy: { grace: 5_000, heartbeatTimeout: 30_000 }
    })
    expect((config as { failurePolicy: { strategy: Phased } }).failurePolicy.strategy).toEqual(
      withDefaultRules(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }) }))
    )
  })

  test("-n gpu: one rank per GPU of this machine (devices: all)", async () => {
    expect(await decoded(input({ ranksPerHost: "gpu" }))).toMatchObject({ workers: [{ host: "localhost", devices: { _tag: "All" } }] })
  })

  test("--hosts a:4,b:2: both hosts over ssh in this checkout's path, dialling this machine by name", async () => {
    const config = await decoded(input({ hosts: "a:4,b:2" }))
    expect(config).toMatchObject({
      controller: { host: "launcher-host" },
      workers: [
        { host: "a", devices: { _tag: "Count", count: 4 }, path: "/srv/cohort" },
        { host: "b", devices: { _tag: "Count", count: 2 }, path: "/srv/cohort" }
      ]
    })
  })

  test("--hosts a,b -n 2: --nproc-per-node gives every host its ranks; a host without any is refused", async () => {
    expect(await decoded(input({ hosts: "a,b", ranksPerHost: "2" }))).toMatchObject({ workers: [{ devices: { count: 2 } }, { devices: { count: 2 } }] })
    expect(quickForm(input({ hosts: "a:2,b" }))).toBe("--hosts a:2,b: b has no number of ranks: write b:4, or give --nproc-per-node for every host")
  })

  test.each([
    ["kill_all", new KillAll()],
    ["kill_all:0s", new KillAll({ grace: 0 })],
    ["elastic", new Elastic({ maxFailure: new Percent({ p: 50 }) })],
    ["elastic:none", new Elastic({})],
    ["elastic:25%", new Elastic({ maxFailure: new Percent({ p: 25 }) })],
    ["elastic:2", new Elastic({ maxFailure: new Count({ n: 2 }) })],
    // The quick form runs a command job with a fixed world: a restart restarts the group, as torchrun's does.
    ["restart", new Restart({ maxRestarts: 3, within: 600_000, backoff: new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0.2 }), scope: "all" })],
    ["restart:5", new Restart({ maxRestarts: 5, within: 600_000, backoff: new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0.2 }), scope: "all" })]
  ] as const)("--policy %p decodes to its strategy after formation, kill_all before", async (spec, strategy) => {
    const policy = policyOverride(spec) as Override
    const config = await decoded(input({ ranksPerHost: "2" }), [policy])
    // An elastic one comes with the default rules, as a file without rules: gets them.
    const phased = new Phased({ beforeFormation: new KillAll(), afterFormation: strategy })
    expect((config as { failurePolicy: { strategy: Phased } }).failurePolicy.strategy).toEqual(strategy._tag === "Elastic" ? withDefaultRules(phased) : phased)
  })

  test("a flag's value the decoder refuses is said as the flag's", async () => {
    expect(await decoded(input({ ranksPerHost: "300" }))).toEqual([
      `--nproc-per-node 300: workers[0].devices: expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got 300`
    ])
    expect(await decoded(input({ ranksPerHost: "2" }), [policyOverride("elastic:lots") as Override])).toEqual([
      `--policy elastic:lots: failure_policy.after_formation.elastic.max_failure: expected a count ≥ 0, a percentage like "25%", or none, got "lots"`
    ])
    expect(await decoded(input({ ranksPerHost: "2" }), [policyOverride("restart:5000") as Override])).toEqual([
      `--policy restart:5000: failure_policy.after_formation.restart.max_restarts: expected a whole number of restarts from 0 to 1000, got 5000`
    ])
  })
})

describe("the launch arguments around the quick form", () => {
  const refused = (argv: ReadonlyArray<string>) => {
    const parsed = parseLaunchArgs(argv)
    return parsed._tag === "Refused" ? parsed.problem.split("\n")[0] : parsed._tag
  }

  test("valued flags take the next word or =VALUE; torchrun's underscore spelling is understood; -- ends cohort's own flags", () => {
    const parsed = parseLaunchArgs(["--nproc_per_node=4", "-v", "--policy", "elastic:25%", "--set", "job.epochs=2", "--set=failure_policy.grace=1s", "--", "python3", "x.py", "--dry-run", "-n", "9", "-v"])
    expect(parsed).toEqual({
      _tag: "Run",
      args: {
        file: undefined,
        dryRun: false,
        resume: false,
        sync: false,
        quiet: false,
        verbose: true,
        fromSlurm: false,
        rawOutput: false,
        ranks: undefined,
        logDir: undefined,
        events: undefined,
        sets: ["job.epochs=2", "failure_policy.grace=1s"],
        policy: "elastic:25%",
        ranksPerHost: "4",
        hosts: undefined,
        rest: ["python3", "x.py", "--dry-run", "-n", "9", "-v"]
      }
    })
  })

  test.each([
    [["-n", "4"], "without a cluster file, give the program every rank runs after --, like  bun run launch --nproc-per-node 4 -- python3 train.py"],
    [["-n", "4", "python3", "x.py"], "--nproc-per-node runs a program without a cluster file: put the program after --, like  bun run launch -n 4 -- python3 x.py"],
    [["c.yml", "-n", "4", "--", "x"], "--nproc-per-node is for a run without a cluster file; with c.yml, say the ranks in its workers (or --set workers[0].devices=4)"],
    [["-n", "4", "-n", "2", "--", "x"], "--nproc-per-node is given twice (4 and 2): give it once"],
    [["--hosts", "a:1", "--from-slurm", "--", "x"], "--hosts and --from-slurm both say the workers: give one of them"],
    [["--hosts", "a:1,b:2", "-n", "2", "--", "x"], "--hosts a:1,b:2 gives every host its ranks already: leave out --nproc-per-node 2"],
    [["--set"], "--set needs a value"],
    [["--", "python3"], "no cluster file given"]
  ] as const)("%p is refused: %p", (argv, problem) => {
    expect(refused(argv)).toBe(problem)
  })
})

interface Ran {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const launch = async (args: ReadonlyArray<string>): Promise<Ran> => {
  const child = Bun.spawn([process.execPath, cli, ...args], { cwd: root, stdin: "ignore", stdout: "pipe", stderr: "pipe", timeout: 30_000, killSignal: "SIGKILL" })
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  return { code, stdout, stderr }
}

const transcript = (ran: Ran) => `exit ${ran.code}\n--- stdout ---\n${ran.stdout}\n--- stderr ---\n${ran.stderr}`

describe("bun run launch, the quick form", () => {
  test("--dry-run prints the cluster file it stands for; saved, that file plans the same run", async () => {
    const quick = await launch(["--nproc-per-node", "3", "--policy", "elastic:1", "--dry-run", "--", "sh", "-c", "echo $RANK", "x y"])
    expect(quick.code, transcript(quick)).toBe(0)
    expect(quick.stderr).toBe("")
    const lines = quick.stdout.split("\n")
    const yaml = lines.filter((line) => !line.startsWith("#")).join("\n")
    expect(yaml.trim()).toBe([
      "name: sh",
      "workers:",
      "  - host: localhost",
      "    devices: 3",
      "job:",
      `  command: [sh, -c, echo $RANK, x y]`,
      "failure_policy:",
      "  after_formation:",
      "    elastic:",
      "      max_failure: 1"
    ].join("\n"))
    expect(lines[0]).toBe("# The cluster file of: bun run launch --nproc-per-node 3 --policy elastic:1 -- sh -c 'echo $RANK' 'x y'")
    const file = join(dir, "saved.yml")
    writeFileSync(file, quick.stdout)
    const saved = await launch([file, "--dry-run"])
    expect(saved.code, transcript(saved)).toBe(0)
    const plan = lines.filter((line) => line.startsWith("#   ")).map((line) => line.slice(4))
    expect(plan.length).toBeGreaterThan(10)
    expect(saved.stdout.trimEnd().split("\n")).toEqual(plan)
    expect(plan).toContain(`  [localhost:cpu:r2] in ${root}: sh -c 'echo $RANK' 'x y'`)
  }, 30_000)

  test("a real run: every rank runs the program with the words after -- exactly as given; -v turns the whole run up to debug", async () => {
    const words = ["a b", "it's", "\"quoted\"", "$HOME", "--lr=0.1"]
    const ran = await launch(["-n", "2", "-v", "--", process.execPath, "test/fixtures/torchrun-env-fixture.ts", ...words])
    expect(ran.code, transcript(ran)).toBe(0)
    expect(ran.stderr.trimEnd().split("\n").at(-1)).toBe("cohort: run completed")
    const seen = ran.stdout.trimEnd().split("\n").map((line) => {
      const match = /^\[localhost:cpu:r(\d)\] (\{.*\})$/.exec(line)
      expect(match, transcript(ran)).not.toBeNull()
      return [Number(match![1]), JSON.parse(match![2]!)] as const
    }).sort((a, b) => a[0] - b[0])
    expect(seen.map(([rank, env]) => [rank, env.RANK, env.WORLD_SIZE, env.args, env.COHORT_LOG_LEVEL])).toEqual([
      [0, "0", "2", words, "debug"],
      [1, "1", "2", words, "debug"]
    ])
    // A debug line of the launcher's own (a command: job has no relay to hear from).
    expect(ran.stderr).toMatch(/^cohort: the port 127\.0\.0\.1:\d+ carries join, control, http, told apart by their first bytes$/m)
    // Where it listens is said once, by the start line (the port's own line says what it carries).
    expect(ran.stderr.split("\n").filter((line) => line.includes("listening on"))).toHaveLength(1)
  }, 30_000)

  test("a quick form whose plan cannot run here still prints its file, then says why: exit 2", async () => {
    const ran = await launch(["-n", "2", "--dry-run", "--", "cohort-no-such-program", "x"])
    expect(ran.code, transcript(ran)).toBe(2)
    expect(ran.stdout).toContain("  command: [cohort-no-such-program, x]")
    expect(ran.stdout).not.toContain("# The plan:")
    expect(ran.stderr).toBe(`cohort: job.command: "cohort-no-such-program" is not found on PATH; install it or give its full path\n`)
  }, 30_000)
})
