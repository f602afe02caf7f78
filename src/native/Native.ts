/**
 * cohort's native library as typed Effect services.
 *
 * `Native` is loaded once per process (a `Layer`); its parts:
 * - `kernels`: CPU reductions over typed arrays (synchronous: they are
 *   memory-bound and split across Rust threads for large buffers). Where
 *   the library cannot be loaded, `cpuKernels` gives the TypeScript ones
 *   (`PortableKernels`) instead, with the same results;
 * - `process`: parent-death signal, parent pid, CLOCK_MONOTONIC;
 * - `cuda`: device count, names, UUIDs and memory, and device buffers and
 *   streams whose lifetime is a Scope;
 * - `nccl`: version, unique ids, and communicators (a Scope destroys them;
 *   `abort` ends one at once after a peer's death; `shrink`, where NCCL has
 *   it, makes a smaller one from a parent without the dead);
 * - `nvml`: a GPU's memory in use and utilisation, read without a CUDA
 *   context (synchronous and cheap: the agent samples every few seconds).
 *
 * Every failure is a typed error that says what to do; nothing throws and
 * nothing crashes. A device pointer or handle is a bigint, only ever passed
 * back to the library.
 */
import { type Pointer, ptr } from "bun:ffi"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { ABI_VERSION, libraryPath, type OpenLibrary, openLibrary, status, type Symbols } from "./library.ts"
import type { Element, Kernels } from "./Kernels.ts"
import { portableKernels } from "./PortableKernels.ts"
import { type ShrinkFlag, shrinkFlagCode } from "./ShrinkRules.ts"

// The errors of the native library are Schemas: raised in ranks, relays and agents, they are reported to another process.
export class NativeLibraryMissing extends Schema.TaggedError<NativeLibraryMissing>()("NativeLibraryMissing", { path: Schema.String, reason: Schema.String }) {
  override get message(): string {
    return `cohort's native library cannot be loaded from ${this.path} (${this.reason}); build it with \`bun run build:native\` (needs cargo), or point COHORT_NATIVE_LIB at it`
  }
}

export class NativeAbiMismatch extends Schema.TaggedError<NativeAbiMismatch>()("NativeAbiMismatch", { path: Schema.String, found: Schema.Number, expected: Schema.Number }) {
  override get message(): string {
    return `cohort's native library at ${this.path} speaks ABI ${this.found}, this cohort needs ${this.expected}: it is left from another version; rebuild it with \`bun run build:native\``
  }
}

export class CudaUnavailable extends Schema.TaggedError<CudaUnavailable>()("CudaUnavailable", { reason: Schema.String }) {
  override get message(): string {
    return `CUDA is not usable here: ${this.reason}`
  }
}

export class NcclUnavailable extends Schema.TaggedError<NcclUnavailable>()("NcclUnavailable", { searched: Schema.String }) {
  override get message(): string {
    return this.searched
  }
}

export class NcclError extends Schema.TaggedError<NcclError>()("NcclError", { code: Schema.Number, detail: Schema.String }) {
  override get message(): string {
    return `NCCL error ${this.code}: ${this.detail}`
  }
}

/** NVML refused a query about a device it has (an index out of range, a GPU fallen off the bus). */
export class NvmlError extends Schema.TaggedError<NvmlError>()("NvmlError", { device: Schema.Number, detail: Schema.String }) {
  override get message(): string {
    return `NVML cannot sample GPU ${this.device}: ${this.detail}`
  }
}

export type { Element, Kernels } from "./Kernels.ts"
type Buffer<E extends Element> = E extends "f32" ? Float32Array : Uint16Array

export interface ProcessHelpers {
  /**
   * Have the kernel send `signal` to this process when its parent dies.
   * "parent-gone" when the parent already died before the call (exit then).
   */
  readonly dieWithParent: (signal: number, expectedParent: number) => "armed" | "parent-gone" | string
  readonly parentPid: () => number
  readonly monotonicNs: () => number
  /** One empty call into the library (the FFI overhead benchmark). */
  readonly noop: () => number
}

export interface DeviceInfo {
  readonly index: number
  readonly name: string
  readonly uuid: string
  readonly totalBytes: bigint
}

export interface DeviceBuffer {
  readonly device: number
  readonly address: bigint
  readonly bytes: number
  readonly upload: (from: Uint8Array | Float32Array | Uint16Array) => Effect.Effect<void, CudaUnavailable>
  readonly download: (into: Uint8Array | Float32Array | Uint16Array) => Effect.Effect<void, CudaUnavailable>
}

