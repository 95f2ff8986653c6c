//! A PCI BAR mapped into the process (MAP_SHARED on the VFIO device fd), with bounds-checked
//! volatile register access, and [`MmioDoorbell`]s: registers checked once, written unchecked.

use super::sigbus::GuardedMap;
use crate::error::HalError;
use crate::mem::barrier::{mmio_read32, mmio_write32};
use memmap2::MmapOptions;
use std::fs::File;
use std::ptr::NonNull;
use std::sync::Arc;

/// A memory-mapped BAR. Accesses outside it, or not aligned to their width, read as all ones
/// and are ignored on write, as a PCI master abort would be; nothing panics.
#[derive(Debug)]
pub struct Bar {
    /// Shared with the doorbells made from it, which keep the mapping alive. Registered with
    /// the SIGBUS handler ([`super::sigbus`]) while it lives.
    map: Arc<GuardedMap>,
    index: u32,
}

impl Bar {
    /// Maps `len` bytes of `file` at `offset` as BAR `index`: a region of a VFIO device fd, or
    /// a plain file standing in for one in tests. The mapping is registered with the SIGBUS
    /// handler, so an access after the mapping was revoked reads all ones ([`Bar::removed`]).
    pub fn map(file: &File, offset: u64, len: usize, index: u32) -> std::io::Result<Self> {
        let map = MmapOptions::new().offset(offset).len(len).map_raw(file)?;
        Ok(Bar {
            map: Arc::new(GuardedMap::new(map)?),
            index,
        })
    }

    /// Whether the mapping was revoked under us (an access raised SIGBUS, caught by the
    /// handler): every register now reads all ones and writes go nowhere. The device is gone
    /// (hot removal) or memory decoding was turned off behind our back.
    pub fn removed(&self) -> bool {
        self.map.removed()
    }

    /// The BAR index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The mapped length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is mapped (never true for a mapped BAR).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Checks that a `width`-byte access at `offset` is inside the BAR and aligned.
    pub fn check(&self, offset: usize, width: usize) -> Result<(), HalError> {
        let inside = offset
            .checked_add(width)
            .is_some_and(|end| end <= self.map.len());
        if inside && offset.is_multiple_of(width) {
            Ok(())
        } else {
            Err(HalError::BarOffset {
                bar: self.index,
                offset,
                size: self.map.len(),
            })
        }
    }

    /// Reads the 32-bit register at `offset` (all ones when out of range).
    #[inline]
    pub fn read32(&self, offset: usize) -> u32 {
        if self.check(offset, 4).is_err() {
            return u32::MAX;
        }
        // SAFETY: `offset..offset+4` is inside the live mapping and 4-byte aligned (the mapping
        // is page aligned).
        unsafe { mmio_read32(self.map.as_ptr().add(offset).cast::<u32>()) }
    }

    /// Writes the 32-bit register at `offset` (ignored when out of range: a control-path
    /// access; doorbells go through [`Bar::doorbell`], checked once).
    ///
    /// # Safety
    /// A register write can start DMA at an address the value names (for an NVMe controller:
    /// CC.EN = 1 with ASQ/ACQ programmed, a doorbell, the CMB/PMR base registers). The caller
    /// guarantees the write makes the device read or write no memory other than DMA memory
    /// that the caller owns, keeps mapped in the device's IOMMU domain and does not free or
    /// reuse for as long as the device may use it:
    /// - address registers (and enabling a controller whose address registers are set) name
    ///   live DMA memory owned by the caller until the device is disabled or told to stop;
    /// - a submission doorbell only exposes entries the caller wrote, whose data pointers name
    ///   such memory until their completions arrive; a completion doorbell only frees slots of
    ///   a completion ring that stays allocated.
    ///
    /// Writes that stop the device (clearing an enable bit, a shutdown notification) or that
    /// name no address meet this trivially.
    #[inline]
    pub unsafe fn write32(&self, offset: usize, value: u32) {
        if self.check(offset, 4).is_err() {
            return;
        }
        // SAFETY: as in `read32`; the mapping is shared and writable. What the device does
        // with the value is the caller's guarantee (see `# Safety`).
        unsafe { mmio_write32(self.map.as_mut_ptr().add(offset).cast::<u32>(), value) }
    }

    /// A handle on the 32-bit register at `offset` (a doorbell), checked here once: its
    /// [`MmioDoorbell::ring`] writes with no check. Fails with [`HalError::BarOffset`] for an
    /// offset outside the BAR or not 4-byte aligned.
    pub fn doorbell(&self, offset: usize) -> Result<MmioDoorbell, HalError> {
        self.check(offset, 4)?;
        // SAFETY: `offset + 4 <= len` was just checked, so the pointer stays inside the mapping.
        let reg = unsafe { self.map.as_mut_ptr().add(offset) }.cast::<u32>();
        Ok(MmioDoorbell {
            reg: NonNull::new(reg).ok_or(HalError::BarOffset {
                bar: self.index,
                offset,
                size: self.map.len(),
            })?,
            offset,
            _map: self.map.clone(),
        })
    }

    /// Reads a 64-bit register as two 32-bit reads, low dword first (NVMe allows this).
    #[inline]
    pub fn read64(&self, offset: usize) -> u64 {
        if self.check(offset, 8).is_err() {
            return u64::MAX;
        }
        let lo = self.read32(offset);
        let hi = self.read32(offset + 4);
        (u64::from(hi) << 32) | u64::from(lo)
    }

