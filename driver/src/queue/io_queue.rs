//! The I/O queue engine: rings + trackers + PRPs + MDTS splitting, independent of the
//! controller (doorbell registers are passed in), so it can be tested against a fake CQ.

use super::deliver::{ByClosure, Deliver};
use super::protection::MetadataFields;
use super::prp;
use super::request::{Data, Op, Request, MAX_BLOCKS_PER_COMMAND, MAX_DSM_RANGES};
use super::retry::RetryBook;
use super::ring::{Rings, ShadowBuffers};
use super::sgl::SglSupport;
use super::tracker::{Ended, Overdue, Trackers, Unfinished};
use crate::error::{SubmitError, SubmitErrorKind};
use crate::platform::RegisterIo;
use crate::spec::command::DsmRange;
use crate::spec::{Command, Status};
use std::sync::Arc;
use vfnvme_hal::{DmaBuffer, DmaPool, HalError};

/// The completion of one I/O request (all of its commands, if it was split). `T` is the payload
/// given at submission (a `u64` tag by default).
#[derive(Debug)]
pub struct IoCompletion<T = u64> {
    /// The payload given at submission.
    pub tag: T,
    /// Success, or the first error among the request's commands.
    pub status: Status,
    /// Dword 0 of the completion entry (command specific; of the last command for a request
    /// split at MDTS).
    pub cdw0: u32,
    /// The request's slot: its head command identifier, which
    /// [`QueuePair::submit`](crate::QueuePair::submit) returned (for side tables indexed per
    /// request).
    pub slot: u16,
    /// The buffer given at submission (`None` for commands without data, and when
    /// `memory_held`).
    pub buffer: Option<DmaBuffer>,
    /// The device may still access the request's memory: it was ended after the controller
    /// could not be disabled. An owned buffer was kept (leaked, `buffer` is `None`); borrowed
    /// memory ([`Data::Span`](super::Data::Span)) must never be freed or reused, and the request's slot
    /// is never given to another request.
    pub memory_held: bool,
}

impl<T> IoCompletion<T> {
    /// Whether the request succeeded.
    #[inline]
    pub fn is_ok(&self) -> bool {
        self.status.is_success()
    }
}

/// Rings and trackers of one I/O queue pair; `T` is the per-request payload the trackers keep
/// (see [`IoCompletion`]).
#[derive(Debug)]
pub struct IoQueue<T = u64> {
    rings: Rings,
    trackers: Trackers<T>,
    /// Largest data transfer per command in bytes (a multiple of 4 KiB, ≤ 2 MiB).
    max_transfer: usize,
    /// CQ slots beyond one per tracker (ring entries - 1 - trackers): room the CQ head
    /// doorbell may be deferred into.
    cq_slack: usize,
    /// Completions ignored because their command identifier named no command in flight.
    spurious: u64,
    /// Copies of the commands in flight for retries (`None`: retries off).
    retry: Option<Box<RetryBook>>,
    /// What the controller says about SGLs (Identify Controller SGLS).
    sgl: SglSupport,
    /// Every read and write goes with SGLs ([`set_sgl`](Self::set_sgl)).
    prefer_sgl: bool,
    /// Largest single-buffer transfer [`submit_rw`](Self::submit_rw) builds in place:
    /// `max_transfer`, or 0 when every request goes with SGLs (all then take the out-of-line
    /// path, at no cost to the one-command path).
    fast_limit: usize,
}

/// One read or write command before it is split or queued: opcode, namespace and blocks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rw {
    nsid: u32,
    opcode: u8,
    lba: u64,
    blocks: u32,
}

/// How a request is split at MDTS: blocks per command, bytes per block in the data buffer, and
/// the metadata and protection fields each command carries (advanced per command).
#[derive(Debug, Clone, Copy)]
pub(super) struct Split {
    per_cmd: u32,
    /// Bytes per block in the data (the block size, plus the metadata for extended LBAs).
    elem: u64,
    metadata: Option<MetadataFields>,
    /// Each command's data goes in one SGL Data Block descriptor instead of PRPs.
    sgl: bool,
}

