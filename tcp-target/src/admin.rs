//! Admin commands on an admin queue whose controller exists (after Connect): Identify, Get
//! Log Page, Get/Set Features, Asynchronous Event Request (held), Keep Alive, and the fabrics
//! Property Get/Set. Connect and Disconnect belong to the connection ([`crate::conn`]).

use crate::ana::AnaView;
use crate::command::*;
use crate::ctrl::{CtrlState, MAX_AERS};
use crate::export::Export;
use crate::{features, identify, logs};
use std::net::SocketAddr;
use std::time::Instant;

/// Admin opcode: Get Log Page.
pub const OPC_GET_LOG_PAGE: u8 = 0x02;
/// Admin opcode: Identify.
pub const OPC_IDENTIFY: u8 = 0x06;
/// Admin opcode: Set Features.
pub const OPC_SET_FEATURES: u8 = 0x09;
/// Admin opcode: Get Features.
pub const OPC_GET_FEATURES: u8 = 0x0A;
/// Admin opcode: Asynchronous Event Request.
pub const OPC_AER: u8 = 0x0C;
/// Admin opcode: Keep Alive.
pub const OPC_KEEP_ALIVE: u8 = 0x18;
/// Opcode of every fabrics command.
pub const OPC_FABRICS: u8 = 0x7F;
/// Fabrics command type: Property Set.
pub const FCTYPE_PROPERTY_SET: u8 = 0x00;
/// Fabrics command type: Connect.
pub const FCTYPE_CONNECT: u8 = 0x01;
/// Fabrics command type: Property Get.
pub const FCTYPE_PROPERTY_GET: u8 = 0x04;
/// Fabrics command type: Disconnect.
pub const FCTYPE_DISCONNECT: u8 = 0x08;

/// What the admin queue sends back for a command.
#[derive(Debug, PartialEq, Eq)]
pub enum AdminReply {
    /// A completion, after the data (C2HData) if any.
    Done {
        /// The status field.
        status: u16,
        /// DW0/DW1.
        result: u64,
        /// Data for the host.
        data: Option<Vec<u8>>,
    },
    /// The command is held (an AER): it completes when an event happens or the queue ends.
    Held,
}

impl AdminReply {
    fn status(status: u16) -> Self {
        AdminReply::Done {
            status,
            result: 0,
            data: None,
        }
    }
    fn result(result: u64) -> Self {
        AdminReply::Done {
            status: SC_SUCCESS,
            result,
            data: None,
        }
    }
}

/// What an admin command may look at.
pub struct AdminCtx<'a> {
    /// The subsystem as exported.
    pub export: &'a Export,
    /// The controller.
    pub ctrl: &'a mut CtrlState,
    /// The address the host connected to (for the discovery log).
    pub local: SocketAddr,
    /// Now, for the keep-alive timer.
    pub now: Instant,
    /// The ANA states (for the ANA log).
    pub ana: &'a AnaView,
}

/// Runs one admin command. `data` is its in-capsule data (for commands that carry some).
pub fn execute(cx: &mut AdminCtx<'_>, sqe: Sqe<'_>, _data: &[u8]) -> AdminReply {
    let sgl = sqe.sgl();
    match sqe.opcode() {
        OPC_FABRICS => fabrics(cx, sqe),
        OPC_IDENTIFY => c2h(sgl, identify_page(cx, sqe)),
        OPC_GET_LOG_PAGE => c2h(sgl, log_page(cx, sqe)),
        OPC_SET_FEATURES => match features::set(cx.ctrl, sqe, cx.export.config.max_io_queues) {
            Ok(r) => AdminReply::result(r),
            Err(s) => AdminReply::status(s),
        },
        OPC_GET_FEATURES => match features::get(cx.ctrl, sqe, cx.export.config.max_io_queues) {
            Ok(r) => AdminReply::result(r),
            Err(s) => AdminReply::status(s),
        },
        OPC_KEEP_ALIVE => {
            cx.ctrl.keep_alive(cx.now);
            AdminReply::status(SC_SUCCESS)
        }
        OPC_AER if cx.ctrl.aers.len() >= MAX_AERS => AdminReply::status(SC_AER_LIMIT),
        OPC_AER => {
            cx.ctrl.aers.push(sqe.cid());
            AdminReply::Held
        }
        _ => AdminReply::status(SC_INVALID_OPCODE),
    }
}

