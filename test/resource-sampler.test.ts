/**
 * The agent's resource sampler against real processes: a busy child and an
 * idle one, read through /proc twice; a process that is gone; and the GPU
 * figures from a stand-in reader (the native reader against a stand-in NVML
 * is in native-nvml.test.ts: the library loads NVML once per process).
 */
import { afterAll, describe, expect, test } from "bun:test"
import { readFileSync } from "node:fs"
import { clockTicksPerSecond, type GpuReader, makeResourceSampler } from "../src/agent/ResourceSampler.ts"
import { NvmlError } from "../src/native/Native.ts"
import { waitFor } from "./support/processes.ts"

const children: Array<Bun.Subprocess> = []
afterAll(() => {
  for (const child of children) child.kill("SIGKILL")
})
const spawn = (argv: Array<string>) => {
  const child = Bun.spawn(argv, { stdin: "ignore", stdout: "ignore", stderr: "ignore" })
  children.push(child)
  return child
}

/** utime + stime in clock ticks, read independently of the sampler. */
const cpuTicks = (pid: number): number => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return Number(fields[11]) + Number(fields[12])
}

test("clock ticks per second come from the auxiliary vector and agree with getconf", () => {
  const getconf = Bun.which("getconf")
  if (getconf === null) return expect(clockTicksPerSecond).toBe(100)
  expect(clockTicksPerSecond).toBe(Number(Bun.spawnSync([getconf, "CLK_TCK"]).stdout.toString().trim()))
})

describe("CPU and memory from /proc", () => {
  test("a busy process's CPU share is clearly above an idle one's; both have an RSS; a gone process is absent", async () => {
    const busy = spawn([process.execPath, "-e", "while (true) {}"])
    const idle = spawn(["sleep", "30"])
    const gone = spawn(["true"])
    await gone.exited
    // The busy child's loop is running (and the idle child is past exec) before the first sample.
    await waitFor(() => cpuTicks(busy.pid) >= 5 && readFileSync(`/proc/${idle.pid}/cmdline`, "utf8").startsWith("sleep"), "both children started", 10_000)

    const sampler = makeResourceSampler()
    const ranks = [
      { rank: 0, pid: busy.pid, device: "cpu" as const },
      { rank: 1, pid: idle.pid, device: "cpu" as const },
      { rank: 2, pid: gone.pid, device: "cpu" as const }
    ]
    // This test reads the busy child's CPU time around each of the sampler's reads: `before` and `start`
    // around its first, `end` and `after` around its second. Whatever the scheduler does in between, what
    // the sampler saw lies within [end - start, after - before], exactly.
    const t1 = performance.now()
    const before = cpuTicks(busy.pid)
    const first = sampler.sample(ranks, t1)
    const start = cpuTicks(busy.pid)
    expect(first.map((r) => r.rank)).toEqual([0, 1])
    // Until some CPU time accrues: 20 ticks is 0.2 s of one core at USER_HZ 100.
    await waitFor(() => cpuTicks(busy.pid) - start >= 20, "the busy child to accrue CPU time", 10_000)
    const t2 = performance.now()
    const end = cpuTicks(busy.pid)
    const second = sampler.sample(ranks, t2)
    const after = cpuTicks(busy.pid)

    expect(second.map((r) => r.rank)).toEqual([0, 1])
    const [hot, cold] = second as [typeof second[0], typeof second[0]]
    // In shares of one core over the interval: one tick, and what this test saw the busy child use.
    // (Not a fixed share: on a loaded machine the busy child gets what the scheduler gives it.)
    const seconds = (t2 - t1) / 1000
    const tick = 1 / clockTicksPerSecond / seconds
    const seen = (end - start) * tick
    const bracket = (after - before) * tick
    const report = `busy ${hot.cpu}, idle ${cold.cpu}, seen ${seen} to ${bracket} over ${seconds.toFixed(3)} s`
    // At least what accrued between the sampler's reads as this test saw it from inside them, at most what
    // accrued between this test's reads around them: no allowance for a descheduled test process needed.
    expect(hot.cpu, report).toBeGreaterThanOrEqual(seen - 1e-9)
    expect(hot.cpu, report).toBeLessThanOrEqual(bracket + 1e-9)
    expect(cold.cpu, report).toBeLessThanOrEqual(tick + 1e-9)
    expect(hot.cpu, report).toBeGreaterThanOrEqual(18 * tick)
    expect(hot.cpu, report).toBeLessThan(2)
    expect(hot.rssBytes).toBeGreaterThan(1 << 20)
    expect(cold.rssBytes).toBeGreaterThan(0)
    for (const sample of second) expect(sample).toMatchObject({ gpuMemoryBytes: null, gpuUtilization: null })

    // Killed and reaped: absent from the next sample.
    busy.kill("SIGKILL")
    await busy.exited
    expect(sampler.sample(ranks, performance.now()).map((r) => r.rank)).toEqual([1])
  }, 30_000)

  test("the first sample of a process is its average over its life so far", () => {
    // This test process has been running (and busy loading) for a while: a share above zero, at most the cores there are.
    const [self] = makeResourceSampler().sample([{ rank: 0, pid: process.pid, device: "cpu" }], performance.now())
    expect(self!.cpu).toBeGreaterThan(0)
    expect(self!.cpu).toBeLessThanOrEqual(navigator.hardwareConcurrency)
  })

  test("sampling 8 ranks is cheap", () => {
    const sampler = makeResourceSampler()
    const ranks = Array.from({ length: 8 }, (_, rank) => ({ rank, pid: process.pid, device: "cpu" as const }))
    sampler.sample(ranks, performance.now())
    const start = performance.now()
    for (let i = 0; i < 100; i++) sampler.sample(ranks, performance.now())
    const each = (performance.now() - start) / 100
    console.log(`one sample of 8 ranks: ${(each * 1000).toFixed(0)} µs`)
    expect(each).toBeLessThan(20)
  })
})

