//! The CUDA runtime (memory, copies, streams) and driver (device names, UUIDs
//! and total memory), both opened with `dlopen` at first use.
//!
//! Device properties come from the driver API: the runtime's `cudaDeviceProp`
//! changes layout between CUDA versions, and the driver answers without
//! creating a context (which would take memory on every GPU it touches).
//! Device pointers, streams and handles cross the ABI as `u64`.

use crate::dl::{self, Library};
use crate::error::{fail, status};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fmt::Arguments;
use std::sync::OnceLock;

const RUNTIME_SONAMES: [&str; 4] = [
    "libcudart.so",
    "libcudart.so.13",
    "libcudart.so.12",
    "libcudart.so.11.0",
];
const DRIVER_SONAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

const CUDA_ERROR_INSUFFICIENT_DRIVER: c_int = 35;
const CUDA_ERROR_NO_DEVICE: c_int = 100;
const MEMCPY_HOST_TO_DEVICE: c_int = 1;
const MEMCPY_DEVICE_TO_HOST: c_int = 2;
const STREAM_NON_BLOCKING: c_uint = 1;

type Status = c_int;
type Stream = *mut c_void;

// Helpers shared with nccl.rs.

/// An export's status: 0, or the code `fail` already recorded.
pub(crate) fn run(body: impl FnOnce() -> Result<(), i32>) -> i32 {
    body().err().unwrap_or(status::OK)
}

pub(crate) fn invalid<T>(message: impl AsRef<str>) -> Result<T, i32> {
    Err(fail(status::INVALID, message))
}

/// A cached load as seen by one call: a failed load is reported again on every
/// call, because the last error belongs to the calling thread.
pub(crate) fn loaded<T>(load: &Result<T, String>) -> Result<&T, i32> {
    load.as_ref().map_err(|why| fail(status::UNAVAILABLE, why))
}

/// A non-empty environment variable.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The text of a C string owned by a library ("" for null).
pub(crate) fn c_text(text: *const c_char) -> String {
    if text.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }
}

/// Copy `text` into `out` (`capacity` > 0 bytes), truncated and NUL-terminated.
pub(crate) unsafe fn write_c_string(text: &[u8], out: *mut c_char, capacity: usize) {
    let n = text.len().min(capacity - 1);
    std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, out, n);
    *out.add(n) = 0;
}

pub(crate) fn open_first(what: &str, candidates: &[String], advice: &str) -> Result<Library, String> {
    let mut tried = Vec::new();
    for candidate in candidates {
        match Library::open(candidate) {
            Ok(library) => return Ok(library),
            Err(why) => tried.push(format!("{candidate} ({why})")),
        }
    }
    Err(format!("cannot load {what}; tried: {}; {advice}", tried.join(", ")))
}

/// Where to look for libcudart: the override alone when it is set.
fn runtime_candidates(override_path: Option<&str>) -> Vec<String> {
    match override_path.filter(|path| !path.is_empty()) {
        Some(path) => vec![path.to_string()],
        None => RUNTIME_SONAMES.iter().map(|name| name.to_string()).collect(),
    }
}

/// libcudart's functions (the library stays open: `Library` never closes).
struct Runtime {
    get_device_count: unsafe extern "C" fn(*mut c_int) -> Status,
    get_error_string: unsafe extern "C" fn(Status) -> *const c_char,
    set_device: unsafe extern "C" fn(c_int) -> Status,
    mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> Status,
    malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> Status,
    free: unsafe extern "C" fn(*mut c_void) -> Status,
    memcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> Status,
    stream_create_with_flags: unsafe extern "C" fn(*mut Stream, c_uint) -> Status,
    stream_destroy: unsafe extern "C" fn(Stream) -> Status,
    stream_synchronize: unsafe extern "C" fn(Stream) -> Status,
    device_synchronize: unsafe extern "C" fn() -> Status,
}

