//! The boundary between the C ABI and the generic driver on the control path: an object-safe
//! trait over `Controller<P>`, so one opaque C type serves every platform (VFIO, model). The
//! I/O path dispatches statically instead ([`crate::driver_ops::AnyQpair`]).

use crate::driver_ops::AnyQpair;
use crate::error::FfiResult;
use std::sync::Arc;
use vfnvme::hal::DmaPool;
use vfnvme::namespace::Namespace;

/// One data-less I/O command as the ABI layer hands it to a queue pair (reads and writes have
/// their own path in `Qpair::submit`, straight into the driver's `QueuePair::submit_data`).
#[derive(Debug, Clone, Copy)]
pub enum IoCmd<'a> {
    /// Flush the volatile write cache.
    Flush,
    /// Write zeroes to `blocks` blocks at `lba`.
    WriteZeroes {
        /// First block.
        lba: u64,
        /// Block count.
        blocks: u32,
    },
    /// Deallocate (TRIM) ranges.
    Deallocate {
        /// The ranges.
        ranges: &'a [crate::types::Range],
    },
}

/// What the ABI needs from a controller.
pub trait CtrlOps: Send + Sync {
    /// All active namespaces, ordered by nsid.
    fn namespaces(&self) -> Vec<Arc<Namespace>>;
    /// One namespace.
    fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>>;
    /// The DMA pool of the controller.
    fn dma(&self) -> &DmaPool;
    /// A new I/O queue pair of `depth` entries; `defer_sq_doorbell` and `prefer_sgl` as in
    /// [`vfnvme::QpairOptions`].
    fn alloc_qpair(
        &self,
        depth: u32,
        defer_sq_doorbell: bool,
        prefer_sgl: bool,
    ) -> FfiResult<AnyQpair>;
    /// A short name (PCI address or "model").
    fn name(&self) -> String;
    /// What the controller reported at bring-up.
    fn info(&self) -> crate::types::CtrlInfo;
    /// Reaps asynchronous events and runs the rescans they call for; returns how many
    /// asynchronous events arrived.
    fn process_admin(&self) -> FfiResult<u32>;
    /// A new subscription to namespace events (added, removed, changed).
    fn subscribe(&self) -> std::sync::mpsc::Receiver<vfnvme::namespaces::NamespaceEvent>;
    /// A new subscription to controller events (timeouts, aborts, resets, failure, removal).
    fn subscribe_controller(&self) -> std::sync::mpsc::Receiver<vfnvme::admin::ControllerEvent>;
    /// Resets the controller with its queue pairs open (`Controller::reset`).
    fn reset(&self) -> FfiResult<()>;
    /// The platform under the controller, for the optional model module to recognise its own.
    fn platform_any(&self) -> &dyn std::any::Any;
    /// One raw admin command through the safe admin API's checks.
    fn admin_passthru(
        &self,
        cmd: &crate::passthru_cmd::PassthruCmd,
        data: crate::passthru_cmd::PassthruData<'_>,
    ) -> FfiResult<crate::passthru_cmd::PassthruResult>;
    /// One raw NVM I/O command on a queue pair of its own (`QueuePair::passthru_sync`).
    fn io_passthru(
        &self,
        cmd: &crate::passthru_cmd::PassthruCmd,
        data: crate::passthru_cmd::PassthruData<'_>,
    ) -> FfiResult<crate::passthru_cmd::PassthruResult>;
}
