//! Parsing VFIO capability chains out of the byte buffers that VFIO_IOMMU_GET_INFO and
//! VFIO_DEVICE_GET_REGION_INFO fill in. The kernel's data is checked, not trusted: every offset
//! is bounds-checked and a chain that loops is rejected.
//!
//! Layout (linux/vfio.h): each capability starts with `vfio_info_cap_header { u16 id; u16
//! version; u32 next; }`; `next` and the struct's `cap_offset` are byte offsets from the start of
//! the whole info buffer, 0 ending the chain.

use crate::error::HalError;
use crate::iommu::IovaRange;
use vfio_bindings::bindings::vfio::{
    vfio_info_cap_header, vfio_iommu_type1_info, vfio_region_info, VFIO_IOMMU_INFO_CAPS,
    VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, VFIO_REGION_INFO_CAP_SPARSE_MMAP,
    VFIO_REGION_INFO_FLAG_CAPS,
};

const HEADER: usize = std::mem::size_of::<vfio_info_cap_header>();
/// `nr_*` (u32) and `reserved` (u32) follow the header in both capabilities parsed here.
const COUNT_AT: usize = HEADER;
const ENTRIES_AT: usize = HEADER + 8;
/// One `{ u64; u64; }` entry (`vfio_iova_range` or `vfio_region_sparse_mmap_area`).
const ENTRY: usize = 16;

fn malformed(what: &str, detail: String) -> HalError {
    HalError::Unsupported {
        what: format!("reported a malformed {what} capability chain ({detail})"),
    }
}

pub(crate) fn u16_at(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(
        buf.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}
pub(crate) fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        buf.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}
pub(crate) fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        buf.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Finds the capability `id` in the chain starting at `first`. `fixed` is the size of the info
/// struct, which no capability may overlap. Returns the capability's offset.
pub(crate) fn find_cap(
    buf: &[u8],
    fixed: usize,
    first: u32,
    id: u16,
    what: &str,
) -> Result<Option<usize>, HalError> {
    let mut at = first as usize;
    let mut seen = Vec::new();
    while at != 0 {
        if at < fixed
            || !at.is_multiple_of(4)
            || at.checked_add(HEADER).is_none_or(|e| e > buf.len())
        {
            return Err(malformed(
                what,
                format!(
                    "capability at offset {at} lies outside the {} byte buffer",
                    buf.len()
                ),
            ));
        }
        if seen.contains(&at) {
            return Err(malformed(
                what,
                format!("the chain loops back to offset {at}"),
            ));
        }
        seen.push(at);
        let cap_id = u16_at(buf, at).unwrap_or(0);
        if cap_id == id {
            return Ok(Some(at));
        }
        at = u32_at(buf, at + 4).unwrap_or(0) as usize;
    }
    Ok(None)
}

/// Reads `count` `{u64, u64}` entries of the capability at `at`, checking they fit.
fn entries(buf: &[u8], at: usize, what: &str) -> Result<Vec<(u64, u64)>, HalError> {
    let count = u32_at(buf, at + COUNT_AT)
        .ok_or_else(|| malformed(what, format!("capability at {at} is cut off")))?
        as usize;
    let end = count
        .checked_mul(ENTRY)
        .and_then(|n| n.checked_add(at + ENTRIES_AT));
    if end.is_none_or(|e| e > buf.len()) {
        return Err(malformed(
            what,
            format!(
                "{count} entries at offset {at} run past the {} byte buffer",
                buf.len()
            ),
        ));
    }
    Ok((0..count)
        .filter_map(|i| {
            let e = at + ENTRIES_AT + i * ENTRY;
            Some((u64_at(buf, e)?, u64_at(buf, e + 8)?))
        })
        .collect())
}