impl Runtime {
    /// The first candidate that opens and that the installed driver supports.
    ///
    /// A runtime too new for the driver (error 35) gives way to an older soname
    /// further down the list; it is kept only when none does better, so that
    /// the error then says what to upgrade.
    fn load(candidates: &[String]) -> Result<Runtime, String> {
        let mut tried = Vec::new();
        let mut too_new: Option<Runtime> = None;
        for candidate in candidates {
            let runtime = match Library::open(candidate).and_then(|library| Runtime::bind(&library)) {
                Ok(runtime) => runtime,
                Err(why) => {
                    tried.push(format!("{candidate} ({why})"));
                    continue;
                }
            };
            let mut count = 0;
            if unsafe { (runtime.get_device_count)(&mut count) } != CUDA_ERROR_INSUFFICIENT_DRIVER {
                return Ok(runtime);
            }
            too_new.get_or_insert(runtime);
        }
        too_new.ok_or_else(|| {
            format!(
                "cannot load the CUDA runtime (libcudart); tried: {}; install the CUDA runtime \
                 or set COHORT_CUDART_LIB to libcudart.so's full path",
                tried.join(", ")
            )
        })
    }

    fn bind(lib: &Library) -> Result<Runtime, String> {
        unsafe {
            Ok(Runtime {
                get_device_count: dl::function(lib, "cudaGetDeviceCount")?,
                get_error_string: dl::function(lib, "cudaGetErrorString")?,
                set_device: dl::function(lib, "cudaSetDevice")?,
                mem_get_info: dl::function(lib, "cudaMemGetInfo")?,
                malloc: dl::function(lib, "cudaMalloc")?,
                free: dl::function(lib, "cudaFree")?,
                memcpy: dl::function(lib, "cudaMemcpy")?,
                stream_create_with_flags: dl::function(lib, "cudaStreamCreateWithFlags")?,
                stream_destroy: dl::function(lib, "cudaStreamDestroy")?,
                stream_synchronize: dl::function(lib, "cudaStreamSynchronize")?,
                device_synchronize: dl::function(lib, "cudaDeviceSynchronize")?,
            })
        }
    }

    fn error(&self, code: Status, call: Arguments, advice: &str) -> i32 {
        let text = c_text(unsafe { (self.get_error_string)(code) });
        fail(
            status::CUDA,
            format!("{call} failed: {text} (CUDA error {code}){advice}"),
        )
    }

    fn check(&self, code: Status, call: Arguments) -> Result<(), i32> {
        if code == 0 {
            Ok(())
        } else {
            Err(self.error(code, call, ""))
        }
    }
}

fn runtime() -> Result<&'static Runtime, i32> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    loaded(RUNTIME.get_or_init(|| Runtime::load(&runtime_candidates(env("COHORT_CUDART_LIB").as_deref()))))
}

/// libcuda's functions.
struct Driver {
    init: unsafe extern "C" fn(c_uint) -> Status,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> Status,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> Status,
    device_get_uuid: unsafe extern "C" fn(*mut u8, c_int) -> Status,
    device_total_mem: unsafe extern "C" fn(*mut usize, c_int) -> Status,
    get_error_string: unsafe extern "C" fn(Status, *mut *const c_char) -> Status,
}

impl Driver {
    fn load(candidates: &[String]) -> Result<Driver, String> {
        let lib = open_first(
            "the CUDA driver (libcuda)",
            candidates,
            "install the NVIDIA driver, or add the directory of libcuda.so.1 to LD_LIBRARY_PATH",
        )?;
        unsafe {
            Ok(Driver {
                init: dl::function(&lib, "cuInit")?,
                device_get: dl::function(&lib, "cuDeviceGet")?,
                device_get_name: dl::function(&lib, "cuDeviceGetName")?,
                // _v2 (CUDA 11.4+) is the one newer drivers document; the original has the same signature.
                device_get_uuid: dl::function(&lib, "cuDeviceGetUuid_v2")
                    .or_else(|_| dl::function(&lib, "cuDeviceGetUuid"))?,
                device_total_mem: dl::function(&lib, "cuDeviceTotalMem_v2")?,
                get_error_string: dl::function(&lib, "cuGetErrorString")?,
            })
        }
    }

