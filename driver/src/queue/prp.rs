//! PRP (Physical Region Page) building.
//!
//! A transfer starts at any dword-aligned device address. PRP1 points at the first byte; if the
//! transfer ends within the next page, PRP2 points at that page; otherwise PRP2 points at a PRP
//! list page holding one entry per remaining page.
//!
//! vfnvme uses one list page per command (512 entries) and no chained lists: the per-command
//! transfer size is capped at [`MAX_TRANSFER`] (2 MiB), which with any start offset needs at
//! most 512 list entries. Larger I/O is split into several commands by the queue pair.

pub use crate::error::PrpError;

/// The memory page size the driver programs (CC.MPS = 0).
pub const PAGE_SIZE: usize = 4096;
/// Entries in one PRP list page.
pub const LIST_ENTRIES: usize = PAGE_SIZE / 8;
/// The largest transfer one command carries, so that one PRP list page always suffices.
pub const MAX_TRANSFER: usize = 2 << 20;

/// Builds the data pointer for `len` bytes at device address `iova`. List entries, if needed,
/// are written to `list` (the list page's bytes), which the device sees at `list_iova`.
/// Returns (PRP1, PRP2).
#[inline(always)]
pub fn build(
    iova: u64,
    len: usize,
    list: &mut [u8],
    list_iova: u64,
) -> Result<(u64, u64), PrpError> {
    if iova & 3 != 0 {
        return Err(PrpError::Misaligned { iova });
    }
    if len == 0 {
        return Err(PrpError::Empty);
    }
    if len > MAX_TRANSFER {
        return Err(PrpError::TooLarge {
            len,
            max: MAX_TRANSFER,
        });
    }
    let page = PAGE_SIZE as u64;
    let first_len = (page - (iova & (page - 1))) as usize;
    if len <= first_len {
        return Ok((iova, 0));
    }
    let next = (iova & !(page - 1)) + page;
    let rest_pages = (len - first_len).div_ceil(PAGE_SIZE);
    if rest_pages == 1 {
        return Ok((iova, next));
    }
    let have = list.len() / 8;
    if rest_pages > have {
        return Err(PrpError::ListTooSmall {
            have,
            need: rest_pages,
        });
    }
    for (i, slot) in list.chunks_exact_mut(8).take(rest_pages).enumerate() {
        slot.copy_from_slice(&(next + (i as u64) * page).to_le_bytes());
    }
    Ok((iova, list_iova))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST_IOVA: u64 = 0xdead_0000;

    /// Walks PRP1/PRP2/list like a controller would, returning the (address, length) segments.
    fn walk(prp1: u64, prp2: u64, list: &[u8], len: usize) -> Vec<(u64, usize)> {
        let page = PAGE_SIZE as u64;
        let mut segs = vec![];
        let first = ((page - (prp1 % page)) as usize).min(len);
        segs.push((prp1, first));
        let mut left = len - first;
        if left == 0 {
            assert_eq!(prp2, 0, "PRP2 must be unused");
            return segs;
        }
        if left <= PAGE_SIZE {
            assert_eq!(prp2 % page, 0, "PRP2 must be page aligned");
            segs.push((prp2, left));
            return segs;
        }
        assert_eq!(prp2, LIST_IOVA);
        let mut i = 0;
        while left > 0 {
            let e = u64::from_le_bytes(list[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(e % page, 0, "list entries must be page aligned");
            let n = left.min(PAGE_SIZE);
            segs.push((e, n));
            left -= n;
            i += 1;
        }
        segs
    }

    #[test]
    fn every_size_and_alignment_maps_exactly_the_buffer() {
        let base: u64 = 0x1_0000_0000;
        let mut list = vec![0u8; PAGE_SIZE];
        let mut sizes: Vec<usize> = (1..=64).map(|i| i * 4).collect();
        sizes.extend([4092, 4096, 4100, 8188, 8192, 8196, 12288, 65536, 65540]);
        sizes.extend([
            (1 << 20) - 4,
            1 << 20,
            MAX_TRANSFER - 4096,
            MAX_TRANSFER - 4,
            MAX_TRANSFER,
        ]);
        sizes.extend(
            (1..=600)
                .map(|p| p * 4096 - 512)
                .filter(|&s| s <= MAX_TRANSFER),
        );
        // Miri interprets every step: it checks a spread of the same cases.
        let (size_step, offsets) = if cfg!(miri) { (23, 6) } else { (1, usize::MAX) };
        let sizes: Vec<usize> = sizes.into_iter().step_by(size_step).collect();
        for off in (0..PAGE_SIZE as u64)
            .step_by(4)
            .filter(|o| *o < 64 || o % 512 == 0 || *o > PAGE_SIZE as u64 - 64 || o % 1020 == 0)
            .step_by(if cfg!(miri) { 17 } else { 1 })
            .take(offsets)
        {
            for &len in &sizes {
                list.fill(0xff);
                let iova = base + off;
                let (p1, p2) = build(iova, len, &mut list, LIST_IOVA).unwrap();
                assert_eq!(p1, iova);
                let segs = walk(p1, p2, &list, len);
                // Segments must be contiguous and cover exactly [iova, iova+len).
                let mut at = iova;
                for (a, n) in &segs {
                    assert_eq!(*a, at, "off {off} len {len}");
                    at += *n as u64;
                }
                assert_eq!(at, iova + len as u64, "off {off} len {len}");
                assert!(segs.len() - 1 <= LIST_ENTRIES + 1);
            }
        }
    }

    #[test]
    fn max_transfer_fits_one_list_at_any_offset() {
        let mut list = vec![0u8; PAGE_SIZE];
        // Miri interprets every step: it checks a spread of offsets.
        for off in (0..4096u64).step_by(if cfg!(miri) { 316 } else { 4 }) {
            assert!(build(0x10_0000 + off, MAX_TRANSFER, &mut list, LIST_IOVA).is_ok());
        }
    }

    #[test]
    fn errors() {
        let mut list = vec![0u8; PAGE_SIZE];
        assert_eq!(
            build(2, 10, &mut list, 0),
            Err(PrpError::Misaligned { iova: 2 })
        );
        assert_eq!(build(0, 0, &mut list, 0), Err(PrpError::Empty));
        assert!(matches!(
            build(0, MAX_TRANSFER + 1, &mut list, 0),
            Err(PrpError::TooLarge { .. })
        ));
        let mut small = vec![0u8; 16];
        assert_eq!(
            build(0, 4 * PAGE_SIZE, &mut small, 0),
            Err(PrpError::ListTooSmall { have: 2, need: 3 })
        );
        // Two pages need no list.
        assert_eq!(
            build(0x2000, 8192, &mut small, 0x9000),
            Ok((0x2000, 0x3000))
        );
    }
}
