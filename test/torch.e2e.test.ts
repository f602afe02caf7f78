/**
 * An unmodified `torch.distributed` script under `bun run launch`, as a user
 * would run it: a `command:` job, four CPU ranks on one host, env:// init
 * from the torchrun variables cohort sets, a gloo all_reduce across them.
 *
 * The torch test needs Debian's python3-torch for /usr/bin/python3 (not the
 * pyenv python3 on PATH). When it is missing, the setup installs it as root;
 * when that cannot be done, the torch test says why and skips. (The torchrun
 * variables themselves are checked in launch-cli.test.ts.)
 */
import { describe, expect, test } from "bun:test"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { debianTorchProblem, lastLine, python, type Ran, runCommand } from "./support/debian-torch.ts"

const root = resolve(import.meta.dir, "..")
const launch = join(root, "src", "cli", "launch.ts")
const allreduceScript = join(import.meta.dir, "fixtures", "torch_allreduce.py")
const dir = mkdtempSync(join(tmpdir(), "cohort-torch-"))
const ranks = [0, 1, 2, 3]

const writeCluster = (name: string, command: ReadonlyArray<string>) => {
  const file = join(dir, `${name}.yml`)
  writeFileSync(
    file,
    `name: ${name}
controller: { host: 127.0.0.1, port: 0 }
workers:
  - host: localhost
    devices: 4
    path: ${JSON.stringify(root)}
    env: { OMP_NUM_THREADS: "1" }
job:
  command: ${JSON.stringify(command)}
`
  )
  return file
}

const launchCluster = async (file: string, timeoutMs: number) => {
  const started = performance.now()
  const ran = await runCommand([process.execPath, launch, file], timeoutMs)
  return { ...ran, ms: Math.round(performance.now() - started) }
}

/** What a run printed, for assertion messages. */
const transcript = (ran: Ran) => `exit ${ran.code}\n--- stdout ---\n${ran.stdout}\n--- stderr ---\n${ran.stderr}`

// The setup runs while the file loads (top-level await), so that the test is registered as skipped, and
// counted as a skip by the runner, when python3-torch cannot be had: never a test that returns early and passes.
const torchProblem: string | undefined = await debianTorchProblem()
if (torchProblem !== undefined) console.log(`torch e2e skipped: python3-torch not installable: ${torchProblem}`)

describe("bun run launch with a command: job, torchrun-style", () => {
  test.skipIf(torchProblem !== undefined)("an unmodified torch.distributed gloo script all-reduces across 4 ranks", async () => {
    const ran = await launchCluster(writeCluster("torch-allreduce", [python, allreduceScript]), 55_000)
    console.log(`torch e2e: 4 gloo ranks ran in ${ran.ms} ms`)
    expect(ran.code, transcript(ran)).toBe(0)
    expect(lastLine(ran.stderr), transcript(ran)).toBe("cohort: run completed")
    for (const rank of ranks) expect(ran.stdout, transcript(ran)).toContain(`[localhost:cpu:r${rank}] rank ${rank}: allreduce ok 10.0`)
  }, 60_000)
})
