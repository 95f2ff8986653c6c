//! `ModelPlatform`: the driver's [`Platform`] over the in-memory controller, plus the test
//! controls (statistics, runtime namespace changes).

use super::config::{
    validate_metadata, validate_namespace, ModelConfig, ModelError, ModelMetadata,
    ModelNamespaceConfig,
};
use super::core::Core;
use super::iommu::ModelIommu;
use super::namespaces::ModelNamespace;
use super::registers::ModelRegs;
use super::stats::ModelStats;
use crate::platform::Platform;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vfnvme_dma::{DmaPool, PageSize};

/// An in-memory NVMe controller behind the driver's platform interface.
#[derive(Debug)]
pub struct ModelPlatform {
    regs: ModelRegs,
    iommu: Arc<ModelIommu>,
    pool: DmaPool,
}

impl ModelPlatform {
    /// A model controller with `config`, disabled (CC.EN = 0) at virtual time 0.
    pub fn new(config: ModelConfig) -> Result<Arc<Self>, ModelError> {
        config.validate()?;
        let iommu = Arc::new(ModelIommu::new());
        let core = Arc::new(Core::new(config, iommu.clone()));
        let pool = DmaPool::new(iommu.clone(), PageSize::Small4K);
        iommu.watch(&pool);
        Ok(Arc::new(ModelPlatform {
            regs: ModelRegs { core },
            iommu,
            pool,
        }))
    }

    fn core(&self) -> &Core {
        &self.regs.core
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

    /// A snapshot of the counters and the virtual time.
    pub fn stats(&self) -> ModelStats {
        self.core().counters.snapshot(self.core().now())
    }

    /// The virtual time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.core().now()
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
            let new = ModelNamespace::new(&ns, core.cfg.seed).with_metadata(md);
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

    fn pci_id(&self) -> Option<(u16, u16)> {
        let cfg = &self.core().cfg;
        Some((cfg.pci_vendor_id, cfg.pci_device_id))
    }
}
