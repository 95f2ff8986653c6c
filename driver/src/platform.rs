//! The platform interface: everything the driver needs from below.
//!
//! The same driver code runs over VFIO (BAR0 mmap, IOMMU-mapped hugepages, the monotonic clock)
//! and over the in-memory controller model (a register file, a recording IOMMU, virtual time).

use vfnvme_dma::DmaPool;

/// Access to the controller's register file (BAR0): properties and doorbells.
///
/// Offsets are byte offsets into BAR0. Implementations must not panic on any offset: an offset
/// outside the BAR reads as all ones and ignores writes (as a PCI master abort would).
pub trait RegisterIo: Send + Sync + 'static {
    /// Reads a 32-bit register.
    fn read32(&self, offset: usize) -> u32;
    /// Writes a 32-bit register (doorbells are written this way).
    fn write32(&self, offset: usize, value: u32);
    /// Reads a 64-bit register (CAP, ASQ, ACQ).
    fn read64(&self, offset: usize) -> u64;
    /// Writes a 64-bit register (ASQ, ACQ).
    fn write64(&self, offset: usize, value: u64);
}

/// Everything the driver reaches below itself.
pub trait Platform: Send + Sync + 'static {
    /// The register file type.
    type Regs: RegisterIo;

    /// The controller's registers.
    fn regs(&self) -> &Self::Regs;

    /// The DMA memory pool, mapped into the controller's IOMMU domain.
    fn dma(&self) -> &DmaPool;

    /// Monotonic time in nanoseconds (virtual time on the model).
    fn now_ns(&self) -> u64;

    /// Called in every bounded wait loop (e.g. for CSTS.RDY) between two checks. Real hardware
    /// spins briefly or sleeps; the model advances virtual time to its next event.
    fn relax(&self);

    /// Called at the start of each poll of completion queue `cq_id` (0 = admin). A no-op on real
    /// hardware; the model posts that queue's completions that are due at the current virtual
    /// time, and if none is due, advances virtual time to the queue's next pending completion.
    #[inline(always)]
    fn before_poll(&self, cq_id: u16) {
        let _ = cq_id;
    }

    /// A short name for messages, e.g. the PCI address.
    fn name(&self) -> String;

    /// The controller's PCI vendor and device ID, when the platform knows them: they select
    /// the controller's entry in [`crate::quirks::QUIRK_TABLE`].
    fn pci_id(&self) -> Option<(u16, u16)> {
        None
    }
}
