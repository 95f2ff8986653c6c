//! The no-IOMMU "mapper": device addresses are physical addresses, read once per hugepage from
//! `/proc/self/pagemap` ([`super::pagemap`]). It implements [`Iommu`] with
//! [`Addressing::Physical`], so the DMA pool, its spans and its bounds checks are the same as
//! over an IOMMU; only where a region's device address comes from differs.
//!
//! Nothing here stops the device: with no IOMMU, a wrong address reaches any memory. The pool's
//! per-I/O checks (a request's buffers lie inside live allocations) are the only guard.

use super::pagemap::{self, FrameReader, ProcPagemap};
use super::{Addressing, Iommu, IovaRange};
use crate::error::HalError;
use crate::iommu::memlock;
use std::ptr::NonNull;
use std::sync::Mutex;

/// One locked region: its device (physical) address, process address and length.
#[derive(Debug, Clone, Copy)]
struct Locked {
    pa: u64,
    va: usize,
    len: u64,
}

/// Device addresses without an IOMMU: each region (one hugepage) is locked in memory and
/// translated once to its physical address.
pub struct PhysicalMapper {
    reader: Box<dyn FrameReader>,
    regions: Mutex<Vec<Locked>>,
}

impl std::fmt::Debug for PhysicalMapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhysicalMapper")
            .field("mapped_bytes", &self.mapped_bytes())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PhysicalMapper {
    /// A mapper over this process's `/proc/self/pagemap`.
    pub fn new() -> Result<Self, HalError> {
        Ok(Self::with_reader(Box::new(ProcPagemap::open()?)))
    }

    /// A mapper over another source of pagemap entries (tests).
    pub fn with_reader(reader: Box<dyn FrameReader>) -> Self {
        PhysicalMapper {
            reader,
            regions: Mutex::new(Vec::new()),
        }
    }

    /// Bytes currently locked and handed to the device.
    pub fn mapped_bytes(&self) -> u64 {
        lock(&self.regions).iter().map(|r| r.len).sum()
    }

    /// Locks `len` bytes at `va` and returns the physical address of the first byte, checking
    /// that the region is one physically contiguous page (its physical address is aligned to
    /// its length, as a hugepage's is).
    fn lock_and_translate(&self, va: usize, len: u64) -> Result<u64, HalError> {
        memlock::ensure(self.mapped_bytes(), len)?;
        // SAFETY: mlock only changes residency of the caller's live mapping of `len` bytes at
        // `va` (the pool's region); it reads or writes no memory.
        if unsafe { libc::mlock(va as *const libc::c_void, len as usize) } != 0 {
            return Err(HalError::Io {
                path: format!("mlock of {len} bytes of DMA memory"),
                source: std::io::Error::last_os_error(),
            });
        }
        let pa = pagemap::translate(self.reader.as_ref(), va).and_then(|pa| {
            if len.is_power_of_two() && pa % len == 0 {
                Ok(pa)
            } else {
                Err(HalError::NotOnePage {
                    vaddr: va as u64,
                    pa,
                    len,
                })
            }
        });
        if pa.is_err() {
            // SAFETY: undoes the mlock above on the same live range.
            unsafe { libc::munlock(va as *const libc::c_void, len as usize) };
        }
        pa
    }
}

impl Iommu for PhysicalMapper {
    fn reserve_iova(&self, len: u64, _align: u64) -> Result<u64, HalError> {
        Err(HalError::PhysicalOnly { len })
    }

    unsafe fn map(&self, _vaddr: NonNull<u8>, len: u64, _iova: u64) -> Result<(), HalError> {
        Err(HalError::PhysicalOnly { len })
    }

    unsafe fn map_region(
        &self,
        vaddr: NonNull<u8>,
        len: u64,
        _align: u64,
    ) -> Result<u64, HalError> {
        let va = vaddr.as_ptr() as usize;
        let pa = self.lock_and_translate(va, len)?;
        lock(&self.regions).push(Locked { pa, va, len });
        log::debug!("no-IOMMU: {len} bytes at {va:#x} are at physical {pa:#x}");
        Ok(pa)
    }

