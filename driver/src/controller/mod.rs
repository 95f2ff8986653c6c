//! The controller: bring-up, admin commands, queue pair creation, namespaces, clean shutdown.

mod admin_data;
mod ana;
mod bringup;
mod events;
mod queue_pair;
mod reset;

pub use crate::admin::AerResult;
use crate::admin::Shared;
pub use admin_data::LogPageRequest;
pub use events::AdminEventReport;
pub use queue_pair::{QpairOptions, QueuePair};

use crate::error::Error;
use crate::namespace::Namespace;
use crate::namespaces::scan::{self, ScanMode, ScanPages, ScanReport};
use crate::namespaces::{NamespaceEvent, NamespaceRegistry};
use crate::platform::Platform;
use crate::spec::identify::IdentifyController;
use crate::spec::registers::{Cap, Version};
use crate::spec::{Command, Completion};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use vfnvme_hal::DmaPool;

/// How to bring the controller up.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Admin queue depth (2..=4096, capped at CAP.MQES + 1). Namespace scans keep this many
    /// Identify commands in flight, so deeper scans faster.
    pub admin_depth: u16,
    /// Use shadow doorbells (Doorbell Buffer Config) when the controller supports them.
    pub shadow_doorbells: bool,
    /// I/O queue pairs to ask for (Set Features, Number of Queues).
    pub io_queues: u16,
    /// How long an admin command may take before it is reported as timed out.
    pub admin_timeout_ms: u64,
    /// How long an I/O command may take before its queue pair sends an Abort for it; if it
    /// still has not completed after as long again, the controller is reset (its requests
    /// then end with [`Status::ABORTED_BY_RESET`](crate::spec::Status::ABORTED_BY_RESET)).
    /// 0 turns I/O timeouts off. Checked by each queue pair's poll: one clock read per poll
    /// that finds nothing (and per 1024 polls otherwise), none while nothing is outstanding.
    pub io_timeout_ms: u64,
    /// How often an I/O command is sent again when it fails with a status the controller
    /// allows to be retried (DNR = 0), or was in flight when the controller was reset (0, the
    /// default: never; the request then ends with that status and the caller decides).
    /// Commands that timed out are not retried. Retries are counted per queue pair
    /// ([`QueuePair::retries`]) and per controller ([`Controller::io_retries`]).
    pub io_retries: u8,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            admin_depth: 256,
            shadow_doorbells: true,
            io_queues: 64,
            admin_timeout_ms: 60_000,
            io_timeout_ms: 30_000,
            io_retries: 0,
        }
    }
}

/// What the driver learned about the controller at bring-up.
#[derive(Debug, Clone)]
pub struct ControllerInfo {
    /// Identify Controller data.
    pub identify: IdentifyController,
    /// CAP register.
    pub cap: Cap,
    /// VS register.
    pub version: Version,
    /// Largest data transfer per command the driver uses (MDTS, capped at 2 MiB).
    pub max_transfer_bytes: usize,
    /// I/O queue pairs granted.
    pub io_queue_pairs: u16,
    /// Largest queue depth (CAP.MQES + 1).
    pub max_queue_depth: u32,
    /// Whether shadow doorbells are enabled.
    pub shadow_doorbells: bool,
    /// Known defects of this controller model ([`crate::quirks`]), from its PCI ID.
    pub quirks: crate::quirks::Quirks,
}

impl ControllerInfo {
    /// Serial number.
    pub fn serial(&self) -> &str {
        &self.identify.sn
    }
    /// Model number.
    pub fn model(&self) -> &str {
        &self.identify.mn
    }
    /// Firmware revision.
    pub fn firmware(&self) -> &str {
        &self.identify.fr
    }
    /// Number of namespaces (largest nsid).
    pub fn nn(&self) -> u32 {
        self.identify.nn
    }
    /// Optional Admin Command Support.
    pub fn oacs(&self) -> u16 {
        self.identify.oacs
    }
    /// MDTS in bytes (`None` = no limit reported).
    pub fn mdts_bytes(&self) -> Option<u64> {
        self.identify.max_transfer_bytes(self.cap.mpsmin())
    }
}

/// An NVMe controller that is up: admin queue, identify data, namespaces, I/O queue pairs.
///
/// Namespaces live in a lock-free [`NamespaceRegistry`]; change events (Asynchronous Event
/// Requests) are handled by [`process_admin_completions`](Self::process_admin_completions),
/// which a polled application calls periodically.
///
/// Dropping it removes every namespace (one batch), deletes the I/O queues still alive and
/// shuts the controller down (CC.SHN).
pub struct Controller<P: Platform> {
    shared: Arc<Shared<P>>,
    info: ControllerInfo,
    registry: Arc<NamespaceRegistry>,
    /// Serialises scans (admin path only) and holds their DMA pages.
    scanner: Mutex<ScanPages>,
    /// The last ANA log page read (controllers that report ANA).
    ana: Mutex<Option<Arc<crate::spec::ana::AnaLog>>>,
}

