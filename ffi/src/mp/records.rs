//! A channel's request records: per request the C `arg` and the address of its data buffer
//! (a mark the subsystem's vfnvme_subsys_dma_free checks), with a free list. The record's
//! index is the tag the driver carries, so the I/O path neither allocates nor locks: a
//! submission pops a record and stores its mark, a completion clears the mark and pushes the
//! record back.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The request records of one channel (preallocated at open).
pub(crate) struct Records {
    /// Per record: the C `arg` of the request that holds it.
    args: Box<[*mut c_void]>,
    /// Per record: the data address of the request that holds it (0: free, or no data),
    /// shared with the subsystem so that vfnvme_subsys_dma_free can refuse a buffer in use.
    marks: Arc<[AtomicUsize]>,
    /// Free records (a stack; never grows past its preallocated capacity, since a record is
    /// given back once per taking).
    free: Vec<u32>,
}

impl Records {
    /// `n` free records (at most `u32::MAX`: more are not made).
    pub(crate) fn new(n: usize) -> Self {
        let n = n.min(u32::MAX as usize);
        Records {
            args: vec![std::ptr::null_mut(); n].into_boxed_slice(),
            marks: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            // Popped from the end: record 0 first.
            free: (0..n as u32).rev().collect(),
        }
    }

    /// The marks, to register with the subsystem.
    pub(crate) fn marks(&self) -> &Arc<[AtomicUsize]> {
        &self.marks
    }

    /// How many records there are.
    pub(crate) fn len(&self) -> usize {
        self.args.len()
    }

    /// Takes a free record for a request with `arg` whose data starts at `data` (0: none);
    /// None if every record is in use.
    #[inline(always)]
    pub(crate) fn take(&mut self, arg: *mut c_void, data: usize) -> Option<u32> {
        let rec = self.free.pop()?;
        let i = rec as usize;
        if let Some(a) = self.args.get_mut(i) {
            *a = arg;
        }
        if data != 0 {
            // Marked before the submission, so that vfnvme_subsys_dma_free on another thread
            // sees it. A free record's mark is 0 already (flushes store nothing).
            if let Some(m) = self.marks.get(i) {
                m.store(data, Ordering::Relaxed);
            }
        }
        Some(rec)
    }

    /// Gives back record `rec` (its request is done, or was refused) and returns its `arg`.
    #[inline(always)]
    pub(crate) fn release(&mut self, rec: u64) -> *mut c_void {
        let Some(i) = usize::try_from(rec).ok().filter(|&i| i < self.args.len()) else {
            // Not a tag this channel gave (the driver hands back only those).
            return std::ptr::null_mut();
        };
        if let Some(m) = self.marks.get(i) {
            m.store(0, Ordering::Release);
        }
        self.free.push(i as u32);
        self.args.get(i).copied().unwrap_or(std::ptr::null_mut())
    }
}
