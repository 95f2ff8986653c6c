//! NVM I/O commands: Flush, Write, Read, Write Zeroes, Dataset Management.

use super::admin::max_transfer;
use super::core::Core;
use super::dma_engine;
use super::namespaces::ModelNamespace;
use super::prp;
use super::sqe::{Outcome, Sqe, Status};
use std::sync::atomic::Ordering;

/// NVM command set opcodes.
pub(crate) mod op {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DSM: u8 = 0x09;
}

/// Executes one I/O command (data moves now; the completion is posted at its due time).
pub(crate) fn execute(core: &Core, sqe: &Sqe, page: u64) -> Outcome {
    if sqe.psdt() != 0 || sqe.fuse() != 0 {
        return Status::INVALID_FIELD.into();
    }
    let opcode = sqe.opcode();
    if opcode == op::FLUSH && sqe.nsid() == u32::MAX {
        return Outcome::ok(0);
    }
    let oncs = core.cfg.oncs;
    let optional_missing = (opcode == op::WRITE_ZEROES && oncs & 1 << 3 == 0)
        || (opcode == op::DSM && oncs & 1 << 2 == 0);
    if optional_missing
        || !matches!(
            opcode,
            op::FLUSH | op::WRITE | op::READ | op::WRITE_ZEROES | op::DSM
        )
    {
        return Status::INVALID_OPCODE.into();
    }
    let result = core.with_active_ns(sqe.nsid(), |ns| {
        if let Some(status) = super::ana::io_status(ns.ana.load(Ordering::Acquire)) {
            return Err(status);
        }
        match opcode {
            op::FLUSH => Ok(()),
            op::WRITE | op::READ => read_write(core, ns, sqe, page, opcode == op::WRITE),
            op::WRITE_ZEROES => write_zeroes(ns, sqe),
            _ => dataset_management(core, ns, sqe, page),
        }
    });
    match result {
        None => Status::INVALID_NAMESPACE.into(),
        Some(Ok(())) => Outcome::ok(0),
        Some(Err(s)) => s.into(),
    }
}

/// Appends to `out` the host memory (IOVA, length) that I/O command `sqe` transfers when it
/// executes: its data (PRP1, PRP2 or the entries of its PRP lists), separate metadata at MPTR,
/// and the PRP list entries themselves. Nothing is transferred: PRP lists are peeked (no
/// device access, no violation recorded), and a list that can't be read ends the walk there.
/// Commands that move no data (Flush, Write Zeroes, a Null-backed namespace) add nothing.
pub(crate) fn data_ranges(core: &Core, sqe: &Sqe, page: u64, out: &mut Vec<(u64, u64)>) {
    let opcode = sqe.opcode();
    let len = match opcode {
        op::READ | op::WRITE => {
            let nlb = u64::from(sqe.cdw(12) & 0xFFFF) + 1;
            let table = core.ns_read();
            let Some(ns) = table.get(&sqe.nsid()).filter(|ns| ns.store.is_some()) else {
                return;
            };
            let block = 1u64 << ns.lba_shift;
            match ns.metadata {
                Some(m) if m.extended => nlb * (block + u64::from(m.ms)),
                Some(m) => {
                    out.push((sqe.mptr(), nlb * u64::from(m.ms)));
                    nlb * block
                }
                None => nlb * block,
            }
        }
        op::DSM => u64::from((sqe.cdw(10) & 0xFF) + 1) * 16,
        _ => return,
    };
    let mut lists = Vec::new();
    let mut data = Vec::new();
    // A list that can't be read, or a malformed one, ends the walk: the command would fail
    // there too.
    let _ = prp::walk_with(
        |iova, buf| {
            lists.push((iova, buf.len() as u64));
            dma_engine::peek(&core.iommu, iova, buf).map_err(|_| Status::DATA_TRANSFER_ERROR)
        },
        sqe.prp1(),
        sqe.prp2(),
        len,
        page,
        |iova, n, _| {
            data.push((iova, n as u64));
            Ok(())
        },
    );
    out.extend(lists);
    out.extend(data);
}

