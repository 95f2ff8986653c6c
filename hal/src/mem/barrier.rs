//! Ordering between the CPU and a DMA-capable device, per architecture.
//!
//! `std::sync::atomic::fence` orders memory as other CPUs see it; a device reading the rings
//! over PCIe is not another CPU, and on aarch64 a CPU-only fence (`dmb ish`) does not order
//! accesses for it. These are the device-facing barriers the queues need, as in Linux's
//! `dma_wmb`/`dma_rmb` (used by `writel`), libvfn's barrier header and SPDK's `spdk_wmb`/`spdk_mb`:
//!
//! | barrier | where | x86_64 | aarch64 |
//! |---|---|---|---|
//! | [`dma_wmb`] | after writing SQ entries (normal memory), before the doorbell write (MMIO) | compiler fence | `dmb oshst` |
//! | [`dma_rmb`] | after seeing a CQ entry's phase bit, before reading the rest of it | compiler fence | `dmb oshld` |
//! | [`dma_mb`] | between a shadow doorbell store and the EventIdx load | `mfence` | `dmb osh` |
//!
//! On x86_64, stores become visible in program order, the uncached MMIO write of a doorbell
//! included (vfnvme uses no non-temporal stores, the one case where SPDK's `sfence` would
//! matter), and loads are not reordered with older loads: only the compiler must be kept from
//! moving accesses, which is what Linux's x86 `dma_wmb`/`dma_rmb` do. A store followed by a load
//! of another location can be reordered on x86 too, hence the real fence in [`dma_mb`].
//!
//! On aarch64 the outer-shareable domain (`osh`) is the one that includes the device; Linux's
//! `writel` puts `dmb oshst` before a device register write for exactly this, and reads through
//! `dmb oshld`. SPDK uses the heavier `dsb st`/`dsb sy`; a `dmb` orders the accesses, which is
//! all a doorbell needs (the doorbell write itself need not have completed).
//!
//! The MMIO accesses themselves go through [`mmio_write32`]/[`mmio_read32`]: on aarch64 a plain
//! `str`/`ldr` with a base register only, the form a hypervisor can emulate (a volatile access
//! may be compiled with a writeback addressing mode, which KVM cannot decode).
//!
//! Other architectures and big-endian targets do not build: the rings are little-endian
//! structures written in place, and an unported target must get its own barriers here.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "vfnvme supports x86_64 and aarch64 only: add this architecture's DMA barriers to hal/src/mem/barrier.rs"
);

#[cfg(target_endian = "big")]
compile_error!(
    "vfnvme supports little-endian targets only: queue entries are written in the device's (little-endian) byte order in place"
);

/// Orders every memory write before it (queue entries, PRP lists) before any write after it
/// as the device sees them: put it before a doorbell write.
#[inline(always)]
pub fn dma_wmb() {
    // Release: no earlier access moves after a later store (the doorbell).
    #[cfg(target_arch = "x86_64")]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction: no memory access, no register or flag change; it acts as
    // a compiler barrier too (no `nomem`).
    unsafe {
        std::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
}

/// Orders every memory read before it before any read after it, for memory the device
/// writes: put it after seeing a completion's phase bit, before reading the rest of the entry.
#[inline(always)]
pub fn dma_rmb() {
    // Acquire: no later access moves before an earlier load (the phase bit).
    #[cfg(target_arch = "x86_64")]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Acquire);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as in `dma_wmb`.
    unsafe {
        std::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
}

/// A full barrier for memory shared with the device: every access before it (a store
/// included) happens before every access after it (a load included): between a shadow doorbell
/// store and the EventIdx load that decides whether the MMIO doorbell is needed.
#[inline(always)]
pub fn dma_mb() {
    #[cfg(target_arch = "x86_64")]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as in `dma_wmb`.
    unsafe {
        std::arch::asm!("dmb osh", options(nostack, preserves_flags))
    };
}

/// Writes the 32-bit device register at `reg` with one store instruction.
///
/// # Safety
/// `reg` is a 4-byte aligned address inside a live mapping of device registers (or of memory),
/// writable by this process.
#[inline(always)]
pub unsafe fn mmio_write32(reg: *mut u32, value: u32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees a mapped, aligned register.
    unsafe {
        reg.write_volatile(value)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the caller guarantees a mapped, aligned register; one `str` with a base register.
    unsafe {
        std::arch::asm!("str {v:w}, [{p}]", v = in(reg) value, p = in(reg) reg,
            options(nostack, preserves_flags))
    };
}

/// Reads the 32-bit device register at `reg` with one load instruction.
///
/// # Safety
/// `reg` is a 4-byte aligned address inside a live mapping of device registers (or of memory),
/// readable by this process.
#[inline(always)]
pub unsafe fn mmio_read32(reg: *const u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees a mapped, aligned register.
    let v = unsafe { reg.read_volatile() };
    #[cfg(target_arch = "aarch64")]
    let v: u32;
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the caller guarantees a mapped, aligned register; one `ldr` with a base register.
    unsafe {
        std::arch::asm!("ldr {v:w}, [{p}]", v = out(reg) v, p = in(reg) reg,
            options(nostack, preserves_flags, readonly))
    };
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmio_accessors_read_and_write_memory() {
        let mut word = 0u32;
        let p: *mut u32 = &mut word;
        // SAFETY: `p` is an aligned, live u32.
        unsafe {
            mmio_write32(p, 0xdead_beef);
            dma_wmb();
            dma_mb();
            dma_rmb();
            assert_eq!(mmio_read32(p), 0xdead_beef);
        }
        assert_eq!(word, 0xdead_beef);
    }
}
