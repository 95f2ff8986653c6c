//! One raw command of the passthrough calls and its result, as the ABI layer hands them to
//! the driver (`CtrlOps::admin_passthru`, `CtrlOps::io_passthru`).

/// No data moves.
pub const VFNVME_DATA_NONE: u8 = 0;
/// The command reads from the device into the caller's buffer.
pub const VFNVME_DATA_FROM_DEVICE: u8 = 1;
/// The command writes the caller's buffer to the device.
pub const VFNVME_DATA_TO_DEVICE: u8 = 2;

/// One raw command: the submission queue entry's fields the caller chooses (the driver sets
/// the command identifier, PSDT and the data pointer).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PassthruCmd {
    /// Opcode (CDW0 bits 7:0).
    pub opcode: u8,
    /// Must be zero.
    pub reserved: [u8; 3],
    /// Namespace ID (I/O commands: the namespace the command goes to).
    pub nsid: u32,
    /// CDW2.
    pub cdw2: u32,
    /// CDW3.
    pub cdw3: u32,
    /// CDW10.
    pub cdw10: u32,
    /// CDW11.
    pub cdw11: u32,
    /// CDW12.
    pub cdw12: u32,
    /// CDW13.
    pub cdw13: u32,
    /// CDW14.
    pub cdw14: u32,
    /// CDW15.
    pub cdw15: u32,
}

/// The direction and the caller's buffer of a passthrough command.
pub enum PassthruData<'a> {
    /// No data.
    None,
    /// Read `.len()` bytes from the device into this.
    FromDevice(&'a mut [u8]),
    /// Write this to the device.
    ToDevice(&'a [u8]),
}

/// The result of a passthrough command that reached the device: its completion's dword 0
/// and status field (`sct << 8 | sc`, 0 for success).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassthruResult {
    /// Completion dword 0.
    pub cdw0: u32,
    /// `sct << 8 | sc`.
    pub status: u16,
}

/// Copies `src` into `dst` (the device's data) when the command read from the device.
pub(crate) fn deliver(data: PassthruData<'_>, src: &[u8]) {
    if let PassthruData::FromDevice(dst) = data {
        let n = dst.len().min(src.len());
        dst[..n].copy_from_slice(&src[..n]);
    }
}

/// `sct << 8 | sc` of a status.
pub(crate) fn status_field(s: vfnvme::spec::Status) -> u16 {
    u16::from(s.sct()) << 8 | u16::from(s.sc())
}

// The command struct's layout is what the header says: opcode, reserved, nsid and 8 dwords.
const _: () = assert!(std::mem::size_of::<PassthruCmd>() == 40);
