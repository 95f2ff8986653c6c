//! The live subsystem and channel handles, so that control-path calls on a handle already
//! closed (or never opened) fail with VFNVME_ERR_INVALID_ARGUMENT instead of touching freed
//! memory. The I/O path does not consult it (no locks there).

use crate::error::{FfiError, FfiResult, Status};
use std::collections::BTreeSet;
use std::sync::Mutex;

static LIVE: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn live() -> std::sync::MutexGuard<'static, BTreeSet<usize>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records a new handle.
pub fn add<T>(p: *const T) {
    live().insert(p as usize);
}

/// Forgets a handle; false if it was not live.
pub fn remove<T>(p: *const T) -> bool {
    live().remove(&(p as usize))
}

/// Fails unless `p` is a live handle of kind `what`.
pub fn check<T>(p: *const T, what: &'static str) -> FfiResult<()> {
    if p.is_null() {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("{what} is NULL; pass one vfnvme opened"),
        ));
    }
    if live().contains(&(p as usize)) {
        Ok(())
    } else {
        Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("{what} {p:p} is not open (already closed, or not from vfnvme)"),
        ))
    }
}
