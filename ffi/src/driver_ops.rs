//! [`CtrlOps`]/[`QpairOps`] over the generic driver (`Controller<P>`, `QueuePair<P>`), for any
//! platform.

use crate::backend::{CtrlOps, IoCmd, QpairOps, RawCompletion, RawIova, Slot};
use crate::error::{FfiError, FfiResult, Status};
use crate::types::{copy_cstr, Completion, Cpl, CtrlInfo};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use vfnvme::hal::DmaPool;
use vfnvme::namespace::Namespace;
use vfnvme::platform::Platform;
use vfnvme::queue::{Op, Request};
use vfnvme::spec::command::DsmRange;
use vfnvme::{Controller, Error, QpairOptions, QueuePair, SubmitErrorKind};

/// The status code for a driver error.
pub fn status_of(e: &Error) -> Status {
    match e {
        Error::QueueDepthTooLarge { .. } | Error::QueueDepthTooSmall { .. } => {
            Status::VfnvmeErrInvalidArgument
        }
        Error::NoFreeQueue { .. } | Error::QueueBusy { .. } | Error::ResetWithQueues { .. } => {
            Status::VfnvmeErrBusy
        }
        Error::NoSuchNamespace { .. } => Status::VfnvmeErrNotFound,
        Error::Unsupported { .. } => Status::VfnvmeErrUnsupported,
        Error::Dma(_) => Status::VfnvmeErrNoMemory,
        Error::Submit(k) => status_of_submit(k),
        _ => Status::VfnvmeErrDevice,
    }
}

pub(crate) fn status_of_submit(k: &SubmitErrorKind) -> Status {
    match k {
        SubmitErrorKind::QueueFull { .. } => Status::VfnvmeErrQueueFull,
        SubmitErrorKind::LbaOutOfRange { .. } | SubmitErrorKind::ZeroBlocks => {
            Status::VfnvmeErrOutOfRange
        }
        SubmitErrorKind::NamespaceNotActive { .. } => Status::VfnvmeErrNotFound,
        SubmitErrorKind::ControllerStuck => Status::VfnvmeErrDevice,
        SubmitErrorKind::MetadataUnsupported { .. }
        | SubmitErrorKind::CommandUnsupported { .. } => Status::VfnvmeErrUnsupported,
        SubmitErrorKind::BufferTooSmall { .. } | SubmitErrorKind::Prp(_) => {
            Status::VfnvmeErrBadBuffer
        }
        _ => Status::VfnvmeErrInvalidArgument,
    }
}

/// The NVMe status field (without phase) of a driver status.
#[inline(always)]
pub(crate) fn status_field(s: vfnvme::spec::Status) -> u16 {
    if s.is_success() && !s.more && !s.dnr {
        return 0;
    }
    u16::from(s.sc)
        | (u16::from(s.sct & 0x7) << 8)
        | (u16::from(s.more) << 13)
        | (u16::from(s.dnr) << 14)
}

/// `vfnvme_cpl.rc` of a completion: VFNVME_ERR_BUSY when the device may still access the
/// request's memory (its buffer stays held), else 0.
#[inline(always)]
pub(crate) fn held_rc(memory_held: bool) -> i32 {
    if memory_held {
        Status::VfnvmeErrBusy as i32
    } else {
        0
    }
}

/// A submission error as an ABI error.
#[cold]
#[inline(never)]
fn submit_error(ns: &Namespace, e: vfnvme::SubmitError) -> FfiError {
    match e.kind {
        // Hot path under load: no formatting.
        SubmitErrorKind::QueueFull { .. } => FfiError::new(Status::VfnvmeErrQueueFull, ""),
        k => FfiError::new(
            status_of_submit(&k),
            format!("submit on namespace {}: {k}", ns.nsid()),
        ),
    }
}

/// A driver error as an ABI error.
pub fn ffi_error(what: &str, e: &Error) -> FfiError {
    FfiError::new(status_of(e), format!("{what}: {e}"))
}

impl<P: Platform> CtrlOps for Controller<P> {
    fn namespaces(&self) -> Vec<Arc<Namespace>> {
        Controller::namespaces(self)
    }
    fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        Controller::namespace(self, nsid)
    }
    fn dma(&self) -> &DmaPool {
        Controller::dma(self)
    }
    fn alloc_qpair(&self, depth: u32, defer_sq_doorbell: bool) -> FfiResult<Box<dyn QpairOps>> {
        let qp = Controller::alloc_qpair_with_payload::<Slot>(
            self,
            QpairOptions {
                depth,
                defer_sq_doorbell,
                ..QpairOptions::default()
            },
        )
        .map_err(|e| {
            ffi_error(
                &format!("{}: queue pair of depth {depth}", self.platform().name()),
                &e,
            )
        })?;
        Ok(Box::new(qp))
    }
    fn process_admin(&self) -> FfiResult<u32> {
        let report = self.process_admin_completions().map_err(|e| {
            ffi_error(
                &format!("{}: processing admin completions", self.platform().name()),
                &e,
            )
        })?;
        Ok(u32::try_from(report.async_events).unwrap_or(u32::MAX))
    }
    fn subscribe(&self) -> std::sync::mpsc::Receiver<vfnvme::namespaces::NamespaceEvent> {
        self.subscribe_namespace_events()
    }
    fn subscribe_controller(&self) -> std::sync::mpsc::Receiver<vfnvme::admin::ControllerEvent> {
        self.subscribe_controller_events()
    }
    fn reset(&self) -> FfiResult<()> {
        Controller::reset(self)
            .map_err(|e| ffi_error(&format!("{}: reset", self.platform().name()), &e))
    }
    fn platform_any(&self) -> &dyn std::any::Any {
        self.platform().as_ref()
    }
    fn name(&self) -> String {
        self.platform().name()
    }
    fn info(&self) -> CtrlInfo {
        let i = self.identify();
        let mut out = CtrlInfo {
            max_transfer: u32::try_from(i.max_transfer_bytes).unwrap_or(u32::MAX),
            max_queue_depth: i.max_queue_depth,
            io_queues: u32::from(i.io_queue_pairs),
            nn: i.nn(),
            io_retries: self.io_retries(),
            ..CtrlInfo::default()
        };
        copy_cstr(&mut out.serial, i.serial());
        copy_cstr(&mut out.model, i.model());
        copy_cstr(&mut out.firmware, i.firmware());
        out
    }
}