/// Checks `slba..slba+nlb` against the namespace size; returns the byte range start and length.
fn range(ns: &ModelNamespace, slba: u64, nlb: u64) -> Result<(u64, u64), Status> {
    match slba.checked_add(nlb) {
        Some(end) if end <= ns.blocks() => Ok((slba << ns.lba_shift, nlb << ns.lba_shift)),
        _ => Err(Status::LBA_OUT_OF_RANGE),
    }
}

/// Where separately stored metadata lives in a namespace's sparse store (far past any data).
const METADATA_BASE: u64 = 1 << 62;

fn read_write(
    core: &Core,
    ns: &ModelNamespace,
    sqe: &Sqe,
    page: u64,
    write: bool,
) -> Result<(), Status> {
    let nlb = u64::from(sqe.cdw(12) & 0xFFFF) + 1;
    let (mut start, mut len) = range(ns, sqe.slba(), nlb)?;
    // Extended LBAs: each block carries its metadata inline, so the data buffer holds
    // `nlb * (block + ms)` bytes (and MDTS counts them).
    let extended = ns.metadata.filter(|m| m.extended).map(|m| u64::from(m.ms));
    if let Some(ms) = extended {
        let elem = (1u64 << ns.lba_shift) + ms;
        start = sqe.slba() * elem;
        len = nlb * elem;
    }
    if max_transfer(core).is_some_and(|m| len > m) {
        return Err(Status::INVALID_FIELD);
    }
    // Null backing: no data moves at all (reads leave the host buffer as it was).
    let Some(store) = ns.store.as_ref() else {
        return Ok(());
    };
    let iommu = &core.iommu;
    let fault = |_| Status::DATA_TRANSFER_ERROR;
    prp::walk(iommu, sqe.prp1(), sqe.prp2(), len, page, |iova, n, off| {
        if write {
            dma_engine::with_ref(iommu, iova, n, |host| store.write(start + off, host))
                .map_err(fault)
        } else {
            dma_engine::with_mut(iommu, iova, n, |host| store.read(start + off, host))
                .map_err(fault)
        }
    })?;
    // Separate metadata: one contiguous buffer of `nlb * ms` bytes at MPTR.
    if let Some(md) = ns.metadata.filter(|m| !m.extended) {
        let ms = u64::from(md.ms);
        let at = METADATA_BASE + sqe.slba() * ms;
        let n = (nlb * ms) as usize;
        let mptr = sqe.mptr();
        if write {
            dma_engine::with_ref(iommu, mptr, n, |host| store.write(at, host)).map_err(fault)?;
        } else {
            dma_engine::with_mut(iommu, mptr, n, |host| store.read(at, host)).map_err(fault)?;
        }
    }
    Ok(())
}

fn write_zeroes(ns: &ModelNamespace, sqe: &Sqe) -> Result<(), Status> {
    let nlb = u64::from(sqe.cdw(12) & 0xFFFF) + 1;
    let (start, len) = range(ns, sqe.slba(), nlb)?;
    if let Some(store) = ns.store.as_ref() {
        store.zero(start, len);
    }
    Ok(())
}

fn dataset_management(
    core: &Core,
    ns: &ModelNamespace,
    sqe: &Sqe,
    page: u64,
) -> Result<(), Status> {
    let nr = ((sqe.cdw(10) & 0xFF) + 1) as usize;
    let deallocate = sqe.cdw(11) & (1 << 2) != 0;
    let mut ranges = [0u8; 256 * 16];
    let bytes = &mut ranges[..nr * 16];
    prp::read_in(&core.iommu, sqe.prp1(), sqe.prp2(), page, bytes)?;
    let mut checked = [(0u64, 0u64); 256];
    for (r, out) in bytes.chunks_exact(16).zip(checked.iter_mut()) {
        let nlb = u64::from(u32::from_le_bytes([r[4], r[5], r[6], r[7]]));
        let mut s = [0u8; 8];
        s.copy_from_slice(&r[8..16]);
        *out = range(ns, u64::from_le_bytes(s), nlb)?;
    }
    if deallocate {
        if let Some(store) = ns.store.as_ref() {
            for &(start, len) in &checked[..nr] {
                store.zero(start, len);
            }
        }
    }
    Ok(())
}
