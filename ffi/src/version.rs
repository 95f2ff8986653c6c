//! `vfnvme_version` and `vfnvme_version_info`: the library's version, the crate's version
//! (`CARGO_PKG_VERSION`) at build time.

use crate::error::guard;
use std::ffi::{c_char, CStr};

/// The version string, NUL-terminated (checked at compile time).
const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("CARGO_PKG_VERSION contains a NUL byte"),
    };

/// A decimal version component, parsed at compile time.
const fn number(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut n: u32 = 0;
    let mut i = 0;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "version component is not a number");
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}

/// Major, minor and patch version.
const PARTS: [u32; 3] = [
    number(env!("CARGO_PKG_VERSION_MAJOR")),
    number(env!("CARGO_PKG_VERSION_MINOR")),
    number(env!("CARGO_PKG_VERSION_PATCH")),
];

/// Returns the version of the library, e.g. "0.1.0", as a static NUL-terminated string. Never
/// NULL, never fails.
///
/// Thread safety: thread-safe.
#[no_mangle]
pub extern "C" fn vfnvme_version() -> *const c_char {
    let mut version = c"".as_ptr();
    guard("vfnvme_version", || {
        version = VERSION.as_ptr();
        Ok(0)
    });
    version
}

/// Stores the major, minor and patch numbers of the library's version in `*major`, `*minor`
/// and `*patch`; any of them may be NULL (not stored). Returns VFNVME_OK.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Each pointer is NULL or valid for writing a uint32_t.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_version_info(
    major: *mut u32,
    minor: *mut u32,
    patch: *mut u32,
) -> i32 {
    guard("vfnvme_version_info", || {
        for (p, v) in [major, minor, patch].into_iter().zip(PARTS) {
            // SAFETY: NULL (skipped) or valid for writing a u32 (header contract).
            if let Some(p) = unsafe { p.as_mut() } {
                *p = v;
            }
        }
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_string_and_numbers_agree_with_cargo() {
        // SAFETY: a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(vfnvme_version()) }
            .to_str()
            .unwrap();
        assert_eq!(s, env!("CARGO_PKG_VERSION"));
        let (mut a, mut b, mut c) = (u32::MAX, u32::MAX, u32::MAX);
        // SAFETY: valid u32 slots.
        assert_eq!(unsafe { vfnvme_version_info(&mut a, &mut b, &mut c) }, 0);
        assert_eq!(format!("{a}.{b}.{c}"), s.split(['-', '+']).next().unwrap());
        // SAFETY: NULL is allowed for each.
        let rc = unsafe { vfnvme_version_info(std::ptr::null_mut(), &mut b, std::ptr::null_mut()) };
        assert_eq!(rc, 0);
    }
}
