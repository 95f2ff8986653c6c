//! What the multipath ABI needs from a subsystem (a trait, for the control path), and every
//! call from the ABI into a driver channel (submit, commit, poll): [`AnyChannel`], the channel
//! of any platform, dispatched statically.

use crate::driver_ops::{self, refusal, status_of_channel, AbiPlatform};
use crate::error::{FfiError, FfiResult, Status};
use crate::types::Completion;
use std::sync::Arc;
use vfnvme::hal::{DmaPool, DmaSpan};
use vfnvme::multipath::{
    ChannelCompletion, ChannelError, ChannelOptions, ChannelStats, Head, IoChannel, Subsystem,
    SubsystemReport,
};
use vfnvme::vfio_platform::VfioPlatform;

/// A subsystem, whatever its platform.
pub trait SubsysOps: Send + Sync {
    /// The subsystem NQN.
    fn nqn(&self) -> String;
    /// `Subsystem::poll`.
    fn poll(&self) -> SubsystemReport;
    /// Every head, by nsid.
    fn heads(&self) -> Vec<Arc<Head>>;
    /// The (first) head of `nsid`.
    fn head(&self, nsid: u32) -> Option<Arc<Head>>;
    /// Every controller: (index, name, live path).
    fn controllers(&self) -> Vec<(usize, String, bool)>;
    /// The DMA pool every controller shares.
    fn dma(&self) -> &DmaPool;
    /// A channel on `head`.
    fn open_channel(&self, head: Arc<Head>, opts: ChannelOptions) -> FfiResult<AnyChannel>;
    /// The platform of controller `index`, for the optional model module.
    fn platform_any(&self, index: usize) -> Option<Arc<dyn std::any::Any + Send + Sync>>;
    /// Namespace Attachment: attaches (`attach`) or detaches namespace `nsid` to or from
    /// controller `index` (the command goes to that controller).
    fn namespace_attachment(&self, index: usize, nsid: u32, attach: bool) -> FfiResult<()>;
}

/// [`SubsysOps`] over a driver subsystem.
pub struct Sub<P: AbiPlatform>(pub Arc<Subsystem<P>>, pub DmaPool);

impl<P: AbiPlatform> Sub<P> {
    /// Wraps `sub`; fails if it has no controller (no DMA pool to share).
    pub fn new(sub: Arc<Subsystem<P>>) -> FfiResult<Self> {
        let pool = sub.controller(0).map(|c| c.dma().clone()).ok_or_else(|| {
            FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                "a subsystem needs at least one controller; pass one or more addresses",
            )
        })?;
        Ok(Sub(sub, pool))
    }
}

impl<P: AbiPlatform> SubsysOps for Sub<P> {
    fn nqn(&self) -> String {
        self.0.nqn().to_string()
    }
    fn poll(&self) -> SubsystemReport {
        self.0.poll()
    }
    fn heads(&self) -> Vec<Arc<Head>> {
        self.0.heads()
    }
    fn head(&self, nsid: u32) -> Option<Arc<Head>> {
        self.0.head(nsid)
    }
    fn controllers(&self) -> Vec<(usize, String, bool)> {
        self.0
            .paths_named()
            .into_iter()
            .map(|(i, name, alive, _held)| (i, name, alive))
            .collect()
    }
    fn dma(&self) -> &DmaPool {
        &self.1
    }
    fn open_channel(&self, head: Arc<Head>, opts: ChannelOptions) -> FfiResult<AnyChannel> {
        let ch = IoChannel::open(self.0.clone(), head, opts)
            .map_err(|e| FfiError::new(Status::VfnvmeErrInvalidArgument, e.to_string()))?;
        Ok(P::channel(ch))
    }
    fn platform_any(&self, index: usize) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        self.0
            .controller(index)
            .map(|c| c.platform().clone() as Arc<dyn std::any::Any + Send + Sync>)
    }
    fn namespace_attachment(&self, index: usize, nsid: u32, attach: bool) -> FfiResult<()> {
        let c = self.0.controller(index).ok_or_else(|| {
            FfiError::new(
                Status::VfnvmeErrNotFound,
                format!("controller {index}: the subsystem has no such controller"),
            )
        })?;
        let cntlid = c.identify().identify.cntlid;
        c.namespace_attachment(nsid, attach, &[cntlid])
            .map_err(|e| {
                crate::driver_ops::ffi_error(
                    &format!(
                        "{}: Namespace Attachment ({}) of namespace {nsid}",
                        c.platform().name(),
                        if attach { "attach" } else { "detach" }
                    ),
                    &e,
                )
            })
    }
}

