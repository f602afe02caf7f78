/**
 * Messages that misled a new user (issue 38, part 3), each typed out whole as the fix makes it: the events file a
 * resumed run adds to, the refusal of a second run of one name and the quick form's free name, `gloo`, the
 * dataset_size refusal's `--set`, the line for a child killed after its grace, ssh's `Key Value` options, the
 * in-process agent's lines in `agent-HOST.log`, and the address a loopback `controller.host` binds and prints.
 * `misleading-messages.e2e.test.ts` has the same through the real CLI.
 *
 * No launcher here: pure decoding, one journal, one console, and for the grace one real process that ignores
 * SIGTERM.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { parseCluster } from "../src/config/ClusterConfig.ts"
import { freeName } from "../src/cli/args/QuickForm.ts"
import { AGENT_ANNOTATION } from "../src/agent/AgentAnnotation.ts"
import { layer as logLayer } from "../src/cli/logger.ts"
import { make as makeConsole } from "../src/cli/RunConsole.ts"
import { CheckpointTaken } from "../src/launcher/run/RunRegistry.ts"
import * as RunJournal from "../src/launcher/view/RunJournal.ts"
import * as ProcessChild from "../src/kernel/ProcessChild.ts"
import * as Shutdown from "../src/kernel/Shutdown.ts"
import { planCluster } from "../src/launch.ts"
import { pageAddress } from "../src/launcher/front/Listen.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-messages-"))
  dirs.push(dir)
  return dir
}

const quiet = Logger.minimumLogLevel(LogLevel.None)
/** Every message of a file the loader refuses, one per mistake. */
const refusal = async (yaml: string): Promise<ReadonlyArray<string>> => {
  const loaded = await Effect.runPromise(parseCluster(yaml, "cluster.yml").pipe(Effect.either, Effect.provide(quiet)))
  if (Either.isRight(loaded)) throw new Error("accepted")
  return loaded.left.message.split("\n")
}
const loaded = async (yaml: string) => Effect.runPromise(parseCluster(yaml, "cluster.yml").pipe(Effect.provide(quiet)))

/** What an Effect logs, as the launcher's logger writes it. */
const logged = async (effect: Effect.Effect<unknown, unknown>): Promise<string> => {
  let text = ""
  await Effect.runPromise(effect.pipe(Effect.provide(logLayer(LogLevel.Info, "cohort: ", (written) => void (text += written)))))
  return text
}

describe("1. --events FILE with --resume adds to the file", () => {
  const journal = (file: string, append: boolean | undefined) =>
    Effect.runPromise(Effect.gen(function*() {
      const made = yield* RunJournal.make({ run: "t", eventsFile: file, append })
      yield* made.record({ event: "phase", at: 5, phase: "training" })
    }).pipe(Effect.provide(quiet)))
  const first = `${JSON.stringify({ event: "run_started", at: 1, run: "t" })}\n`

  test("a resumed run's journal keeps the first run's lines, then adds its own", async () => {
    const file = join(tempDir(), "events.jsonl")
    writeFileSync(file, first, { mode: 0o600 })
    await journal(file, true)
    expect(readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line).event)).toEqual(["run_started", "phase"])
  })

  test("any other run empties it first", async () => {
    const file = join(tempDir(), "events.jsonl")
    writeFileSync(file, first, { mode: 0o600 })
    await journal(file, undefined)
    expect(readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line).event)).toEqual(["phase"])
  })
})

describe("2. one script, two runs", () => {
  test.each([
    ["free", "train", [], "train"],
    ["taken", "train", ["train"], "train-2"],
    ["taken twice", "train", ["train", "train-2"], "train-3"],
    ["a gap is used", "train", ["train", "train-3"], "train-2"],
    ["another name's runs do not count", "train", ["eval", "train-2"], "train"]
  ] as const)("the quick form's name: %s", (_, name, taken, expected) => {
    expect(freeName(name, new Set(taken))).toBe(expected)
  })

  const entry = { id: "train-4242", run: "train", address: "127.0.0.1", port: 41_235, page: "http://127.0.0.1:41235/", pid: 4242, pidStart: undefined, host: hostname(), startedAt: Date.UTC(2026, 0, 1, 12, 1, 7), checkpoint: "", startToken: "" }
  const started = new Date(Date.UTC(2026, 0, 1, 12, 1, 7)).toTimeString().slice(0, 8)

  test("a second run of one name, at the name's own checkpoint: the refusal names --set name=", () => {
    const taken = new CheckpointTaken({ checkpoint: ".cohort/checkpoints/train.json", other: entry, otherHost: false, run: "train" })
    expect(taken.message).toBe(
      `another run named train is running here (pid 4242, started ${started}, page http://127.0.0.1:41235/): it writes .cohort/checkpoints/train.json, ` +
        "which a second run would overwrite. To run both, give this one its own name with --set name=train-2; or wait for that run to end (stop it with kill -TERM 4242)"
    )
  })

  test("on another host", () => {
    const taken = new CheckpointTaken({ checkpoint: ".cohort/checkpoints/train.json", other: { ...entry, host: "gpu-b" }, otherHost: true, run: "train" })
    expect(taken.message).toBe(
      `another run named train is running on gpu-b (pid 4242, started ${started}, page http://127.0.0.1:41235/): it writes .cohort/checkpoints/train.json, ` +
        "which a second run would overwrite. To run both, give this one its own name with --set name=train-2; or wait for that run to end " +
        "(it runs on gpu-b; if that launcher is gone, remove .cohort/runs/train-4242.json)"
    )
  })

  test("a checkpoint the file names: the refusal names --set job.checkpoint=", () => {
    const taken = new CheckpointTaken({ checkpoint: "/ckpt/shared.json", other: entry, otherHost: false, run: "train" })
    expect(taken.message).toBe(
      `the checkpoint /ckpt/shared.json belongs to run train-4242, which is running (pid 4242, started ${started}, page http://127.0.0.1:41235/): ` +
        "a second run would overwrite it. To run both, give this one its own checkpoint with --set job.checkpoint=PATH; or wait for that run to end (stop it with kill -TERM 4242)"
    )
  })
})

