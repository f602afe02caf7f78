//! Process helpers the runtime needs and Bun does not offer.

use crate::error::{fail, status};
use std::ffi::{c_int, c_long, c_ulong};

const PR_SET_PDEATHSIG: c_int = 1;
const CLOCK_MONOTONIC: c_int = 1;

/// `struct timespec` (clock_gettime, and the futex timeouts of `board`).
#[repr(C)]
pub(crate) struct Timespec {
    pub(crate) tv_sec: c_long,
    pub(crate) tv_nsec: c_long,
}

extern "C" {
    fn prctl(option: c_int, arg2: c_ulong, arg3: c_ulong, arg4: c_ulong, arg5: c_ulong) -> c_int;
    fn getppid() -> c_int;
    fn clock_gettime(clock: c_int, time: *mut Timespec) -> c_int;
    fn __errno_location() -> *mut c_int;
}

/// Ask the kernel to send `signal` to this process when its parent thread dies.
///
/// The signal follows the thread that spawned us; a parent that already died
/// before the call is caught by comparing `getppid` with `expected_parent`
/// (returns 1 then: the caller should exit at once).
#[no_mangle]
pub extern "C" fn cohort_set_parent_death_signal(signal: i32, expected_parent: i32) -> i32 {
    if !(1..=64).contains(&signal) {
        return fail(status::INVALID, format!("signal {signal} is not a signal number"));
    }
    let result = unsafe { prctl(PR_SET_PDEATHSIG, signal as c_ulong, 0, 0, 0) };
    if result != 0 {
        let errno = unsafe { *__errno_location() };
        return fail(status::OS, format!("prctl(PR_SET_PDEATHSIG) failed: errno {errno}"));
    }
    if expected_parent > 0 && unsafe { getppid() } != expected_parent {
        return 1;
    }
    status::OK
}

#[no_mangle]
pub extern "C" fn cohort_getppid() -> i32 {
    unsafe { getppid() }
}

/// CLOCK_MONOTONIC in nanoseconds (as f64: exact to 2^53 ns, about 104 days of uptime… and beyond, to the µs).
#[no_mangle]
pub extern "C" fn cohort_monotonic_ns() -> f64 {
    let mut now = Timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as f64 * 1e9 + now.tv_nsec as f64
}