fn fabrics(cx: &mut AdminCtx<'_>, sqe: Sqe<'_>) -> AdminReply {
    let eight = sqe.cdw(10) & 7 == 1;
    let offset = sqe.cdw(11);
    match sqe.fctype() {
        FCTYPE_PROPERTY_GET => {
            match cx
                .ctrl
                .property_get(offset, eight, cx.export.config.max_queue_size)
            {
                Some(v) => AdminReply::result(v),
                None => AdminReply::status(SC_INVALID_PROPERTY),
            }
        }
        FCTYPE_PROPERTY_SET => {
            let was = cx.ctrl.enabled();
            if cx.ctrl.property_set(offset, eight, sqe.cdw12_13()) {
                if was != cx.ctrl.enabled() {
                    log::info!(
                        "controller {} (host {}): CC.EN={}",
                        cx.ctrl.cntlid,
                        cx.ctrl.hostnqn,
                        u8::from(!was)
                    );
                }
                AdminReply::status(SC_SUCCESS)
            } else {
                AdminReply::status(SC_INVALID_PROPERTY)
            }
        }
        _ => AdminReply::status(SC_INVALID_FIELD),
    }
}

/// Data for the host: at most what the SGL (a transport descriptor) asks for.
fn c2h(sgl: Sgl, page: Result<Vec<u8>, u16>) -> AdminReply {
    match page {
        Err(s) => AdminReply::status(s),
        Ok(_) if sgl.kind != SGL_TRANSPORT => AdminReply::status(SC_SGL_TYPE_INVALID),
        Ok(mut p) => {
            p.truncate(sgl.length as usize);
            AdminReply::Done {
                status: SC_SUCCESS,
                result: 0,
                data: Some(p),
            }
        }
    }
}

fn identify_page(cx: &AdminCtx<'_>, sqe: Sqe<'_>) -> Result<Vec<u8>, u16> {
    let cdw10 = sqe.cdw(10);
    let csi = (sqe.cdw(11) >> 24) as u8;
    let discovery = cx.ctrl.discovery;
    match (cdw10 as u8, discovery) {
        (0x01, _) => Ok(identify::controller(cx.export, cx.ctrl)),
        (0x00, false) => identify::namespace(cx.export, sqe.nsid()).ok_or(SC_INVALID_NS),
        (0x02, false) => Ok(identify::active_list(cx.export, sqe.nsid())),
        (0x03, false) => identify::descriptors(cx.export, sqe.nsid()).ok_or(SC_INVALID_NS),
        (0x06, false) if csi == 0 => Ok(identify::nvm_controller()),
        _ => Err(SC_INVALID_FIELD),
    }
}

fn log_page(cx: &AdminCtx<'_>, sqe: Sqe<'_>) -> Result<Vec<u8>, u16> {
    let cdw10 = sqe.cdw(10);
    let lid = cdw10 as u8;
    let lsp = (cdw10 >> 8) & 0x7f;
    let numd = (u64::from(sqe.cdw(11) & 0xffff) << 16 | u64::from(cdw10 >> 16)) + 1;
    let offset = u64::from(sqe.cdw(12)) | u64::from(sqe.cdw(13)) << 32;
    if !offset.is_multiple_of(4) {
        return Err(SC_INVALID_FIELD);
    }
    let page = match (lid, cx.ctrl.discovery) {
        (logs::LID_DISCOVERY, true) => {
            let allowed = cx.export.config.subsystem.allows(&cx.ctrl.hostnqn);
            logs::discovery_log(cx.export, cx.local, allowed)
        }
        (logs::LID_ERROR, false) => logs::error_log(),
        (logs::LID_SMART, false) => logs::smart_log(),
        (logs::LID_CHANGED_NS, false) => logs::changed_ns_log(),
        (logs::LID_ANA, false) => cx.ana.log(cx.export, lsp & 1 != 0),
        _ => return Err(SC_INVALID_LOG_PAGE),
    };
    let len = (numd * 4).min(1 << 20) as usize;
    let Some(rest) = page.get(offset.min(usize::MAX as u64) as usize..) else {
        return Err(SC_INVALID_FIELD);
    };
    let mut out = vec![0u8; len];
    let n = rest.len().min(len);
    out[..n].copy_from_slice(&rest[..n]);
    Ok(out)
}