describe("4. gloo", () => {
  test("is refused with cohort's name for it", async () => {
    expect(await refusal("workers: [{ host: a, devices: 2 }]\njob: { entry: t.ts, backend: gloo }\n")).toEqual([
      `cluster.yml: job.backend (line 2, col 30): expected one of "cpu_sync", "cpu_cadence", "cpu_async", "nccl", got "gloo" (gloo is cohort's cpu_sync: write backend: cpu_sync)`
    ])
  })

  test("another unknown backend is said as before; cpu_sync is read", async () => {
    expect(await refusal("workers: [{ host: a, devices: 2 }]\njob: { entry: t.ts, backend: gpu }\n")).toEqual([
      `cluster.yml: job.backend (line 2, col 30): expected one of "cpu_sync", "cpu_cadence", "cpu_async", "nccl", got "gpu"`
    ])
    expect((await loaded("workers: [{ host: a, devices: 2 }]\njob: { entry: t.ts, backend: cpu_sync }\n")).job.backend).toBe("cpu_sync")
  })
})

describe("5. dataset_size", () => {
  test("the growth refusal of a plain command job says how to give one on the command line", async () => {
    expect(await refusal("controller: { join: { after_formation: accept } }\nworkers: [{ host: a, devices: 2 }]\njob: { command: [python3, train.py] }\n")).toEqual([
      "cluster.yml: controller.join.after_formation (line 1, col 40): a plain command job (torchrun-style) has a fixed world: growth needs an entry job, " +
        "or a command that uses the Python client (with job.dataset_size: N, or --set job.dataset_size=N on the command line: the samples an epoch covers), " +
        "or after_formation: reject"
    ])
  })
})

describe("6. a child that outlives its grace", () => {
  test("is killed, and the line says so with its label and the grace", async () => {
    const text = await logged(Effect.scoped(Effect.gen(function*() {
      const ready = join(tempDir(), "ready")
      const child = yield* ProcessChild.spawn({
        cmd: ["sh", "-c", `trap '' TERM; touch ${ready}; while :; do sleep 0.05; done`],
        label: "rank 3 of gpu-a",
        shutdown: Shutdown.Shutdown.Grace({ grace: Duration.millis(300) })
      })
      // The trap is set once the file is there: a SIGTERM before it would end the shell at once.
      while (!existsSync(ready)) yield* Effect.sleep(5)
      yield* child.stop("graceful", Duration.millis(300))
    })))
    expect(text).toBe("cohort: warning: rank 3 of gpu-a did not stop within the grace (300ms): killed (SIGKILL)\n")
  })

  test("a grace of 0 asked for the kill: no line", async () => {
    const text = await logged(Effect.scoped(Effect.gen(function*() {
      const ready = join(tempDir(), "ready")
      const child = yield* ProcessChild.spawn({
        cmd: ["sh", "-c", `trap '' TERM; touch ${ready}; while :; do sleep 0.05; done`],
        label: "rank 3 of gpu-a",
        shutdown: Shutdown.Shutdown.Grace({ grace: Duration.zero })
      })
      while (!existsSync(ready)) yield* Effect.sleep(5)
      yield* child.stop("graceful", Duration.zero)
    })))
    expect(text).toBe("")
  })

  test("a child that stops within it: no line", async () => {
    const text = await logged(Effect.scoped(Effect.gen(function*() {
      const child = yield* ProcessChild.spawn({ cmd: ["sleep", "30"], label: "rank 0 of a", shutdown: Shutdown.Shutdown.Grace({ grace: Duration.seconds(5) }) })
      yield* child.stop("graceful", Duration.seconds(5))
    })))
    expect(text).toBe("")
  })
})

