//! The model's simulated DMA: every device access translates its IOVA through the model IOMMU
//! and copies to or from process memory only inside a live mapping. All of the model's `unsafe`
//! code is here.

use super::iommu::{lookup, ModelIommu};
use std::sync::atomic::{fence, Ordering};

/// A device access that hit no mapping (or crossed a mapping's end), or no live allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DmaFault;

/// The process address of `iova..iova+len`: inside one mapping and one live allocation.
fn target(
    iommu: &ModelIommu,
    maps: &std::collections::BTreeMap<u64, super::iommu::Mapping>,
    iova: u64,
    len: usize,
    what: &str,
) -> Result<usize, DmaFault> {
    let hit = lookup(maps, iova, len as u64).ok_or_else(|| iommu.fault(iova))?;
    if iommu.allowed(hit, iova, len as u64, what) {
        Ok(hit.addr)
    } else {
        Err(DmaFault)
    }
}

/// Reads `out.len()` bytes at `iova`.
pub(crate) fn read(iommu: &ModelIommu, iova: u64, out: &mut [u8]) -> Result<(), DmaFault> {
    let maps = iommu.read();
    let src = target(iommu, &maps, iova, out.len(), "read")?;
    // SAFETY: `src..src+len` lies inside a mapping whose memory the mapper keeps allocated until
    // it unmaps it, which can't happen while we hold the table's read lock. `out` is model-owned
    // memory, so the ranges don't overlap.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, out.as_mut_ptr(), out.len()) };
    Ok(())
}

/// Reads `out.len()` bytes at `iova` for the model's own bookkeeping (not a device access):
/// only the mapping is needed, no live allocation, and nothing is recorded as a violation.
pub(crate) fn peek(iommu: &ModelIommu, iova: u64, out: &mut [u8]) -> Result<(), DmaFault> {
    let maps = iommu.read();
    let src = lookup(&maps, iova, out.len() as u64).ok_or(DmaFault)?.addr;
    // SAFETY: as in `read`: `src..src+len` lies inside a mapping whose memory the mapper keeps
    // allocated until it unmaps it, which can't happen while we hold the table's read lock.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, out.as_mut_ptr(), out.len()) };
    Ok(())
}

/// Writes `data` at `iova`.
pub(crate) fn write(iommu: &ModelIommu, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
    let maps = iommu.read();
    let dst = target(iommu, &maps, iova, data.len(), "write")?;
    // SAFETY: as in `read`; the destination is device-writable memory that the driver handed to
    // the device and doesn't access while the command is outstanding.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, data.len()) };
    Ok(())
}

/// Runs `f` over the `len` device-visible bytes at `iova` (a host read from the device's view:
/// the device fills them).
pub(crate) fn with_mut<R>(
    iommu: &ModelIommu,
    iova: u64,
    len: usize,
    f: impl FnOnce(&mut [u8]) -> R,
) -> Result<R, DmaFault> {
    let maps = iommu.read();
    let dst = target(iommu, &maps, iova, len, "write")?;
    // SAFETY: the range lies inside a live mapping (held by the read lock). The driver gave this
    // buffer to the device for the command and doesn't touch it until the completion is posted,
    // so no other reference to these bytes exists during `f`.
    let slice = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
    Ok(f(slice))
}

/// Runs `f` over the `len` bytes at `iova` (data the device takes from the host).
pub(crate) fn with_ref<R>(
    iommu: &ModelIommu,
    iova: u64,
    len: usize,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R, DmaFault> {
    let maps = iommu.read();
    let src = target(iommu, &maps, iova, len, "read")?;
    // SAFETY: the range lies inside a live mapping (held by the read lock); the driver doesn't
    // write a buffer it handed to the device while the command is outstanding.
    let slice = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
    Ok(f(slice))
}

/// Writes one 16-byte completion queue entry: dwords 0..3 first, then dword 3 (with the phase
/// tag) after a release fence, so a poller that sees the new phase sees the whole entry.
pub(crate) fn write_cqe(iommu: &ModelIommu, iova: u64, dw: [u32; 4]) -> Result<(), DmaFault> {
    let maps = iommu.read();
    let dst = target(iommu, &maps, iova, 16, "write")?;
    if dst % 4 != 0 {
        return Err(DmaFault);
    }
    let p = dst as *mut u32;
    // SAFETY: the 16 bytes lie inside a live mapping (read lock held) and are 4-byte aligned
    // (checked above); the completion queue slot belongs to the device until the host consumes it.
    unsafe {
        std::ptr::write_volatile(p, dw[0].to_le());
        std::ptr::write_volatile(p.add(1), dw[1].to_le());
        std::ptr::write_volatile(p.add(2), dw[2].to_le());
        fence(Ordering::Release);
        std::ptr::write_volatile(p.add(3), dw[3].to_le());
    }
    Ok(())
}

/// Reads a little-endian u32 at `iova` (shadow doorbells), with acquire ordering after the read.
pub(crate) fn read_u32(iommu: &ModelIommu, iova: u64) -> Result<u32, DmaFault> {
    let maps = iommu.read();
    let src = target(iommu, &maps, iova, 4, "read")?;
    if src % 4 != 0 {
        return Err(DmaFault);
    }
    // SAFETY: 4 aligned bytes inside a live mapping (read lock held); volatile because the host
    // updates them concurrently.
    let v = unsafe { std::ptr::read_volatile(src as *const u32) };
    fence(Ordering::Acquire);
    Ok(u32::from_le(v))
}

/// Writes a little-endian u32 at `iova` (EventIdx values), after a release fence.
pub(crate) fn write_u32(iommu: &ModelIommu, iova: u64, value: u32) -> Result<(), DmaFault> {
    let maps = iommu.read();
    let dst = target(iommu, &maps, iova, 4, "write")?;
    if dst % 4 != 0 {
        return Err(DmaFault);
    }
    fence(Ordering::Release);
    // SAFETY: 4 aligned bytes inside a live mapping (read lock held).
    unsafe { std::ptr::write_volatile(dst as *mut u32, value.to_le()) };
    Ok(())
}
