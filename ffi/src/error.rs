//! Status codes, `vfnvme_strerror`, the thread-local last-error message and the panic guard that
//! every exported function runs its body in.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Result of every fallible vfnvme function: `VFNVME_OK` (0) or a negative error code.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Success.
    VfnvmeOk = 0,
    /// A pointer was NULL, a size or count was zero or too large, or an option was invalid.
    VfnvmeErrInvalidArgument = -1,
    /// No such namespace or device.
    VfnvmeErrNotFound = -2,
    /// DMA memory or host memory could not be allocated (reserve hugepages:
    /// `echo 512 > /proc/sys/vm/nr_hugepages`).
    VfnvmeErrNoMemory = -3,
    /// The queue pair has no free slot: poll completions, then submit again.
    VfnvmeErrQueueFull = -4,
    /// A data pointer is not inside a buffer from vfnvme_dma_alloc of this controller, or the
    /// range runs past the end of that buffer.
    VfnvmeErrBadBuffer = -5,
    /// The controller or the device failed (open, bring-up, admin command, fatal status).
    VfnvmeErrDevice = -6,
    /// The LBA range lies outside the namespace.
    VfnvmeErrOutOfRange = -7,
    /// The object is still in use (a controller with live queue pairs, a queue pair with
    /// commands in flight, a re-entrant call from a completion callback).
    VfnvmeErrBusy = -8,
    /// The operation is not supported by this build, platform or controller.
    VfnvmeErrUnsupported = -9,
    /// A bug inside vfnvme (a caught panic); the message says where. Please report it.
    VfnvmeErrInternal = -10,
    /// A multipath head has no usable path and does not queue (or stopped queueing): retry
    /// when a path returns, or turn queue-if-no-path on.
    VfnvmeErrNoPath = -11,
    /// The controllers given are not one NVM subsystem: different SUBNQN, a controller
    /// without CMIC multi-controller, separate DMA address spaces, or the same one twice.
    VfnvmeErrNotOneSubsystem = -12,
    /// A protection information check on the host failed (vfnvme_pi_verify): the message names
    /// the field, the LBA and the values.
    VfnvmeErrPiCheck = -13,
    /// An iovec of more pieces than one request takes (VFNVME_MAX_IOV): join adjacent pieces,
    /// or split the I/O into several requests.
    VfnvmeErrTooManyPieces = -14,
    /// An iovec that PRPs can't describe (every piece but the first must start on a 4 KiB page
    /// boundary and every piece but the last end on one) on a controller without SGL support,
    /// or one its SGLs can't take (SGLS 10b: 4-byte aligned pieces): the message names the
    /// piece; align the pieces, or copy them into one buffer.
    VfnvmeErrNotPrpDescribable = -15,
}

impl Status {
    /// The code as returned across the ABI.
    pub fn code(self) -> i32 {
        self as i32
    }
    /// The static description of a code.
    pub fn describe(code: i32) -> &'static CStr {
        match code {
            0 => c"success",
            -1 => c"invalid argument (NULL pointer, zero or oversized count, bad option)",
            -2 => c"not found (no such namespace or device)",
            -3 => c"out of memory (DMA or host memory; reserve hugepages)",
            -4 => c"queue full (poll completions, then submit again)",
            -5 => c"buffer is not inside a vfnvme DMA buffer of this controller",
            -6 => c"device or controller error",
            -7 => c"LBA range outside the namespace",
            -8 => c"busy (object still in use, or re-entrant call)",
            -9 => c"not supported",
            -10 => c"internal error in vfnvme (caught panic; please report)",
            -11 => c"no usable path to the namespace (and not queueing)",
            -12 => c"the controllers are not one NVM subsystem (SUBNQN, CMIC, DMA space)",
            -13 => c"protection information check failed (guard, application or reference tag)",
            -14 => c"too many pieces in the iovec (at most VFNVME_MAX_IOV)",
            -15 => c"iovec not describable by PRPs, and the controller has no SGLs for it",
            _ => c"unknown vfnvme status code",
        }
    }
}

