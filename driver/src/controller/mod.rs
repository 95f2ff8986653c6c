//! The controller: bring-up, admin commands, queue pair creation, namespaces, clean shutdown.

mod admin;
mod bringup;
mod discovery;
mod shared;

pub use admin::AdminQueue;
pub use discovery::discover_namespaces;
pub(crate) use shared::Shared;

use crate::error::Error;
use crate::namespace::Namespace;
use crate::platform::Platform;
use crate::queue::{QpairOptions, QueuePair};
use crate::spec::identify::IdentifyController;
use crate::spec::registers::{Cap, Version};
use crate::spec::{Command, Completion};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use vfnvme_dma::DmaPool;

/// How to bring the controller up.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Admin queue depth (2..=4096).
    pub admin_depth: u16,
    /// Use shadow doorbells (Doorbell Buffer Config) when the controller supports them.
    pub shadow_doorbells: bool,
    /// I/O queue pairs to ask for (Set Features, Number of Queues).
    pub io_queues: u16,
    /// How long an admin command may take before it is reported as timed out.
    pub admin_timeout_ms: u64,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            admin_depth: 32,
            shadow_doorbells: true,
            io_queues: 64,
            admin_timeout_ms: 30_000,
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
/// Dropping it deletes the I/O queues still alive and shuts the controller down (CC.SHN).
pub struct Controller<P: Platform> {
    shared: Arc<Shared<P>>,
    info: ControllerInfo,
    namespaces: Mutex<BTreeMap<u32, Arc<Namespace>>>,
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
    /// Queues, (optional) Doorbell Buffer Config, namespace discovery.
    pub fn new(platform: Arc<P>, options: ControllerOptions) -> Result<Self, Error> {
        let (shared, info) = bringup::bring_up(platform, &options)?;
        let shared = Arc::new(shared);
        let ctrl = Controller {
            shared,
            info,
            namespaces: Mutex::new(BTreeMap::new()),
        };
        let found = discover_namespaces(&ctrl)?;
        *ctrl.namespaces.lock().unwrap_or_else(|e| e.into_inner()) = found;
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

    /// The active namespace `nsid`.
    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        self.namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&nsid)
            .cloned()
    }

    /// All active namespaces, by nsid.
    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        self.namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Replaces the namespace table (used by rescans).
    pub fn set_namespaces(&self, table: BTreeMap<u32, Arc<Namespace>>) {
        *self.namespaces.lock().unwrap_or_else(|e| e.into_inner()) = table;
    }

    /// Creates an I/O queue pair of `options.depth` entries.
    pub fn alloc_qpair(&self, options: QpairOptions) -> Result<QueuePair<P>, Error> {
        QueuePair::create(&self.shared, &self.info, options)
    }

    /// Runs one admin command and waits for it. The caller sets any data pointer.
    pub fn admin_sync(&self, cmd: Command) -> Result<Completion, Error> {
        self.shared.admin_sync(cmd)
    }

    /// Runs several admin commands pipelined (as many in flight as the admin queue holds),
    /// calling `done(index, result)` for each as it completes.
    pub fn admin_batch(
        &self,
        cmds: &[Command],
        done: impl FnMut(usize, Result<Completion, Error>),
    ) {
        self.shared.admin_batch(cmds, done)
    }
}

impl<P: Platform> Drop for Controller<P> {
    fn drop(&mut self) {
        self.shared.shutdown();
    }
}
