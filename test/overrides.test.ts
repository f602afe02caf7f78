/**
 * `--set PATH=VALUE` and the arguments after `--`: applied to the file's
 * parsed document and decoded with it, so they are checked like the file,
 * and a mistake in what a flag put there is said as that flag's. The
 * expected values are written out by hand.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { argsOverride, formatPath, type Override, parsePath, parseSet } from "../src/cli/args/Overrides.ts"
import { loadCluster } from "../src/launch.ts"
import { Restart } from "../src/kernel/policy/Strategy.ts"

const dir = mkdtempSync(join(tmpdir(), "cohort-overrides-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

let files = 0
const fileOf = (text: string) => {
  const file = join(dir, `cluster-${files++}.yml`)
  writeFileSync(file, text)
  return file
}

const base = `name: base
workers:
  - { host: localhost, devices: 2 }
job:
  entry: examples/train.ts
  args: [lr=0.3]
  epochs: 10
failure_policy:
  grace: 5s
`

const sets = (...texts: ReadonlyArray<string>): Array<Override> =>
  texts.map((text) => {
    const set = parseSet(text)
    if (typeof set === "string") throw new Error(set)
    return set
  })

const load = (text: string, overrides: ReadonlyArray<Override>) => Effect.runPromise(Effect.either(loadCluster(fileOf(text), { overrides })))

/** The messages of a refused load, one per mistake. */
const refusal = async (text: string, overrides: ReadonlyArray<Override>): Promise<Array<string>> => {
  const loaded = await load(text, overrides)
  if (Either.isRight(loaded)) throw new Error("expected the load to be refused")
  return loaded.left.errors.map((error) => error.message)
}

const loaded = async (text: string, overrides: ReadonlyArray<Override>) => {
  const result = await load(text, overrides)
  if (Either.isLeft(result)) throw new Error(result.left.message)
  return result.right
}

describe("parsePath and parseSet", () => {
  test.each([
    ["job.epochs", ["job", "epochs"]],
    ["workers[0].devices", ["workers", 0, "devices"]],
    ["workers[1].ssh.options[2]", ["workers", 1, "ssh", "options", 2]],
    ["env.OMP_NUM_THREADS", ["env", "OMP_NUM_THREADS"]],
    ["name", ["name"]]
  ] as const)("%p → %p, written back the same", (text, path) => {
    expect(parsePath(text)).toEqual([...path])
    expect(formatPath(path)).toBe(text)
  })

  test.each(["job..epochs", "workers[x].host", "job.", "a b"])("%p is not a path", (text) => {
    expect(parsePath(text)).toBe(`"${text}" is not a path like job.epochs or workers[0].devices`)
  })

  test("the value is YAML: a number, a duration's text, a list, a mapping, nothing", () => {
    expect(parseSet("job.epochs=20")).toEqual({ said: "--set job.epochs=20", path: ["job", "epochs"], value: 20, mode: "set" })
    expect(parseSet("failure_policy.grace=10s")).toMatchObject({ value: "10s" })
    expect(parseSet("job.args=[lr=0.1, \"a b\"]")).toMatchObject({ value: ["lr=0.1", "a b"] })
    expect(parseSet("controller.join={ timeout: 5s }")).toMatchObject({ path: ["controller", "join"], value: { timeout: "5s" } })
    expect(parseSet("job.checkpoint=")).toMatchObject({ value: null })
    expect(parseSet("env.A=b=c")).toMatchObject({ path: ["env", "A"], value: "b=c" })
  })

  test("a --set that is not PATH=VALUE, or whose value is not YAML, is refused naming it", () => {
    expect(parseSet("job.epochs")).toBe("--set job.epochs: expected PATH=VALUE, like --set job.epochs=20 or --set failure_policy.grace=10s")
    expect(parseSet("=3")).toStartWith("--set =3: expected PATH=VALUE")
    expect(parseSet("job.args=[a")).toStartWith("--set job.args=[a: the value is not valid YAML (")
  })
})

