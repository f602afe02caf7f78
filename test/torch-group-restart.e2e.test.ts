/**
 * torchrun's `--max-restarts`, as torchrun means it, for a world that is fixed
 * at formation: a DDP job written for torchrun (torch_ddp_snapshot_fixture.py,
 * in the shape of PyTorch's multi-node tutorial) under the quick form and
 * `--policy restart:2`, four ranks. One is SIGKILLed after epoch 2: the whole
 * group restarts (every rank, restart count 1), resumes from rank 0's snapshot at
 * the same epoch, and completes with exit 0. Before, the rank came back alone
 * into a world its peer had left, the peer's gloo calls failed, and the run
 * failed with "restart intensity exceeded".
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { debianTorchProblem, python } from "./support/debian-torch.ts"
import { collectLines, waitFor } from "./support/processes.ts"

const root = resolve(import.meta.dir, "..")
const fixture = join(import.meta.dir, "fixtures", "torch_ddp_snapshot_fixture.py")
const dirs: Array<string> = []
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })))
const launchers: Array<{ readonly kill: (signal: "SIGKILL") => void; readonly exitCode: number | null }> = []
afterEach(() => launchers.splice(0).forEach((proc) => proc.exitCode === null && proc.kill("SIGKILL")))

// Registered as skipped when python3-torch cannot be had (see torch.e2e.test.ts), never a pass.
const torchProblem: string | undefined = await debianTorchProblem()
if (torchProblem !== undefined) console.log(`torch group-restart e2e skipped: python3-torch not installable: ${torchProblem}`)

const EPOCHS = 6
/**
 * Four ranks under at most two restarts: the old per-rank restarts took four (the killed rank, then each
 * survivor whose gloo call failed) and failed the run; one group restart is one.
 */
const RANKS = 4
const everyRank = Array.from({ length: RANKS }, (_, rank) => rank)

describe("--policy restart:N on a torchrun-style job (a world fixed at formation)", () => {
  test.skipIf(torchProblem !== undefined)("a SIGKILLed rank restarts the whole group, which resumes from the snapshot and completes", async () => {
    // Launched from a project directory of its own, as a user would: .cohort/ is written there.
    const dir = mkdtempSync(join(tmpdir(), "cohort-group-restart-"))
    dirs.push(dir)
    const snapshot = join(dir, "snapshot.pt")
    const proc = Bun.spawn(
      [process.execPath, join(root, "src", "cli", "launch.ts"), "-n", String(RANKS), "--policy", "restart:2", "--", python, fixture, snapshot, String(EPOCHS), "0.4"],
      { cwd: dir, env: { ...process.env, OMP_NUM_THREADS: "1" }, stdout: "pipe", stderr: "pipe" }
    )
    launchers.push(proc)
    const stdout = collectLines(proc.stdout)
    const stderr = collectLines(proc.stderr)
    const all = () => [...stdout.lines, ...stderr.lines]
    const shown = () => `--- stdout ---\n${stdout.lines.join("\n")}\n--- stderr ---\n${stderr.lines.join("\n")}`

    await waitFor(() => all().some((line) => / rank 1 epoch 2 done$/.test(line)), "rank 1 to finish epoch 2", 60_000).catch((error) => {
      throw new Error(`${String(error)}\n${shown()}`)
    })
    const started = all().map((line) => / rank 1 pid (\d+) restart 0$/.exec(line)).find((match) => match !== null)
    expect(started, shown()).toBeDefined()
    process.kill(Number(started![1]), "SIGKILL")

    const code = await Promise.race([proc.exited, Bun.sleep(90_000).then(() => "timed out")])
    await Promise.all([stdout.done, stderr.done])
    expect(code, shown()).toBe(0)
    const lines = all()
    // Every rank came back, once: the group restarted, not the killed rank alone.
    for (const rank of everyRank) {
      expect(lines.filter((line) => new RegExp(` rank ${rank} pid \\d+ restart 1$`).test(line)), shown()).toHaveLength(1)
    }
    // All resumed after the same epoch, the snapshot's (at least epoch 2, which rank 0 saved before the kill).
    const resumed = everyRank.map((rank) => {
      const match = lines.map((line) => new RegExp(` rank ${rank} resumes after epoch (\\d+)$`).exec(line)).find((each) => each !== null)
      return match === undefined || match === null ? undefined : Number(match[1])
    })
    expect(resumed[0], shown()).toBeGreaterThanOrEqual(2)
    expect(resumed, shown()).toEqual(everyRank.map(() => resumed[0]))
    for (const rank of everyRank) expect(lines.some((line) => line.endsWith(` rank ${rank} epoch ${EPOCHS} done`)), shown()).toBe(true)
    expect(lines.some((line) => line.includes("restart intensity exceeded")), shown()).toBe(false)
  }, 150_000)
})
