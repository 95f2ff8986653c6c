//! A command's data pointer, whichever way it is described: PRPs (PSDT 00b, [`prp`]) or an
//! SGL (PSDT 01b, [`sgl`], when the model reports SGL support). Every access goes through the
//! model IOMMU, lists included.

use super::dma_engine;
use super::iommu::ModelIommu;
use super::prp;
use super::sgl;
use super::sqe::{Sqe, Status};

/// Calls `seg(iova, len, offset_in_transfer)` for each piece of the `len`-byte transfer of
/// `sqe`, in order, with PRP lists and SGL segments read by `read_list(iova, out)` (a device
/// access for a transfer; a side-effect-free peek for bookkeeping). An SGL is mapped whole
/// before the first piece moves, as QEMU does: a bad descriptor anywhere moves nothing.
pub(crate) fn walk_with(
    mut read_list: impl FnMut(u64, &mut [u8]) -> Result<(), Status>,
    sqe: &Sqe,
    len: u64,
    page: u64,
    mut seg: impl FnMut(u64, usize, u64) -> Result<(), Status>,
) -> Result<(), Status> {
    match sqe.psdt() {
        0 => prp::walk_with(read_list, sqe.prp1(), sqe.prp2(), len, page, seg),
        1 => {
            let mut pieces = Vec::new();
            sgl::map(&mut read_list, &sqe.dptr(), len, &mut pieces)?;
            let mut off = 0u64;
            for (iova, n) in pieces {
                seg(iova, n, off)?;
                off += n as u64;
            }
            Ok(())
        }
        _ => Err(Status::INVALID_FIELD),
    }
}

/// [`walk_with`] reading lists as device accesses.
pub(crate) fn walk(
    iommu: &ModelIommu,
    sqe: &Sqe,
    len: u64,
    page: u64,
    seg: impl FnMut(u64, usize, u64) -> Result<(), Status>,
) -> Result<(), Status> {
    walk_with(
        |iova, out| dma_engine::read(iommu, iova, out).map_err(|_| Status::DATA_TRANSFER_ERROR),
        sqe,
        len,
        page,
        seg,
    )
}

/// Copies `data` to the host memory of `sqe`'s data pointer (a controller-to-host transfer).
pub(crate) fn write_out(
    iommu: &ModelIommu,
    sqe: &Sqe,
    page: u64,
    data: &[u8],
) -> Result<(), Status> {
    walk(iommu, sqe, data.len() as u64, page, |iova, n, off| {
        let off = off as usize;
        let src = data.get(off..off + n).ok_or(Status::INVALID_FIELD)?;
        dma_engine::write(iommu, iova, src).map_err(|_| Status::DATA_TRANSFER_ERROR)
    })
}

/// Fills `out` from the host memory of `sqe`'s data pointer (a host-to-controller transfer).
pub(crate) fn read_in(
    iommu: &ModelIommu,
    sqe: &Sqe,
    page: u64,
    out: &mut [u8],
) -> Result<(), Status> {
    let len = out.len() as u64;
    walk(iommu, sqe, len, page, |iova, n, off| {
        let off = off as usize;
        let dst = out.get_mut(off..off + n).ok_or(Status::INVALID_FIELD)?;
        dma_engine::read(iommu, iova, dst).map_err(|_| Status::DATA_TRANSFER_ERROR)
    })
}
