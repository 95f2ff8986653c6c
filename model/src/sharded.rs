//! A read-mostly value replicated per shard, so that threads reading it (every command reads
//! the IOMMU table and the namespace table) don't bounce one lock's cache line between cores.
//! Writers (map/unmap, namespace changes: rare) lock every shard.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

const SHARDS: usize = 16;

fn this_thread_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// `SHARDS` copies of a value, each behind its own lock.
#[derive(Debug)]
pub(crate) struct ShardedRw<T> {
    first: CachePadded<RwLock<T>>,
    rest: Box<[CachePadded<RwLock<T>>]>,
}

impl<T: Clone> ShardedRw<T> {
    pub fn new(value: T) -> Self {
        ShardedRw {
            rest: (1..SHARDS)
                .map(|_| CachePadded::new(RwLock::new(value.clone())))
                .collect(),
            first: CachePadded::new(RwLock::new(value)),
        }
    }

    /// This thread's copy, locked for reading. Don't nest two reads on one thread.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        let shard = match this_thread_shard().checked_sub(1) {
            Some(i) => self.rest.get(i).unwrap_or(&self.first),
            None => &self.first,
        };
        shard.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes every copy: `f` runs once, on the first, which is then copied to the others
    /// while all shards stay locked.
    pub fn write<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut first = self.first.write().unwrap_or_else(|e| e.into_inner());
        let mut rest: Vec<RwLockWriteGuard<'_, T>> = self
            .rest
            .iter()
            .map(|s| s.write().unwrap_or_else(|e| e.into_inner()))
            .collect();
        let r = f(&mut first);
        for g in rest.iter_mut() {
            (**g).clone_from(&first);
        }
        r
    }
}