export interface Cuda {
  /** Always asked of the runtime: loading libcudart does not mean a GPU exists. */
  readonly deviceCount: Effect.Effect<number, CudaUnavailable>
  readonly device: (index: number) => Effect.Effect<DeviceInfo, CudaUnavailable>
  readonly memory: (index: number) => Effect.Effect<{ readonly free: bigint; readonly total: bigint }, CudaUnavailable>
  /** Make `index` this thread's current device (NCCL builds its communicator on the current device). */
  readonly setDevice: (index: number) => Effect.Effect<void, CudaUnavailable>
  /** A buffer on `device`, freed when the Scope closes. */
  readonly allocate: (device: number, bytes: number) => Effect.Effect<DeviceBuffer, CudaUnavailable, Scope.Scope>
  /** A stream on the current device, destroyed when the Scope closes. */
  readonly stream: Effect.Effect<bigint, CudaUnavailable, Scope.Scope>
  readonly synchronize: (stream: bigint) => Effect.Effect<void, CudaUnavailable>
}

export interface Communicator {
  readonly rank: number
  readonly worldSize: number
  readonly allReduce: (
    send: DeviceBuffer,
    receive: DeviceBuffer,
    element: Element,
    op: "sum" | "average",
    stream: bigint
  ) => Effect.Effect<void, NcclError | NcclUnavailable>
  /** The communicator's asynchronous error: a dead peer surfaces here instead of as a hang. */
  readonly asyncError: Effect.Effect<number, NcclError | NcclUnavailable>
  /** End it at once (a peer died); the Scope then has nothing left to destroy. */
  readonly abort: Effect.Effect<void, NcclError | NcclUnavailable>
  /**
   * ncclCommShrink (NCCL 2.27 or later: ask `Nccl.shrinkSupport` first): a child without the NCCL ranks
   * `excluded`, every survivor calling it and the excluded not; the survivors keep their order. `flags`
   * is `ShrinkFlags`' "default" or "abort" (the parent saw an error). The child is destroyed when the
   * Scope closes unless aborted; this communicator stays the caller's to release (`parentRelease`).
   */
  readonly shrink: (excluded: ReadonlyArray<number>, flags: ShrinkFlag) => Effect.Effect<Communicator, NcclError | NcclUnavailable, Scope.Scope>
}

export interface Nccl {
  readonly libraryPath: Effect.Effect<string, NcclUnavailable>
  /** e.g. 22304 for 2.23.4. */
  readonly version: Effect.Effect<number, NcclUnavailable | NcclError>
  /** A fresh 128-byte unique id (the generator rank's job). */
  readonly uniqueId: Effect.Effect<Uint8Array, NcclUnavailable | NcclError>
  /** Join the communicator of `id`; destroyed when the Scope closes unless aborted. */
  readonly communicator: (rank: number, worldSize: number, id: Uint8Array) => Effect.Effect<Communicator, NcclUnavailable | NcclError, Scope.Scope>
  /** Whether `Communicator.shrink` can run: ncclCommShrink resolved, and NCCL 2.27 or later. */
  readonly shrinkSupport: Effect.Effect<boolean, NcclUnavailable | NcclError>
}

export interface GpuSample {
  /** Memory in use on the whole device (every process's, and the driver's reserve), in bytes. */
  readonly memoryUsedBytes: number
  readonly memoryTotalBytes: number
  /** The share of the last sample period (1/6 s to 1 s) a kernel ran, 0–1; null where the device keeps none (a MIG instance). */
  readonly utilization: number | null
}

export interface Nvml {
  /**
   * The device's memory and utilisation, `device` being NVML's index (PCI bus
   * order, as ranks see with CUDA_DEVICE_ORDER=PCI_BUS_ID). undefined when NVML
   * is not there (no driver, or no libnvidia-ml.so.1 on the loader's path); an
   * NvmlError, returned and not thrown, when NVML refuses. Never creates a CUDA context.
   */
  readonly sample: (device: number) => GpuSample | NvmlError | undefined
}

export interface NativeLibrary {
  readonly path: string
  readonly kernels: Kernels
  readonly process: ProcessHelpers
  readonly cuda: Cuda
  readonly nccl: Nccl
  readonly nvml: Nvml
}

export class Native extends Context.Tag("cohort/Native")<Native, NativeLibrary>() {}

const text = (read: (out: Pointer, capacity: number) => number, capacity = 256): { status: number; value: string } => {
  const out = new Uint8Array(capacity)
  const code = read(ptr(out), capacity)
  const end = out.indexOf(0)
  return { status: code, value: new TextDecoder().decode(out.subarray(0, end === -1 ? capacity : end)) }
}

