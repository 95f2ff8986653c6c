//! vfnvme-dma: the hardware edge of vfnvme.
//!
//! - [`pci_address`]: parsing `DDDD:BB:DD.F` addresses.
//! - [`iommu`]: the small IOMMU interface (reserve IOVA, map, unmap) that every backend implements.
//! - [`iova_allocator`]: allocation of IOVA space inside the usable ranges a backend reports.
//! - [`memory`]: hugepage-backed DMA regions carved into owned buffers that know their IOVA.
//! - [`pci_sysfs`], [`pci_bind`]: reading and changing PCI driver bindings through sysfs.
//! - [`memlock`], [`hugepages`]: the locked-memory limit and hugepage reservations.
//! - [`vfio`]: the VFIO type1 container/group flow, the PCI device, BAR mmap and config space.
//! - [`barrier`]: CPU/device ordering (DMA barriers, MMIO accessors) for x86_64 and aarch64.
//!
//! All `unsafe` code of vfnvme that touches mmap, ioctl or MMIO lives in this crate.

pub mod barrier;
pub mod error;
pub mod hugepages;
pub mod iommu;
pub mod iova_allocator;
pub mod memlock;
pub mod memory;
pub mod pci_address;
pub mod pci_bind;
pub mod pci_sysfs;
pub mod sys_paths;
#[cfg(test)]
mod test_sysfs;
pub mod vfio;

pub use error::DmaError;
pub use iommu::{Iommu, IovaRange};
pub use iova_allocator::IovaAllocator;
pub use memory::{Allocation, DmaBuffer, DmaPool, DmaRegion, DmaSpan, PageSize};
pub use pci_address::PciAddress;
pub use sys_paths::SysPaths;
pub use vfio::{Bar, MmioDoorbell, VfioDevice};
