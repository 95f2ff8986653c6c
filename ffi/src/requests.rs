//! The C request table shared by queue pairs and channels: per request record the C callback
//! and `arg`, and the address of its data buffer (a mark that `vfnvme_dma_free` and
//! `vfnvme_subsys_dma_free` check), with a free list. A record's index is the tag the driver
//! carries, so the I/O path neither allocates nor locks: a submission takes a record and stores
//! its mark, a delivered completion clears the mark and gives the record back, or keeps both
//! for good when the device may still use the memory (`memory_held`).
//!
//! A vectored request (an iovec) marks every piece: one or two pieces in the record's own two
//! marks, more in chunks of [`CHUNK`] marks taken from a preallocated pool after the records'
//! marks (linked per request, given back with the record). Every mark lies in the one array
//! the DMA domain scans, so the free functions refuse every piece's buffer alike.

use crate::types::{Callback, Completion};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Marks per chunk of the pool for the pieces of vectored requests.
pub(crate) const CHUNK: usize = 16;

/// No chunk (end of a chain, or a record without chunks).
const NO_CHUNK: u32 = u32::MAX;

/// What C gave with one request.
#[derive(Clone, Copy)]
struct Record {
    cb: Callback,
    arg: *mut c_void,
    /// The first of the chunks holding the marks of its pieces ([`NO_CHUNK`]: none).
    chunks: u32,
}

/// The request records of one queue pair or channel (preallocated when it is made).
pub(crate) struct Requests {
    records: Box<[Record]>,
    /// Per record, two marks: the data address and the separate metadata address of the
    /// request that holds it (0: free, or none); then the chunks of piece marks (chunk `c` at
    /// `2 * records + c * CHUNK`). Registered with the DMA domain so that its free function can
    /// refuse a buffer in use.
    marks: Arc<[AtomicUsize]>,
    /// Per chunk, the next chunk of the same request ([`NO_CHUNK`]: the last).
    next_chunk: Box<[u32]>,
    /// Free chunks (a stack, preallocated).
    free_chunks: Vec<u32>,
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
    /// `n` free records (at most `u32::MAX`: more are not made) and `chunks` chunks of
    /// [`CHUNK`] marks for the pieces of vectored requests (0: no vectored requests).
    pub(crate) fn new(n: usize, chunks: usize) -> Self {
        let n = n.min(u32::MAX as usize);
        let chunks = chunks.min(u32::MAX as usize - 1);
        let none = Record {
            cb: None,
            arg: std::ptr::null_mut(),
            chunks: NO_CHUNK,
        };
        Requests {
            records: vec![none; n].into_boxed_slice(),
            marks: (0..2 * n + chunks * CHUNK)
                .map(|_| AtomicUsize::new(0))
                .collect(),
            next_chunk: vec![NO_CHUNK; chunks].into_boxed_slice(),
            free_chunks: (0..chunks as u32).rev().collect(),
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
            *r = Record {
                cb,
                arg,
                chunks: NO_CHUNK,
            };
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

    /// [`take`](Self::take) for a vectored request whose pieces start at `pieces` (each
    /// marked): one or two in the record's marks, more in chunks of the pool. None if every
    /// record, or too many chunks, are in use.
    pub(crate) fn take_vectored(
        &mut self,
        cb: Callback,
        arg: *mut c_void,
        pieces: &[*const c_void],
    ) -> Option<u32> {
        if pieces.len() <= 2 {
            let at = |k: usize| pieces.get(k).copied().unwrap_or(std::ptr::null());
            return self.take_with_metadata(cb, arg, at(0), at(1));
        }
        let needed = pieces.len().div_ceil(CHUNK);
        if self.free_chunks.len() < needed || self.free.is_empty() {
            return None;
        }
        let rec = self.take(cb, arg, std::ptr::null())?;
        let base = 2 * self.records.len();
        let mut first = NO_CHUNK;
        // Chunks linked back to front, so that the chain runs in the order of the pieces.
        for group in pieces.chunks(CHUNK).rev() {
            let Some(c) = self.free_chunks.pop() else {
                break; // Counted above: not reached.
            };
            if let Some(n) = self.next_chunk.get_mut(c as usize) {
                *n = first;
            }
            first = c;
            let at = base + c as usize * CHUNK;
            for (m, &p) in self
                .marks
                .get(at..at + CHUNK)
                .into_iter()
                .flatten()
                .zip(group)
            {
                m.store(p as usize, Ordering::Relaxed);
            }
        }
        if let Some(r) = self.records.get_mut(rec as usize) {
            r.chunks = first;
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
        let Some(&Record { cb, arg, chunks }) = self.records.get(i) else {
            // Not a tag this table gave (the driver hands back only those).
            return (None, std::ptr::null_mut());
        };
        if held {
            self.held += 1;
        } else {
            for m in self.marks.get(2 * i..2 * i + 2).into_iter().flatten() {
                m.store(0, Ordering::Release);
            }
            if chunks != NO_CHUNK {
                self.free_chunks_of(chunks);
            }
            self.free.push(rec);
        }
        (cb, arg)
    }

    /// Clears the marks of the chain of chunks from `first` and gives the chunks back.
    #[inline(never)]
    fn free_chunks_of(&mut self, first: u32) {
        let base = 2 * self.records.len();
        let mut c = first;
        // At most every chunk once: a chain never loops (each taken chunk links to one taken
        // after it), and the bound keeps it so.
        for _ in 0..self.next_chunk.len() {
            let Some(&next) = self.next_chunk.get(c as usize) else {
                break;
            };
            let at = base + c as usize * CHUNK;
            for m in self.marks.get(at..at + CHUNK).into_iter().flatten() {
                m.store(0, Ordering::Release);
            }
            self.free_chunks.push(c);
            c = next;
        }
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
        let mut r = Requests::new(2, 0);
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

    #[test]
    fn vectored_marks_fill_chunks_and_a_held_request_keeps_them() {
        let mut r = Requests::new(2, 3);
        let pieces: Vec<*const c_void> = (1..=20).map(|k| (k * 0x1000) as *const c_void).collect();
        let a = r
            .take_vectored(None, std::ptr::null_mut(), &pieces)
            .unwrap();
        let marked: Vec<usize> = r.marks()[4..]
            .iter()
            .map(|m| m.load(Ordering::Relaxed))
            .filter(|&m| m != 0)
            .collect();
        assert_eq!(marked.len(), 20, "every piece marked once");
        assert!((1..=20).all(|k| marked.contains(&(k * 0x1000))));
        // Two chunks taken, one left: a second request of 17 pieces does not fit.
        assert_eq!(
            r.take_vectored(None, std::ptr::null_mut(), &pieces[..17]),
            None
        );
        let b = r
            .take_vectored(None, std::ptr::null_mut(), &pieces[..3])
            .unwrap();
        r.end(b, false);
        r.end(a, true);
        let left = r.marks()[4..]
            .iter()
            .filter(|m| m.load(Ordering::Relaxed) != 0)
            .count();
        assert_eq!(
            left, 20,
            "the held request's marks stay, the other's are cleared"
        );
        assert_eq!(
            r.take_vectored(None, std::ptr::null_mut(), &pieces[..17]),
            None,
            "its chunks never come back"
        );
        assert!(r
            .take_vectored(None, std::ptr::null_mut(), &pieces[..16])
            .is_some());
    }
}
