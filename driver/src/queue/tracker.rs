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
}

/// The trackers of a queue pair and the LIFO stack of free ones.
#[derive(Debug)]
pub struct Trackers {
    slots: Vec<Tracker>,
    free: Vec<u16>,
}

impl Trackers {
    /// `count` trackers, each with a 4 KiB PRP list page.
    pub fn new(pool: &DmaPool, count: usize) -> Result<Self, DmaError> {
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
            });
        }
        // Pop order: 0, 1, 2, ...
        let free = (0..count as u16).rev().collect();
        Ok(Trackers { slots, free })
    }
    /// Total trackers.
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
    /// Free trackers.
    #[inline(always)]
    pub fn free_count(&self) -> usize {
        self.free.len()
    }
    /// Takes a free tracker (no allocation: the stack was preallocated).
    #[inline(always)]
    pub fn alloc(&mut self) -> Option<u16> {
        let idx = self.free.pop()?;
        if let Some(t) = self.slots.get_mut(idx as usize) {
            t.busy = true;
        }
        Some(idx)
    }
    /// Returns a tracker to the stack. Ignores a tracker that is not busy.
    #[inline(always)]
    pub fn release(&mut self, idx: u16) {
        if let Some(t) = self.slots.get_mut(idx as usize) {
            if t.busy {
                t.busy = false;
                // Never exceeds the preallocated capacity: each index is pushed once per alloc.
                self.free.push(idx);
            }
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
}
