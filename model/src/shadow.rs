//! Shadow doorbells and EventIdx (Doorbell Buffer Config) for I/O queues.
//!
//! Policy: an SQ whose MMIO doorbell was rung is "awake": the model reads its shadow tail on
//! every `before_poll` of its CQ and sets EventIdx one behind the consumed tail, so the host's
//! need-event check tells it to skip the MMIO write. When a poll finds nothing new and no
//! completion pending, the SQ falls asleep (EventIdx = tail: ring me). The shadow CQ head is
//! read on every poll. A host whose shadow values disagree with what it rings is not trusted.

use super::core::Core;
use super::dma_engine;
use super::queues::{Cq, Sq};
use super::stats::Event;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Core {
    /// EventIdx of an I/O CQ: one behind the head (the model reads the shadow head whenever it
    /// polls, so it needs no MMIO), or the head itself if the host's shadow can't be trusted.
    pub(super) fn cq_eventidx(&self, qid: usize, cq: &Cq) {
        let v = if cq.shadow_ok {
            (cq.head + cq.size - 1) % cq.size
        } else {
            cq.head
        };
        self.write_eventidx(2 * qid + 1, v);
    }

    /// Shadow doorbell and EventIdx entries are laid out like the doorbells (CAP.DSTRD).
    fn shadow_stride(&self) -> u64 {
        4 << self.cfg.doorbell_stride
    }

    pub(super) fn shadow_on(&self) -> Option<(u64, u64)> {
        let s = self.shadow.load(Ordering::Acquire);
        (s != 0).then(|| (s, self.eventidx.load(Ordering::Acquire)))
    }

    /// Writes EventIdx value `index` (2 * qid for an SQ, 2 * qid + 1 for a CQ) if enabled.
    pub fn write_eventidx(&self, index: usize, value: u32) {
        if let Some((_, ei)) = self.shadow_on() {
            let at = ei.wrapping_add(self.shadow_stride() * index as u64);
            let _ = dma_engine::write_u32(&self.iommu, at, value);
        }
    }

    /// EventIdx of an I/O SQ: while the model polls the shadow tail ("awake") it asks for no
    /// MMIO doorbell (EventIdx one behind the consumed tail, so the host's need-event check
    /// fails for any new tail); asleep, it asks to be rung for the next entry.
    pub fn sq_eventidx(&self, sq: &Sq) {
        let v = if sq.awake {
            (sq.tail + sq.size - 1) % sq.size
        } else {
            sq.tail
        };
        self.write_eventidx(2 * usize::from(sq.qid), v);
    }

    pub(super) fn read_shadow(&self, index: usize) -> Option<u32> {
        let (s, _) = self.shadow_on()?;
        self.counters.queue(index / 2, Event::ShadowRead);
        let at = s.wrapping_add(self.shadow_stride() * index as u64);
        dma_engine::read_u32(&self.iommu, at).ok()
    }

    /// Picks up a new shadow tail of an awake SQ; returns whether there was one.
    pub(super) fn take_shadow_tail(&self, sq: &mut Sq) -> bool {
        match self.read_shadow(2 * usize::from(sq.qid)) {
            Some(tail) if tail != sq.tail && sq.tail_ok(tail) => {
                self.counters
                    .queue(usize::from(sq.qid), Event::ShadowUpdate);
                sq.tail = tail;
                self.run_io_sq(sq);
                true
            }
            _ => false,
        }
    }

    /// Picks up shadow doorbell values of I/O CQ `cqid` and the SQs completing into it.
    ///
    /// The CQ head shadow is always read (the model never needs a CQ head MMIO write). An SQ's
    /// shadow tail is read while the SQ is awake; an awake SQ with nothing new and no pending
    /// completions on its CQ falls asleep and asks for an MMIO doorbell again.
    pub(super) fn poll_shadow(&self, cqid: usize) {
        if cqid == 0 || self.shadow_on().is_none() {
            return;
        }
        if let Some(slot) = self.cqs.get(cqid) {
            let mut g = lock(slot);
            if let Some(cq) = g.as_mut().filter(|cq| cq.shadow_ok) {
                if let Some(head) = self.read_shadow(2 * cqid + 1) {
                    if head != cq.head && cq.head_ok(head) {
                        cq.head = head;
                        self.counters.queue(cqid, Event::ShadowUpdate);
                    }
                    self.cq_eventidx(cqid, cq);
                }
            }
        }
        let mut i = 0;
        while let Some(sqid) = self.cq_sq_at(cqid, i) {
            i += 1;
            let Some(slot) = self.sqs.get(usize::from(sqid)) else {
                continue;
            };
            let mut g = lock(slot);
            let Some(sq) = g.as_mut().filter(|sq| sq.awake) else {
                continue;
            };
            if self.take_shadow_tail(sq) {
                self.sq_eventidx(sq);
                continue;
            }
            let idle = self
                .cqs
                .get(cqid)
                .is_some_and(|q| lock(q).as_ref().is_none_or(|cq| cq.pending.is_empty()));
            if idle {
                sq.awake = false;
                self.sq_eventidx(sq);
                // The host may have moved the tail after our read but before it saw the new
                // EventIdx: look once more, so that no entry is stranded.
                fence(Ordering::SeqCst);
                if self.take_shadow_tail(sq) {
                    sq.awake = true;
                    self.sq_eventidx(sq);
                }
            }
        }
    }

    /// The `i`-th submission queue completing into CQ `cqid`.
    pub(super) fn cq_sq_at(&self, cqid: usize, i: usize) -> Option<u16> {
        let slot = self.cqs.get(cqid)?;
        let g = lock(slot);
        g.as_ref()?.sqs.get(i).copied()
    }
}
