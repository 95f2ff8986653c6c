//! Every call from the ABI into a driver queue pair (submit, commit, poll) and the one mapping
//! of driver errors and statuses to the ABI's: [`CtrlOps`] over `Controller<P>` and
//! [`AnyQpair`], the queue pair of any platform, dispatched statically (a `match`, inlined).

pub mod backend;
pub mod channel;

use self::backend::{CtrlOps, IoCmd};
use crate::error::{FfiError, FfiResult, Status};
use crate::passthru_cmd::{PassthruCmd, PassthruData, PassthruResult};
use crate::types::{copy_cstr, Completion, Cpl, CtrlInfo, MpFail};
use std::sync::Arc;
use vfnvme::hal::DmaPool;
use vfnvme::multipath::ChannelError;
use vfnvme::namespace::Namespace;
use vfnvme::platform::Platform;
use vfnvme::spec::command::DsmRange;
use vfnvme::vfio_platform::VfioPlatform;
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

/// The status code for a refused submission (queue pair or channel).
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
        SubmitErrorKind::BufferTooSmall { .. }
        | SubmitErrorKind::MetadataBuffer { .. }
        | SubmitErrorKind::Prp(_) => Status::VfnvmeErrBadBuffer,
        SubmitErrorKind::BadSpanCount { count, max } if count > max => {
            Status::VfnvmeErrTooManyPieces
        }
        SubmitErrorKind::NotPrpDescribable { .. } | SubmitErrorKind::SglMisaligned { .. } => {
            Status::VfnvmeErrNotPrpDescribable
        }
        _ => Status::VfnvmeErrInvalidArgument,
    }
}

/// The status code and completion reason of a channel error, whether the channel refused the
/// submission or failed the request later.
pub(crate) fn status_of_channel(e: &ChannelError) -> (Status, MpFail) {
    match e {
        ChannelError::ChannelFull { .. } => {
            (Status::VfnvmeErrQueueFull, MpFail::VfnvmeMpFailRefused)
        }
        ChannelError::NoPath { .. } => (Status::VfnvmeErrNoPath, MpFail::VfnvmeMpFailNoPath),
        ChannelError::QueueingOff { .. } => {
            (Status::VfnvmeErrNoPath, MpFail::VfnvmeMpFailQueueingOff)
        }
        ChannelError::NoPathTimeout { .. } => {
            (Status::VfnvmeErrNoPath, MpFail::VfnvmeMpFailNoPathTimeout)
        }
        ChannelError::HeadRemoved { .. } => {
            (Status::VfnvmeErrNotFound, MpFail::VfnvmeMpFailHeadRemoved)
        }
        ChannelError::Device { .. } => (Status::VfnvmeErrDevice, MpFail::VfnvmeMpFailNone),
        ChannelError::Refused(k) => (status_of_submit(k), MpFail::VfnvmeMpFailRefused),
        _ => (Status::VfnvmeErrDevice, MpFail::VfnvmeMpFailRefused),
    }
}

/// A refused submission as an ABI error: `status` with `what` as the message (queue full, hot
/// under load, without one).
#[cold]
#[inline(never)]
pub(crate) fn refusal(status: Status, what: &dyn std::fmt::Display) -> FfiError {
    match status {
        Status::VfnvmeErrQueueFull => FfiError::new(status, ""),
        _ => FfiError::new(status, what.to_string()),
    }
}

/// A submission the driver's queue pair refused.
#[cold]
#[inline(never)]
pub(crate) fn refused(ns: &Namespace, k: &SubmitErrorKind) -> FfiError {
    refusal(
        status_of_submit(k),
        &format_args!("submit on namespace {}: {k}", ns.nsid()),
    )
}

/// The completion C sees (its `arg` filled in when it is handed out) of a request the driver
/// ended with `status` (an NVMe status field) or the driver failure `rc`: `rc` is
/// VFNVME_ERR_BUSY when the device may still access the request's memory (`held`).
#[inline(always)]
pub(crate) fn completion(status: u16, cdw0: u32, rc: i32, held: bool) -> Completion {
    let mut cpl = Cpl::from_status(status, cdw0);
    cpl.rc = if held {
        Status::VfnvmeErrBusy.code()
    } else {
        rc
    };
    Completion {
        cpl,
        ..Completion::default()
    }
}