/// Parses the usable IOVA ranges out of a `vfio_iommu_type1_info` buffer (with its capability
/// chain). `Ok(None)` when the kernel did not report the IOVA range capability.
pub fn parse_iova_ranges(buf: &[u8]) -> Result<Option<Vec<IovaRange>>, HalError> {
    const WHAT: &str = "IOMMU info";
    let fixed = std::mem::size_of::<vfio_iommu_type1_info>();
    let flags = u32_at(buf, std::mem::offset_of!(vfio_iommu_type1_info, flags))
        .ok_or_else(|| malformed(WHAT, format!("{} byte buffer is too short", buf.len())))?;
    let first = u32_at(buf, std::mem::offset_of!(vfio_iommu_type1_info, cap_offset)).unwrap_or(0);
    if flags & VFIO_IOMMU_INFO_CAPS == 0 || first == 0 {
        return Ok(None);
    }
    let Some(at) = find_cap(
        buf,
        fixed,
        first,
        VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u16,
        WHAT,
    )?
    else {
        return Ok(None);
    };
    let ranges: Vec<IovaRange> = entries(buf, at, WHAT)?
        .into_iter()
        .map(|(start, end)| IovaRange { start, end })
        .collect();
    if let Some(bad) = ranges.iter().find(|r| r.end < r.start) {
        return Err(malformed(
            WHAT,
            format!(
                "IOVA range {:#x}..={:#x} ends before it starts",
                bad.start, bad.end
            ),
        ));
    }
    if ranges.is_empty() {
        return Err(malformed(WHAT, "no usable IOVA range".to_string()));
    }
    Ok(Some(ranges))
}

