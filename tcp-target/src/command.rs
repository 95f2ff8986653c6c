//! Reading a submission queue entry received in a capsule ([`Sqe`]) and building the
//! completion queue entry sent back ([`Cqe`]), with the status codes the target returns.

use crate::pdu::{CQE_LEN, SQE_LEN};

/// Generic status: success.
pub const SC_SUCCESS: u16 = 0x0000;
/// Generic status: invalid command opcode (DNR).
pub const SC_INVALID_OPCODE: u16 = 0x4001;
/// Generic status: invalid field in command (DNR).
pub const SC_INVALID_FIELD: u16 = 0x4002;
/// Generic status: data transfer error.
pub const SC_DATA_TRANSFER_ERROR: u16 = 0x0004;
/// Generic status: internal error.
pub const SC_INTERNAL: u16 = 0x0006;
/// Generic status: command aborted due to SQ deletion (the target shuts down).
pub const SC_ABORTED_SQ_DELETION: u16 = 0x0008;
/// Generic status: invalid namespace or format (DNR).
pub const SC_INVALID_NS: u16 = 0x400B;
/// Generic status: command sequence error (DNR).
pub const SC_SEQUENCE_ERROR: u16 = 0x400C;
/// Generic status: SGL data block length invalid (DNR).
pub const SC_SGL_LENGTH_INVALID: u16 = 0x400F;
/// Generic status: SGL descriptor type invalid (DNR).
pub const SC_SGL_TYPE_INVALID: u16 = 0x4011;
/// Generic status: LBA out of range (DNR).
pub const SC_LBA_OUT_OF_RANGE: u16 = 0x4080;
/// Command specific: invalid queue identifier (DNR).
pub const SC_INVALID_QID: u16 = 0x4101;
/// Command specific: invalid log page (DNR).
pub const SC_INVALID_LOG_PAGE: u16 = 0x4109;
/// Command specific: feature identifier not saveable (DNR).
pub const SC_FEATURE_NOT_SAVEABLE: u16 = 0x410D;
/// Command specific: asynchronous event request limit exceeded (DNR).
pub const SC_AER_LIMIT: u16 = 0x4105;
/// Fabrics Connect: invalid parameters (DNR).
pub const SC_CONNECT_INVALID_PARAM: u16 = 0x4182;
/// Fabrics Connect: invalid host (DNR).
pub const SC_CONNECT_INVALID_HOST: u16 = 0x4184;
/// Fabrics: invalid property offset or size (DNR; "Invalid Field" for Property Get/Set).
pub const SC_INVALID_PROPERTY: u16 = SC_INVALID_FIELD;

/// A submission queue entry as received (64 bytes, little-endian fields).
#[derive(Debug, Clone, Copy)]
pub struct Sqe<'a>(pub &'a [u8; SQE_LEN]);

impl Sqe<'_> {
    fn u16_at(&self, o: usize) -> u16 {
        u16::from_le_bytes([self.0[o], self.0[o + 1]])
    }
    fn u32_at(&self, o: usize) -> u32 {
        u32::from_le_bytes([self.0[o], self.0[o + 1], self.0[o + 2], self.0[o + 3]])
    }
    fn u64_at(&self, o: usize) -> u64 {
        u64::from(self.u32_at(o)) | (u64::from(self.u32_at(o + 4)) << 32)
    }
    /// Opcode (byte 0).
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }
    /// Command identifier.
    pub fn cid(&self) -> u16 {
        self.u16_at(2)
    }
    /// Fabrics command type (byte 4, for opcode 7Fh).
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }
    /// Namespace identifier.
    pub fn nsid(&self) -> u32 {
        self.u32_at(4)
    }
    /// Command dword `n` (10..=15).
    pub fn cdw(&self, n: usize) -> u32 {
        self.u32_at(n * 4)
    }
    /// CDW10–11 as one 64-bit value (the starting LBA of a read or write).
    pub fn cdw10_11(&self) -> u64 {
        self.u64_at(40)
    }
    /// CDW12–13 as one 64-bit value (a Property Set value).
    pub fn cdw12_13(&self) -> u64 {
        self.u64_at(48)
    }
    /// The data pointer as an SGL descriptor.
    pub fn sgl(&self) -> Sgl {
        Sgl {
            address: self.u64_at(24),
            length: self.u32_at(32),
            kind: self.0[39],
        }
    }
}

/// SGL descriptor type byte: Data Block, subtype Offset (in-capsule data).
pub const SGL_DATA_BLOCK_OFFSET: u8 = 0x01;
/// SGL descriptor type byte: Transport Data Block, subtype Transport-specific (data by R2T or
/// C2HData).
pub const SGL_TRANSPORT: u8 = 0x5A;

/// The SGL descriptor of a command's data pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sgl {
    /// Address (for in-capsule data: the offset into the capsule's data).
    pub address: u64,
    /// Length in bytes.
    pub length: u32,
    /// Type (high nibble) and subtype (low nibble).
    pub kind: u8,
}

/// A completion queue entry under construction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Command-specific result (DW0, and DW1 for 64-bit fabrics results).
    pub result: u64,
    /// Submission queue head pointer.
    pub sqhd: u16,
    /// Submission queue identifier.
    pub sqid: u16,
    /// Command identifier.
    pub cid: u16,
    /// The 15-bit status field (SC, SCT, CRD, More, DNR).
    pub status: u16,
}

impl Cqe {
    /// The 16 bytes on the wire (phase bit 0).
    pub fn to_bytes(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        b[0..8].copy_from_slice(&self.result.to_le_bytes());
        b[8..10].copy_from_slice(&self.sqhd.to_le_bytes());
        b[10..12].copy_from_slice(&self.sqid.to_le_bytes());
        b[12..14].copy_from_slice(&self.cid.to_le_bytes());
        b[14..16].copy_from_slice(&(self.status << 1).to_le_bytes());
        b
    }
}
