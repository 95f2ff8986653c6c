//! A loom-checkable stand-in for the part of crossbeam-epoch the registry uses (`--cfg loom`
//! only; crossbeam-epoch's global collector cannot run under loom).
//!
//! Reclamation: `pin()` counts the thread in as a reader; `defer` queues the closure; whenever
//! a guard is dropped, queued closures run if no reader is pinned at that moment (checked with a
//! read-modify-write, so it is ordered against every pin). That is a coarser grace period than
//! real epochs, with the same guarantee: nothing unlinked before the check is reachable by a
//! reader pinned after it. Every pointee lives in a `loom::cell::UnsafeCell`: dereferencing
//! registers a read and freeing registers a write, so loom reports any free that is not ordered
//! after every reader that could still hold the pointer.

use std::marker::PhantomData;
use std::ops::Deref;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use loom::sync::Mutex;

type Deferred = Box<dyn FnOnce() + Send>;

struct Collector {
    readers: AtomicUsize,
    garbage: Mutex<Vec<Deferred>>,
}

loom::lazy_static! {
    static ref COLLECTOR: Collector = Collector {
        readers: AtomicUsize::new(0),
        garbage: Mutex::new(Vec::new()),
    };
}

impl Collector {
    fn collect(&self) {
        let batch = std::mem::take(&mut *self.garbage.lock().unwrap());
        if batch.is_empty() {
            return;
        }
        // A read-modify-write reads the latest value: a reader that pins later synchronises
        // with it and so sees every unlink that preceded the queued closures.
        if self.readers.fetch_add(0, Ordering::AcqRel) == 0 {
            for f in batch {
                f();
            }
        } else {
            self.garbage.lock().unwrap().extend(batch);
        }
    }
}

/// A pinned reader (stand-in for `crossbeam_epoch::Guard`).
pub struct Guard {
    counted: bool,
}

/// Pins the current thread.
pub(crate) fn pin() -> Guard {
    COLLECTOR.readers.fetch_add(1, Ordering::AcqRel);
    Guard { counted: true }
}

static UNPROTECTED: Guard = Guard { counted: false };

/// A guard that protects nothing, for exclusive (`&mut`) teardown.
///
/// # Safety
/// Same contract as `crossbeam_epoch::unprotected`: no other thread may access the pointers.
pub(crate) unsafe fn unprotected() -> &'static Guard {
    &UNPROTECTED
}

impl Guard {
    /// Runs `f` once no reader pinned now can still be running.
    pub(crate) fn defer<F, R>(&self, f: F)
    where
        F: FnOnce() -> R + Send + 'static,
    {
        if self.counted {
            COLLECTOR.garbage.lock().unwrap().push(Box::new(move || {
                f();
            }));
        } else {
            f();
        }
    }
    /// Nothing to do: collection happens when guards are dropped.
    pub(crate) fn flush(&self) {}
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.counted {
            COLLECTOR.readers.fetch_sub(1, Ordering::AcqRel);
            COLLECTOR.collect();
        }
    }
}

struct Boxed<T> {
    cell: UnsafeCell<T>,
}

/// An owned heap value (stand-in for `crossbeam_epoch::Owned`).
pub(crate) struct Owned<T> {
    ptr: *mut Boxed<T>,
}

// SAFETY: Owned<T> uniquely owns its allocation, like Box<T>.
unsafe impl<T: Send> Send for Owned<T> {}

impl<T> Owned<T> {
    /// Allocates `value`.
    pub(crate) fn new(value: T) -> Self {
        let boxed = Box::new(Boxed {
            cell: UnsafeCell::new(value),
        });
        // Register initialisation as a write, so loom checks that readers reach it only
        // through a publishing (Release) store.
        boxed.cell.with_mut(|_| ());
        Owned {
            ptr: Box::into_raw(boxed),
        }
    }
    /// Gives up ownership to a shared pointer valid for the guard's lifetime.
    pub(crate) fn into_shared<'g>(self, _guard: &'g Guard) -> Shared<'g, T> {
        let ptr = self.ptr;
        std::mem::forget(self);
        Shared {
            ptr,
            _marker: PhantomData,
        }
    }
}

impl<T> Deref for Owned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: self.ptr is a live allocation owned by self.
        unsafe { (*self.ptr).cell.with(|p| &*p) }
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: self.ptr came from Box::into_raw and is owned by self alone.
        let boxed = unsafe { Box::from_raw(self.ptr) };
        // Register the free as a write so loom checks it against every earlier read.
        boxed.cell.with_mut(|_| ());
        drop(boxed);
    }
}

/// A pointer read under a guard (stand-in for `crossbeam_epoch::Shared`).
pub(crate) struct Shared<'g, T> {
    ptr: *mut Boxed<T>,
    _marker: PhantomData<&'g T>,
}

impl<T> Clone for Shared<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Shared<'_, T> {}

impl<'g, T> Shared<'g, T> {
    /// The null pointer.
    pub(crate) fn null() -> Self {
        Shared {
            ptr: std::ptr::null_mut(),
            _marker: PhantomData,
        }
    }
    /// Whether the pointer is null.
    pub(crate) fn is_null(&self) -> bool {
        self.ptr.is_null()
    }
    /// Dereferences the pointer.
    ///
    /// # Safety
    /// As `crossbeam_epoch::Shared::as_ref`: the pointee must not have been freed.
    pub(crate) unsafe fn as_ref(&self) -> Option<&'g T> {
        // SAFETY: forwarded to the caller; the read is registered with loom.
        unsafe { self.ptr.as_ref().map(|b| b.cell.with(|p| &*p)) }
    }
    /// Takes ownership of the pointee.
    ///
    /// # Safety
    /// As `crossbeam_epoch::Shared::into_owned`: nothing else may free it.
    pub(crate) unsafe fn into_owned(self) -> Owned<T> {
        Owned { ptr: self.ptr }
    }
}

/// An atomic pointer (stand-in for `crossbeam_epoch::Atomic`). Dropping it does not free the
/// pointee, as with crossbeam.
pub(crate) struct Atomic<T> {
    ptr: AtomicPtr<Boxed<T>>,
}

// SAFETY: the pointee is shared between threads like crossbeam's Atomic<T> (Send + Sync).
unsafe impl<T: Send + Sync> Send for Atomic<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Atomic<T> {}

impl<T> Atomic<T> {
    /// A null pointer.
    pub(crate) fn null() -> Self {
        Atomic {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
    /// Loads the pointer.
    pub(crate) fn load<'g>(&self, ord: Ordering, _guard: &'g Guard) -> Shared<'g, T> {
        Shared {
            ptr: self.ptr.load(ord),
            _marker: PhantomData,
        }
    }
    /// Stores a pointer.
    pub(crate) fn store(&self, new: Shared<'_, T>, ord: Ordering) {
        self.ptr.store(new.ptr, ord);
    }
    /// Swaps in a pointer, returning the previous one.
    pub(crate) fn swap<'g>(
        &self,
        new: Shared<'_, T>,
        ord: Ordering,
        _g: &'g Guard,
    ) -> Shared<'g, T> {
        Shared {
            ptr: self.ptr.swap(new.ptr, ord),
            _marker: PhantomData,
        }
    }
}
