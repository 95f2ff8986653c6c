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
use crate::error::SubmitErrorKind;
use vfnvme_hal::DmaSpan;

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

/// Whether PRPs can describe the first `bytes` bytes of `spans` (an iovec): the first span
/// starts dword aligned, every later one on a page boundary, and every span but the last one
/// used ends on a page boundary. If not, why not (the span and what is wrong with it).
pub(crate) fn describable(spans: &[DmaSpan], bytes: u64) -> Result<(), SubmitErrorKind> {
    let page = PAGE_SIZE as u64;
    let mut pieces = super::spans::pieces(spans, bytes).peekable();
    while let Some((index, iova, len)) = pieces.next() {
        let why = if index == 0 && iova & 3 != 0 {
            "starts at an address that is not 4-byte aligned"
        } else if index > 0 && !iova.is_multiple_of(page) {
            "starts inside a page (it follows another span)"
        } else if pieces.peek().is_some() && !(iova + len as u64).is_multiple_of(page) {
            "ends inside a page (another span follows it)"
        } else {
            continue;
        };
        return Err(SubmitErrorKind::NotPrpDescribable { index, iova, why });
    }
    Ok(())
}

/// Builds the PRPs of one command from its pieces in order, for a list that
/// [`describable`] accepted: PRP1 the first byte, then an entry per page.
pub(crate) struct ListBuilder<'l> {
    list: &'l mut [u8],
    prp1: u64,
    first_entry: u64,
    entries: usize,
    started: bool,
}

impl<'l> ListBuilder<'l> {
    /// A builder writing list entries into `list` (the tracker's list page).
    pub(crate) fn new(list: &'l mut [u8]) -> Self {
        ListBuilder {
            list,
            prp1: 0,
            first_entry: 0,
            entries: 0,
            started: false,
        }
    }

    /// Adds the next piece: `len` bytes at `iova`.
    pub(crate) fn push(&mut self, iova: u64, len: usize) -> Result<(), PrpError> {
        let page = PAGE_SIZE as u64;
        let (mut next, mut rest) = if self.started {
            (iova, len as u64)
        } else {
            self.started = true;
            self.prp1 = iova;
            let first = page - (iova & (page - 1));
            (
                (iova & !(page - 1)) + page,
                (len as u64).saturating_sub(first),
            )
        };
        while rest > 0 {
            let have = self.list.len() / 8;
            let Some(slot) = self.list.get_mut(self.entries * 8..self.entries * 8 + 8) else {
                return Err(PrpError::ListTooSmall {
                    have,
                    need: self.entries + 1,
                });
            };
            slot.copy_from_slice(&next.to_le_bytes());
            if self.entries == 0 {
                self.first_entry = next;
            }
            self.entries += 1;
            next += page;
            rest = rest.saturating_sub(page);
        }
        Ok(())
    }

    /// (PRP1, PRP2): PRP2 unused, the second page, or the list at `list_iova`.
    pub(crate) fn finish(&self, list_iova: u64) -> Result<(u64, u64), PrpError> {
        match self.entries {
            _ if !self.started => Err(PrpError::Empty),
            0 => Ok((self.prp1, 0)),
            1 => Ok((self.prp1, self.first_entry)),
            _ => Ok((self.prp1, list_iova)),
        }
    }
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

    /// Spans of a live buffer of `len` bytes at (offset, length) pairs.
    fn spans(
        buf: &vfnvme_hal::DmaBuffer,
        pool: &vfnvme_hal::DmaPool,
        at: &[(usize, usize)],
    ) -> Vec<DmaSpan> {
        at.iter()
            .map(|&(o, l)| {
                // SAFETY: `o` lies inside `buf` (the pool refuses the span otherwise).
                let p = unsafe { buf.as_ptr().add(o) };
                pool.span(p, l).unwrap()
            })
            .collect()
    }

    #[test]
    fn span_lists_prps_can_describe_and_those_they_cant() {
        let pool = crate::queue::ring::tests::test_pool();
        let buf = pool.alloc(64 << 10).unwrap();
        let ok = |at: &[(usize, usize)], bytes: u64| describable(&spans(&buf, &pool, at), bytes);
        assert!(ok(&[(4, 100)], 100).is_ok());
        assert!(ok(&[(0x200, 0xE00), (0x4000, 0x2000), (0x9000, 0x10)], 0x3010).is_ok());
        // Only the bytes the request moves count: a short tail may end anywhere.
        assert!(ok(&[(0, 0x1000), (0x3000, 0x800), (0x5001, 4)], 0x1400).is_ok());
        let why = |at: &[(usize, usize)], bytes| match ok(at, bytes) {
            Err(SubmitErrorKind::NotPrpDescribable { index, why, .. }) => (index, why),
            other => panic!("{other:?}"),
        };
        assert_eq!(why(&[(2, 8)], 8).0, 0);
        assert_eq!(
            why(&[(0, 0x800), (0x1000, 8)], 0x808),
            (0, "ends inside a page (another span follows it)")
        );
        assert_eq!(
            why(&[(0, 0x1000), (0x1200, 8)], 0x1008),
            (1, "starts inside a page (it follows another span)")
        );
    }

    #[test]
    fn list_builder_walks_like_one_buffer() {
        let mut list = vec![0u8; PAGE_SIZE];
        let mut b = ListBuilder::new(&mut list);
        b.push(0x1_0200, 0xE00).unwrap();
        assert_eq!(b.finish(LIST_IOVA), Ok((0x1_0200, 0)));
        b.push(0x5_0000, 0x1000).unwrap();
        assert_eq!(b.finish(LIST_IOVA), Ok((0x1_0200, 0x5_0000)));
        b.push(0x8_0000, 0x1800).unwrap();
        assert_eq!(b.finish(LIST_IOVA), Ok((0x1_0200, LIST_IOVA)));
        let entries: Vec<u64> = list
            .chunks_exact(8)
            .take(3)
            .map(|e| u64::from_le_bytes(e.try_into().unwrap()))
            .collect();
        assert_eq!(entries, [0x5_0000, 0x8_0000, 0x8_1000]);
        assert_eq!(
            ListBuilder::new(&mut [0u8; 8]).finish(0),
            Err(PrpError::Empty)
        );
        let mut small = [0u8; 8];
        let mut b = ListBuilder::new(&mut small);
        assert!(
            b.push(0, 3 * PAGE_SIZE).is_err(),
            "two entries in a one-entry list"
        );
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
