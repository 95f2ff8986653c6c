//! Admin commands: queue management, features, log pages, AER, namespace attachment, doorbell
//! buffer config (Identify is in `identify`).

use super::admin_maint as maint;
use super::admin_namespaces::{ns_attachment, ns_management};
use super::admin_queues::{
    create_cq, create_sq, delete_cq, delete_sq, granted, io_queues_exist, queue_mapped,
};
use super::core::{Core, CtrlState};
use super::sqe::{Outcome, Sqe, Status};
use super::{identify, prp};
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

/// Admin opcodes handled here.
pub(crate) mod op {
    pub const DELETE_SQ: u8 = 0x00;
    pub const CREATE_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const DELETE_CQ: u8 = 0x04;
    pub const CREATE_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const AER: u8 = 0x0C;
    pub const NS_MANAGEMENT: u8 = 0x0D;
    pub const NS_ATTACHMENT: u8 = 0x15;
    pub const DOORBELL_BUFFER_CONFIG: u8 = 0x7C;
    pub const FORMAT_NVM: u8 = 0x80;
    /// Vendor-specific (controller to host), see [`super::VENDOR_FILL_OPCODE`].
    pub const VENDOR_FILL: u8 = 0xC2;
    /// Vendor-specific, see [`super::VENDOR_HOLD_OPCODE`].
    pub const VENDOR_HOLD: u8 = 0xC6;
}

/// The largest Get Log Page transfer the model serves (its logs are far smaller; the rest would
/// be zero fill).
const MAX_LOG_BYTES: u64 = 1 << 20;
const FID_NUMBER_OF_QUEUES: u8 = 0x07;
const FID_VOLATILE_WRITE_CACHE: u8 = 0x06;
const FEATURE_NOT_SAVEABLE: Status = Status(0x0D | 1 << 8 | 1 << 14);

