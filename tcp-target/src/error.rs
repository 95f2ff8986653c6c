//! The target's errors: what a host sent wrong on one connection ([`PduError`], which ends
//! that connection with a termination PDU) and what stops the target itself ([`TargetError`]).

use thiserror::Error;

/// Fatal Error Status of a termination PDU (NVMe/TCP 1.0, H2C/C2H TermReq FES).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Fes {
    /// A header field is invalid (FEI: its byte offset).
    InvalidHeaderField = 1,
    /// A PDU arrived that the protocol does not allow at this point.
    PduSequenceError = 2,
    /// The header digest did not match.
    HeaderDigestError = 3,
    /// Data outside the range the command or R2T asked for.
    DataTransferOutOfRange = 4,
    /// More data than MAXH2CDATA or the in-capsule limit.
    DataTransferLimitExceeded = 5,
    /// A parameter the target does not support (ICReq PFV, HPDA, ...).
    UnsupportedParameter = 6,
}

/// Something wrong with the bytes a host sent: the connection ends with a C2HTermReq carrying
/// [`PduError::fes`] and [`PduError::fei`]; nothing else is affected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PduError {
    /// A PDU type the host must not send (a controller-to-host type, or unknown).
    #[error("PDU type {0:#04x} is not a host-to-controller PDU: the host must send ICReq, CapsuleCmd, H2CData or H2CTermReq")]
    BadType(u8),
    /// A header field holds a value the protocol forbids here.
    #[error("PDU header field {field} at byte {offset} is {value:#x}, expected {expected}")]
    BadField {
        /// The field's name.
        field: &'static str,
        /// Its byte offset in the PDU.
        offset: u32,
        /// The value received.
        value: u64,
        /// What would have been valid.
        expected: &'static str,
    },
    /// PLEN larger than anything this connection accepts.
    #[error("PDU length {plen} exceeds this connection's limit of {max} bytes: send data in pieces of at most MAXH2CDATA")]
    TooLong {
        /// The PLEN received.
        plen: u32,
        /// The largest PDU accepted.
        max: u32,
    },
    /// The header digest did not match.
    #[error("header digest mismatch: received {got:#010x}, computed {want:#010x}")]
    HeaderDigest {
        /// The digest received.
        got: u32,
        /// The digest of the header received.
        want: u32,
    },
    /// The data digest did not match.
    #[error("data digest mismatch: received {got:#010x}, computed {want:#010x}")]
    DataDigest {
        /// The digest received.
        got: u32,
        /// The digest of the data received.
        want: u32,
    },
    /// A PDU arrived that is not allowed in the connection's state.
    #[error("unexpected {what}: {why}")]
    Sequence {
        /// The PDU.
        what: &'static str,
        /// What the protocol expected instead.
        why: &'static str,
    },
    /// Data outside what the command or R2T asked for.
    #[error("H2CData for command {cid:#06x} covers bytes {offset}..{end}, outside the {limit} bytes solicited")]
    OutOfRange {
        /// The command identifier.
        cid: u16,
        /// First byte.
        offset: u32,
        /// One past the last byte.
        end: u64,
        /// The bytes the target asked for.
        limit: u32,
    },
    /// An ICReq parameter the target does not support.
    #[error("unsupported ICReq parameter {field}: {value:#x} ({why})")]
    Unsupported {
        /// The field's name.
        field: &'static str,
        /// Its byte offset in the PDU.
        offset: u32,
        /// The value received.
        value: u32,
        /// What the target supports.
        why: &'static str,
    },
    /// The host ended the connection with an H2CTermReq.
    #[error("the host ended the connection (H2CTermReq FES {fes:#x})")]
    HostTerminated {
        /// The host's Fatal Error Status.
        fes: u16,
    },
}

impl PduError {
    /// The Fatal Error Status to send in the C2HTermReq.
    pub fn fes(&self) -> Fes {
        match self {
            PduError::BadType(_) | PduError::BadField { .. } => Fes::InvalidHeaderField,
            PduError::TooLong { .. } => Fes::DataTransferLimitExceeded,
            PduError::HeaderDigest { .. } => Fes::HeaderDigestError,
            // NVMe/TCP has no FES for a data digest error on a PDU: the spec ends the
            // connection with "invalid header field" pointing at nothing (FEI 0).
            PduError::DataDigest { .. } => Fes::InvalidHeaderField,
            PduError::Sequence { .. } | PduError::HostTerminated { .. } => Fes::PduSequenceError,
            PduError::OutOfRange { .. } => Fes::DataTransferOutOfRange,
            PduError::Unsupported { .. } => Fes::UnsupportedParameter,
        }
    }

    /// The Fatal Error Information: the offending field's byte offset where there is one.
    pub fn fei(&self) -> u32 {
        match self {
            PduError::BadField { offset, .. } | PduError::Unsupported { offset, .. } => *offset,
            PduError::BadType(_) => 0,
            PduError::TooLong { .. } => 4,
            _ => 0,
        }
    }
}

/// What stops the target (or one of its exports) from starting or running.
#[derive(Debug, Error)]
pub enum TargetError {
    /// The listening socket could not be set up.
    #[error("listening on {addr}: {source} (is another target already on that port? try --listen with another port)")]
    Listen {
        /// The address asked for.
        addr: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The configuration is not usable.
    #[error("configuration: {0}")]
    Config(String),
    /// The backend could not give the target what it needs.
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
}

/// An error of a [`Backend`](crate::backend::Backend): opening a queue or allocating memory.
#[derive(Debug, Error)]
pub enum BackendError {
    /// The backend could not open an I/O queue for a new target queue.
    #[error("could not open an I/O queue on the backend: {0} (the controller may have too few queue pairs left; connect fewer I/O queues with nvme connect -i N)")]
    Queue(String),
    /// No DMA memory for a transfer.
    #[error("no DMA memory for a {len}-byte transfer: {why} (reserve more hugepages with `vfnvme setup --hugepages N`)")]
    NoMemory {
        /// The transfer size.
        len: usize,
        /// The allocator's reason.
        why: String,
    },
}