/// An error: a status and a message for `vfnvme_last_error`.
#[derive(Debug)]
pub struct FfiError {
    /// The code returned to C.
    pub status: Status,
    /// What happened and what to do about it.
    pub message: Cow<'static, str>,
}

impl FfiError {
    /// An error with a message.
    pub fn new(status: Status, message: impl Into<Cow<'static, str>>) -> Self {
        FfiError {
            status,
            message: message.into(),
        }
    }
}

/// Shorthand for results inside the ABI layer.
pub type FfiResult<T> = Result<T, FfiError>;

enum LastError {
    Static(&'static CStr),
    Owned(CString),
}

thread_local! {
    static LAST_ERROR: RefCell<LastError> = const { RefCell::new(LastError::Static(c"")) };
}

/// Records the message of the failure on this thread.
pub fn set_last_error(err: &FfiError) {
    let value = match &err.message {
        Cow::Borrowed("") => LastError::Static(Status::describe(err.status.code())),
        m => LastError::Owned(
            CString::new(m.replace('\0', " ")).unwrap_or_else(|_| CString::default()),
        ),
    };
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = value);
}

/// Runs an exported function's body: panics become `VFNVME_ERR_INTERNAL`, errors set the
/// last-error message; returns the status code (or the non-negative value for counts).
///
/// Inlined into each exported function (no extra call frame on the I/O path); the failure
/// paths are out of line.
#[inline(always)]
pub fn guard(name: &'static str, body: impl FnOnce() -> FfiResult<i32>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => failed(e),
        Err(panic) => panicked(name, panic),
    }
}

/// Records a failure and returns its status code.
#[cold]
#[inline(never)]
fn failed(e: FfiError) -> i32 {
    set_last_error(&e);
    e.status.code()
}

/// Records a caught panic as `VFNVME_ERR_INTERNAL`.
#[cold]
#[inline(never)]
fn panicked(name: &'static str, panic: Box<dyn std::any::Any + Send>) -> i32 {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    set_last_error(&FfiError::new(
        Status::VfnvmeErrInternal,
        format!("internal error (panic) in {name}: {what}; please report this bug"),
    ));
    Status::VfnvmeErrInternal.code()
}

/// Returns a static, NUL-terminated description of a status code. Never NULL.
///
/// Thread safety: thread-safe.
#[no_mangle]
pub extern "C" fn vfnvme_strerror(code: i32) -> *const c_char {
    Status::describe(code).as_ptr()
}

/// Returns the message of the last failed vfnvme call on the calling thread ("" if none). The
/// string stays valid until the next failing vfnvme call on this thread. Never NULL.
///
/// Thread safety: thread-safe; the message is per thread.
#[no_mangle]
pub extern "C" fn vfnvme_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|l| match &*l.borrow() {
            LastError::Static(s) => s.as_ptr(),
            // The CString lives in the thread-local until replaced by the next failure.
            LastError::Owned(s) => s.as_ptr(),
        })
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: vfnvme_last_error returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(vfnvme_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn errors_set_last_error_and_panics_are_caught() {
        let rc = guard("t", || {
            Err(FfiError::new(Status::VfnvmeErrNotFound, "no ns 7"))
        });
        assert_eq!(rc, -2);
        assert_eq!(last(), "no ns 7");
        let rc = guard("vfnvme_test", || panic!("boom"));
        assert_eq!(rc, Status::VfnvmeErrInternal.code());
        assert!(
            last().contains("vfnvme_test") && last().contains("boom"),
            "{}",
            last()
        );
        assert_eq!(guard("t", || Ok(5)), 5);
    }

    #[test]
    fn strerror_covers_every_code() {
        for c in -15..=0 {
            // SAFETY: static NUL-terminated strings.
            let s = unsafe { CStr::from_ptr(vfnvme_strerror(c)) };
            assert!(!s.to_bytes().is_empty());
            assert_ne!(s, c"unknown vfnvme status code", "code {c}");
        }
        // SAFETY: as above.
        let s = unsafe { CStr::from_ptr(vfnvme_strerror(-99)) };
        assert_eq!(s, c"unknown vfnvme status code");
    }
}
