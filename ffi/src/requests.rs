//! The C request table shared by queue pairs and channels: per request record the C callback
//! and `arg`, and the address of its data buffer (a mark that `vfnvme_dma_free` and
//! `vfnvme_subsys_dma_free` check), with a free list. A record's index is the tag the driver
//! carries, so the I/O path neither allocates nor locks: a submission takes a record and stores
//! its mark, a delivered completion clears the mark and gives the record back, or keeps both
//! for good when the device may still use the memory (`memory_held`).

use crate::types::{Callback, Completion};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What C gave with one request.
#[derive(Clone, Copy)]
struct Record {
    cb: Callback,
    arg: *mut c_void,
}

/// The request records of one queue pair or channel (preallocated when it is made).
pub(crate) struct Requests {
    records: Box<[Record]>,
    /// Per record, two marks: the data address and the separate metadata address of the
    /// request that holds it (0: free, or none), registered with the DMA domain so that its
    /// free function can refuse a buffer in use.
    marks: Arc<[AtomicUsize]>,
    /// Free records (a stack; never grows past its preallocated capacity, since a record is
    /// given back once per taking).
    free: Vec<u32>,
    /// Records held for good: their request ended on a controller that could not be disabled,
    /// so the device may still use the buffer their mark names (never freed, never reused).
    held: usize,
    /// Completions the driver delivered past the caller's `max` (a channel fails every queued
    /// request at once), with their record (kept, mark included, until handed out) and whether
    /// it is held; handed out first at the next poll. Preallocated for every record.
    overflow: VecDeque<(u32, Completion, bool)>,
}

impl Requests {
    /// `n` free records (at most `u32::MAX`: more are not made).
    pub(crate) fn new(n: usize) -> Self {
        let n = n.min(u32::MAX as usize);
        let none = Record {
            cb: None,
            arg: std::ptr::null_mut(),
        };
        Requests {
            records: vec![none; n].into_boxed_slice(),
            marks: (0..2 * n).map(|_| AtomicUsize::new(0)).collect(),
            // Popped from the end: record 0 first.
            free: (0..n as u32).rev().collect(),
            held: 0,
            overflow: VecDeque::with_capacity(n),
        }
    }

    /// The marks, to register with the DMA domain.
    pub(crate) fn marks(&self) -> &Arc<[AtomicUsize]> {
        &self.marks
    }

    /// How many records there are.
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// How many records are held for good (see [`end`](Self::end)).
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Completions waiting in the overflow queue (delivered by the driver, not yet handed out).
    pub(crate) fn waiting(&self) -> usize {
        self.overflow.len()
    }

    /// Takes a free record for a request with `cb` and `arg` whose data starts at `data`
    /// (NULL: none); None if every record is in use.
    #[inline(always)]
    pub(crate) fn take(
        &mut self,
        cb: Callback,
        arg: *mut c_void,
        data: *const c_void,
    ) -> Option<u32> {
        let rec = self.free.pop()?;
        let i = rec as usize;
        if let Some(r) = self.records.get_mut(i) {
            *r = Record { cb, arg };
        }
        if !data.is_null() {
            // Marked before the submission, so that a free on another thread sees it. A free
            // record's mark is 0 already.
            if let Some(m) = self.marks.get(2 * i) {
                m.store(data as usize, Ordering::Relaxed);
            }
        }
        Some(rec)
    }

    /// [`take`](Self::take) for a request that also moves separate metadata at `metadata`
    /// (NULL: none), marked too.
    pub(crate) fn take_with_metadata(
        &mut self,
        cb: Callback,
        arg: *mut c_void,
        data: *const c_void,
        metadata: *const c_void,
    ) -> Option<u32> {
        let rec = self.take(cb, arg, data)?;
        if !metadata.is_null() {
            if let Some(m) = self.marks.get(2 * rec as usize + 1) {
                m.store(metadata as usize, Ordering::Relaxed);
            }
        }
        Some(rec)
    }

    /// Ends record `rec`'s request and returns its callback and `arg`: the record is given
    /// back (mark cleared), or, when the device may still use the request's memory (`held`),
    /// kept for good with its mark, so that the buffer is never freed or reused. A submission
    /// the driver refused ends with `held` false.
    #[inline(always)]
    pub(crate) fn end(&mut self, rec: u32, held: bool) -> (Callback, *mut c_void) {
        let i = rec as usize;
        let Some(&Record { cb, arg }) = self.records.get(i) else {
            // Not a tag this table gave (the driver hands back only those).
            return (None, std::ptr::null_mut());
        };
        if held {
            self.held += 1;
        } else {
            for m in self.marks.get(2 * i..2 * i + 2).into_iter().flatten() {
                m.store(0, Ordering::Release);
            }
            self.free.push(rec);
        }
        (cb, arg)
    }

    /// Writes the completion of record `rec` to `out[*n]` (its `arg` filled in, the record
    /// ended) if there is room, else queues it, record kept, for a later [`drain`](Self::drain).
    #[inline(always)]
    pub(crate) fn deliver(
        &mut self,
        out: &mut [Completion],
        n: &mut usize,
        rec: u32,
        mut c: Completion,
        held: bool,
    ) {
        match out.get_mut(*n) {
            Some(d) => {
                c.arg = self.end(rec, held).1;
                *d = c;
                *n += 1;
            }
            None => self.overflow.push_back((rec, c, held)),
        }
    }

    /// Hands out queued completions into `out[0..]`; returns how many.
    #[inline(always)]
    pub(crate) fn drain(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some((rec, c, held)) = self.overflow.pop_front() else {
                break;
            };
            self.deliver(out, &mut n, rec, c, held);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_record_keeps_its_mark_and_is_not_reused() {
        let mut r = Requests::new(2);
        let arg = 0x10usize as *mut c_void;
        let a = r
            .take_with_metadata(None, arg, 0x1000 as *const c_void, 0x1800 as *const c_void)
            .unwrap();
        let b = r
            .take(None, std::ptr::null_mut(), 0x2000 as *const c_void)
            .unwrap();
        assert_eq!(r.end(a, true).1, arg, "the request's arg comes back");
        assert_eq!(r.held(), 1);
        assert_eq!(
            r.marks()[2 * a as usize].load(Ordering::Relaxed),
            0x1000,
            "still marked"
        );
        assert_eq!(
            r.marks()[2 * a as usize + 1].load(Ordering::Relaxed),
            0x1800,
            "its metadata too"
        );
        r.end(b, false);
        assert_eq!(
            r.marks()[2 * b as usize].load(Ordering::Relaxed),
            0,
            "released: unmarked"
        );
        assert_eq!(
            r.take(None, std::ptr::null_mut(), 0x3000 as *const c_void),
            Some(b),
            "only the released one comes back"
        );
        assert_eq!(
            r.take(None, std::ptr::null_mut(), 0x4000 as *const c_void),
            None,
            "the held one never does"
        );
    }
}
