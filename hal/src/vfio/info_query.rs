//! Calling a VFIO "info" ioctl whose answer may carry a capability chain: the kernel says in
//! `argsz` how big a buffer the whole answer needs, and the call is repeated with that size.

use std::os::raw::c_int;

/// The largest answer accepted; real chains are a few hundred bytes.
const MAX_ANSWER: usize = 64 << 10;

/// Runs `call` on a buffer that starts with `head` (whose first field is `u32 argsz`), growing
/// the buffer as the kernel asks. Returns the answer's bytes.
pub(crate) fn query_with_caps<T: Copy>(
    head: T,
    call: impl Fn(*mut T) -> nix::Result<c_int>,
) -> nix::Result<Vec<u8>> {
    const { assert!(std::mem::align_of::<T>() <= 8 && std::mem::size_of::<T>() >= 4) };
    let mut len = std::mem::size_of::<T>();
    for _ in 0..4 {
        let mut buf = vec![0u64; len.div_ceil(8)];
        let p = buf.as_mut_ptr().cast::<T>();
        // SAFETY: `buf` is at least `size_of::<T>()` bytes and 8-byte aligned (at least T's
        // alignment); `argsz` is the first u32 of every VFIO info struct.
        unsafe {
            p.write(head);
            p.cast::<u32>().write(len as u32);
        }
        call(p)?;
        // SAFETY: as above; the kernel wrote at most `len` bytes (it honours `argsz`).
        let want = unsafe { p.cast::<u32>().read() } as usize;
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).take(len).collect();
        if want <= len {
            return Ok(bytes);
        }
        if want > MAX_ANSWER {
            return Err(nix::Error::EOVERFLOW);
        }
        len = want;
    }
    Err(nix::Error::EOVERFLOW)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[derive(Clone, Copy, Default)]
    #[repr(C)]
    struct Info {
        argsz: u32,
        flags: u32,
        cap_offset: u32,
    }

    #[test]
    fn retries_with_the_size_the_kernel_asks_for() {
        let calls = Cell::new(0);
        let bytes = query_with_caps(Info::default(), |p| {
            calls.set(calls.get() + 1);
            // SAFETY: the test's fake kernel writes within the buffer it was given.
            unsafe {
                let argsz = (*p).argsz;
                if argsz < 40 {
                    (*p).argsz = 40;
                } else {
                    (*p).cap_offset = 12;
                    p.cast::<u8>().add(39).write(0xab);
                }
            }
            Ok(0)
        })
        .unwrap();
        assert_eq!(calls.get(), 2);
        assert_eq!(bytes.len(), 40);
        assert_eq!(bytes[39], 0xab);
        assert_eq!(bytes[8], 12);
    }

    #[test]
    fn gives_up_on_absurd_sizes_and_passes_errors_on() {
        let r = query_with_caps(Info::default(), |p| {
            // SAFETY: writes the first field only.
            unsafe { (*p).argsz = u32::MAX };
            Ok(0)
        });
        assert_eq!(r.unwrap_err(), nix::Error::EOVERFLOW);
        let r = query_with_caps(Info::default(), |_| Err(nix::Error::ENOTTY));
        assert_eq!(r.unwrap_err(), nix::Error::ENOTTY);
    }
}
