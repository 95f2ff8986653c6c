//! Identify (06h) data structures, laid out by the base specification's byte offsets.

use super::core::Core;
use super::namespaces::ModelNamespace;
use super::sqe::{Outcome, Sqe, Status};

const PAGE: usize = 4096;
/// IEEE/PCI vendor ID of the model (Red Hat's, as QEMU uses).
const VID: u16 = 0x1b36;

fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
/// ASCII, space padded, truncated to the field.
fn put_str(b: &mut [u8], off: usize, len: usize, s: &str) {
    let field = &mut b[off..off + len];
    field.fill(b' ');
    for (d, c) in field
        .iter_mut()
        .zip(s.bytes().filter(|c| c.is_ascii() && !c.is_ascii_control()))
    {
        *d = c;
    }
}

/// Identify Controller (CNS 01h).
pub(crate) fn controller(core: &Core, firmware: Option<[u8; 8]>) -> Vec<u8> {
    let cfg = &core.cfg;
    let mut b = vec![0u8; PAGE];
    put16(&mut b, 0, VID); // VID
    put16(&mut b, 2, VID); // SSVID
    put_str(&mut b, 4, 20, &cfg.serial);
    put_str(&mut b, 24, 40, &cfg.model);
    match firmware {
        Some(rev) => b[64..72].copy_from_slice(&rev),
        None => put_str(&mut b, 64, 8, &cfg.firmware),
    }
    b[72] = 6; // RAB
               // CMIC: multi-controller (bit 1) and ANA reporting (bit 3) in a subsystem.
    b[76] = match core.subsys.as_deref() {
        Some(l) if !l.groups.is_empty() => 1 << 1 | 1 << 3,
        Some(_) => 1 << 1,
        None => 0,
    };
    b[77] = cfg.mdts;
    put16(&mut b, 78, cfg.cntlid);
    let ver = cfg.version;
    put32(&mut b, 80, if ver >= 0x0001_0200 { ver } else { 0 }); // VER (from 1.2)
    let notices = ver >= 0x0001_0200;
    // OAES: Namespace Attribute Notices; ANA Change Notices (bit 11) with ANA.
    let ana_notices = u32::from(core.ana_reporting()) << 11;
    put32(&mut b, 92, u32::from(notices) << 8 | ana_notices);
    if let Some(l) = core.subsys.as_deref().filter(|l| !l.groups.is_empty()) {
        b[342] = l.anatt; // ANATT (seconds)
        b[343] = 0x1F | 1 << 6; // ANACAP: every state; ANAGRPID fixed while attached
        put32(&mut b, 344, l.max_group()); // ANAGRPMAX
        put32(&mut b, 348, l.max_group()); // NANAGRPID
    }
    b[111] = 1; // CNTRLTYPE: I/O controller
                // Format NVM, Firmware Download/Commit, Namespace Management; Doorbell Buffer Config
                // from NVMe 1.3.
    let dbbc = cfg.shadow_doorbells && ver >= 0x0001_0300;
    let oacs: u16 = 1 << 1 | 1 << 2 | 1 << 3 | if dbbc { 1 << 8 } else { 0 };
    put16(&mut b, 256, oacs);
    b[258] = 3; // ACL (0-based)
    b[259] = cfg.aerl; // AERL (0-based)
    b[260] = 0x01 | (super::admin_maint::SLOTS as u8) << 1 | 0x10; // FRMW: slot 1 read-only, activation without reset
    b[261] = 1 << 2; // LPA: extended data for Get Log Page
    b[262] = 0; // ELPE: one error log entry
    b[263] = 0; // NPSS: one power state
    put16(&mut b, 266, 343); // WCTEMP (K)
    put32(&mut b, 328, 0x7); // SANICAP: crypto erase, block erase, overwrite
    put16(&mut b, 268, 373); // CCTEMP (K)
    put32(&mut b, 536, u32::from(cfg.sgl)); // SGLS: 01b, SGLs without alignment rules
    b[512] = 0x66; // SQES
    b[513] = 0x44; // CQES
    put32(&mut b, 516, core.nn); // NN
    put16(&mut b, 520, cfg.oncs); // ONCS
    b[525] = u8::from(cfg.volatile_write_cache); // VWC
    let nqn = match core.subsys.as_deref() {
        Some(l) => l.nqn.clone(),
        None => format!("nqn.2024-01.io.vfnvme:model:{}", cfg.serial),
    };
    put_str(&mut b, 768, 256, &nqn);
    // SUBNQN is NUL padded, not space padded.
    for c in b[768..1024].iter_mut().rev().take_while(|c| **c == b' ') {
        *c = 0;
    }
    put16(&mut b, 2048, 2500); // PSD0 MP: 25 W
    b
}

