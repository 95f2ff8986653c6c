//! Completion status: type, code, and readable names for the common ones.

/// Status code types.
pub mod sct {
    /// Generic command status.
    pub const GENERIC: u8 = 0;
    /// Command specific status.
    pub const COMMAND_SPECIFIC: u8 = 1;
    /// Media and data integrity errors.
    pub const MEDIA: u8 = 2;
    /// Path related status.
    pub const PATH: u8 = 3;
    /// Vendor specific.
    pub const VENDOR: u8 = 7;
}

/// Generic command status codes (SCT 0).
pub mod generic {
    /// Successful Completion.
    pub const SUCCESS: u8 = 0x00;
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: u8 = 0x01;
    /// Invalid Field in Command.
    pub const INVALID_FIELD: u8 = 0x02;
    /// Command ID Conflict.
    pub const CID_CONFLICT: u8 = 0x03;
    /// Data Transfer Error.
    pub const DATA_TRANSFER_ERROR: u8 = 0x04;
    /// Commands Aborted due to Power Loss Notification.
    pub const ABORTED_POWER_LOSS: u8 = 0x05;
    /// Internal Error.
    pub const INTERNAL_ERROR: u8 = 0x06;
    /// Command Abort Requested.
    pub const ABORT_REQUESTED: u8 = 0x07;
    /// Command Aborted due to SQ Deletion.
    pub const ABORTED_SQ_DELETION: u8 = 0x08;
    /// Invalid Namespace or Format.
    pub const INVALID_NAMESPACE: u8 = 0x0b;
    /// PRP Offset Invalid.
    pub const INVALID_PRP_OFFSET: u8 = 0x13;
    /// Namespace is Write Protected.
    pub const NS_WRITE_PROTECTED: u8 = 0x20;
    /// LBA Out of Range.
    pub const LBA_OUT_OF_RANGE: u8 = 0x80;
    /// Capacity Exceeded.
    pub const CAPACITY_EXCEEDED: u8 = 0x81;
    /// Namespace Not Ready.
    pub const NS_NOT_READY: u8 = 0x82;
}

/// Command specific status codes (SCT 1) the driver names.
pub mod command_specific {
    /// Completion Queue Invalid.
    pub const INVALID_CQ: u8 = 0x00;
    /// Invalid Queue Identifier.
    pub const INVALID_QID: u8 = 0x01;
    /// Invalid Queue Size.
    pub const INVALID_QUEUE_SIZE: u8 = 0x02;
    /// Abort Command Limit Exceeded.
    pub const ABORT_LIMIT: u8 = 0x03;
    /// Asynchronous Event Request Limit Exceeded.
    pub const AER_LIMIT: u8 = 0x05;
    /// Invalid Log Page.
    pub const INVALID_LOG_PAGE: u8 = 0x09;
    /// Invalid Format.
    pub const INVALID_FORMAT: u8 = 0x0a;
    /// Invalid Queue Deletion.
    pub const INVALID_QUEUE_DELETION: u8 = 0x0c;
    /// Feature Not Changeable.
    pub const FEATURE_NOT_CHANGEABLE: u8 = 0x0e;
    /// Namespace Already Attached.
    pub const NS_ALREADY_ATTACHED: u8 = 0x18;
    /// Namespace Not Attached.
    pub const NS_NOT_ATTACHED: u8 = 0x1a;
}

/// The status of a completed command: the 15-bit status field exactly as the CQE carries it
/// (DW3 bits 31:17, i.e. without the phase bit): bits 7:0 Status Code, 10:8 Status Code Type,
/// 12:11 Command Retry Delay, 13 More, 14 Do Not Retry.
///
/// Equality compares the whole field (CRD, More and DNR included): use [`Status::is_success`]
/// to ask whether a command succeeded, and [`Status::sct`]/[`Status::sc`] to match a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status(u16);

impl Status {
    /// Success.
    pub const SUCCESS: Status = Status(0);

    /// The status field's valid bits (bit 15 is the CQE's phase tag, not part of it).
    const MASK: u16 = 0x7fff;
    /// More: more information in the Error Information log.
    const MORE: u16 = 1 << 13;
    /// Do Not Retry.
    const DNR: u16 = 1 << 14;

