//! cohort's native library, called from Bun through `bun:ffi`.
//!
//! Every export is a plain C function. Status codes are `i32`: 0 is success,
//! negative values are the errors listed in `status`, and the text of the
//! last error on this thread is read with `cohort_last_error`. Nothing here
//! links against CUDA, NCCL or NVML: each is opened with `dlopen` when first
//! used, so the library loads, and its CPU half works, on machines without a GPU.

mod board;
mod cuda;
mod dl;
mod error;
mod kernels;
mod nccl;
mod nvml;
mod process;

/// Bumped whenever the exports change (one added, removed or changed): the
/// binding binds every symbol, so it refuses any other value.
pub const ABI_VERSION: u32 = 4;

#[no_mangle]
pub extern "C" fn cohort_abi_version() -> u32 {
    ABI_VERSION
}

/// Does nothing: the binding's benchmark of one FFI round trip.
#[no_mangle]
pub extern "C" fn cohort_noop() -> i32 {
    0
}
