//! The synchronisation primitives the registry is written against.
//!
//! Normal builds use crossbeam-epoch and `std`; `--cfg loom` builds swap in loom's atomics and
//! mutex and a loom-checkable stand-in for epoch reclamation (`epoch_loom.rs`), so the same
//! registry code can be model-checked. The registry only uses this small subset of the
//! crossbeam-epoch API: `Atomic`, `Shared`, `Owned`, `Guard`, `pin`, `unprotected`.

#[cfg(not(loom))]
pub(crate) use crossbeam_epoch::{pin, unprotected, Atomic, Guard, Owned, Shared};
#[cfg(not(loom))]
pub(crate) use std::sync::{atomic::AtomicUsize, Mutex};

#[cfg(loom)]
pub(crate) use super::epoch_loom::{pin, unprotected, Atomic, Guard, Owned, Shared};
#[cfg(loom)]
pub(crate) use loom::sync::{atomic::AtomicUsize, Mutex};
