//! The I/O API: a queue pair owned by one thread at a time.

use super::ControllerInfo;
use crate::admin::recovery::{ControllerEvent, Settled};
use crate::admin::Shared;
use crate::error::{Error, OptionalCommand, SubmitError, SubmitErrorKind};
use crate::namespace::Namespace;
use crate::platform::Platform;
use crate::platform::RegisterIo;
use crate::queue::deliver::{ByClosure, Deliver};
use crate::queue::request::not_rw;
use crate::queue::tracker::Overdue;
use crate::queue::{DoorbellStats, IoCompletion, IoQueue, Op, Request, RequestData, Target};
use crate::quirks::Quirks;
use crate::spec::command::DsmRange;
use crate::spec::identify::{ONCS_DSM, ONCS_WRITE_ZEROES};
use crate::spec::registers::{Csts, CSTS};
use crate::spec::{Command, Status};
use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use vfnvme_hal::{DmaBuffer, DmaSpan};

/// Options of a new queue pair.
#[derive(Debug, Clone, Copy)]
pub struct QpairOptions {
    /// Entries per ring (2..=CAP.MQES+1); at most `depth - 1` commands are in flight, and at
    /// most [`MAX_IN_FLIGHT`](crate::queue::MAX_IN_FLIGHT) (so that every command identifier
    /// keeps a generation).
    pub depth: u32,
    /// Commands in flight at most (SPDK's `io_queue_requests`): 0 (the default) or more than
    /// `depth - 1` mean `depth - 1` (capped as for `depth`). Each takes a tracker with a 4 KiB PRP list page; a ring
    /// deeper than this costs 80 bytes per extra entry and lets the driver write the CQ head
    /// doorbell less often (an MMIO write each, a trap under emulation).
    pub max_in_flight: u32,
    /// How long the `*_sync` helpers wait for a completion.
    pub sync_timeout_ms: u64,
    /// Doorbell batching for callers that commit after every submission (SPDK's
    /// `delay_cmd_submit`): [`QueuePair::commit`] then writes the SQ doorbell only once at
    /// least half of the commands in flight wait for it (so always when the controller would
    /// otherwise sit idle), and leaves it to a later `commit` or the next `poll` otherwise.
    /// Polling always rings. Off: `commit` always rings.
    pub defer_sq_doorbell: bool,
    /// Send every read and write with SGLs (SPDK's `enable_sgl`) when the controller has them
    /// (Identify Controller SGLS; [`QueuePair::sgl_supported`]); ignored without. Off (the
    /// default): PRPs, and SGLs only for lists of spans PRPs can't describe.
    pub prefer_sgl: bool,
}

impl Default for QpairOptions {
    fn default() -> Self {
        QpairOptions {
            depth: 256,
            max_in_flight: 0,
            sync_timeout_ms: 30_000,
            defer_sq_doorbell: false,
            prefer_sgl: false,
        }
    }
}

/// An I/O submission queue and its completion queue.
///
/// `Send` but not `Sync`: one thread at a time submits and polls, without locks. The I/O path
/// (submit, `commit`, `poll`) allocates nothing and writes at most one doorbell per batch.
///
/// `T` is the payload each request carries from submission to its [`IoCompletion`], kept in the
/// driver's command tracker: a `u64` tag by default (SPDK's `cb_arg`, libvfn's `opaque`); the C
/// ABI keeps its callback and argument there.
pub struct QueuePair<P: Platform, T: Copy + Default = u64> {
    /// Taken out only in `drop`, to be freed once the device is done with it (or leaked).
    io: ManuallyDrop<IoQueue<T>>,
    platform: Arc<P>,
    shared: Arc<Shared<P>>,
    qid: u16,
    sync_timeout_ns: u64,
    /// The reset epoch the queues were created in (see `admin/recovery.rs`).
    epoch: u32,
    /// Whether the queues exist on the controller (false after a reset until they are created
    /// again, and for good once the controller is lost).
    created: bool,
    /// Polls so far, wrapping at 256: the poll that wraps it looks at resets and timeouts.
    polls: u8,
    /// When the next timeout check is due (platform clock, ns).
    next_check_ns: u64,
    /// The timeout check interval: a quarter of the I/O timeout (0: timeouts off).
    check_interval_ns: u64,
    /// [`QpairOptions::defer_sq_doorbell`].
    defer_sq_doorbell: bool,
    /// Write Zeroes refused: `Some(quirk)` (`None`: the controller supports it).
    no_write_zeroes: Option<bool>,
    /// Dataset Management refused: `Some(quirk)` (`None`: the controller supports it).
    no_dsm: Option<bool>,
    _not_sync: PhantomData<Cell<()>>,
}

