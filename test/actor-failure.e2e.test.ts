/**
 * No actor failure hangs the run. A defect in the coordinator (here: a hook
 * of the run's that throws inside the coordinator's death chain) becomes the
 * run's root cause, and the ranks are stopped in order: the run ends, its
 * result says why, and no rank process is left. Real rank processes of
 * examples/train.ts; the defect is injected through `onRedistributed`, which
 * the coordinator calls when a dead rank's work is handed to the survivors.
 */
import { afterAll, expect, test } from "bun:test"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { launchEffect } from "../src/launch.ts"
import { fetchState, repoRoot } from "./support/launch-scenario.ts"
import { isRunning, waitFor } from "./support/processes.ts"

const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))

test("a defect in the coordinator is the root cause: the survivors are stopped, the run ends, nothing is left", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-actor-failure-"))
  dirs.push(dir)
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: actor-failure
workers:
  - { host: localhost, devices: 3, path: ${repoRoot}, env: { OMP_NUM_THREADS: "1" } }
job:
  entry: examples/train.ts
  dataset_size: 50000
  epochs: 30
  checkpoint: ${join(dir, "checkpoint.json")}
failure_policy:
  after_formation: elastic
  grace: 2s
`)
  let listening!: (port: number) => void
  const port = new Promise<number>((resolve) => (listening = resolve))
  const result = Effect.runPromise(
    launchEffect(file, {
      output: () => {},
      onListening: listening,
      onRedistributed: () => {
        throw new Error("injected defect in the death chain")
      }
    }).pipe(Effect.provide(Logger.minimumLogLevel(LogLevel.None)))
  )
  // Training has begun once some samples are counted: then a death has work to hand on.
  let pids: Array<number> = []
  const at = await port
  await waitFor(() => {
    void fetchState(at).then((state) => {
      if (state?.phase === "training" && (state.training?.samplesDone ?? 0) > 0) pids = state.ranks.flatMap((rank) => rank.pid ?? [])
    })
    return pids.length === 3
  }, "three ranks training", 30_000)
  process.kill(pids[1]!, "SIGKILL")

  const ended = await result
  expect(ended.outcome).toBe("failed")
  expect(ended.exitCode).toBe(1)
  expect(ended.rootCause).toBe("internal error: the coordinator failed: injected defect in the death chain")
  // The survivors were stopped by cohort, not left to run: every rank has ended.
  await waitFor(() => pids.every((pid) => !isRunning(pid)), "every rank process gone", 5_000)
  expect(ended.ranks.map((rank) => rank.exits.length)).toEqual([1, 1, 1])
}, 60_000)
