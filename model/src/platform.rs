//! `ModelPlatform`: the driver's [`Platform`] over the in-memory controller, plus the test
//! controls (statistics, runtime namespace changes).

use super::ana::AnaState;
use super::config::{
    validate_metadata, validate_namespace, ModelConfig, ModelError, ModelMetadata,
    ModelNamespaceConfig,
};
use super::core::Core;
use super::faults::{FaultCounts, FaultPlan};
use super::iommu::ModelIommu;
use super::namespaces::ModelNamespace;
use super::registers::ModelRegs;
use super::stats::ModelStats;
use super::subsystem::SubsystemLink;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vfnvme_hal::platform::Platform;
use vfnvme_hal::{DmaPool, PageSize};

/// An in-memory NVMe controller behind the driver's platform interface.
#[derive(Debug)]
pub struct ModelPlatform {
    regs: ModelRegs,
    iommu: Arc<ModelIommu>,
    pool: DmaPool,
    /// Set by [`ModelPlatform::request_removal`].
    removal_requested: AtomicBool,
}

impl ModelPlatform {
    /// A model controller with `config`, disabled (CC.EN = 0) at virtual time 0.
    pub fn new(config: ModelConfig) -> Result<Arc<Self>, ModelError> {
        Self::with_link(config, None)
    }

    /// A controller of a subsystem (`link`), or a lone one.
    pub(crate) fn with_link(
        config: ModelConfig,
        link: Option<Arc<SubsystemLink>>,
    ) -> Result<Arc<Self>, ModelError> {
        config.validate()?;
        let (iommu, pool) = match link.as_deref() {
            Some(l) => (l.iommu.clone(), l.pool.clone()),
            None => {
                let iommu = Arc::new(ModelIommu::new());
                let pool = DmaPool::new(iommu.clone(), PageSize::Small4K);
                iommu.watch(&pool);
                (iommu, pool)
            }
        };
        let core = Arc::new(Core::new(config, iommu.clone(), link));
        Ok(Arc::new(ModelPlatform {
            regs: ModelRegs { core },
            iommu,
            pool,
            removal_requested: AtomicBool::new(false),
        }))
    }

    fn core(&self) -> &Core {
        &self.regs.core
    }

    /// Plays the kernel asking for the device back (VFIO's device request interrupt on a
    /// sysfs `remove` or a hot-unplug): from now on [`Platform::removed`] says so. The device
    /// itself keeps answering, as a real one does until the kernel pulls it.
    pub fn request_removal(&self) {
        self.removal_requested.store(true, Ordering::Release);
    }

    /// The model's IOMMU (to inspect mappings).
    pub fn iommu(&self) -> &Arc<ModelIommu> {
        &self.iommu
    }

    /// Every device access so far that hit memory outside the pool's live allocations (memory
    /// the driver gave back, or never allocated). The model refuses such an access like an
    /// IOMMU fault; dropping the platform panics if there was any (a test that causes one
    /// fails even if it does not look).
    pub fn dma_violations(&self) -> Vec<String> {
        self.iommu.violations()
    }

    /// The memory the device may still access: (IOVA, length) of every data range of the I/O
    /// commands this controller holds and has not executed yet (held back by a
    /// [`Stall`](super::config::Stall) or a late completion, [`FaultPlan::late`]): PRP1, PRP2,
    /// the entries of PRP lists and the list pages read for them, and separate metadata. Such a
    /// command moves its data when it executes, so none of this memory may be handed back to
    /// its owner (or freed) before then. Lost completions are not listed: their data has moved.
    pub fn held_data(&self) -> Vec<(u64, u64)> {
        self.core().held_data()
    }

    /// A snapshot of the counters and the virtual time.
    pub fn stats(&self) -> ModelStats {
        self.core().counters.snapshot(self.core().now())
    }

