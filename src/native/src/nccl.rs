//! NCCL, opened with `dlopen` at first use from wherever it is installed: an
//! explicit path, LD_LIBRARY_PATH, the system's library paths, or the
//! `nvidia-nccl-cu*` wheel of a Python environment (where torch users have it).
//! Communicators and streams cross the ABI as `u64`.

use crate::cuda::{c_text, env, invalid, loaded, run, write_c_string};
use crate::dl::{self, Library};
use crate::error::{fail, status};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt::Arguments;
use std::path::Path;
use std::sync::OnceLock;

const SONAME: &str = "libnccl.so.2";
/// Where a Python wheel puts the library, under site-packages.
const WHEEL_PATH: &str = "nvidia/nccl/lib/libnccl.so.2";
const PYTHON_ROOTS: [&str; 3] = ["/usr/local/lib", "/usr/lib", "/opt/conda/lib"];

const NCCL_FLOAT32: c_int = 7;
const NCCL_BFLOAT16: c_int = 9;
const NCCL_SUM: c_int = 0;
const NCCL_AVG: c_int = 4;
/// NCCL_VERSION(2, 10, 0): the first with ncclAvg.
const AVG_SINCE: c_int = 21000;
/// NCCL_VERSION(2, 27, 0): the first with ncclCommShrink. The symbol alone is not
/// trusted: a pre-release or a vendor build may export it with other semantics.
const SHRINK_SINCE: c_int = 22700;
/// ncclCommShrink's flags (nccl.h): NCCL_SHRINK_DEFAULT shrinks a healthy parent;
/// NCCL_SHRINK_ABORT first ends the parent's pending work (after a peer's failure).
const SHRINK_DEFAULT: c_int = 0;
const SHRINK_ABORT: c_int = 1;

type NcclResult = c_int;
type Comm = *mut c_void;
type Stream = *mut c_void;

/// ncclUniqueId, which ncclCommInitRank takes by value.
#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId {
    internal: [u8; 128],
}

/// The environment the search reads (unset and empty are the same).
#[derive(Default)]
struct SearchEnv<'a> {
    nccl_lib: Option<&'a str>,
    ld_library_path: Option<&'a str>,
    virtual_env: Option<&'a str>,
    home: Option<&'a str>,
}

/// Every place to try, in order, without duplicates. `list` names the entries
/// of a directory (none when it cannot be read).
fn candidates(env: &SearchEnv, list: impl Fn(&Path) -> Vec<String>) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut add = |path: String| {
        if !found.contains(&path) {
            found.push(path);
        }
    };
    if let Some(path) = given(env.nccl_lib) {
        add(path.display().to_string());
    }
    for dir in env.ld_library_path.unwrap_or("").split(':').filter(|d| !d.is_empty()) {
        add(Path::new(dir).join(SONAME).display().to_string());
    }
    // A bare soname: the loader's own search (DT_RUNPATH, ld.so.cache, /lib, /usr/lib).
    add(SONAME.to_string());
    let roots = [
        given(env.virtual_env).map(|v| v.join("lib")),
        given(env.home).map(|h| h.join(".local/lib")),
    ]
    .into_iter()
    .flatten()
    .chain(PYTHON_ROOTS.iter().map(|root| Path::new(root).to_path_buf()));
    for root in roots {
        let mut pythons: Vec<String> = list(&root)
            .into_iter()
            .filter(|name| name.starts_with("python3"))
            .collect();
        pythons.sort();
        for python in pythons {
            for packages in ["site-packages", "dist-packages"] {
                add(root.join(&python).join(packages).join(WHEEL_PATH).display().to_string());
            }
        }
    }
    found
}

/// A variable's value as a path, if it has one.
fn given(value: Option<&str>) -> Option<&Path> {
    value.filter(|v| !v.is_empty()).map(Path::new)
}

