//! The VFIO type1 IOMMU: usable IOVA ranges (from the IOVA-range capability), IOVA reservation
//! and DMA map/unmap, with the RLIMIT_MEMLOCK check in front of every mapping.

use super::caps::{parse_iova_ranges, u64_at};
use super::container::{ioctl_error, Container};
use super::group::Group;
use super::info_query::query_with_caps;
use super::ioctls;
use crate::error::HalError;
use crate::iommu::iova_allocator::IovaAllocator;
use crate::iommu::memlock;
use crate::iommu::{Iommu, IovaRange};
use crate::pci::address::PciAddress;
use std::fs::File;
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
pub fn usable_ranges(info: &[u8]) -> Result<Vec<IovaRange>, HalError> {
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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

/// The parts of a type1 container that change when a group joins.
#[derive(Debug)]
struct Domain {
    /// Draws IOVAs from the ranges every attached group accepts.
    alloc: IovaAllocator,
    /// IOMMU page sizes (a bitmap) every attached group supports.
    page_sizes: u64,
    /// Whether any IOVA was handed out: from then on no group may join.
    reserved: bool,
}

/// A VFIO container with the type1v2 IOMMU set, holding its groups attached for as long as it
/// lives so that mappings stay valid. One container may hold several IOMMU groups (several
/// devices sharing one DMA address space: the paths of a multipath subsystem); every mapping
/// is then visible, at the same IOVA, to every device of every group.
#[derive(Debug)]
pub struct Type1Iommu {
    container: Container,
    groups: Mutex<Vec<Group>>,
    domain: Mutex<Domain>,
    /// Bytes currently mapped (pinned and charged to RLIMIT_MEMLOCK).
    locked: Mutex<u64>,
}

/// The IOVA ranges inside both `a` and `b` (each sorted or not, inclusive ends).
pub fn intersect_ranges(a: &[IovaRange], b: &[IovaRange]) -> Vec<IovaRange> {
    let mut out: Vec<IovaRange> = a
        .iter()
        .flat_map(|x| {
            b.iter().filter_map(move |y| {
                let start = x.start.max(y.start);
                let end = x.end.min(y.end);
                (start <= end).then_some(IovaRange { start, end })
            })
        })
        .collect();
    out.sort_by_key(|r| r.start);
    out
}

/// VFIO_IOMMU_GET_INFO on `container`: its usable IOVA ranges and page sizes (0: not reported).
fn read_info(container: &Container) -> Result<(Vec<IovaRange>, u64), HalError> {
    let head = vfio_iommu_type1_info::default();
    let fd = container.fd();
    // SAFETY: `query_with_caps` hands the ioctl a buffer of `argsz` bytes starting with a
    // vfio_iommu_type1_info; the kernel writes at most `argsz` bytes.
    let info = query_with_caps(head, |p| unsafe { ioctls::vfio_iommu_get_info(fd, p) })
        .map_err(|e| ioctl_error("IOMMU_GET_INFO", e))?;
    let flags =
        super::caps::u32_at(&info, std::mem::offset_of!(vfio_iommu_type1_info, flags)).unwrap_or(0);
    let page_sizes = if flags & VFIO_IOMMU_INFO_PGSIZES != 0 {
        u64_at(
            &info,
            std::mem::offset_of!(vfio_iommu_type1_info, iova_pgsizes),
        )
        .unwrap_or(0)
    } else {
        0
    };
    Ok((usable_ranges(&info)?, page_sizes))
}

impl Type1Iommu {
    /// Attaches every group of `groups` (distinct, viable) to `container` and sets the type1v2
    /// IOMMU: the first group sets the container up (`VFIO_GROUP_SET_CONTAINER`, then
    /// `VFIO_SET_IOMMU`), the others only join it (the kernel gives each its own IOMMU domain
    /// and keeps every mapping in all of them). The usable IOVA ranges are read again after each
    /// attach and only those every group accepts are used. All groups join before anything is
    /// mapped; [`Type1Iommu::attach_group`] refuses later ones.
    pub fn attach(container: Container, groups: Vec<Group>) -> Result<Self, HalError> {
        let Some(first) = groups.first() else {
            return Err(HalError::NoDevices);
        };
        first.set_container(&container)?;
        container.set_iommu_type1v2()?;
        let (mut ranges, mut page_sizes) = read_info(&container)?;
        log::debug!(
            "type1 IOMMU, group {}: ranges {ranges:x?}, page sizes {page_sizes:#x}",
            first.number()
        );
        for g in &groups[1..] {
            g.set_container(&container)?;
            let (more, sizes) = read_info(&container)?;
            ranges = intersect_ranges(&ranges, &more);
            page_sizes = sizes;
            log::debug!(
                "type1 IOMMU, group {} joined: ranges {ranges:x?}, page sizes {page_sizes:#x}",
                g.number()
            );
        }
        if ranges.is_empty() {
            return Err(HalError::NoCommonIovaRange {
                groups: groups.iter().map(Group::number).collect(),
            });
        }
        Self::build(container, groups, ranges, page_sizes)
    }

    fn build(
        container: Container,
        groups: Vec<Group>,
        ranges: Vec<IovaRange>,
        page_sizes: u64,
    ) -> Result<Self, HalError> {
        Ok(Type1Iommu {
            container,
            groups: Mutex::new(groups),
            domain: Mutex::new(Domain {
                alloc: IovaAllocator::new(ranges),
                page_sizes: if page_sizes == 0 { 4096 } else { page_sizes },
                reserved: false,
            }),
            locked: Mutex::new(0),
        })
    }

    /// Attaches one more group, if nothing was reserved or mapped yet; otherwise fails with
    /// [`HalError::ContainerInUse`] (a new group can shrink the usable ranges under addresses
    /// already handed out). Joining a group already in the container does nothing.
    pub fn attach_group(&self, group: Group) -> Result<(), HalError> {
        let mut groups = lock(&self.groups);
        if groups.iter().any(|g| g.number() == group.number()) {
            return Ok(());
        }
        let mut domain = lock(&self.domain);
        if domain.reserved || self.mapped_bytes() > 0 {
            return Err(HalError::ContainerInUse {
                group: group.number(),
            });
        }
        group.set_container(&self.container)?;
        let (more, sizes) = read_info(&self.container)?;
        let ranges = intersect_ranges(domain.alloc.ranges(), &more);
        groups.push(group);
        if ranges.is_empty() {
            // The group is in (the kernel took it): nothing may be handed out any more.
            domain.alloc = IovaAllocator::new(Vec::new());
            return Err(HalError::NoCommonIovaRange {
                groups: groups.iter().map(Group::number).collect(),
            });
        }
        domain.alloc = IovaAllocator::new(ranges);
        if sizes != 0 {
            domain.page_sizes = sizes;
        }
        Ok(())
    }

    /// The numbers of the groups attached.
    pub fn group_numbers(&self) -> Vec<u32> {
        lock(&self.groups).iter().map(Group::number).collect()
    }

    /// Opens device `addr` of attached group `group`.
    pub fn device_file(&self, group: u32, addr: &PciAddress) -> Result<File, HalError> {
        let groups = lock(&self.groups);
        let g =
            groups
                .iter()
                .find(|g| g.number() == group)
                .ok_or_else(|| HalError::Unsupported {
                    what: format!("IOMMU group {group} of {addr} is not in this container"),
                })?;
        g.device_file(addr)
    }

    /// The IOMMU page sizes (a bitmap; the lowest set bit is the smallest page).
    pub fn page_sizes(&self) -> u64 {
        lock(&self.domain).page_sizes
    }

    /// Bytes currently mapped.
    pub fn mapped_bytes(&self) -> u64 {
        *lock(&self.locked)
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
    fn reserve_iova(&self, len: u64, align: u64) -> Result<u64, HalError> {
        let mut domain = lock(&self.domain);
        domain.reserved = true;
        let min_page = 1u64 << domain.page_sizes.trailing_zeros().min(63);
        domain.alloc.reserve(len, align.max(min_page))
    }

    unsafe fn map(&self, vaddr: NonNull<u8>, len: u64, iova: u64) -> Result<(), HalError> {
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
            HalError::MapFailed {
                iova,
                len,
                source: e.into(),
                hint: map_hint(e),
            }
        })?;
        *locked = locked.saturating_add(len);
        Ok(())
    }

    fn unmap(&self, iova: u64, len: u64) -> Result<(), HalError> {
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
        done.map_err(|e| HalError::UnmapFailed {
            iova,
            len,
            source: e.into(),
        })?;
        *locked = locked.saturating_sub(unmap.size);
        if unmap.size != len {
            return Err(HalError::UnmapFailed {
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
        lock(&self.domain).alloc.ranges().to_vec()
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

    fn r(start: u64, end: u64) -> IovaRange {
        IovaRange { start, end }
    }

    #[test]
    fn a_second_group_shrinks_the_usable_ranges_to_the_intersection() {
        // The first group: the defaults (two ranges around the MSI window).
        let first = default_iova_ranges();
        // The second reports a reserved hole at 2..3 GiB and a narrower top (36 bits).
        let second = vec![r(0, (2 << 30) - 1), r(3 << 30, (1 << 36) - 1)];
        let both = intersect_ranges(&first, &second);
        assert_eq!(
            both,
            vec![
                r(0, (2 << 30) - 1),
                r(3 << 30, MSI_WINDOW.start - 1),
                r(MSI_WINDOW.end + 1, (1 << 36) - 1),
            ]
        );
        // The allocator drawing from the intersection never hands out an address that one
        // of the groups refuses.
        let alloc = IovaAllocator::new(both.clone());
        for _ in 0..64 {
            let Ok(iova) = alloc.reserve(1 << 30, 2 << 20) else {
                break;
            };
            let last = iova + (1 << 30) - 1;
            for set in [&first, &second] {
                assert!(
                    set.iter().any(|x| x.start <= iova && last <= x.end),
                    "{iova:#x}..{last:#x} outside {set:x?}"
                );
            }
        }
        // Symmetric, and disjoint sets have nothing in common.
        assert_eq!(intersect_ranges(&second, &first), both);
        assert!(intersect_ranges(&[r(0, 10)], &[r(11, 20)]).is_empty());
    }

    #[test]
    fn enomem_hint_mentions_memlock() {
        assert!(map_hint(nix::Error::ENOMEM).contains("ulimit -l"));
        assert_eq!(map_hint(nix::Error::EIO), "");
    }
}
