/**
 * The Python client's state codec (python/cohort/_state.py) and the checkpoint text built on it: the unit tests
 * in test/python/test_state.py, run twice. With the python3 on PATH (no torch): containers, numbers, the
 * refusals, malformed bytes, and tensors refused for want of torch. With Debian's torch (/usr/bin/python3):
 * a model's and SGD's and Adam's state_dicts, every dtype and shape, a pickle refused without the opt-in. Each
 * run must pass every test it does not skip, and skip only what its python cannot do.
 */
import { expect, test } from "bun:test"
import { join, resolve } from "node:path"
import { debianTorchProblem, python as debianPython } from "./support/debian-torch.ts"

const root = resolve(import.meta.dir, "..")
const plainPython = Bun.which("python3") ?? "/usr/bin/python3"

const runUnitTests = async (python: string) => {
  const proc = Bun.spawn([python, "-m", "unittest", "-v", "test_state"], {
    cwd: join(root, "test", "python"),
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", PYTHONPATH: join(root, "python"), PYTHONDONTWRITEBYTECODE: "1" },
    stdout: "pipe",
    stderr: "pipe"
  })
  const [stderr, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited])
  return { code, stderr }
}

/** unittest's verdict line, e.g. "OK (skipped=7)", and how many ran. */
const verdict = (stderr: string) => ({
  ran: Number(/^Ran (\d+) tests?/m.exec(stderr)?.[1] ?? -1),
  outcome: stderr.trim().split("\n").at(-1)
})

const torchProblem = await debianTorchProblem()
const plainHasTorch = Bun.spawnSync([plainPython, "-c", "import torch"]).exitCode === 0

test.skipIf(plainHasTorch)("without torch: every codec test that needs no torch passes", async () => {
  const ran = await runUnitTests(plainPython)
  // 24 tests: the 6 torch-only ones of Tensors (its class is skipped as one per test) and the pickle one skip.
  expect({ code: ran.code, ...verdict(ran.stderr) }, ran.stderr).toEqual({ code: 0, ran: 24, outcome: "OK (skipped=7)" })
})

test.skipIf(torchProblem !== undefined)("with Debian's torch: state_dicts, dtypes and shapes round-trip, a pickle never loads", async () => {
  const ran = await runUnitTests(debianPython)
  const cuda = Bun.spawnSync([debianPython, "-c", "import torch; print(torch.cuda.is_available())"]).stdout.toString().trim() === "True"
  // Skipped: the test for a python without torch, and the CUDA one where there is no GPU.
  expect({ code: ran.code, ...verdict(ran.stderr) }, ran.stderr).toEqual({ code: 0, ran: 24, outcome: cuda ? "OK (skipped=1)" : "OK (skipped=2)" })
}, 120_000)
