//! Command trackers: one per command slot; the command identifier is the tracker index.
//!
//! A request split into several commands (MDTS) has a head tracker that holds the user's tag,
//! buffer, the number of commands still outstanding and the first error.

use crate::spec::Status;
use vfnvme_dma::{DmaBuffer, DmaError, DmaPool};

/// Per-command state. Hot fields first; the PRP list page last.
#[derive(Debug)]
pub struct Tracker {
    /// The head tracker of the request this command belongs to (itself for the head).
    pub parent: u16,
    /// Whether a command is outstanding on this tracker (or, for a head, the request is).
    pub busy: bool,
    /// Head only: commands of the request still outstanding.
    pub remaining: u16,
    /// Head only: the first error status, or success.
    pub status: Status,
    /// Head only: the user's tag.
    pub tag: u64,
    /// Head only: the user's buffer while the request is in flight.
    pub buffer: Option<DmaBuffer>,
    /// This command's PRP list page (also the Dataset Management range page).
    pub prp_list: DmaBuffer,
    /// While free: the next free tracker ([`NO_TRACKER`] at the end of the list).
    next_free: u16,
}

/// The end of the free list (never a tracker index: a queue has at most 65535 trackers).
const NO_TRACKER: u16 = u16::MAX;

/// What a completion did to its request (see [`Trackers::complete`]).
#[derive(Debug)]
pub enum Completed {
    /// The command identifier names no busy tracker: the completion was ignored.
    Unknown,
    /// Other commands of the request are still outstanding.
    Pending,
    /// The request finished: its trackers are free again.
    Done {
        /// The user's tag.
        tag: u64,
        /// Success, or the first error among the request's commands.
        status: Status,
        /// The user's buffer.
        buffer: Option<DmaBuffer>,
    },
}

/// The trackers of a queue pair and the LIFO list of free ones.
///
/// The free list is threaded through the trackers themselves (`next_free`), so taking and
/// returning a tracker touches only that tracker: no separate stack, no allocation.
#[derive(Debug)]
pub struct Trackers {
    slots: Box<[Tracker]>,
    /// The first free tracker, or [`NO_TRACKER`].
    free_head: u16,
    free_count: usize,
}

