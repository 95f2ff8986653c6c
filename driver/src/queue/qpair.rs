//! The I/O API: a queue pair owned by one thread at a time.

use super::io_queue::{Direction, IoCompletion, IoQueue};
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
    io: IoQueue,
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
        if let Err(e) = shared.admin_sync(create_cq) {
            shared.unreserve_qid(qid);
            return Err(e);
        }
        if let Err(e) = shared.admin_sync(create_sq) {
            let _ = shared.admin_sync(Command::delete_io_cq(qid));
            shared.unreserve_qid(qid);
            return Err(e);
        }
        Ok(QueuePair {
            io,
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

    /// Queues a read or write on caller-owned memory at device address `iova` (the C ABI's
    /// entry point); the completion carries no buffer.
    ///
    /// # Safety
    /// `iova..iova+len` must be mapped for this controller (e.g. memory of this controller's
    /// [`vfnvme_dma::DmaPool`]) and must stay allocated and untouched until the request
    /// completes or the queue pair is dropped.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn submit_raw(
        &mut self,
        ns: &Namespace,
        dir: Direction,
        lba: u64,
        blocks: u32,
        iova: u64,
        len: usize,
        tag: u64,
    ) -> Result<(), SubmitError> {
        // SAFETY: the caller upholds the contract documented above.
        unsafe { self.io.submit_raw(ns, dir, lba, blocks, iova, len, tag) }
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

    /// Flushes synchronously. The queue pair must be idle.
    pub fn flush_sync(&mut self, ns: &Namespace) -> Result<(), Error> {
        self.ensure_idle()?;
        self.flush(ns, 0)?;
        Self::finish(self.wait_one()?).map(|_| ())
    }
}

impl<P: Platform> Drop for QueuePair<P> {
    fn drop(&mut self) {
        self.shared.release_qpair(self.qid);
    }
}
