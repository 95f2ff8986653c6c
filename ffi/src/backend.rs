//! The boundary between the C ABI and the generic driver: object-safe traits over
//! `Controller<P>`/`QueuePair<P>`, so one opaque C type serves every platform (VFIO, model).
//! Dynamic dispatch happens here only, once per call.

use crate::error::FfiResult;
use std::sync::Arc;
use vfnvme::hal::DmaPool;
use vfnvme::namespace::Namespace;

/// A data buffer already translated to the device's address space: a range of one live
/// allocation of the controller's pool (checked by `ffi::qpair`), whose lifetime the C caller
/// guarantees until the completion.
pub type RawIova = vfnvme::hal::DmaSpan;

/// One I/O command as the ABI layer hands it to a queue pair.
#[derive(Debug, Clone, Copy)]
pub enum IoCmd<'a> {
    /// Read `blocks` blocks at `lba` into `buf`.
    Read {
        /// First block.
        lba: u64,
        /// Block count.
        blocks: u32,
        /// Destination.
        buf: RawIova,
    },
    /// Write `blocks` blocks at `lba` from `buf`.
    Write {
        /// First block.
        lba: u64,
        /// Block count.
        blocks: u32,
        /// Source.
        buf: RawIova,
    },
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

/// One completion as a queue pair reports it.
#[derive(Debug, Clone, Copy)]
pub struct RawCompletion {
    /// The callback and argument given at submission.
    pub tag: Slot,
    /// The request's slot in the driver's trackers (indexes the in-flight buffer marks).
    pub slot: u16,
    /// NVMe status field (without phase), 0 = success.
    pub status: u16,
    /// Dword 0.
    pub cdw0: u32,
    /// 0, or a negative status code for a driver-side failure.
    pub rc: i32,
    /// The device may still access the request's memory (the controller could not be
    /// disabled): the request's in-flight mark stays, so that its buffer is never freed.
    pub memory_held: bool,
}

/// The callback and argument of one command in flight: the payload each request carries in the
/// driver's command tracker (`QueuePair<P, Slot>`), from submission to completion.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// The callback given at submission (may be NULL).
    pub cb: crate::types::Callback,
    /// The argument given at submission.
    pub arg: *mut std::ffi::c_void,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            cb: None,
            arg: std::ptr::null_mut(),
        }
    }
}

// SAFETY: `arg` is an opaque C cookie that vfnvme never dereferences; it is only handed back to
// the callback, on whichever thread polls the queue pair (the header says so), and `cb` is a
// plain function pointer.
unsafe impl Send for Slot {}

/// What the ABI needs from a controller.
pub trait CtrlOps: Send + Sync {
    /// All active namespaces, ordered by nsid.
    fn namespaces(&self) -> Vec<Arc<Namespace>>;
    /// One namespace.
    fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>>;
    /// The DMA pool of the controller.
    fn dma(&self) -> &DmaPool;
    /// A new I/O queue pair of `depth` entries; `defer_sq_doorbell` as in
    /// [`vfnvme::QpairOptions`].
    fn alloc_qpair(&self, depth: u32, defer_sq_doorbell: bool) -> FfiResult<Box<dyn QpairOps>>;
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
}

/// What the ABI needs from a queue pair. `Send`, used by one thread at a time.
pub trait QpairOps: Send {
    /// Queues one command on namespace `ns` (not yet visible to the device until `commit`).
    fn submit(&mut self, ns: &Namespace, cmd: IoCmd<'_>, tag: Slot) -> FfiResult<()>;
    /// Queues a read (`write` false) or write of `blocks` blocks at `lba` on `buf`: the data
    /// path of [`QpairOps::submit`] without the command enum.
    fn submit_rw(
        &mut self,
        ns: &Namespace,
        write: bool,
        lba: u64,
        blocks: u32,
        buf: RawIova,
        tag: Slot,
    ) -> FfiResult<()>;
    /// The slot the next submitted request will occupy (`RawCompletion::slot` gives it back),
    /// or `None` when the queue pair is full.
    fn next_slot(&self) -> Option<u16>;
    /// Why `next_slot` is `None`: VFNVME_ERR_QUEUE_FULL, or VFNVME_ERR_DEVICE when the queue
    /// pair takes nothing more (its controller could not be disabled).
    fn no_slot(&self) -> crate::error::FfiError;
    /// Rings the submission doorbell once for everything queued.
    fn commit(&mut self);
    /// Reaps up to `max` completions, calling `f` for each; returns how many.
    fn poll(&mut self, max: u32, f: &mut dyn FnMut(RawCompletion)) -> usize;
    /// Reaps up to `out.len()` completions straight into `out[0..n]` (the batch path: no call
    /// per completion): each entry gets the `arg` given at submission, and the request's
    /// `in_flight` mark is cleared (kept if the device may still access its memory). Returns
    /// `n`.
    fn poll_into(
        &mut self,
        in_flight: &[std::sync::atomic::AtomicUsize],
        out: &mut [crate::types::Completion],
    ) -> usize;
    /// Commands submitted and not yet completed.
    fn outstanding(&self) -> u32;
}
