//! Options structs that can grow without breaking callers.
//!
//! Every options struct of the ABI begins with `uint32_t size`, which the caller sets to
//! `sizeof(struct ...)` of the header it was compiled against. [`read`] copies only the first
//! `size` bytes of the caller's struct over the defaults, so a library newer than the caller
//! fills the fields the caller does not know with their defaults; a caller newer than the
//! library is accepted as long as every byte the library does not know is zero (an option it
//! cannot honour is refused, never ignored).
//!
//! Growing a struct: append fields after the end of the previous version's struct (at an offset
//! not below its `sizeof`; add explicit padding fields if needed so that a new field does not
//! land in the old tail padding), and never change [`GrowingOpts::FIRST_END`].

use crate::error::{FfiError, FfiResult, Status};
use std::mem::size_of;

/// Largest `size` accepted: a larger value is not a struct size but an unset field.
const MAX_SIZE: u32 = 4096;

/// An options struct of the ABI that begins with `uint32_t size`.
///
/// # Safety
/// The implementing type is `#[repr(C)]`, its first field is `size: u32` (offset 0), every
/// field is an integer or a `bool`, and `Default` sets `size` to `size_of::<Self>()`.
pub(crate) unsafe trait GrowingOpts: Copy + Default {
    /// The C name of the struct, for messages (`struct vfnvme_qpair_opts`).
    const C_NAME: &'static str;
    /// The end of the last field of the struct's first version: the smallest `size` accepted.
    const FIRST_END: usize;
}

/// Implements [`GrowingOpts`] and a `Default` whose `size` is the struct's size (the other
/// fields zero, as a C caller's `= { .size = sizeof(...) }` leaves them).
macro_rules! growing_opts {
    ($t:ty, $c_name:literal, first_last_field: $last:ident: $last_ty:ty) => {
        const _: () = assert!(::std::mem::offset_of!($t, size) == 0);
        // SAFETY: $t is #[repr(C)] with `size: u32` first and integer or bool fields only (the
        // assertion above checks the offset; the struct's definition the rest); its Default
        // below sets `size` to its size.
        unsafe impl $crate::opts::GrowingOpts for $t {
            const C_NAME: &'static str = $c_name;
            const FIRST_END: usize =
                ::std::mem::offset_of!($t, $last) + ::std::mem::size_of::<$last_ty>();
        }
        impl Default for $t {
            fn default() -> Self {
                // SAFETY: every field of $t is an integer or a bool (GrowingOpts' contract), for
                // which all-zero bytes are a valid value.
                let mut o: Self = unsafe { ::std::mem::zeroed() };
                o.size = ::std::mem::size_of::<$t>() as u32;
                o
            }
        }
    };
}
pub(crate) use growing_opts;

/// The options at `p`: the defaults (`T::default()`) for NULL; otherwise the caller's first
/// `size` bytes over the defaults. Refuses (VFNVME_ERR_INVALID_ARGUMENT) a `size` of 0, below
/// the first version's struct or implausibly large, and (VFNVME_ERR_UNSUPPORTED) a struct
/// larger than this library's with a non-zero byte beyond it.
///
/// # Safety
/// `p` is NULL or points to a `T` whose first `size` bytes are readable and, up to the size of
/// `T`, initialised as the header's struct (the header contract of every options argument).
pub(crate) unsafe fn read<T: GrowingOpts>(p: *const T, arg: &str) -> FfiResult<T> {
    if p.is_null() {
        return Ok(T::default());
    }
    let ours = size_of::<T>();
    // SAFETY: `p` is non-NULL and points to a struct that begins with `uint32_t size` (header
    // contract; `T` is #[repr(C)] with `size` first, so the pointer is aligned for u32).
    let size = unsafe { p.cast::<u32>().read() };
    if size == 0 || (size as usize) < T::FIRST_END || size > MAX_SIZE {
        return Err(bad_size::<T>(size, arg));
    }
    let size = size as usize;
    if size > ours {
        // SAFETY: the caller's struct has `size` readable bytes (header contract).
        let tail = unsafe { std::slice::from_raw_parts(p.cast::<u8>().add(ours), size - ours) };
        if tail.iter().any(|&b| b != 0) {
            return Err(newer_fields::<T>(size, arg));
        }
    }
    let mut out = T::default();
    // SAFETY: the source has at least min(size, ours) readable, initialised bytes (above);
    // `out` is a T of `ours` bytes; they do not overlap. The bytes copied are the fields (and
    // padding) of the caller's version of the struct, which has the same layout for them, and
    // its integers and bools are valid values of those types (the header contract).
    unsafe {
        std::ptr::copy_nonoverlapping(
            p.cast::<u8>(),
            (&mut out as *mut T).cast::<u8>(),
            size.min(ours),
        )
    };
    Ok(out)
}

