/**
 * A host's devices, from its `devices:` entry: CPU slots, the listed GPU
 * indices, or (`all`) every GPU the host has. GPUs are asked of cohort's
 * native library (the CUDA runtime's device count, the driver's names: no
 * context is created, so no GPU memory is taken), or of `nvidia-smi` where
 * the library is not built.
 */
import * as Effect from "effect/Effect"
import type { Devices } from "../config/ClusterConfig.ts"
import * as Native from "../native/Native.ts"
import type { RankDevice } from "../rank/RankContext.ts"

export interface HostDevices {
  readonly devices: ReadonlyArray<RankDevice>
  /** For people and the status page: "cpu", "NVIDIA H200", … */
  readonly labels: ReadonlyArray<string>
}

/** The index a device is known by in Hello, prefixes and status. */
export const deviceIndex = (device: RankDevice): number => (device.kind === "gpu" ? device.index : device.slot)

/** `3` for GPU 3, `cpu` for a CPU slot: the `dev` of `[host:dev:rN]`. */
export const deviceTag = (device: RankDevice): string => (device.kind === "gpu" ? String(device.index) : "cpu")

type Gpus = ReadonlyArray<{ index: number; name: string }> | string

/** The GPUs through the native library; undefined when the library is not there. */
const probeNative = (): Gpus | undefined => {
  const loaded = Effect.runSync(Effect.either(Native.load()))
  if (loaded._tag === "Left") return undefined
  const { cuda } = loaded.right
  return Effect.runSync(Effect.gen(function*() {
    const count = yield* cuda.deviceCount
    return yield* Effect.forEach(Array.from({ length: count }, (_, index) => index), (index) =>
      Effect.map(cuda.device(index), (device) => ({ index, name: device.name })))
  }).pipe(Effect.catchAll((error) => Effect.succeed(error.reason))))
}

const probeSmi = (): Gpus => {
  const smi = Bun.which("nvidia-smi")
  if (smi === null) return "nvidia-smi is not on PATH"
  const result = Bun.spawnSync([smi, "--query-gpu=index,name", "--format=csv,noheader"], { stdout: "pipe", stderr: "pipe" })
  if (result.exitCode !== 0) return `nvidia-smi failed: ${result.stderr.toString().trim() || `status ${result.exitCode}`}`
  return result.stdout.toString().split("\n").filter((line) => line.trim() !== "").map((line) => {
    const [index, ...name] = line.split(",")
    return { index: Number(index), name: name.join(",").trim() }
  })
}

const probeGpus = (): Gpus => probeNative() ?? probeSmi()

/**
 * How a mistake about devices is told to fix them: in the cluster file's words (`devices: 4`), or in
 * `bun run agent`'s (`--devices 4`), whichever the user wrote; `flag-default`: the user wrote none, and
 * `--devices all` is the agent's default.
 */
export type DevicesSpelling = "file" | "flag" | "flag-default"

const spelled = {
  file: { all: "devices: all", count: "devices: 4", indices: "devices: [0, 1]" },
  flag: { all: "--devices all", count: "--devices 4", indices: "--devices 0,1" },
  "flag-default": { all: "--devices all (the default)", count: "--devices 4", indices: "--devices 0,1" }
} as const

/** Resolve a host's devices, or say why they cannot be. */
export const resolveDevices = (host: string, devices: Devices, spelling: DevicesSpelling = "file"): HostDevices | string => {
  const words = spelled[spelling]
  switch (devices._tag) {
    case "Count":
      return {
        devices: Array.from({ length: devices.count }, (_, slot) => ({ kind: "cpu" as const, slot })),
        labels: Array.from({ length: devices.count }, () => "cpu")
      }
    case "Indices": {
      // A listed GPU must exist: a rank scoped to a missing device would fail late and obscurely.
      const gpus = probeGpus()
      if (typeof gpus === "string") {
        return `host ${host} lists GPU indices [${devices.indices.join(", ")}], but its GPUs cannot be listed (${gpus}); ` +
          `give a number of CPU ranks (${words.count}) on a machine without GPUs`
      }
      const missing = devices.indices.filter((index) => !gpus.some((gpu) => gpu.index === index))
      if (missing.length > 0) {
        return `host ${host} has no GPU ${missing.join(", ")} (it has ${gpus.length === 0 ? "none" : gpus.map((gpu) => gpu.index).join(", ")})`
      }
      return {
        devices: devices.indices.map((index) => ({ kind: "gpu" as const, index })),
        labels: devices.indices.map((index) => gpus.find((gpu) => gpu.index === index)!.name)
      }
    }
    case "All": {
      const gpus = probeGpus()
      if (typeof gpus === "string" || gpus.length === 0) {
        return `host ${host} has ${words.all}, but no GPU was found there (${typeof gpus === "string" ? gpus : "nvidia-smi lists none"}); ` +
          `give a number of CPU ranks (${words.count}) or the GPU indices (${words.indices})`
      }
      return { devices: gpus.map(({ index }) => ({ kind: "gpu" as const, index })), labels: gpus.map(({ name }) => name) }
    }
  }
}
