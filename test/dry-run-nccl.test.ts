/** `--dry-run` of a Python job on NCCL says what it cannot check from here (issue 35, part 6); other jobs say nothing of it. */
import { expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { describePlan, makePlan } from "../src/launcher/run/Plan.ts"
import { parseCluster } from "../src/config/ClusterConfig.ts"
import { entryPoints } from "../src/cli/entryPoints.ts"

const planLines = async (job: string) => {
  const config = await Effect.runPromise(parseCluster(`workers:\n  - { host: localhost, devices: 2 }\njob: ${job}\n`, "cluster.yml"))
  const plan = makePlan(config, entryPoints)
  if (Either.isLeft(plan)) throw new Error(plan.left.message)
  return describePlan(plan.right).split("\n")
}

const note = "  not checked here: whether each host's torch has NCCL and sees its GPUs (cohort.init() checks it there, and says so in one line)"

test("a command: job with a plan on backend nccl: the note, right under the backend", async () => {
  const lines = await planLines("{ command: [python3, train.py], backend: nccl, dataset_size: 100 }")
  expect(lines[lines.findIndex((line) => line.startsWith("backend: nccl")) + 1]).toBe(note)
})

test("no note for gloo, for an entry: job, or for a command run as torchrun would (no plan)", async () => {
  for (const job of ["{ command: [python3, train.py], dataset_size: 100 }", "{ entry: examples/train.ts, backend: nccl }", "{ command: [python3, train.py], backend: nccl }"]) {
    expect(await planLines(job)).not.toContain(note)
  }
})