/// Identify Namespace (CNS 00h) for an active namespace.
pub(crate) fn namespace(ns: &ModelNamespace) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    let blocks = ns.blocks();
    put64(&mut b, 0, blocks); // NSZE
    put64(&mut b, 8, blocks); // NCAP
    put64(&mut b, 16, blocks); // NUSE
    let format = u8::from(ns.lba_shift == 12);
    b[25] = 1; // NLBAF: two formats (0-based)
    b[26] = format; // FLBAS: format in use
    if ns.offered_ms != 0 {
        b[25] = 3; // NLBAF: four formats, 2 and 3 with metadata
        b[27] = 0b11; // MC: extended and separate metadata supported
        b[28] = 0x1F; // DPC: types 1-3, PI in the first or the last 8 bytes (as QEMU)
        put32(&mut b, 136, 9 << 16 | u32::from(ns.offered_ms)); // LBAF2: 512 + ms
        put32(&mut b, 140, 12 << 16 | u32::from(ns.offered_ms)); // LBAF3: 4096 + ms
    }
    if let Some(md) = ns.metadata {
        b[26] = (2 + format) | u8::from(md.extended) << 4; // FLBAS: index, extended LBA
        b[29] = md.pi; // DPS: the type in use, bit 3 for PI in the first 8 bytes
    }
    b[33] = 1 << 3 | 1; // DLFEAT: Write Zeroes may deallocate; deallocated reads zero
    if ns.anagrpid != 0 {
        b[30] = 1; // NMIC: may be attached to several controllers
        put32(&mut b, 92, ns.anagrpid); // ANAGRPID
    }
    b[104..120].copy_from_slice(&ns.nguid());
    b[120..128].copy_from_slice(&ns.eui64());
    put32(&mut b, 128, 9 << 16); // LBAF0: 512 bytes, no metadata
    put32(&mut b, 132, 12 << 16); // LBAF1: 4096 bytes
    b
}

/// Identify Namespace for the broadcast NSID: the LBA formats every namespace can use.
fn common_formats() -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    b[25] = 1;
    put32(&mut b, 128, 9 << 16);
    put32(&mut b, 132, 12 << 16);
    b
}

/// The Command Set Identifier of namespace `nsid` (0 = NVM unless configured).
fn csi_of(core: &Core, nsid: u32) -> u8 {
    core.cfg
        .namespace_csi
        .iter()
        .find(|(n, _)| *n == nsid)
        .map_or(0, |&(_, csi)| csi)
}

/// Namespace Identification Descriptor list (CNS 03h).
pub(crate) fn descriptors(ns: &ModelNamespace, csi: u8) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    let mut at = 0;
    let mut add = |b: &mut Vec<u8>, nidt: u8, id: &[u8]| {
        b[at] = nidt;
        b[at + 1] = id.len() as u8;
        b[at + 4..at + 4 + id.len()].copy_from_slice(id);
        at += 4 + id.len();
    };
    add(&mut b, 1, &ns.eui64());
    add(&mut b, 2, &ns.nguid());
    add(&mut b, 3, &ns.uuid());
    add(&mut b, 4, &[csi]); // CSI
    b
}

