//! The platform interface: everything the driver needs from below.
//!
//! The same driver code runs over VFIO (BAR0 mmap, IOMMU-mapped hugepages, the monotonic clock:
//! [`crate::vfio_platform`]) and over the in-memory controller model (a register file, a
//! recording IOMMU, virtual time: the `vfnvme-model` crate). The seam lives in this crate, below
//! both the driver (`vfnvme`, which re-exports it as `vfnvme::platform`) and the model, so that
//! neither needs the other.

use crate::{DmaPool, HalError, MmioDoorbell};

/// Access to the controller's register file (BAR0): properties and doorbells.
///
/// Offsets are byte offsets into BAR0. Implementations must not panic on any offset: an offset
/// outside the BAR reads as all ones and ignores writes (as a PCI master abort would). Doorbells
/// are not written by offset on the I/O path but through a [`Doorbell`], checked once.
///
/// Reads are safe. Writes are `unsafe`: a register value can aim the controller's DMA at any
/// address (ASQ/ACQ, CMB and PMR base registers, CC.EN = 1 with those set, a doorbell that
/// exposes a stale or foreign submission entry), which would let safe code make the device
/// overwrite memory it does not own. Each write states what its caller guarantees.
pub trait RegisterIo: Send + Sync + 'static {
    /// Reads a 32-bit register.
    fn read32(&self, offset: usize) -> u32;
    /// Writes a 32-bit register (control path; doorbells go through [`RegisterIo::ring`]).
    ///
    /// # Safety
    /// The write must not make the controller read or write any memory but DMA memory that
    /// the caller owns (mapped in the controller's IOMMU domain) and keeps allocated, unused
    /// for anything else, for as long as the controller may use it. In particular:
    /// - CC with EN = 1: AQA/ASQ/ACQ (and any other address register) name admin rings of
    ///   those sizes in such memory, kept until the controller is disabled again (CC.EN = 0
    ///   and CSTS.RDY = 0) or reset;
    /// - a submission queue tail doorbell: every entry the new tail exposes was written by the
    ///   caller, and every address in it (PRPs, PRP lists, SGLs, metadata) names such memory
    ///   until the entry's completion arrives (or the controller is disabled);
    /// - a completion queue head doorbell: it only gives back slots the caller consumed, of a
    ///   completion ring that stays allocated while the queue exists;
    /// - the other address registers (CMBMSC, PMRMSCL/PMRMSCU, BPMBL): as for ASQ in
    ///   [`RegisterIo::write64`].
    ///
    /// Writes that only stop the controller or name no address (CC.EN = 0, CC.SHN, INTMS,
    /// INTMC, NSSR) meet this trivially.
    unsafe fn write32(&self, offset: usize, value: u32);
    /// Reads a 64-bit register (CAP, ASQ, ACQ).
    fn read64(&self, offset: usize) -> u64;
    /// Writes a 64-bit register (ASQ, ACQ).
    ///
    /// # Safety
    /// As for [`RegisterIo::write32`]. For an address register (ASQ, ACQ, CMBMSC, PMRMSC,
    /// BPMBL): the address, with the size the other registers give, lies in DMA memory that
    /// the caller owns and keeps allocated for as long as the controller may use it (until it
    /// is disabled or the register is rewritten while disabled). With the controller enabled,
    /// ASQ and ACQ must not be changed.
    ///
    /// Safe code can't aim the controller's DMA this way:
    ///
    /// ```compile_fail,E0133
    /// use vfnvme_hal::platform::RegisterIo;
    ///
    /// /// Points the admin submission queue at an address nobody allocated.
    /// fn aim_asq<R: RegisterIo>(regs: &R) {
    ///     regs.write64(0x28, 0xdead_b000);
    /// }
    /// ```
    ///
    /// What compiles is a write whose caller owns the memory and says why:
    ///
    /// ```
    /// use vfnvme_hal::platform::RegisterIo;
    /// use vfnvme_hal::DmaBuffer;
    ///
    /// /// Points ASQ at `ring`.
    /// ///
    /// /// # Safety
    /// /// The controller is disabled and is not enabled again while `ring` may be dropped.
    /// unsafe fn program_asq<R: RegisterIo>(regs: &R, ring: &DmaBuffer) {
    ///     // SAFETY: `ring` is DMA memory of the controller's pool that the caller keeps for
    ///     // as long as the controller may use it (this function's contract).
    ///     unsafe { regs.write64(0x28, ring.iova()) }
    /// }
    /// ```
    unsafe fn write64(&self, offset: usize, value: u64);
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
    ///
    /// # Safety
    /// `db` was made from this register file, and the value meets the doorbell rules of
    /// [`RegisterIo::write32`]: a submission tail only exposes entries the caller wrote, whose
    /// addresses name DMA memory the caller keeps until their completions arrive; a
    /// completion head only gives back consumed slots of a ring that stays allocated.
    #[inline(always)]
    unsafe fn ring(&self, db: &Doorbell, value: u32) {
        // SAFETY: the caller's guarantee for this doorbell write (see `# Safety`).
        unsafe { self.write32(db.offset, value) }
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
    /// The doorbell at byte `offset` of `regs`. Fails with [`HalError::BarOffset`] when the
    /// register is not 4-byte aligned or not inside the register file (e.g. a queue id beyond
    /// the doorbells the controller's BAR has room for).
    pub fn new<R: RegisterIo + ?Sized>(regs: &R, offset: usize) -> Result<Doorbell, HalError> {
        let size = regs.size();
        let inside = offset.checked_add(4).is_some_and(|end| end <= size);
        if !inside || !offset.is_multiple_of(4) {
            return Err(HalError::BarOffset {
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
    ///
    /// # Safety
    /// As for [`RegisterIo::ring`]: `self` was made from `regs`, and `value` only exposes
    /// submission entries the caller wrote (naming DMA memory it keeps until their
    /// completions) or gives back consumed slots of a completion ring that stays allocated.
    #[inline(always)]
    pub unsafe fn ring_mmio<R: RegisterIo + ?Sized>(&self, regs: &R, value: u32) {
        match &self.mmio {
            // SAFETY: the register this doorbell was made for; the caller's guarantee covers
            // the value.
            Some(reg) => unsafe { reg.ring(value) },
            // SAFETY: as above, through the register file at the checked offset.
            None => unsafe { regs.write32(self.offset, value) },
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

    /// Monotonic time in nanoseconds for the I/O path's periodic checks (a queue pair's
    /// timeout check every 256 polls): cheap above all, a few milliseconds of resolution is
    /// enough. Compared only with itself. Default: [`now_ns`](Self::now_ns); the VFIO platform
    /// reads the coarse clock ([`crate::time::coarse_now_ns`]), which costs no system call
    /// whatever the kernel's clocksource.
    #[inline(always)]
    fn now_coarse_ns(&self) -> u64 {
        self.now_ns()
    }

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
    /// the controller's entry in the driver's quirk table (`vfnvme::quirks::QUIRK_TABLE`).
    fn pci_id(&self) -> Option<(u16, u16)> {
        None
    }

    /// Whether the device is known to be going away: the kernel asked for it back (VFIO's
    /// device request interrupt) or its BAR mapping was revoked. Called by the admin poll's
    /// health check and by a queue pair's periodic check (every 256 polls), never on the I/O
    /// fast path; `true` marks the controller removed. The default: never.
    fn removed(&self) -> bool {
        false
    }
}
