//! `/proc/self/pagemap`: the physical frame behind a virtual address, for the no-IOMMU mode
//! ([`super::physical`]). One 64-bit entry per 4 KiB virtual page: bits 0-54 the page frame
//! number (PFN), bit 63 "present". Without CAP_SYS_ADMIN the kernel reports PFN 0.

use crate::error::HalError;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The size of the pages pagemap has one entry for.
pub const PAGEMAP_PAGE: u64 = 4096;
/// Bits 0-54 of an entry: the page frame number.
const PFN_MASK: u64 = (1 << 55) - 1;
/// Bit 63 of an entry: the page is present in memory.
const PRESENT: u64 = 1 << 63;

/// Reads pagemap entries: the real file, or a stand-in in tests.
pub trait FrameReader: Send + Sync {
    /// The raw 64-bit pagemap entry of the 4 KiB page that contains `vaddr`.
    fn entry(&self, vaddr: usize) -> std::io::Result<u64>;
}

/// `/proc/self/pagemap`, opened once.
#[derive(Debug)]
pub struct ProcPagemap {
    file: File,
}

/// Where the process's pagemap lives.
pub const PAGEMAP_PATH: &str = "/proc/self/pagemap";

impl ProcPagemap {
    /// Opens `/proc/self/pagemap`.
    pub fn open() -> Result<Self, HalError> {
        let file = File::open(PAGEMAP_PATH).map_err(|source| HalError::Io {
            path: PAGEMAP_PATH.to_string(),
            source,
        })?;
        Ok(ProcPagemap { file })
    }
}

impl FrameReader for ProcPagemap {
    fn entry(&self, vaddr: usize) -> std::io::Result<u64> {
        let mut raw = [0u8; 8];
        let offset = (vaddr as u64 / PAGEMAP_PAGE) * 8;
        self.file.read_exact_at(&mut raw, offset)?;
        Ok(u64::from_ne_bytes(raw))
    }
}

/// The physical address of `vaddr` from its pagemap `entry`. Typed errors: the page is not
/// present ([`HalError::PageNotPresent`]), or the kernel hid the frame number
/// ([`HalError::PagemapNoFrames`]: no CAP_SYS_ADMIN).
pub fn physical_address(vaddr: usize, entry: u64) -> Result<u64, HalError> {
    if entry & PRESENT == 0 {
        return Err(HalError::PageNotPresent {
            vaddr: vaddr as u64,
        });
    }
    let pfn = entry & PFN_MASK;
    if pfn == 0 {
        return Err(HalError::PagemapNoFrames);
    }
    Ok(pfn * PAGEMAP_PAGE + vaddr as u64 % PAGEMAP_PAGE)
}

/// Translates `vaddr` through `reader` (one entry read).
pub fn translate(reader: &dyn FrameReader, vaddr: usize) -> Result<u64, HalError> {
    let entry = reader.entry(vaddr).map_err(|source| HalError::Io {
        path: PAGEMAP_PATH.to_string(),
        source,
    })?;
    physical_address(vaddr, entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn present_entries_give_frame_times_page_plus_offset() {
        let entry = PRESENT | 0x12345;
        assert_eq!(
            physical_address(0x7f00_0000_0123, entry).unwrap(),
            0x12345 * 4096 + 0x123
        );
        // Bits 55-62 (soft-dirty, exclusive, file/shared, swapped) are not part of the PFN.
        let flags = PRESENT | (1 << 55) | (1 << 56) | (1 << 61) | 0x800;
        assert_eq!(physical_address(0, flags).unwrap(), 0x800 * 4096);
    }

    #[test]
    fn pfn_zero_is_the_no_capability_error() {
        let err = physical_address(0x1000, PRESENT).unwrap_err();
        assert!(matches!(err, HalError::PagemapNoFrames), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("CAP_SYS_ADMIN"), "{msg}");
        assert!(msg.contains("root"), "{msg}");
    }

    #[test]
    fn a_page_not_present_is_refused() {
        let err = physical_address(0x2000, 0x1234).unwrap_err();
        assert!(
            matches!(err, HalError::PageNotPresent { vaddr: 0x2000 }),
            "{err}"
        );
    }

    #[test]
    fn the_real_pagemap_reads_an_entry_for_touched_memory() {
        let page = vec![1u8; 4096];
        let reader = ProcPagemap::open().unwrap();
        let entry = reader.entry(page.as_ptr() as usize).unwrap();
        assert_ne!(entry & PRESENT, 0, "a page just written is present");
    }
}
