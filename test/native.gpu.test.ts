/**
 * The native library's CUDA and NCCL services on a real GPU: device names,
 * UUIDs and memory; device buffers and streams whose lifetime is a Scope;
 * and, where NCCL loads, a communicator of one rank that all-reduces f32
 * and bf16 buffers on a stream, in place and out of place.
 *
 * Where no GPU is usable (no library, no CUDA runtime, no driver, no
 * device) the file prints one line, `native GPU tests skipped: <reason>`,
 * and its tests are skipped; likewise `native NCCL tests skipped: <reason>`
 * for the NCCL part on a GPU machine without NCCL.
 */
import { describe, expect, test } from "bun:test"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Scope from "effect/Scope"
import * as Native from "../src/native/Native.ts"

type Probe = { readonly native: Native.NativeLibrary; readonly devices: number } | { readonly skip: string }

/** The library and the number of devices, or why the GPU tests cannot run here. */
const probe = ((): Probe => {
  const loaded = Effect.runSync(Effect.either(Native.load()))
  if (Either.isLeft(loaded)) return { skip: loaded.left.message }
  const count = Effect.runSync(Effect.either(loaded.right.cuda.deviceCount))
  if (Either.isLeft(count)) return { skip: count.left.message }
  if (count.right === 0) return { skip: "CUDA sees no device (cudaGetDeviceCount says 0)" }
  return { native: loaded.right, devices: count.right }
})()
const gpu = "skip" in probe ? undefined : probe
if ("skip" in probe) console.log(`native GPU tests skipped: ${probe.skip}`)

/** NCCL's version, or why the NCCL tests cannot run (asked only where there is a GPU). */
const ncclProbe = ((): { readonly version: number; readonly path: string } | { readonly skip: string } => {
  if (gpu === undefined) return { skip: "no GPU" }
  const found = Effect.runSync(Effect.either(Effect.all({ version: gpu.native.nccl.version, path: gpu.native.nccl.libraryPath })))
  return Either.isRight(found) ? found.right : { skip: found.left.message }
})()
if (gpu !== undefined && "skip" in ncclProbe) console.log(`native NCCL tests skipped: ${ncclProbe.skip}`)

/** A test that runs an Effect in its own Scope, skipped unless `enabled`. */
const scopedTest = (enabled: boolean) =>
<A, E>(name: string, body: (native: Native.NativeLibrary) => Effect.Effect<A, E, Scope.Scope>, timeout = 60_000) =>
  test.skipIf(!enabled)(name, () => Effect.runPromise(Effect.scoped(Effect.suspend(() => body(gpu!.native)))).then(() => undefined), timeout)
const gpuTest = scopedTest(gpu !== undefined)
const ncclTest = scopedTest(gpu !== undefined && !("skip" in ncclProbe))

const MiB = 1 << 20

/** The same bytes, or the first element that differs. */
const sameBytes = (actual: Float32Array | Uint16Array, expected: Float32Array | Uint16Array) => {
  expect(actual.length).toBe(expected.length)
  const [a, e] = [new Uint8Array(actual.buffer, actual.byteOffset, actual.byteLength), new Uint8Array(expected.buffer, expected.byteOffset, expected.byteLength)]
  if (Buffer.compare(a, e) === 0) return
  const at = actual.findIndex((value, i) => !Object.is(value, expected[i]))
  throw new Error(`element ${at} of ${actual.length}: got ${actual[at]}, expected ${expected[at]}`)
}

/** Values that are exact in f32 and vary enough to catch misplaced bytes. */
const f32Pattern = (length: number) => Float32Array.from({ length }, (_, i) => ((i * 2654435761) % 65521) / 16 - 2000)
/** bf16 bit patterns of finite values (no NaN, whose payload is not part of the contract). */
const bf16Pattern = (length: number) => Uint16Array.from({ length }, (_, i) => (((i * 40503) & 0x7eff) | ((i & 1) << 15)))

