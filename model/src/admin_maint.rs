//! Format NVM, Sanitize, Firmware Image Download / Commit and their log pages (Firmware Slot
//! Information 03h, Sanitize Status 81h): the maintenance commands QEMU 7.2 lacks.
//!
//! Firmware: slot 1 holds the configured revision and is read-only; slot 2 is writable. An
//! image's revision is its first 8 bytes (ASCII, not all blank); any other image is invalid.
//! Format and Sanitize erase by replacing the namespace with an empty one of the same size in
//! bytes (Format NVM with the new LBA format: 0 = 512 B, 1 = 4 KiB, 2 = 512 B and 3 = 4 KiB with
//! the namespace's metadata, if it offers any; Sanitize keeps the format).

use super::admin_namespaces::reformat;
use super::config::ModelMetadata;
use super::core::{Core, CtrlState};
use super::namespaces::ModelNamespace;
use super::prp;
use super::sqe::{Outcome, Sqe, Status};
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

/// The LBA format `lbaf` with metadata settings `mset` / `pi` on namespace `ns`: its block size
/// and metadata, or `None` if the namespace doesn't offer it. Formats 0 (512 B) and 1 (4 KiB)
/// have no metadata; 2 (512 B) and 3 (4 KiB) carry the namespace's offered metadata size
/// (if any), extended (MSET) or separate, with protection information type `pi` (1..=3 needs at
/// least 8 metadata bytes), in the first 8 metadata bytes with `pil`, else the last.
fn target_format(
    ns: &ModelNamespace,
    lbaf: u32,
    mset: bool,
    pi: u8,
    pil: bool,
) -> Option<(u32, Option<ModelMetadata>)> {
    let lba_size = if lbaf & 1 == 0 { 512 } else { 4096 };
    match lbaf {
        0 | 1 if pi == 0 => Some((lba_size, None)),
        2 | 3 if ns.offered_ms != 0 && pi <= 3 && (pi == 0 || ns.offered_ms >= 8) => Some((
            lba_size,
            Some(ModelMetadata {
                ms: ns.offered_ms,
                extended: mset,
                // DPS: PIL puts the PI first (only meaningful with a type).
                pi: pi | if pil && pi != 0 { 1 << 3 } else { 0 },
            }),
        )),
        _ => None,
    }
}

/// Format NVM (80h) of one namespace, or of every attached one (NSID FFFFFFFFh): the LBA
/// format of [`target_format`], Secure Erase Settings 0..=2 (every format erases). Each target
/// is checked before any is erased.
pub(super) fn format_nvm(core: &Core, c: &mut CtrlState, sqe: &Sqe) -> Outcome {
    let cdw10 = sqe.cdw(10);
    let lbaf = (cdw10 & 0xf) | ((cdw10 >> 12) & 3) << 4;
    let mset = cdw10 & (1 << 4) != 0;
    let (pi, pil, ses) = (
        ((cdw10 >> 5) & 7) as u8,
        cdw10 & (1 << 8) != 0,
        (cdw10 >> 9) & 7,
    );
    if ses > 2 {
        return Status::INVALID_FIELD.into();
    }
    let nsid = sqe.nsid();
    let targets: Vec<Arc<ModelNamespace>> = if nsid == u32::MAX {
        let t = core.ns_read();
        t.values().filter(|ns| ns.is_attached()).cloned().collect()
    } else {
        match core.active_ns(nsid) {
            Some(ns) => vec![ns],
            None => return Status::INVALID_NAMESPACE.into(),
        }
    };
    let mut plans = Vec::with_capacity(targets.len());
    for ns in &targets {
        match target_format(ns, lbaf, mset, pi, pil) {
            Some(plan) => plans.push((ns.nsid, plan)),
            None => return Status::INVALID_FORMAT.into(),
        }
    }
    for (nsid, (lba_size, metadata)) in plans {
        if reformat(core, c, nsid, lba_size, metadata).is_err() {
            return Status::INVALID_FORMAT.into();
        }
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
        // Same format, data erased: the size in bytes and block size are those it had.
        let _ = reformat(core, c, ns.nsid, 1 << ns.lba_shift, ns.metadata);
    }
    c.maintenance.sanitized += 1;
    Outcome::ok(0)
}