impl<T: Copy + Default> IoQueue<T> {
    /// Rings of `depth` entries for queue `qid` and `slots` trackers (commands in flight at
    /// most; 0 or more than `depth - 1` mean `depth - 1`, so that outstanding commands never
    /// exceed what the CQ can hold; at most [`super::tracker::MAX_TRACKERS`]). Fewer trackers
    /// than ring entries cost less memory (a PRP list page each) and let the CQ head doorbell
    /// wait longer. `max_transfer` is capped to [`prp::MAX_TRANSFER`] and rounded down to whole
    /// pages. The queue's doorbells are checked against `regs` here (see [`Rings::new`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new<R: RegisterIo + ?Sized>(
        pool: &DmaPool,
        regs: &R,
        qid: u16,
        depth: u32,
        slots: u32,
        dstrd: u8,
        shadow: Option<&Arc<ShadowBuffers>>,
        max_transfer: usize,
    ) -> Result<Self, HalError> {
        let rings = Rings::new(pool, regs, qid, depth, dstrd, shadow)?;
        let cq_capacity = depth.saturating_sub(1) as usize;
        let slots = match slots as usize {
            0 => cq_capacity,
            n => n.min(cq_capacity),
        };
        let trackers = Trackers::new(pool, slots)?;
        let cq_slack = cq_capacity - trackers.capacity();
        let max_transfer = (max_transfer.min(prp::MAX_TRANSFER) / prp::PAGE_SIZE * prp::PAGE_SIZE)
            .max(prp::PAGE_SIZE);
        Ok(IoQueue {
            rings,
            trackers,
            max_transfer,
            cq_slack,
            spurious: 0,
            retry: None,
            sgl: SglSupport::None,
            prefer_sgl: false,
            fast_limit: max_transfer,
        })
    }

    /// Sets what the controller says about SGLs (`sgls`, Identify Controller SGLS) and whether
    /// every read and write goes with SGLs when it has them (`prefer`, SPDK's `enable_sgl`);
    /// without, lists of spans PRPs can't describe take SGLs, all else PRPs.
    pub(crate) fn set_sgl(&mut self, sgls: u32, prefer: bool) {
        self.sgl = SglSupport::from_sgls(sgls);
        self.prefer_sgl = prefer && self.sgl.supported();
        self.fast_limit = if self.prefer_sgl {
            0
        } else {
            self.max_transfer
        };
    }

    /// Whether the controller takes SGLs (Identify Controller SGLS bits 1:0).
    pub fn sgl_supported(&self) -> bool {
        self.sgl.supported()
    }

    /// Whether every read and write goes with SGLs.
    pub fn prefers_sgl(&self) -> bool {
        self.prefer_sgl
    }

    /// Device address of the SQ ring.
    pub fn sq_iova(&self) -> u64 {
        self.rings.sq_iova()
    }
    /// Device address of the CQ ring.
    pub fn cq_iova(&self) -> u64 {
        self.rings.cq_iova()
    }
    /// Ring depth.
    pub fn depth(&self) -> u32 {
        self.rings.depth()
    }
    /// Commands in flight (requests ended by recovery and not yet delivered among them).
    #[inline]
    pub fn outstanding(&self) -> usize {
        self.trackers.in_service() - self.trackers.free_count()
    }
    /// The slot the next submitted request will occupy ([`IoCompletion::slot`] gives it back),
    /// or `None` when no command slot is free: lets a caller fill a side table indexed per
    /// request (as the C ABI's in-flight buffer marks) before the submission.
    #[inline(always)]
    #[cfg(test)]
    pub fn next_slot(&self) -> Option<u16> {
        self.trackers.next_free()
    }
    /// Free command slots.
    #[inline]
    pub fn free_slots(&self) -> usize {
        self.trackers.free_count()
    }
    /// The error of a one-command submission that found no free slot (`buf` comes back in it).
    #[cold]
    #[inline(never)]
    fn no_slot(&self, buf: Option<DmaBuffer>) -> SubmitError {
        SubmitError::new(self.trackers.full(1), buf)
    }
    /// Why a submission needing `needed` command slots can't be queued now: the queue is full
    /// (poll, then submit again), or closed for good ([`SubmitErrorKind::ControllerStuck`]).
    #[cold]
    pub fn why_full(&self, needed: usize) -> SubmitErrorKind {
        self.trackers.full(needed)
    }
    /// Most commands in flight at once (depth - 1).
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.trackers.capacity()
    }
    /// Largest data transfer per command.
    pub fn max_transfer(&self) -> usize {
        self.max_transfer
    }
    /// Whether shadow doorbells are in use.
    pub fn uses_shadow(&self) -> bool {
        self.rings.uses_shadow()
    }

    /// Doorbell updates since the queue was created (with the `doorbell-stats` feature).
    pub fn doorbell_stats(&self) -> Option<super::ring::DoorbellStats> {
        self.rings.doorbell_stats()
    }

    /// Queues `req` (split at MDTS if it must be); returns its slot ([`IoCompletion::slot`]).
    /// Not visible to the controller until [`IoQueue::commit`] or a poll. The request was
    /// checked when it was made; here only a free slot and its descriptors can fail.
    #[inline(always)]
    pub(crate) fn submit(&mut self, req: Request<'_, T>) -> Result<u16, SubmitError> {
        match req.op {
            Op::Read | Op::Write => match req.protection.fields {
                None if !matches!(req.data, Data::Spans(_)) => self.submit_rw(req),
                None => {
                    let split = self.plain_split(req.lba_shift);
                    self.submit_described(req, split)
                }
                Some(f) => self.submit_rw_metadata(req, f),
            },
            Op::Flush => self.submit_flush(req),
            Op::WriteZeroes => self.submit_zeroes(req),
            Op::Deallocate => self.submit_deallocate(req),
        }
    }

    /// [`submit`](Self::submit) of a read or write. The common case fits one command: one
    /// tracker, PRPs built in place, the SQE written straight into the ring; a larger one is
    /// split at MDTS, and so is every one on a queue pair that sends all with SGLs (one Data
    /// Block per command). Lists of spans never come here ([`submit`](Self::submit) sends them
    /// to the out-of-line `submit_described`).
    #[inline(always)]
    pub(crate) fn submit_rw(&mut self, req: Request<'_, T>) -> Result<u16, SubmitError> {
        let bytes = req.bytes();
        let (iova, buf) = match req.data {
            Data::Owned(b) => (b.iova(), Some(b)),
            Data::Span(s) => (s.iova(), None),
            // `Request::rw` gives reads and writes data; `submit` sends lists elsewhere.
            Data::None | Data::Ranges(_) | Data::Spans(_) => (0, None),
        };
        if bytes > self.fast_limit as u64 || req.blocks > MAX_BLOCKS_PER_COMMAND {
            let rw = Rw {
                nsid: req.nsid,
                opcode: req.op.opcode(),
                lba: req.lba,
                blocks: req.blocks,
            };
            let split = self.plain_split(req.lba_shift);
            return self.submit_split(rw, split, Some(iova), buf, req.tag);
        }
        let Some((idx, t)) = self.trackers.alloc_mut() else {
            return Err(self.no_slot(buf));
        };
        let list_iova = t.prp_list.iova();
        let page = t.prp_list.as_mut_slice();
        let (prp1, prp2) = match prp::build(iova, bytes as usize, page, list_iova) {
            Ok(p) => p,
            Err(e) => {
                self.trackers.unwind(idx);
                return Err(SubmitError::new(e.into(), buf));
            }
        };
        t.parent = idx;
        t.remaining = 1;
        t.status = Status::SUCCESS;
        t.tag = req.tag;
        t.set_buffer(buf);
        let cid = t.cid;
        let mut cmd = Command::rw_n(req.op.opcode(), req.nsid, req.lba, req.blocks);
        cmd.set_cid(cid);
        cmd.set_prps(prp1, prp2);
        self.rings.push(&cmd);
        Ok(idx)
    }

    /// A read or write with metadata or protection information: the fields go into every
    /// command, which the split (at MDTS, counting extended LBAs' metadata) advances.
    #[inline(never)]
    fn submit_rw_metadata(
        &mut self,
        req: Request<'_, T>,
        fields: MetadataFields,
    ) -> Result<u16, SubmitError> {
        let elem = u64::from(fields.elem.max(1));
        let per_cmd = (self.max_transfer as u64 / elem).clamp(1, MAX_BLOCKS_PER_COMMAND.into());
        let split = Split {
            per_cmd: per_cmd as u32,
            elem,
            metadata: Some(fields),
            sgl: self.prefer_sgl,
        };
        self.submit_described(req, split)
    }

    /// How a plain read or write of blocks of `1 << lba_shift` bytes is split at MDTS.
    #[inline(always)]
    fn plain_split(&self, lba_shift: u8) -> Split {
        Split {
            per_cmd: ((self.max_transfer >> lba_shift) as u32).clamp(1, MAX_BLOCKS_PER_COMMAND),
            elem: 1u64 << lba_shift,
            metadata: None,
            sgl: self.prefer_sgl,
        }
    }

    #[inline]
    fn submit_flush(&mut self, req: Request<'_, T>) -> Result<u16, SubmitError> {
        let Some(idx) = self.trackers.alloc() else {
            return Err(self.no_slot(None));
        };
        let mut cmd = Command::flush(req.nsid);
        self.start_single(idx, &mut cmd, req.tag);
        Ok(idx)
    }

    /// Write Zeroes, split at 65536 blocks per command.
    #[inline]
    fn submit_zeroes(&mut self, req: Request<'_, T>) -> Result<u16, SubmitError> {
        let rw = Rw {
            nsid: req.nsid,
            opcode: req.op.opcode(),
            lba: req.lba,
            blocks: req.blocks,
        };
        let split = Split {
            per_cmd: MAX_BLOCKS_PER_COMMAND,
            elem: 1u64 << req.lba_shift,
            metadata: None,
            sgl: false,
        };
        self.submit_split(rw, split, None, None, req.tag)
    }

    /// Dataset Management deallocate: the range list goes in the tracker's preallocated page
    /// (no allocation).
    #[inline]
    fn submit_deallocate(&mut self, req: Request<'_, T>) -> Result<u16, SubmitError> {
        let Data::Ranges(ranges) = req.data else {
            let kind = SubmitErrorKind::BadRangeCount { count: 0 };
            return Err(SubmitError::new(kind, req.data.into_buffer()));
        };
        let Some(idx) = self.trackers.alloc() else {
            return Err(self.no_slot(None));
        };
        let iova = match self.trackers.get_mut(idx) {
            Some(t) => {
                let page = t.prp_list.as_mut_slice();
                for (slot, r) in page.chunks_exact_mut(DsmRange::SIZE).zip(ranges) {
                    slot.copy_from_slice(&r.to_bytes());
                }
                t.prp_list.iova()
            }
            None => 0,
        };
        let count = ranges.len().min(MAX_DSM_RANGES) as u16;
        let mut cmd = Command::deallocate(req.nsid, count, iova);
        self.start_single(idx, &mut cmd, req.tag);
        Ok(idx)
    }

    /// Queues `cmd` (its pointer fields zero) with the first `bytes` bytes of `buf` as its
    /// data; the PRPs are built here from the buffer, which comes back in the completion.
    pub(crate) fn submit_owned(
        &mut self,
        mut cmd: Command,
        buf: Option<DmaBuffer>,
        bytes: usize,
        tag: T,
    ) -> Result<(), SubmitError> {
        let Some((idx, t)) = self.trackers.alloc_mut() else {
            return Err(SubmitError::new(self.trackers.full(1), buf));
        };
        if let Some(b) = buf.as_ref().filter(|_| bytes > 0) {
            let list_iova = t.prp_list.iova();
            match prp::build(b.iova(), bytes, t.prp_list.as_mut_slice(), list_iova) {
                Ok((prp1, prp2)) => cmd.set_prps(prp1, prp2),
                Err(e) => {
                    self.trackers.unwind(idx);
                    return Err(SubmitError::new(e.into(), buf));
                }
            }
        }
        t.parent = idx;
        t.remaining = 1;
        t.status = Status::SUCCESS;
        t.tag = tag;
        t.set_buffer(buf);
        cmd.set_cid(t.cid);
        self.rings.push(&cmd);
        Ok(())
    }

    #[inline(always)]
    fn start_single(&mut self, idx: u16, cmd: &mut Command, tag: T) {
        if let Some(t) = self.trackers.get_mut(idx) {
            t.parent = idx;
            t.remaining = 1;
            t.status = Status::SUCCESS;
            t.tag = tag;
            t.buffer = None;
        }
        cmd.set_cid(self.trackers.cid(idx));
        self.rings.push(cmd);
    }

    /// Queues `blocks` at `lba` as commands of at most `per_cmd` blocks each, on the data at
    /// device address `base` (if any; `buf` is kept until the completion).
    #[inline(always)]
    pub(super) fn submit_split(
        &mut self,
        rw: Rw,
        split: Split,
        base: Option<u64>,
        buf: Option<DmaBuffer>,
        tag: T,
    ) -> Result<u16, SubmitError> {
        let (lba, blocks) = (rw.lba, rw.blocks);
        let Split {
            per_cmd,
            elem,
            metadata,
            sgl,
        } = split;
        if let (true, Some(base)) = (sgl, base) {
            // Every command's Data Block starts a whole number of blocks into the buffer.
            let len = (u64::from(blocks) * elem) as usize;
            if let Err(kind) = self.sgl.check_piece(0, base, len) {
                return Err(SubmitError::new(kind, buf));
            }
        }
        let needed = blocks.div_ceil(per_cmd) as usize;
        if needed > self.trackers.capacity() {
            return Err(SubmitError::new(
                SubmitErrorKind::TooLarge {
                    needed,
                    capacity: self.trackers.capacity(),
                },
                buf,
            ));
        }
        let free = self.trackers.free_count();
        if needed > free {
            return Err(SubmitError::new(self.trackers.full(needed), buf));
        }
        let start_tail = self.rings.sq_tail();
        let mut head = u16::MAX;
        let mut done: u32 = 0;
        while done < blocks {
            let n = (blocks - done).min(per_cmd);
            // Cannot fail: `needed` trackers are free.
            let Some(idx) = self.trackers.alloc() else {
                break;
            };
            if head == u16::MAX {
                head = idx;
            }
            let mut cmd = Command::rw_n(rw.opcode, rw.nsid, lba + done as u64, n);
            cmd.set_cid(self.trackers.cid(idx));
            if let Some(f) = &metadata {
                f.apply(&mut cmd, done);
            }
            if let (Some(base), Some(t)) = (base, self.trackers.get_mut(idx)) {
                let off = u64::from(done) * elem;
                let bytes = (u64::from(n) * elem) as usize;
                let list_iova = t.prp_list.iova();
                if sgl {
                    // One Data Block: `bytes` is at most MDTS (2 MiB).
                    cmd.set_sgl(base + off, bytes as u32, super::sgl::DATA_BLOCK);
                } else {
                    match prp::build(base + off, bytes, t.prp_list.as_mut_slice(), list_iova) {
                        Ok((p1, p2)) => cmd.set_prps(p1, p2),
                        Err(e) => {
                            self.rollback(head, start_tail);
                            return Err(SubmitError::new(e.into(), buf));
                        }
                    }
                }
            }
            if let Some(t) = self.trackers.get_mut(idx) {
                t.parent = head;
            }
            self.rings.push(&cmd);
            done += n;
        }
        if let Some(h) = self.trackers.get_mut(head) {
            h.remaining = needed as u16;
            h.status = Status::SUCCESS;
            h.tag = tag;
            h.buffer = buf;
        }
        Ok(head)
    }

    /// Whether `needed` commands can be queued now: not more than the queue ever holds
    /// ([`SubmitErrorKind::TooLarge`]), nor than its free slots.
    fn room_for(&self, needed: usize) -> Result<(), SubmitErrorKind> {
        if needed > self.trackers.capacity() {
            return Err(SubmitErrorKind::TooLarge {
                needed,
                capacity: self.trackers.capacity(),
            });
        }
        if needed > self.trackers.free_count() {
            return Err(self.trackers.full(needed));
        }
        Ok(())
    }

    /// Un-queues a partly built request: frees its trackers and rewinds the SQ tail.
    #[cold]
    fn rollback(&mut self, head: u16, tail: u32) {
        for i in 0..self.trackers.capacity() as u16 {
            if self
                .trackers
                .get(i)
                .is_some_and(|t| t.busy != 0 && t.parent == head)
            {
                self.trackers.release(i);
            }
        }
        self.trackers.release(head);
        self.rings.rewind_sq(tail);
    }

    /// Rings the SQ doorbell once for everything queued since the last ring, then the CQ head
    /// doorbell for the completions reaped since the last ring.
    ///
    /// The CQ head goes second on purpose: after a batch of completions the caller usually
    /// resubmits, and the controller starts on the new commands sooner when their doorbell is
    /// not queued behind the CQ head write (each is a trapped MMIO write under emulation).
    #[inline(always)]
    pub fn commit<R: RegisterIo>(&mut self, regs: &R) {
        if self.rings.sq_pending() {
            // With retries on, a copy of each new command before the controller may read it
            // (once per batch: nothing per command while retries are off).
            if self.retry.is_some() {
                self.save_unrung();
            }
            self.rings.ring_sq(regs);
        }
        self.ring_cq_when_needed(regs);
    }

    /// Writes the CQ head doorbell only once the controller could otherwise run short of CQ
    /// slots (the rule `reap` applies): while every command that can be in flight (those
    /// outstanding plus a resubmission of each reaped one) still has a free slot, a polled
    /// queue has no use for it. Each write is an MMIO write, a trap into the device model under
    /// emulation; at QD 32 on a 256-entry queue this writes one head per ~110 completions
    /// instead of one per poll, and on a 1024-entry ring with 63 trackers one per ~500.
    #[inline(always)]
    fn ring_cq_when_needed<R: RegisterIo>(&mut self, regs: &R) {
        if 2 * self.rings.cq_unrung() as usize > self.cq_slack + self.trackers.free_count() {
            self.rings.ring_cq(regs);
        }
    }

    /// [`IoQueue::commit`] once at least half of the commands in flight wait for the SQ
    /// doorbell (always when the controller would otherwise sit idle: everything in flight is
    /// unrung); otherwise leaves both doorbells to a later commit or poll (deferring the CQ head
    /// is safe: `reap` already wrote it if the controller could run short of CQ slots, and the
    /// unrung commands take none until their doorbell). One doorbell per batch when the caller
    /// commits after every submission.
    #[inline]
    pub fn commit_when_due<R: RegisterIo>(&mut self, regs: &R) {
        if 2 * self.rings.sq_unrung() as usize >= self.outstanding() {
            self.commit(regs);
        }
    }

    /// Commits pending submissions (and the CQ head of earlier reaps), then processes up to
    /// `max` request completions, calling `f` for each. Returns the number of completions; their
    /// CQ head doorbell is written by the next `commit` or `poll` (at once if the CQ would
    /// otherwise run short, see `reap`).
    #[cfg(test)]
    #[inline]
    pub fn poll<R: RegisterIo, F: FnMut(IoCompletion<T>)>(
        &mut self,
        regs: &R,
        max: usize,
        f: F,
    ) -> usize {
        self.commit(regs);
        self.reap(regs, max, f)
    }

    /// Processes up to `max` request completions without committing first (for callers that
    /// have just committed), calling `f` for each. Returns the number of completions; their CQ
    /// head doorbell is written by the next `commit` or `poll`, or here if deferring it could
    /// leave the controller without a free CQ slot (queues deeper than twice the commands in
    /// flight always defer).
    #[inline(always)]
    pub fn reap<R: RegisterIo, F: FnMut(IoCompletion<T>)>(
        &mut self,
        regs: &R,
        max: usize,
        f: F,
    ) -> usize {
        self.reap_into(regs, max, &mut ByClosure(f))
    }

    /// [`reap`](Self::reap) into a [`Deliver`] sink. A sink with
    /// [`Deliver::STOP_AT_ERROR`] stops before the first completion entry with an error
    /// status (left in the queue for the next reap) and is told ([`Deliver::stopped`]).
    #[inline(always)]
    pub(crate) fn reap_into<R: RegisterIo, D: Deliver<T>>(
        &mut self,
        regs: &R,
        max: usize,
        to: &mut D,
    ) -> usize {
        let mut delivered = 0;
        while delivered < max {
            let Some((cid, status_phase, cdw0)) = self.rings.peek_cq_cid_status() else {
                break;
            };
            // An error (SCT or SC set, above the phase bit): retried or ended off the hot path.
            if status_phase & (0x7ff << 1) != 0 {
                if D::STOP_AT_ERROR {
                    to.stopped();
                    break;
                }
                self.rings.advance_cq();
                if let Some(c) = self.end_failed(cid, status_phase >> 1, cdw0) {
                    to.completion(c);
                    delivered += 1;
                }
                continue;
            }
            self.rings.advance_cq();
            match self.trackers.finish_ok(cid) {
                Ok((slot, h)) => {
                    to.finished(h.tag, h.status, cdw0, slot, &mut h.buffer);
                    delivered += 1;
                }
                Err(Unfinished::Unknown) => self.spurious_completion(cid),
                Err(_) => {}
            }
        }
        // The CQ head doorbell is left to the next `commit` (or `poll`), after the SQ doorbell
        // of the resubmissions, but only while the controller keeps a free CQ slot for every
        // command that can then be in flight (those outstanding plus a resubmission of each
        // reaped one): a controller that sees its CQ full stops posting until the head moves.
        // outstanding + 2 * unrung > capacity, with outstanding = capacity - free.
        self.ring_cq_when_needed(regs);
        delivered
    }

    /// A completion entry whose command identifier names no command in flight (a duplicate,
    /// or a buggy device): ignored, so that it never ends another request; counted and logged.
    #[cold]
    #[inline(never)]
    fn spurious_completion(&mut self, cid: u16) {
        self.spurious += 1;
        log::error!(
            "completion for unknown command id {cid} ignored ({} so far on this queue)",
            self.spurious
        );
    }

    /// Completions ignored so far because their command identifier named no command in flight.
    pub fn spurious_completions(&self) -> u64 {
        self.spurious
    }

    /// One timeout check (see [`Trackers::age`]): the first command that has now lived
    /// through more than `checks` checks since its submission (or its Abort), if any.
    pub(crate) fn age(&mut self, checks: u8) -> Option<Overdue> {
        self.trackers.age(checks)
    }

    /// Marks that an Abort went out for command `cid` (it gets one more timeout).
    pub(crate) fn mark_abort_sent(&mut self, cid: u16) {
        self.trackers.mark_abort_sent(cid);
    }

    /// Ends every request in flight, including those queued but not rung, with `status`,
    /// without the device: after it provably stopped using this queue (a reset's disable) or
    /// can no longer be reached, or, with `held`, when it may still use the requests' memory
    /// (it could not be disabled: owned buffers are leaked into `pool`, trackers retired, and
    /// the queue closed: every later submission fails with
    /// [`SubmitErrorKind::ControllerStuck`]).
    /// The requests wait for [`deliver_ended`](Self::deliver_ended). Resets the rings for the
    /// queue's re-creation. Returns how many requests ended.
    pub(crate) fn end_all(&mut self, status: Status, pool: &DmaPool, held: bool) -> usize {
        let n = self.trackers.end_all(status, held, |b| pool.leak(b));
        if held {
            // The device may still read the SQ: nothing more goes there (a rewound tail would
            // make it run old entries again, whose buffers went on to other requests).
            self.trackers.close();
        } else {
            self.rings.reset();
        }
        n
    }

    /// Requests ended by recovery and not yet delivered.
    #[inline(always)]
    pub(crate) fn ended_pending(&self) -> usize {
        self.trackers.ended_count()
    }

    /// Delivers up to `max` requests ended by recovery to `to` (as
    /// [`Deliver::completion`]s), in the order they ended; the rest wait for the next call.
    /// Returns how many were delivered.
    #[inline(always)]
    pub(crate) fn deliver_ended<D: Deliver<T>>(&mut self, max: usize, to: &mut D) -> usize {
        let mut n = 0;
        while n < max {
            let Some(Ended {
                slot,
                tag,
                status,
                buffer,
                memory_held,
            }) = self.trackers.next_ended()
            else {
                break;
            };
            to.completion(IoCompletion {
                tag,
                status,
                cdw0: 0,
                slot,
                buffer,
                memory_held,
            });
            n += 1;
        }
        n
    }

    /// Test support: the rings.
    #[cfg(test)]
    pub(crate) fn rings_mut(&mut self) -> &mut Rings {
        &mut self.rings
    }
}

#[path = "io_queue_retry.rs"]
mod retry_ops;

#[path = "io_queue_spans.rs"]
mod spans_ops;