describe("CUDA through the native library", () => {
  gpuTest("every device has a name, a GPU-… UUID and its total memory", (native) =>
    Effect.gen(function*() {
      const smi = Bun.which("nvidia-smi")
      const listed = smi === null ? undefined : Bun.spawnSync([smi, "-L"]).stdout.toString()
      for (let index = 0; index < gpu!.devices; index++) {
        const device = yield* native.cuda.device(index)
        expect(device.index).toBe(index)
        expect(device.name.trim().length).toBeGreaterThan(0)
        expect(device.uuid).toMatch(/^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
        expect(device.totalBytes).toBeGreaterThan(0n)
        // nvidia-smi names the same device by the same UUID (the byte order is the driver's).
        if (listed !== undefined && listed.includes("UUID: GPU-")) expect(listed).toContain(device.uuid)
        console.log(`GPU ${index}: ${device.name}, ${device.uuid}, ${(Number(device.totalBytes) / 2 ** 30).toFixed(1)} GiB`)
      }
    }))

  gpuTest("a device index out of range is CudaUnavailable, not a crash", (native) =>
    Effect.gen(function*() {
      const negative = yield* Effect.flip(native.cuda.device(-1))
      expect(negative._tag).toBe("CudaUnavailable")
      expect(negative.message).toContain("device -1 is not a device index")
      const beyond = yield* Effect.flip(native.cuda.device(gpu!.devices))
      expect(beyond._tag).toBe("CudaUnavailable")
      expect(beyond.message).toContain(`cuDeviceGet(device ${gpu!.devices})`)
    }))

  gpuTest("memory info: free within total, total as the driver says", (native) =>
    Effect.gen(function*() {
      const { free, total } = yield* native.cuda.memory(0)
      const device = yield* native.cuda.device(0)
      expect(total).toBeGreaterThan(0n)
      expect(free).toBeGreaterThan(0n)
      expect(free).toBeLessThanOrEqual(total)
      // The runtime and the driver agree on the total, give or take what a partition reserves.
      expect(Number(total)).toBeGreaterThan(Number(device.totalBytes) * 0.9)
      expect(Number(total)).toBeLessThanOrEqual(Number(device.totalBytes))
    }))

  gpuTest("1 MiB of f32 goes up and comes back the same, from a view at an offset too", (native) =>
    Effect.gen(function*() {
      const length = MiB / 4
      const buffer = yield* native.cuda.allocate(0, MiB)
      expect(buffer.device).toBe(0)
      expect(buffer.bytes).toBe(MiB)
      expect(buffer.address).not.toBe(0n)
      const input = f32Pattern(length)
      yield* buffer.upload(input)
      const output = new Float32Array(length)
      yield* buffer.download(output)
      sameBytes(output, input)
      // Typed-array views at an element offset: the pointer must include the view's offset.
      const backing = new Float32Array(length + 7).fill(-1)
      const view = backing.subarray(7)
      view.set(f32Pattern(length).reverse())
      yield* buffer.upload(view)
      const into = new Float32Array(length + 3).fill(-1)
      yield* buffer.download(into.subarray(3))
      sameBytes(into.subarray(3), view)
      expect([...into.subarray(0, 3)]).toEqual([-1, -1, -1])
    }))

  gpuTest("a copy larger than the buffer is CudaUnavailable", (native) =>
    Effect.gen(function*() {
      const buffer = yield* native.cuda.allocate(0, 1024)
      const up = yield* Effect.flip(buffer.upload(new Float32Array(257)))
      expect(up.message).toContain("upload of 1028 bytes into a 1024-byte buffer")
      const down = yield* Effect.flip(buffer.download(new Uint8Array(1025)))
      expect(down.message).toContain("download of 1025 bytes from a 1024-byte buffer")
    }))

  gpuTest("device memory is freed when its Scope closes", (native) =>
    Effect.gen(function*() {
      const bytes = 256 * MiB
      const slack = 32n * BigInt(MiB)
      const before = (yield* native.cuda.memory(0)).free
      const during = yield* Effect.scoped(Effect.gen(function*() {
        yield* native.cuda.allocate(0, bytes)
        return (yield* native.cuda.memory(0)).free
      }))
      const after = (yield* native.cuda.memory(0)).free
      expect(before - during).toBeGreaterThanOrEqual(BigInt(bytes) - slack)
      expect(after + slack).toBeGreaterThanOrEqual(before)
    }))

  gpuTest("streams: created in a Scope, synchronized, and the default stream too", (native) =>
    Effect.gen(function*() {
      yield* native.cuda.allocate(0, 4096) // makes device 0 current
      const first = yield* native.cuda.stream
      const second = yield* native.cuda.stream
      expect(first).not.toBe(0n)
      expect(second).not.toBe(first)
      yield* native.cuda.synchronize(first)
      yield* native.cuda.synchronize(second)
      yield* native.cuda.synchronize(0n)
    }))
})

describe("NCCL through the native library (one rank)", () => {
  ncclTest("version and library path", (native) =>
    Effect.gen(function*() {
      const version = yield* native.nccl.version
      const path = yield* native.nccl.libraryPath
      expect(version).toBeGreaterThanOrEqual(21000)
      expect(path).toContain("libnccl")
      console.log(`NCCL ${version} from ${path}`)
    }))

  ncclTest("a world of one all-reduces f32 and bf16 on a stream: sum and average give the input back", (native) =>
    Effect.gen(function*() {
      const length = MiB / 4
      const buffer = yield* native.cuda.allocate(0, MiB)
      const other = yield* native.cuda.allocate(0, MiB)
      const stream = yield* native.cuda.stream
      const id = yield* native.nccl.uniqueId
      expect(id.length).toBe(128)
      expect(id.some((byte) => byte !== 0)).toBe(true)
      const communicator = yield* native.nccl.communicator(0, 1, id)
      expect(communicator.rank).toBe(0)
      expect(communicator.worldSize).toBe(1)

      const input = f32Pattern(length)
      for (const op of ["sum", "average"] as const) {
        // In place.
        yield* buffer.upload(input)
        yield* communicator.allReduce(buffer, buffer, "f32", op, stream)
        yield* native.cuda.synchronize(stream)
        const output = new Float32Array(length)
        yield* buffer.download(output)
        sameBytes(output, input)
      }
      // Out of place: the receive buffer gets the reduction, the send buffer is left alone.
      yield* other.upload(new Float32Array(length).fill(42))
      yield* communicator.allReduce(buffer, other, "f32", "sum", stream)
      yield* native.cuda.synchronize(stream)
      const received = new Float32Array(length)
      yield* other.download(received)
      sameBytes(received, input)

      const halves = bf16Pattern(MiB / 2)
      for (const op of ["sum", "average"] as const) {
        yield* buffer.upload(halves)
        yield* communicator.allReduce(buffer, buffer, "bf16", op, stream)
        yield* native.cuda.synchronize(stream)
        const output = new Uint16Array(MiB / 2)
        yield* buffer.download(output)
        sameBytes(output, halves)
      }

      expect(yield* communicator.asyncError).toBe(0)
      // Abort ends it at once; the Scope then destroys nothing (a second abort is a no-op).
      yield* communicator.abort
      yield* communicator.abort
    }), 120_000)

  ncclTest("a unique id of the wrong size is refused before NCCL sees it", (native) =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(native.nccl.communicator(0, 1, new Uint8Array(64)))
      expect(error._tag).toBe("NcclError")
      expect(error.message).toContain("a unique id has 128 bytes, got 64")
    }))
})