fn lock<T>(m: &std::sync::Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Executes one admin command; `None` means held (an AER waiting for an event).
pub(crate) fn execute(core: &Core, c: &mut CtrlState, sqe: &Sqe) -> Option<Outcome> {
    if sqe.psdt() != 0 || sqe.fuse() != 0 {
        return Some(Status::INVALID_FIELD.into());
    }
    let o = match sqe.opcode() {
        op::DELETE_SQ => delete_sq(core, sqe),
        op::CREATE_SQ => create_sq(core, c, sqe),
        op::GET_LOG_PAGE => get_log_page(core, c, sqe),
        op::DELETE_CQ => delete_cq(core, sqe),
        op::CREATE_CQ => create_cq(core, c, sqe),
        op::IDENTIFY => identify::execute(core, sqe, c.page, c.maintenance.running()),
        op::ABORT => Outcome::ok(1), // bit 0: command not aborted
        op::SET_FEATURES => set_features(core, c, sqe),
        op::GET_FEATURES => get_features(core, c, sqe),
        op::AER => {
            if c.events.aers.len() > usize::from(core.cfg.aerl) {
                Status::AER_LIMIT_EXCEEDED.into()
            } else {
                return c.events.aer_arrived(sqe.cid()).map(Outcome::ok);
            }
        }
        op::NS_ATTACHMENT => ns_attachment(core, c, sqe),
        op::NS_MANAGEMENT => ns_management(core, c, sqe),
        op::DOORBELL_BUFFER_CONFIG
            if core.cfg.shadow_doorbells && core.cfg.version >= 0x0001_0300 =>
        {
            doorbell_buffer_config(core, sqe)
        }
        0x10 => maint::firmware_commit(c, sqe),
        0x11 => maint::firmware_download(core, c, sqe),
        op::FORMAT_NVM => maint::format_nvm(core, c, sqe),
        0x84 => maint::sanitize(core, c, sqe),
        op::VENDOR_FILL => vendor_fill(core, c, sqe),
        op::VENDOR_HOLD => return None,
        _ => Status::INVALID_OPCODE.into(),
    };
    Some(o)
}

fn set_features(core: &Core, c: &mut CtrlState, sqe: &Sqe) -> Outcome {
    let fid = (sqe.cdw(10) & 0xFF) as u8;
    if sqe.cdw(10) >> 31 != 0 {
        return FEATURE_NOT_SAVEABLE.into();
    }
    let value = sqe.cdw(11);
    match fid {
        FID_NUMBER_OF_QUEUES => {
            let (nsqr, ncqr) = ((value & 0xFFFF) as u16, (value >> 16) as u16);
            if nsqr == u16::MAX || ncqr == u16::MAX {
                return Status::INVALID_FIELD.into();
            }
            if io_queues_exist(core) {
                return Status::COMMAND_SEQUENCE_ERROR.into();
            }
            let max = core.cfg.max_io_queue_pairs - 1;
            let g = *c
                .queues_granted
                .get_or_insert((nsqr.min(max), ncqr.min(max)));
            Outcome::ok(u32::from(g.0) | u32::from(g.1) << 16)
        }
        FID_VOLATILE_WRITE_CACHE => Status::INVALID_FIELD.into(),
        0x01..=0x05 | 0x08..=0x0B => {
            c.features.insert(fid, value);
            Outcome::ok(0)
        }
        _ => Status::INVALID_FIELD.into(),
    }
}

fn get_features(core: &Core, c: &CtrlState, sqe: &Sqe) -> Outcome {
    let fid = (sqe.cdw(10) & 0xFF) as u8;
    match fid {
        FID_NUMBER_OF_QUEUES => {
            let g = granted(core, c);
            Outcome::ok(u32::from(g.0) | u32::from(g.1) << 16)
        }
        0x01..=0x05 | 0x08..=0x0B => Outcome::ok(c.features.get(&fid).copied().unwrap_or(0)),
        _ => Status::INVALID_FIELD.into(),
    }
}

/// The largest transfer in bytes (MDTS), if limited.
pub(crate) fn max_transfer(core: &Core) -> Option<u64> {
    (core.cfg.mdts != 0).then(|| 4096u64 << core.cfg.mdts)
}

fn smart_log(core: &Core) -> Vec<u8> {
    let mut b = vec![0u8; 512];
    b[1..3].copy_from_slice(&313u16.to_le_bytes()); // composite temperature, K
    b[3] = 100; // available spare
    b[4] = 10; // spare threshold
    let snap = core.counters.snapshot(core.now());
    b[64..72].copy_from_slice(&snap.io(0x02).to_le_bytes()); // host read commands
    b[80..88].copy_from_slice(&snap.io(0x01).to_le_bytes()); // host write commands
    let hours = core.now() / 3_600_000_000_000;
    b[128..136].copy_from_slice(&hours.to_le_bytes());
    b
}

fn get_log_page(core: &Core, c: &mut CtrlState, sqe: &Sqe) -> Outcome {
    let lid = (sqe.cdw(10) & 0xFF) as u8;
    let rae = sqe.cdw(10) & (1 << 15) != 0;
    let numd = u64::from(sqe.cdw(10) >> 16) | u64::from(sqe.cdw(11) & 0xFFFF) << 16;
    let len = (numd + 1) * 4;
    let offset = u64::from(sqe.cdw(12)) | u64::from(sqe.cdw(13)) << 32;
    if !offset.is_multiple_of(4)
        || len > MAX_LOG_BYTES
        || max_transfer(core).is_some_and(|m| len > m)
    {
        return Status::INVALID_FIELD.into();
    }
    let page = match lid {
        0x01 => vec![0u8; 64],
        0x02 => smart_log(core),
        0x03 => maint::firmware_log(core, c),
        0x81 => maint::sanitize_log(c),
        VENDOR_PATTERN_LOG => pattern_log(),
        0x0C if core.ana_reporting() => {
            let groups_only = sqe.cdw(10) & (1 << 8) != 0;
            let page = core.ana_log(c, groups_only);
            c.events.ana_read(rae);
            page
        }
        0x04 => {
            if offset >= 4096 {
                return Status::INVALID_FIELD.into();
            }
            c.events.take_changed_list(rae)
        }
        _ => return Status::INVALID_LOG_PAGE.into(),
    };
    if offset >= page.len() as u64 {
        return Status::INVALID_FIELD.into();
    }
    let mut data = vec![0u8; len as usize];
    let avail = &page[offset as usize..];
    let n = avail.len().min(data.len());
    data[..n].copy_from_slice(&avail[..n]);
    match prp::write_out(&core.iommu, sqe.prp1(), sqe.prp2(), c.page, &data) {
        Ok(()) => Outcome::ok(0),
        Err(s) => s.into(),
    }
}

/// The model's vendor-specific command that fills CDW10 bytes (at most 4 MiB) with the byte
/// in CDW11: its length is in no field the NVMe specification defines.
pub const VENDOR_FILL_OPCODE: u8 = op::VENDOR_FILL;

/// The model's vendor-specific command that never completes (to time out an admin command).
pub const VENDOR_HOLD_OPCODE: u8 = op::VENDOR_HOLD;

/// Vendor-specific log page C0h of the model: 256 KiB whose dword `k` is `k ^ 0xC0C0_0000`, so
/// that every offset of a read can be checked.
pub const VENDOR_PATTERN_LOG: u8 = 0xC0;
/// Bytes in [`VENDOR_PATTERN_LOG`].
pub const VENDOR_PATTERN_LOG_BYTES: usize = 256 << 10;

fn pattern_log() -> Vec<u8> {
    (0..VENDOR_PATTERN_LOG_BYTES as u32 / 4)
        .flat_map(|k| (k ^ 0xC0C0_0000).to_le_bytes())
        .collect()
}

fn vendor_fill(core: &Core, c: &CtrlState, sqe: &Sqe) -> Outcome {
    let len = u64::from(sqe.cdw(10));
    if len > 4 << 20 {
        return Status::INVALID_FIELD.into();
    }
    let data = vec![sqe.cdw(11) as u8; len as usize];
    match prp::write_out(&core.iommu, sqe.prp1(), sqe.prp2(), c.page, &data) {
        Ok(()) => Outcome::ok(0),
        Err(s) => s.into(),
    }
}

fn doorbell_buffer_config(core: &Core, sqe: &Sqe) -> Outcome {
    let (shadow, eventidx) = (sqe.prp1(), sqe.prp2());
    let ok = |a: u64| a != 0 && a.is_multiple_of(4096) && queue_mapped(core, a, 4096);
    if !ok(shadow) || !ok(eventidx) {
        return Status::INVALID_FIELD.into();
    }
    core.eventidx.store(eventidx, Ordering::Release);
    core.shadow.store(shadow, Ordering::Release);
    // Start the EventIdx values at the queues' current positions.
    for s in core.sqs.iter().skip(1) {
        if let Some(sq) = lock(s).as_mut() {
            sq.awake = false;
            core.sq_eventidx(sq);
        }
    }
    for (i, q) in core.cqs.iter().enumerate().skip(1) {
        if let Some(cq) = lock(q).as_ref() {
            core.write_eventidx(2 * i + 1, (cq.head + cq.size - 1) % cq.size);
        }
    }
    Outcome::ok(0)
}