    /// The virtual time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.core().now()
    }

    /// Replaces the fault plan (e.g. [`FaultPlan::default`] to stop injecting faults before
    /// a clean read-back); the generator carries on. Commands already delayed stay delayed.
    pub fn set_faults(&self, plan: FaultPlan) -> Result<(), ModelError> {
        plan.validate()?;
        self.core().faults.set_plan(plan);
        Ok(())
    }

    /// How many faults of each kind were injected so far.
    pub fn fault_counts(&self) -> FaultCounts {
        self.core().faults.counts()
    }

    /// Whether an injected fault made the device vanish (registers read all ones).
    pub fn is_gone(&self) -> bool {
        self.core().faults.gone.load(Ordering::Acquire)
    }

    /// Reads the stored data of namespace `nsid` at byte offset `offset` into `out`, the way
    /// the medium holds it (no command, no fault): for checking what a run left behind.
    /// Unwritten blocks read as zeroes; a Null-backed namespace leaves `out` as it is.
    pub fn read_stored(&self, nsid: u32, offset: u64, out: &mut [u8]) -> Result<(), ModelError> {
        let ns = self
            .core()
            .ns_read()
            .get(&nsid)
            .cloned()
            .ok_or(ModelError::NoSuchNamespace { nsid })?;
        if let Some(store) = ns.store.as_ref() {
            store.read(offset, out);
        }
        Ok(())
    }

    /// Adds a namespace (or replaces a detached one with the same nsid) and attaches it; raises
    /// a Namespace Attribute Changed event.
    pub fn attach_namespace(&self, ns: ModelNamespaceConfig) -> Result<(), ModelError> {
        let core = self.core();
        validate_namespace(&ns, core.nn)?;
        let mut c = core.lock_ctrl();
        core.ns_write(|table| {
            if table.get(&ns.nsid).is_some_and(|n| n.is_attached()) {
                return Err(ModelError::AlreadyAttached { nsid: ns.nsid });
            }
            if table.len() >= super::config::MAX_NAMESPACES && !table.contains_key(&ns.nsid) {
                return Err(ModelError::TooManyNamespaces {
                    count: table.len() + 1,
                });
            }
            let md = core.cfg.metadata_of(ns.nsid);
            let link = core.subsys.as_deref();
            let group = link.map_or(0, |l| l.group_of(ns.nsid));
            let state = c.ana.groups.get(&group).map_or(0, |g| g.state as u8);
            let new = ModelNamespace::new(&ns, core.cfg.seed)
                .with_metadata(md)
                .in_subsystem(link, state);
            table.insert(ns.nsid, Arc::new(new));
            Ok(())
        })?;
        core.ns_changed(&mut c, ns.nsid);
        Ok(())
    }

    /// Detaches namespace `nsid` (it stays allocated, so a Namespace Attachment command can
    /// attach it again); raises a Namespace Attribute Changed event.
    pub fn detach_namespace(&self, nsid: u32) -> Result<(), ModelError> {
        self.change(nsid, |ns| {
            ns.attached.store(false, Ordering::Release);
            Ok(())
        })
    }

    /// Changes the size of namespace `nsid` (shrinking drops the data beyond the new end);
    /// raises a Namespace Attribute Changed event.
    pub fn resize_namespace(&self, nsid: u32, blocks: u64) -> Result<(), ModelError> {
        if blocks == 0 {
            return Err(ModelError::EmptyNamespace { nsid });
        }
        if blocks.checked_mul(4096).is_none() {
            return Err(ModelError::BadLimit {
                what: "blocks",
                value: blocks,
                hint: "the namespace must be smaller than 2^64 bytes",
            });
        }
        self.change(nsid, |ns| {
            ns.blocks.store(blocks, Ordering::Release);
            if let Some(store) = ns.store.as_ref() {
                store.truncate(blocks << ns.lba_shift);
            }
            Ok(())
        })
    }

    /// Gives namespace `nsid` a new EUI64, NGUID and UUID; raises a Namespace Attribute
    /// Changed event.
    pub fn change_identity(&self, nsid: u32) -> Result<(), ModelError> {
        self.change(nsid, |ns| {
            ns.generation.fetch_add(1, Ordering::AcqRel);
            Ok(())
        })
    }

    /// Formats namespace `nsid` (as Format NVM would): `lba_size` bytes per block, with
    /// `metadata` or without; the data is erased, the size in bytes kept. Raises a Namespace
    /// Attribute Changed event.
    pub fn format_namespace(
        &self,
        nsid: u32,
        lba_size: u32,
        metadata: Option<ModelMetadata>,
    ) -> Result<(), ModelError> {
        if let Some(md) = metadata {
            validate_metadata(md)?;
        }
        let core = self.core();
        let mut c = core.lock_ctrl();
        super::admin_namespaces::reformat(core, &mut c, nsid, lba_size, metadata)
    }

    /// Sets ANA group `group` to `state` on this controller now: I/O to its namespaces answers
    /// accordingly, and an ANA change event is raised (if the state changed).
    pub fn set_ana_state(&self, group: u32, state: AnaState) -> Result<(), ModelError> {
        let core = self.core();
        let mut c = core.lock_ctrl();
        if core.set_ana(&mut c, group, state) {
            Ok(())
        } else {
            Err(ModelError::NoSuchAnaGroup { group })
        }
    }

    /// Schedules ANA group `group` to become `state` at virtual time `at_ns` (applied when
    /// the clock passes it: by a poll, or by waiting, which jumps to it).
    pub fn schedule_ana_state(
        &self,
        group: u32,
        state: AnaState,
        at_ns: u64,
    ) -> Result<(), ModelError> {
        let core = self.core();
        let mut c = core.lock_ctrl();
        if !c.ana.groups.contains_key(&group) {
            return Err(ModelError::NoSuchAnaGroup { group });
        }
        c.ana.scheduled.push(super::ana::Scheduled {
            at: at_ns,
            group,
            state,
        });
        core.ana_next_at
            .store(c.ana.next_at(), std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// The state of ANA group `group` on this controller.
    pub fn ana_state(&self, group: u32) -> Result<AnaState, ModelError> {
        let c = self.core().lock_ctrl();
        c.ana
            .groups
            .get(&group)
            .map(|g| g.state)
            .ok_or(ModelError::NoSuchAnaGroup { group })
    }

    /// Makes the next read of the Changed Namespace List log report overflow (0xFFFFFFFF).
    pub fn set_changed_list_overflow(&self, overflow: bool) {
        self.core().lock_ctrl().events.force_overflow = overflow;
    }

    fn change(
        &self,
        nsid: u32,
        f: impl FnOnce(&ModelNamespace) -> Result<(), ModelError>,
    ) -> Result<(), ModelError> {
        let core = self.core();
        let mut c = core.lock_ctrl();
        let ns = core
            .active_ns(nsid)
            .ok_or(ModelError::NoSuchNamespace { nsid })?;
        f(&ns)?;
        core.ns_changed(&mut c, nsid);
        Ok(())
    }
}

impl Drop for ModelPlatform {
    fn drop(&mut self) {
        let violations = self.iommu.violations();
        if !violations.is_empty() && !std::thread::panicking() {
            panic!(
                "the model saw {} device access(es) to memory outside the live DMA allocations: {violations:#?}",
                violations.len()
            );
        }
    }
}

impl Platform for ModelPlatform {
    type Regs = ModelRegs;

    fn regs(&self) -> &ModelRegs {
        &self.regs
    }

    fn dma(&self) -> &DmaPool {
        &self.pool
    }

    fn now_ns(&self) -> u64 {
        self.core().now()
    }

    fn relax(&self) {
        self.core().relax();
    }

    #[inline]
    fn before_poll(&self, cq_id: u16) {
        self.core().before_poll(cq_id);
    }

    fn name(&self) -> String {
        format!("model:{}", self.core().cfg.serial)
    }

    fn removed(&self) -> bool {
        self.removal_requested.load(Ordering::Acquire)
    }

    fn pci_id(&self) -> Option<(u16, u16)> {
        let cfg = &self.core().cfg;
        Some((cfg.pci_vendor_id, cfg.pci_device_id))
    }
}