describe("7. ssh.options in ssh_config's two forms", () => {
  const options = async (list: string) =>
    (await loaded(`workers: [{ host: a, devices: 2, ssh: { options: ${list} } }]\njob: { entry: t.ts }\n`)).workers[0]!.ssh!.options

  test.each([
    ["Key Value", `["ProxyJump bastion"]`, ["-o", "ProxyJump bastion"]],
    ["Key=Value", `["ProxyJump=bastion"]`, ["-o", "ProxyJump=bastion"]],
    ["Key = Value", `["ProxyJump = bastion"]`, ["-o", "ProxyJump = bastion"]],
    ["spaces around", `["  ServerAliveInterval   30 "]`, ["-o", "ServerAliveInterval   30"]],
    ["after -o as written", `["-o", "ProxyJump bastion", "-4"]`, ["-o", "ProxyJump bastion", "-4"]]
  ] as const)("%s", async (_, list, words) => {
    expect(await options(list)).toEqual(words)
  })

  test("a word that is no setting is still refused", async () => {
    expect(await refusal(`workers: [{ host: a, devices: 2, ssh: { options: ["bastion"] } }]\njob: { entry: t.ts }\n`)).toEqual([
      `cluster.yml: workers[0].ssh.options[0] (line 1, col 51): expected an ssh option: a setting like "StrictHostKeyChecking=no" (passed as -o), or a flag like "-4" or "-o" followed by its value, got "bastion"`
    ])
  })
})

describe("8. the in-process agent's lines", () => {
  test("are said as an agent's, on the launcher's logger", async () => {
    const text = await logged(Effect.all([
      Effect.logWarning("localhost: stopping 2 rank(s): aborted").pipe(Effect.annotateLogs(AGENT_ANNOTATION, "localhost")),
      Effect.logInfo("world formed")
    ]))
    expect(text).toBe("cohort agent localhost: warning: localhost: stopping 2 rank(s): aborted\ncohort: world formed\n")
  })

  test("a line of the machine's, said inside the agent, stays the launcher's", async () => {
    const text = await logged(Effect.logWarning("CPU reductions run in TypeScript").pipe(
      Effect.annotateLogs(AGENT_ANNOTATION, null),
      Effect.annotateLogs(AGENT_ANNOTATION, "localhost")
    ))
    expect(text).toBe("cohort: warning: CPU reductions run in TypeScript\n")
  })

  test("go to agent-HOST.log, not launcher.log; a later line of a message is its text, not a prefix", () => {
    const dir = join(tempDir(), "logs")
    let stderr = ""
    const console = makeConsole({ logDir: dir, stderrIsTty: false, stdoutIsTty: false, write: (text) => void (stderr += text), now: () => 0 })
    console.cohortLine("cohort agent localhost: warning: rank 0 of localhost did not stop within the grace (5s): killed (SIGKILL)\n")
    console.cohortLine("cohort: run failed: rank 0 threw:\ncohort agent evil: not a prefix\n")
    console.close()
    // The terminal is as it was: every line as said.
    expect(stderr).toBe(
      "cohort agent localhost: warning: rank 0 of localhost did not stop within the grace (5s): killed (SIGKILL)\n" +
        "cohort: run failed: rank 0 threw:\ncohort agent evil: not a prefix\n"
    )
    const read = (name: string) => readFileSync(join(dir, name), "utf8")
    expect(readdirSync(dir).sort()).toEqual(["agent-localhost.log", "launcher.log"])
    expect(read("agent-localhost.log")).toBe("warning: rank 0 of localhost did not stop within the grace (5s): killed (SIGKILL)\n")
    expect(read("launcher.log")).toBe("cohort: run failed: rank 0 threw:\ncohort agent evil: not a prefix\n")
  })
})

describe("9. a loopback controller.host", () => {
  const plan = (host: string | undefined) =>
    Effect.runPromise(planCluster({
      ...(host === undefined ? {} : { controller: { host } }),
      workers: [{ host: "localhost", devices: 1 }, { host: "b", devices: 1, agent: "self" }],
      job: { entry: "examples/train.ts" }
    }).pipe(Effect.provide(quiet)))

  test.each([
    ["127.0.0.1", "127.0.0.1", "127.0.0.1"],
    ["localhost", "127.0.0.1", "127.0.0.1"],
    ["10.1.2.3", "0.0.0.0", "10.1.2.3"],
    // Not given: 127.0.0.1 is only where this machine's agent dials; the self-started host may dial another address.
    ["(not given)", "0.0.0.0", hostname()]
  ] as const)("controller.host %s binds %s, and the page is at %s", async (host, bound, page) => {
    const planned = await plan(host === "(not given)" ? undefined : host)
    expect(planned.bindAddress).toBe(bound)
    expect(pageAddress(planned)).toBe(page)
  })
})