    /// Writes a 64-bit register as two 32-bit writes, low dword first (ignored out of range).
    ///
    /// # Safety
    /// As for [`Bar::write32`]: the value (an address register's, typically: ASQ, ACQ,
    /// CMBMSC, PMRMSC) must make the device use no memory but live DMA memory that the caller
    /// owns for as long as the device may use it.
    #[inline]
    pub unsafe fn write64(&self, offset: usize, value: u64) {
        if self.check(offset, 8).is_err() {
            return;
        }
        // SAFETY: the two halves of the caller's write, with the caller's guarantee; the low
        // half alone names no memory the whole value would not.
        unsafe {
            self.write32(offset, value as u32);
            self.write32(offset + 4, (value >> 32) as u32);
        }
    }
}

/// A 32-bit register of a mapped BAR (a doorbell), checked at creation ([`Bar::doorbell`]):
/// [`MmioDoorbell::ring`] is one store, with no check that could drop the write. The handle
/// keeps the BAR mapped.
pub struct MmioDoorbell {
    reg: NonNull<u32>,
    offset: usize,
    _map: Arc<GuardedMap>,
}

// SAFETY: the handle only writes a device register of a shared mapping it keeps alive; register
// writes are valid from any thread.
unsafe impl Send for MmioDoorbell {}
// SAFETY: as for Send: `ring` takes `&self` and is one store.
unsafe impl Sync for MmioDoorbell {}

impl std::fmt::Debug for MmioDoorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmioDoorbell")
            .field("offset", &format_args!("{:#x}", self.offset))
            .finish()
    }
}

impl MmioDoorbell {
    /// The register's offset in its BAR.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Writes `value` to the register. Order earlier queue-entry writes first with
    /// [`crate::mem::barrier::dma_wmb`].
    ///
    /// # Safety
    /// As for [`Bar::write32`]: for a submission queue tail doorbell, every entry `value`
    /// exposes was written by the caller and names only live DMA memory that the caller keeps
    /// until the entry's completion arrives (or the device is disabled); for a completion
    /// queue head doorbell, the completion ring stays allocated while the queue exists.
    #[inline(always)]
    pub unsafe fn ring(&self, value: u32) {
        // SAFETY: `reg` is 4-byte aligned and inside the mapping (checked in `Bar::doorbell`),
        // which `_map` keeps alive; what the value exposes is the caller's guarantee.
        unsafe { mmio_write32(self.reg.as_ptr(), value) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_bar(len: usize) -> (Bar, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("vfnvme-bar-{}-{}", std::process::id(), len));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.write_all(&vec![0u8; len]).unwrap();
        (Bar::map(&f, 0, len, 0).unwrap(), path)
    }

    // The "BARs" below map a plain temporary file, not a device: no write to them can start
    // DMA, whatever the value.

    fn write32(bar: &Bar, offset: usize, value: u32) {
        // SAFETY: `bar` maps a regular file (see `file_bar`); no device reads the value.
        unsafe { bar.write32(offset, value) }
    }

    fn write64(bar: &Bar, offset: usize, value: u64) {
        // SAFETY: as in `write32`.
        unsafe { bar.write64(offset, value) }
    }

    fn ring(db: &MmioDoorbell, value: u32) {
        // SAFETY: as in `write32`: the doorbell is a word of a regular file.
        unsafe { db.ring(value) }
    }

    #[test]
    fn reads_and_writes_inside() {
        let (bar, path) = file_bar(0x2000);
        write32(&bar, 0x14, 0x0046_0001);
        assert_eq!(bar.read32(0x14), 0x0046_0001);
        write64(&bar, 0x28, 0x1234_5678_9abc_def0);
        assert_eq!(bar.read32(0x28), 0x9abc_def0, "low dword first in memory");
        assert_eq!(bar.read32(0x2c), 0x1234_5678);
        assert_eq!(bar.read64(0x28), 0x1234_5678_9abc_def0);
        write32(&bar, 0x1ffc, 7);
        assert_eq!(bar.read32(0x1ffc), 7);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn out_of_range_or_misaligned_reads_ones_and_ignores_writes() {
        let (bar, path) = file_bar(0x1000);
        assert_eq!(bar.read32(0x1000), u32::MAX);
        assert_eq!(bar.read32(usize::MAX), u32::MAX);
        assert_eq!(bar.read64(0xffc), u64::MAX, "straddles the end");
        assert_eq!(bar.read32(0x2), u32::MAX, "misaligned");
        write32(&bar, 0x1000, 1);
        write64(&bar, usize::MAX - 3, 1);
        write32(&bar, 0x3, 0xffff_ffff);
        assert_eq!(bar.read32(0), 0);
        assert_eq!(bar.read32(4), 0);
        assert!(matches!(
            bar.check(0x1000, 4),
            Err(HalError::BarOffset {
                bar: 0,
                offset: 0x1000,
                size: 0x1000
            })
        ));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn doorbells_are_checked_once_and_write_unchecked() {
        let (bar, path) = file_bar(0x2000);
        let db = bar.doorbell(0x1008).expect("inside the BAR");
        assert_eq!(db.offset(), 0x1008);
        ring(&db, 0x2a);
        assert_eq!(bar.read32(0x1008), 0x2a);
        ring(&bar.doorbell(0x1ffc).expect("the last register"), 3);
        assert_eq!(bar.read32(0x1ffc), 3);
        for bad in [0x2000, 0x1ffe, 0x1002, usize::MAX - 1] {
            assert!(
                matches!(
                    bar.doorbell(bad),
                    Err(HalError::BarOffset { bar: 0, offset, size: 0x2000 }) if offset == bad
                ),
                "offset {bad:#x}"
            );
        }
        // The handle keeps the mapping: it still writes after the BAR is dropped.
        drop(bar);
        ring(&db, 0x2b);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Bar>();
        check::<MmioDoorbell>();
    }
}
