//! The I/O API: a queue pair owned by one thread at a time.

use super::io_queue::{Direction, IoCompletion, IoQueue};
pub use super::ring::DoorbellStats;
use crate::controller::{ControllerInfo, Shared};
use crate::error::{Error, OptionalCommand, SubmitError, SubmitErrorKind};
use crate::namespace::Namespace;
use crate::platform::Platform;
use crate::quirks::Quirks;
use crate::spec::command::DsmRange;
use crate::spec::identify::{ONCS_DSM, ONCS_WRITE_ZEROES};
use crate::spec::{Command, Status};
use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use vfnvme_dma::DmaBuffer;

/// Options of a new queue pair.
#[derive(Debug, Clone, Copy)]
pub struct QpairOptions {
    /// Entries per ring (2..=CAP.MQES+1); at most `depth - 1` commands are in flight.
    pub depth: u32,
    /// How long the `*_sync` helpers wait for a completion.
    pub sync_timeout_ms: u64,
}

impl Default for QpairOptions {
    fn default() -> Self {
        QpairOptions {
            depth: 256,
            sync_timeout_ms: 30_000,
        }
    }
}

/// An I/O submission queue and its completion queue.
///
/// `Send` but not `Sync`: one thread at a time submits and polls, without locks. The I/O path
/// (submit, `commit`, `poll`) allocates nothing and writes at most one doorbell per batch.
pub struct QueuePair<P: Platform> {
    /// Taken out only in `drop`, to be freed once the device is done with it (or leaked).
    io: ManuallyDrop<IoQueue>,
    platform: Arc<P>,
    shared: Arc<Shared<P>>,
    qid: u16,
    sync_timeout_ns: u64,
    /// Write Zeroes refused: `Some(quirk)` (`None`: the controller supports it).
    no_write_zeroes: Option<bool>,
    /// Dataset Management refused: `Some(quirk)` (`None`: the controller supports it).
    no_dsm: Option<bool>,
    _not_sync: PhantomData<Cell<()>>,
}

impl<P: Platform> std::fmt::Debug for QueuePair<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qid", &self.qid)
            .field("depth", &self.io.depth())
            .field("outstanding", &self.io.outstanding())
            .finish()
    }
}

impl<P: Platform> QueuePair<P> {
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
        let io = match IoQueue::new(
            shared.platform.dma(),
            shared.platform.regs(),
            qid,
            options.depth,
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
        let depth = options.depth as u16;
        // CAP.MQES + 1 may be 65536, which the 16-bit QSIZE field encodes as 0xffff + 1.
        let create_cq = Command::create_io_cq(qid, depth.max(1), io.cq_iova());
        let mut create_cq = create_cq;
        let mut create_sq = Command::create_io_sq(qid, depth.max(1), qid, io.sq_iova());
        if options.depth == 65536 {
            create_cq.cdw10 = qid as u32 | (0xffff << 16);
            create_sq.cdw10 = qid as u32 | (0xffff << 16);
        }
        // A create command that timed out may still take effect: its queue may exist.
        let may_exist = |e: &Error| matches!(e, Error::AdminTimeout { .. });
        let abandon = |io: IoQueue, sq: bool, cq: bool| {
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
    /// Largest data transfer per command; larger I/O is split.
    pub fn max_transfer(&self) -> usize {
        self.io.max_transfer()
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

    /// Queues a read of `blocks` blocks at `lba` into `buf`; the buffer comes back in the
    /// [`IoCompletion`] (or inside the error).
    #[inline]
    pub fn read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: u64,
    ) -> Result<(), SubmitError> {
        self.io.read(ns, lba, blocks, buf, tag)
    }

    /// Queues a write of `blocks` blocks at `lba` from `buf`.
    #[inline]
    pub fn write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: u64,
    ) -> Result<(), SubmitError> {
        self.io.write(ns, lba, blocks, buf, tag)
    }

    /// Queues a read or write on borrowed memory (the C ABI's entry point): `span` is a range
    /// of one live allocation of this controller's [`vfnvme_dma::DmaPool`], checked when it was
    /// made ([`vfnvme_dma::DmaPool::span`], [`vfnvme_dma::DmaRegion::span`] or
    /// [`DmaBuffer::span`]), so the device never touches memory past it. A span shorter than
    /// the transfer fails with [`crate::SubmitErrorKind::BufferTooSmall`]. The completion
    /// carries no buffer.
    ///
    /// # Safety
    /// `span` must come from this controller's pool ([`crate::Controller::dma`]), and its
    /// allocation must stay allocated and untouched until the request completes or the queue
    /// pair is dropped.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn submit_raw(
        &mut self,
        ns: &Namespace,
        dir: Direction,
        lba: u64,
        blocks: u32,
        span: vfnvme_dma::DmaSpan,
        tag: u64,
    ) -> Result<(), SubmitError> {
        // SAFETY: the caller upholds the contract documented above.
        unsafe { self.io.submit_raw(ns, dir, lba, blocks, span, tag) }
    }

