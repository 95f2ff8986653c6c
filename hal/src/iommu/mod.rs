//! The IOMMU interface: the four operations the NVMe layer needs from any backend
//! (VFIO type1 today; iommufd and no-IOMMU later, without touching the NVMe layer).

pub mod iova_allocator;

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
}
