/**
 * GPU sampling through NVML, end to end on a machine without a GPU: the
 * native library against a stand-in libnvidia-ml (fixtures/fake-gpu/nvml.c,
 * built here with cc and found through LD_LIBRARY_PATH, as the real one is
 * through the loader's path), then without any. The library loads NVML once
 * per process, so each case runs fixtures/fake-gpu/nvml-scenario.ts in a
 * process of its own.
 */
import { dlopen } from "bun:ffi"
import { afterAll, expect, test } from "bun:test"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { status } from "../src/native/library.ts"

const MiB = 1 << 20
const scenarioScript = join(import.meta.dir, "fixtures/fake-gpu/nvml-scenario.ts")
const dir = mkdtempSync(join(tmpdir(), "cohort-fake-nvml-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const cc = Bun.which("cc") ?? Bun.which("gcc")
/** The stand-ins: NVML, and CUDA's two libraries beside it (which NVML sampling must not load). */
const built = ((): string | undefined => {
  if (cc === null) return undefined
  for (const [source, library] of [["nvml", "libnvidia-ml.so.1"], ["cuda", "libcuda.so.1"], ["cudart", "libcudart.so"]] as const) {
    const done = Bun.spawnSync([cc, "-shared", "-fPIC", "-O2", "-o", join(dir, library), join(import.meta.dir, `fixtures/fake-gpu/${source}.c`)], { stderr: "pipe" })
    if (done.exitCode !== 0) throw new Error(`cc failed on ${source}.c: ${done.stderr.toString()}`)
  }
  return join(dir, "libnvidia-ml.so.1")
})()
if (built === undefined) console.log("NVML stand-in tests skipped: no C compiler (cc)")

/** A real NVML on this machine's loader path: the "absent" case cannot be staged here then. */
const systemNvml = (() => {
  try {
    dlopen("libnvidia-ml.so.1", { nvmlInit_v2: { args: [], returns: "i32" } }).close()
    return true
  } catch {
    return false
  }
})()
if (systemNvml) console.log("NVML-absent test skipped: this machine has a libnvidia-ml.so.1")

interface Report {
  readonly samples: ReadonlyArray<unknown>
  readonly again: unknown
  readonly code: number
  readonly lastError: string
  readonly resources: ReadonlyArray<Record<string, unknown>>
  readonly inits: number | null
  readonly cudaMapped: boolean
}

const scenario = async (env: Record<string, string>, fake?: string): Promise<Report> => {
  const child = Bun.spawn([process.execPath, scenarioScript, ...(fake === undefined ? [] : [fake])], {
    env: { ...process.env, LD_LIBRARY_PATH: "", ...env },
    stdout: "pipe",
    stderr: "pipe"
  })
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`nvml-scenario exited ${code}:\n${stdout}\n${stderr}`)
  return JSON.parse(stdout.trim().split("\n").at(-1)!) as Report
}

test.skipIf(built === undefined)("the stand-in's figures come through the library, per device, with NVML initialised once and CUDA never loaded", async () => {
  const report = await scenario({ LD_LIBRARY_PATH: dir, COHORT_FAKE_NVML_USED_MIB: "3000", COHORT_FAKE_NVML_UTIL: "55" }, built)
  const gib80 = 80 * 1024 * MiB
  expect(report.samples).toEqual([
    { memoryUsedBytes: 3000 * MiB, memoryTotalBytes: gib80, utilization: 0.55 },
    { memoryUsedBytes: 4024 * MiB, memoryTotalBytes: gib80, utilization: 0.56 },
    { error: "NVML cannot sample GPU 2: nvmlDeviceGetHandleByIndex(device 2) failed: Invalid Argument (NVML error 2)" }
  ])
  expect(report.again).toEqual(report.samples[0])
  expect(report.code).toBe(status.ok)
  // The sampler: the GPU rank gets its device's figures, the CPU rank none.
  expect(report.resources).toMatchObject([
    { rank: 0, gpuMemoryBytes: 4024 * MiB, gpuUtilization: 0.56 },
    { rank: 1, gpuMemoryBytes: null, gpuUtilization: null }
  ])
  expect(report.resources[0]!.rssBytes).toBeGreaterThan(0)
  expect(report.inits).toBe(1)
  expect(report.cudaMapped).toBe(false)
})

test.skipIf(built === undefined)("a device that keeps no utilisation (MIG): memory, and utilisation null", async () => {
  const report = await scenario({ LD_LIBRARY_PATH: dir, COHORT_FAKE_NVML_NO_UTIL: "1" }, built)
  expect(report.samples[0]).toEqual({ memoryUsedBytes: 1000 * MiB, memoryTotalBytes: 80 * 1024 * MiB, utilization: null })
  expect(report.resources[0]).toMatchObject({ gpuMemoryBytes: 2024 * MiB, gpuUtilization: null })
})

test.skipIf(built === undefined)("NVML that cannot initialise (no driver loaded) counts as absent; the error says why", async () => {
  const report = await scenario({ LD_LIBRARY_PATH: dir, COHORT_FAKE_NVML_INIT: "9" }, built)
  expect(report.samples).toEqual(["absent", "absent", "absent"])
  expect(report.again).toBe("absent")
  expect(report.code).toBe(status.unavailable)
  expect(report.lastError).toContain("nvmlInit_v2 failed: Driver Not Loaded (NVML error 9)")
  expect(report.resources.map((r) => [r.gpuMemoryBytes, r.gpuUtilization])).toEqual([[null, null], [null, null]])
  // Tried once, not on every sample.
  expect(report.inits).toBe(1)
})

test.skipIf(systemNvml)("NVML absent: undefined from the wrapper, UNAVAILABLE naming both sonames from the export, null GPU figures", async () => {
  const report = await scenario({})
  expect(report.samples).toEqual(["absent", "absent", "absent"])
  expect(report.again).toBe("absent")
  expect(report.code).toBe(status.unavailable)
  expect(report.lastError).toContain("cannot load NVML (libnvidia-ml)")
  expect(report.lastError).toContain("libnvidia-ml.so.1 (")
  expect(report.lastError).toContain("libnvidia-ml.so (")
  expect(report.lastError).toContain("NVIDIA driver")
  expect(report.resources).toMatchObject([
    { rank: 0, gpuMemoryBytes: null, gpuUtilization: null },
    { rank: 1, gpuMemoryBytes: null, gpuUtilization: null }
  ])
  expect(report.cudaMapped).toBe(false)
})