    fn check(&self, code: Status, call: Arguments) -> Result<(), i32> {
        if code == 0 {
            return Ok(());
        }
        let mut text = std::ptr::null();
        unsafe { (self.get_error_string)(code, &mut text) };
        let text = if text.is_null() {
            "unknown error".to_string()
        } else {
            c_text(text)
        };
        Err(fail(
            status::CUDA,
            format!("{call} failed: {text} (CUDA driver error {code})"),
        ))
    }

    /// The driver's handle of `device`, initialising the driver (cuInit is idempotent and cheap).
    fn device(&self, device: i32) -> Result<c_int, i32> {
        self.check(unsafe { (self.init)(0) }, format_args!("cuInit"))?;
        let mut handle = 0;
        self.check(
            unsafe { (self.device_get)(&mut handle, device) },
            format_args!("cuDeviceGet(device {device})"),
        )?;
        Ok(handle)
    }
}

fn driver() -> Result<&'static Driver, i32> {
    static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
    let candidates: Vec<String> = DRIVER_SONAMES.iter().map(|name| name.to_string()).collect();
    loaded(DRIVER.get_or_init(|| Driver::load(&candidates)))
}

fn device_index(device: i32) -> Result<(), i32> {
    if device < 0 {
        return invalid(format!("device {device} is not a device index"));
    }
    Ok(())
}

/// The number of CUDA devices (0 when the driver sees none), or a negative status.
#[no_mangle]
pub extern "C" fn cohort_cuda_device_count() -> i32 {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let mut count = 0;
    match unsafe { (runtime.get_device_count)(&mut count) } {
        0 => count,
        CUDA_ERROR_NO_DEVICE => 0,
        CUDA_ERROR_INSUFFICIENT_DRIVER => runtime.error(
            CUDA_ERROR_INSUFFICIENT_DRIVER,
            format_args!("cudaGetDeviceCount"),
            "; install or upgrade the NVIDIA driver (it must be at least as new as the CUDA runtime), \
             or set COHORT_CUDART_LIB to a libcudart the installed driver supports",
        ),
        code => runtime.error(code, format_args!("cudaGetDeviceCount"), ""),
    }
}

/// The device's name, NUL-terminated and truncated to `capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn cohort_cuda_device_name(device: i32, out: *mut c_char, capacity: usize) -> i32 {
    run(|| {
        if out.is_null() || capacity == 0 {
            return invalid("cohort_cuda_device_name needs an output buffer");
        }
        device_index(device)?;
        let driver = driver()?;
        let handle = driver.device(device)?;
        let mut name = [0 as c_char; 256];
        let code = unsafe { (driver.device_get_name)(name.as_mut_ptr(), name.len() as c_int, handle) };
        driver.check(code, format_args!("cuDeviceGetName(device {device})"))?;
        unsafe { write_c_string(CStr::from_ptr(name.as_ptr()).to_bytes(), out, capacity) };
        Ok(())
    })
}

/// The device's 16-byte UUID (the bytes of nvidia-smi's "GPU-…").
#[no_mangle]
pub unsafe extern "C" fn cohort_cuda_device_uuid(device: i32, out16: *mut u8) -> i32 {
    run(|| {
        if out16.is_null() {
            return invalid("cohort_cuda_device_uuid needs a 16-byte output buffer");
        }
        device_index(device)?;
        let driver = driver()?;
        let handle = driver.device(device)?;
        let mut uuid = [0u8; 16];
        let code = unsafe { (driver.device_get_uuid)(uuid.as_mut_ptr(), handle) };
        driver.check(code, format_args!("cuDeviceGetUuid(device {device})"))?;
        unsafe { std::ptr::copy_nonoverlapping(uuid.as_ptr(), out16, uuid.len()) };
        Ok(())
    })
}

/// The device's total memory in bytes.
#[no_mangle]
pub unsafe extern "C" fn cohort_cuda_device_total_memory(device: i32, out: *mut u64) -> i32 {
    run(|| {
        if out.is_null() {
            return invalid("cohort_cuda_device_total_memory needs an output pointer");
        }
        device_index(device)?;
        let driver = driver()?;
        let handle = driver.device(device)?;
        let mut bytes = 0;
        let code = unsafe { (driver.device_total_mem)(&mut bytes, handle) };
        driver.check(code, format_args!("cuDeviceTotalMem(device {device})"))?;
        unsafe { out.write_unaligned(bytes as u64) };
        Ok(())
    })
}