/// The error for a `size` that is not the size of any version of the struct.
#[cold]
fn bad_size<T: GrowingOpts>(size: u32, arg: &str) -> FfiError {
    let name = T::C_NAME;
    let set = format!(
        "set {arg}->size = sizeof({name}) ({} in this library)",
        size_of::<T>()
    );
    let what = if size == 0 {
        format!("{arg}->size is 0")
    } else {
        format!(
            "{arg}->size is {size}, which is not the size of any version of {name} (at least {})",
            T::FIRST_END
        )
    };
    FfiError::new(
        Status::VfnvmeErrInvalidArgument,
        format!("{what}: {set}, or pass NULL for the defaults"),
    )
}

/// The error for a caller's struct that sets fields this library does not know.
#[cold]
fn newer_fields<T: GrowingOpts>(size: usize, arg: &str) -> FfiError {
    FfiError::new(
        Status::VfnvmeErrUnsupported,
        format!(
            "{arg} is a {size}-byte {} that sets fields this libvfnvme {} does not know (its \
             struct has {} bytes): use a libvfnvme at least as new as the header the program \
             was built with",
            T::C_NAME,
            env!("CARGO_PKG_VERSION"),
            size_of::<T>()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::QpairOpts;

    /// A struct of two versions: the library's (`Big`) and an older caller's (`Small`).
    #[repr(C)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Big {
        size: u32,
        a: u32,
        b: u32,
    }
    growing_opts!(Big, "struct big", first_last_field: a: u32);

    #[repr(C)]
    struct Small {
        size: u32,
        a: u32,
    }

    /// A newer caller's version of `Big`.
    #[repr(C)]
    struct Newer {
        big: Big,
        c: u32,
    }

    #[test]
    fn null_gives_the_defaults() {
        // SAFETY: NULL is allowed.
        let o = unsafe { read::<Big>(std::ptr::null(), "opts") }.unwrap();
        assert_eq!(o, Big::default());
        assert_eq!(o.size as usize, size_of::<Big>());
    }

    #[test]
    fn fields_beyond_size_keep_their_defaults() {
        let s = Small { size: 8, a: 7 };
        // SAFETY: `s` has `size` (8) readable bytes.
        let o = unsafe { read::<Big>((&s as *const Small).cast(), "opts") }.unwrap();
        assert_eq!((o.a, o.b), (7, 0));
        let full = Big {
            size: 12,
            a: 1,
            b: 2,
        };
        // SAFETY: a whole Big.
        let o = unsafe { read::<Big>(&full, "opts") }.unwrap();
        assert_eq!(o, full);
    }

    #[test]
    fn zero_and_short_sizes_are_refused_with_what_to_set() {
        for size in [0, 4, 7, 4097] {
            let s = Small { size, a: 7 };
            // SAFETY: only the first 4 bytes are read before the refusal.
            let e = unsafe { read::<Big>((&s as *const Small).cast(), "opts") }.unwrap_err();
            assert_eq!(e.status, Status::VfnvmeErrInvalidArgument, "size {size}");
            assert!(
                e.message.contains("opts->size = sizeof(struct big) (12"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn a_newer_caller_is_accepted_only_without_unknown_settings() {
        let mut n = Newer {
            big: Big {
                size: 16,
                a: 1,
                b: 2,
            },
            c: 0,
        };
        // SAFETY: `n` has 16 readable bytes.
        let o = unsafe { read::<Big>((&n as *const Newer).cast(), "opts") }.unwrap();
        assert_eq!((o.a, o.b), (1, 2));
        n.c = 5;
        // SAFETY: as above.
        let e = unsafe { read::<Big>((&n as *const Newer).cast(), "opts") }.unwrap_err();
        assert_eq!(e.status, Status::VfnvmeErrUnsupported);
        assert!(e.message.contains("16-byte struct big"), "{}", e.message);
    }

    #[test]
    fn the_abi_structs_accept_their_own_size() {
        let q = QpairOpts::default();
        assert_eq!(q.size as usize, size_of::<QpairOpts>());
        // SAFETY: a whole QpairOpts.
        assert!(unsafe { read(&q, "opts") }.is_ok());
    }
}
