/**
 * The one `dlopen` table of cohort's native library (`src/native`, a Rust
 * cdylib), and the plain functions that open it. `Native.ts` wraps it in
 * typed Effect services; the rank runtime, whose start-up must stay lean,
 * uses `openLibrary` directly.
 *
 * Conventions of the C ABI: every call returns an i32 status (0 ok, <0 an
 * error whose text `lastError` reads); 64-bit handles and device pointers
 * travel as u64 and come back here as bigint; out-parameters are small typed
 * arrays kept referenced for the duration of the (synchronous) call.
 */
import { dlopen, FFIType, ptr } from "bun:ffi"
import { existsSync } from "node:fs"
import { dirname, join } from "node:path"

/** The ABI this binding speaks; the library's `cohort_abi_version` must say the same. */
export const ABI_VERSION = 4

export const status = { ok: 0, invalid: -1, unavailable: -2, cuda: -3, nccl: -4, os: -5, nvml: -6 } as const

const { f32, f64, i32, ptr: pointer, u32, u64 } = FFIType
/** size_t: 64-bit on every platform cohort runs on. */
const usize = FFIType.u64

export const symbols = {
  cohort_abi_version: { args: [], returns: u32 },
  cohort_noop: { args: [], returns: i32 },
  cohort_last_error: { args: [pointer, usize], returns: usize },
  // Process helpers.
  cohort_set_parent_death_signal: { args: [i32, i32], returns: i32 },
  cohort_getppid: { args: [], returns: i32 },
  cohort_monotonic_ns: { args: [], returns: f64 },
  // A host's board (small all-reduces in shared memory): (board, …) — see board.rs.
  cohort_board_bytes: { args: [u32, u32], returns: u64 },
  cohort_board_init: { args: [pointer, usize, u32, u32], returns: i32 },
  cohort_board_enable: { args: [pointer, u64], returns: i32 },
  cohort_board_disable: { args: [pointer], returns: i32 },
  cohort_board_state: { args: [pointer], returns: u32 },
  cohort_board_arrive: { args: [pointer, u32, u32, pointer, u32, u32, f64], returns: i32 },
  cohort_board_wait: { args: [pointer, u32, pointer, u32, u32, u32], returns: i32 },
  // CPU kernels: (inputs: pointer to N pointers, N, length, out) and friends.
  cohort_sum_f32: { args: [pointer, usize, usize, pointer], returns: i32 },
  cohort_average_f32: { args: [pointer, usize, usize, pointer], returns: i32 },
  cohort_sum_bf16: { args: [pointer, usize, usize, pointer], returns: i32 },
  cohort_average_bf16: { args: [pointer, usize, usize, pointer], returns: i32 },
  cohort_add_f32: { args: [pointer, pointer, usize], returns: i32 },
  cohort_add_bf16: { args: [pointer, pointer, usize], returns: i32 },
  cohort_scale_f32: { args: [pointer, usize, f32], returns: i32 },
  cohort_scale_bf16: { args: [pointer, usize, f32], returns: i32 },
  // CUDA, opened by the library at first use.
  cohort_cuda_device_count: { args: [], returns: i32 },
  cohort_cuda_device_name: { args: [i32, pointer, usize], returns: i32 },
  cohort_cuda_device_uuid: { args: [i32, pointer], returns: i32 },
  cohort_cuda_device_total_memory: { args: [i32, pointer], returns: i32 },
  cohort_cuda_memory_info: { args: [i32, pointer, pointer], returns: i32 },
  cohort_cuda_set_device: { args: [i32], returns: i32 },
  cohort_cuda_malloc: { args: [u64, pointer], returns: i32 },
  cohort_cuda_free: { args: [u64], returns: i32 },
  cohort_cuda_copy_to_device: { args: [u64, pointer, u64], returns: i32 },
  cohort_cuda_copy_to_host: { args: [pointer, u64, u64], returns: i32 },
  cohort_cuda_stream_create: { args: [pointer], returns: i32 },
  cohort_cuda_stream_destroy: { args: [u64], returns: i32 },
  cohort_cuda_stream_synchronize: { args: [u64], returns: i32 },
  cohort_cuda_device_synchronize: { args: [], returns: i32 },
  // NCCL, opened by the library at first use (search order in nccl.rs).
  cohort_nccl_library_path: { args: [pointer, usize], returns: i32 },
  cohort_nccl_version: { args: [pointer], returns: i32 },
  cohort_nccl_get_unique_id: { args: [pointer], returns: i32 },
  cohort_nccl_comm_init_rank: { args: [pointer, i32, pointer, i32], returns: i32 },
  cohort_nccl_all_reduce: { args: [u64, u64, u64, i32, i32, u64, u64], returns: i32 },
  cohort_nccl_comm_abort: { args: [u64], returns: i32 },
  cohort_nccl_comm_destroy: { args: [u64], returns: i32 },
  // (out support), then (out comm, parent, parent's world size, exclude list, its length, flags).
  cohort_nccl_shrink_support: { args: [pointer], returns: i32 },
  cohort_nccl_comm_shrink: { args: [pointer, u64, i32, pointer, i32, i32], returns: i32 },
  cohort_nccl_comm_get_async_error: { args: [u64, pointer], returns: i32 },
  cohort_nccl_error_string: { args: [i32, pointer, usize], returns: i32 },
  // NVML, opened by the library at first use: (device, out used bytes, out total bytes, out utilisation percent).
  cohort_gpu_sample: { args: [i32, pointer, pointer, pointer], returns: i32 }
} as const