    /// The status of the 15-bit status field (CQE DW3 bits 31:17, i.e. without the phase bit);
    /// bit 15 is ignored.
    #[inline(always)]
    pub const fn from_field(field: u16) -> Self {
        Status(field & Self::MASK)
    }
    /// The status with Status Code Type `sct` (its low 3 bits) and Status Code `sc`, CRD, More
    /// and DNR clear.
    #[inline(always)]
    pub const fn new(sct: u8, sc: u8) -> Self {
        Status(sc as u16 | ((sct as u16 & 0x7) << 8))
    }
    /// The 15-bit status field (bits 7:0 SC, 10:8 SCT, 12:11 CRD, 13 More, 14 DNR).
    #[inline(always)]
    pub const fn field(&self) -> u16 {
        self.0
    }
    /// Status Code Type (bits 10:8).
    #[inline(always)]
    pub const fn sct(&self) -> u8 {
        ((self.0 >> 8) & 0x7) as u8
    }
    /// Status Code (bits 7:0).
    #[inline(always)]
    pub const fn sc(&self) -> u8 {
        self.0 as u8
    }
    /// Command Retry Delay (bits 12:11): which of the controller's CRDT delays to wait before
    /// retrying (0: none).
    #[inline(always)]
    pub const fn crd(&self) -> u8 {
        ((self.0 >> 11) & 0x3) as u8
    }
    /// More information in the Error Information log (bit 13).
    #[inline(always)]
    pub const fn more(&self) -> bool {
        self.0 & Self::MORE != 0
    }
    /// Do Not Retry (bit 14).
    #[inline(always)]
    pub const fn dnr(&self) -> bool {
        self.0 & Self::DNR != 0
    }
    /// Whether the command succeeded: SCT and SC are zero (CRD, More and DNR are not looked at).
    #[inline(always)]
    pub const fn is_success(&self) -> bool {
        self.0 & 0x7ff == 0
    }
    /// Path-related status 71h, Command Aborted By Host: the driver failed the command itself
    /// after a controller reset (the device had stopped; its buffer is handed back). Retryable
    /// on the same or another path.
    pub const ABORTED_BY_RESET: Status = Status::new(sct::PATH, 0x71);
    /// Path-related status 70h, Host Pathing Error: the controller is gone (removed, or it
    /// failed and could not be reset); the driver failed the command itself. Retryable only on
    /// another path.
    pub const CONTROLLER_LOST: Status = Status::new(sct::PATH, 0x70);
    /// Whether the driver failed the command itself because of a reset or a lost controller
    /// ([`Status::ABORTED_BY_RESET`], [`Status::CONTROLLER_LOST`]), not the device.
    pub const fn is_host_failure(&self) -> bool {
        self.sct() == sct::PATH && (self.sc() == 0x70 || self.sc() == 0x71)
    }
    /// A generic status with `sc`.
    pub const fn generic(sc: u8) -> Self {
        Status::new(sct::GENERIC, sc)
    }
    /// The readable name of the status code, if it is one the driver knows.
    pub fn name(&self) -> Option<&'static str> {
        use command_specific as cs;
        use generic as g;
        Some(match (self.sct(), self.sc()) {
            (0, g::SUCCESS) => "Successful Completion",
            (0, g::INVALID_OPCODE) => "Invalid Command Opcode",
            (0, g::INVALID_FIELD) => "Invalid Field in Command",
            (0, g::CID_CONFLICT) => "Command ID Conflict",
            (0, g::DATA_TRANSFER_ERROR) => "Data Transfer Error",
            (0, g::ABORTED_POWER_LOSS) => "Commands Aborted due to Power Loss Notification",
            (0, g::INTERNAL_ERROR) => "Internal Error",
            (0, g::ABORT_REQUESTED) => "Command Abort Requested",
            (0, g::ABORTED_SQ_DELETION) => "Command Aborted due to SQ Deletion",
            (0, g::INVALID_NAMESPACE) => "Invalid Namespace or Format",
            (0, g::INVALID_PRP_OFFSET) => "PRP Offset Invalid",
            (0, g::NS_WRITE_PROTECTED) => "Namespace is Write Protected",
            (0, g::LBA_OUT_OF_RANGE) => "LBA Out of Range",
            (0, g::CAPACITY_EXCEEDED) => "Capacity Exceeded",
            (0, g::NS_NOT_READY) => "Namespace Not Ready",
            (1, cs::INVALID_CQ) => "Completion Queue Invalid",
            (1, cs::INVALID_QID) => "Invalid Queue Identifier",
            (1, cs::INVALID_QUEUE_SIZE) => "Invalid Queue Size",
            (1, cs::ABORT_LIMIT) => "Abort Command Limit Exceeded",
            (1, cs::AER_LIMIT) => "Asynchronous Event Request Limit Exceeded",
            (1, cs::INVALID_LOG_PAGE) => "Invalid Log Page",
            (1, cs::INVALID_FORMAT) => "Invalid Format",
            (1, cs::INVALID_QUEUE_DELETION) => "Invalid Queue Deletion",
            (1, cs::FEATURE_NOT_CHANGEABLE) => "Feature Not Changeable",
            (1, cs::NS_ALREADY_ATTACHED) => "Namespace Already Attached",
            (1, cs::NS_NOT_ATTACHED) => "Namespace Not Attached",
            (2, 0x80) => "Write Fault",
            (2, 0x81) => "Unrecovered Read Error",
            (2, 0x86) => "Access Denied",
            (3, 0x00) => "Internal Path Error",
            (3, 0x01) => "Asymmetric Access Persistent Loss",
            (3, 0x02) => "Asymmetric Access Inaccessible",
            (3, 0x03) => "Asymmetric Access Transition",
            (3, 0x70) => "Host Pathing Error (controller lost)",
            (3, 0x71) => "Command Aborted By Host (controller reset)",
            _ => return None,
        })
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}")?,
            None => write!(
                f,
                "status code type {:#x}, code {:#04x}",
                self.sct(),
                self.sc()
            )?,
        }
        write!(f, " (sct {:#x}, sc {:#04x}", self.sct(), self.sc())?;
        if self.dnr() {
            write!(f, ", do not retry")?;
        }
        if self.more() {
            write!(f, ", more in the error log")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_and_display() {
        let s = Status::from_field((1 << 8) | 0x02 | (1 << 14) | (1 << 13));
        assert_eq!(s.sct(), 1);
        assert_eq!(s.sc(), 2);
        assert!(s.dnr() && s.more());
        assert!(!s.is_success());
        let text = s.to_string();
        assert!(text.starts_with("Invalid Queue Size"), "{text}");
        assert!(text.contains("do not retry"));
        assert!(Status::from_field(0).is_success());
        assert_eq!(
            Status::generic(generic::LBA_OUT_OF_RANGE).to_string(),
            "LBA Out of Range (sct 0x0, sc 0x80)"
        );
        assert!(Status::from_field(0x7ff)
            .to_string()
            .starts_with("status code type 0x7"));
    }

    #[test]
    fn field_round_trip() {
        let flags = [0, 1 << 11, 2 << 11, 3 << 11, 1 << 13, 1 << 14, 0x7800];
        for sct in 0..8u8 {
            for sc in [0u8, 1, 2, 0x0b, 0x70, 0x71, 0x80, 0xc0, 0xff] {
                for &f in &flags {
                    let field = u16::from(sc) | (u16::from(sct) << 8) | f;
                    let s = Status::from_field(field);
                    assert_eq!(s.field(), field);
                    assert_eq!((s.sct(), s.sc()), (sct, sc), "{field:#x}");
                    assert_eq!(s.crd(), ((f >> 11) & 3) as u8, "{field:#x}");
                    assert_eq!(s.more(), f & (1 << 13) != 0, "{field:#x}");
                    assert_eq!(s.dnr(), f & (1 << 14) != 0, "{field:#x}");
                    // The phase bit is not part of the field.
                    assert_eq!(Status::from_field(field | 0x8000), s);
                    // is_success looks at SCT and SC only, as it did (`sct == 0 && sc == 0`).
                    assert_eq!(s.is_success(), sct == 0 && sc == 0, "{field:#x}");
                    if f == 0 {
                        assert_eq!(Status::new(sct, sc), s);
                        assert_eq!(s == Status::SUCCESS, sct == 0 && sc == 0);
                    } else {
                        // Equality is the whole field: CRD/More/DNR make it differ.
                        assert_ne!(s, Status::new(sct, sc));
                        // ... so a success with them set is not `== SUCCESS`, but is_success.
                        assert_ne!(s, Status::SUCCESS);
                    }
                }
            }
        }
        assert_eq!(Status::generic(0x80), Status::new(sct::GENERIC, 0x80));
        assert_eq!(Status::ABORTED_BY_RESET.field(), 0x371);
        assert_eq!(Status::CONTROLLER_LOST.field(), 0x370);
        assert!(Status::ABORTED_BY_RESET.is_host_failure());
        assert!(Status::from_field(0x4370).is_host_failure());
        assert_eq!(Status::default(), Status::SUCCESS);
        assert!(Status::from_field(0x7800).is_success());
    }
}
