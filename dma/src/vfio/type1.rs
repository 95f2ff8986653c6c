//! The VFIO type1 IOMMU: usable IOVA ranges (from the IOVA-range capability), IOVA reservation
//! and DMA map/unmap, with the RLIMIT_MEMLOCK check in front of every mapping.

use super::caps::{parse_iova_ranges, u64_at};
use super::container::{ioctl_error, Container};
use super::group::Group;
use super::info_query::query_with_caps;
use super::ioctls;
use crate::error::DmaError;
use crate::iommu::{Iommu, IovaRange};
use crate::iova_allocator::IovaAllocator;
use crate::memlock;
use std::ptr::NonNull;
use std::sync::Mutex;
use vfio_bindings::bindings::vfio::{
    vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap, vfio_iommu_type1_info,
    VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE, VFIO_IOMMU_INFO_PGSIZES,
};

/// The x86 MSI window, which DMA must never target.
const MSI_WINDOW: IovaRange = IovaRange {
    start: 0xfee0_0000,
    end: 0xfeef_ffff,
};
/// A 39-bit address width, the smallest that Intel IOMMUs (and QEMU's intel-iommu) offer.
const DEFAULT_TOP: u64 = (1 << 39) - 1;

/// The ranges assumed when the kernel does not report any: below 2^39, minus the x86 MSI window.
pub fn default_iova_ranges() -> Vec<IovaRange> {
    vec![
        IovaRange {
            start: 0,
            end: MSI_WINDOW.start - 1,
        },
        IovaRange {
            start: MSI_WINDOW.end + 1,
            end: DEFAULT_TOP,
        },
    ]
}

/// The usable ranges in a type1 info answer, or the default ones (logged) without the cap.
pub fn usable_ranges(info: &[u8]) -> Result<Vec<IovaRange>, DmaError> {
    match parse_iova_ranges(info)? {
        Some(r) => Ok(r),
        None => {
            let d = default_iova_ranges();
            log::warn!(
                "the kernel reported no IOVA ranges (no VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE); assuming {d:x?}"
            );
            Ok(d)
        }
    }
}

/// Advice for a failed VFIO_IOMMU_MAP_DMA, by errno.
fn map_hint(e: nix::Error) -> &'static str {
    match e {
        nix::Error::ENOMEM => " (locked-memory limit reached? raise it with `ulimit -l unlimited`, or run as root)",
        nix::Error::EEXIST => " (this IOVA is already mapped: a bug in IOVA reservation)",
        nix::Error::EINVAL => " (IOVA outside the usable ranges, or an address or size not aligned to the IOMMU page size)",
        nix::Error::EFAULT => " (the process memory is not mapped)",
        _ => "",
    }
}

/// A VFIO container with the type1v2 IOMMU set, holding its group(s) attached for as long as
/// it lives so that mappings stay valid.
#[derive(Debug)]
pub struct Type1Iommu {
    container: Container,
    _groups: Vec<Group>,
    alloc: IovaAllocator,
    /// Bytes currently mapped (pinned and charged to RLIMIT_MEMLOCK).
    locked: Mutex<u64>,
    page_sizes: u64,
}

impl Type1Iommu {
    /// Wraps a container whose IOMMU is set, reading its IOVA ranges and page sizes.
    pub fn new(container: Container, group: Group) -> Result<Self, DmaError> {
        let head = vfio_iommu_type1_info::default();
        let fd = container.fd();
        // SAFETY: `query_with_caps` hands the ioctl a buffer of `argsz` bytes starting with a
        // vfio_iommu_type1_info; the kernel writes at most `argsz` bytes.
        let info = query_with_caps(head, |p| unsafe { ioctls::vfio_iommu_get_info(fd, p) })
            .map_err(|e| ioctl_error("IOMMU_GET_INFO", e))?;
        let flags = super::caps::u32_at(&info, std::mem::offset_of!(vfio_iommu_type1_info, flags))
            .unwrap_or(0);
        let page_sizes = if flags & VFIO_IOMMU_INFO_PGSIZES != 0 {
            u64_at(
                &info,
                std::mem::offset_of!(vfio_iommu_type1_info, iova_pgsizes),
            )
            .unwrap_or(0)
        } else {
            0
        };
        let ranges = usable_ranges(&info)?;
        log::debug!("type1 IOMMU: ranges {ranges:x?}, page sizes {page_sizes:#x}");
        Ok(Type1Iommu {
            container,
            _groups: vec![group],
            alloc: IovaAllocator::new(ranges),
            locked: Mutex::new(0),
            page_sizes: if page_sizes == 0 { 4096 } else { page_sizes },
        })
    }

    /// The IOMMU page sizes (a bitmap; the lowest set bit is the smallest page).
    pub fn page_sizes(&self) -> u64 {
        self.page_sizes
    }