impl<P: Platform, T: Copy + Default> std::fmt::Debug for QueuePair<P, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qid", &self.qid)
            .field("depth", &self.io.depth())
            .field("outstanding", &self.io.outstanding())
            .finish()
    }
}

impl<P: Platform, T: Copy + Default> QueuePair<P, T> {
    pub(crate) fn create(
        shared: &Arc<Shared<P>>,
        info: &ControllerInfo,
        options: QpairOptions,
    ) -> Result<Self, Error> {
        let max = shared.cap.max_queue_entries();
        if options.depth > max {
            return Err(Error::QueueDepthTooLarge {
                requested: options.depth,
                max,
            });
        }
        if options.depth < 2 {
            return Err(Error::QueueDepthTooSmall {
                requested: options.depth,
            });
        }
        let qid = shared.reserve_qid()?;
        let mut io = match IoQueue::new(
            shared.platform.dma(),
            shared.platform.regs(),
            qid,
            options.depth,
            options.max_in_flight,
            shared.cap.dstrd(),
            shared.shadow.as_ref(),
            info.max_transfer_bytes,
        ) {
            Ok(io) => io,
            Err(e) => {
                shared.unreserve_qid(qid);
                return Err(e.into());
            }
        };
        io.enable_retries(shared.io_retries, shared.io_retry_count.clone());
        io.set_sgl(info.identify.sgls, options.prefer_sgl);
        let (create_cq, create_sq) = create_commands(qid, &io);
        let epoch = shared.epoch();
        // A create command that timed out may still take effect: its queue may exist.
        let may_exist = |e: &Error| matches!(e, Error::AdminTimeout { .. });
        let abandon = |io: IoQueue<T>, sq: bool, cq: bool| {
            if !shared.abandon_qpair(qid, sq, cq) {
                log::error!("queue pair {qid}: leaked its DMA memory (the controller could not be disabled)");
                shared.platform.dma().leak(io);
            }
        };
        // SAFETY: (both creates) the rings belong to `io`, which the queue pair keeps until
        // the queues are deleted on drop; if a create fails or times out, `abandon` frees them
        // only once the queue is deleted or the controller disabled (or leaks them).
        if let Err(e) = unsafe { shared.admin_sync_raw(create_cq) } {
            abandon(io, false, may_exist(&e));
            return Err(e);
        }
        // SAFETY: as for the CQ above.
        if let Err(e) = unsafe { shared.admin_sync_raw(create_sq) } {
            abandon(io, may_exist(&e), true);
            return Err(e);
        }
        Ok(QueuePair {
            io: ManuallyDrop::new(io),
            platform: shared.platform.clone(),
            shared: shared.clone(),
            qid,
            sync_timeout_ns: options.sync_timeout_ms.saturating_mul(1_000_000),
            epoch,
            created: true,
            polls: 0,
            next_check_ns: 0,
            check_interval_ns: shared.io_timeout_ns / u64::from(TIMEOUT_CHECKS),
            defer_sq_doorbell: options.defer_sq_doorbell,
            no_write_zeroes: if info.quirks.contains(Quirks::DISABLE_WRITE_ZEROES) {
                Some(true)
            } else if info.identify.oncs & ONCS_WRITE_ZEROES == 0 {
                Some(false)
            } else {
                None
            },
            no_dsm: (info.identify.oncs & ONCS_DSM == 0).then_some(false),
            _not_sync: PhantomData,
        })
    }

