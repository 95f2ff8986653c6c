//! Format NVM, Sanitize, Firmware Image Download / Commit and their log pages (Firmware Slot
//! Information 03h, Sanitize Status 81h): the maintenance commands QEMU 7.2 lacks.
//!
//! Firmware: slot 1 holds the configured revision and is read-only; slot 2 is writable. An
//! image's revision is its first 8 bytes (ASCII, not all blank); any other image is invalid.
//! Format and Sanitize erase by replacing the namespace with an empty one of the same size in
//! bytes (Format NVM with the new LBA format: 0 = 512 B, 1 = 4 KiB; no protection information).

use super::config::{Backing, ModelNamespaceConfig};
use super::core::{Core, CtrlState};
use super::namespaces::ModelNamespace;
use super::prp;
use super::sqe::{Outcome, Sqe, Status};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Firmware Commit "Invalid Firmware Slot" (command specific 06h).
const INVALID_FIRMWARE_SLOT: Status = Status(0x06 | 1 << 8 | 1 << 14);
/// Firmware Commit "Invalid Firmware Image" (command specific 07h).
const INVALID_FIRMWARE_IMAGE: Status = Status(0x07 | 1 << 8 | 1 << 14);
/// The largest image the model keeps.
const MAX_IMAGE: usize = 1 << 20;
/// Firmware slots (slot 1 read-only).
pub(crate) const SLOTS: usize = 2;

/// Firmware slots, the image being downloaded and the last sanitize.
#[derive(Debug, Default)]
pub(crate) struct Maintenance {
    /// Revisions of slots 2..; slot 1 is the configured revision.
    slots: [Option<[u8; 8]>; SLOTS - 1],
    /// The running slot (0 = slot 1, the configured firmware).
    active: u8,
    /// The slot to run after the next reset (0 = unchanged).
    next: u8,
    image: Vec<u8>,
    /// Sanitizes completed.
    sanitized: u32,
}

impl Maintenance {
    /// The running firmware revision (`None` = the configured one).
    pub(crate) fn running(&self) -> Option<[u8; 8]> {
        let slot = usize::from(self.active);
        (slot >= 2).then(|| self.slots[slot - 2]).flatten()
    }
    /// CC.EN 1 → 0: a pending activation takes effect.
    pub(crate) fn on_reset(&mut self) {
        if self.next != 0 {
            self.active = std::mem::take(&mut self.next);
        }
    }
}

pub(super) fn firmware_download(core: &Core, c: &mut CtrlState, sqe: &Sqe) -> Outcome {
    let len = (sqe.cdw(10) as usize + 1) * 4;
    let at = sqe.cdw(11) as usize * 4;
    if at + len > MAX_IMAGE {
        return Status::INVALID_FIELD.into();
    }
    let mut data = vec![0u8; len];
    if let Err(s) = prp::read_in(&core.iommu, sqe.prp1(), sqe.prp2(), c.page, &mut data) {
        return s.into();
    }
    let m = &mut c.maintenance;
    if m.image.len() < at + len {
        m.image.resize(at + len, 0);
    }
    m.image[at..at + len].copy_from_slice(&data);
    Outcome::ok(0)
}

pub(super) fn firmware_commit(c: &mut CtrlState, sqe: &Sqe) -> Outcome {
    let cdw10 = sqe.cdw(10);
    let action = (cdw10 >> 3) & 7;
    let slot = match (cdw10 & 7) as u8 {
        0 => 2,
        s => s,
    };
    if usize::from(slot) > SLOTS {
        return INVALID_FIRMWARE_SLOT.into();
    }
    let m = &mut c.maintenance;
    if matches!(action, 0 | 1 | 3) {
        if slot == 1 {
            return INVALID_FIRMWARE_SLOT.into();
        }
        let rev: Option<[u8; 8]> = m.image.get(..8).and_then(|r| r.try_into().ok());
        let Some(rev) = rev.filter(|r| {
            r.iter().all(|b| b.is_ascii_graphic() || *b == b' ') && r.iter().any(|b| *b != b' ')
        }) else {
            return INVALID_FIRMWARE_IMAGE.into();
        };
        m.slots[usize::from(slot) - 2] = Some(rev);
        m.image.clear();
    } else if action == 2 && slot != 1 && m.slots[usize::from(slot) - 2].is_none() {
        return INVALID_FIRMWARE_IMAGE.into();
    }
    match action {
        0 => {}
        1 | 2 => m.next = slot,
        3 => {
            m.active = slot;
            m.next = 0;
        }
        _ => return Status::INVALID_FIELD.into(),
    }
    Outcome::ok(0)
}

