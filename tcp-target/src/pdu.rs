//! NVMe/TCP PDU types and their fixed layouts (NVMe/TCP transport 1.0; Linux's
//! `include/linux/nvme-tcp.h`): the common header, and one typed value per PDU the target
//! receives ([`Pdu`]). Data is borrowed from the receive buffer, never copied by parsing.

/// PDU type: Initialize Connection Request (host → controller).
pub const ICREQ: u8 = 0x00;
/// PDU type: Initialize Connection Response (controller → host).
pub const ICRESP: u8 = 0x01;
/// PDU type: H2C Termination Request.
pub const H2C_TERM_REQ: u8 = 0x02;
/// PDU type: C2H Termination Request.
pub const C2H_TERM_REQ: u8 = 0x03;
/// PDU type: Command Capsule.
pub const CAPSULE_CMD: u8 = 0x04;
/// PDU type: Response Capsule.
pub const CAPSULE_RESP: u8 = 0x05;
/// PDU type: Host to Controller Data.
pub const H2C_DATA: u8 = 0x06;
/// PDU type: Controller to Host Data.
pub const C2H_DATA: u8 = 0x07;
/// PDU type: Ready to Transfer.
pub const R2T: u8 = 0x09;

/// Flag: a header digest follows the header.
pub const FLAG_HDGST: u8 = 1 << 0;
/// Flag: a data digest follows the data.
pub const FLAG_DDGST: u8 = 1 << 1;
/// Flag: the last data PDU of a command (C2HData, H2CData).
pub const FLAG_LAST_PDU: u8 = 1 << 2;
/// Flag (C2HData, with LAST_PDU): the command succeeded; no response capsule follows.
pub const FLAG_SUCCESS: u8 = 1 << 3;

/// Bytes of the common header (type, flags, hlen, pdo, plen).
pub const COMMON_HEADER_LEN: usize = 8;
/// Header (and PDU) length of ICReq and ICResp.
pub const IC_LEN: usize = 128;
/// Header length of a command capsule (common header + 64-byte SQE).
pub const CAPSULE_CMD_HLEN: usize = 72;
/// Header length of a response capsule, R2T, data and termination PDUs.
pub const SHORT_HLEN: usize = 24;
/// The most bytes of the offending PDU a termination PDU carries.
pub const TERM_DATA_MAX: usize = 152;
/// Bytes of a submission queue entry.
pub const SQE_LEN: usize = 64;
/// Bytes of a completion queue entry.
pub const CQE_LEN: usize = 16;

/// The common header every PDU starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonHeader {
    /// PDU type.
    pub pdu_type: u8,
    /// Type-specific flags (`FLAG_*`).
    pub flags: u8,
    /// Header length (without the header digest).
    pub hlen: u8,
    /// PDU data offset: where the data starts (0: no data).
    pub pdo: u8,
    /// Total PDU length, digests and padding included.
    pub plen: u32,
}

impl CommonHeader {
    /// Reads the common header from the first 8 bytes of `b` (the caller checked the length).
    pub fn read(b: &[u8; COMMON_HEADER_LEN]) -> Self {
        CommonHeader {
            pdu_type: b[0],
            flags: b[1],
            hlen: b[2],
            pdo: b[3],
            plen: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// ICReq: the host's connection parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcReq {
    /// PDU format version (0).
    pub pfv: u16,
    /// Host PDU data alignment (dwords − 1): where the host wants C2H data to start.
    pub hpda: u8,
    /// Header digest asked for.
    pub hdgst: bool,
    /// Data digest asked for.
    pub ddgst: bool,
    /// Most R2Ts outstanding per command, minus one.
    pub maxr2t: u32,
}

/// H2CData header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2cDataHeader {
    /// Command identifier of the command the data is for.
    pub cccid: u16,
    /// Transfer tag of the R2T this data answers.
    pub ttag: u16,
    /// Offset of this data within the command's data.
    pub datao: u32,
    /// Bytes of data in this PDU.
    pub datal: u32,
    /// The last PDU of the R2T's data.
    pub last: bool,
}

/// A PDU received from a host, its data borrowed from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pdu<'a> {
    /// Initialize Connection Request.
    IcReq(IcReq),
    /// A command capsule: the SQE and its in-capsule data (possibly empty).
    CapsuleCmd {
        /// The 64-byte submission queue entry.
        sqe: &'a [u8; SQE_LEN],
        /// In-capsule data.
        data: &'a [u8],
    },
    /// Host-to-controller data for a command the target sent an R2T for.
    H2cData {
        /// The header fields.
        header: H2cDataHeader,
        /// The data.
        data: &'a [u8],
    },
    /// The host ends the connection.
    H2cTermReq {
        /// Fatal Error Status.
        fes: u16,
    },
}

impl Pdu<'_> {
    /// A short name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Pdu::IcReq(_) => "ICReq",
            Pdu::CapsuleCmd { .. } => "CapsuleCmd",
            Pdu::H2cData { .. } => "H2CData",
            Pdu::H2cTermReq { .. } => "H2CTermReq",
        }
    }
}