/// The names in `dir` (none when it cannot be read).
fn list_dir(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// "2.23.4" for 22304; NCCL before 2.9 encoded versions as X*1000 + Y*100 + Z.
fn version_text(code: c_int) -> String {
    let (major, minor, patch) = if code >= 10000 {
        (code / 10000, code % 10000 / 100, code % 100)
    } else {
        (code / 1000, code % 1000 / 100, code % 100)
    };
    format!("{major}.{minor}.{patch}")
}

/// glibc's Dl_info, for dladdr.
#[repr(C)]
struct DlInfo {
    file: *const c_char,
    base: *mut c_void,
    symbol: *const c_char,
    address: *mut c_void,
}

extern "C" {
    fn dladdr(address: *const c_void, info: *mut DlInfo) -> c_int;
}

/// libnccl's functions.
struct Nccl {
    /// The file loaded (resolved through dladdr when it was found by soname).
    path: String,
    get_version: unsafe extern "C" fn(*mut c_int) -> NcclResult,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> NcclResult,
    comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> NcclResult,
    all_reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> NcclResult,
    comm_abort: unsafe extern "C" fn(Comm) -> NcclResult,
    comm_destroy: unsafe extern "C" fn(Comm) -> NcclResult,
    comm_get_async_error: unsafe extern "C" fn(Comm, *mut NcclResult) -> NcclResult,
    get_error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    /// NCCL 2.13 and later.
    get_last_error: Option<unsafe extern "C" fn(Comm) -> *const c_char>,
    /// ncclCommShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags):
    /// NCCL 2.27 and later; the config is passed as null (the child inherits the parent's).
    comm_shrink: Option<unsafe extern "C" fn(Comm, *mut c_int, c_int, *mut Comm, *mut c_void, c_int) -> NcclResult>,
}

impl Nccl {
    /// The first candidate that opens and has every function; otherwise why none did.
    fn load(candidates: &[String]) -> Result<Nccl, String> {
        let mut searched = Vec::new();
        for candidate in candidates {
            // A path that is not there needs no dlopen (nor its noise in the message).
            if candidate.contains('/') && !Path::new(candidate).exists() {
                searched.push(candidate.clone());
                continue;
            }
            match Library::open(candidate).and_then(|library| unsafe { Nccl::bind(&library) }) {
                Ok(nccl) => return Ok(nccl),
                Err(why) => searched.push(format!("{candidate} ({why})")),
            }
        }
        Err(format!(
            "NCCL not found; searched: {}; set COHORT_NCCL_LIB to libnccl.so.2's path",
            searched.join(", ")
        ))
    }

    unsafe fn bind(lib: &Library) -> Result<Nccl, String> {
        let get_version = lib.symbol("ncclGetVersion")?;
        let mut info = DlInfo {
            file: std::ptr::null(),
            base: std::ptr::null_mut(),
            symbol: std::ptr::null(),
            address: std::ptr::null_mut(),
        };
        let path = if dladdr(get_version, &mut info) != 0 && !info.file.is_null() {
            c_text(info.file)
        } else {
            lib.path.clone()
        };
        Ok(Nccl {
            path,
            get_version: dl::function(lib, "ncclGetVersion")?,
            get_unique_id: dl::function(lib, "ncclGetUniqueId")?,
            comm_init_rank: dl::function(lib, "ncclCommInitRank")?,
            all_reduce: dl::function(lib, "ncclAllReduce")?,
            comm_abort: dl::function(lib, "ncclCommAbort")?,
            comm_destroy: dl::function(lib, "ncclCommDestroy")?,
            comm_get_async_error: dl::function(lib, "ncclCommGetAsyncError")?,
            get_error_string: dl::function(lib, "ncclGetErrorString")?,
            get_last_error: dl::function(lib, "ncclGetLastError").ok(),
            comm_shrink: dl::function(lib, "ncclCommShrink").ok(),
        })
    }

    /// Ok, or status NCCL with the call, the ncclResult_t and NCCL's texts for it.
    fn check(&self, code: NcclResult, call: Arguments) -> Result<(), i32> {
        if code == 0 {
            return Ok(());
        }
        let mut message = format!(
            "{call} failed: ncclResult_t {code} ({})",
            c_text(unsafe { (self.get_error_string)(code) })
        );
        // Its argument is unused by NCCL; null keeps a destroyed communicator out of it.
        let last = self
            .get_last_error
            .map(|last| c_text(unsafe { last(std::ptr::null_mut()) }))
            .unwrap_or_default();
        if !last.is_empty() {
            message.push_str(&format!("; NCCL's last error: {last}"));
        }
        Err(fail(status::NCCL, message))
    }

    fn version(&self) -> Result<c_int, i32> {
        let mut version = 0;
        self.check(
            unsafe { (self.get_version)(&mut version) },
            format_args!("ncclGetVersion"),
        )?;
        Ok(version)
    }
}

/// Whether a library of `version` that `has_symbol` (ncclCommShrink resolved) can shrink.
fn shrink_usable(version: c_int, has_symbol: bool) -> bool {
    has_symbol && version >= SHRINK_SINCE
}

/// The NCCL ranks to exclude, checked: each a rank of the parent's world, none twice,
/// at least one, and at least one rank left.
fn exclusions(excluded: &[c_int], world_size: c_int) -> Result<Vec<c_int>, String> {
    if excluded.is_empty() {
        return Err("ncclCommShrink needs at least one rank to exclude".into());
    }
    let mut seen: Vec<c_int> = Vec::with_capacity(excluded.len());
    for &rank in excluded {
        if !(0..world_size).contains(&rank) {
            return Err(format!(
                "cannot exclude NCCL rank {rank}: the parent's world of {world_size} has ranks 0 to {}",
                world_size - 1
            ));
        }
        if seen.contains(&rank) {
            return Err(format!("NCCL rank {rank} is excluded twice"));
        }
        seen.push(rank);
    }
    if seen.len() as c_int >= world_size {
        return Err(format!("excluding {} rank(s) of {world_size} leaves nobody", seen.len()));
    }
    Ok(seen)
}

fn nccl() -> Result<&'static Nccl, i32> {
    static NCCL: OnceLock<Result<Nccl, String>> = OnceLock::new();
    loaded(NCCL.get_or_init(|| {
        let (nccl_lib, ld_library_path) = (env("COHORT_NCCL_LIB"), env("LD_LIBRARY_PATH"));
        let (virtual_env, home) = (env("VIRTUAL_ENV"), env("HOME"));
        let search = SearchEnv {
            nccl_lib: nccl_lib.as_deref(),
            ld_library_path: ld_library_path.as_deref(),
            virtual_env: virtual_env.as_deref(),
            home: home.as_deref(),
        };
        Nccl::load(&candidates(&search, list_dir))
    }))
}