/** Wrap the open library in the services. */
export const fromLibrary = (library: OpenLibrary): NativeLibrary => {
  const native: Symbols = library.symbols
  const check = (code: number, what: string) => {
    // Kernel arguments are checked here first: a refusal from the library is a bug of ours.
    if (code !== status.ok) throw new Error(`cohort native ${what} failed: ${library.lastError()}`)
  }
  const pointers = (inputs: ReadonlyArray<Float32Array | Uint16Array>) => new BigUint64Array(inputs.map((input) => BigInt(ptr(input))))
  const sameLength = (inputs: ReadonlyArray<ArrayBufferView & { length: number }>, out: { length: number }, what: string) => {
    if (inputs.length === 0) throw new RangeError(`${what} needs at least one input`)
    for (const input of inputs) {
      if (input.length !== out.length) throw new RangeError(`${what}: every buffer must have ${out.length} elements, one has ${input.length}`)
    }
  }
  const reduce = (what: "sum" | "average") => <E extends Element>(element: E, inputs: ReadonlyArray<Buffer<E>>, out: Buffer<E>) => {
    sameLength(inputs, out, what)
    if (out.length === 0) return
    const table = pointers(inputs)
    const call = element === "f32"
      ? (what === "sum" ? native.cohort_sum_f32 : native.cohort_average_f32)
      : (what === "sum" ? native.cohort_sum_bf16 : native.cohort_average_bf16)
    check(call(ptr(table), inputs.length, out.length, ptr(out)), what)
  }
  const kernels: Kernels = {
    sum: reduce("sum"),
    average: reduce("average"),
    add: (element, acc, x) => {
      sameLength([x], acc, "add")
      if (acc.length === 0) return
      check((element === "f32" ? native.cohort_add_f32 : native.cohort_add_bf16)(ptr(acc), ptr(x), acc.length), "add")
    },
    scale: (element, buffer, factor) => {
      if (buffer.length === 0) return
      check((element === "f32" ? native.cohort_scale_f32 : native.cohort_scale_bf16)(ptr(buffer), buffer.length, factor), "scale")
    }
  }

  const processHelpers: ProcessHelpers = {
    dieWithParent: (signal, expectedParent) => {
      const code = native.cohort_set_parent_death_signal(signal, expectedParent)
      return code === 0 ? "armed" : code === 1 ? "parent-gone" : library.lastError()
    },
    parentPid: () => native.cohort_getppid(),
    monotonicNs: () => native.cohort_monotonic_ns(),
    noop: () => native.cohort_noop()
  }

  /** Call the library when the Effect runs (never when it is built), and type its failure. */
  const cudaCall = (call: () => number): Effect.Effect<void, CudaUnavailable> =>
    Effect.suspend(() => (call() === status.ok ? Effect.void : Effect.fail(new CudaUnavailable({ reason: library.lastError() }))))
  const out64 = () => new BigUint64Array(1)
  const cuda: Cuda = {
    deviceCount: Effect.suspend(() => {
      const count = native.cohort_cuda_device_count()
      return count >= 0 ? Effect.succeed(count) : Effect.fail(new CudaUnavailable({ reason: library.lastError() }))
    }),
    device: (index) =>
      Effect.gen(function*() {
        const name = text((out, capacity) => native.cohort_cuda_device_name(index, out, capacity))
        yield* cudaCall(() => name.status)
        const uuid = new Uint8Array(16)
        yield* cudaCall(() => native.cohort_cuda_device_uuid(index, ptr(uuid)))
        const total = out64()
        yield* cudaCall(() => native.cohort_cuda_device_total_memory(index, ptr(total)))
        const hex = Buffer.from(uuid).toString("hex")
        return {
          index,
          name: name.value,
          uuid: `GPU-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`,
          totalBytes: total[0]!
        }
      }),
    memory: (index) =>
      Effect.gen(function*() {
        const [free, total] = [out64(), out64()]
        yield* cudaCall(() => native.cohort_cuda_memory_info(index, ptr(free), ptr(total)))
        return { free: free[0]!, total: total[0]! }
      }),
    setDevice: (index) => cudaCall(() => native.cohort_cuda_set_device(index)),
    allocate: (device, bytes) =>
      Effect.acquireRelease(
        Effect.gen(function*() {
          yield* cudaCall(() => native.cohort_cuda_set_device(device))
          const address = out64()
          yield* cudaCall(() => native.cohort_cuda_malloc(BigInt(bytes), ptr(address)))
          const buffer: DeviceBuffer = {
            device,
            address: address[0]!,
            bytes,
            upload: (from) =>
              from.byteLength > bytes
                ? Effect.fail(new CudaUnavailable({ reason: `upload of ${from.byteLength} bytes into a ${bytes}-byte buffer` }))
                : cudaCall(() => native.cohort_cuda_copy_to_device(address[0]!, ptr(from), BigInt(from.byteLength))),
            download: (into) =>
              into.byteLength > bytes
                ? Effect.fail(new CudaUnavailable({ reason: `download of ${into.byteLength} bytes from a ${bytes}-byte buffer` }))
                : cudaCall(() => native.cohort_cuda_copy_to_host(ptr(into), address[0]!, BigInt(into.byteLength)))
          }
          return buffer
        }),
        (buffer) => Effect.ignore(cudaCall(() => native.cohort_cuda_free(buffer.address)))
      ),
    stream: Effect.acquireRelease(
      Effect.gen(function*() {
        const handle = out64()
        yield* cudaCall(() => native.cohort_cuda_stream_create(ptr(handle)))
        return handle[0]!
      }),
      (stream) => Effect.ignore(cudaCall(() => native.cohort_cuda_stream_destroy(stream)))
    ),
    synchronize: (stream) => cudaCall(() => native.cohort_cuda_stream_synchronize(stream))
  }

  const ncclCall = (call: () => number): Effect.Effect<void, NcclError | NcclUnavailable> =>
    Effect.suspend((): Effect.Effect<void, NcclError | NcclUnavailable> => {
      const code = call()
      if (code === status.ok) return Effect.void
      const detail = library.lastError()
      if (code === status.unavailable) return Effect.fail(new NcclUnavailable({ searched: detail }))
      const nccl = /ncclResult_t (\d+)|code (\d+)/.exec(detail)
      return Effect.fail(new NcclError({ code: Number(nccl?.[1] ?? nccl?.[2] ?? code), detail }))
    })
  /**
   * A communicator `make` writes into its out-parameter, destroyed when the Scope closes unless aborted first
   * (an aborted handle is freed: destroying it again would touch freed memory).
   */
  const owned = (rank: number, worldSize: number, make: (out: Pointer) => number): Effect.Effect<Communicator, NcclError | NcclUnavailable, Scope.Scope> =>
    Effect.gen(function*() {
      let aborted = false
      const handle = yield* Effect.acquireRelease(
        Effect.suspend(() => {
          const out = out64()
          return Effect.map(ncclCall(() => make(ptr(out))), () => out[0]!)
        }),
        (comm) => (aborted ? Effect.void : Effect.ignore(ncclCall(() => native.cohort_nccl_comm_destroy(comm))))
      )
      const communicator: Communicator = {
        rank,
        worldSize,
        allReduce: (send, receive, element, op, stream) =>
          ncclCall(() => native.cohort_nccl_all_reduce(
            send.address,
            receive.address,
            BigInt(Math.floor(Math.min(send.bytes, receive.bytes) / (element === "f32" ? 4 : 2))),
            element === "f32" ? 0 : 1,
            op === "sum" ? 0 : 1,
            handle,
            stream
          )),
        asyncError: Effect.suspend(() => {
          const code = new Int32Array(1)
          return Effect.map(ncclCall(() => native.cohort_nccl_comm_get_async_error(handle, ptr(code))), () => code[0]!)
        }),
        abort: Effect.suspend(() => {
          if (aborted) return Effect.void
          aborted = true
          return ncclCall(() => native.cohort_nccl_comm_abort(handle))
        }),
        shrink: (excluded, flags) => {
          // Checked here too: bun:ffi cannot point at an empty array.
          if (excluded.length === 0) return Effect.fail(new NcclError({ code: 4, detail: "a shrink needs at least one NCCL rank to exclude" }))
          const list = new Int32Array(excluded)
          // NCCL compacts the survivors in their old order: a rank moves down by the excluded ranks below it.
          const below = excluded.filter((other) => other < rank).length
          return owned(rank - below, worldSize - excluded.length, (out) =>
            native.cohort_nccl_comm_shrink(out, handle, worldSize, ptr(list), list.length, shrinkFlagCode[flags]))
        }
      }
      return communicator
    })
  const nccl: Nccl = {
    libraryPath: Effect.suspend(() => {
      const path = text((out, capacity) => native.cohort_nccl_library_path(out, capacity), 4096)
      return Effect.as(ncclCall(() => path.status), path.value)
    }).pipe(
      // Finding the path can only fail by not finding NCCL.
      Effect.catchTag("NcclError", (error) => Effect.fail(new NcclUnavailable({ searched: error.detail })))
    ),
    version: Effect.suspend(() => {
      const version = new Int32Array(1)
      return Effect.map(ncclCall(() => native.cohort_nccl_version(ptr(version))), () => version[0]!)
    }),
    uniqueId: Effect.suspend(() => {
      const id = new Uint8Array(128)
      return Effect.as(ncclCall(() => native.cohort_nccl_get_unique_id(ptr(id))), id)
    }),
    communicator: (rank, worldSize, id) =>
      id.length !== 128
        ? Effect.fail(new NcclError({ code: 4, detail: `a unique id has 128 bytes, got ${id.length}` }))
        : owned(rank, worldSize, (out) => native.cohort_nccl_comm_init_rank(out, worldSize, ptr(id), rank)),
    shrinkSupport: Effect.suspend(() => {
      const support = new Int32Array(1)
      return Effect.map(ncclCall(() => native.cohort_nccl_shrink_support(ptr(support))), () => support[0] === 1)
    })
  }

  // Out-parameters allocated once: the calls are synchronous, and the agent samples every few seconds.
  const memoryOut = new BigUint64Array(2)
  const percentOut = new Uint32Array(1)
  const nvml: Nvml = {
    sample: (device) => {
      const code = native.cohort_gpu_sample(device, ptr(memoryOut), ptr(memoryOut, 8), ptr(percentOut))
      if (code === status.unavailable) return undefined
      if (code !== status.ok) return new NvmlError({ device, detail: library.lastError() })
      const percent = percentOut[0]!
      return {
        memoryUsedBytes: Number(memoryOut[0]!),
        memoryTotalBytes: Number(memoryOut[1]!),
        // u32::MAX: the device keeps no utilisation.
        utilization: percent === 0xffff_ffff ? null : percent / 100
      }
    }
  }

  return { path: library.path, kernels, process: processHelpers, cuda, nccl, nvml }
}