/// A driver error as an ABI error.
pub fn ffi_error(what: &str, e: &Error) -> FfiError {
    FfiError::new(status_of(e), format!("{what}: {e}"))
}

/// The platforms a C queue pair or channel runs on: static dispatch over them.
pub trait AbiPlatform: Platform + Sized {
    /// `qp` as the queue pair of any platform.
    fn qpair(qp: QueuePair<Self, u32>) -> AnyQpair;
    /// `ch` as the channel of any platform.
    fn channel(ch: vfnvme::multipath::IoChannel<Self>) -> channel::AnyChannel;
}

impl AbiPlatform for VfioPlatform {
    fn qpair(qp: QueuePair<Self, u32>) -> AnyQpair {
        AnyQpair::Vfio(qp)
    }
    fn channel(ch: vfnvme::multipath::IoChannel<Self>) -> channel::AnyChannel {
        channel::AnyChannel::Vfio(ch)
    }
}

#[cfg(feature = "model")]
impl AbiPlatform for vfnvme_model::ModelPlatform {
    fn qpair(qp: QueuePair<Self, u32>) -> AnyQpair {
        AnyQpair::Model(qp)
    }
    fn channel(ch: vfnvme::multipath::IoChannel<Self>) -> channel::AnyChannel {
        channel::AnyChannel::Model(ch)
    }
}