    /// The queue id (SQ and CQ).
    pub fn qid(&self) -> u16 {
        self.qid
    }
    /// Ring depth.
    pub fn depth(&self) -> u32 {
        self.io.depth()
    }
    /// Whether the controller could not be disabled after a failure: the device may still use
    /// this queue pair's memory and that of the requests it ended (their completions say
    /// [`IoCompletion::memory_held`]; owned buffers were kept, not handed back; borrowed memory
    /// must not be reused either). It stays so for the life of the process.
    pub fn is_stuck(&self) -> bool {
        self.shared.memory_held()
    }
    /// Commands in flight (a split request counts each of its commands).
    #[inline]
    pub fn outstanding(&self) -> usize {
        self.io.outstanding()
    }
    /// Free command slots.
    #[inline]
    pub fn free_slots(&self) -> usize {
        self.io.free_slots()
    }
    /// Why a submission finds no free slot: the queue pair is full (poll, then submit
    /// again), or it takes nothing more because the controller could not be disabled
    /// ([`SubmitErrorKind::ControllerStuck`]).
    #[cold]
    pub fn why_full(&self) -> SubmitErrorKind {
        self.io.why_full(1)
    }
    /// Largest data transfer per command; larger I/O is split.
    pub fn max_transfer(&self) -> usize {
        self.io.max_transfer()
    }
    /// Completion entries ignored because their command identifier named no command in flight
    /// (a device that posts a completion twice, or one with an identifier it was never given):
    /// each is logged and never ends another request.
    pub fn spurious_completions(&self) -> u64 {
        self.io.spurious_completions()
    }
    /// I/O commands this queue pair sent again (see
    /// [`ControllerOptions::io_retries`](crate::ControllerOptions::io_retries)).
    pub fn retries(&self) -> u64 {
        self.io.retries()
    }
    /// Whether the controller takes SGLs for reads and writes (Identify Controller SGLS bits
    /// 1:0): lists of spans PRPs can't describe then go with SGLs.
    pub fn sgl_supported(&self) -> bool {
        self.io.sgl_supported()
    }
    /// Whether every read and write goes with SGLs ([`QpairOptions::prefer_sgl`] on a
    /// controller that has them).
    pub fn prefers_sgl(&self) -> bool {
        self.io.prefers_sgl()
    }
    /// Whether shadow doorbells are in use on this queue pair.
    pub fn uses_shadow_doorbells(&self) -> bool {
        self.io.uses_shadow()
    }

    /// Doorbell updates (MMIO and shadow, SQ and CQ) since the queue pair was created, counted
    /// in plain fields when the crate's `doorbell-stats` feature is on (`vfnvme perf` turns it
    /// on); `None` without it.
    pub fn doorbell_stats(&self) -> Option<DoorbellStats> {
        self.io.doorbell_stats()
    }

    /// Queues `req` (split at MDTS if it must be) and returns its slot, which its
    /// [`IoCompletion::slot`] gives back (for side tables indexed per request). Nothing reaches
    /// the device before [`commit`](Self::commit) or [`poll`](Self::poll). The request was
    /// checked when it was made ([`Request`]); here only the controller's support for the
    /// command, a free slot and the data's descriptors can refuse it (an owned buffer comes
    /// back in the error).
    #[inline(always)]
    pub fn submit(&mut self, req: Request<'_, T>) -> Result<u16, SubmitError> {
        if matches!(req.op(), Op::WriteZeroes | Op::Deallocate) {
            self.supports(req.op())?;
        }
        self.io.submit(req)
    }

