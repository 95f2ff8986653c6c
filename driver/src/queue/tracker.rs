//! Command trackers: one per command slot. The command identifier is the tracker index in its
//! low bits and a generation in the bits above (those the index does not need), bumped each
//! time the tracker is taken: a completion entry that names a tracker's previous command (a
//! device that posts a completion twice, late) does not match its current identifier and is
//! ignored instead of ending the request that now uses the tracker. A queue pair has at most
//! [`MAX_TRACKERS`] trackers, so that every identifier keeps at least six generation bits
//! (64 generations) whatever the ring size (the spec allows 65,536 entries): a duplicate or
//! late completion is ignored unless its tracker was taken 64 times since.
//!
//! Recovery ends requests without the device ([`Trackers::end_all`]): each ended request's
//! trackers get a new generation at once (a late completion of its commands ends nothing) and
//! its head waits in a queue until a poll delivers it ([`Trackers::next_ended`]), however few
//! completions that poll takes. When the device may still use the memory of the requests it
//! ended (a controller that could not be disabled), their trackers are retired instead of
//! freed: never handed out again, so that the slot, the buffer marks indexed by it and the
//! buffer stay held for the life of the queue pair.
//!
//! A request split into several commands (MDTS) has a head tracker that holds the user's tag,
//! buffer, the number of commands still outstanding and the first error.

use crate::spec::Status;
use vfnvme_hal::{DmaBuffer, DmaPool, HalError};

/// The most trackers (commands in flight) a queue pair has, as SPDK's PCIe transport: 10 index
/// bits leave 6 generation bits in a 16-bit command identifier (Linux's `nvme_cid` keeps 4).
pub const MAX_TRACKERS: usize = 1024;

/// Per-command state. Hot fields first; the PRP list page last. `T` is the caller's payload of
/// a request (a `u64` tag for Rust callers; the C ABI keeps its callback and argument here).
#[derive(Debug)]
pub struct Tracker<T> {
    /// The head tracker of the request this command belongs to (itself for the head).
    pub parent: u16,
    /// 0 while free. While a command is outstanding on this tracker (or, for a head, the
    /// request is): [`FRESH`] plus the timeout checks it has lived through (saturating within
    /// [`AGE`]), with [`ABORT_SENT`] set once an Abort went out for it. [`ENDED`]: ended by
    /// recovery, a head waiting for delivery or a retired tracker (with [`HELD`]: the device
    /// may still use the memory of its request, so it is retired once delivered, or at once
    /// for another command of the request).
    pub busy: u8,
    /// Head only: commands of the request still outstanding.
    pub remaining: u16,
    /// Head only: the first error status, or success.
    pub status: Status,
    /// Head only: the caller's payload of the request.
    pub tag: T,
    /// Head only: the user's buffer while the request is in flight.
    pub buffer: Option<DmaBuffer>,
    /// This command's PRP list page (also the Dataset Management range page).
    pub prp_list: DmaBuffer,
    /// While free: the next free tracker; while a head ended by recovery waits for delivery:
    /// the next such head ([`NO_TRACKER`] at the end of either list).
    next_free: u16,
    /// The command identifier of this tracker's current (or last) command: its index plus
    /// its generation (see the module documentation).
    pub cid: u16,
}

impl<T> Tracker<T> {
    /// Gives a freshly allocated tracker its request's buffer. A free tracker holds none (the
    /// completion and every failure path take it), so there is nothing to drop; were that ever
    /// broken, the old buffer would be leaked (never handed out again), not freed.
    #[inline(always)]
    pub fn set_buffer(&mut self, buf: Option<DmaBuffer>) {
        let stale = std::mem::replace(&mut self.buffer, buf);
        debug_assert!(stale.is_none(), "a free tracker held a buffer");
        std::mem::forget(stale);
    }
}

/// The end of the free list (never a tracker index: a queue has at most 65535 trackers).
const NO_TRACKER: u16 = u16::MAX;
/// [`Tracker::busy`] of a command just submitted.
pub const FRESH: u8 = 1;
/// [`Tracker::busy`] flag: an Abort was sent for this command.
pub const ABORT_SENT: u8 = 0x80;
/// [`Tracker::busy`] flag: ended by recovery (see [`Trackers::end_all`]).
pub const ENDED: u8 = 0x40;
/// [`Tracker::busy`] flag with [`ENDED`]: the device may still use the request's memory.
pub const HELD: u8 = 0x20;
/// [`Tracker::busy`] bits that count the timeout checks a command lived through.
pub const AGE: u8 = 0x1f;