    /// Queues a flush.
    #[inline]
    pub fn flush(&mut self, ns: &Namespace, tag: u64) -> Result<(), SubmitError> {
        self.io.flush(ns, tag)
    }

    /// Queues Write Zeroes.
    #[inline]
    pub fn write_zeroes(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        tag: u64,
    ) -> Result<(), SubmitError> {
        if let Some(quirk) = self.no_write_zeroes {
            return Err(Self::unsupported(OptionalCommand::WriteZeroes, quirk));
        }
        self.io.write_zeroes(ns, lba, blocks, tag)
    }

    /// Queues a deallocate (Dataset Management) of 1..=256 ranges.
    #[inline]
    pub fn deallocate(
        &mut self,
        ns: &Namespace,
        ranges: &[DsmRange],
        tag: u64,
    ) -> Result<(), SubmitError> {
        if let Some(quirk) = self.no_dsm {
            return Err(Self::unsupported(OptionalCommand::DatasetManagement, quirk));
        }
        self.io.deallocate(ns, ranges, tag)
    }

    #[cold]
    fn unsupported(command: OptionalCommand, quirk: bool) -> SubmitError {
        SubmitError::new(SubmitErrorKind::CommandUnsupported { command, quirk }, None)
    }

    /// Rings the SQ doorbell once for everything queued, then the CQ head doorbell for what
    /// earlier polls reaped.
    #[inline]
    pub fn commit(&mut self) {
        self.io.commit(self.platform.regs());
    }

    /// Commits pending submissions (and the CQ head of earlier polls), then delivers up to `max`
    /// completions to `f`. Returns how many were delivered; their CQ head doorbell is written by
    /// the next `commit` or `poll`, after the SQ doorbell of whatever is resubmitted (or at once
    /// when the queue is too shallow for that: at most `depth / 2` commands in flight defer).
    #[inline]
    pub fn poll<F: FnMut(IoCompletion)>(&mut self, max: usize, f: F) -> usize {
        self.io.commit(self.platform.regs());
        self.platform.before_poll(self.qid);
        self.io.reap(self.platform.regs(), max, f)
    }

    /// Polls until the single outstanding request completes (bounded by the sync timeout).
    fn wait_one(&mut self) -> Result<IoCompletion, Error> {
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

    fn ensure_idle(&self) -> Result<(), Error> {
        match self.io.outstanding() {
            0 => Ok(()),
            outstanding => Err(Error::QueueBusy { outstanding }),
        }
    }

    fn finish(c: IoCompletion) -> Result<Option<DmaBuffer>, Error> {
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
        self.ensure_idle()?;
        self.read(ns, lba, blocks, buf, 0)?;
        let c = self.wait_one()?;
        Self::finish(c)?.ok_or(Error::IoTimeout { waited_ms: 0 })
    }

    /// Writes synchronously; returns the buffer. The queue pair must be idle.
    pub fn write_sync(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
    ) -> Result<DmaBuffer, Error> {
        self.ensure_idle()?;
        self.write(ns, lba, blocks, buf, 0)?;
        let c = self.wait_one()?;
        Self::finish(c)?.ok_or(Error::IoTimeout { waited_ms: 0 })
    }

    /// Runs one NVM command set I/O command on `ns` with `buf` as its data (either direction)
    /// and waits; returns the completion status and the buffer. The driver builds the data
    /// pointer from `buf` and sets the nsid, so `cmd`'s pointer fields and CDW0 flags must be
    /// zero. The length the device moves is read from the command (NLB of Read, Write and
    /// Compare; NR of Dataset Management) and must fit in `buf`; other opcodes with data, and
    /// namespaces with metadata or another command set, are refused
    /// ([`submit_single`](Self::submit_single) is the unsafe form). The queue pair must be idle.
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
        self.io.submit_owned(cmd, buf, bytes as usize, 0)?;
        let c = self.wait_one()?;
        Ok((c.status, c.buffer))
    }

    /// Flushes synchronously. The queue pair must be idle.
    pub fn flush_sync(&mut self, ns: &Namespace) -> Result<(), Error> {
        self.ensure_idle()?;
        self.flush(ns, 0)?;
        Self::finish(self.wait_one()?).map(|_| ())
    }
}

impl<P: Platform> Drop for QueuePair<P> {
    /// Deletes the queues (SQ, reap, CQ) and frees the rings, trackers and buffers in flight
    /// only once the device is done with them: after successful deletes, or after disabling the
    /// controller when a delete failed. If even that fails they are leaked (logged, and counted
    /// by [`DmaPool::leaks`](vfnvme_dma::DmaPool::leaks)).
    fn drop(&mut self) {
        // SAFETY: `io` is taken exactly once, here, and `self.io` is not used afterwards.
        let mut io = unsafe { ManuallyDrop::take(&mut self.io) };
        let (platform, qid) = (&self.platform, self.qid);
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
