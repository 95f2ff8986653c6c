//! The platform interface: everything the driver needs from below.
//!
//! The same driver code runs over VFIO (BAR0 mmap, IOMMU-mapped hugepages, the monotonic clock)
//! and over the in-memory controller model (a register file, a recording IOMMU, virtual time).

use vfnvme_dma::{DmaError, DmaPool, MmioDoorbell};

/// Access to the controller's register file (BAR0): properties and doorbells.
///
/// Offsets are byte offsets into BAR0. Implementations must not panic on any offset: an offset
/// outside the BAR reads as all ones and ignores writes (as a PCI master abort would). Doorbells
/// are not written by offset on the I/O path but through a [`Doorbell`], checked once.
pub trait RegisterIo: Send + Sync + 'static {
    /// Reads a 32-bit register.
    fn read32(&self, offset: usize) -> u32;
    /// Writes a 32-bit register (control path; doorbells go through [`RegisterIo::ring`]).
    fn write32(&self, offset: usize, value: u32);
    /// Reads a 64-bit register (CAP, ASQ, ACQ).
    fn read64(&self, offset: usize) -> u64;
    /// Writes a 64-bit register (ASQ, ACQ).
    fn write64(&self, offset: usize, value: u64);
    /// The size of the register file in bytes (BAR0's length): [`Doorbell::new`] refuses
    /// registers outside it.
    fn size(&self) -> usize;
    /// A direct handle on the register at `offset` (checked by [`Doorbell::new`] already), for
    /// register files that are memory-mapped; `None` (the default) rings through
    /// [`RegisterIo::write32`].
    fn mmio_doorbell(&self, offset: usize) -> Option<MmioDoorbell> {
        let _ = offset;
        None
    }
    /// Writes `value` to doorbell `db`: the I/O path's only register write, with no offset
    /// check of its own (done when `db` was made). The default writes through
    /// [`RegisterIo::write32`] at the checked offset; memory-mapped register files override it
    /// with [`Doorbell::ring_mmio`].
    #[inline(always)]
    fn ring(&self, db: &Doorbell, value: u32) {
        self.write32(db.offset, value)
    }
}

/// A doorbell register whose offset was checked once against the register file, when its
/// queue was created ([`Doorbell::new`]); ringing it ([`RegisterIo::ring`]) does no bounds
/// check that could drop the write.
#[derive(Debug)]
pub struct Doorbell {
    offset: usize,
    mmio: Option<MmioDoorbell>,
}

impl Doorbell {
    /// The doorbell at byte `offset` of `regs`. Fails with [`DmaError::BarOffset`] when the
    /// register is not 4-byte aligned or not inside the register file (e.g. a queue id beyond
    /// the doorbells the controller's BAR has room for).
    pub fn new<R: RegisterIo + ?Sized>(regs: &R, offset: usize) -> Result<Doorbell, DmaError> {
        let size = regs.size();
        let inside = offset.checked_add(4).is_some_and(|end| end <= size);
        if !inside || !offset.is_multiple_of(4) {
            return Err(DmaError::BarOffset {
                bar: 0,
                offset,
                size,
            });
        }
        Ok(Doorbell {
            offset,
            mmio: regs.mmio_doorbell(offset),
        })
    }

    /// The register's byte offset in BAR0.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Rings through the mapped register if `regs` gave one at creation
    /// ([`RegisterIo::mmio_doorbell`]): one store, no check. Otherwise through
    /// `regs.write32` at the checked offset.
    #[inline(always)]
    pub fn ring_mmio<R: RegisterIo + ?Sized>(&self, regs: &R, value: u32) {
        match &self.mmio {
            Some(reg) => reg.ring(value),
            None => regs.write32(self.offset, value),
        }
    }
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
