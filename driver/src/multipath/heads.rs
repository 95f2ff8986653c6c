//! The subsystem's heads, looked up without locks: a sorted array swapped as a whole under
//! the epoch collector (readers pin, load, binary-search; writers copy, change, swap).

use super::head::Head;
use crate::namespaces::epoch::{pin, Atomic, Owned, Shared};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Heads sorted by (nsid, unique id).
pub(crate) struct HeadTable {
    table: Atomic<Vec<Arc<Head>>>,
}

impl std::fmt::Debug for HeadTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadTable")
            .field("heads", &self.snapshot().len())
            .finish()
    }
}

impl HeadTable {
    pub fn new() -> Self {
        let t = HeadTable {
            table: Atomic::null(),
        };
        let guard = pin();
        t.table.store(
            Owned::new(Vec::new()).into_shared(&guard),
            Ordering::Release,
        );
        t
    }

    /// Runs `f` on the current array (lock-free, wait-free: one pin, one load).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&[Arc<Head>]) -> R) -> R {
        let guard = pin();
        let shared = self.table.load(Ordering::Acquire, &guard);
        // SAFETY: arrays are freed only through the collector after being swapped out, and
        // `guard` was pinned before the load; never null (set in `new`).
        match unsafe { shared.as_ref() } {
            Some(v) => f(v),
            None => f(&[]),
        }
    }

    /// The first head with `nsid`.
    pub fn get(&self, nsid: u32) -> Option<Arc<Head>> {
        self.with(|v| {
            let i = v.partition_point(|h| h.nsid() < nsid);
            v.get(i).filter(|h| h.nsid() == nsid).cloned()
        })
    }

    /// Every head with `nsid` (more than one if controllers disagree about its identity).
    pub fn all(&self, nsid: u32) -> Vec<Arc<Head>> {
        self.with(|v| {
            let i = v.partition_point(|h| h.nsid() < nsid);
            v[i..]
                .iter()
                .take_while(|h| h.nsid() == nsid)
                .cloned()
                .collect()
        })
    }

    /// A copy of the array.
    pub fn snapshot(&self) -> Vec<Arc<Head>> {
        self.with(<[Arc<Head>]>::to_vec)
    }

    /// Replaces the array (the caller serialises writers); the old one is freed after a grace
    /// period.
    pub fn replace(&self, mut heads: Vec<Arc<Head>>) {
        heads.sort_by_key(|h| (h.nsid(), h.unique_id()));
        let guard = pin();
        let old = self.table.swap(
            Owned::new(heads).into_shared(&guard),
            Ordering::AcqRel,
            &guard,
        );
        if !old.is_null() {
            // SAFETY: unlinked by this swap under the writer lock; freed after readers.
            let owned = unsafe { old.into_owned() };
            guard.defer(move || drop(owned));
        }
    }
}

impl Drop for HeadTable {
    fn drop(&mut self) {
        let guard = pin();
        let old = self.table.swap(Shared::null(), Ordering::AcqRel, &guard);
        if !old.is_null() {
            // SAFETY: dropped: nothing loads it any more; pinned readers are covered.
            let owned = unsafe { old.into_owned() };
            guard.defer(move || drop(owned));
        }
    }
}