describe("overrides decoded with the file", () => {
  test("values replace the file's, sections and keys the file lacks are made, and the rest of the file stands", async () => {
    const config = await loaded(base, sets("job.epochs=20", "failure_policy.grace=10s", "workers[0].devices=3", "env.OMP_NUM_THREADS='1'", "job.dataset_size=5000"))
    expect(config.job.epochs).toBe(20)
    expect(config.job.datasetSize).toBe(5000)
    expect(config.job.args).toEqual(["lr=0.3"])
    expect(config.failurePolicy.grace).toBe(10_000)
    expect(config.workers.map((worker) => [worker.host, worker.devices])).toEqual([["localhost", { _tag: "Count", count: 3 }]])
    expect(config.env).toEqual({ OMP_NUM_THREADS: "1" })
    expect(config.name).toBe("base")
  })

  test("later overrides win; a whole section may be given; an index just past a list's end adds an item", async () => {
    const config = await loaded(
      base,
      sets(
        "job.epochs=2",
        "job.epochs=3",
        "failure_policy={ after_formation: { restart: { max_restarts: 5 } }, grace: 1s }",
        "workers[1]={ host: 127.0.0.1, devices: 1 }"
      )
    )
    expect(config.job.epochs).toBe(3)
    expect(config.failurePolicy.grace).toBe(1_000)
    const after = config.failurePolicy.strategy.afterFormation
    expect(after).toBeInstanceOf(Restart)
    expect((after as Restart).maxRestarts).toBe(5)
    expect(config.workers.map((worker) => worker.host)).toEqual(["localhost", "127.0.0.1"])
  })

  test("the arguments after -- are appended to job.args, each word as it is", async () => {
    const words = ["lr=0.1", "a b", "it's", "\"quoted\"", "$HOME", "--flag=x y"]
    expect((await loaded(base, [argsOverride(words)])).job.args).toEqual(["lr=0.3", ...words])
    // A file without args gets them as its args.
    const bare = base.replace("  args: [lr=0.3]\n", "")
    expect((await loaded(bare, [argsOverride(["x"])])).job.args).toEqual(["x"])
  })

  test("a value the file's decoder refuses is said as the flag's, with what was expected", async () => {
    expect(await refusal(base, sets("failure_policy.grace=10x"))).toEqual([
      `--set failure_policy.grace=10x: expected a duration like "250ms", "5s", "10m" or "1h", got "10x"`
    ])
    expect(await refusal(base, sets("job.epochs=0"))).toEqual(["--set job.epochs=0: expected a number of epochs from 1 to 1000000, got 0"])
    expect(await refusal(base, sets("job.backend=gloo"))).toEqual([
      `--set job.backend=gloo: expected one of "cpu_sync", "cpu_cadence", "cpu_async", "nccl", got "gloo" (gloo is cohort's cpu_sync: write backend: cpu_sync)`
    ])
  })

  test("a mistake deep inside a section given whole names the flag and the place inside it", async () => {
    expect(await refusal(base, sets("failure_policy={ after_formation: { elastic: { max_failure: lots } } }"))).toEqual([
      `--set failure_policy={ after_formation: { elastic: { max_failure: lots } } }: failure_policy.after_formation.elastic.max_failure: ` +
      `expected a count ≥ 0, a percentage like "25%", or none, got "lots"`
    ])
  })

  test("a path the schema does not know is refused like the file's unknown keys, with a did-you-mean", async () => {
    expect(await refusal(base, sets("job.epoch=20"))).toEqual([
      `--set job.epoch=20: unknown key "epoch" (did you mean "epochs"?); known keys: entry, command, args, backend, dataset_size, epochs, cadence, checkpoint, checkpoint_pickle, outer_optimizer, async_alpha`
    ])
    expect(await refusal(base, sets("failure_policy.grase=10s"))).toEqual([
      `--set failure_policy.grase=10s: unknown key "grase" (did you mean "grace"?); known keys: before_formation, after_formation, rules, grace, heartbeat_timeout, max_failure_base, degraded_exit`
    ])
    expect(await refusal(base, sets("jobs.epochs=3"))).toEqual([
      `--set jobs.epochs=3: unknown key "jobs" (did you mean "job"?); known keys: name, controller, workers, env, job, failure_policy`
    ])
    expect(await refusal(base, sets("workers[0].device=4"))).toEqual([
      `--set workers[0].device=4: unknown key "device" (did you mean "devices"?); known keys: host, devices, path, env, ssh, tunnel, agent`
    ])
  })

  test("a path through a value, a key on a list, or an index past a list's end is refused naming the flag", async () => {
    expect(await refusal(base, sets("job.entry.x=1"))).toEqual([`--set job.entry.x=1: job.entry is "examples/train.ts", not a mapping: there is no key x in it`])
    expect(await refusal(base, sets("workers.host=x"))).toEqual(["--set workers.host=x: workers is a list, not a mapping: there is no key host in it"])
    expect(await refusal(base, sets("workers[3].devices=2"))).toEqual(["--set workers[3].devices=2: workers has 1 item(s) ([0] to [0]): there is no [3]"])
    expect(await refusal(base, sets("job[0]=x"))).toEqual(["--set job[0]=x: job is a mapping, not a list: give a key, not [0]"])
  })

  test("every mistake at once: the flags' and the file's own, the file's with their lines", async () => {
    const broken = base.replace("devices: 2", "devices: 300")
    expect(await refusal(broken, sets("job.epoch=20", "failure_policy.grace=soon", "job.entry.x=1"))).toEqual([
      `--set job.entry.x=1: job.entry is "examples/train.ts", not a mapping: there is no key x in it`,
      `--set job.epoch=20: unknown key "epoch" (did you mean "epochs"?); known keys: entry, command, args, backend, dataset_size, epochs, cadence, checkpoint, checkpoint_pickle, outer_optimizer, async_alpha`,
      `--set failure_policy.grace=soon: expected a duration like "250ms", "5s", "10m" or "1h", got "soon"`,
      `${join(dir, `cluster-${files - 1}.yml`)}: workers[0].devices (line 3, col 33): expected a number of CPU ranks (0 to 256), a list of GPU indices like [0, 1], or "all", got 300`
    ])
  })

  test("appending to a job.args that is not a list is refused, naming the arguments after --", async () => {
    expect(await refusal(base.replace("args: [lr=0.3]", "args: lr=0.3"), [argsOverride(["x"])])).toEqual([
      `the arguments after --: job.args in the file is "lr=0.3", not a list to add to`,
      `${join(dir, `cluster-${files - 1}.yml`)}: job.args (line 6, col 9): expected a list of arguments, got "lr=0.3"`
    ])
  })

  test("a default sets only where the file has nothing", async () => {
    const withHost = `controller: { host: 10.1.2.3 }\n${base}`
    const fallback: Override = { said: "--from-slurm", path: ["controller", "host"], value: "node7", mode: "default" }
    expect((await loaded(withHost, [fallback])).controller.host).toBe("10.1.2.3")
    expect((await loaded(base, [fallback])).controller.host).toBe("node7")
  })
})
