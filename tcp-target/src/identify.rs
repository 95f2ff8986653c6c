//! Identify data the target returns (CNS 00h namespace, 01h controller with the fabrics
//! fields, 02h active namespace list, 03h namespace descriptors, 06h NVM command set
//! controller), built into 4 KiB pages.

use crate::config::DISCOVERY_NQN;
use crate::ctrl::{CtrlState, MAX_AERS, VERSION};
use crate::export::Export;

/// Bytes of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;

fn put_str(page: &mut [u8], at: usize, len: usize, s: &str, pad: u8) {
    let field = &mut page[at..at + len];
    field.fill(pad);
    let n = s.len().min(len);
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

fn put16(page: &mut [u8], at: usize, v: u16) {
    page[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(page: &mut [u8], at: usize, v: u32) {
    page[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Identify Controller for `ctrl` (an I/O controller, or the discovery controller).
pub fn controller(export: &Export, ctrl: &CtrlState) -> Vec<u8> {
    let cfg = &export.config;
    let mut p = vec![0u8; IDENTIFY_LEN];
    put16(&mut p, 0, 0x1b36); // VID (the host doesn't care; QEMU's)
    put16(&mut p, 2, 0x1b36); // SSVID
    put_str(&mut p, 4, 20, &cfg.subsystem.serial, b' ');
    put_str(&mut p, 24, 40, &cfg.subsystem.model, b' ');
    put_str(&mut p, 64, 8, env!("CARGO_PKG_VERSION"), b' ');
    p[72] = 0; // RAB
               // CMIC: multi-port, multi-controller, ANA reporting (as nvmet).
    p[76] = if ctrl.discovery { 0 } else { 0x0B };
    p[77] = export.mdts;
    put16(&mut p, 78, ctrl.cntlid);
    put32(&mut p, 80, VERSION);
    // OAES: namespace attribute notices (bit 8), ANA change notices (bit 11).
    put32(
        &mut p,
        92,
        if ctrl.discovery {
            0
        } else {
            (1 << 8) | (1 << 11)
        },
    );
    p[111] = if ctrl.discovery { 2 } else { 1 }; // CNTRLTYPE
    p[258] = 3; // ACL
    p[259] = (MAX_AERS - 1) as u8; // AERL
    p[260] = 1 << 1 | 1; // FRMW: one slot, slot 1 read-only
    p[261] = 1 << 2; // LPA: extended data for Get Log Page (offsets, NUMDU)
    p[262] = 0; // ELPE: one error log entry
    put16(&mut p, 320, 1); // KAS: 100 ms granularity
    if !ctrl.discovery {
        p[343] = 10; // ANATT (s)
        p[344] = 1 | (1 << 6); // ANACAP: reports optimized; ANAGRPID doesn't change
                               // One ANA group per namespace (crate::ana).
        put32(&mut p, 348, export.namespaces.len() as u32); // ANAGRPMAX
        put32(&mut p, 352, export.namespaces.len() as u32); // NANAGRPID
    }
    p[512] = 0x66; // SQES
    p[513] = 0x44; // CQES
    put16(&mut p, 514, cfg.max_queue_size); // MAXCMD
    put32(&mut p, 516, export.nn()); // NN
    put16(&mut p, 520, export.oncs); // ONCS: what the backend takes
    p[525] = 1; // VWC present: the host sends Flush
                // SGLS: SGLs supported (bit 0), in-capsule offsets (bit 20), as nvmet-tcp.
    put32(&mut p, 536, 1 | (1 << 20));
    put32(&mut p, 540, export.nn()); // MNAN
    let subnqn = if ctrl.discovery {
        DISCOVERY_NQN
    } else {
        &cfg.subsystem.nqn
    };
    put_str(&mut p, 768, 256, subnqn, 0);
    // Fabrics: IOCCSZ (16-byte units, SQE included), IORCSZ, ICDOFF 0, FCATT 0, MSDBD 1.
    put32(&mut p, 1792, (cfg.in_capsule + 64) / 16);
    put32(&mut p, 1796, 1);
    put16(&mut p, 1800, 0);
    p[1802] = 0;
    p[1803] = 1;
    p
}

/// Identify Namespace for `nsid`, or None if it is not exported.
pub fn namespace(export: &Export, nsid: u32) -> Option<Vec<u8>> {
    let index = export.namespaces.iter().position(|n| n.nsid == nsid)?;
    let ns = &export.namespaces[index];
    let mut p = vec![0u8; IDENTIFY_LEN];
    p[0..8].copy_from_slice(&ns.blocks.to_le_bytes()); // NSZE
    p[8..16].copy_from_slice(&ns.blocks.to_le_bytes()); // NCAP
    p[16..24].copy_from_slice(&ns.blocks.to_le_bytes()); // NUSE
    p[25] = 0; // NLBAF: one format
    p[26] = 0; // FLBAS: format 0
    p[30] = 1; // NMIC: may be shared (multipath)
    put32(&mut p, 92, crate::ana::AnaView::group_of(index)); // ANAGRPID
    p[104..120].copy_from_slice(&ns.nguid);
    // LBAF0: MS 0, LBADS, RP 0.
    p[130] = ns.lba_shift;
    Some(p)
}

/// Active Namespace ID list: exported nsids above `after`, at most 1024.
pub fn active_list(export: &Export, after: u32) -> Vec<u8> {
    let mut p = vec![0u8; IDENTIFY_LEN];
    for (i, ns) in export
        .namespaces
        .iter()
        .filter(|n| n.nsid > after)
        .take(1024)
        .enumerate()
    {
        put32(&mut p, i * 4, ns.nsid);
    }
    p
}

/// Namespace Identification Descriptor list: NGUID (type 2) and CSI NVM (type 4).
pub fn descriptors(export: &Export, nsid: u32) -> Option<Vec<u8>> {
    let ns = export.namespace(nsid)?;
    let mut p = vec![0u8; IDENTIFY_LEN];
    p[0] = 2;
    p[1] = 16;
    p[4..20].copy_from_slice(&ns.nguid);
    p[20] = 4;
    p[21] = 1;
    p[24] = 0; // CSI: NVM
    Some(p)
}

/// I/O Command Set specific Identify Controller (NVM): no extra limits (all zero).
pub fn nvm_controller() -> Vec<u8> {
    vec![0u8; IDENTIFY_LEN]
}
