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
    /// Records held for good: their request ended on a controller that could not be disabled,
    /// so the device may still use the buffer their mark names (never freed, never reused).
    held: usize,
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
            held: 0,
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

    /// The index of record `rec`, if it is one of this channel's.
    #[inline(always)]
    fn index(&self, rec: u64) -> Option<usize> {
        usize::try_from(rec).ok().filter(|&i| i < self.args.len())
    }

    /// How many records are held for good (see [`hold`](Self::hold)).
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Ends record `rec`'s request without giving the record back: the device may still use
    /// its buffer (a controller that could not be disabled), so the mark stays and
    /// vfnvme_subsys_dma_free keeps refusing that buffer. Returns the request's `arg`.
    #[cold]
    pub(crate) fn hold(&mut self, rec: u64) -> *mut c_void {
        let Some(i) = self.index(rec) else {
            return std::ptr::null_mut();
        };
        self.held += 1;
        self.args.get(i).copied().unwrap_or(std::ptr::null_mut())
    }

    /// Gives back record `rec` (its request is done, or was refused) and returns its `arg`.
    #[inline(always)]
    pub(crate) fn release(&mut self, rec: u64) -> *mut c_void {
        let Some(i) = self.index(rec) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_record_keeps_its_mark_and_is_not_reused() {
        let mut r = Records::new(2);
        let arg = 0x10usize as *mut c_void;
        let a = r.take(arg, 0x1000).unwrap();
        let b = r.take(std::ptr::null_mut(), 0x2000).unwrap();
        assert_eq!(r.hold(u64::from(a)), arg, "the request's arg comes back");
        assert_eq!(r.held(), 1);
        assert_eq!(
            r.marks()[a as usize].load(Ordering::Relaxed),
            0x1000,
            "still marked"
        );
        r.release(u64::from(b));
        assert_eq!(
            r.marks()[b as usize].load(Ordering::Relaxed),
            0,
            "released: unmarked"
        );
        assert_eq!(
            r.take(std::ptr::null_mut(), 0x3000),
            Some(b),
            "only the released one comes back"
        );
        assert_eq!(
            r.take(std::ptr::null_mut(), 0x4000),
            None,
            "the held one never does"
        );
    }
}