impl<P: AbiPlatform> CtrlOps for Controller<P> {
    fn admin_passthru(
        &self,
        cmd: &PassthruCmd,
        data: PassthruData<'_>,
    ) -> FfiResult<PassthruResult> {
        let ac = vfnvme::spec::AdminCommand {
            opcode: cmd.opcode,
            nsid: cmd.nsid,
            cdw2: cmd.cdw2,
            cdw3: cmd.cdw3,
            cdw10: cmd.cdw10,
            cdw11: cmd.cdw11,
            cdw12: cmd.cdw12,
            cdw13: cmd.cdw13,
            cdw14: cmd.cdw14,
            cdw15: cmd.cdw15,
        };
        let done = match data {
            PassthruData::None => self.admin(ac),
            PassthruData::ToDevice(d) => self.admin_write(ac, d),
            PassthruData::FromDevice(d) => self.admin_read(ac, d.len()).map(|(c, b)| {
                crate::passthru_cmd::deliver(PassthruData::FromDevice(d), b.as_slice());
                c
            }),
        };
        match done {
            Ok(c) => Ok(PassthruResult {
                cdw0: c.dw0,
                status: 0,
            }),
            Err(Error::AdminFailed { status, .. }) => Ok(PassthruResult {
                cdw0: 0,
                status: crate::passthru_cmd::status_field(status),
            }),
            Err(e) => Err(ffi_error(
                &format!(
                    "{}: admin opcode {:#04x}",
                    self.platform().name(),
                    cmd.opcode
                ),
                &e,
            )),
        }
    }
    fn io_passthru(&self, cmd: &PassthruCmd, data: PassthruData<'_>) -> FfiResult<PassthruResult> {
        let name = self.platform().name();
        let what = format!("{name}: I/O opcode {:#04x}", cmd.opcode);
        let ns = Controller::namespace(self, cmd.nsid).ok_or_else(|| {
            FfiError::new(
                Status::VfnvmeErrNotFound,
                format!(
                    "{what}: namespace {} is not active; give an active nsid",
                    cmd.nsid
                ),
            )
        })?;
        let mut c = vfnvme::spec::Command::new(cmd.opcode);
        c.cdw2 = cmd.cdw2;
        c.cdw3 = cmd.cdw3;
        c.cdw10 = cmd.cdw10;
        c.cdw11 = cmd.cdw11;
        c.cdw12 = cmd.cdw12;
        c.cdw13 = cmd.cdw13;
        c.cdw14 = cmd.cdw14;
        c.cdw15 = cmd.cdw15;
        let buf = match &data {
            PassthruData::None => None,
            PassthruData::FromDevice(d) => Some(self.dma().alloc(d.len())),
            PassthruData::ToDevice(d) => Some(self.dma().alloc(d.len()).map(|mut b| {
                b.as_mut_slice()[..d.len()].copy_from_slice(d);
                b
            })),
        }
        .transpose()
        .map_err(|e| FfiError::new(Status::VfnvmeErrNoMemory, format!("{what}: {e}")))?;
        let mut qp = Controller::alloc_qpair(
            self,
            QpairOptions {
                depth: 2,
                ..QpairOptions::default()
            },
        )
        .map_err(|e| ffi_error(&format!("{what}: its queue pair"), &e))?;
        let (status, back) = qp
            .passthru_sync(&ns, c, buf)
            .map_err(|e| ffi_error(&what, &e))?;
        if let Some(b) = back {
            crate::passthru_cmd::deliver(data, b.as_slice());
        }
        Ok(PassthruResult {
            cdw0: 0,
            status: if status.is_success() {
                0
            } else {
                crate::passthru_cmd::status_field(status)
            },
        })
    }
    fn namespaces(&self) -> Vec<Arc<Namespace>> {
        Controller::namespaces(self)
    }
    fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        Controller::namespace(self, nsid)
    }
    fn dma(&self) -> &DmaPool {
        Controller::dma(self)
    }
    fn alloc_qpair(
        &self,
        depth: u32,
        defer_sq_doorbell: bool,
        prefer_sgl: bool,
    ) -> FfiResult<AnyQpair> {
        let qp = Controller::alloc_qpair_with_payload::<u32>(
            self,
            QpairOptions {
                depth,
                defer_sq_doorbell,
                prefer_sgl,
                ..QpairOptions::default()
            },
        )
        .map_err(|e| {
            ffi_error(
                &format!("{}: queue pair of depth {depth}", self.platform().name()),
                &e,
            )
        })?;
        Ok(P::qpair(qp))
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

/// A driver queue pair of any platform; each request's payload is its record in the C request
/// table (`Requests`).
pub enum AnyQpair {
    /// On a VFIO device.
    Vfio(QueuePair<VfioPlatform, u32>),
    /// On the in-memory model.
    #[cfg(feature = "model")]
    Model(QueuePair<vfnvme_model::ModelPlatform, u32>),
}

/// `$body` with `$q` bound to the queue pair inside `$qp`, whatever its platform.
macro_rules! each {
    ($qp:expr, $q:ident => $body:expr) => {
        match $qp {
            AnyQpair::Vfio($q) => $body,
            #[cfg(feature = "model")]
            AnyQpair::Model($q) => $body,
        }
    };
}
pub(crate) use each;

impl AnyQpair {
    /// Queues the data-less command `cmd` on `ns` for record `rec`.
    pub fn submit(&mut self, ns: &Namespace, cmd: IoCmd<'_>, rec: u32) -> FfiResult<()> {
        let r = match cmd {
            IoCmd::Flush => each!(self, q => q.flush(ns, rec)),
            IoCmd::WriteZeroes { lba, blocks } => {
                each!(self, q => q.write_zeroes(ns, lba, blocks, rec))
            }
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
                each!(self, q => q.deallocate(ns, &list[..n], rec))
            }
        };
        r.map_err(|e| refused(ns, &e.kind))
    }

    /// Rings the submission doorbell once for everything queued.
    #[inline]
    pub fn commit(&mut self) {
        each!(self, q => q.commit())
    }

    /// Reaps up to `max` completions, calling `f(record, completion, held)` for each; returns
    /// how many.
    #[inline]
    pub fn poll(&mut self, max: u32, mut f: impl FnMut(u32, Completion, bool)) -> usize {
        each!(self, q => q.poll(max as usize, |c| {
            f(c.tag, completion(c.status.field(), c.cdw0, 0, c.memory_held), c.memory_held)
        }))
    }

    /// Commands submitted and not yet completed.
    #[inline]
    pub fn outstanding(&self) -> u32 {
        u32::try_from(each!(self, q => q.outstanding())).unwrap_or(u32::MAX)
    }
}