fn communicator(comm: u64, call: &str) -> Result<Comm, i32> {
    if comm == 0 {
        return invalid(format!("{call} needs a communicator (got a null handle)"));
    }
    Ok(comm as Comm)
}

/// The path of the NCCL library in use (loading it if needed), NUL-terminated;
/// INVALID when it does not fit in `capacity` bytes (a cut path is no path).
#[no_mangle]
pub unsafe extern "C" fn cohort_nccl_library_path(out: *mut c_char, capacity: usize) -> i32 {
    run(|| {
        if out.is_null() || capacity == 0 {
            return invalid("cohort_nccl_library_path needs an output buffer");
        }
        let nccl = nccl()?;
        if nccl.path.len() >= capacity {
            return invalid(format!(
                "NCCL's path needs {} bytes, the buffer has {capacity}",
                nccl.path.len() + 1
            ));
        }
        unsafe { write_c_string(nccl.path.as_bytes(), out, capacity) };
        Ok(())
    })
}

/// NCCL's version code, e.g. 22304 for 2.23.4.
#[no_mangle]
pub unsafe extern "C" fn cohort_nccl_version(out: *mut i32) -> i32 {
    run(|| {
        if out.is_null() {
            return invalid("cohort_nccl_version needs an output pointer");
        }
        let version = nccl()?.version()?;
        unsafe { out.write_unaligned(version) };
        Ok(())
    })
}