/// A command found by [`Trackers::age`] that has outlived the timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overdue {
    /// Its command identifier.
    pub cid: u16,
    /// Whether an Abort was sent for it already.
    pub abort_sent: bool,
}

/// Why [`Trackers::finish_ok`] finished no request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfinished {
    /// Other commands of the request are still outstanding.
    Pending,
    /// The command identifier names no busy tracker: the completion was ignored.
    Unknown,
}

/// What a completion did to its request (see [`Trackers::complete`]).
#[derive(Debug)]
pub enum Completed<T> {
    /// The command identifier names no busy tracker: the completion was ignored.
    Unknown,
    /// Other commands of the request are still outstanding.
    Pending,
    /// The request finished: its trackers are free again.
    Done {
        /// The caller's payload of the request.
        tag: T,
        /// Success, or the first error among the request's commands.
        status: Status,
        /// Dword 0 of the request's last completion entry (command specific).
        cdw0: u32,
        /// The request's head tracker (its slot).
        slot: u16,
        /// The user's buffer.
        buffer: Option<DmaBuffer>,
    },
}

/// A request ended by recovery, as [`Trackers::next_ended`] delivers it.
#[derive(Debug)]
pub struct Ended<T> {
    /// Its head tracker (its slot).
    pub slot: u16,
    /// The caller's payload of the request.
    pub tag: T,
    /// The status recovery gave it.
    pub status: Status,
    /// The user's buffer (`None` when the device may still use it: it was leaked).
    pub buffer: Option<DmaBuffer>,
    /// The device may still use the request's memory (see [`HELD`]).
    pub memory_held: bool,
}

/// The trackers of a queue pair and the LIFO list of free ones.
///
/// The free list is threaded through the trackers themselves (`next_free`), so taking and
/// returning a tracker touches only that tracker: no separate stack, no allocation.
#[derive(Debug)]
pub struct Trackers<T> {
    slots: Box<[Tracker<T>]>,
    /// The first free tracker, or [`NO_TRACKER`].
    free_head: u16,
    /// How many trackers are on the free list (at most [`MAX_TRACKERS`]).
    free_count: u16,
    /// The index bits of a command identifier.
    idx_mask: u16,
    /// One generation: added to a tracker's identifier each time it is taken.
    gen_step: u16,
    /// The first and last heads of requests ended by recovery and not yet delivered (a FIFO
    /// threaded through `next_free`, as the free list is), or [`NO_TRACKER`].
    ended_head: u16,
    ended_tail: u16,
    /// How many heads wait in that list.
    ended_len: u16,
    /// Trackers retired for good ([`HELD`]).
    retired: u16,
    /// Closed for good (see [`close`](Self::close)).
    closed: bool,
}

