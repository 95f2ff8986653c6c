//! The live subsystem and channel handles with their kind, so that control-path calls on a
//! handle already closed (or never opened), or on a handle of the other kind (a channel passed
//! as a subsystem), fail with VFNVME_ERR_INVALID_ARGUMENT instead of touching freed memory or
//! reading one type as another. The I/O path does not consult it (no locks there).

use crate::error::{FfiError, FfiResult, Status};
use std::any::TypeId;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Live handles: address → the type behind it.
static LIVE: Mutex<BTreeMap<usize, TypeId>> = Mutex::new(BTreeMap::new());

fn live() -> std::sync::MutexGuard<'static, BTreeMap<usize, TypeId>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records a new handle of type `T`.
pub fn add<T: 'static>(p: *const T) {
    live().insert(p as usize, TypeId::of::<T>());
}

/// Forgets a handle of type `T`; false if it was not a live one of that type.
pub fn remove<T: 'static>(p: *const T) -> bool {
    let mut live = live();
    if live.get(&(p as usize)) != Some(&TypeId::of::<T>()) {
        return false;
    }
    live.remove(&(p as usize)).is_some()
}

/// Fails unless `p` is a live handle of type `T` (named `what` in the message).
pub fn check<T: 'static>(p: *const T, what: &'static str) -> FfiResult<()> {
    if p.is_null() {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("{what} is NULL; pass one vfnvme opened"),
        ));
    }
    match live().get(&(p as usize)) {
        Some(&t) if t == TypeId::of::<T>() => Ok(()),
        Some(_) => Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!(
                "{p:p} is not a {what} but another kind of vfnvme handle; pass the {what} itself"
            ),
        )),
        None => Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("{what} {p:p} is not open (already closed, or not from vfnvme)"),
        )),
    }
}
