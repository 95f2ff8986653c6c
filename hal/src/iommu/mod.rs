//! The IOMMU interface: the four operations the NVMe layer needs from any backend
//! (VFIO type1, and the no-IOMMU physical-address mapper [`physical`]), without touching the
//! NVMe layer.

pub mod iova_allocator;
pub mod memlock;
pub mod pagemap;
pub mod physical;

use crate::error::HalError;
use std::ptr::NonNull;

/// A range of I/O virtual addresses that the IOMMU accepts, inclusive at both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IovaRange {
    /// First usable IOVA.
    pub start: u64,
    /// Last usable IOVA (inclusive).
    pub end: u64,
}

/// How a backend gives DMA memory its device address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressing {
    /// The device goes through an IOMMU: the backend picks an IOVA ([`Iommu::reserve_iova`])
    /// and maps any memory there. Regions may be any length.
    Translated,
    /// No IOMMU: the device address is the memory's own physical address
    /// ([`physical::PhysicalMapper`]). Regions must be single hugepages (the only memory whose
    /// physical address is contiguous and fixed), and there is no fallback to 4 KiB pages.
    Physical,
}

/// An IOMMU domain that device DMA goes through.
///
/// Implementations must be thread-safe; mapping is a control-path operation and may lock.
pub trait Iommu: Send + Sync {
    /// Reserves `len` bytes of IOVA space aligned to `align` (a power of two) inside the
    /// usable ranges. The reservation is not yet mapped.
    fn reserve_iova(&self, len: u64, align: u64) -> Result<u64, HalError>;

    /// Maps `len` bytes of process memory at `vaddr` to `iova`, readable and writable by the
    /// device.
    ///
    /// # Safety
    /// The memory at `vaddr..vaddr+len` must stay allocated until [`Iommu::unmap`] is called
    /// for this range, since the device may access it at any time while it is mapped.
    unsafe fn map(&self, vaddr: NonNull<u8>, len: u64, iova: u64) -> Result<(), HalError>;

    /// Removes the mapping of `iova..iova+len` made by [`Iommu::map`].
    fn unmap(&self, iova: u64, len: u64) -> Result<(), HalError>;

    /// The usable IOVA ranges, as the backend reported them.
    fn iova_ranges(&self) -> Vec<IovaRange>;

    /// How this backend addresses DMA memory. Default: [`Addressing::Translated`].
    fn addressing(&self) -> Addressing {
        Addressing::Translated
    }

    /// Makes the `len` bytes at `vaddr` (one region of the pool, aligned to `align`) reachable
    /// by the device and returns their device address. The default reserves an IOVA and maps
    /// the memory there; a [`Addressing::Physical`] backend returns where the memory already is.
    ///
    /// # Safety
    /// As for [`Iommu::map`]: the memory stays allocated until [`Iommu::unmap`] of the
    /// returned address and `len`.
    unsafe fn map_region(&self, vaddr: NonNull<u8>, len: u64, align: u64) -> Result<u64, HalError> {
        let iova = self.reserve_iova(len, align)?;
        // SAFETY: the caller's guarantee for this region.
        unsafe { self.map(vaddr, len, iova)? };
        Ok(iova)
    }
}