/// A fresh ncclUniqueId: 128 bytes for the other ranks.
#[no_mangle]
pub unsafe extern "C" fn cohort_nccl_get_unique_id(out128: *mut u8) -> i32 {
    run(|| {
        if out128.is_null() {
            return invalid("cohort_nccl_get_unique_id needs a 128-byte output buffer");
        }
        let nccl = nccl()?;
        let mut id = UniqueId { internal: [0; 128] };
        nccl.check(
            unsafe { (nccl.get_unique_id)(&mut id) },
            format_args!("ncclGetUniqueId"),
        )?;
        unsafe { std::ptr::copy_nonoverlapping(id.internal.as_ptr(), out128, id.internal.len()) };
        Ok(())
    })
}

/// Join the communicator of `id128` as `rank` of `world_size`; blocks until
/// every rank has joined. Call it with the rank's device current (cohort_cuda_set_device).
#[no_mangle]
pub unsafe extern "C" fn cohort_nccl_comm_init_rank(
    out_comm: *mut u64,
    world_size: i32,
    id128: *const u8,
    rank: i32,
) -> i32 {
    run(|| {
        if out_comm.is_null() || id128.is_null() {
            return invalid("cohort_nccl_comm_init_rank needs an output pointer and a 128-byte unique id");
        }
        if world_size < 1 || !(0..world_size).contains(&rank) {
            return invalid(format!("rank {rank} is not a rank of a world of {world_size}"));
        }
        let nccl = nccl()?;
        let mut id = UniqueId { internal: [0; 128] };
        unsafe { std::ptr::copy_nonoverlapping(id128, id.internal.as_mut_ptr(), id.internal.len()) };
        let mut comm = std::ptr::null_mut();
        let code = unsafe { (nccl.comm_init_rank)(&mut comm, world_size, id, rank) };
        nccl.check(code, format_args!("ncclCommInitRank(rank {rank} of {world_size})"))?;
        unsafe { out_comm.write_unaligned(comm as u64) };
        Ok(())
    })
}

/// Enqueue an all-reduce of `count` elements on `stream` (0: the default stream).
/// dtype: 0 f32, 1 bf16. op: 0 sum, 1 average (NCCL 2.10 or later).
#[no_mangle]
pub extern "C" fn cohort_nccl_all_reduce(
    send: u64,
    recv: u64,
    count: u64,
    dtype: i32,
    op: i32,
    comm: u64,
    stream: u64,
) -> i32 {
    run(|| {
        let datatype = match dtype {
            0 => NCCL_FLOAT32,
            1 => NCCL_BFLOAT16,
            _ => return invalid(format!("dtype {dtype} is neither 0 (f32) nor 1 (bf16)")),
        };
        let reduction = match op {
            0 => NCCL_SUM,
            1 => NCCL_AVG,
            _ => return invalid(format!("op {op} is neither 0 (sum) nor 1 (average)")),
        };
        let comm = communicator(comm, "ncclAllReduce")?;
        if count > 0 && (send == 0 || recv == 0) {
            return invalid(format!(
                "ncclAllReduce of {count} elements needs send and receive buffers"
            ));
        }
        let nccl = nccl()?;
        if reduction == NCCL_AVG {
            let version = nccl.version()?;
            if version < AVG_SINCE {
                return invalid(format!(
                    "averaging needs NCCL 2.10 or later, {} is {}: upgrade NCCL, or sum and scale",
                    nccl.path,
                    version_text(version)
                ));
            }
        }
        let code = unsafe {
            (nccl.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                count as usize,
                datatype,
                reduction,
                comm,
                stream as Stream,
            )
        };
        nccl.check(code, format_args!("ncclAllReduce({count} elements)"))
    })
}