impl<P: Platform> std::fmt::Debug for Controller<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.shared.platform.name())
            .field("info", &self.info)
            .finish()
    }
}

impl<P: Platform> Controller<P> {
    /// Brings the controller up: disable, admin queue, enable, Identify Controller, Number of
    /// Queues, (optional) Doorbell Buffer Config, the pipelined namespace scan, and finally
    /// Asynchronous Event Requests for namespace change notices.
    pub fn new(platform: Arc<P>, options: ControllerOptions) -> Result<Self, Error> {
        let (shared, info) = bringup::bring_up(platform, &options)?;
        let slots = shared
            .admin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slots();
        let pages = ScanPages::new(shared.platform.dma(), slots, info.quirks)?;
        // AERL + 1 AERs, but never more than a quarter of the admin slots (at least one), so
        // that small admin queues keep their pipelining capacity.
        let aer_target = (usize::from(info.identify.aerl) + 1).min((slots / 4).max(1));
        shared
            .aer_target
            .store(aer_target, std::sync::atomic::Ordering::Relaxed);
        let ctrl = Controller {
            shared: Arc::new(shared),
            info,
            registry: Arc::new(NamespaceRegistry::new()),
            scanner: Mutex::new(pages),
            ana: Mutex::new(None),
        };
        ctrl.rescan()?;
        if ctrl.reports_ana() {
            if let Err(e) = ctrl.refresh_ana() {
                log::warn!("reading the ANA log page at bring-up failed ({e}); paths of this controller count as inaccessible until an ANA change event");
            }
        }
        events::enable_namespace_notices(&ctrl);
        Ok(ctrl)
    }

    /// What the controller reported at bring-up.
    pub fn identify(&self) -> &ControllerInfo {
        &self.info
    }

    /// The platform below the controller.
    pub fn platform(&self) -> &Arc<P> {
        &self.shared.platform
    }

    /// The DMA pool to allocate I/O buffers from.
    pub fn dma(&self) -> &DmaPool {
        self.shared.platform.dma()
    }