    /// Bytes currently mapped.
    pub fn mapped_bytes(&self) -> u64 {
        *self.locked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the container still has its IOMMU. It loses it when its last group is detached:
    /// on Linux 6.2 and later the kernel does that itself once a device that was unplugged or
    /// unbound (a device request) is released, and tearing the IOMMU down removes every
    /// mapping with it.
    fn has_iommu(&self) -> bool {
        let mut info = vfio_iommu_type1_info {
            argsz: std::mem::size_of::<vfio_iommu_type1_info>() as u32,
            ..Default::default()
        };
        // SAFETY: `info` is a valid vfio_iommu_type1_info with argsz set to its size; the
        // kernel writes at most that many bytes.
        unsafe { ioctls::vfio_iommu_get_info(self.container.fd(), &mut info) }.is_ok()
    }
}

impl Iommu for Type1Iommu {
    fn reserve_iova(&self, len: u64, align: u64) -> Result<u64, DmaError> {
        let min_page = 1u64 << self.page_sizes.trailing_zeros().min(63);
        self.alloc.reserve(len, align.max(min_page))
    }

    unsafe fn map(&self, vaddr: NonNull<u8>, len: u64, iova: u64) -> Result<(), DmaError> {
        let mut locked = self.locked.lock().unwrap_or_else(|e| e.into_inner());
        memlock::ensure(*locked, len)?;
        let map = vfio_iommu_type1_dma_map {
            argsz: std::mem::size_of::<vfio_iommu_type1_dma_map>() as u32,
            flags: VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
            vaddr: vaddr.as_ptr() as u64,
            iova,
            size: len,
        };
        // SAFETY: `map` is a valid vfio_iommu_type1_dma_map; the caller guarantees the memory
        // stays allocated until it is unmapped.
        unsafe { ioctls::vfio_iommu_map_dma(self.container.fd(), &map) }.map_err(|e| {
            DmaError::MapFailed {
                iova,
                len,
                source: e.into(),
                hint: map_hint(e),
            }
        })?;
        *locked = locked.saturating_add(len);
        Ok(())
    }

    fn unmap(&self, iova: u64, len: u64) -> Result<(), DmaError> {
        let mut locked = self.locked.lock().unwrap_or_else(|e| e.into_inner());
        let mut unmap = vfio_iommu_type1_dma_unmap {
            argsz: std::mem::size_of::<vfio_iommu_type1_dma_unmap>() as u32,
            flags: 0,
            iova,
            size: len,
            ..Default::default()
        };
        // SAFETY: `unmap` is a valid vfio_iommu_type1_dma_unmap without a trailing bitmap; the
        // kernel writes back the unmapped size.
        let done = unsafe { ioctls::vfio_iommu_unmap_dma(self.container.fd(), &mut unmap) };
        if (done.is_err() || unmap.size == 0) && !self.has_iommu() {
            // The kernel tore the container's IOMMU down (the device was removed): the mapping
            // and its page pins are already gone.
            log::debug!("IOVA {iova:#x}: the container has no IOMMU any more; nothing to unmap");
            *locked = locked.saturating_sub(len);
            return Ok(());
        }
        done.map_err(|e| DmaError::UnmapFailed {
            iova,
            len,
            source: e.into(),
        })?;
        *locked = locked.saturating_sub(unmap.size);
        if unmap.size != len {
            return Err(DmaError::UnmapFailed {
                iova,
                len,
                source: std::io::Error::other(format!(
                    "the kernel unmapped {} bytes, not {len}",
                    unmap.size
                )),
            });
        }
        Ok(())
    }

    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.alloc.ranges().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ranges_skip_the_msi_window_and_stay_below_2_39() {
        let d = default_iova_ranges();
        for r in &d {
            assert!(r.end < 1 << 39);
            assert!(
                r.end < MSI_WINDOW.start || r.start > MSI_WINDOW.end,
                "{r:x?}"
            );
        }
        assert_eq!(
            d.iter().map(|r| r.end - r.start + 1).sum::<u64>(),
            (1 << 39) - (1 << 20)
        );
    }

    #[test]
    fn falls_back_without_the_cap_but_not_on_a_bad_chain() {
        // A 24-byte info with no caps.
        let mut info = vec![0u8; 24];
        info[0..4].copy_from_slice(&24u32.to_ne_bytes());
        assert_eq!(usable_ranges(&info).unwrap(), default_iova_ranges());
        // CAPS flag set, cap_offset pointing past the end.
        info[4..8].copy_from_slice(&2u32.to_ne_bytes());
        info[16..20].copy_from_slice(&64u32.to_ne_bytes());
        assert!(usable_ranges(&info).is_err());
    }

    #[test]
    fn enomem_hint_mentions_memlock() {
        assert!(map_hint(nix::Error::ENOMEM).contains("ulimit -l"));
        assert_eq!(map_hint(nix::Error::EIO), "");
    }
}
