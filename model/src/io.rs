//! NVM I/O commands: Flush, Write, Read, Write Zeroes, Dataset Management.

use super::admin::max_transfer;
use super::config::ModelMetadata;
use super::core::Core;
use super::dma_engine;
use super::dptr;
use super::io_pi::{self, PrInfo, Transfer};
use super::media::{Media, METADATA_BASE};
use super::namespaces::ModelNamespace;
use super::sqe::{Outcome, Sqe, Status};
use std::sync::atomic::Ordering;
use vfnvme_hal::pi::{Pi, PiFormat};

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
    // PSDT 01b: SGLs for the data, when the model reports them (Identify SGLS).
    let psdt_ok = sqe.psdt() == 0 || (sqe.psdt() == 1 && core.cfg.sgl);
    if !psdt_ok || sqe.fuse() != 0 {
        return Status::INVALID_FIELD.into();
    }
    if sqe.psdt() == 1 {
        core.counters.sgl_command();
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
/// executes: its data (PRP1, PRP2 or the entries of its PRP lists; or its SGL's Data Blocks),
/// separate metadata at MPTR, and the PRP lists or SGL segments themselves. Nothing is transferred: PRP lists are peeked (no
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
            // PRACT with 8-byte PI-only metadata moves no metadata.
            let pract = ns.metadata.and_then(|m| m.pi_type()).is_some() && PrInfo::of(sqe).pract;
            match ns.metadata {
                Some(m) if !io_pi::metadata_moves(m.ms, pract) => nlb * block,
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
    let _ = dptr::walk_with(
        |iova, buf| {
            lists.push((iova, buf.len() as u64));
            dma_engine::peek(&core.iommu, iova, buf).map_err(|_| Status::DATA_TRANSFER_ERROR)
        },
        sqe,
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

fn read_write(
    core: &Core,
    ns: &ModelNamespace,
    sqe: &Sqe,
    page: u64,
    write: bool,
) -> Result<(), Status> {
    let nlb = u64::from(sqe.cdw(12) & 0xFFFF) + 1;
    let (mut start, mut len) = range(ns, sqe.slba(), nlb)?;
    if let Some(md) = ns.metadata.filter(|m| m.pi_type().is_some()) {
        return protected_read_write(core, ns, sqe, page, write, md, nlb);
    }
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
    dptr::walk(iommu, sqe, len, page, |iova, n, off| {
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

/// A read or write of a namespace with protection information (see [`io_pi`]).
fn protected_read_write(
    core: &Core,
    ns: &ModelNamespace,
    sqe: &Sqe,
    page: u64,
    write: bool,
    md: ModelMetadata,
    nlb: u64,
) -> Result<(), Status> {
    let info = PrInfo::of(sqe);
    let Some(store) = ns.store.as_deref() else {
        // Null backing: nothing moves; the MDTS check still applies.
        let ms = if md.extended && io_pi::metadata_moves(md.ms, info.pract) {
            u64::from(md.ms)
        } else {
            0
        };
        let len = nlb * ((1u64 << ns.lba_shift) + ms);
        return match max_transfer(core) {
            Some(m) if len > m => Err(Status::INVALID_FIELD),
            _ => Ok(()),
        };
    };
    let transfer = Transfer {
        store,
        format: PiFormat {
            extended: false, // the bounce buffers are separate
            ..md.pi_format(1 << ns.lba_shift)
        },
        extended: md.extended,
        md_moves: io_pi::metadata_moves(md.ms, info.pract),
        slba: sqe.slba(),
        page,
    };
    if max_transfer(core).is_some_and(|m| transfer.host_len(nlb) > m) {
        return Err(Status::INVALID_FIELD);
    }
    if write {
        transfer.write(&core.iommu, sqe, nlb, &info)
    } else {
        transfer.read(&core.iommu, sqe, nlb, &info)
    }
}

/// Write Zeroes: data and metadata zeroed (deallocated: PI reads back all FFh). With PI, PRCHK
/// bits are refused (Invalid Protection Information) and PRACT writes PI for the zeroes (guard
/// 0, the command's application tag and reference tags), as QEMU does.
fn write_zeroes(ns: &ModelNamespace, sqe: &Sqe) -> Result<(), Status> {
    let nlb = u64::from(sqe.cdw(12) & 0xFFFF) + 1;
    let slba = sqe.slba();
    range(ns, slba, nlb)?;
    let pi = ns.metadata.and_then(|m| Some((m, m.pi_type()?)));
    let info = PrInfo::of(sqe);
    if pi.is_some() && info.checks.any() {
        return Err(Status::INVALID_PROTECTION_INFO);
    }
    let Some(store) = ns.store.as_ref() else {
        return Ok(());
    };
    let media = Media::of(ns);
    media.zero(store, slba, nlb);
    if let Some((md, ty)) = pi.filter(|_| info.pract) {
        let format = md.pi_format(1 << ns.lba_shift);
        let at = format.pi_offset();
        let mut buf = vec![0u8; nlb as usize * usize::from(md.ms)];
        for (i, m) in buf.chunks_exact_mut(md.ms.into()).enumerate() {
            let pi = Pi {
                guard: 0, // the CRC of zeroes
                app: info.expected.app_tag,
                reference: ty.ref_at(info.expected.ref_tag, i),
            };
            pi.write_to(&mut m[at..]);
        }
        media.save_md(store, slba, &buf);
        Media::mark_written(store, slba, nlb);
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
    dptr::read_in(&core.iommu, sqe, page, bytes)?;
    let mut checked = [(0u64, 0u64); 256];
    for (r, out) in bytes.chunks_exact(16).zip(checked.iter_mut()) {
        let nlb = u64::from(u32::from_le_bytes([r[4], r[5], r[6], r[7]]));
        let mut s = [0u8; 8];
        s.copy_from_slice(&r[8..16]);
        *out = range(ns, u64::from_le_bytes(s), nlb)?;
    }
    if deallocate {
        if let Some(store) = ns.store.as_ref() {
            let media = Media::of(ns);
            for &(start, len) in &checked[..nr] {
                // Data and metadata of the blocks (`range` gave their data bytes).
                media.zero(store, start >> ns.lba_shift, len >> ns.lba_shift);
            }
        }
    }
    Ok(())
}