/// A driver channel of any platform; each request's tag is its record in the C request
/// table (`Requests`).
pub enum AnyChannel {
    /// Over VFIO devices.
    Vfio(IoChannel<VfioPlatform>),
    /// Over the in-memory model.
    #[cfg(feature = "model")]
    Model(IoChannel<vfnvme_model::ModelPlatform>),
}

/// `$body` with `$c` bound to the channel inside `$ch`, whatever its platform.
macro_rules! each {
    ($ch:expr, $c:ident => $body:expr) => {
        match $ch {
            AnyChannel::Vfio($c) => $body,
            #[cfg(feature = "model")]
            AnyChannel::Model($c) => $body,
        }
    };
}

/// A submission the channel refused, as an ABI error.
#[cold]
#[inline(never)]
fn refused(e: &ChannelError) -> FfiError {
    refusal(status_of_channel(e).0, e)
}

/// The completion C sees of a request the channel finished (its `arg` filled in when it is
/// handed out).
#[inline(always)]
fn completion(c: &ChannelCompletion) -> Completion {
    let mut out = match &c.result {
        Ok(()) => driver_ops::completion(0, 0, 0, c.memory_held),
        Err(e) => failure(e, c.memory_held),
    };
    out.path = c.path.map_or(-1, |p| i32::try_from(p).unwrap_or(-1));
    out.failovers = u32::from(c.failovers);
    out
}

#[cold]
#[inline(never)]
fn failure(e: &ChannelError, held: bool) -> Completion {
    let (status, reason) = status_of_channel(e);
    let mut out = match e {
        ChannelError::Device { status } => driver_ops::completion(status.field(), 0, 0, held),
        _ => driver_ops::completion(0, 0, status.code(), held),
    };
    out.reason = reason;
    out
}

impl AnyChannel {
    /// Queues a read (`write` false) or write of `blocks` blocks at `lba` on `span` for record
    /// `rec`.
    ///
    /// # Safety
    /// `span` is a range of a live allocation of the subsystem's pool, which the C caller
    /// keeps allocated and leaves alone until the request is delivered (the header's
    /// contract), and whose free the request's mark refuses until then.
    #[inline(always)]
    pub unsafe fn submit_rw(
        &mut self,
        write: bool,
        lba: u64,
        blocks: u32,
        span: DmaSpan,
        rec: u32,
    ) -> FfiResult<()> {
        let tag = u64::from(rec);
        // SAFETY: the caller's contract, passed on.
        each!(self, c => unsafe { c.submit_raw(write, lba, blocks, span, tag) })
            .map_err(|e| refused(&e.error))
    }
    /// Queues a flush for record `rec`.
    pub fn flush(&mut self, rec: u32) -> FfiResult<()> {
        each!(self, c => c.flush(u64::from(rec))).map_err(|e| refused(&e.error))
    }
    /// Rings the doorbell of every path with new requests.
    #[inline]
    pub fn commit(&mut self) {
        each!(self, c => c.commit())
    }
    /// Delivers up to `max` finished requests (more when queued requests fail at once) to
    /// `f(record, completion, held)`; returns how many.
    #[inline]
    pub fn poll(&mut self, max: usize, mut f: impl FnMut(u32, Completion, bool)) -> usize {
        each!(self, c => c.poll(max, |c| {
            let rec = u32::try_from(c.tag).unwrap_or(u32::MAX);
            f(rec, completion(&c), c.memory_held)
        }))
    }
    /// The channel's counters.
    pub fn stats(&self) -> ChannelStats {
        each!(self, c => c.stats())
    }
    /// Requests accepted and not yet delivered.
    pub fn outstanding(&self) -> usize {
        each!(self, c => c.outstanding())
    }
}
