//! Submission queue entries decoded from raw bytes by the NVMe base specification's offsets, and
//! the status codes the model reports. Deliberately independent of the driver's `spec` module,
//! so that an encoding bug there shows up as a wrong answer here.

/// Size of a submission queue entry.
pub(crate) const SQE_BYTES: usize = 64;
/// Size of a completion queue entry.
pub(crate) const CQE_BYTES: u64 = 16;

/// One raw 64-byte submission queue entry.
#[derive(Clone, Copy)]
pub(crate) struct Sqe(pub [u8; SQE_BYTES]);

impl Sqe {
    fn u32_at(&self, off: usize) -> u32 {
        let b = &self.0;
        u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
    }
    fn u64_at(&self, off: usize) -> u64 {
        u64::from(self.u32_at(off)) | u64::from(self.u32_at(off + 4)) << 32
    }
    /// CDW0 bits 7:0.
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }
    /// CDW0 bits 9:8.
    pub fn fuse(&self) -> u8 {
        self.0[1] & 0x3
    }
    /// CDW0 bits 15:14: 0 = PRPs.
    pub fn psdt(&self) -> u8 {
        self.0[1] >> 6
    }
    /// CDW0 bits 31:16.
    pub fn cid(&self) -> u16 {
        u16::from_le_bytes([self.0[2], self.0[3]])
    }
    /// Bytes 4..8.
    pub fn nsid(&self) -> u32 {
        self.u32_at(4)
    }
    /// Bytes 16..24: the Metadata Pointer (MPTR).
    pub fn mptr(&self) -> u64 {
        self.u64_at(16)
    }
    /// Bytes 24..32.
    pub fn prp1(&self) -> u64 {
        self.u64_at(24)
    }
    /// Bytes 32..40.
    pub fn prp2(&self) -> u64 {
        self.u64_at(32)
    }
    /// Bytes 24..40: the data pointer as one SGL descriptor (PSDT 01b).
    pub fn dptr(&self) -> [u8; 16] {
        let mut d = [0u8; 16];
        d.copy_from_slice(&self.0[24..40]);
        d
    }
    /// Command dword 10..=15 (bytes 40..64).
    pub fn cdw(&self, n: usize) -> u32 {
        match n {
            10..=15 => self.u32_at(40 + (n - 10) * 4),
            _ => 0,
        }
    }
    /// CDW10 | CDW11 << 32: the starting LBA of NVM commands.
    pub fn slba(&self) -> u64 {
        self.u64_at(40)
    }
}

/// A completion status: Status Code (bits 7:0), Status Code Type (bits 10:8), DNR (bit 14) —
/// the CQE's DW3 bits 31:17 shifted down by 17.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status(pub u16);

const DNR: u16 = 1 << 14;
const fn generic(sc: u8, dnr: bool) -> Status {
    Status(sc as u16 | if dnr { DNR } else { 0 })
}
const fn specific(sc: u8) -> Status {
    Status(sc as u16 | 1 << 8 | DNR)
}

/// Media and data integrity status (SCT 2h), without DNR (as QEMU completes PI failures).
pub(crate) const fn media(sc: u8) -> Status {
    Status(sc as u16 | 2 << 8)
}

/// Path-related status (SCT 3h), retryable (DNR = 0): the host may retry on another path.
const fn path(sc: u8) -> Status {
    Status(sc as u16 | 3 << 8)
}

impl Status {
    pub const SUCCESS: Status = Status(0);
    pub const ANA_PERSISTENT_LOSS: Status = path(0x01);
    pub const ANA_INACCESSIBLE: Status = path(0x02);
    pub const ANA_TRANSITION: Status = path(0x03);
    pub const INVALID_OPCODE: Status = generic(0x01, true);
    pub const INVALID_FIELD: Status = generic(0x02, true);
    pub const DATA_TRANSFER_ERROR: Status = generic(0x04, false);
    pub const INTERNAL_ERROR: Status = generic(0x06, false);
    pub const INVALID_FORMAT: Status = generic(0x0A, true);
    pub const INVALID_NAMESPACE: Status = generic(0x0B, true);
    pub const COMMAND_SEQUENCE_ERROR: Status = generic(0x0C, true);
    pub const INVALID_PRP_OFFSET: Status = generic(0x13, true);
    /// Invalid SGL Segment Descriptor.
    pub const INVALID_SGL_SEGMENT: Status = generic(0x0D, true);
    /// Invalid Number of SGL Descriptors.
    pub const INVALID_SGL_DESCRIPTOR_COUNT: Status = generic(0x0E, true);
    /// Data SGL Length Invalid.
    pub const DATA_SGL_LENGTH_INVALID: Status = generic(0x0F, true);
    /// SGL Descriptor Type Invalid.
    pub const SGL_DESCRIPTOR_TYPE_INVALID: Status = generic(0x11, true);
    pub const LBA_OUT_OF_RANGE: Status = generic(0x80, true);
    pub const CQ_INVALID: Status = specific(0x00);
    pub const INVALID_QID: Status = specific(0x01);
    pub const INVALID_QUEUE_SIZE: Status = specific(0x02);
    pub const AER_LIMIT_EXCEEDED: Status = specific(0x05);
    pub const INVALID_INTERRUPT_VECTOR: Status = specific(0x08);
    pub const INVALID_LOG_PAGE: Status = specific(0x09);
    pub const INVALID_QUEUE_DELETION: Status = specific(0x0C);
    pub const NSID_UNAVAILABLE: Status = specific(0x16);
    pub const NS_ALREADY_ATTACHED: Status = specific(0x18);
    /// Invalid Protection Information (1h/81h, DNR).
    pub const INVALID_PROTECTION_INFO: Status = specific(0x81);
    pub const NS_NOT_ATTACHED: Status = specific(0x1A);
    pub const CONTROLLER_LIST_INVALID: Status = specific(0x1C);
}

/// The result of executing one command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome {
    pub status: Status,
    /// Completion DW0 (command specific).
    pub dw0: u32,
}

impl Outcome {
    pub fn ok(dw0: u32) -> Self {
        Outcome {
            status: Status::SUCCESS,
            dw0,
        }
    }
    pub fn err(status: Status) -> Self {
        Outcome { status, dw0: 0 }
    }
}

impl From<Status> for Outcome {
    fn from(s: Status) -> Self {
        Outcome::err(s)
    }
}