/// Executes Identify.
pub(crate) fn execute(core: &Core, sqe: &Sqe, page: u64, firmware: Option<[u8; 8]>) -> Outcome {
    let cns = sqe.cdw(10) & 0xFF;
    core.counters.identify(cns as u8);
    let nsid = sqe.nsid();
    if core.cfg.legacy_identify && matches!(cns, 0x02 | 0x03) {
        return Status::INVALID_FIELD.into();
    }
    // What older versions lack: CNS 02h came with 1.1, CNS 03h with 1.3.
    let ver = core.cfg.version;
    if (cns == 0x02 && ver < 0x0001_0100) || (cns == 0x03 && ver < 0x0001_0300) {
        return Status::INVALID_FIELD.into();
    }
    let data = match cns {
        0x00 => {
            if nsid == 0 || (nsid > core.nn && nsid != u32::MAX) {
                return Status::INVALID_NAMESPACE.into();
            }
            match core.active_ns(nsid) {
                Some(ns) => namespace(&ns),
                None if nsid == u32::MAX => common_formats(),
                None => vec![0u8; PAGE],
            }
        }
        0x11 => {
            if nsid == 0 || nsid > core.nn {
                return Status::INVALID_NAMESPACE.into();
            }
            match core.ns_read().get(&nsid) {
                Some(ns) => namespace(ns),
                None => vec![0u8; PAGE],
            }
        }
        0x01 => controller(core, firmware),
        0x02 | 0x10 => {
            if nsid >= 0xFFFF_FFFE {
                return Status::INVALID_NAMESPACE.into();
            }
            let mut b = vec![0u8; PAGE];
            let table = core.ns_read();
            let active = table
                .range(nsid.saturating_add(1)..)
                .filter(|(_, ns)| cns == 0x10 || ns.is_attached())
                .map(|(&id, _)| id);
            for (slot, id) in b.chunks_exact_mut(4).zip(active) {
                slot.copy_from_slice(&id.to_le_bytes());
            }
            b
        }
        0x03 => match core.active_ns(nsid) {
            Some(ns) => descriptors(&ns, csi_of(core, nsid)),
            None => return Status::INVALID_NAMESPACE.into(),
        },
        0x05 => {
            let csi = (sqe.cdw(11) >> 24) as u8;
            match core.active_ns(nsid) {
                Some(_) if csi == csi_of(core, nsid) => vec![0u8; PAGE],
                Some(_) => return Status::INVALID_FIELD.into(),
                None => return Status::INVALID_NAMESPACE.into(),
            }
        }
        // Controller lists: every controller of the subsystem (13h), or those `nsid` is
        // attached to (12h; the model knows only its own attachment, so a namespace of a
        // subsystem is refused there), with CNTLID at least CDW10's CNTID.
        0x12 | 0x13 => {
            let from = (sqe.cdw(10) >> 16) as u16;
            let ids: Vec<u16> = match (cns, core.subsys.as_deref()) {
                (0x13, Some(l)) => (1..=l.controllers).collect(),
                (0x13, None) => vec![core.cfg.cntlid],
                (_, Some(_)) => return Status::INVALID_FIELD.into(),
                (_, None) => match core.ns_read().get(&nsid) {
                    Some(ns) if ns.is_attached() => vec![core.cfg.cntlid],
                    Some(_) => vec![],
                    None => return Status::INVALID_NAMESPACE.into(),
                },
            };
            let ids: Vec<u16> = ids.into_iter().filter(|&c| c >= from).take(2047).collect();
            let mut b = vec![0u8; PAGE];
            b[0..2].copy_from_slice(&(ids.len() as u16).to_le_bytes());
            for (slot, id) in b[2..].chunks_exact_mut(2).zip(&ids) {
                slot.copy_from_slice(&id.to_le_bytes());
            }
            b
        }
        _ => return Status::INVALID_FIELD.into(),
    };
    match super::prp::write_out(&core.iommu, sqe.prp1(), sqe.prp2(), page, &data) {
        Ok(()) => Outcome::ok(0),
        Err(s) => s.into(),
    }
}