impl<T: Copy + Default> Trackers<T> {
    /// `count` (at most [`MAX_TRACKERS`]) trackers, each with a 4 KiB PRP list page.
    pub fn new(pool: &DmaPool, count: usize) -> Result<Self, HalError> {
        let count = count.min(MAX_TRACKERS);
        let idx_bits = u16::BITS - (count.saturating_sub(1) as u16).leading_zeros();
        let idx_mask = ((1u32 << idx_bits) - 1) as u16;
        let gen_step = (1u32 << idx_bits) as u16;
        let mut slots = Vec::with_capacity(count);
        for i in 0..count {
            slots.push(Tracker {
                parent: i as u16,
                busy: 0,
                remaining: 0,
                status: Status::SUCCESS,
                tag: T::default(),
                buffer: None,
                prp_list: pool.alloc(crate::queue::prp::PAGE_SIZE)?,
                next_free: if i + 1 < count {
                    (i + 1) as u16
                } else {
                    NO_TRACKER
                },
                // The first command on it gets generation 0: its identifier is its index.
                cid: (i as u16).wrapping_sub(gen_step),
            });
        }
        // Pop order: 0, 1, 2, ...
        Ok(Trackers {
            free_head: if count > 0 { 0 } else { NO_TRACKER },
            free_count: count as u16,
            slots: slots.into_boxed_slice(),
            idx_mask,
            gen_step,
            ended_head: NO_TRACKER,
            ended_tail: NO_TRACKER,
            ended_len: 0,
            retired: 0,
            closed: false,
        })
    }
    /// Total trackers.
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
    /// Trackers in service: all but those retired because the device may still use their
    /// request's memory. `in_service() - free_count()` requests' commands are outstanding
    /// (ended requests not yet delivered among them).
    #[inline(always)]
    pub fn in_service(&self) -> usize {
        self.slots.len() - usize::from(self.retired)
    }
    /// Why no tracker (or not `needed` of them) could be taken: the queue pair is full, or
    /// [`close`](Self::close)d.
    #[cold]
    #[inline(never)]
    pub fn full(&self, needed: usize) -> crate::error::SubmitErrorKind {
        if self.closed {
            return crate::error::SubmitErrorKind::ControllerStuck;
        }
        crate::error::SubmitErrorKind::QueueFull {
            free: self.free_count(),
            needed,
        }
    }
    /// Retires every free tracker for good: the device may still use the queue's memory
    /// (rings included), so no command is ever sent on it again.
    #[cold]
    pub fn close(&mut self) {
        while let Some(t) = self.slots.get_mut(self.free_head as usize) {
            self.free_head = t.next_free;
            t.busy = ENDED | HELD;
            self.retired += 1;
        }
        self.free_head = NO_TRACKER;
        self.free_count = 0;
        self.closed = true;
    }
    /// Requests ended by recovery and not yet delivered.
    #[inline(always)]
    pub fn ended_count(&self) -> usize {
        usize::from(self.ended_len)
    }
    /// Free trackers.
    #[inline(always)]
    pub fn free_count(&self) -> usize {
        usize::from(self.free_count)
    }
    /// The tracker the next [`Trackers::alloc`] or [`Trackers::alloc_mut`] takes, if any.
    #[cfg(test)]
    pub fn next_free(&self) -> Option<u16> {
        (self.free_head != NO_TRACKER).then_some(self.free_head)
    }
    /// Takes a free tracker (no allocation: the trackers were preallocated).
    #[inline(always)]
    pub fn alloc(&mut self) -> Option<u16> {
        self.alloc_mut().map(|(idx, _)| idx)
    }
    /// Takes a free tracker and returns it with its index, marked busy.
    #[inline(always)]
    pub fn alloc_mut(&mut self) -> Option<(u16, &mut Tracker<T>)> {
        let idx = self.free_head;
        // An empty list (`NO_TRACKER`) fails this lookup too.
        let t = self.slots.get_mut(idx as usize)?;
        self.free_head = t.next_free;
        // A tracker was on the free list, so `free_count` >= 1: no wrap.
        self.free_count = self.free_count.wrapping_sub(1);
        t.busy = FRESH;
        t.cid = t.cid.wrapping_add(self.gen_step);
        Some((idx, t))
    }
    /// Gives back tracker `idx`, just taken for a submission that failed before it reached the
    /// ring (never ended, so never retired).
    #[inline(always)]
    pub fn unwind(&mut self, idx: u16) {
        if let Some(t) = self.slots.get_mut(idx as usize) {
            if t.busy != 0 {
                t.busy = 0;
                t.next_free = self.free_head;
                self.free_head = idx;
                self.free_count += 1;
            }
        }
    }
    /// Returns a tracker to the free list. Ignores a tracker that is not busy, and a retired
    /// one (the device may still use its request's memory).
    #[inline(always)]
    pub fn release(&mut self, idx: u16) {
        if let Some(t) = self.slots.get_mut(idx as usize) {
            if t.busy != 0 && t.busy & HELD == 0 {
                t.busy = 0;
                t.next_free = self.free_head;
                self.free_head = idx;
                self.free_count += 1;
            }
        }
    }
    /// Records the completion of command `cid` with the CQE's 15-bit status `field` (without the
    /// phase bit) and dword 0 `cdw0`: frees a non-head command's tracker, counts the command
    /// against its request, and when it was the request's last outstanding command frees the head
    /// too and hands back the request's result.
    #[inline(always)]
    pub fn complete(&mut self, cid: u16, field: u16, cdw0: u32) -> Completed<T> {
        self.complete_with(cid, field, cdw0)
    }
    /// [`Trackers::complete`] of a command that succeeded (status field 0), for the hot path:
    /// the head tracker of a request that finished (freed, its tag and buffer still in place,
    /// the buffer to be taken) and its slot, or what happened; no [`Completed`] is built, so
    /// that nothing has to tell its variants apart again, and the buffer is moved once,
    /// straight to where the caller puts it.
    #[inline(always)]
    pub fn finish_ok(&mut self, cid: u16) -> Result<(u16, &mut Tracker<T>), Unfinished> {
        self.finish(cid, 0)
    }
    #[inline(always)]
    fn complete_with(&mut self, cid: u16, field: u16, cdw0: u32) -> Completed<T> {
        match self.finish(cid, field) {
            Ok((head, h)) => Completed::Done {
                tag: h.tag,
                status: h.status,
                cdw0,
                slot: head,
                buffer: h.buffer.take(),
            },
            Err(Unfinished::Pending) => Completed::Pending,
            Err(_) => Completed::Unknown,
        }
    }
    /// Ends command `cid` with status `field`: the head tracker of its request if that
    /// finished (freed, its tag and buffer still in place) and its index, else what happened.
    #[inline(always)]
    fn finish(&mut self, cid: u16, field: u16) -> Result<(u16, &mut Tracker<T>), Unfinished> {
        let idx = cid & self.idx_mask;
        let Some(t) = self.slots.get(idx as usize) else {
            return Err(Unfinished::Unknown);
        };
        // A free tracker, or another generation's command: not a command in flight.
        if t.busy == 0 || t.cid != cid {
            return Err(Unfinished::Unknown);
        }
        let head = t.parent;
        let h = if head == idx {
            // In bounds: checked just above (the compiler drops this second check).
            &mut self.slots[idx as usize]
        } else {
            let t = &mut self.slots[idx as usize];
            t.busy = 0;
            t.next_free = self.free_head;
            self.free_head = idx;
            self.free_count += 1;
            match self.slots.get_mut(head as usize) {
                Some(h) if h.busy != 0 => h,
                _ => return Err(Unfinished::Pending),
            }
        };
        // SCT (bits 10:8) and SC (bits 7:0) both zero: success, nothing to decode.
        if field & 0x7ff != 0 && h.status.is_success() {
            h.status = Status::from_field(field);
        }
        // A busy head counts at least this command (the last one frees it): no wrap.
        h.remaining = h.remaining.wrapping_sub(1);
        if h.remaining != 0 {
            return Err(Unfinished::Pending);
        }
        h.busy = 0;
        h.next_free = self.free_head;
        self.free_head = head;
        self.free_count += 1;
        Ok((head, h))
    }
    /// One timeout check: every outstanding command ages by one check; returns the first
    /// that has now lived through more than `checks` of them (its age saturates there), or
    /// `None`. Control path: O(trackers), run at most once per check interval.
    pub fn age(&mut self, checks: u8) -> Option<Overdue> {
        let limit = checks.clamp(1, AGE - 2);
        let mut overdue = None;
        for t in self.slots.iter_mut() {
            // Ended requests are no longer the device's: nothing to time out.
            if t.busy == 0 || t.busy & ENDED != 0 {
                continue;
            }
            let abort_sent = t.busy & ABORT_SENT != 0;
            let age = (t.busy & AGE).saturating_add(1).min(limit + FRESH + 1);
            t.busy = age | (t.busy & ABORT_SENT);
            if age > limit + FRESH && overdue.is_none() {
                overdue = Some(Overdue {
                    cid: t.cid,
                    abort_sent,
                });
            }
        }
        overdue
    }
    /// Marks that an Abort was sent for command `cid` and restarts its age, so that it gets a
    /// second timeout to complete before the next step.
    pub fn mark_abort_sent(&mut self, cid: u16) {
        let idx = cid & self.idx_mask;
        if let Some(t) = self
            .slots
            .get_mut(idx as usize)
            .filter(|t| t.busy != 0 && t.cid == cid)
        {
            t.busy = FRESH | ABORT_SENT;
        }
    }
    /// Ends every request in flight (not ended already) with `status`, without the device:
    /// the device provably stopped (a reset's disable) or can't be reached, or, with `held`,
    /// it may still use the requests' memory (it could not be disabled). Each of their
    /// trackers gets a new generation, so that a late completion of its command ends nothing;
    /// each head waits for [`next_ended`](Self::next_ended). With `held`, the owned buffers go
    /// to `keep` (to be leaked) and the trackers are retired instead of freed. Returns how many
    /// requests ended.
    pub fn end_all(
        &mut self,
        status: Status,
        held: bool,
        mut keep: impl FnMut(DmaBuffer),
    ) -> usize {
        let mut n = 0;
        for idx in 0..self.slots.len() as u16 {
            let Some(t) = self.slots.get(idx as usize) else {
                break;
            };
            if t.busy == 0 || t.busy & ENDED != 0 {
                continue;
            }
            if t.parent == idx {
                self.end_head(idx, status, held, &mut keep);
                n += 1;
            } else {
                self.end_command(idx, held);
            }
        }
        n
    }
    /// Ends the request headed by `idx` with `status` (see [`end_all`](Self::end_all)); its
    /// other commands' trackers are the caller's to end ([`end_command`](Self::end_command)).
    pub fn end_head(
        &mut self,
        idx: u16,
        status: Status,
        held: bool,
        mut keep: impl FnMut(DmaBuffer),
    ) {
        let Some(t) = self.unended(idx) else {
            return;
        };
        t.busy |= if held { ENDED | HELD } else { ENDED };
        t.status = status;
        if held {
            if let Some(b) = t.buffer.take() {
                keep(b);
            }
        }
        t.next_free = NO_TRACKER;
        match self.slots.get_mut(self.ended_tail as usize) {
            Some(tail) => tail.next_free = idx,
            None => self.ended_head = idx,
        }
        self.ended_tail = idx;
        self.ended_len += 1;
    }
    /// Tracker `idx` if it is busy and not ended yet, its command given a new generation (a late
    /// completion of it then ends nothing).
    fn unended(&mut self, idx: u16) -> Option<&mut Tracker<T>> {
        let step = self.gen_step;
        let t = self
            .slots
            .get_mut(idx as usize)
            .filter(|t| t.busy != 0 && t.busy & ENDED == 0)?;
        t.cid = t.cid.wrapping_add(step);
        Some(t)
    }
    /// Ends command tracker `idx` of an ended request that is not its head: freed, or retired
    /// with `held`.
    pub fn end_command(&mut self, idx: u16, held: bool) {
        let Some(t) = self.unended(idx) else {
            return;
        };
        if held {
            t.busy |= ENDED | HELD;
            self.retired += 1;
        } else {
            self.release(idx);
        }
    }
    /// The next request ended by recovery, in the order they ended: its head tracker is freed
    /// now, or retired if the device may still use the request's memory.
    pub fn next_ended(&mut self) -> Option<Ended<T>> {
        let slot = self.ended_head;
        let t = self.slots.get_mut(slot as usize)?;
        self.ended_head = t.next_free;
        if self.ended_head == NO_TRACKER {
            self.ended_tail = NO_TRACKER;
        }
        self.ended_len -= 1;
        let ended = Ended {
            slot,
            tag: t.tag,
            status: t.status,
            buffer: t.buffer.take(),
            memory_held: t.busy & HELD != 0,
        };
        if ended.memory_held {
            self.retired += 1;
        } else {
            self.release(slot);
        }
        Some(ended)
    }
    /// The index of the busy tracker whose current command is `cid`, if any.
    pub fn busy_index(&self, cid: u16) -> Option<u16> {
        let idx = cid & self.idx_mask;
        self.slots
            .get(idx as usize)
            .filter(|t| t.busy != 0 && t.cid == cid)
            .map(|_| idx)
    }
    /// Tracker `idx`'s command is sent again: a new identifier (the next generation, so that a
    /// late completion of the earlier attempt is ignored), returned, and a fresh age. The
    /// Abort flag is kept.
    pub fn renew(&mut self, idx: u16) -> u16 {
        let step = self.gen_step;
        match self.slots.get_mut(idx as usize) {
            Some(t) => {
                t.cid = t.cid.wrapping_add(step);
                t.busy = FRESH | (t.busy & ABORT_SENT);
                t.cid
            }
            None => 0,
        }
    }
    /// The command identifier of tracker `idx`'s current command (0 if there is no such
    /// tracker).
    #[inline(always)]
    pub fn cid(&self, idx: u16) -> u16 {
        self.slots.get(idx as usize).map_or(0, |t| t.cid)
    }
    /// The tracker `idx`, if it exists.
    #[inline(always)]
    pub fn get_mut(&mut self, idx: u16) -> Option<&mut Tracker<T>> {
        self.slots.get_mut(idx as usize)
    }
    /// The tracker `idx`, if it exists.
    #[inline(always)]
    pub fn get(&self, idx: u16) -> Option<&Tracker<T>> {
        self.slots.get(idx as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::ring::tests::test_pool;

    #[test]
    fn lifo_and_no_double_free() {
        let pool = test_pool();
        let mut t = Trackers::<u64>::new(&pool, 3).unwrap();
        assert_eq!(t.alloc(), Some(0));
        assert_eq!(t.alloc(), Some(1));
        t.release(0);
        t.release(0); // ignored
        assert_eq!(t.free_count(), 2);
        assert_eq!(t.alloc(), Some(0), "last freed is reused first");
        assert_eq!(t.alloc(), Some(2));
        assert_eq!(t.alloc(), None);
        t.release(7); // out of range: ignored
        assert_eq!(t.free_count(), 0);
    }

    #[test]
    fn a_late_duplicate_of_a_previous_command_does_not_end_the_next_one() {
        let pool = test_pool();
        let mut t = Trackers::<u64>::new(&pool, 255).unwrap();
        let idx = t.alloc().unwrap();
        let first = t.cid(idx);
        assert_eq!(first, idx, "the first command's identifier is its index");
        request(&mut t, &[idx], 1);
        assert!(matches!(
            t.complete(first, 0, 0),
            Completed::Done { tag: 1, .. }
        ));
        // The tracker is reused at once (LIFO) for another request, with a new identifier.
        assert_eq!(t.alloc(), Some(idx));
        let second = t.cid(idx);
        assert_ne!(second, first);
        assert_eq!(second & 0xff, idx, "the index stays in the low bits");
        request(&mut t, &[idx], 2);
        // The device posts the first completion again: ignored, the second request goes on.
        assert!(matches!(t.complete(first, 0, 0), Completed::Unknown));
        assert!(matches!(
            t.complete(second, 0, 0),
            Completed::Done { tag: 2, .. }
        ));
        // 256 generations later the identifier comes round again (8 index bits, 8 generation).
        for _ in 0..254 {
            let i = t.alloc().unwrap();
            t.release(i);
        }
        assert_eq!(t.alloc(), Some(idx));
        assert_eq!(t.cid(idx), first);
    }

    #[test]
    fn every_queue_size_keeps_64_generations() {
        let pool = test_pool();
        // A ring of 65,536 entries asks for 65,535 trackers: capped, 10 index bits.
        let mut t = Trackers::<u64>::new(&pool, 65_535).unwrap();
        assert_eq!(t.capacity(), MAX_TRACKERS);
        let idx = t.alloc().unwrap();
        let first = t.cid(idx);
        let mut seen = vec![first];
        for _ in 0..63 {
            t.release(idx);
            assert_eq!(t.alloc(), Some(idx), "LIFO: the same tracker again");
            let cid = t.cid(idx);
            assert_eq!(cid & 0x3ff, idx, "the index stays in the low 10 bits");
            assert!(
                !seen.contains(&cid),
                "identifier {cid:#x} came round within 64 uses"
            );
            seen.push(cid);
        }
        request(&mut t, &[idx], 5);
        for &old in &seen[..63] {
            assert!(matches!(t.complete(old, 0, 0), Completed::Unknown));
        }
        assert!(matches!(
            t.complete(seen[63], 0, 0),
            Completed::Done { tag: 5, .. }
        ));
    }

    #[test]
    fn ended_requests_wait_for_delivery_and_held_ones_are_retired() {
        let pool = test_pool();
        let mut t = Trackers::<u64>::new(&pool, 8).unwrap();
        let a = t.alloc().unwrap();
        request(&mut t, &[a], 1);
        let (b, c) = (t.alloc().unwrap(), t.alloc().unwrap());
        request(&mut t, &[b, c], 2);
        let (cid_a, cid_c) = (t.cid(a), t.cid(c));
        assert_eq!(t.end_all(Status::ABORTED_BY_RESET, false, drop), 2);
        assert_eq!(t.ended_count(), 2);
        assert_eq!(
            t.free_count(),
            6,
            "the split request's second command is free at once"
        );
        // A late completion of an ended command ends nothing.
        assert!(matches!(t.complete(cid_a, 0, 0), Completed::Unknown));
        assert!(matches!(t.complete(cid_c, 0, 0), Completed::Unknown));
        assert_eq!(t.age(1), None, "ended requests do not time out");
        let first = t.next_ended().unwrap();
        assert_eq!((first.slot, first.tag, first.memory_held), (a, 1, false));
        assert_eq!(first.status, Status::ABORTED_BY_RESET);
        assert_eq!(t.free_count(), 7);
        assert_eq!(t.next_ended().unwrap().tag, 2);
        assert!(t.next_ended().is_none());
        assert_eq!((t.free_count(), t.in_service()), (8, 8));

        // Held: the trackers never come back.
        let d = t.alloc().unwrap();
        request(&mut t, &[d], 3);
        let (e, f) = (t.alloc().unwrap(), t.alloc().unwrap());
        request(&mut t, &[e, f], 4);
        assert_eq!(t.end_all(Status::CONTROLLER_LOST, true, drop), 2);
        assert_eq!(
            t.in_service(),
            7,
            "the held request's other command is retired at once"
        );
        let ended: Vec<_> = std::iter::from_fn(|| t.next_ended()).collect();
        assert!(ended.iter().all(|x| x.memory_held && x.buffer.is_none()));
        assert_eq!((t.in_service(), t.free_count()), (5, 5));
        for i in [d, e, f] {
            t.release(i);
        }
        assert_eq!(t.free_count(), 5, "retired trackers are not released");
        let mut got = Vec::new();
        while let Some(i) = t.alloc() {
            got.push(i);
        }
        assert!(!got.iter().any(|i| [d, e, f].contains(i)), "{got:?}");
    }

    /// Sets up a request of `cids.len()` commands headed by `cids[0]`.
    fn request(t: &mut Trackers<u64>, cids: &[u16], tag: u64) {
        let head = cids[0];
        for &c in cids {
            t.get_mut(c).unwrap().parent = head;
        }
        let h = t.get_mut(head).unwrap();
        h.remaining = cids.len() as u16;
        h.status = Status::SUCCESS;
        h.tag = tag;
    }

    #[test]
    fn complete_counts_commands_keeps_first_error_and_frees_everything() {
        let pool = test_pool();
        let mut t = Trackers::<u64>::new(&pool, 4).unwrap();
        let cids: Vec<u16> = (0..3).map(|_| t.alloc().unwrap()).collect();
        request(&mut t, &cids, 42);
        assert_eq!(t.free_count(), 1);
        // A child fails first (SCT 0, SC 0x80), then another error: the first one is kept.
        assert!(matches!(t.complete(cids[2], 0x80, 0), Completed::Pending));
        assert_eq!(t.free_count(), 2, "the child's tracker is free at once");
        assert!(matches!(t.complete(cids[2], 0x81, 0), Completed::Unknown));
        assert!(matches!(t.complete(cids[0], 0x02, 0), Completed::Pending));
        match t.complete(cids[1], 0, 0) {
            Completed::Done {
                tag,
                status,
                buffer,
                ..
            } => {
                assert_eq!(tag, 42);
                assert_eq!(status, Status::from_field(0x80));
                assert!(buffer.is_none());
            }
            other => panic!("expected the request to finish, got {other:?}"),
        }
        assert_eq!(t.free_count(), 4);
        assert!(matches!(t.complete(cids[0], 0, 0), Completed::Unknown));
        assert!(matches!(t.complete(9, 0, 0), Completed::Unknown));
        // Success bits other than SCT/SC (e.g. DNR alone) do not count as an error.
        let c = t.alloc().unwrap();
        request(&mut t, &[c], 7);
        match t.complete(t.cid(c), 1 << 14, 0) {
            Completed::Done { status, .. } => assert!(status.is_success()),
            other => panic!("expected the request to finish, got {other:?}"),
        }
    }
}