impl<P: Platform> QpairOps for QueuePair<P, Slot> {
    #[inline]
    fn submit(&mut self, ns: &Namespace, cmd: IoCmd<'_>, tag: Slot) -> FfiResult<()> {
        let r = match cmd {
            // SAFETY: `buf` is a span of a live allocation of this controller's pool
            // (ffi::qpair made it); the C caller keeps the buffer allocated and leaves it alone
            // until the completion callback, as the header requires.
            IoCmd::Read { lba, blocks, buf } => unsafe {
                Request::borrowed(Op::Read, ns, lba, blocks, buf, tag)
                    .and_then(|r| self.submit(r).map(drop))
            },
            // SAFETY: as for reads.
            IoCmd::Write { lba, blocks, buf } => unsafe {
                Request::borrowed(Op::Write, ns, lba, blocks, buf, tag)
                    .and_then(|r| self.submit(r).map(drop))
            },
            IoCmd::Flush => self.flush(ns, tag),
            IoCmd::WriteZeroes { lba, blocks } => self.write_zeroes(ns, lba, blocks, tag),
            IoCmd::Deallocate { ranges } => {
                let mut list = [DsmRange::default(); 256];
                let n = ranges.len().min(list.len());
                for (d, r) in list.iter_mut().zip(ranges) {
                    *d = DsmRange {
                        attributes: 0,
                        blocks: r.blocks,
                        slba: r.lba,
                    };
                }
                self.deallocate(ns, &list[..n], tag)
            }
        };
        r.map_err(|e| submit_error(ns, e))
    }
    #[inline]
    fn submit_rw(
        &mut self,
        ns: &Namespace,
        write: bool,
        lba: u64,
        blocks: u32,
        buf: RawIova,
        tag: Slot,
    ) -> FfiResult<()> {
        let op = if write { Op::Write } else { Op::Read };
        // SAFETY: `buf` is a span of a live allocation of this controller's pool (ffi::qpair
        // made it); the C caller keeps the buffer allocated and leaves it alone until the
        // completion, as the header requires.
        unsafe { Request::borrowed(op, ns, lba, blocks, buf, tag) }
            .and_then(|r| self.submit(r).map(drop))
            .map_err(|e| submit_error(ns, e))
    }
    #[inline]
    fn next_slot(&self) -> Option<u16> {
        QueuePair::next_slot(self)
    }
    #[cold]
    fn no_slot(&self) -> FfiError {
        match self.why_full() {
            SubmitErrorKind::QueueFull { .. } => FfiError::new(Status::VfnvmeErrQueueFull, ""),
            k => FfiError::new(
                status_of_submit(&k),
                format!("queue pair {}: {k}", self.qid()),
            ),
        }
    }
    #[inline]
    fn commit(&mut self) {
        QueuePair::commit(self)
    }
    #[inline]
    fn poll(&mut self, max: u32, f: &mut dyn FnMut(RawCompletion)) -> usize {
        QueuePair::poll(self, max as usize, |c| {
            f(RawCompletion {
                tag: c.tag,
                slot: c.slot,
                status: status_field(c.status),
                cdw0: c.cdw0,
                rc: held_rc(c.memory_held),
                memory_held: c.memory_held,
            })
        })
    }
    #[inline]
    fn poll_into(&mut self, in_flight: &[AtomicUsize], out: &mut [Completion]) -> usize {
        let mut n = 0usize;
        QueuePair::poll(self, out.len(), |c| {
            // The device may still access a held request's buffer: its mark stays.
            if !c.memory_held {
                if let Some(m) = in_flight.get(usize::from(c.slot)) {
                    m.store(0, Ordering::Relaxed);
                }
            }
            // `poll` delivers at most `out.len()` completions.
            if let Some(o) = out.get_mut(n) {
                let mut cpl = Cpl::from_status(status_field(c.status), c.cdw0);
                cpl.rc = held_rc(c.memory_held);
                *o = Completion {
                    arg: c.tag.arg,
                    cpl,
                };
                n += 1;
            }
        });
        n
    }
    #[inline]
    fn outstanding(&self) -> u32 {
        u32::try_from(QueuePair::outstanding(self)).unwrap_or(u32::MAX)
    }
}