    fn unmap(&self, iova: u64, len: u64) -> Result<(), HalError> {
        let mut regions = lock(&self.regions);
        if let Some(i) = regions.iter().position(|r| r.pa == iova && r.len == len) {
            let r = regions.swap_remove(i);
            // SAFETY: the region is still mapped (the pool unmaps here before dropping its
            // memory); munlock only changes residency.
            unsafe { libc::munlock(r.va as *const libc::c_void, r.len as usize) };
        }
        Ok(())
    }

    fn iova_ranges(&self) -> Vec<IovaRange> {
        Vec::new()
    }

    fn addressing(&self) -> Addressing {
        Addressing::Physical
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memmap2::MmapOptions;

    /// Pagemap entries made up by the test.
    struct Fixed(u64);
    impl FrameReader for Fixed {
        fn entry(&self, _vaddr: usize) -> std::io::Result<u64> {
            Ok(self.0)
        }
    }

    const PRESENT: u64 = 1 << 63;

    fn region() -> memmap2::MmapMut {
        MmapOptions::new().len(2 << 20).map_anon().unwrap()
    }

    #[test]
    fn pfn_zero_refuses_and_unlocks() {
        let m = region();
        let mapper = PhysicalMapper::with_reader(Box::new(Fixed(PRESENT)));
        let ptr = NonNull::new(m.as_ptr() as *mut u8).unwrap();
        // SAFETY: `m` outlives the mapper's use of it.
        let err = unsafe { mapper.map_region(ptr, 2 << 20, 2 << 20) }.unwrap_err();
        assert!(matches!(err, HalError::PagemapNoFrames), "{err}");
        assert_eq!(mapper.mapped_bytes(), 0);
    }

    #[test]
    fn an_absent_page_is_refused() {
        let m = region();
        let mapper = PhysicalMapper::with_reader(Box::new(Fixed(0x400)));
        let ptr = NonNull::new(m.as_ptr() as *mut u8).unwrap();
        // SAFETY: as above.
        let err = unsafe { mapper.map_region(ptr, 2 << 20, 2 << 20) }.unwrap_err();
        assert!(matches!(err, HalError::PageNotPresent { .. }), "{err}");
    }

    #[test]
    fn a_frame_not_aligned_to_the_page_is_not_one_hugepage() {
        let m = region();
        // PFN 0x401: 4 KiB past a 2 MiB boundary.
        let mapper = PhysicalMapper::with_reader(Box::new(Fixed(PRESENT | 0x401)));
        let ptr = NonNull::new(m.as_ptr() as *mut u8).unwrap();
        // SAFETY: as above.
        let err = unsafe { mapper.map_region(ptr, 2 << 20, 2 << 20) }.unwrap_err();
        assert!(matches!(err, HalError::NotOnePage { .. }), "{err}");
    }

    #[test]
    fn a_good_frame_is_the_device_address_until_unmapped() {
        let m = region();
        let mapper = PhysicalMapper::with_reader(Box::new(Fixed(PRESENT | 0x400)));
        let ptr = NonNull::new(m.as_ptr() as *mut u8).unwrap();
        // SAFETY: as above; unmapped before `m` drops.
        let pa = unsafe { mapper.map_region(ptr, 2 << 20, 2 << 20) }.unwrap();
        assert_eq!(pa, 0x400 * 4096);
        assert_eq!(mapper.mapped_bytes(), 2 << 20);
        assert_eq!(mapper.addressing(), Addressing::Physical);
        assert!(matches!(
            mapper.reserve_iova(4096, 4096),
            Err(HalError::PhysicalOnly { .. })
        ));
        mapper.unmap(pa, 2 << 20).unwrap();
        assert_eq!(mapper.mapped_bytes(), 0);
    }
}