/// Free and total memory of `device`, as the runtime sees them. Leaves `device`
/// current on this thread (the query needs its context).
#[no_mangle]
pub unsafe extern "C" fn cohort_cuda_memory_info(device: i32, free: *mut u64, total: *mut u64) -> i32 {
    run(|| {
        if free.is_null() || total.is_null() {
            return invalid("cohort_cuda_memory_info needs two output pointers");
        }
        device_index(device)?;
        let runtime = runtime()?;
        runtime.check(
            unsafe { (runtime.set_device)(device) },
            format_args!("cudaSetDevice({device})"),
        )?;
        let (mut free_bytes, mut total_bytes) = (0, 0);
        let code = unsafe { (runtime.mem_get_info)(&mut free_bytes, &mut total_bytes) };
        runtime.check(code, format_args!("cudaMemGetInfo(device {device})"))?;
        unsafe {
            free.write_unaligned(free_bytes as u64);
            total.write_unaligned(total_bytes as u64);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cohort_cuda_set_device(device: i32) -> i32 {
    run(|| {
        device_index(device)?;
        let runtime = runtime()?;
        runtime.check(
            unsafe { (runtime.set_device)(device) },
            format_args!("cudaSetDevice({device})"),
        )
    })
}

/// Allocate `bytes` (> 0) on the current device; the address goes to `*out_ptr`.
#[no_mangle]
pub unsafe extern "C" fn cohort_cuda_malloc(bytes: u64, out_ptr: *mut u64) -> i32 {
    run(|| {
        if out_ptr.is_null() {
            return invalid("cohort_cuda_malloc needs an output pointer");
        }
        if bytes == 0 {
            // cudaMalloc would succeed with a null address, which the caller could not tell from none.
            return invalid("cohort_cuda_malloc cannot allocate 0 bytes");
        }
        let runtime = runtime()?;
        let mut address = std::ptr::null_mut();
        let code = unsafe { (runtime.malloc)(&mut address, bytes as usize) };
        runtime.check(code, format_args!("cudaMalloc({bytes} bytes)"))?;
        unsafe { out_ptr.write_unaligned(address as u64) };
        Ok(())
    })
}

/// Free a device allocation (0 is accepted and does nothing, as cudaFree(NULL)).
#[no_mangle]
pub extern "C" fn cohort_cuda_free(ptr: u64) -> i32 {
    run(|| {
        let runtime = runtime()?;
        runtime.check(
            unsafe { (runtime.free)(ptr as *mut c_void) },
            format_args!("cudaFree({ptr:#x})"),
        )
    })
}

fn copy(dst: *mut c_void, src: *const c_void, bytes: u64, kind: c_int, call: &str) -> Result<(), i32> {
    if bytes == 0 {
        return Ok(());
    }
    if dst.is_null() || src.is_null() {
        return invalid(format!("{call} of {bytes} bytes needs a source and a destination"));
    }
    let runtime = runtime()?;
    let code = unsafe { (runtime.memcpy)(dst, src, bytes as usize, kind) };
    runtime.check(code, format_args!("cudaMemcpy({call}, {bytes} bytes)"))
}

/// Copy `bytes` from host memory at `src` to the device address `dst`.
#[no_mangle]
pub unsafe extern "C" fn cohort_cuda_copy_to_device(dst: u64, src: *const u8, bytes: u64) -> i32 {
    run(|| {
        copy(
            dst as *mut c_void,
            src as *const c_void,
            bytes,
            MEMCPY_HOST_TO_DEVICE,
            "host to device",
        )
    })
}

/// Copy `bytes` from the device address `src` to host memory at `dst`.
#[no_mangle]
pub unsafe extern "C" fn cohort_cuda_copy_to_host(dst: *mut u8, src: u64, bytes: u64) -> i32 {
    run(|| {
        copy(
            dst as *mut c_void,
            src as *const c_void,
            bytes,
            MEMCPY_DEVICE_TO_HOST,
            "device to host",
        )
    })
}

/// A new non-blocking stream on the current device (it does not wait on the legacy default stream).
#[no_mangle]
pub unsafe extern "C" fn cohort_cuda_stream_create(out: *mut u64) -> i32 {
    run(|| {
        if out.is_null() {
            return invalid("cohort_cuda_stream_create needs an output pointer");
        }
        let runtime = runtime()?;
        let mut stream = std::ptr::null_mut();
        let code = unsafe { (runtime.stream_create_with_flags)(&mut stream, STREAM_NON_BLOCKING) };
        runtime.check(code, format_args!("cudaStreamCreateWithFlags(cudaStreamNonBlocking)"))?;
        unsafe { out.write_unaligned(stream as u64) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cohort_cuda_stream_destroy(stream: u64) -> i32 {
    run(|| {
        if stream == 0 {
            return invalid("the default stream (0) cannot be destroyed");
        }
        let runtime = runtime()?;
        let code = unsafe { (runtime.stream_destroy)(stream as Stream) };
        runtime.check(code, format_args!("cudaStreamDestroy({stream:#x})"))
    })
}

/// Wait for `stream` (0: the default stream).
#[no_mangle]
pub extern "C" fn cohort_cuda_stream_synchronize(stream: u64) -> i32 {
    run(|| {
        let runtime = runtime()?;
        let code = unsafe { (runtime.stream_synchronize)(stream as Stream) };
        runtime.check(code, format_args!("cudaStreamSynchronize({stream:#x})"))
    })
}

#[no_mangle]
pub extern "C" fn cohort_cuda_device_synchronize() -> i32 {
    run(|| {
        let runtime = runtime()?;
        runtime.check(
            unsafe { (runtime.device_synchronize)() },
            format_args!("cudaDeviceSynchronize"),
        )
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::cohort_last_error;

    pub(crate) fn last_error() -> String {
        let mut out = vec![0 as c_char; 4096];
        let n = unsafe { cohort_last_error(out.as_mut_ptr(), out.len()) };
        let bytes: Vec<u8> = out[..n.min(out.len() - 1)].iter().map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn runtime_override_replaces_the_sonames() {
        assert_eq!(runtime_candidates(None), RUNTIME_SONAMES);
        assert_eq!(runtime_candidates(Some("")), RUNTIME_SONAMES);
        assert_eq!(
            runtime_candidates(Some("/opt/cuda/libcudart.so.12")),
            ["/opt/cuda/libcudart.so.12"]
        );
    }

    #[test]
    fn missing_runtime_is_unavailable_and_says_what_was_tried() {
        let path = "/nonexistent/cohort-test/libcudart.so.12";
        let load = Runtime::load(&runtime_candidates(Some(path)));
        assert_eq!(loaded(&load).err(), Some(status::UNAVAILABLE));
        let message = last_error();
        assert!(message.contains(path), "{message}");
        assert!(message.contains("cannot open shared object file"), "{message}");
        assert!(message.contains("COHORT_CUDART_LIB"), "{message}");
    }

    /// Build the C stand-in for libcudart into `dir` (too new for the driver, or not); None without cc.
    fn stand_in(dir: &std::path::Path, name: &str, too_new: bool) -> Option<String> {
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../../test/fixtures/fake-gpu/cudart.c");
        let out = dir.join(name);
        let mut cc = std::process::Command::new("cc");
        cc.args(["-shared", "-fPIC", "-o"]).arg(&out).arg(source);
        if too_new {
            cc.arg("-DCOHORT_FAKE_TOO_NEW");
        }
        cc.status().ok().filter(|done| done.success())?;
        Some(out.to_string_lossy().into_owned())
    }

    #[test]
    fn a_runtime_too_new_for_the_driver_gives_way_to_an_older_one() {
        let dir = std::env::temp_dir().join(format!("cohort-cudart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (Some(newer), Some(older)) = (stand_in(&dir, "libcudart.so.13", true), stand_in(&dir, "libcudart.so.12", false)) else {
            eprintln!("skipping: no C compiler (cc) for the libcudart stand-ins");
            return;
        };
        let count = |runtime: &Runtime| {
            let mut count = -1;
            let code = unsafe { (runtime.get_device_count)(&mut count) };
            (code, count)
        };
        let chosen = Runtime::load(&[newer.clone(), older]).unwrap();
        assert_eq!(count(&chosen), (0, 1));
        // With nothing better, the too-new runtime stays: its error says what to upgrade.
        let alone = Runtime::load(&[newer]).unwrap();
        assert_eq!(count(&alone).0, CUDA_ERROR_INSUFFICIENT_DRIVER);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn missing_driver_names_every_candidate() {
        let candidates = [
            "/nonexistent/libcuda.so.1".to_string(),
            "/nonexistent/libcuda.so".to_string(),
        ];
        let load = Driver::load(&candidates);
        assert_eq!(loaded(&load).err(), Some(status::UNAVAILABLE));
        let message = last_error();
        assert!(candidates.iter().all(|c| message.contains(c.as_str())), "{message}");
        assert!(message.contains("NVIDIA driver"), "{message}");
    }

    #[test]
    fn device_count_is_a_count_or_a_reason() {
        // Whatever this machine has: a count, or an error status with its text.
        let count = cohort_cuda_device_count();
        if count < 0 {
            assert!(count == status::UNAVAILABLE || count == status::CUDA, "status {count}");
            assert!(!last_error().is_empty());
        }
    }

    #[test]
    fn null_and_out_of_range_arguments_are_invalid() {
        let null = std::ptr::null_mut();
        let mut word = 0u64;
        let mut byte = [0 as c_char; 8];
        unsafe {
            assert_eq!(cohort_cuda_device_name(0, null as *mut c_char, 64), status::INVALID);
            assert_eq!(cohort_cuda_device_name(0, byte.as_mut_ptr(), 0), status::INVALID);
            assert_eq!(
                cohort_cuda_device_name(-1, byte.as_mut_ptr(), byte.len()),
                status::INVALID
            );
            assert_eq!(cohort_cuda_device_uuid(0, null as *mut u8), status::INVALID);
            assert_eq!(cohort_cuda_device_total_memory(0, null as *mut u64), status::INVALID);
            assert_eq!(cohort_cuda_device_total_memory(-2, &mut word), status::INVALID);
            assert_eq!(cohort_cuda_memory_info(0, null as *mut u64, &mut word), status::INVALID);
            assert_eq!(cohort_cuda_memory_info(0, &mut word, null as *mut u64), status::INVALID);
            assert_eq!(cohort_cuda_malloc(16, null as *mut u64), status::INVALID);
            assert_eq!(cohort_cuda_malloc(0, &mut word), status::INVALID);
            assert_eq!(cohort_cuda_copy_to_device(0x1000, std::ptr::null(), 4), status::INVALID);
            assert_eq!(
                cohort_cuda_copy_to_device(0, byte.as_ptr() as *const u8, 4),
                status::INVALID
            );
            assert_eq!(cohort_cuda_copy_to_host(null as *mut u8, 0x1000, 4), status::INVALID);
            assert_eq!(
                cohort_cuda_copy_to_host(byte.as_mut_ptr() as *mut u8, 0, 4),
                status::INVALID
            );
            assert_eq!(cohort_cuda_copy_to_host(null as *mut u8, 0, 0), status::OK);
            assert_eq!(cohort_cuda_stream_create(null as *mut u64), status::INVALID);
        }
        assert_eq!(cohort_cuda_set_device(-1), status::INVALID);
        assert_eq!(cohort_cuda_stream_destroy(0), status::INVALID);
        assert!(last_error().contains("default stream"));
    }

    #[test]
    fn c_strings_are_truncated_and_terminated() {
        let mut out = [0x7f as c_char; 4];
        unsafe { write_c_string(b"Hopper", out.as_mut_ptr(), out.len()) };
        assert_eq!(out.map(|c| c as u8), *b"Hop\0");
        unsafe { write_c_string(b"", out.as_mut_ptr(), 1) };
        assert_eq!(out[0], 0);
    }
}