/// Parses the mmappable areas (offset, size within the region) out of a `vfio_region_info`
/// buffer. `Ok(None)` when the region has no sparse-mmap capability (all of it is mappable).
pub fn parse_sparse_mmap(buf: &[u8]) -> Result<Option<Vec<(u64, u64)>>, HalError> {
    const WHAT: &str = "region info";
    let fixed = std::mem::size_of::<vfio_region_info>();
    let flags = u32_at(buf, std::mem::offset_of!(vfio_region_info, flags))
        .ok_or_else(|| malformed(WHAT, format!("{} byte buffer is too short", buf.len())))?;
    let first = u32_at(buf, std::mem::offset_of!(vfio_region_info, cap_offset)).unwrap_or(0);
    if flags & VFIO_REGION_INFO_FLAG_CAPS == 0 || first == 0 {
        return Ok(None);
    }
    match find_cap(
        buf,
        fixed,
        first,
        VFIO_REGION_INFO_CAP_SPARSE_MMAP as u16,
        WHAT,
    )? {
        Some(at) => Ok(Some(entries(buf, at, WHAT)?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vfio_bindings::bindings::vfio::VFIO_IOMMU_INFO_PGSIZES;

    /// Builds a type1 info buffer: the 24-byte struct, then `caps` placed at their offsets.
    struct Buf(Vec<u8>);
    impl Buf {
        fn info(flags: u32, cap_offset: u32, len: usize) -> Self {
            let mut b = vec![0u8; len];
            b[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
            b[4..8].copy_from_slice(&flags.to_ne_bytes());
            b[8..16].copy_from_slice(&0x1000u64.to_ne_bytes());
            b[16..20].copy_from_slice(&cap_offset.to_ne_bytes());
            Buf(b)
        }
        fn put32(&mut self, at: usize, v: u32) {
            self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        }
        fn put64(&mut self, at: usize, v: u64) {
            self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        }
        fn header(&mut self, at: usize, id: u16, next: u32) {
            self.0[at..at + 2].copy_from_slice(&id.to_ne_bytes());
            self.0[at + 2..at + 4].copy_from_slice(&1u16.to_ne_bytes());
            self.put32(at + 4, next);
        }
        fn iova_cap(&mut self, at: usize, next: u32, ranges: &[(u64, u64)]) {
            self.header(at, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u16, next);
            self.put32(at + 8, ranges.len() as u32);
            for (i, (s, e)) in ranges.iter().enumerate() {
                self.put64(at + 16 + i * 16, *s);
                self.put64(at + 24 + i * 16, *e);
            }
        }
    }

    const FLAGS: u32 = VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS;

    #[test]
    fn good_chain_with_another_cap_first() {
        // A migration-like cap (id 2) at 24, then the IOVA cap at 56.
        let mut b = Buf::info(FLAGS, 24, 56 + 16 + 2 * 16);
        b.header(24, 2, 56);
        b.iova_cap(56, 0, &[(0, 0xfedf_ffff), (0xfef0_0000, (1 << 39) - 1)]);
        let r = parse_iova_ranges(&b.0).unwrap().unwrap();
        assert_eq!(
            r,
            vec![
                IovaRange {
                    start: 0,
                    end: 0xfedf_ffff
                },
                IovaRange {
                    start: 0xfef0_0000,
                    end: (1 << 39) - 1
                }
            ]
        );
    }

    #[test]
    fn no_caps_means_none() {
        let b = Buf::info(VFIO_IOMMU_INFO_PGSIZES, 0, 24);
        assert_eq!(parse_iova_ranges(&b.0).unwrap(), None);
        // A chain without the IOVA cap.
        let mut b = Buf::info(FLAGS, 24, 40);
        b.header(24, 3, 0);
        assert_eq!(parse_iova_ranges(&b.0).unwrap(), None);
    }

    #[test]
    fn truncated_chain_is_an_error() {
        // Claims two ranges but the buffer holds one.
        let mut b = Buf::info(FLAGS, 24, 24 + 16 + 16);
        b.iova_cap(24, 0, &[(0, 0xffff_ffff)]);
        b.put32(32, 2);
        let err = parse_iova_ranges(&b.0).unwrap_err();
        assert!(err.to_string().contains("run past"), "{err}");
        // The cap offset points past the end.
        let b = Buf::info(FLAGS, 4096, 24);
        let err = parse_iova_ranges(&b.0).unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");
        // The cap offset points into the fixed struct.
        let b = Buf::info(FLAGS, 8, 64);
        assert!(parse_iova_ranges(&b.0).is_err());
        // Too short for even the struct.
        assert!(parse_iova_ranges(&[0u8; 3]).is_err());
        // A huge count must not overflow.
        let mut b = Buf::info(FLAGS, 24, 64);
        b.iova_cap(24, 0, &[]);
        b.put32(32, u32::MAX);
        assert!(parse_iova_ranges(&b.0).is_err());
    }

    #[test]
    fn looping_chain_is_an_error() {
        let mut b = Buf::info(FLAGS, 24, 24 + 16);
        b.header(24, 3, 32);
        b.header(32, 2, 24);
        let err = parse_iova_ranges(&b.0).unwrap_err();
        assert!(matches!(err, HalError::Unsupported { .. }));
        assert!(err.to_string().contains("loops"), "{err}");
        // A cap pointing at itself.
        let mut b = Buf::info(FLAGS, 24, 32);
        b.header(24, 3, 24);
        assert!(parse_iova_ranges(&b.0).is_err());
    }

    #[test]
    fn inverted_or_empty_ranges_are_errors() {
        let mut b = Buf::info(FLAGS, 24, 24 + 16 + 16);
        b.iova_cap(24, 0, &[(0x2000, 0x1000)]);
        assert!(parse_iova_ranges(&b.0).is_err());
        let mut b = Buf::info(FLAGS, 24, 24 + 16);
        b.iova_cap(24, 0, &[]);
        assert!(parse_iova_ranges(&b.0).is_err());
    }

    #[test]
    fn sparse_mmap_areas() {
        // vfio_region_info is 32 bytes; flags at 4, cap_offset at 12.
        let mut b = vec![0u8; 32 + 16 + 2 * 16];
        b[4..8].copy_from_slice(&VFIO_REGION_INFO_FLAG_CAPS.to_ne_bytes());
        b[12..16].copy_from_slice(&32u32.to_ne_bytes());
        b[32..34].copy_from_slice(&(VFIO_REGION_INFO_CAP_SPARSE_MMAP as u16).to_ne_bytes());
        b[40..44].copy_from_slice(&2u32.to_ne_bytes());
        b[48..56].copy_from_slice(&0u64.to_ne_bytes());
        b[56..64].copy_from_slice(&0x2000u64.to_ne_bytes());
        b[64..72].copy_from_slice(&0x3000u64.to_ne_bytes());
        b[72..80].copy_from_slice(&0x1000u64.to_ne_bytes());
        assert_eq!(
            parse_sparse_mmap(&b).unwrap(),
            Some(vec![(0, 0x2000), (0x3000, 0x1000)])
        );
        b[4..8].copy_from_slice(&0u32.to_ne_bytes());
        assert_eq!(parse_sparse_mmap(&b).unwrap(), None);
    }
}
