/**
 * Every cluster file in examples/ decodes to the run it describes (written
 * out here by hand) and `--dry-run`s through the CLI, fast. A file added to
 * examples/ without a row here fails the first test. The real runs are in
 * examples.e2e.test.ts (this machine) and examples-ssh.e2e.test.ts (the
 * two-host file, over ssh to network-namespace hosts: its `--dry-run` runs
 * the ssh preflight, so it is checked there, and here only decoded and planned).
 */
import { describe, expect, test } from "bun:test"
import { readdirSync } from "node:fs"
import { join, resolve } from "node:path"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { Backoff, Elastic, KillAll, Percent, Phased, Restart } from "../src/kernel/policy/Strategy.ts"
import { planCluster } from "../src/launch.ts"
import { withDefaultRules } from "./support/default-rules.ts"

const root = resolve(import.meta.dir, "..")
const cli = join(root, "src", "cli", "launch.ts")

interface Example {
  /** What the file decodes to, as far as the example is about it. */
  readonly decodes: Readonly<Record<string, unknown>>
  readonly strategy: Phased
  /** Ranks and hosts of its plan. */
  readonly world: number
  readonly hosts: number
  /** Fragments of its `--dry-run`; undefined when the dry run needs other machines (see examples-ssh.e2e.test.ts). */
  readonly dryRun: ReadonlyArray<string> | undefined
}

const examples: Readonly<Record<string, Example>> = {
  "local.yml": {
    decodes: {
      name: "local",
      workers: [{ host: "localhost", devices: { _tag: "Count", count: 4 }, path: ".", env: { OMP_NUM_THREADS: "1" } }],
      job: { program: { _tag: "Entry", entry: "examples/train.ts" }, backend: "cpu_sync", datasetSize: 50_000, epochs: 10 },
      failurePolicy: { grace: 5_000 }
    },
    strategy: withDefaultRules(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }) })),
    world: 4,
    hosts: 1,
    // 50% is the default limit, so the policy is written as the bare word; the table says the limit.
    dryRun: ["run local: 4 rank(s) on 1 host(s)", "[localhost:cpu:r3]", "  after_formation: elastic\n", "else elastic (max_failure 50%)"]
  },
  "restart.yml": {
    decodes: {
      name: "restart",
      workers: [{ host: "localhost", devices: { _tag: "Count", count: 4 }, path: ".", env: { OMP_NUM_THREADS: "1" } }],
      job: { program: { _tag: "Entry", entry: "examples/train.ts" }, datasetSize: 20_000, epochs: 10 },
      failurePolicy: { grace: 5_000 }
    },
    strategy: new Phased({
      beforeFormation: new KillAll(),
      afterFormation: new Restart({ maxRestarts: 3, within: 600_000, backoff: new Backoff({ initial: 1_000, max: 30_000, factor: 2, jitter: 0.2 }), scope: "one" })
    }),
    world: 4,
    hosts: 1,
    dryRun: ["run restart: 4 rank(s) on 1 host(s)", "after_formation:", "restart:", "max_restarts: 3", "scope: one"]
  },
  "two-hosts.yml": {
    decodes: {
      name: "two-hosts",
      controller: { host: "10.0.0.1", port: 0 },
      workers: [
        { host: "node-a", devices: { _tag: "Count", count: 2 }, path: "/srv/cohort", ssh: { target: "10.0.0.11", user: "train", options: ["-o", "ConnectTimeout=5"] } },
        { host: "node-b", devices: { _tag: "Count", count: 2 }, path: "/srv/cohort", ssh: { target: "10.0.0.12", user: "train", options: ["-o", "ConnectTimeout=5"] } }
      ],
      job: { program: { _tag: "Entry", entry: "examples/train.ts" }, datasetSize: 20_000, epochs: 4 }
    },
    strategy: withDefaultRules(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }) })),
    world: 4,
    hosts: 2,
    dryRun: undefined
  },
  "self-agent.yml": {
    decodes: {
      name: "self-agent",
      controller: { host: "127.0.0.1", port: 29_400 },
      workers: [
        { host: "localhost", devices: { _tag: "Count", count: 2 }, agent: undefined },
        { host: "worker-b", devices: { _tag: "Count", count: 2 }, agent: "self" }
      ],
      job: { program: { _tag: "Entry", entry: "examples/train.ts" }, datasetSize: 20_000, epochs: 4 }
    },
    strategy: withDefaultRules(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }) })),
    world: 4,
    hosts: 2,
    dryRun: ["run self-agent: 4 rank(s) on 2 host(s)", "port: 127.0.0.1:29400", "[localhost:cpu:r1]", "[worker-b:cpu:r3]"]
  },
  "torch-ddp.yml": {
    decodes: {
      name: "torch-ddp",
      workers: [{ host: "localhost", devices: { _tag: "Count", count: 4 }, env: { OMP_NUM_THREADS: "1", GLOO_SOCKET_IFNAME: "lo" } }],
      job: { program: { _tag: "Command", command: ["python3", "examples/torch_ddp.py"] }, args: ["--steps", "60"] }
    },
    strategy: withDefaultRules(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }) })),
    world: 4,
    hosts: 1,
    dryRun: [`[localhost:cpu:r0] in ${root}: python3 examples/torch_ddp.py --steps 60`, "MASTER_ADDR=127.0.0.1", "WORLD_SIZE=4", "GLOO_SOCKET_IFNAME=lo"]
  },
  "torch.yml": {
    decodes: {
      name: "torch-elastic",
      workers: [{ host: "localhost", devices: { _tag: "Count", count: 4 }, env: { OMP_NUM_THREADS: "1", GLOO_SOCKET_IFNAME: "lo" } }],
      job: { program: { _tag: "Command", command: ["/usr/bin/python3", "examples/torch_elastic.py"] }, datasetSize: 30_000, epochs: 4 }
    },
    strategy: withDefaultRules(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }) })),
    world: 4,
    hosts: 1,
    dryRun: [
      `[localhost:cpu:r3] in ${root}: /usr/bin/python3 examples/torch_elastic.py`,
      "30000 samples × 4 epoch(s); checkpoint .cohort/checkpoints/torch-elastic.json",
      `PYTHONPATH=${join(root, "python")}`
    ]
  }
}

test("every cluster file in examples/ has its row here", () => {
  expect(readdirSync(join(root, "examples")).filter((name) => /\.ya?ml$/.test(name)).sort()).toEqual(Object.keys(examples).sort())
})

describe("each example decodes to the run it describes and plans", () => {
  for (const [name, example] of Object.entries(examples)) {
    test(name, async () => {
      const planned = await Effect.runPromise(Effect.either(planCluster(join("examples", name))))
      if (Either.isLeft(planned)) throw new Error(planned.left.message)
      const plan = planned.right
      expect(plan.config).toMatchObject(example.decodes)
      expect(plan.config.failurePolicy.strategy).toEqual(example.strategy)
      expect([plan.world, plan.hosts.length]).toEqual([example.world, example.hosts])
    })
  }
})

describe("each example --dry-runs through the CLI", () => {
  for (const [name, example] of Object.entries(examples).filter(([, example]) => example.dryRun !== undefined)) {
    test(name, async () => {
      const child = Bun.spawn([process.execPath, cli, join("examples", name), "--dry-run"], { cwd: root, stdout: "pipe", stderr: "pipe", timeout: 20_000 })
      const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
      expect(stderr).toBe("")
      expect(code).toBe(0)
      for (const fragment of example.dryRun!) expect(stdout).toContain(fragment)
    }, 20_000)
  }
})