/** Load the library (default: `libraryPath()`), checking its ABI. */
export const load = (path: string = libraryPath()): Effect.Effect<NativeLibrary, NativeLibraryMissing | NativeAbiMismatch> =>
  Effect.suspend((): Effect.Effect<NativeLibrary, NativeLibraryMissing | NativeAbiMismatch> => {
    const opened = openLibrary(path)
    if ("_tag" in opened) {
      return opened._tag === "Missing"
        ? Effect.fail(new NativeLibraryMissing({ path: opened.path, reason: opened.reason }))
        : Effect.fail(new NativeAbiMismatch({ path: opened.path, found: opened.found, expected: ABI_VERSION }))
    }
    return Effect.succeed(fromLibrary(opened))
  })

export const layer = (path?: string): Layer.Layer<Native, NativeLibraryMissing | NativeAbiMismatch> => Layer.effect(Native, load(path))

/** The CPU kernels a process reduces with: the library's, or why they are not and the portable ones stand in. */
export interface CpuKernels {
  readonly kernels: Kernels
  /** Why the library's kernels are not used (its load failure, with what to do); undefined: they are. */
  readonly fallback: string | undefined
}

/**
 * The library's CPU kernels where it loads; else the TypeScript ones (`PortableKernels`), which give the
 * same results, slower on large tensors. A run must not lose its ranks for want of cargo: a relay that
 * could not reduce would end its host's ranks, and the failure policy would count them dead.
 */
