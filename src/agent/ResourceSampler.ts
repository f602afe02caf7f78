/**
 * What each rank process uses, sampled by its agent every few seconds: CPU
 * share and resident memory from /proc, and its GPU's memory in use and
 * utilisation through NVML (the native library's `nvml.sample`, which creates
 * no CUDA context).
 *
 * Only the rank's own pid is read, not its children (a data loader's workers
 * are not counted). A process that is gone, or a zombie, is left out of the
 * result. The CPU share is over the interval since the pid's previous sample;
 * the first time a pid is seen, over its life so far (so a rank has a figure
 * from its first sample on). GPU figures are the whole device's: with one
 * rank per GPU, the rank's and the driver's.
 *
 * Cheap on purpose: per rank, two small reads of /proc and at most one NVML
 * call per device.
 */
import { readFileSync } from "node:fs"
import type { GpuSample, NvmlError } from "../native/Native.ts"

export interface RankProcess {
  readonly rank: number
  readonly pid: number
  /** NVML's index of its GPU (PCI bus order), or "cpu". */
  readonly device: number | "cpu"
}

export interface RankResources {
  readonly rank: number
  /** Share of one core (1 = one core busy; 3.2 = three and a bit). */
  readonly cpu: number
  readonly rssBytes: number
  /** Null on CPU ranks, or where NVML is absent or refused. */
  readonly gpuMemoryBytes: number | null
  /** 0–1; null as above, or where the device keeps none (a MIG instance). */
  readonly gpuUtilization: number | null
}

/** Reads one GPU: `Native.nvml.sample`, or a stand-in. undefined: NVML is not there. */
export type GpuReader = (device: number) => GpuSample | NvmlError | undefined

export interface ResourceSampler {
  /** `nowMs` is the caller's clock (monotonic, e.g. performance.now()), only ever compared with itself. */
  readonly sample: (ranks: ReadonlyArray<RankProcess>, nowMs: number) => Array<RankResources>
}

const AT_CLKTCK = 17n

/** USER_HZ, the unit of /proc's CPU times, from the auxiliary vector (no `getconf` process); 100 if unreadable. */
export const clockTicksPerSecond: number = (() => {
  try {
    const auxv = readFileSync("/proc/self/auxv")
    const view = new DataView(auxv.buffer, auxv.byteOffset, auxv.byteLength)
    // (type, value) pairs of u64 on the 64-bit little-endian machines cohort runs on.
    for (let at = 0; at + 16 <= auxv.byteLength; at += 16) {
      if (view.getBigUint64(at, true) === AT_CLKTCK) {
        const ticks = Number(view.getBigUint64(at + 8, true))
        if (ticks > 0) return ticks
      }
    }
  } catch {
    // Not Linux, or no /proc: the kernel's USER_HZ is 100 on every architecture cohort runs on anyway.
  }
  return 100
})()

const read = (path: string): string | undefined => {
  try {
    return readFileSync(path, "latin1")
  } catch {
    return undefined
  }
}

interface Stat {
  /** utime + stime, in clock ticks. */
  readonly ticks: number
  /** Start time after boot, in clock ticks: tells a reused pid from the process seen before. */
  readonly start: number
}

/** The process's CPU time and start, or undefined when it is gone or a zombie. */
const readStat = (pid: number): Stat | undefined => {
  const stat = read(`/proc/${pid}/stat`)
  if (stat === undefined) return undefined
  // The command name is in parentheses and may hold anything: the fields follow the last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  // fields[0] is field 3 of proc(5): state; utime 14, stime 15, starttime 22.
  const state = fields[0]
  if (state === undefined || state === "Z" || state === "X") return undefined
  return { ticks: Number(fields[11]) + Number(fields[12]), start: Number(fields[19]) }
}

/** VmRSS in bytes (0 for a process without an address space); undefined when it is gone. */
const readRss = (pid: number): number | undefined => {
  const status = read(`/proc/${pid}/status`)
  if (status === undefined) return undefined
  const rss = /^VmRSS:\s*(\d+) kB/m.exec(status)
  return rss === null ? 0 : Number(rss[1]) * 1024
}

/** Seconds since boot (the clock starttime counts from). */
const uptimeSeconds = (): number | undefined => {
  const uptime = read("/proc/uptime")
  return uptime === undefined ? undefined : Number.parseFloat(uptime)
}

const noGpu = { gpuMemoryBytes: null, gpuUtilization: null } as const

/** A sampler that remembers each pid's CPU time between calls (and forgets the pids no longer asked about). */
export const makeResourceSampler = (gpu?: GpuReader): ResourceSampler => {
  let previous = new Map<number, Stat & { readonly atMs: number }>()

  const readGpu = (device: number): Pick<RankResources, "gpuMemoryBytes" | "gpuUtilization"> => {
    if (gpu === undefined) return noGpu
    let sample: ReturnType<GpuReader>
    try {
      sample = gpu(device)
    } catch {
      // The native reader does not throw; a stand-in that does costs one sample its GPU figures, not the agent.
      return noGpu
    }
    if (sample === undefined || !("memoryUsedBytes" in sample)) return noGpu
    return { gpuMemoryBytes: sample.memoryUsedBytes, gpuUtilization: sample.utilization }
  }

  const sample = (ranks: ReadonlyArray<RankProcess>, nowMs: number): Array<RankResources> => {
    const seen = new Map<number, Stat & { readonly atMs: number }>()
    const gpus = new Map<number, Pick<RankResources, "gpuMemoryBytes" | "gpuUtilization">>()
    let uptime: number | undefined
    const out: Array<RankResources> = []
    for (const { rank, pid, device } of ranks) {
      const stat = readStat(pid)
      const rssBytes = stat === undefined ? undefined : readRss(pid)
      if (stat === undefined || rssBytes === undefined) continue
      const before = previous.get(pid)
      let cpu: number
      if (before !== undefined && before.start === stat.start && nowMs > before.atMs) {
        cpu = (stat.ticks - before.ticks) / clockTicksPerSecond / ((nowMs - before.atMs) / 1000)
      } else {
        // First sight of this process: its average over its life so far.
        uptime ??= uptimeSeconds()
        const age = uptime === undefined ? 0 : uptime - stat.start / clockTicksPerSecond
        cpu = age > 0 ? stat.ticks / clockTicksPerSecond / age : 0
      }
      seen.set(pid, { ...stat, atMs: nowMs })
      let gpuFigures = noGpu as Pick<RankResources, "gpuMemoryBytes" | "gpuUtilization">
      if (device !== "cpu") {
        gpuFigures = gpus.get(device) ?? readGpu(device)
        gpus.set(device, gpuFigures)
      }
      out.push({ rank, cpu: Math.max(0, cpu), rssBytes, ...gpuFigures })
    }
    previous = seen
    return out
  }

  return { sample }
}
