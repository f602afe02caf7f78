//! GPU memory and utilisation through NVML (libnvidia-ml, which comes with the
//! driver), opened with `dlopen` at first use.
//!
//! NVML rather than `cudaMemGetInfo`: the runtime needs a context on the
//! device, which takes hundreds of MiB there and would make the agent that
//! samples a GPU user itself; NVML reads the driver's counters without one.
//! Indices are NVML's, in PCI bus order: what a rank started with
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID` and `CUDA_VISIBLE_DEVICES=<index>` runs on.

use crate::cuda::{c_text, invalid, loaded, open_first, run};
use crate::dl;
use crate::error::{fail, status};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::fmt::Arguments;
use std::sync::OnceLock;

const SONAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];
const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
/// Written as the utilisation of a device that keeps none (a MIG instance, some vGPUs).
pub const UTILIZATION_UNSUPPORTED: u32 = u32::MAX;

type Return = c_int;
type Device = *mut c_void;

/// nvmlMemory_t (bytes).
#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// nvmlUtilization_t (percent of the last sample period, 1/6 s to 1 s depending on the device).
#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

struct Nvml {
    handle_by_index: unsafe extern "C" fn(c_uint, *mut Device) -> Return,
    memory_info: unsafe extern "C" fn(Device, *mut Memory) -> Return,
    utilization_rates: unsafe extern "C" fn(Device, *mut Utilization) -> Return,
    error_string: unsafe extern "C" fn(Return) -> *const c_char,
}

impl Nvml {
    /// Open the first candidate and initialise NVML. It is never shut down: the
    /// library stays loaded for the process anyway, and a library that opens but
    /// cannot initialise (no driver loaded) counts as absent, not as an error.
    fn load(candidates: &[String]) -> Result<Nvml, String> {
        let lib = open_first(
            "NVML (libnvidia-ml)",
            candidates,
            "it comes with the NVIDIA driver: install the driver, or add the directory of \
             libnvidia-ml.so.1 to LD_LIBRARY_PATH",
        )?;
        let nvml = unsafe {
            let init: unsafe extern "C" fn() -> Return = dl::function(&lib, "nvmlInit_v2")?;
            let nvml = Nvml {
                handle_by_index: dl::function(&lib, "nvmlDeviceGetHandleByIndex_v2")?,
                memory_info: dl::function(&lib, "nvmlDeviceGetMemoryInfo")?,
                utilization_rates: dl::function(&lib, "nvmlDeviceGetUtilizationRates")?,
                error_string: dl::function(&lib, "nvmlErrorString")?,
            };
            let code = init();
            if code != 0 {
                return Err(format!(
                    "{}: nvmlInit_v2 failed: {} (NVML error {code}); is the NVIDIA driver loaded?",
                    lib.path,
                    nvml.text(code)
                ));
            }
            nvml
        };
        Ok(nvml)
    }

    fn text(&self, code: Return) -> String {
        c_text(unsafe { (self.error_string)(code) })
    }

    fn check(&self, code: Return, call: Arguments) -> Result<(), i32> {
        if code == 0 {
            Ok(())
        } else {
            Err(fail(
                status::NVML,
                format!("{call} failed: {} (NVML error {code})", self.text(code)),
            ))
        }
    }
}

fn nvml() -> Result<&'static Nvml, i32> {
    static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();
    loaded(NVML.get_or_init(|| Nvml::load(&SONAMES.map(String::from))))
}

/// Memory used and total (bytes) and utilisation (percent, or `UTILIZATION_UNSUPPORTED`) of
/// `device`. `UNAVAILABLE` when NVML is not there (no library, or no driver behind it); `NVML`
/// when it refuses (an index out of range, a lost GPU). Creates no CUDA context.
#[no_mangle]
pub unsafe extern "C" fn cohort_gpu_sample(
    device: i32,
    out_memory_used: *mut u64,
    out_memory_total: *mut u64,
    out_utilization_percent: *mut u32,
) -> i32 {
    run(|| {
        if out_memory_used.is_null()
            || out_memory_total.is_null()
            || out_utilization_percent.is_null()
        {
            return invalid("cohort_gpu_sample needs three output pointers");
        }
        if device < 0 {
            return invalid(format!("device {device} is not a device index"));
        }
        let nvml = nvml()?;
        let mut handle: Device = std::ptr::null_mut();
        let code = unsafe { (nvml.handle_by_index)(device as c_uint, &mut handle) };
        nvml.check(
            code,
            format_args!("nvmlDeviceGetHandleByIndex(device {device})"),
        )?;
        let mut memory = Memory::default();
        let code = unsafe { (nvml.memory_info)(handle, &mut memory) };
        nvml.check(
            code,
            format_args!("nvmlDeviceGetMemoryInfo(device {device})"),
        )?;
        let mut utilization = Utilization::default();
        let percent = match unsafe { (nvml.utilization_rates)(handle, &mut utilization) } {
            NVML_ERROR_NOT_SUPPORTED => UTILIZATION_UNSUPPORTED,
            code => {
                nvml.check(
                    code,
                    format_args!("nvmlDeviceGetUtilizationRates(device {device})"),
                )?;
                utilization.gpu
            }
        };
        unsafe {
            out_memory_used.write_unaligned(memory.used);
            out_memory_total.write_unaligned(memory.total);
            out_utilization_percent.write_unaligned(percent);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::tests::last_error;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The C stand-in built into a fresh directory, or None without cc.
    fn stand_in(tag: &str) -> Option<PathBuf> {
        let source = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../test/fixtures/fake-gpu/nvml.c"
        );
        let dir = std::env::temp_dir().join(format!("cohort-nvml-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let out = dir.join("libnvidia-ml.so.1");
        let built = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&out)
            .arg(source)
            .status();
        built.ok().filter(|done| done.success())?;
        Some(out)
    }

    fn path_text(path: &Path) -> String {
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn missing_nvml_is_unavailable_and_names_the_driver() {
        let candidates = ["/nonexistent/libnvidia-ml.so.1".to_string()];
        let load = Nvml::load(&candidates);
        assert_eq!(loaded(&load).err(), Some(status::UNAVAILABLE));
        let message = last_error();
        assert!(message.contains(&candidates[0]), "{message}");
        assert!(message.contains("NVIDIA driver"), "{message}");
    }

    // The stand-in's environment settings (a failing init, no utilisation) are
    // tested from Bun, in processes of their own: setenv is not thread-safe.
    #[test]
    fn the_stand_in_answers_through_the_bound_functions() {
        let Some(path) = stand_in("calls") else {
            eprintln!("skipping: no C compiler (cc) for the NVML stand-in");
            return;
        };
        let nvml = Nvml::load(&[path_text(&path)]).unwrap();
        let sample = |device: c_uint| -> Result<(u64, u64, u32), i32> {
            let mut handle = std::ptr::null_mut();
            nvml.check(
                unsafe { (nvml.handle_by_index)(device, &mut handle) },
                format_args!("handle {device}"),
            )?;
            let (mut memory, mut utilization) = (Memory::default(), Utilization::default());
            nvml.check(
                unsafe { (nvml.memory_info)(handle, &mut memory) },
                format_args!("memory"),
            )?;
            nvml.check(
                unsafe { (nvml.utilization_rates)(handle, &mut utilization) },
                format_args!("utilization"),
            )?;
            Ok((memory.used, memory.total, utilization.gpu))
        };
        assert_eq!(sample(1), Ok((2024 << 20, 80 << 30, 41)));
        assert_eq!(sample(2), Err(status::NVML));
        let message = last_error();
        assert!(
            message.contains("handle 2 failed: Invalid Argument (NVML error 2)"),
            "{message}"
        );
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    #[test]
    fn null_outputs_and_negative_devices_are_invalid() {
        let (mut used, mut total, mut percent) = (0u64, 0u64, 0u32);
        unsafe {
            assert_eq!(
                cohort_gpu_sample(0, std::ptr::null_mut(), &mut total, &mut percent),
                status::INVALID
            );
            assert_eq!(
                cohort_gpu_sample(0, &mut used, std::ptr::null_mut(), &mut percent),
                status::INVALID
            );
            assert_eq!(
                cohort_gpu_sample(0, &mut used, &mut total, std::ptr::null_mut()),
                status::INVALID
            );
            assert_eq!(
                cohort_gpu_sample(-1, &mut used, &mut total, &mut percent),
                status::INVALID
            );
        }
        assert!(last_error().contains("device -1"));
    }
}