impl Trackers {
    /// `count` (at most 65535) trackers, each with a 4 KiB PRP list page.
    pub fn new(pool: &DmaPool, count: usize) -> Result<Self, DmaError> {
        let count = count.min(NO_TRACKER as usize);
        let mut slots = Vec::with_capacity(count);
        for i in 0..count {
            slots.push(Tracker {
                parent: i as u16,
                busy: false,
                remaining: 0,
                status: Status::SUCCESS,
                tag: 0,
                buffer: None,
                prp_list: pool.alloc(crate::queue::prp::PAGE_SIZE)?,
                next_free: if i + 1 < count {
                    (i + 1) as u16
                } else {
                    NO_TRACKER
                },
            });
        }
        // Pop order: 0, 1, 2, ...
        Ok(Trackers {
            free_head: if count > 0 { 0 } else { NO_TRACKER },
            free_count: count,
            slots: slots.into_boxed_slice(),
        })
    }
    /// Total trackers.
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
    /// Free trackers.
    #[inline(always)]
    pub fn free_count(&self) -> usize {
        self.free_count
    }
    /// Takes a free tracker (no allocation: the trackers were preallocated).
    #[inline(always)]
    pub fn alloc(&mut self) -> Option<u16> {
        self.alloc_mut().map(|(idx, _)| idx)
    }
    /// Takes a free tracker and returns it with its index, marked busy.
    #[inline(always)]
    pub fn alloc_mut(&mut self) -> Option<(u16, &mut Tracker)> {
        let idx = self.free_head;
        // An empty list (`NO_TRACKER`) fails this lookup too.
        let t = self.slots.get_mut(idx as usize)?;
        self.free_head = t.next_free;
        self.free_count = self.free_count.saturating_sub(1);
        t.busy = true;
        Some((idx, t))
    }
    /// Returns a tracker to the free list. Ignores a tracker that is not busy.
    #[inline(always)]
    pub fn release(&mut self, idx: u16) {
        if let Some(t) = self.slots.get_mut(idx as usize) {
            if t.busy {
                t.busy = false;
                t.next_free = self.free_head;
                self.free_head = idx;
                self.free_count += 1;
            }
        }
    }
    /// Records the completion of command `cid` with the CQE's 15-bit status `field` (without
    /// the phase bit): frees a non-head command's tracker, counts the command against its
    /// request, and when it was the request's last outstanding command frees the head too and
    /// hands back the request's result.
    #[inline(always)]
    pub fn complete(&mut self, cid: u16, field: u16) -> Completed {
        let Some(t) = self.slots.get_mut(cid as usize) else {
            return Completed::Unknown;
        };
        if !t.busy {
            return Completed::Unknown;
        }
        let head = t.parent;
        let h = if head == cid {
            t
        } else {
            t.busy = false;
            t.next_free = self.free_head;
            self.free_head = cid;
            self.free_count += 1;
            match self.slots.get_mut(head as usize) {
                Some(h) if h.busy => h,
                _ => return Completed::Pending,
            }
        };
        // SCT (bits 10:8) and SC (bits 7:0) both zero: success, nothing to decode.
        if field & 0x7ff != 0 && h.status.is_success() {
            h.status = Status::from_field(field);
        }
        h.remaining = h.remaining.saturating_sub(1);
        if h.remaining != 0 {
            return Completed::Pending;
        }
        h.busy = false;
        h.next_free = self.free_head;
        self.free_head = head;
        self.free_count += 1;
        Completed::Done {
            tag: h.tag,
            status: h.status,
            buffer: h.buffer.take(),
        }
    }
    /// The tracker `idx`, if it exists.
    #[inline(always)]
    pub fn get_mut(&mut self, idx: u16) -> Option<&mut Tracker> {
        self.slots.get_mut(idx as usize)
    }
    /// The tracker `idx`, if it exists.
    #[inline(always)]
    pub fn get(&self, idx: u16) -> Option<&Tracker> {
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
        let mut t = Trackers::new(&pool, 3).unwrap();
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

    /// Sets up a request of `cids.len()` commands headed by `cids[0]`.
    fn request(t: &mut Trackers, cids: &[u16], tag: u64) {
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
        let mut t = Trackers::new(&pool, 4).unwrap();
        let cids: Vec<u16> = (0..3).map(|_| t.alloc().unwrap()).collect();
        request(&mut t, &cids, 42);
        assert_eq!(t.free_count(), 1);
        // A child fails first (SCT 0, SC 0x80), then another error: the first one is kept.
        assert!(matches!(t.complete(cids[2], 0x80), Completed::Pending));
        assert_eq!(t.free_count(), 2, "the child's tracker is free at once");
        assert!(matches!(t.complete(cids[2], 0x81), Completed::Unknown));
        assert!(matches!(t.complete(cids[0], 0x02), Completed::Pending));
        match t.complete(cids[1], 0) {
            Completed::Done {
                tag,
                status,
                buffer,
            } => {
                assert_eq!(tag, 42);
                assert_eq!(status, Status::from_field(0x80));
                assert!(buffer.is_none());
            }
            other => panic!("expected the request to finish, got {other:?}"),
        }
        assert_eq!(t.free_count(), 4);
        assert!(matches!(t.complete(cids[0], 0), Completed::Unknown));
        assert!(matches!(t.complete(9, 0), Completed::Unknown));
        // Success bits other than SCT/SC (e.g. DNR alone) do not count as an error.
        let c = t.alloc().unwrap();
        request(&mut t, &[c], 7);
        match t.complete(c, 1 << 14) {
            Completed::Done { status, .. } => assert!(status.is_success()),
            other => panic!("expected the request to finish, got {other:?}"),
        }
    }
}