describe("GPU figures", () => {
  const reader = (calls: Array<number>): GpuReader => (device) => {
    calls.push(device)
    if (device === 0) return { memoryUsedBytes: 5 << 30, memoryTotalBytes: 80 << 30, utilization: 0.75 }
    if (device === 1) return { memoryUsedBytes: 7 << 20, memoryTotalBytes: 80 << 30, utilization: null }
    if (device === 2) return new NvmlError({ device, detail: "GPU is lost" })
    return undefined
  }

  test("each GPU rank gets its device's figures, one read per device; CPU ranks, refusals and absence give null", () => {
    const calls: Array<number> = []
    const sampler = makeResourceSampler(reader(calls))
    const pid = process.pid
    const out = sampler.sample([
      { rank: 0, pid, device: 0 },
      { rank: 1, pid, device: 0 },
      { rank: 2, pid, device: 1 },
      { rank: 3, pid, device: 2 },
      { rank: 4, pid, device: 3 },
      { rank: 5, pid, device: "cpu" }
    ], performance.now())
    expect(out.map(({ rank, gpuMemoryBytes, gpuUtilization }) => [rank, gpuMemoryBytes, gpuUtilization])).toEqual([
      [0, 5 << 30, 0.75],
      [1, 5 << 30, 0.75],
      [2, 7 << 20, null],
      [3, null, null],
      [4, null, null],
      [5, null, null]
    ])
    expect(calls).toEqual([0, 1, 2, 3])
  })

  test("a gone process's GPU is not read, and a reader that throws costs only its figures", () => {
    const calls: Array<number> = []
    const sampler = makeResourceSampler((device) => {
      calls.push(device)
      throw new Error("a stand-in that throws")
    })
    const out = sampler.sample([{ rank: 0, pid: process.pid, device: 0 }, { rank: 1, pid: 0x7fff_fff0, device: 1 }], performance.now())
    expect(out).toMatchObject([{ rank: 0, gpuMemoryBytes: null, gpuUtilization: null }])
    expect(calls).toEqual([0])
  })
})
