//! Fabrics Connect: reading the command and its 1024 bytes of data, and the checks that say
//! whether a host may have the queue it asks for. Every refusal carries the status for the
//! host and a reason for the target's log.

use crate::command::*;
use crate::config::DISCOVERY_NQN;
use crate::export::Export;

/// Bytes of the Connect command's data.
pub const CONNECT_DATA_LEN: usize = 1024;

/// A Connect as the host sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The queue asked for (0: admin).
    pub qid: u16,
    /// SQSIZE: entries − 1.
    pub sqsize: u16,
    /// Keep Alive Timeout in ms (admin queue).
    pub kato_ms: u32,
    /// Host identifier.
    pub hostid: [u8; 16],
    /// Controller ID (0xFFFF: any, for the admin queue).
    pub cntlid: u16,
    /// The subsystem NQN.
    pub subnqn: String,
    /// The host NQN.
    pub hostnqn: String,
}

/// A refused Connect: the status (and DW0) for the host, the reason for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The status field.
    pub status: u16,
    /// DW0: for invalid parameters, IATTR (bit 16: in the data) and IPO (byte offset).
    pub result: u64,
    /// Why, for the target's log.
    pub reason: String,
}

fn invalid(in_data: bool, offset: u16, reason: String) -> Refusal {
    Refusal {
        status: SC_CONNECT_INVALID_PARAM,
        result: (u64::from(in_data) << 16) | u64::from(offset),
        reason,
    }
}

fn nqn_at(data: &[u8], at: usize) -> Result<String, Refusal> {
    let field = &data[at..at + 256];
    let len = field.iter().position(|&b| b == 0).unwrap_or(256);
    match std::str::from_utf8(&field[..len]) {
        Ok(s) if !s.is_empty() && len < 224 => Ok(s.to_owned()),
        _ => Err(invalid(true, at as u16, format!("the NQN at byte {at} of the Connect data is empty, not UTF-8 or longer than 223 bytes"))),
    }
}

/// Reads a Connect command and its in-capsule data.
pub fn parse(sqe: Sqe<'_>, data: &[u8]) -> Result<ConnectRequest, Refusal> {
    let cdw10 = sqe.cdw(10);
    if cdw10 & 0xffff != 0 {
        return Err(invalid(
            false,
            40,
            format!("record format {} (only 0 exists)", cdw10 & 0xffff),
        ));
    }
    let sgl = sqe.sgl();
    if sgl.kind != SGL_DATA_BLOCK_OFFSET
        || sgl.length as usize != CONNECT_DATA_LEN
        || data.len() != CONNECT_DATA_LEN
    {
        return Err(Refusal {
            status: SC_SGL_LENGTH_INVALID,
            result: 0,
            reason: format!("the Connect data must be {CONNECT_DATA_LEN} bytes in the capsule (got {} bytes, SGL type {:#04x})", data.len(), sgl.kind),
        });
    }
    let mut hostid = [0u8; 16];
    hostid.copy_from_slice(&data[..16]);
    Ok(ConnectRequest {
        qid: (cdw10 >> 16) as u16,
        sqsize: sqe.cdw(11) as u16,
        kato_ms: sqe.cdw(12),
        hostid,
        cntlid: u16::from_le_bytes([data[16], data[17]]),
        subnqn: nqn_at(data, 256)?,
        hostnqn: nqn_at(data, 512)?,
    })
}

/// Which controller a Connect is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectKind {
    /// A new admin queue (a new controller), `discovery` or of the exported subsystem.
    Admin {
        /// For the discovery subsystem.
        discovery: bool,
    },
    /// An I/O queue of controller `cntlid`.
    Io {
        /// The controller.
        cntlid: u16,
    },
}

/// The checks that need only the request and the export: the subsystem exists, the host is
/// allowed (discovery is open to every host; its log lists only what the host may use), the
/// queue size is in range.
pub fn admit(req: &ConnectRequest, export: &Export) -> Result<ConnectKind, Refusal> {
    let sub = &export.config.subsystem;
    let discovery = req.subnqn == DISCOVERY_NQN;
    if !discovery && req.subnqn != sub.nqn {
        return Err(invalid(
            true,
            256,
            format!(
                "no subsystem {:?} here (this target exports {:?})",
                req.subnqn, sub.nqn
            ),
        ));
    }
    if !discovery && !sub.allows(&req.hostnqn) {
        return Err(Refusal {
            status: SC_CONNECT_INVALID_HOST,
            result: 0,
            reason: format!(
                "host {:?} is not on the allow list of {:?} (allow it with --allow-host {})",
                req.hostnqn, sub.nqn, req.hostnqn
            ),
        });
    }
    let max = export.config.max_queue_size;
    if req.sqsize == 0 || req.sqsize >= max {
        return Err(invalid(
            false,
            44,
            format!("SQSIZE {} (give 1..={})", req.sqsize, max - 1),
        ));
    }
    if req.qid == 0 {
        return Ok(ConnectKind::Admin { discovery });
    }
    if discovery {
        return Err(invalid(
            false,
            42,
            "the discovery controller has no I/O queues".into(),
        ));
    }
    if req.qid > export.config.max_io_queues {
        return Err(invalid(
            false,
            42,
            format!(
                "queue {} (this target has at most {} I/O queues per controller)",
                req.qid, export.config.max_io_queues
            ),
        ));
    }
    Ok(ConnectKind::Io { cntlid: req.cntlid })
}