export type Symbols = ReturnType<typeof dlopen<typeof symbols>>["symbols"]

export interface OpenLibrary {
  readonly path: string
  readonly symbols: Symbols
  /** The text of the last failed call on this thread. */
  readonly lastError: () => string
}

export type OpenFailure =
  | { readonly _tag: "Missing"; readonly path: string; readonly reason: string }
  | { readonly _tag: "AbiMismatch"; readonly path: string; readonly found: number }

/** The project's root: the folder holding `src/native/Cargo.toml`, above this module (from sources or a bundle). */
const projectRoot = (): string => {
  let dir = import.meta.dir
  while (!existsSync(join(dir, "src/native/Cargo.toml"))) {
    const parent = dirname(dir)
    if (parent === dir) return import.meta.dir
    dir = parent
  }
  return dir
}

/** Where the library is: `COHORT_NATIVE_LIB`, else cargo's release output in the checkout. */
export const libraryPath = (): string =>
  process.env.COHORT_NATIVE_LIB ?? join(projectRoot(), "src/native/target/release/libcohort_native.so")

const errorText = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** The ABI version a library file declares, or why it cannot be read. */
const abiOf = (path: string): number | string => {
  try {
    const probe = dlopen(path, { cohort_abi_version: symbols.cohort_abi_version })
    const found = probe.symbols.cohort_abi_version()
    probe.close()
    return found
  } catch (error) {
    return errorText(error)
  }
}

/** Reads the text of the last failed call on this thread (`cohort_last_error`), from whichever binding has it. */
const lastErrorOf = (bound: { readonly cohort_last_error: (text: ReturnType<typeof ptr>, length: number) => number | bigint }) => {
  const text = new Uint8Array(4096)
  return (): string => {
    const length = Number(bound.cohort_last_error(ptr(text), text.length))
    return new TextDecoder().decode(text.subarray(0, Math.min(length, text.length - 1)))
  }
}

/** Open the library at `path` and check its ABI; never throws. */
export const openLibrary = (path: string = libraryPath()): OpenLibrary | OpenFailure => {
  if (!existsSync(path)) return { _tag: "Missing", path, reason: "no such file" }
  // The version first, with nothing else bound: a library of another version may lack our symbols.
  const found = abiOf(path)
  if (typeof found === "string") return { _tag: "Missing", path, reason: found }
  if (found !== ABI_VERSION) return { _tag: "AbiMismatch", path, found }
  let opened: ReturnType<typeof dlopen<typeof symbols>>
  try {
    opened = dlopen(path, symbols)
  } catch (error) {
    return { _tag: "Missing", path, reason: errorText(error) }
  }
  return { path, symbols: opened.symbols, lastError: lastErrorOf(opened.symbols) }
}

export const boardSymbols = {
  cohort_abi_version: symbols.cohort_abi_version,
  cohort_last_error: symbols.cohort_last_error,
  cohort_board_bytes: symbols.cohort_board_bytes,
  cohort_board_init: symbols.cohort_board_init,
  cohort_board_enable: symbols.cohort_board_enable,
  cohort_board_disable: symbols.cohort_board_disable,
  cohort_board_state: symbols.cohort_board_state,
  cohort_board_arrive: symbols.cohort_board_arrive,
  cohort_board_wait: symbols.cohort_board_wait
} as const

export interface BoardLibrary {
  readonly symbols: ReturnType<typeof dlopen<typeof boardSymbols>>["symbols"]
  readonly lastError: () => string
}

/**
 * The library's board half alone (a rank's start-up binds nothing else), or undefined where the library is
 * missing or of another ABI: collectives then take the relay's path. Never throws.
 */
export const openBoardLibrary = (path: string = libraryPath()): BoardLibrary | undefined => {
  if (!existsSync(path)) return undefined
  try {
    const opened = dlopen(path, boardSymbols)
    if (opened.symbols.cohort_abi_version() !== ABI_VERSION) return undefined
    return { symbols: opened.symbols, lastError: lastErrorOf(opened.symbols) }
  } catch {
    return undefined
  }
}

const parentDeathSymbols = {
  cohort_abi_version: symbols.cohort_abi_version,
  cohort_set_parent_death_signal: symbols.cohort_set_parent_death_signal
} as const

/**
 * Have the kernel SIGKILL this process when its parent dies, through the
 * library (only the two symbols it needs are bound: a rank's start-up pays
 * for nothing else). Says what happened; never throws.
 */
export const dieWithParent = (expectedParent: number, path: string = libraryPath()): "armed" | "parent-gone" | "unavailable" => {
  if (!existsSync(path)) return "unavailable"
  try {
    const library = dlopen(path, parentDeathSymbols)
    if (library.symbols.cohort_abi_version() !== ABI_VERSION) return "unavailable"
    const code = library.symbols.cohort_set_parent_death_signal(9, expectedParent)
    return code === 0 ? "armed" : code === 1 ? "parent-gone" : "unavailable"
  } catch {
    return "unavailable"
  }
}