    /// Queues a read of `blocks` blocks at `lba` into `buf` ([`Request::read`] submitted); the
    /// buffer comes back in the [`IoCompletion`] (or inside the error).
    pub fn read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: T,
    ) -> Result<(), SubmitError> {
        self.submit_owned(Op::Read, ns, lba, blocks, buf, tag)
    }

    /// Queues a write of `blocks` blocks at `lba` from `buf` ([`Request::write`] submitted).
    pub fn write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: T,
    ) -> Result<(), SubmitError> {
        self.submit_owned(Op::Write, ns, lba, blocks, buf, tag)
    }

    /// [`submit_data`](Self::submit_data) of an owned buffer: safe.
    #[inline(always)]
    fn submit_owned(
        &mut self,
        op: Op,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: T,
    ) -> Result<(), SubmitError> {
        // SAFETY: owned data: the request keeps the buffer until it completes.
        unsafe { self.submit_data(op, ns, lba, blocks, buf, tag) }
    }

    /// Queues a read or write (`op`) of `blocks` blocks at `lba` of `ns` on `data`: an owned
    /// [`DmaBuffer`] (it comes back in the completion or the error), or borrowed memory, a
    /// [`vfnvme_hal::DmaSpan`] (the C ABI's entry point): a range of one live allocation of
    /// this controller's [`vfnvme_hal::DmaPool`], checked when it was made
    /// ([`vfnvme_hal::DmaPool::span`], [`vfnvme_hal::DmaRegion::span`] or
    /// [`DmaBuffer::span`]), so the device never touches memory past it. The request's checks
    /// ([`Request::rw`]: namespace, blocks, range, the data's length) run here, once; the
    /// request is then made (`Request::checked`) and submitted, with no `Result` holding a
    /// whole request in between (it would live in memory, costing the hot path its copies).
    ///
    /// # Safety
    /// For a span: it must come from this controller's pool ([`crate::Controller::dma`]), and
    /// its allocation must stay allocated and untouched until the request completes or the
    /// queue pair is dropped. An owned buffer has no requirement.
    #[inline(always)]
    pub unsafe fn submit_data<D: RequestData>(
        &mut self,
        op: Op,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        data: D,
        tag: T,
    ) -> Result<(), SubmitError> {
        let len = data.byte_len();
        let data = data.into_data();
        let target = match Target::of(ns) {
            Ok(t) if matches!(op, Op::Read | Op::Write) => t,
            Ok(_) => return Err(SubmitError::new(not_rw(op), data.into_buffer())),
            Err(kind) => return Err(SubmitError::new(kind, data.into_buffer())),
        };
        if let Err(kind) = target.check_rw(lba, blocks, len) {
            return Err(SubmitError::new(kind, data.into_buffer()));
        }
        // SAFETY: checked above; owned data, or the caller's contract for a span.
        let req = unsafe { Request::checked(op, target, lba, blocks, data, tag) };
        self.io.submit_rw(req).map(drop)
    }

    /// Queues a read of `blocks` blocks at `lba` into `spans`, in order
    /// ([`Request::borrowed_vectored`] submitted).
    ///
    /// # Safety
    /// Every span under [`submit_data`](Self::submit_data)'s contract: from this controller's
    /// pool, its allocation allocated and untouched until the request completes or the queue
    /// pair is dropped.
    #[inline]
    pub unsafe fn readv(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        spans: &[DmaSpan],
        tag: T,
    ) -> Result<(), SubmitError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.submit_vectored(Op::Read, ns, lba, blocks, spans, tag) }
    }

    /// Queues a write of `blocks` blocks at `lba` from `spans`, in order
    /// ([`Request::borrowed_vectored`] submitted).
    ///
    /// # Safety
    /// As for [`readv`](Self::readv).
    #[inline]
    pub unsafe fn writev(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        spans: &[DmaSpan],
        tag: T,
    ) -> Result<(), SubmitError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.submit_vectored(Op::Write, ns, lba, blocks, spans, tag) }
    }

    /// The one body of [`readv`](Self::readv) and [`writev`](Self::writev).
    ///
    /// # Safety
    /// As for [`readv`](Self::readv).
    #[inline(always)]
    unsafe fn submit_vectored(
        &mut self,
        op: Op,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        spans: &[DmaSpan],
        tag: T,
    ) -> Result<(), SubmitError> {
        // SAFETY: the caller's contract, passed on.
        let req = unsafe { Request::borrowed_vectored(op, ns, lba, blocks, spans, tag) }?;
        self.submit(req).map(drop)
    }

    /// Queues a flush ([`Request::flush`] submitted).
    #[inline]
    pub fn flush(&mut self, ns: &Namespace, tag: T) -> Result<(), SubmitError> {
        self.submit(Request::flush(ns, tag)?).map(drop)
    }

    /// Queues Write Zeroes ([`Request::write_zeroes`] submitted).
    #[inline]
    pub fn write_zeroes(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        tag: T,
    ) -> Result<(), SubmitError> {
        self.submit(Request::write_zeroes(ns, lba, blocks, tag)?)
            .map(drop)
    }

    /// Queues a deallocate (Dataset Management) of 1..=256 ranges ([`Request::deallocate`]
    /// submitted).
    #[inline]
    pub fn deallocate(
        &mut self,
        ns: &Namespace,
        ranges: &[DsmRange],
        tag: T,
    ) -> Result<(), SubmitError> {
        self.submit(Request::deallocate(ns, ranges, tag)?).map(drop)
    }

    /// Whether the controller takes `op` (an optional command, refused when ONCS lacks it or
    /// a quirk says it must not be sent).
    #[cold]
    fn supports(&self, op: Op) -> Result<(), SubmitError> {
        let (refused, command) = match op {
            Op::WriteZeroes => (self.no_write_zeroes, OptionalCommand::WriteZeroes),
            Op::Deallocate => (self.no_dsm, OptionalCommand::DatasetManagement),
            _ => (None, OptionalCommand::WriteZeroes),
        };
        match refused {
            Some(quirk) => Err(SubmitError::new(
                SubmitErrorKind::CommandUnsupported { command, quirk },
                None,
            )),
            None => Ok(()),
        }
    }

    /// Rings the SQ doorbell once for everything queued, then the CQ head doorbell for what
    /// earlier polls reaped; with [`QpairOptions::defer_sq_doorbell`], only once at least half
    /// of the commands in flight wait for the doorbell (else the next `commit` or `poll` does).
    #[inline]
    pub fn commit(&mut self) {
        if self.defer_sq_doorbell {
            self.io.commit_when_due(self.platform.regs());
        } else {
            self.io.commit(self.platform.regs());
        }
    }

    /// Commits pending submissions (and the CQ head of earlier polls), then delivers up to `max`
    /// completions to `f`. Returns how many were delivered; their CQ head doorbell is written by
    /// the next `commit` or `poll`, after the SQ doorbell of whatever is resubmitted (or at once
    /// when the queue is too shallow for that: at most `depth / 2` commands in flight defer).
    /// Requests that recovery ended (a reset, a timeout, the loss of the controller) are
    /// delivered the same way, at most `max` per call: the rest wait for the next poll.
    #[inline]
    pub fn poll<F: FnMut(IoCompletion<T>)>(&mut self, max: usize, f: F) -> usize {
        if self.recovery_due() {
            return self.recover_from_poll(max, &mut ByClosure(f));
        }
        self.poll_now(max, &mut ByClosure(f))
    }

    /// [`poll`](Self::poll) into a [`Deliver`] sink: the success path goes to
    /// [`Deliver::finished`] (the buffer moved once, from the tracker to wherever the sink puts
    /// it), everything else to [`Deliver::completion`]. A sink with
    /// [`Deliver::STOP_AT_ERROR`] stops before a completion with an error status and is told;
    /// the next poll delivers it.
    #[inline(always)]
    pub fn poll_into<D: Deliver<T>>(&mut self, max: usize, to: &mut D) -> usize {
        if self.recovery_due() {
            self.recover_queues_if_needed();
            return self.deliver_recovered(max, to);
        }
        self.poll_now(max, to)
    }

    /// Counts a poll; every 256 polls, whether the queue pair must [`recover`](Self::recover)
    /// before anything else (a reset, the controller lost, a timeout; see `check`).
    #[inline(always)]
    fn recovery_due(&mut self) -> bool {
        self.polls = self.polls.wrapping_add(1);
        self.polls == 0 && self.check()
    }

    /// The poll itself: commits, then reaps up to `max` completions into `to`.
    #[inline(always)]
    fn poll_now<D: Deliver<T>>(&mut self, max: usize, to: &mut D) -> usize {
        self.io.commit(self.platform.regs());
        self.platform.before_poll(self.qid);
        self.io.reap_into(self.platform.regs(), max, to)
    }

    /// The slow part of [`poll`](Self::poll), every 256 polls: whether a
    /// reset or the loss of the controller calls for [`recover`](Self::recover) (see
    /// `admin/recovery.rs`), after a look at the I/O timeouts.
    #[cold]
    #[inline(never)]
    fn check(&mut self) -> bool {
        if self.platform.removed() {
            self.shared.mark_removed();
        }
        if self.io.ended_pending() != 0 || self.needs_recovery() {
            return true;
        }
        if self.check_interval_ns == 0 || self.io.outstanding() == 0 {
            return false;
        }
        let now = self.platform.now_coarse_ns();
        if now < self.next_check_ns {
            return false;
        }
        self.next_check_ns = now.saturating_add(self.check_interval_ns);
        match self.io.age(TIMEOUT_CHECKS) {
            Some(overdue) => self.timed_out(overdue),
            None => false,
        }
    }

    /// A command outlived the I/O timeout: first an Abort (after a health check of the
    /// controller); if it outlives another timeout, a controller reset. Returns whether the
    /// queue pair must now recover.
    #[cold]
    fn timed_out(&mut self, overdue: Overdue) -> bool {
        let (qid, cid) = (self.qid, overdue.cid);
        let name = self.platform.name();
        let csts = Csts(self.platform.regs().read32(CSTS));
        if csts.is_all_ones() {
            self.shared.mark_removed();
            return true;
        }
        if !overdue.abort_sent && !csts.cfs() {
            log::warn!("{name}: I/O command {cid} on queue {qid} timed out; sending Abort");
            self.shared
                .events
                .publish(ControllerEvent::TimedOut { qid, cid });
            match self.shared.admin_sync(Command::abort(qid, cid)) {
                Ok(_) => {
                    self.shared
                        .events
                        .publish(ControllerEvent::AbortSent { qid, cid });
                    self.io.mark_abort_sent(cid);
                    return false;
                }
                Err(e) => log::warn!("{name}: Abort of command {cid} on queue {qid}: {e}"),
            }
        }
        log::warn!(
            "{name}: I/O command {cid} on queue {qid} still outstanding (CSTS {:#x}); resetting the controller",
            csts.0
        );
        if let Err(e) = self.shared.reset(Some(self.epoch)) {
            log::error!("{name}: {e}");
        }
        true
    }

    /// [`recover`](Self::recover) for [`poll`](Self::poll), out of line on its own: with
    /// `recover` called from `poll` directly the optimiser laid out the poll's hot path
    /// longer (the io_path bench counts its instructions).
    #[cold]
    #[inline(never)]
    fn recover_from_poll<D: Deliver<T>>(&mut self, max: usize, to: &mut D) -> usize {
        self.recover_into(max, to)
    }

    /// Whether the queues must be recovered: a reset or the loss of the controller since they
    /// were created, or a controller that is not live (failed, gone, disabled, stuck, or being
    /// reset).
    fn needs_recovery(&self) -> bool {
        !self.created || self.shared.epoch() != self.epoch || !self.shared.live()
    }

    /// After a reset or the loss of the controller: ends every request in flight with
    /// [`Status::ABORTED_BY_RESET`] (or [`Status::CONTROLLER_LOST`]), buffers handed back as
    /// the device stopped (held, [`IoCompletion::memory_held`], if it could not be stopped),
    /// then creates the queues again if the controller is back. With retries on
    /// ([`ControllerOptions::io_retries`](crate::ControllerOptions::io_retries)) and the
    /// controller back, the requests are sent again on the new queues instead (but for those
    /// out of retries or timed out). Then delivers up to `max` ended requests to `f`; the rest
    /// wait for the next poll (which comes back here). Returns how many were delivered.
    #[cold]
    pub fn recover(&mut self, max: usize, f: impl FnMut(IoCompletion<T>)) -> usize {
        self.recover_into(max, &mut ByClosure(f))
    }

    /// [`recover`](Self::recover) into a [`Deliver`] sink (as [`Deliver::completion`]s).
    #[cold]
    #[inline(never)]
    pub fn recover_into<D: Deliver<T>>(&mut self, max: usize, to: &mut D) -> usize {
        self.recover_queues_if_needed();
        self.deliver_recovered(max, to)
    }

    /// The first half of [`recover`](Self::recover), without a sink (out of line, so that a
    /// poll's sink stays in registers): the queues recovered if they must be.
    #[cold]
    #[inline(never)]
    fn recover_queues_if_needed(&mut self) {
        if self.needs_recovery() {
            self.recover_queues();
        }
    }

    /// The second half of [`recover`](Self::recover): up to `max` ended requests delivered;
    /// if more wait, the next poll comes back here.
    #[inline(always)]
    fn deliver_recovered<D: Deliver<T>>(&mut self, max: usize, to: &mut D) -> usize {
        let n = self.io.deliver_ended(max, to);
        if self.io.ended_pending() != 0 {
            // The next poll's tick runs the periodic check, which sends it back here.
            self.polls = u8::MAX;
        }
        n
    }

    /// The recovery of [`recover`](Self::recover): ends what the controller no longer
    /// carries (or may still carry, held) and creates the queues again if it is back.
    fn recover_queues(&mut self) {
        let settled = self.shared.settled();
        let epoch = self.shared.epoch();
        let status = match settled {
            Settled::Live => Status::ABORTED_BY_RESET,
            _ => Status::CONTROLLER_LOST,
        };
        // The one rule: while the device may still use memory it was given, nothing it was
        // given is handed back, freed or reused.
        let held = self.shared.memory_held();
        let requeue = settled == Settled::Live && !held && self.io.retries_enabled();
        if !requeue {
            self.io.end_all(status, self.platform.dma(), held);
        }
        self.created = false;
        if settled == Settled::Live && !held {
            let (cq, sq) = create_commands(self.qid, &self.io);
            // SAFETY: the rings belong to `self.io`, which this queue pair keeps until the
            // queues are deleted on drop (or the controller is disabled).
            let created = unsafe { self.shared.admin_sync_raw(cq) }
                // SAFETY: as for the CQ.
                .and_then(|_| unsafe { self.shared.admin_sync_raw(sq) });
            match created {
                Ok(_) => {
                    self.created = true;
                    self.epoch = epoch;
                    self.next_check_ns = 0;
                }
                Err(e) => log::error!(
                    "{}: queue pair {} could not be created again after the reset: {e}; its requests fail",
                    self.platform.name(),
                    self.qid
                ),
            }
        }
        if requeue {
            if self.created {
                self.io.requeue_after_reset(status);
            } else {
                // The queues are not there; the device was disabled by the reset.
                self.io.end_all(status, self.platform.dma(), false);
            }
        }
    }

    /// Polls until the single outstanding request completes (bounded by the sync timeout).
    fn wait_one(&mut self) -> Result<IoCompletion<T>, Error> {
        let start = self.platform.now_ns();
        let mut got = None;
        loop {
            if self.poll(1, |c| got = Some(c)) > 0 {
                break;
            }
            let waited = self.platform.now_ns().saturating_sub(start);
            if waited > self.sync_timeout_ns {
                return Err(Error::IoTimeout {
                    waited_ms: waited / 1_000_000,
                });
            }
            self.platform.relax();
        }
        got.ok_or(Error::IoTimeout { waited_ms: 0 })
    }

    /// Before a synchronous command: the queue pair must be idle, and a reset it has not yet
    /// noticed is handled first (so that the command goes to queues that exist).
    fn ensure_idle(&mut self) -> Result<(), Error> {
        match self.io.outstanding() {
            0 => {}
            outstanding => return Err(Error::QueueBusy { outstanding }),
        }
        if self.check() {
            // Nothing is outstanding, so nothing is ended here: only the queues come back.
            self.recover(usize::MAX, drop);
        }
        if !self.created {
            return Err(self.shared.not_live_error());
        }
        Ok(())
    }

    fn finish(c: IoCompletion<T>) -> Result<Option<DmaBuffer>, Error> {
        if c.status == Status::SUCCESS || c.status.is_success() {
            Ok(c.buffer)
        } else {
            Err(Error::IoFailed { status: c.status })
        }
    }

    /// Reads synchronously; returns the buffer filled. The queue pair must be idle.
    pub fn read_sync(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    ) -> Result<DmaBuffer, Error> {
        self.rw_sync(Request::read(ns, lba, blocks, buf, T::default()))
    }

    /// Writes synchronously; returns the buffer. The queue pair must be idle.
    pub fn write_sync(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    ) -> Result<DmaBuffer, Error> {
        self.rw_sync(Request::write(ns, lba, blocks, buf, T::default()))
    }

    /// Submits a read or write made with an owned buffer and waits for it.
    fn rw_sync(&mut self, req: Result<Request<'_, T>, SubmitError>) -> Result<DmaBuffer, Error> {
        self.ensure_idle()?;
        self.submit(req?)?;
        let c = self.wait_one()?;
        Self::finish(c)?.ok_or(Error::IoTimeout { waited_ms: 0 })
    }

    /// Runs one NVM command set I/O command on `ns` with `buf` as its data (either direction)
    /// and waits; returns the completion status and the buffer. The driver builds the data
    /// pointer from `buf` and sets the nsid, so `cmd`'s pointer fields and CDW0 flags must be
    /// zero. The length the device moves is read from the command (NLB of Read, Write and
    /// Compare; NR of Dataset Management) and must fit in `buf`; other opcodes with data, and
    /// namespaces with metadata or another command set, are refused
    /// (`IoQueue::submit_single` is the unsafe form). The queue pair must be idle.
    pub fn passthru_sync(
        &mut self,
        ns: &Namespace,
        mut cmd: Command,
        buf: Option<DmaBuffer>,
    ) -> Result<(Status, Option<DmaBuffer>), Error> {
        let opcode = cmd.opcode();
        let refuse = |what: String| Err(Error::IoPassthru { opcode, what });
        if cmd.prp1 != 0 || cmd.prp2 != 0 || cmd.mptr != 0 || cmd.cdw0 & !0xff != 0 {
            return refuse(
                "leave PRP1, PRP2, MPTR and the CDW0 flags zero: the data goes in a DmaBuffer"
                    .into(),
            );
        }
        let id = ns.identity();
        if id.csi != 0 || id.metadata_size != 0 {
            return refuse(
                "the namespace has metadata or is not an NVM command set namespace".into(),
            );
        }
        let bytes: u64 = match opcode {
            0x00 | 0x04 | 0x08 | 0x0c => 0,
            0x01 | 0x02 | 0x05 => ((cmd.cdw12 & 0xffff) as u64 + 1) << id.lba_shift,
            0x09 => ((cmd.cdw10 & 0xff) as u64 + 1) * 16,
            _ => return refuse("the driver can't tell how many bytes it moves; known: 00h flush, 01h write, 02h read, 04h write uncorrectable, 05h compare, 08h write zeroes, 09h dataset management, 0Ch verify".into()),
        };
        let len = buf.as_ref().map_or(0, |b| b.len() as u64);
        if bytes > len {
            return refuse(format!("it moves {bytes} bytes but the buffer holds {len}"));
        }
        if bytes > self.max_transfer() as u64 {
            return refuse(format!(
                "it moves {bytes} bytes, more than the {} one command may carry",
                self.max_transfer()
            ));
        }
        self.ensure_idle()?;
        cmd.nsid = ns.nsid();
        self.io
            .submit_owned(cmd, buf, bytes as usize, T::default())?;
        let c = self.wait_one()?;
        Ok((c.status, c.buffer))
    }

    /// Flushes synchronously. The queue pair must be idle.
    pub fn flush_sync(&mut self, ns: &Namespace) -> Result<(), Error> {
        self.ensure_idle()?;
        self.flush(ns, T::default())?;
        Self::finish(self.wait_one()?).map(|_| ())
    }
}

