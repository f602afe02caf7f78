/**
 * A rank that tries to plant the consensus checkpoint, end to end (the issue's attack), with Debian's torch: three
 * Python ranks on one host train a small model (test/fixtures/torch_checkpoint_fixture.py), and rank 2 offers
 * torch.save's pickle of an object whose __reduce__ runs `touch <marker>`: for the last epoch while the first is
 * under way, for the epoch under way, and in place of its state after each epoch.
 *
 * The oracle is what the processes did: the marker file (any unpickling of the payload makes it) and the ranks'
 * own lines. The coordinator refuses rank 2's first offer and says so once, naming it; the honest ranks' state is
 * the consensus on disk, in the client's format; `--resume` hands it to every rank, each loads it, and the marker
 * never appears. A checkpoint that holds a pickle all the same (the file edited by hand) is refused by every rank
 * in one line naming `job.checkpoint_pickle`, and still runs nothing.
 */
import { describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { debianTorchProblem, lastLine, python, runCommand } from "./support/debian-torch.ts"

const root = resolve(import.meta.dir, "..")
const launch = join(root, "src", "cli", "launch.ts")
const fixture = join(import.meta.dir, "fixtures", "torch_checkpoint_fixture.py")

const torchProblem = await debianTorchProblem()
if (torchProblem !== undefined) console.log(`torch checkpoint e2e skipped: python3-torch not available: ${torchProblem}`)

const setUp = () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-torch-checkpoint-"))
  const marker = join(dir, "payload-ran")
  const checkpoint = join(dir, "checkpoint.json")
  const file = join(dir, "torch.yml")
  const write = (epochs: number) =>
    writeFileSync(
      file,
      `name: torch-checkpoint
controller: { host: 127.0.0.1, port: 0 }
workers:
  - host: localhost
    devices: 3
    path: ${JSON.stringify(root)}
    env: { OMP_NUM_THREADS: "1", GLOO_SOCKET_IFNAME: lo, TEST_EVIL_RANK: "2", TEST_MARKER: ${JSON.stringify(marker)} }
job:
  command: [${python}, ${fixture}]
  dataset_size: 48
  epochs: ${epochs}
  checkpoint: ${JSON.stringify(checkpoint)}
failure_policy: { before_formation: kill_all, after_formation: kill_all, grace: 5s }
`
    )
  const run = async (args: Array<string> = []) => {
    const ran = await runCommand([process.execPath, launch, file, ...args], 90_000)
    return { ...ran, all: `${ran.stdout}\n${ran.stderr}`, transcript: `exit ${ran.code}\n--- stdout ---\n${ran.stdout}\n--- stderr ---\n${ran.stderr}` }
  }
  return { checkpoint, marker, run, write }
}

const refusals = (text: string) => text.split("\n").filter((line) => /checkpoint of epoch \d+ is refused/.test(line))

describe("a rank that plants a checkpoint", () => {
  test.skipIf(torchProblem !== undefined)("is refused and said once; the members' state is written; --resume loads it on every rank, and no payload runs", async () => {
    const { checkpoint, marker, run, write } = setUp()
    write(2)
    const first = await run()
    expect(lastLine(first.stderr), first.transcript).toBe("cohort: run completed")
    // Its later offers (the epoch under way, the payload against the consensus) are not said again.
    const said = refusals(first.all)
    expect(said.length, first.transcript).toBe(1)
    expect(said[0]).toContain("rank 2's checkpoint of epoch 2 is refused: no epoch has ended yet: a checkpoint counts only for the epoch just ended, offered after it")
    const record = JSON.parse(readFileSync(checkpoint, "utf8")) as { epoch: number; state: string }
    expect(record.epoch).toBe(2)
    expect(Object.keys(JSON.parse(record.state) as object)).toEqual(["$cohort-state"])
    expect(existsSync(marker)).toBe(false)

    // One more epoch, from the consensus: every rank (the planter too) loads it.
    write(3)
    const resumed = await run(["--resume"])
    expect(lastLine(resumed.stderr), resumed.transcript).toBe("cohort: run completed")
    for (const rank of [0, 1, 2]) expect(resumed.all, resumed.transcript).toContain(`rank ${rank} resumed from epoch 2`)
    expect((JSON.parse(readFileSync(checkpoint, "utf8")) as { epoch: number }).epoch).toBe(3)
    expect(existsSync(marker)).toBe(false)

    // The checkpoint edited to hold the payload: no rank loads it, each says why in one line.
    const edited = JSON.parse(readFileSync(checkpoint, "utf8")) as Record<string, unknown>
    const pickled = Bun.spawnSync([python, "-c", [
      "import sys; sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[:1]",
      "import os; os.environ.setdefault('TEST_MARKER', '" + marker + "')",
      "import importlib.util",
      `spec = importlib.util.spec_from_file_location('f', ${JSON.stringify(fixture)}); f = importlib.util.module_from_spec(spec); spec.loader.exec_module(f)`,
      "print(f.payload())"
    ].join("\n"), join(root, "python")], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin" }, stdout: "pipe", stderr: "pipe" })
    expect(pickled.stderr.toString()).toBe("")
    writeFileSync(checkpoint, JSON.stringify({ ...edited, epoch: 2, state: pickled.stdout.toString().trim() }), { mode: 0o600 })
    const refused = await run(["--resume"])
    expect(refused.code, refused.transcript).not.toBe(0)
    expect(refused.all, refused.transcript).toContain(
      "cohort: this checkpoint holds torch.save's pickle, which runs whatever its writer put in it as it loads: it is not loaded unless job.checkpoint_pickle: true is set in the cluster file (it lets any rank's code run on every host)"
    )
    expect(existsSync(marker)).toBe(false)
  }, 240_000)
})
