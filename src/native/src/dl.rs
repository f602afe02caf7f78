//! `dlopen` and `dlsym`, declared here: glibc has them in libc itself.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

const RTLD_NOW: c_int = 2;
const RTLD_LOCAL: c_int = 0;

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

/// An open shared library; never closed (CUDA and NCCL do not survive being unloaded).
pub struct Library {
    handle: *mut c_void,
    pub path: String,
}

unsafe impl Send for Library {}
unsafe impl Sync for Library {}

fn last_dl_error() -> String {
    unsafe {
        let text = dlerror();
        if text.is_null() {
            "unknown dlopen error".to_string()
        } else {
            CStr::from_ptr(text).to_string_lossy().into_owned()
        }
    }
}

impl Library {
    pub fn open(path: &str) -> Result<Library, String> {
        let name = CString::new(path).map_err(|_| format!("bad library path {path:?}"))?;
        let handle = unsafe { dlopen(name.as_ptr(), RTLD_NOW | RTLD_LOCAL) };
        if handle.is_null() {
            Err(last_dl_error())
        } else {
            Ok(Library { handle, path: path.to_string() })
        }
    }

    /// The address of `symbol`, or why not.
    pub fn symbol(&self, symbol: &str) -> Result<*mut c_void, String> {
        let name = CString::new(symbol).map_err(|_| format!("bad symbol name {symbol:?}"))?;
        let address = unsafe { dlsym(self.handle, name.as_ptr()) };
        if address.is_null() {
            Err(format!("{} has no symbol {symbol}: {}", self.path, last_dl_error()))
        } else {
            Ok(address)
        }
    }
}

/// Look up `symbol` in `library` as a function of type `F` (a `extern "C" fn` pointer type).
///
/// # Safety
/// `F` must be the symbol's real C signature.
pub unsafe fn function<F: Copy>(library: &Library, symbol: &str) -> Result<F, String> {
    let address = library.symbol(symbol)?;
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    Ok(std::mem::transmute_copy::<*mut c_void, F>(&address))
}
