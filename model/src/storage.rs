//! Sparse RAM backing: 4 KiB pages allocated on first write, in shards so that queues on
//! different threads rarely contend.

use super::namespaces::splitmix;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard};

/// A fast hasher for page numbers (SipHash is needlessly slow for u64 keys from the model).
#[derive(Default)]
pub(crate) struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        splitmix(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}

type PageMap = HashMap<u64, Page, BuildHasherDefault<PageHasher>>;

const PAGE: u64 = 4096;
const SHARDS: u64 = 16;

type Page = Box<[u8; PAGE as usize]>;

/// Byte-addressed sparse storage; unwritten bytes read as zero.
#[derive(Debug)]
pub(crate) struct SparseStore {
    shards: Box<[Mutex<PageMap>]>,
}

impl SparseStore {
    pub fn new() -> Self {
        SparseStore {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(PageMap::default()))
                .collect(),
        }
    }

    fn shard(&self, page: u64) -> MutexGuard<'_, PageMap> {
        // `SHARDS` entries exist and `page % SHARDS` is below it.
        self.shards[(page % SHARDS) as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `f(page, offset_in_page, range_in_buffer)` for each page piece of `off..off+len`.
    fn pieces(off: u64, len: usize, mut f: impl FnMut(u64, usize, std::ops::Range<usize>)) {
        let mut done = 0usize;
        while done < len {
            let pos = off + done as u64;
            let in_page = (pos % PAGE) as usize;
            let n = (len - done).min(PAGE as usize - in_page);
            f(pos / PAGE, in_page, done..done + n);
            done += n;
        }
    }

    /// Copies the bytes at `off` into `out`.
    pub fn read(&self, off: u64, out: &mut [u8]) {
        Self::pieces(off, out.len(), |page, at, r| {
            let n = r.len();
            match self.shard(page).get(&page) {
                Some(p) => out[r].copy_from_slice(&p[at..at + n]),
                None => out[r].fill(0),
            }
        });
    }

    /// Stores `data` at `off`.
    pub fn write(&self, off: u64, data: &[u8]) {
        Self::pieces(off, data.len(), |page, at, r| {
            let n = r.len();
            let mut shard = self.shard(page);
            let p = shard
                .entry(page)
                .or_insert_with(|| Box::new([0u8; PAGE as usize]));
            p[at..at + n].copy_from_slice(&data[r]);
        });
    }

    /// Zeroes `len` bytes at `off`, freeing whole pages.
    pub fn zero(&self, off: u64, len: u64) {
        let end = off.saturating_add(len);
        let first_full = off.div_ceil(PAGE);
        let last_full = end / PAGE; // exclusive
        let stored: usize = self
            .shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum();
        if last_full > first_full && last_full - first_full > stored as u64 {
            for s in self.shards.iter() {
                s.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .retain(|&p, _| p < first_full || p >= last_full);
            }
        } else {
            for page in first_full..last_full.max(first_full) {
                self.shard(page).remove(&page);
            }
        }
        // The partial pages at either end.
        let zero_part = |from: u64, to: u64| {
            if from >= to {
                return;
            }
            let page = from / PAGE;
            if let Some(p) = self.shard(page).get_mut(&page) {
                p[(from % PAGE) as usize..((to - 1) % PAGE + 1) as usize].fill(0);
            }
        };
        if first_full > last_full {
            // Within one page.
            zero_part(off, end);
        } else {
            zero_part(off, (first_full * PAGE).min(end));
            zero_part((last_full * PAGE).max(off), end);
        }
    }

    /// Drops every byte at or beyond `len`.
    pub fn truncate(&self, len: u64) {
        self.zero(len, u64::MAX - len);
    }

    /// The number of allocated pages.
    #[cfg(test)]
    pub fn pages(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_read_write_zero() {
        let s = SparseStore::new();
        let mut out = [1u8; 100];
        s.read(1 << 40, &mut out);
        assert!(out.iter().all(|&b| b == 0));
        let data: Vec<u8> = (0..10000u32).map(|i| (i % 251) as u8).collect();
        s.write(4000, &data);
        assert_eq!(s.pages(), 4);
        let mut back = vec![0u8; 10000];
        s.read(4000, &mut back);
        assert_eq!(back, data);
        s.zero(4100, 8192);
        s.read(4000, &mut back);
        assert!(back[..100].iter().eq(data[..100].iter()));
        assert!(back[100..8292].iter().all(|&b| b == 0));
        assert!(back[8292..].iter().eq(data[8292..].iter()));
        assert_eq!(s.pages(), 3, "the one whole page inside was freed");
        s.zero(0, u64::MAX);
        assert_eq!(s.pages(), 0);
    }
}
