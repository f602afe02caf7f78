/**
 * Recovery figures of a real run whose Python ranks (the client, torch.distributed over gloo) re-form their
 * process group after a death: examples/torch_elastic.py on 3 CPU ranks, rank 1 SIGKILLing itself mid-epoch
 * (test/fixtures/torch_elastic_fixture.py). "Recovered" is the survivors' next counted step, read from
 * --events, well after the hand-over of the dead rank's samples. Needs Debian's python3-torch
 * (test/support/debian-torch.ts installs it as root, or the test skips, saying why).
 */
import { expect, test } from "bun:test"
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { debianTorchProblem, python } from "./support/debian-torch.ts"
import { repoRoot, spawnLaunch } from "./support/launch-scenario.ts"

const torchProblem = await debianTorchProblem()
if (torchProblem !== undefined) console.log(`recovery figures e2e skipped: python3-torch not available: ${torchProblem}`)

test.skipIf(torchProblem !== undefined)("Python ranks re-form their group after a death: its recovery is their next counted step, after the hand-over", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-recovery-"))
  const events = join(dir, "events.jsonl")
  mkdirSync(join(dir, "records"))
  const file = join(dir, "cluster.yml")
  writeFileSync(file, `
name: recovery-figures
workers:
  - { host: localhost, devices: 3, path: ${repoRoot}, env: { OMP_NUM_THREADS: "1", GLOO_SOCKET_IFNAME: lo, TEST_DIE_RANK: "1", TEST_DIE_STEP: "30" } }
job:
  # examples/torch_elastic.py, rank 1 SIGKILLing itself after its 30th step (in epoch 2: 3,000 samples a rank an epoch, 128 a step).
  command: [${python}, ${join(repoRoot, "test", "fixtures", "torch_elastic_fixture.py")}]
  args: [--record, ${join(dir, "records")}, --batch, "128", --lr, "6e-3"]
  dataset_size: 9000
  epochs: 2
  checkpoint: ${join(dir, "checkpoint.json")}
failure_policy:
  after_formation:
    elastic: { max_failure: 50% }
  grace: 2s
`)
  const launch = spawnLaunch(file, {}, ["--events", events, "--quiet"])
  expect(await launch.proc.exited, launch.stderr.lines.join("\n")).toBe(0)
  const lines = readFileSync(events, "utf8").trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
  // Rank 1's death: in the file's order, lost, its samples handed over, the survivors' next step, its figures.
  const index = (name: string) => lines.findIndex((line) => line.event === name && (line.rank === 1 || (line.ranks as Array<number> | undefined)?.includes(1)))
  const order = ["rank_lost", "work_moved", "survivors_stepped", "death_recovered"].map(index)
  expect(order.every((at) => at >= 0) && order.every((at, i) => i === 0 || at > order[i - 1]!), JSON.stringify(order)).toBe(true)
  const [lost, moved, stepped, recovered] = order.map((at) => lines[at]!)
  expect([0, 2]).toContain(stepped!.rank as number)
  // The recovery is the step (as heard: its line may be said as of the line above it), well after the hand-over:
  // the survivors tore their group down and formed the next one in between.
  const recoveredAt = recovered!.recoveredAt as number
  expect(recoveredAt).toBeLessThanOrEqual(stepped!.at as number)
  expect(recoveredAt).toBeGreaterThan(moved!.at as number)
  expect(recovered!.recoverMs).toBe(recoveredAt - (lost!.diedAt as number))
  console.log(`python ranks: died → hand-over ${(moved!.at as number) - (lost!.diedAt as number)} ms, → next counted step ${recovered!.recoverMs} ms`)
}, 120_000)
