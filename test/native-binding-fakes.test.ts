/**
 * The GPU half of the binding on a machine without a GPU: the GPU test file
 * runs against stand-ins for libcudart, libcuda and libnccl (host memory,
 * one fake device, an all-reduce over a world of one), built here with cc.
 * It checks cohort's side of the contract (argument order, out-parameters,
 * lifetimes, error typing), not CUDA or NCCL themselves: those run on a GPU
 * machine (scripts/gpu-check.sh).
 */
import { expect, test } from "bun:test"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { repoRoot } from "./support/launch-scenario.ts"

const cc = Bun.which("cc") ?? Bun.which("gcc")
if (cc === null) console.log("stand-in GPU library test skipped: no C compiler (cc) to build the stand-in GPU libraries")

test.skipIf(cc === null)("the binding's CUDA and NCCL services work against stand-in libraries", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cohort-fake-gpu-"))
  for (const [source, library] of [["cudart", "libcudart.so"], ["cuda", "libcuda.so.1"], ["nccl", "libnccl.so.2"]] as const) {
    const built = Bun.spawnSync([cc!, "-shared", "-fPIC", "-O2", "-o", join(dir, library), join(import.meta.dir, `fixtures/fake-gpu/${source}.c`)], { stderr: "pipe" })
    expect(built.exitCode, built.stderr.toString()).toBe(0)
  }
  const run = Bun.spawn([process.execPath, "test", "test/native.gpu.test.ts"], {
    cwd: repoRoot,
    env: { ...process.env, COHORT_CUDART_LIB: join(dir, "libcudart.so"), LD_LIBRARY_PATH: dir, COHORT_NCCL_LIB: join(dir, "libnccl.so.2") },
    stdout: "pipe",
    stderr: "pipe"
  })
  const [code, out, err] = await Promise.all([run.exited, new Response(run.stdout).text(), new Response(run.stderr).text()])
  const report = `${out}\n${err}`
  expect(code, report).toBe(0)
  expect(report).toMatch(/\b10 pass\b/)
  expect(report).not.toContain("skipped")
}, 30_000)
