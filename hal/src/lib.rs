//! vfnvme-hal: the hardware edge of vfnvme, one folder per concern.
//!
//! - [`pci`]: PCI addresses ([`pci::address`]), the sysfs tree ([`pci::paths`],
//!   [`pci::sysfs`]) and driver bindings ([`pci::bind`]).
//! - [`vfio`]: the VFIO type1 container/group flow, the PCI device, BAR mmap and config space.
//!   Hot removal: the device request eventfd ([`vfio::RemovalNotice`]) and a SIGBUS handler
//!   scoped to BAR mappings ([`vfio::sigbus`]); see docs/hot-removal.md.
//! - [`iommu`]: the small IOMMU interface (reserve IOVA, map, unmap) that every backend
//!   implements, and the allocation of IOVA space inside its usable ranges
//!   ([`iommu::iova_allocator`]).
//! - [`mem`]: DMA memory: hugepage-backed regions carved into owned buffers that know their
//!   IOVA ([`mem::pool`]), hugepage reservations and the locked-memory limit
//!   ([`mem::hugepages`], [`iommu::memlock`]), and CPU/device ordering ([`mem::barrier`]: DMA
//!   barriers, MMIO accessors for x86_64 and aarch64).
//! - [`platform`]: the seam between the driver and what lies below it: [`platform::Platform`]
//!   (registers, DMA memory, the clock), [`platform::RegisterIo`] and checked
//!   [`platform::Doorbell`]s. Both the driver (`vfnvme`, which re-exports it as
//!   `vfnvme::platform`) and the in-memory controller (`vfnvme-model`) build on it, so neither
//!   crate depends on the other.
//! - [`vfio_platform`]: [`vfio_platform::VfioPlatform`], the platform over a real device bound
//!   to vfio-pci (re-exported as `vfnvme::vfio_platform`).
//! - [`pi`]: end-to-end protection information (T10 DIF guard, application and reference
//!   tags): generation and checks shared by the driver and the model.
//! - [`time`]: the coarse monotonic clock of the I/O path's periodic checks.
//! - [`error`]: [`HalError`], the one error type of this layer.
//!
//! All `unsafe` code of vfnvme that touches mmap, ioctl or MMIO lives in this crate.

pub mod error;
pub mod iommu;
pub mod mem;
pub mod pci;
pub mod pi;
pub mod platform;
pub mod sysfs_device;
pub mod time;
pub mod vfio;
pub mod vfio_platform;

pub use error::HalError;
pub use iommu::iova_allocator::IovaAllocator;
pub use iommu::{Iommu, IovaRange};
pub use mem::pool::{Allocation, DmaBuffer, DmaPool, DmaRegion, DmaSpan, PageSize, WeakDmaPool};
pub use pci::address::PciAddress;
pub use pci::paths::SysPaths;
pub use vfio::{Bar, MmioDoorbell, VfioDevice};