/// Firmware Slot Information log (03h, 512 bytes).
pub(super) fn firmware_log(core: &Core, c: &CtrlState) -> Vec<u8> {
    let m = &c.maintenance;
    let mut b = vec![0u8; 512];
    b[0] = m.active.max(1) | m.next << 4;
    let mut first = [b' '; 8];
    for (d, s) in first.iter_mut().zip(core.cfg.firmware.bytes()) {
        *d = s;
    }
    b[8..16].copy_from_slice(&first);
    for (i, rev) in m.slots.iter().enumerate() {
        if let Some(r) = rev {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(r);
        }
    }
    b
}

/// Sanitize Status log (81h, 512 bytes): SPROG, SSTAT, SCDW10.
pub(super) fn sanitize_log(c: &CtrlState) -> Vec<u8> {
    let mut b = vec![0u8; 512];
    b[0..2].copy_from_slice(&0xffffu16.to_le_bytes()); // SPROG: done
    let sstat: u16 = if c.maintenance.sanitized > 0 {
        1 | 1 << 8 // completed successfully; global data erased
    } else {
        0
    };
    b[2..4].copy_from_slice(&sstat.to_le_bytes());
    b
}

/// Replaces namespace `ns` with an empty one of the same size in bytes and LBA size `lba_size`.
fn erase(core: &Core, c: &mut CtrlState, ns: &ModelNamespace, lba_size: u32) {
    let bytes = ns.blocks() << ns.lba_shift;
    let cfg = ModelNamespaceConfig {
        nsid: ns.nsid,
        blocks: bytes / u64::from(lba_size),
        lba_size,
        backing: if ns.store.is_some() {
            Backing::Ram
        } else {
            Backing::Null
        },
    };
    let fresh = ModelNamespace::new(&cfg, core.cfg.seed);
    let attached = ns.is_attached();
    fresh.attached.store(attached, Ordering::Release);
    core.ns_write(|t| t.insert(ns.nsid, Arc::new(fresh)));
    if attached {
        core.ns_changed(c, ns.nsid);
    }
}

pub(super) fn format_nvm(core: &Core, c: &mut CtrlState, sqe: &Sqe) -> Outcome {
    let cdw10 = sqe.cdw(10);
    let lbaf = (cdw10 & 0xf) | ((cdw10 >> 12) & 3) << 4;
    let (pi, ses) = ((cdw10 >> 5) & 7, (cdw10 >> 9) & 7);
    if ses > 2 {
        return Status::INVALID_FIELD.into();
    }
    let lba_size = match (lbaf, pi) {
        (0, 0) => 512,
        (1, 0) => 4096,
        _ => return Status::INVALID_FORMAT.into(),
    };
    let nsid = sqe.nsid();
    let targets: Vec<_> = {
        let t = core.ns_read();
        if nsid == u32::MAX {
            t.values().cloned().collect()
        } else {
            t.get(&nsid).cloned().into_iter().collect()
        }
    };
    if targets.is_empty() && nsid != u32::MAX {
        return Status::INVALID_NAMESPACE.into();
    }
    for ns in targets {
        erase(core, c, &ns, lba_size);
    }
    Outcome::ok(0)
}

pub(super) fn sanitize(core: &Core, c: &mut CtrlState, sqe: &Sqe) -> Outcome {
    match sqe.cdw(10) & 7 {
        1 => return Outcome::ok(0), // Exit Failure Mode: never in it
        2..=4 => {}
        _ => return Status::INVALID_FIELD.into(),
    }
    let all: Vec<_> = core.ns_read().values().cloned().collect();
    for ns in all {
        erase(core, c, &ns, 1 << ns.lba_shift);
    }
    c.maintenance.sanitized += 1;
    Outcome::ok(0)
}
