/**
 * `job.checkpoint_pickle`, the opt-in that lets Python ranks save and load torch.save's pickle: read from the
 * cluster file (off unless written, a mistake said in one line, a misspelling named), carried to each host in
 * its run spec, to each rank in its envelope, and read there by the Python client. Off, nothing says it.
 * Expected values are literals.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { join, resolve } from "node:path"
import { readHostEnvelope } from "../src/wire/messages/Envelope.ts"
import { hostRunSpec } from "../src/launcher/run/Plan.ts"
import { parseCluster } from "../src/config/ClusterConfig.ts"
import { HostRunSpec } from "../src/wire/messages/JoinMessages.ts"
import { pythonEnvelope } from "./support/python-client.ts"

const cluster = (job: string) => `workers:\n  - { host: localhost, devices: 1 }\njob: ${job}\n`
const decode = (job: string) => Effect.runPromise(parseCluster(cluster(job), "cluster.yml"))
const problem = (job: string) => Effect.runPromise(Effect.flip(parseCluster(cluster(job), "cluster.yml"))).then((error) => error.message)

describe("job.checkpoint_pickle in the cluster file", () => {
  test("off unless written; true when written true", async () => {
    expect((await decode("{ entry: t.ts }")).job.checkpointPickle).toBeUndefined()
    expect((await decode("{ entry: t.ts, checkpoint_pickle: false }")).job.checkpointPickle).toBe(false)
    expect((await decode("{ entry: t.ts, checkpoint_pickle: true }")).job.checkpointPickle).toBe(true)
  })

  test("a value that is not true or false, and a misspelt key, are said in one line", async () => {
    expect(await problem("{ entry: t.ts, checkpoint_pickle: 1 }")).toBe(
      "cluster.yml: job.checkpoint_pickle (line 3, col 40): expected true or false (true lets any rank's code run on every host), got 1"
    )
    expect(await problem("{ entry: t.ts, checkpoint_pickel: true }")).toBe(
      "cluster.yml: job (line 3, col 21): unknown key \"checkpoint_pickel\" (did you mean \"checkpoint_pickle\"?); known keys: entry, command, args, backend, " +
        "dataset_size, epochs, cadence, checkpoint, checkpoint_pickle, outer_optimizer, async_alpha"
    )
  })
})

describe("the opt-in reaches the ranks", () => {
  test("a host's run spec carries it only when it is on, and the spec's schema reads it", async () => {
    const on = hostRunSpec((await decode("{ command: [python3, t.py], dataset_size: 8, checkpoint_pickle: true }")), "localhost", 10_000)
    expect(on.checkpointPickle).toBe(true)
    expect(Schema.decodeUnknownSync(HostRunSpec)(on).checkpointPickle).toBe(true)
    const off = hostRunSpec((await decode("{ command: [python3, t.py], dataset_size: 8, checkpoint_pickle: false }")), "localhost", 10_000)
    expect("checkpointPickle" in off).toBe(false)
  })

  /** One CPU rank's envelope, with `changes`. */
  const envelope = (changes: Record<string, unknown>) =>
    pythonEnvelope({ worldSize: 1, ranks: [0], devices: [{ kind: "cpu", slot: 0 }], ...changes })

  test("the envelope reads it when present, and refuses what is not true or false", () => {
    const read = (changes: Record<string, unknown>) => readHostEnvelope("COHORT_RANK_ENVELOPE", envelope(changes))
    expect((read({ checkpointPickle: true }) as { checkpointPickle?: boolean }).checkpointPickle).toBe(true)
    expect("checkpointPickle" in (read({}) as object)).toBe(false)
    expect(read({ checkpointPickle: "yes" })).toBe("COHORT_RANK_ENVELOPE is not a valid cohort spec: checkpointPickle must be true or false")
  })

  test("the Python client reads it from the envelope (off when absent), and refuses what is not true or false", () => {
    const root = resolve(import.meta.dir, "..")
    const python = Bun.which("python3") ?? "/usr/bin/python3"
    const read = (changes: Record<string, unknown>) => {
      const child = Bun.spawnSync([python, "-c", "from cohort._envelope import read_envelope\ntry: print(read_envelope().checkpoint_pickle)\nexcept Exception as e: print(e)"], {
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", PYTHONPATH: join(root, "python"), COHORT_RANK_ENVELOPE: envelope(changes), COHORT_LOCAL_SLOT: "0" },
        stdout: "pipe",
        stderr: "pipe"
      })
      return child.stdout.toString().trim()
    }
    expect(read({ checkpointPickle: true })).toBe("True")
    expect(read({})).toBe("False")
    expect(read({ checkpointPickle: "yes" })).toBe(
      "COHORT_RANK_ENVELOPE is not a valid cohort envelope: checkpointPickle is not true or false; it is set by cohort for its own processes, do not set it by hand"
    )
  })
})
