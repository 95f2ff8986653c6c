//! What the multipath ABI needs from a subsystem and a channel, over the generic driver
//! (`Subsystem<P>`, `IoChannel<P>`) for any platform.

use crate::error::{FfiError, FfiResult, Status};
use std::sync::Arc;
use vfnvme::hal::{DmaPool, DmaSpan};
use vfnvme::multipath::{
    ChannelCompletion, ChannelError, ChannelOptions, ChannelStats, Head, IoChannel, Subsystem,
    SubsystemReport,
};
use vfnvme::platform::Platform;

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
    fn open_channel(&self, head: Arc<Head>, opts: ChannelOptions)
        -> FfiResult<Box<dyn ChannelOps>>;
    /// The platform of controller `index`, for the optional model module.
    fn platform_any(&self, index: usize) -> Option<Arc<dyn std::any::Any + Send + Sync>>;
    /// Namespace Attachment: attaches (`attach`) or detaches namespace `nsid` to or from
    /// controller `index` (the command goes to that controller).
    fn namespace_attachment(&self, index: usize, nsid: u32, attach: bool) -> FfiResult<()>;
}

/// One thread's handle on a head, whatever its platform. `Send`, used by one thread at a time.
pub trait ChannelOps: Send {
    /// `IoChannel::submit_raw`.
    ///
    /// # Safety
    /// As `IoChannel::submit_raw`: `span` is from the subsystem's pool and stays allocated
    /// until the request is delivered.
    unsafe fn submit_raw(
        &mut self,
        write: bool,
        lba: u64,
        blocks: u32,
        span: DmaSpan,
        tag: u64,
    ) -> Result<(), ChannelError>;
    /// `IoChannel::flush`.
    fn flush(&mut self, tag: u64) -> Result<(), ChannelError>;
    /// `IoChannel::commit`.
    fn commit(&mut self);
    /// `IoChannel::poll`.
    fn poll(&mut self, max: usize, f: &mut dyn FnMut(ChannelCompletion)) -> usize;
    /// `IoChannel::stats`.
    fn stats(&self) -> ChannelStats;
    /// `IoChannel::outstanding`.
    fn outstanding(&self) -> usize;
    /// The head.
    fn head(&self) -> &Arc<Head>;
}

/// [`SubsysOps`] over a driver subsystem.
pub struct Sub<P: Platform>(pub Arc<Subsystem<P>>, pub DmaPool);

impl<P: Platform> Sub<P> {
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

impl<P: Platform> SubsysOps for Sub<P> {
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
    fn open_channel(
        &self,
        head: Arc<Head>,
        opts: ChannelOptions,
    ) -> FfiResult<Box<dyn ChannelOps>> {
        let ch = IoChannel::open(self.0.clone(), head, opts)
            .map_err(|e| FfiError::new(Status::VfnvmeErrInvalidArgument, e.to_string()))?;
        Ok(Box::new(ch))
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

impl<P: Platform> ChannelOps for IoChannel<P> {
    #[inline(always)]
    unsafe fn submit_raw(
        &mut self,
        write: bool,
        lba: u64,
        blocks: u32,
        span: DmaSpan,
        tag: u64,
    ) -> Result<(), ChannelError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { IoChannel::submit_raw(self, write, lba, blocks, span, tag) }.map_err(|e| e.error)
    }
    fn flush(&mut self, tag: u64) -> Result<(), ChannelError> {
        IoChannel::flush(self, tag).map_err(|e| e.error)
    }
    #[inline]
    fn commit(&mut self) {
        IoChannel::commit(self)
    }
    #[inline]
    fn poll(&mut self, max: usize, f: &mut dyn FnMut(ChannelCompletion)) -> usize {
        IoChannel::poll(self, max, f)
    }
    fn stats(&self) -> ChannelStats {
        IoChannel::stats(self)
    }
    fn outstanding(&self) -> usize {
        IoChannel::outstanding(self)
    }
    fn head(&self) -> &Arc<Head> {
        IoChannel::head(self)
    }
}
