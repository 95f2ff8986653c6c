//! An in-memory NVMe controller for tests and benchmarks.
//!
//! The model plays the *device*: it decodes raw submission queue entries from DMA memory by the
//! NVMe base specification's byte offsets (independently of the driver's `spec` module, so that
//! encoding bugs in the driver show up), moves data through a recording IOMMU, and posts
//! completions on a virtual clock. It never sleeps and is deterministic for a given seed and
//! sequence of driver actions.
//!
//! ```no_run
//! use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};
//! let platform = ModelPlatform::new(ModelConfig {
//!     namespaces: vec![ModelNamespaceConfig { nsid: 1, blocks: 1 << 20, lba_size: 512, backing: Backing::Ram }],
//!     ..ModelConfig::default()
//! }).unwrap();
//! ```
//!
//! Behaviour notes:
//! - Commands execute (data moves) when the SQ doorbell is written; their completions become due
//!   at submit time + latency and are posted by `Platform::before_poll` (never more than the CQ
//!   has free slots). Commands in flight complete in parallel.
//! - A poll of a queue whose commands the device holds back (a stall, a lost completion) with
//!   nothing pending advances virtual time by 1 µs, so a host that only polls reaches its
//!   I/O timeout.
//! - Shadow doorbells (Doorbell Buffer Config) apply to I/O queues only; the admin queue always
//!   uses MMIO doorbells. The model reads shadow values in `before_poll` and writes EventIdx
//!   values equal to the positions it has consumed.
//! - A Namespace Attribute Changed event is reported once, then masked until log page 04h is
//!   read without RAE; changes meanwhile accumulate in the Changed Namespace List. The
//!   Asynchronous Event Configuration feature does not gate it.
//! - OACS bit 3 (Namespace Management capability): Namespace Management (0Dh) creates detached
//!   RAM-backed namespaces (LBA format 0 = 512 B, 1 = 4 KiB) and deletes them; Namespace
//!   Attachment (15h) attaches/detaches this controller. Identify CNS 10h/11h list and describe
//!   allocated namespaces.
//! - Subsystems ([`ModelSubsystem`]): several controllers with one SUBNQN, CMIC bit 1 (and
//!   bit 3 with ANA groups), shared namespace data and identifiers, one virtual clock. ANA
//!   groups have a state per controller, changed now or at a virtual time
//!   ([`ModelPlatform::set_ana_state`], [`ModelPlatform::schedule_ana_state`]); each change
//!   raises an ANA change event (masked until log page 0Ch is read without RAE), and I/O to a
//!   namespace of an inaccessible, persistent-loss or changing group fails with the
//!   path-related status (SCT 3h, SC 02h/01h/03h, DNR = 0).
//! - Get Log Page transfers are limited to 1 MiB (and MDTS).
//! - Format NVM, Sanitize and Firmware Image Download / Commit are implemented (see
//!   `admin_maint`), with the Firmware Slot (03h) and Sanitize Status (81h) logs.

mod admin;
mod admin_maint;
mod admin_namespaces;
mod admin_queues;
mod ana;
mod config;
mod core;
mod dma_engine;
mod dptr;
mod events;
mod faults;
mod identify;
mod io;
mod io_pi;
mod iommu;
mod media;
mod namespaces;
mod platform;
mod prp;
mod queues;
mod registers;
mod sgl;
mod shadow;
mod sharded;
mod sqe;
mod stats;
mod storage;
mod subsystem;

#[cfg(test)]
mod tests;

pub use admin::{
    VENDOR_FILL_OPCODE, VENDOR_HOLD_OPCODE, VENDOR_PATTERN_LOG, VENDOR_PATTERN_LOG_BYTES,
};
pub use ana::AnaState;
pub use config::{
    Backing, ModelConfig, ModelError, ModelMetadata, ModelNamespaceConfig, Stall, MAX_NAMESPACES,
};
pub use faults::{Fault, FaultCounts, FaultPlan};
pub use iommu::{ModelIommu, MODEL_IOVA_END, MODEL_IOVA_START};
pub use platform::ModelPlatform;
pub use registers::ModelRegs;
pub use stats::ModelStats;
pub use subsystem::{
    ModelAnaGroup, ModelSubsystem, ModelSubsystemConfig, MAX_SUBSYSTEM_CONTROLLERS,
};
