//! Walking a command's PRP1/PRP2 (and PRP lists) into page-bounded data segments.

use super::dma_engine;
use super::iommu::ModelIommu;
use super::sqe::Status;

/// PRP entries read from a list in one DMA access.
const LIST_CHUNK: usize = 512;

/// Calls `seg(iova, len, offset_in_transfer)` for each segment of a `len`-byte transfer
/// described by `prp1`/`prp2` with memory page size `page`, in transfer order.
///
/// Errors: Invalid PRP Offset for misaligned entries, Data Transfer Error when a PRP list can't
/// be read; errors from `seg` are passed through (the transfer may then be partial, as on
/// hardware).
pub(crate) fn walk(
    iommu: &ModelIommu,
    prp1: u64,
    prp2: u64,
    len: u64,
    page: u64,
    seg: impl FnMut(u64, usize, u64) -> Result<(), Status>,
) -> Result<(), Status> {
    walk_with(
        |iova, out| dma_engine::read(iommu, iova, out).map_err(|_| Status::DATA_TRANSFER_ERROR),
        prp1,
        prp2,
        len,
        page,
        seg,
    )
}

/// [`walk`] with PRP list entries read by `read_list(iova, out)` (a device access for a
/// transfer; a side-effect-free peek for [`Core::held_data`](super::core::Core::held_data)).
pub(crate) fn walk_with(
    mut read_list: impl FnMut(u64, &mut [u8]) -> Result<(), Status>,
    prp1: u64,
    prp2: u64,
    len: u64,
    page: u64,
    mut seg: impl FnMut(u64, usize, u64) -> Result<(), Status>,
) -> Result<(), Status> {
    if len == 0 {
        return Ok(());
    }
    if prp1 & 3 != 0 {
        return Err(Status::INVALID_PRP_OFFSET);
    }
    let first = len.min(page - prp1 % page);
    seg(prp1, first as usize, 0)?;
    let mut done = first;
    let mut remaining = len - first;
    if remaining == 0 {
        return Ok(());
    }
    if remaining <= page {
        if !prp2.is_multiple_of(page) {
            return Err(Status::INVALID_PRP_OFFSET);
        }
        return seg(prp2, remaining as usize, done);
    }
    let mut list = prp2;
    let mut buf = [0u8; LIST_CHUNK * 8];
    // Every list page holds at least one data entry unless it is a bare chain pointer; bound the
    // number of list pages so that a list that points at itself can't loop forever.
    let mut pages_left = remaining.div_ceil(page) + 1;
    loop {
        if list & 7 != 0 {
            return Err(Status::INVALID_PRP_OFFSET);
        }
        if pages_left == 0 {
            return Err(Status::INVALID_FIELD);
        }
        pages_left -= 1;
        let in_page = (page - list % page) / 8;
        let needed = remaining.div_ceil(page);
        let chained = needed > in_page;
        let data_entries = if chained { in_page - 1 } else { needed };
        let mut i = 0u64;
        while i < data_entries {
            let k = (data_entries - i).min(LIST_CHUNK as u64) as usize;
            let bytes = &mut buf[..k * 8];
            read_list(list.wrapping_add(i * 8), bytes)?;
            for e in bytes.chunks_exact(8) {
                let mut a = [0u8; 8];
                a.copy_from_slice(e);
                let entry = u64::from_le_bytes(a);
                if entry % page != 0 {
                    return Err(Status::INVALID_PRP_OFFSET);
                }
                let n = remaining.min(page);
                seg(entry, n as usize, done)?;
                done += n;
                remaining -= n;
            }
            i += k as u64;
        }
        if !chained {
            return Ok(());
        }
        let mut next = [0u8; 8];
        read_list(list.wrapping_add((in_page - 1) * 8), &mut next)?;
        list = u64::from_le_bytes(next);
    }
}

/// Copies `data` to host memory described by `prp1`/`prp2` (a controller-to-host transfer).
pub(crate) fn write_out(
    iommu: &ModelIommu,
    prp1: u64,
    prp2: u64,
    page: u64,
    data: &[u8],
) -> Result<(), Status> {
    walk(
        iommu,
        prp1,
        prp2,
        data.len() as u64,
        page,
        |iova, n, off| {
            let off = off as usize;
            let src = data.get(off..off + n).ok_or(Status::INVALID_FIELD)?;
            dma_engine::write(iommu, iova, src).map_err(|_| Status::DATA_TRANSFER_ERROR)
        },
    )
}

/// Fills `out` from host memory described by `prp1`/`prp2` (a host-to-controller transfer).
pub(crate) fn read_in(
    iommu: &ModelIommu,
    prp1: u64,
    prp2: u64,
    page: u64,
    out: &mut [u8],
) -> Result<(), Status> {
    let len = out.len() as u64;
    walk(iommu, prp1, prp2, len, page, |iova, n, off| {
        let off = off as usize;
        let dst = out.get_mut(off..off + n).ok_or(Status::INVALID_FIELD)?;
        dma_engine::read(iommu, iova, dst).map_err(|_| Status::DATA_TRANSFER_ERROR)
    })
}
