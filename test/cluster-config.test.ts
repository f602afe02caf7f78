/**
 * cluster.yml: the documented file decodes to what it says, capacity fills
 * the join knobs, and every kind of mistake is refused with its place.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { Elastic, KillAll, Percent, Phased } from "../src/kernel/policy/Strategy.ts"
import { parseCluster } from "../src/config/ClusterConfig.ts"
import { withDefaultRules } from "./support/default-rules.ts"

const decode = (text: string) => Effect.runPromise(parseCluster(text, "cluster.yml"))
const problems = (text: string) =>
  Effect.runPromise(Effect.flip(parseCluster(text, "cluster.yml"))).then((error) => error.message.split("\n"))

const minimal = (workers: string, rest = "job: { entry: train.ts }") => `workers:\n${workers}\n${rest}\n`

describe("cluster.yml", () => {
  test("examples/local.yml decodes to the run it describes", async () => {
    const file = join(import.meta.dir, "..", "examples", "local.yml")
    const config = await Effect.runPromise(parseCluster(readFileSync(file, "utf8"), file))
    expect(config).toEqual({
      name: "local",
      controller: {
        host: "127.0.0.1",
        hostWritten: true,
        port: 0,
        join: { minRanks: 4, targetRanks: 4, timeoutMs: 60_000, maxTimeoutMs: 120_000, openAdmission: false, start: "auto", afterFormation: "reject", maxRanks: undefined },
        encrypt: false
      },
      workers: [{ host: "localhost", devices: { _tag: "Count", count: 4 }, path: ".", env: { OMP_NUM_THREADS: "1" }, ssh: undefined, tunnel: false, agent: undefined }],
      env: {},
      job: {
        program: { _tag: "Entry", entry: "examples/train.ts" },
        args: [],
        backend: "cpu_sync",
        datasetSize: 50_000,
        epochs: 10,
        cadence: 8,
        checkpoint: undefined,
        outerOptimizer: undefined,
        asyncAlpha: 0.5
      },
      failurePolicy: {
        strategy: withDefaultRules(new Phased({ beforeFormation: new KillAll(), afterFormation: new Elastic({ maxFailure: new Percent({ p: 50 }) }) })),
        grace: 5_000,
        heartbeatTimeout: 30_000,
        degradedExit: 0
      }
    })
  })

  test("controller.encrypt: false unless asked for", async () => {
    expect((await decode(minimal("  - { host: a, devices: 2 }"))).controller.encrypt).toBe(false)
    expect((await decode(`controller: { encrypt: true }\n${minimal("  - { host: a, devices: 2 }")}`)).controller.encrypt).toBe(true)
  })

  test("join knobs default from capacity; a devices: all host leaves them to the probe", async () => {
    const two = await decode(minimal("  - { host: a, devices: [0, 1] }\n  - { host: b, devices: 3 }"))
    expect([two.controller.join.minRanks, two.controller.join.targetRanks]).toEqual([5, 5])
    const probed = await decode(minimal("  - { host: a, devices: all }"))
    expect([probed.controller.join.minRanks, probed.controller.join.targetRanks]).toEqual([undefined, undefined])
    const named = await decode(minimal("  - { host: a, devices: 2 }", "job: { command: [python3, train.py], args: [--lr, '0.1'] }"))
    expect(named.name).toBe("cluster")
    expect(named.job).toEqual({ program: { _tag: "Command", command: ["python3", "train.py"] }, args: ["--lr", "0.1"], backend: "cpu_sync", datasetSize: 0, epochs: 1, cadence: 8, checkpoint: undefined, outerOptimizer: undefined, asyncAlpha: 0.5 })
  })

  test("growth: after_formation and max_ranks, and max_failure_base on the elastic policy", async () => {
    const grows = await decode(`controller: { join: { min_ranks: 1, after_formation: accept, max_ranks: 8 } }\n${minimal("  - { host: a, devices: 2 }")}failure_policy:\n  after_formation: { elastic: { max_failure: 25% } }\n  max_failure_base: current\n`)
    expect([grows.controller.join.afterFormation, grows.controller.join.maxRanks]).toEqual(["accept", 8])
    expect(grows.failurePolicy.strategy.afterFormation).toEqual(new Elastic({ maxFailure: new Percent({ p: 25 }), base: "current" }))
    const fixed = await decode(minimal("  - { host: a, devices: 2 }"))
    expect([fixed.controller.join.afterFormation, fixed.controller.join.maxRanks]).toEqual(["reject", undefined])
    // A command that plans epochs (the Python client) grows like an entry job.
    const python = await decode(`controller: { join: { after_formation: accept } }\n${minimal("  - { host: a, devices: 2 }", "job: { command: [python3, train.py], dataset_size: 100 }")}`)
    expect([python.controller.join.afterFormation, python.job.datasetSize]).toEqual(["accept", 100])
  })

  const w = "  - { host: a, devices: 2 }"
  test("a run name is a plain name (it names files under .cohort/): one that could lead out of them is refused at its place", async () => {
    const plain = "a plain run name: 1 to 128 letters, digits, '-', '_' or '.', not starting with '.'"
    for (const name of ['"my run/../x"', "../x", "a/b", '".hidden"', '"two words"', `"${"n".repeat(129)}"`, '"tab\\there"']) {
      const shown = JSON.stringify(JSON.parse(name.startsWith('"') ? name : `"${name}"`))
      expect(await problems(`name: ${name}\n${minimal(w)}`)).toEqual([`cluster.yml: name (line 1, col 7): expected ${plain}, got ${shown}`])
    }
    for (const name of ["local", "run-2.v1", "_x", "r9", "a.b_c-d", "n".repeat(128)]) expect((await decode(`name: ${name}\n${minimal(w)}`)).name).toBe(name)
    // Without a name the file's names the run, made plain.
    const fromFile = (file: string) => Effect.runPromise(parseCluster(minimal(w), file)).then((config) => config.name)
    expect(await fromFile("/tmp/my cluster.yml")).toBe("my_cluster")
    expect(await fromFile("/tmp/.hidden.yaml")).toBe("_hidden")
    expect(await fromFile("/tmp/local.yml")).toBe("local")
  })

  test.each([
    ["no workers", "job: { entry: t.ts }", "workers (line 1, col 1): expected a list of workers, each with host and devices"],
    ["negative dataset_size", minimal(w, "job: { entry: t.ts, dataset_size: -5 }"), "job.dataset_size (line 3, col 35): expected a number of samples from 0 to 2147483647, got -5"],
    ["zero epochs", minimal(w, "job: { entry: t.ts, epochs: 0 }"), "job.epochs (line 3, col 29): expected a number of epochs from 1 to 1000000, got 0"],
    ["outer optimizer under cpu_sync", minimal(w, "job: { entry: t.ts, outer_optimizer: { kind: diloco } }"), "an outer optimizer applies to backend cpu_cadence or cpu_async, not cpu_sync"],
    ["unknown outer optimizer", minimal(w, "job: { entry: t.ts, backend: cpu_cadence, outer_optimizer: { kind: adam } }"), `expected one of "diloco", "slowmo", got "adam"`],
    ["async_alpha above 1", minimal(w, "job: { entry: t.ts, backend: cpu_async, async_alpha: 2 }"), "job.async_alpha (line 3, col 54): expected a fraction from 0 to 1, like 0.5, got 2"],
    ["empty workers", "workers: []\njob: { entry: t.ts }", "workers (line 1, col 10): expected at least one worker"],
    ["workers not a list", "workers: { host: a }\njob: { entry: t.ts }", "workers (line 1, col 10): expected a list of workers"],
    ["worker without host", minimal("  - { devices: 2 }"), "workers[0].host (line 2, col 5): expected a host name"],
    ["worker without devices", minimal("  - { host: a }"), "workers[0].devices (line 2, col 5): expected a devices entry"],
    ["too many devices", minimal("  - { host: a, devices: 257 }"), "workers[0].devices (line 2, col 25): expected a number of CPU ranks (0 to 256)"],
    ["devices as a word", minimal("  - { host: a, devices: many }"), `got "many"`],
    ["duplicate device", minimal("  - { host: a, devices: [0, 0] }"), "device 0 is listed twice"],
    ["negative device index", minimal("  - { host: a, devices: [-1] }"), "workers[0].devices[0] (line 2, col 26): expected a GPU index from 0 to 255, got -1"],
    ["duplicate host", minimal(`${w}\n  - { host: a, devices: 1 }`), `workers[1].host (line 3, col 13): host "a" is already workers[0]`],
    ["unknown worker key", minimal("  - { host: a, devices: 2, gpus: 2 }"), `workers[0] (line 2, col 28): unknown key "gpus"; known keys: host, devices, path, env, ssh, tunnel, agent`],
    ["reserved env key", minimal("  - { host: a, devices: 2, env: { CUDA_VISIBLE_DEVICES: '0' } }"), "CUDA_VISIBLE_DEVICES is reserved: device scoping belongs in `devices:`"],
    ["bad ssh port", minimal("  - { host: a, devices: 2, ssh: { port: 70000 } }"), "workers[0].ssh.port (line 2, col 41): expected an ssh port from 1 to 65535, got 70000"],
    ["tunnel not a boolean", minimal("  - { host: a, devices: 2, tunnel: yes please }"), "workers[0].tunnel (line 2, col 36): expected true or false"],
    ["encrypt not a boolean", `controller: { encrypt: yes please }\n${minimal(w)}`, "controller.encrypt (line 1, col 24): expected true or false"],
    ["unknown controller key", `controller: { encrypted: true }\n${minimal(w)}`, `controller (line 1, col 15): unknown key "encrypted" (did you mean "encrypt"?); known keys: host, port, join, encrypt`],
    ["bad port", `controller: { port: 99999 }\n${minimal(w)}`, "controller.port (line 1, col 21): expected a port from 0 to 65535 (0 picks a free one), got 99999"],
    ["target below min", `controller: { join: { min_ranks: 2, target_ranks: 1 } }\n${minimal(w)}`, "controller.join.target_ranks (line 1, col 51): expected at least min_ranks (2), got 1"],
    ["min above capacity", `controller: { join: { min_ranks: 5 } }\n${minimal(w)}`, "controller.join.min_ranks (line 1, col 34): expected at most the 2 ranks the workers declare, got 5"],
    ["max_timeout below timeout", `controller: { join: { timeout: 2m, max_timeout: 1m } }\n${minimal(w)}`, "controller.join.max_timeout (line 1, col 49): expected a duration ≥ timeout"],
    ["manual start with a target", `controller: { join: { start: manual, target_ranks: 2 } }\n${minimal(w)}`, "controller.join.target_ranks (line 1, col 52): a manual start closes the window on the operator's word: remove target_ranks, or use start: hybrid"],
    ["bad start mode", `controller: { join: { start: now } }\n${minimal(w)}`, `controller.join.start (line 1, col 30): expected one of "auto", "manual", "hybrid", got "now"`],
    ["no job", `workers:\n${w}\n`, "no job: add `job: { entry: train.ts }` (a TypeScript module every rank runs) or `job: { command: [python3, train.py] }` (any program)"],
    ["entry and command", minimal(w, "job: { entry: t.ts, command: [x] }"), "job (line 3, col 6): give either entry (a TypeScript module) or command (any program), not both"],
    ["empty command", minimal(w, "job: { command: [] }"), "job.command (line 3, col 17): expected a command as a list of words, got an empty list"],
    ["bad backend", minimal(w, "job: { entry: t.ts, backend: gpu }"), `job.backend (line 3, col 30): expected one of "cpu_sync", "cpu_cadence", "cpu_async", "nccl", got "gpu"`],
    ["unknown top-level key", `${minimal(w)}ranks: 4\n`, `(top level) (line 4, col 1): unknown key "ranks"; known keys: name, controller, workers, env, job, failure_policy`],
    ["bad failure policy", `${minimal(w)}failure_policy: { grace: soon }\n`, "failure_policy.grace (line 4, col 26): expected a duration"],
    ["unknown after_formation", `controller: { join: { after_formation: maybe } }\n${minimal(w)}`, `controller.join.after_formation (line 1, col 40): expected one of "reject", "accept", got "maybe"`],
    ["max_ranks without growth", `controller: { join: { max_ranks: 4 } }\n${minimal(w)}`, "controller.join.max_ranks (line 1, col 34): max_ranks caps growth after formation: add after_formation: accept, or remove max_ranks"],
    ["max_ranks below min_ranks", `controller: { join: { min_ranks: 2, after_formation: accept, max_ranks: 1 } }\n${minimal(w)}`, "controller.join.max_ranks (line 1, col 73): expected at least min_ranks (2), got 1"],
    ["growth of a command job", `controller: { join: { after_formation: accept } }\n${minimal(w, "job: { command: [python3, train.py] }")}`, "a plain command job (torchrun-style) has a fixed world: growth needs an entry job, or a command that uses the Python client (with job.dataset_size: N, or --set job.dataset_size=N on the command line: the samples an epoch covers), or after_formation: reject"],
    ["max_failure_base without a limit", `${minimal(w)}failure_policy: { after_formation: { elastic: { max_failure: none } }, max_failure_base: current }\n`, "only an elastic after_formation policy with a max_failure has a base: add one, or remove max_failure_base"],
    ["bad max_failure_base", `${minimal(w)}failure_policy: { after_formation: { elastic: { max_failure: 2 } }, max_failure_base: now }\n`, `expected one of "formation", "current", got "now"`],
    ["not YAML", "workers: [", "not valid YAML"]
  ])("refuses %s", async (_name, text, expected) => {
    expect((await problems(text)).join("\n")).toContain(expected)
  })

  test("job: every mistake at once, the checks between keys too", async () => {
    const text = minimal(w, "job: { entry: t.ts, dataset_size: -5, checkpoint: 5, async_alpha: 2, backend: cpu_sync, outer_optimizer: { lr: 11 } }")
    expect(await problems(text)).toEqual([
      "cluster.yml: job.dataset_size (line 3, col 35): expected a number of samples from 0 to 2147483647, got -5",
      "cluster.yml: job.checkpoint (line 3, col 51): expected the path of the checkpoint file, got 5",
      "cluster.yml: job.async_alpha (line 3, col 67): expected a fraction from 0 to 1, like 0.5, got 2",
      `cluster.yml: job.outer_optimizer.kind (line 3, col 106): expected one of "diloco", "slowmo", got nothing`,
      "cluster.yml: job.outer_optimizer.lr (line 3, col 112): expected an outer learning rate from 0 to 10, like 0.7, got 11"
    ])
    expect(await problems(minimal(w, "job: { entry: t.ts, epochs: 0, backend: cpu_sync, outer_optimizer: { kind: diloco } }"))).toEqual([
      "cluster.yml: job.epochs (line 3, col 29): expected a number of epochs from 1 to 1000000, got 0",
      "cluster.yml: job.outer_optimizer (line 3, col 68): an outer optimizer applies to backend cpu_cadence or cpu_async, not cpu_sync: remove it or change the backend"
    ])
  })

  test("controller.join: a check between knobs is made although another knob is wrong", async () => {
    expect(await problems(`controller: { join: { min_ranks: x, timeout: 2m, max_timeout: 1m, open_admission: 1 } }\n${minimal(w)}`)).toEqual([
      `cluster.yml: controller.join.min_ranks (line 1, col 34): expected a number of ranks from 1 to 1000000, got "x"`,
      `cluster.yml: controller.join.max_timeout (line 1, col 63): expected a duration ≥ timeout, got "1m"`,
      "cluster.yml: controller.join.open_admission (line 1, col 83): expected true or false, got 1"
    ])
  })

  test("growth of a command job is refused although the job has another mistake", async () => {
    expect(await problems(`controller: { join: { after_formation: accept } }\n${minimal(w, "job: { command: [python3, train.py], epochs: 0 }")}`)).toEqual([
      "cluster.yml: controller.join.after_formation (line 1, col 40): a plain command job (torchrun-style) has a fixed world: growth needs an entry job, " +
        "or a command that uses the Python client (with job.dataset_size: N, or --set job.dataset_size=N on the command line: the samples an epoch covers), or after_formation: reject",
      "cluster.yml: job.epochs (line 4, col 46): expected a number of epochs from 1 to 1000000, got 0"
    ])
  })

  test("all mistakes at once, in document order", async () => {
    const text = [
      "controller: { port: -1 }",
      "workers:",
      "  - { host: a, devices: 300 }",
      "  - { host: a, devices: [1, 1] }",
      "job: { backend: gpu }"
    ].join("\n")
    const lines = await problems(text)
    expect(lines.map((line) => line.replace(/^cluster.yml: /, "").replace(/:.*$/, ""))).toEqual([
      "controller.port (line 1, col 21)",
      "workers[0].devices (line 3, col 25)",
      "workers[1].host (line 4, col 13)",
      "workers[1].devices (line 4, col 25)",
      "job (line 5, col 6)",
      "job.backend (line 5, col 17)"
    ])
  })
})