impl<P: Platform, T: Copy + Default> Drop for QueuePair<P, T> {
    /// Deletes the queues (SQ, reap, CQ) and frees the rings, trackers and buffers in flight
    /// only once the device is done with them: after successful deletes, or after disabling the
    /// controller when a delete failed. If even that fails they are leaked (logged, and counted
    /// by [`DmaPool::leaks`](vfnvme_hal::DmaPool::leaks)).
    fn drop(&mut self) {
        // SAFETY: `io` is taken exactly once, here, and `self.io` is not used afterwards.
        let mut io = unsafe { ManuallyDrop::take(&mut self.io) };
        let (platform, qid) = (&self.platform, self.qid);
        if self.shared.memory_held() {
            log::error!(
                "{}: queue pair {qid}: leaked its DMA memory (the controller could not be disabled)",
                platform.name()
            );
            platform.dma().leak(io);
            return;
        }
        if !self.created || self.shared.epoch() != self.epoch {
            // A reset (or the loss of the controller) disabled it since the queues were
            // created, and they were not created again: the device no longer has them.
            self.shared.unreserve_qid(qid);
            drop(io);
            return;
        }
        let reap = || {
            platform.before_poll(qid);
            io.reap(platform.regs(), usize::MAX, drop);
        };
        if !self.shared.release_qpair(qid, reap) {
            log::error!(
                "{}: queue pair {qid}: leaked its DMA memory (the controller could not be disabled)",
                platform.name()
            );
            platform.dma().leak(io);
        }
    }
}

/// Timeout checks a command lives through before it counts as timed out: the check interval is
/// the I/O timeout divided by this.
const TIMEOUT_CHECKS: u8 = 4;

/// The Create I/O CQ and SQ commands of queue pair `qid` over the rings of `io`.
fn create_commands<T: Copy + Default>(qid: u16, io: &IoQueue<T>) -> (Command, Command) {
    let depth = io.depth();
    let qsize = depth.clamp(2, 65536) - 1;
    let mut cq = Command::create_io_cq(qid, 2, io.cq_iova());
    let mut sq = Command::create_io_sq(qid, 2, qid, io.sq_iova());
    // QSIZE is 0's based (CAP.MQES + 1 may be 65536, encoded 0xffff).
    cq.cdw10 = u32::from(qid) | (qsize << 16);
    sq.cdw10 = u32::from(qid) | (qsize << 16);
    (cq, sq)
}
