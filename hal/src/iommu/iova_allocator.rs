//! A bump allocator of IOVA space over the usable ranges an IOMMU reports.
//!
//! DMA regions are long-lived and few (each is a whole hugepage or more), so IOVA space is never
//! returned; a region's IOVA is reused only if the same allocator is rebuilt.

use crate::error::HalError;
use crate::iommu::IovaRange;
use std::sync::Mutex;

/// Hands out aligned IOVA ranges that lie wholly inside one usable range.
#[derive(Debug)]
pub struct IovaAllocator {
    ranges: Vec<IovaRange>,
    /// Per range: the next free IOVA.
    next: Mutex<Vec<u64>>,
}

impl IovaAllocator {
    /// Builds an allocator over `ranges`. IOVA 0 is never handed out, so that a zero address
    /// can't be mistaken for a valid mapping.
    pub fn new(mut ranges: Vec<IovaRange>) -> Self {
        ranges.retain(|r| r.end >= r.start);
        ranges.sort_by_key(|r| r.start);
        let next = ranges.iter().map(|r| r.start.max(1 << 20)).collect();
        IovaAllocator {
            ranges,
            next: Mutex::new(next),
        }
    }

    /// Reserves `len` bytes aligned to `align` (a power of two).
    pub fn reserve(&self, len: u64, align: u64) -> Result<u64, HalError> {
        let align = align.max(1);
        if !align.is_power_of_two() || len == 0 {
            return Err(HalError::IovaExhausted { len });
        }
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        for (i, r) in self.ranges.iter().enumerate() {
            let Some(start) = next[i].checked_add(align - 1).map(|v| v & !(align - 1)) else {
                continue;
            };
            let Some(last) = start.checked_add(len - 1) else {
                continue;
            };
            if start >= r.start && last <= r.end {
                next[i] = last + 1;
                return Ok(start);
            }
        }
        Err(HalError::IovaExhausted { len })
    }

    /// The ranges this allocator draws from.
    pub fn ranges(&self) -> &[IovaRange] {
        &self.ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_inside_ranges_and_skips_holes() {
        // A hole below 4 GiB, as on x86 with the MSI window reserved.
        let a = IovaAllocator::new(vec![
            IovaRange {
                start: 0,
                end: 0xfedf_ffff,
            },
            IovaRange {
                start: 0xfef0_0000,
                end: u64::MAX,
            },
        ]);
        let first = a.reserve(2 << 20, 2 << 20).unwrap();
        assert_eq!(first, 2 << 20, "zero page region skipped, aligned");
        let big = a.reserve(0xff00_0000, 2 << 20).unwrap();
        assert!(big >= 0xfef0_0000, "did not straddle the hole: {big:#x}");
        assert_eq!(big % (2 << 20), 0);
    }

    #[test]
    fn reports_exhaustion() {
        let a = IovaAllocator::new(vec![IovaRange {
            start: 0,
            end: (4 << 20) - 1,
        }]);
        assert!(a.reserve(2 << 20, 2 << 20).is_ok());
        assert!(matches!(
            a.reserve(4 << 20, 4096),
            Err(HalError::IovaExhausted { .. })
        ));
    }
}