export const cpuKernels = (path?: string): Effect.Effect<CpuKernels> =>
  Effect.match(load(path), {
    onFailure: (error) => ({ kernels: portableKernels, fallback: error.message }),
    onSuccess: (library) => ({ kernels: library.kernels, fallback: undefined })
  })

/**
 * What the portable kernels cost. Measured on a 2-core machine, the average of N f32 buffers: N = 4 × 16 MiB
 * 4.6 GB/s of inputs against the library's 30 (its two threads), N = 4 × 64 MiB 5.6 against 27, N = 2 × 16 MiB
 * 9.2 against 19; 4 × 1,024 elements are faster in TypeScript (no FFI call).
 */
const PORTABLE_COST = "the same results, 2 to 6 times slower on large tensors"

/**
 * Whether this process has said that the portable kernels stand in. Once per process: the launcher's
 * controller and its in-process agent (one machine, one library) are one line, not two; an agent on
 * another machine says it for its own host.
 */
let fallbackSaid = false

/** `cpuKernels`, with one warning per process when the portable kernels stand in. */
export const cpuKernelsSayingFallback = (path?: string): Effect.Effect<Kernels> =>
  Effect.flatMap(cpuKernels(path), ({ fallback, kernels }) => {
    if (fallback === undefined || fallbackSaid) return Effect.succeed(kernels)
    fallbackSaid = true
    return Effect.as(Effect.logWarning(`CPU reductions run in TypeScript (${PORTABLE_COST}): ${fallback}`), kernels)
  })