/// 1 into `*out` when the loaded NCCL can shrink a communicator (ncclCommShrink
/// resolved and version 2.27 or later), else 0.
#[no_mangle]
pub unsafe extern "C" fn cohort_nccl_shrink_support(out: *mut i32) -> i32 {
    run(|| {
        if out.is_null() {
            return invalid("cohort_nccl_shrink_support needs an output pointer");
        }
        let nccl = nccl()?;
        let usable = shrink_usable(nccl.version()?, nccl.comm_shrink.is_some());
        unsafe { out.write_unaligned(usable as i32) };
        Ok(())
    })
}

/// ncclCommShrink: the parent's survivors (every one calls it, the excluded
/// ranks do not) get a child without the `count` NCCL ranks at `exclude` (of
/// the parent's `parent_world_size`, checked here: NCCL's own refusal says less); the
/// survivors keep their order. flags: 0 NCCL_SHRINK_DEFAULT, 1
/// NCCL_SHRINK_ABORT (the parent saw an error). The parent is left to the
/// caller to release (abort or destroy: which depends on the version).
#[no_mangle]
pub unsafe extern "C" fn cohort_nccl_comm_shrink(
    out_comm: *mut u64,
    parent: u64,
    parent_world_size: i32,
    exclude: *const i32,
    count: i32,
    flags: i32,
) -> i32 {
    run(|| {
        if out_comm.is_null() {
            return invalid("cohort_nccl_comm_shrink needs an output pointer");
        }
        let parent = communicator(parent, "ncclCommShrink")?;
        if count < 1 || exclude.is_null() {
            return invalid(format!("ncclCommShrink needs a list of ranks to exclude (got {count} and a {} list)", if exclude.is_null() { "null" } else { "non-null" }));
        }
        let flag = match flags {
            0 => SHRINK_DEFAULT,
            1 => SHRINK_ABORT,
            _ => return invalid(format!("shrink flags {flags} are neither 0 (NCCL_SHRINK_DEFAULT) nor 1 (NCCL_SHRINK_ABORT)")),
        };
        let listed = unsafe { std::slice::from_raw_parts(exclude, count as usize) };
        let mut excluded = exclusions(listed, parent_world_size).or_else(|why| invalid(why))?;
        let nccl = nccl()?;
        let version = nccl.version()?;
        let shrink = match nccl.comm_shrink {
            Some(shrink) if shrink_usable(version, true) => shrink,
            _ => {
                return invalid(format!(
                    "{} is NCCL {}, which cannot shrink a communicator (ncclCommShrink needs 2.27 or later): build a new one",
                    nccl.path,
                    version_text(version)
                ))
            }
        };
        let mut child = std::ptr::null_mut();
        let code = unsafe { shrink(parent, excluded.as_mut_ptr(), excluded.len() as c_int, &mut child, std::ptr::null_mut(), flag) };
        nccl.check(code, format_args!("ncclCommShrink(excluding {excluded:?}, flags {flags})"))?;
        unsafe { out_comm.write_unaligned(child as u64) };
        Ok(())
    })
}

/// End a communicator at once, abandoning its pending work (after a peer died).
#[no_mangle]
pub extern "C" fn cohort_nccl_comm_abort(comm: u64) -> i32 {
    run(|| {
        let comm = communicator(comm, "ncclCommAbort")?;
        let nccl = nccl()?;
        nccl.check(unsafe { (nccl.comm_abort)(comm) }, format_args!("ncclCommAbort"))
    })
}

/// Free a communicator once its work is done.
#[no_mangle]
pub extern "C" fn cohort_nccl_comm_destroy(comm: u64) -> i32 {
    run(|| {
        let comm = communicator(comm, "ncclCommDestroy")?;
        let nccl = nccl()?;
        nccl.check(unsafe { (nccl.comm_destroy)(comm) }, format_args!("ncclCommDestroy"))
    })
}

