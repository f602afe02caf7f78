//! The last error of this thread, as text the binding can read after a
//! failed call, and the status codes every export returns.

use std::cell::RefCell;
use std::ffi::c_char;

pub mod status {
    pub const OK: i32 = 0;
    /// An argument was out of range (null pointer, zero count, length mismatch).
    pub const INVALID: i32 = -1;
    /// A shared library could not be opened, or lacks a symbol.
    pub const UNAVAILABLE: i32 = -2;
    /// CUDA reported an error (its code and text are in the last error).
    pub const CUDA: i32 = -3;
    /// NCCL reported an error (its code and text are in the last error).
    pub const NCCL: i32 = -4;
    /// The operating system refused (errno in the last error).
    pub const OS: i32 = -5;
    /// NVML refused a query (its code and text are in the last error).
    pub const NVML: i32 = -6;
}

thread_local! {
    static LAST: RefCell<Vec<u8>> = RefCell::new(vec![0]);
}

/// Record `message` as this thread's last error and return `code`.
pub fn fail(code: i32, message: impl AsRef<str>) -> i32 {
    LAST.with(|last| {
        let mut bytes = message.as_ref().as_bytes().to_vec();
        bytes.retain(|&b| b != 0);
        bytes.push(0);
        *last.borrow_mut() = bytes;
    });
    code
}

/// Copy the last error (NUL-terminated, truncated to `capacity`) into `out`; returns its full length.
#[no_mangle]
pub unsafe extern "C" fn cohort_last_error(out: *mut c_char, capacity: usize) -> usize {
    LAST.with(|last| {
        let last = last.borrow();
        let text = &last[..last.len() - 1];
        if !out.is_null() && capacity > 0 {
            let n = text.len().min(capacity - 1);
            std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, out, n);
            *out.add(n) = 0;
        }
        text.len()
    })
}