    /// The active namespace `nsid` (a counted handle; lock-free).
    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        self.registry.get(nsid)
    }

    /// All active namespaces, by nsid (a lock-free snapshot).
    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        self.registry.snapshot()
    }

    /// Runs `f` on namespace `nsid` without taking a reference count or a lock: the I/O path's
    /// lookup. `None` if it is not registered.
    #[inline]
    pub fn with_namespace<R>(&self, nsid: u32, f: impl FnOnce(&Namespace) -> R) -> Option<R> {
        self.registry.with(nsid, f)
    }

    /// The namespace registry (batched lookups, snapshots, events).
    pub fn registry(&self) -> &Arc<NamespaceRegistry> {
        &self.registry
    }

    /// I/O commands sent again so far on all queue pairs (see
    /// [`ControllerOptions::io_retries`]).
    pub fn io_retries(&self) -> u64 {
        self.shared
            .io_retry_count
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A receiver of every controller state change (timeouts, aborts, resets, failure,
    /// removal) from now on.
    pub fn subscribe_controller_events(&self) -> Receiver<crate::admin::ControllerEvent> {
        self.shared.events.subscribe()
    }

    /// Marks the controller gone (the kernel asked for the device back, or it was unplugged):
    /// every request in flight ends with
    /// [`Status::CONTROLLER_LOST`](crate::spec::Status::CONTROLLER_LOST) at its queue pair's
    /// next poll and later calls fail with [`Error::ControllerRemoved`]. Returns whether the
    /// state changed.
    pub fn mark_removed(&self) -> bool {
        self.shared.mark_removed()
    }

    /// A receiver of every namespace event (added, removed, changed) from now on.
    pub fn subscribe_namespace_events(&self) -> Receiver<NamespaceEvent> {
        self.registry.events().subscribe()
    }

    /// Scans every namespace (pipelined) and updates the registry to match.
    pub fn rescan(&self) -> Result<ScanReport, Error> {
        self.rescan_with(ScanMode::Pipelined)
    }

    /// Scans every namespace with `mode` and updates the registry to match.
    pub fn rescan_with(&self, mode: ScanMode) -> Result<ScanReport, Error> {
        let pages = self.scanner.lock().unwrap_or_else(|e| e.into_inner());
        scan::full_scan(&self.shared, &pages, self.info.nn(), &self.registry, mode)
    }

    /// Probes only `nsids` and updates the registry for them (added, removed, resized).
    pub fn rescan_namespaces(&self, nsids: &[u32]) -> ScanReport {
        let pages = self.scanner.lock().unwrap_or_else(|e| e.into_inner());
        scan::partial_scan(
            &self.shared,
            &pages,
            nsids,
            &self.registry,
            ScanMode::Pipelined,
        )
    }

    /// Removes namespaces from the driver's view in one batch (one grace period for all):
    /// they are marked `Removing` at once, so new I/O to them fails with
    /// [`SubmitErrorKind::NamespaceNotActive`](crate::SubmitErrorKind::NamespaceNotActive),
    /// and `Removed` when no reader can still see them. In-flight I/O completes on its queue
    /// pair as usual. Returns the namespaces removed.
    pub fn remove_namespaces(&self, nsids: &[u32]) -> Vec<Arc<Namespace>> {
        self.registry.remove_batch(nsids)
    }

    /// Reaps admin completions: Asynchronous Event Request completions are handled (re-armed;
    /// on Namespace Attribute Changed the Changed Namespace List log is read and only the
    /// listed namespaces are rescanned, or all of them if the list overflowed). The driver is
    /// polled, so applications call this periodically (e.g. every few milliseconds, from any
    /// thread); namespace events then reach the registry's subscribers.
    pub fn process_admin_completions(&self) -> Result<AdminEventReport, Error> {
        self.check_health()?;
        events::process(self)
    }

    /// Creates an I/O queue pair of `options.depth` entries whose requests carry a `u64` tag.
    pub fn alloc_qpair(&self, options: QpairOptions) -> Result<QueuePair<P>, Error> {
        QueuePair::create(&self.shared, &self.info, options)
    }

    /// Creates an I/O queue pair whose requests carry a payload of type `T` from submission to
    /// completion, kept in the driver's command tracker (the C ABI keeps its callback and
    /// argument there).
    pub fn alloc_qpair_with_payload<T: Copy + Default>(
        &self,
        options: QpairOptions,
    ) -> Result<QueuePair<P, T>, Error> {
        QueuePair::create(&self.shared, &self.info, options)
    }

    /// Runs one admin command exactly as given (data pointer included) and waits for it.
    /// Safe code uses [`admin`](Self::admin), [`admin_with_data`](Self::admin_with_data) or
    /// the typed helpers, which build the data pointer from a buffer they own.
    ///
    /// # Safety
    /// Every device address in `cmd` (PRP1/PRP2 or SGL, PRP list entries, MPTR) must be mapped
    /// for the device and refer to memory that stays allocated and is not used by anything
    /// else until the command completes, covering every byte the command's own length fields
    /// say the device moves. If this returns [`Error::AdminTimeout`] the device may still use
    /// that memory at any time: it must then never be freed or reused (keep it with the
    /// controller, or leak it). A command that makes the device keep using memory after it
    /// completes (Create I/O SQ/CQ, Doorbell Buffer Config, Host Memory Buffer) needs that
    /// memory for as long as the device may use it, and queues the driver owns must not be
    /// deleted.
    pub unsafe fn admin_sync(&self, cmd: Command) -> Result<Completion, Error> {
        // SAFETY: the caller upholds this function's contract, which is `admin_sync_raw`'s.
        unsafe { self.shared.admin_sync_raw(cmd) }
    }

    /// Runs several admin commands exactly as given, pipelined (as many in flight as the admin
    /// queue holds), calling `done(index, result)` for each as it completes.
    ///
    /// # Safety
    /// As [`admin_sync`](Self::admin_sync), for every command of `cmds`: its memory stays
    /// valid until `done` reports the command, and for good if `done` reports
    /// [`Error::AdminTimeout`].
    pub unsafe fn admin_batch(
        &self,
        cmds: &[Command],
        done: impl FnMut(usize, Result<Completion, Error>),
    ) {
        // SAFETY: the caller upholds this function's contract.
        unsafe { self.shared.admin_batch(cmds, done) }
    }
}

impl<P: Platform> Drop for Controller<P> {
    /// Removes the namespaces, deletes the I/O queues, shuts the controller down (CC.SHN) and
    /// disables it (CC.EN = 0), so that memory it was given (scan pages, parked buffers, the
    /// admin rings once the last queue pair is gone) is freed only when it can't be used any
    /// more; if it can't be disabled, that memory is leaked.
    fn drop(&mut self) {
        self.registry.clear();
        self.shared.shutdown();
        if !self.shared.quiesce() {
            let mut pages = self.scanner.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.platform.dma().leak(std::mem::take(&mut *pages));
        }
    }
}