/// The communicator's asynchronous error into `*out_code` (0 ncclSuccess, 7
/// ncclInProgress, …); the status says whether the query itself worked.
#[no_mangle]
pub unsafe extern "C" fn cohort_nccl_comm_get_async_error(comm: u64, out_code: *mut i32) -> i32 {
    run(|| {
        if out_code.is_null() {
            return invalid("cohort_nccl_comm_get_async_error needs an output pointer");
        }
        let comm = communicator(comm, "ncclCommGetAsyncError")?;
        let nccl = nccl()?;
        let mut async_error = 0;
        nccl.check(
            unsafe { (nccl.comm_get_async_error)(comm, &mut async_error) },
            format_args!("ncclCommGetAsyncError"),
        )?;
        unsafe { out_code.write_unaligned(async_error) };
        Ok(())
    })
}

/// NCCL's text for an ncclResult_t, NUL-terminated and truncated to `capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn cohort_nccl_error_string(code: i32, out: *mut c_char, capacity: usize) -> i32 {
    run(|| {
        if out.is_null() || capacity == 0 {
            return invalid("cohort_nccl_error_string needs an output buffer");
        }
        let nccl = nccl()?;
        let text = unsafe { (nccl.get_error_string)(code) };
        let text = if text.is_null() {
            &b""[..]
        } else {
            unsafe { CStr::from_ptr(text) }.to_bytes()
        };
        unsafe { write_c_string(text, out, capacity) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::tests::last_error;

    /// A fake file system: the python3* directories under a few roots.
    fn fake_lister(dir: &Path) -> Vec<String> {
        let names: &[&str] = match dir.to_str().unwrap() {
            "/venv/lib" => &["python3.11"],
            "/home/me/.local/lib" => &["python3.12", "python3.10", "libfoo.so"],
            "/usr/lib" => &["python3", "python3.12", "python2.7", "x86_64-linux-gnu"],
            _ => &[],
        };
        names.iter().map(|n| n.to_string()).collect()
    }

    fn wheel(site: &str) -> String {
        format!("{site}/nvidia/nccl/lib/libnccl.so.2")
    }

    #[test]
    fn candidates_follow_the_search_order() {
        let env = SearchEnv {
            nccl_lib: Some("/opt/nccl/lib/libnccl.so.2"),
            ld_library_path: Some("/usr/local/cuda/lib64::/opt/nccl/lib/"),
            virtual_env: Some("/venv"),
            home: Some("/home/me"),
        };
        let expected = [
            "/opt/nccl/lib/libnccl.so.2".to_string(),
            "/usr/local/cuda/lib64/libnccl.so.2".into(),
            // "/opt/nccl/lib/" joins to the override's path: tried once.
            "libnccl.so.2".into(),
            wheel("/venv/lib/python3.11/site-packages"),
            wheel("/venv/lib/python3.11/dist-packages"),
            wheel("/home/me/.local/lib/python3.10/site-packages"),
            wheel("/home/me/.local/lib/python3.10/dist-packages"),
            wheel("/home/me/.local/lib/python3.12/site-packages"),
            wheel("/home/me/.local/lib/python3.12/dist-packages"),
            wheel("/usr/lib/python3/site-packages"),
            wheel("/usr/lib/python3/dist-packages"),
            wheel("/usr/lib/python3.12/site-packages"),
            wheel("/usr/lib/python3.12/dist-packages"),
        ];
        assert_eq!(candidates(&env, fake_lister), expected);
    }

    #[test]
    fn unset_and_empty_variables_are_skipped() {
        let bare = candidates(&SearchEnv::default(), |_| Vec::new());
        assert_eq!(bare, ["libnccl.so.2"]);
        let empty = SearchEnv {
            nccl_lib: Some(""),
            ld_library_path: Some(""),
            virtual_env: Some(""),
            home: Some(""),
        };
        assert_eq!(candidates(&empty, |_| Vec::new()), ["libnccl.so.2"]);
        // Without VIRTUAL_ENV and HOME only the fixed roots are scanned.
        let scanned = std::cell::RefCell::new(Vec::new());
        candidates(&SearchEnv::default(), |dir| {
            scanned.borrow_mut().push(dir.display().to_string());
            Vec::new()
        });
        assert_eq!(scanned.into_inner(), PYTHON_ROOTS);
    }

    #[test]
    fn the_real_lister_reads_a_directory() {
        let venv = std::env::temp_dir().join(format!("cohort-nccl-venv-{}", std::process::id()));
        std::fs::create_dir_all(
            venv.join("lib/python3.13/site-packages")
                .join(WHEEL_PATH)
                .parent()
                .unwrap(),
        )
        .unwrap();
        std::fs::create_dir_all(venv.join("lib/perl5")).unwrap();
        let found = candidates(
            &SearchEnv {
                virtual_env: venv.to_str(),
                ..Default::default()
            },
            list_dir,
        );
        let site = venv
            .join("lib/python3.13/site-packages")
            .join(WHEEL_PATH)
            .display()
            .to_string();
        assert_eq!(found[1], site, "{found:?}");
        assert!(!found.iter().any(|c| c.contains("perl5")));
        assert!(list_dir(&venv.join("missing")).is_empty());
        std::fs::remove_dir_all(&venv).unwrap();
    }

    #[test]
    fn not_found_lists_every_candidate_and_the_fix() {
        let searched = [
            "/nonexistent/a/libnccl.so.2".to_string(),
            "/nonexistent/b/libnccl.so.2".to_string(),
        ];
        let load = Nccl::load(&searched);
        assert_eq!(loaded(&load).err(), Some(status::UNAVAILABLE));
        assert_eq!(
            last_error(),
            "NCCL not found; searched: /nonexistent/a/libnccl.so.2, /nonexistent/b/libnccl.so.2; \
             set COHORT_NCCL_LIB to libnccl.so.2's path"
        );
    }

    #[test]
    fn a_file_that_is_not_nccl_says_why() {
        // An existing file dlopen refuses: its reason is kept.
        let path = std::env::temp_dir().join(format!("cohort-not-nccl-{}.so", std::process::id()));
        std::fs::write(&path, b"not an ELF file").unwrap();
        let candidate = path.display().to_string();
        let message = Nccl::load(std::slice::from_ref(&candidate)).err().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(
            message.starts_with(&format!("NCCL not found; searched: {candidate} (")),
            "{message}"
        );
    }

    #[test]
    fn versions_read_both_encodings() {
        assert_eq!(version_text(22304), "2.23.4");
        assert_eq!(version_text(AVG_SINCE), "2.10.0");
        assert_eq!(version_text(2804), "2.8.4");
    }

    #[test]
    fn shrink_needs_the_symbol_and_2_27() {
        assert!(!shrink_usable(22605, true));
        assert!(shrink_usable(22700, true));
        assert!(shrink_usable(23102, true));
        assert!(!shrink_usable(22903, false));
    }

    #[test]
    fn exclusions_are_checked() {
        assert_eq!(exclusions(&[3, 1], 4), Ok(vec![3, 1]));
        assert_eq!(exclusions(&[], 4), Err("ncclCommShrink needs at least one rank to exclude".to_string()));
        assert_eq!(
            exclusions(&[4], 4),
            Err("cannot exclude NCCL rank 4: the parent's world of 4 has ranks 0 to 3".to_string())
        );
        assert_eq!(
            exclusions(&[-1], 4),
            Err("cannot exclude NCCL rank -1: the parent's world of 4 has ranks 0 to 3".to_string())
        );
        assert_eq!(exclusions(&[1, 1], 4), Err("NCCL rank 1 is excluded twice".to_string()));
        assert_eq!(exclusions(&[0, 1], 2), Err("excluding 2 rank(s) of 2 leaves nobody".to_string()));
    }

    #[test]
    fn unique_id_is_passed_as_128_bytes() {
        assert_eq!(std::mem::size_of::<UniqueId>(), 128);
    }

    #[test]
    fn bad_arguments_are_invalid_before_nccl_is_loaded() {
        let null = std::ptr::null_mut();
        let id = [0u8; 128];
        let mut out = 0u64;
        let mut code = 0i32;
        unsafe {
            assert_eq!(cohort_nccl_library_path(null as *mut c_char, 64), status::INVALID);
            assert_eq!(cohort_nccl_version(null as *mut i32), status::INVALID);
            assert_eq!(cohort_nccl_get_unique_id(null as *mut u8), status::INVALID);
            assert_eq!(
                cohort_nccl_comm_init_rank(null as *mut u64, 2, id.as_ptr(), 0),
                status::INVALID
            );
            assert_eq!(
                cohort_nccl_comm_init_rank(&mut out, 2, std::ptr::null(), 0),
                status::INVALID
            );
            assert_eq!(cohort_nccl_comm_init_rank(&mut out, 2, id.as_ptr(), 2), status::INVALID);
            assert_eq!(cohort_nccl_comm_init_rank(&mut out, 0, id.as_ptr(), 0), status::INVALID);
            assert_eq!(
                cohort_nccl_comm_init_rank(&mut out, 2, id.as_ptr(), -1),
                status::INVALID
            );
            assert_eq!(
                cohort_nccl_comm_get_async_error(0x1000, null as *mut i32),
                status::INVALID
            );
            assert_eq!(cohort_nccl_comm_get_async_error(0, &mut code), status::INVALID);
            assert_eq!(cohort_nccl_error_string(1, null as *mut c_char, 64), status::INVALID);
        }
        assert_eq!(
            cohort_nccl_all_reduce(0x1000, 0x1000, 4, 2, 0, 0x2000, 0),
            status::INVALID
        );
        assert!(last_error().contains("dtype 2"));
        assert_eq!(
            cohort_nccl_all_reduce(0x1000, 0x1000, 4, 0, 2, 0x2000, 0),
            status::INVALID
        );
        assert!(last_error().contains("op 2"));
        assert_eq!(cohort_nccl_all_reduce(0x1000, 0x1000, 4, 0, 0, 0, 0), status::INVALID);
        assert_eq!(cohort_nccl_all_reduce(0, 0x1000, 4, 1, 1, 0x2000, 0), status::INVALID);
        unsafe {
            let one = [1i32];
            assert_eq!(cohort_nccl_shrink_support(null as *mut i32), status::INVALID);
            assert_eq!(cohort_nccl_comm_shrink(null as *mut u64, 0x2000, 3, one.as_ptr(), 1, 0), status::INVALID);
            assert_eq!(cohort_nccl_comm_shrink(&mut out, 0, 3, one.as_ptr(), 1, 0), status::INVALID);
            assert_eq!(cohort_nccl_comm_shrink(&mut out, 0x2000, 3, std::ptr::null(), 1, 0), status::INVALID);
            assert_eq!(cohort_nccl_comm_shrink(&mut out, 0x2000, 3, one.as_ptr(), 0, 0), status::INVALID);
            assert_eq!(cohort_nccl_comm_shrink(&mut out, 0x2000, 3, one.as_ptr(), 1, 2), status::INVALID);
            assert!(last_error().contains("shrink flags 2"));
            let twice = [1i32, 1];
            assert_eq!(cohort_nccl_comm_shrink(&mut out, 0x2000, 3, twice.as_ptr(), 2, 1), status::INVALID);
            assert_eq!(last_error(), "NCCL rank 1 is excluded twice");
            assert_eq!(cohort_nccl_comm_shrink(&mut out, 0x2000, 1, one.as_ptr(), 1, 1), status::INVALID);
            assert_eq!(last_error(), "cannot exclude NCCL rank 1: the parent's world of 1 has ranks 0 to 0");
        }
        assert_eq!(cohort_nccl_comm_abort(0), status::INVALID);
        assert_eq!(cohort_nccl_comm_destroy(0), status::INVALID);
    }
}
