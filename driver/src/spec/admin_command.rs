//! Admin commands without a data pointer: what safe code hands to the driver.
//!
//! An [`AdminCommand`] has no PRP, SGL or metadata pointer fields and no CDW0 flags (PSDT,
//! fused), so it can't aim the device at an address. The driver fills in the data pointer from a
//! [`DmaBuffer`](vfnvme_hal::DmaBuffer) it owns for the command's lifetime (see
//! [`Controller::admin_with_data`](crate::Controller::admin_with_data)).
//!
//! The driver must also know how many bytes the command moves, because the device follows the
//! command's own length field (NUMD, AL, the size of an Identify structure), not the buffer's:
//! [`AdminCommand::transfer`] reads it from the command, opcode by opcode. Commands that make
//! the device keep using memory after they complete (queue creation, Doorbell Buffer Config,
//! Host Memory Buffer) or that belong to the driver (queue deletion, Asynchronous Event
//! Requests) are refused; they need the `unsafe` raw form.

use super::command::{admin_opcode, cns, Command};
use thiserror::Error;

/// Admin opcodes beyond those the driver itself issues (NVMe base specification 2.0, Fig. 28).
pub mod opcode {
    pub use super::admin_opcode::*;
    /// Namespace Management.
    pub const NAMESPACE_MANAGEMENT: u8 = 0x0d;
    /// Firmware Commit.
    pub const FIRMWARE_COMMIT: u8 = 0x10;
    /// Firmware Image Download.
    pub const FIRMWARE_IMAGE_DOWNLOAD: u8 = 0x11;
    /// Device Self-test.
    pub const DEVICE_SELF_TEST: u8 = 0x14;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
    /// Directive Send.
    pub const DIRECTIVE_SEND: u8 = 0x19;
    /// Directive Receive.
    pub const DIRECTIVE_RECEIVE: u8 = 0x1a;
    /// Virtualization Management.
    pub const VIRTUALIZATION_MANAGEMENT: u8 = 0x1c;
    /// Capacity Management.
    pub const CAPACITY_MANAGEMENT: u8 = 0x20;
    /// Lockdown.
    pub const LOCKDOWN: u8 = 0x24;
    /// Fabrics commands (not used on PCIe).
    pub const FABRICS: u8 = 0x7f;
    /// Format NVM.
    pub const FORMAT_NVM: u8 = 0x80;
    /// Security Send.
    pub const SECURITY_SEND: u8 = 0x81;
    /// Security Receive.
    pub const SECURITY_RECEIVE: u8 = 0x82;
    /// Sanitize.
    pub const SANITIZE: u8 = 0x84;
    /// Get LBA Status.
    pub const GET_LBA_STATUS: u8 = 0x86;
}

/// Feature identifiers whose Get/Set Features move data through the data pointer.
pub mod data_feature {
    /// LBA Range Type (up to 64 entries of 64 bytes).
    pub const LBA_RANGE_TYPE: u8 = 0x03;
    /// Autonomous Power State Transition (32 entries of 8 bytes).
    pub const AUTONOMOUS_POWER_STATE_TRANSITION: u8 = 0x0c;
    /// Host Memory Buffer (Get: the 4 KiB attributes; Set: refused, it lends host memory).
    pub const HOST_MEMORY_BUFFER: u8 = 0x0d;
    /// Timestamp (8 bytes).
    pub const TIMESTAMP: u8 = 0x0e;
    /// Predictable Latency Mode Config (512 bytes).
    pub const PREDICTABLE_LATENCY_MODE_CONFIG: u8 = 0x13;
    /// Host Behavior Support (512 bytes).
    pub const HOST_BEHAVIOR_SUPPORT: u8 = 0x16;
    /// Host Identifier (8 or 16 bytes).
    pub const HOST_IDENTIFIER: u8 = 0x81;
}

/// The largest transfer the driver accepts for a command whose length it can't read from the
/// command (vendor-specific opcodes and features): one page, see [`DataTransfer::Unknown`].
pub const UNKNOWN_TRANSFER_MAX: usize = 4096;

/// How many bytes a command moves through its data pointer, as the device will compute it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataTransfer {
    /// The command has no data (its data pointer is ignored).
    None,
    /// Exactly this many bytes, read from the command (e.g. NUMD of Get Log Page).
    Bytes(u64),
    /// The driver can't tell (vendor-specific opcode or feature, or a reserved value). The
    /// driver accepts at most [`UNKNOWN_TRANSFER_MAX`] bytes of buffer and points everything past
    /// it at scratch pages, so a longer transfer lands in memory no one else uses.
    Unknown,
}

/// Why an admin command can't go through the safe API.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AdminCommandError {
    /// The command would give the device memory to keep using after it completes, or it
    /// manages a queue the driver owns.
    #[error("admin opcode {opcode:#04x} ({what}) can't be sent through the safe admin API because {why}: the driver issues it itself; only the unsafe `Controller::admin_sync` takes it")]
    DriverOwned {
        /// The opcode.
        opcode: u8,
        /// The command's name.
        what: &'static str,
        /// Why it is refused.
        why: &'static str,
    },
    /// A raw [`Command`] with a data or metadata pointer, or CDW0 flags, was converted.
    #[error("admin command {opcode:#04x} carries a data pointer, metadata pointer or CDW0 flags (PRP1 {prp1:#x}, PRP2 {prp2:#x}, MPTR {mptr:#x}, CDW0 {cdw0:#x}): pass the data as a DmaBuffer instead and leave these fields zero")]
    PointerSet {
        /// The opcode.
        opcode: u8,
        /// PRP1 (or SGL first half).
        prp1: u64,
        /// PRP2 (or SGL second half).
        prp2: u64,
        /// Metadata pointer.
        mptr: u64,
        /// CDW0 as given.
        cdw0: u32,
    },
    /// The command moves more bytes than the buffer holds.
    #[error("admin command {opcode:#04x} transfers {needed} bytes but the buffer holds {len}: allocate at least {needed} bytes or shorten the command's length field")]
    BufferTooSmall {
        /// The opcode.
        opcode: u8,
        /// Bytes the command moves.
        needed: u64,
        /// The buffer's length.
        len: usize,
    },
    /// The command moves data but no buffer was given.
    #[error("admin command {opcode:#04x} transfers {needed} bytes: give it a buffer (Controller::admin_with_data / admin_read / admin_write)")]
    NeedsBuffer {
        /// The opcode.
        opcode: u8,
        /// Bytes the command moves.
        needed: u64,
    },
    /// The transfer is longer than one command may carry.
    #[error("admin command {opcode:#04x} transfers {len} bytes, more than the {max} bytes one command may carry here: split it (e.g. Get Log Page with an offset)")]
    TooLarge {
        /// The opcode.
        opcode: u8,
        /// Bytes asked for.
        len: u64,
        /// The limit (MDTS, at most 2 MiB).
        max: usize,
    },
    /// A buffer over one page for a command whose length the driver can't read.
    #[error("admin command {opcode:#04x} (vendor-specific or reserved) has no length the driver can read, so its buffer may be at most {max} bytes, not {len}: use a standard command, or the unsafe `Controller::admin_sync`")]
    UnknownLength {
        /// The opcode.
        opcode: u8,
        /// The buffer's length.
        len: usize,
        /// [`UNKNOWN_TRANSFER_MAX`].
        max: usize,
    },
    /// A length or field out of the command's range (e.g. a log length that is not a
    /// multiple of 4).
    #[error("admin command {opcode:#04x}: {what}")]
    BadField {
        /// The opcode.
        opcode: u8,
        /// What is wrong and how to fix it.
        what: &'static str,
    },
}

/// An admin submission queue entry without any pointer: opcode, nsid and command dwords.
///
/// Build one with the constructors (`AdminCommand::identify_controller()`,
/// `AdminCommand::get_log_page(..)`, ...) or field by field for a passthrough command
/// (`AdminCommand { opcode: 0xc0, cdw10: 1, ..Default::default() }`). The driver sets the
/// command identifier and the data pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdminCommand {
    /// Opcode (CDW0 bits 7:0).
    pub opcode: u8,
    /// Namespace ID.
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

impl TryFrom<Command> for AdminCommand {
    type Error = AdminCommandError;
    /// Drops nothing: a command with a data pointer, a metadata pointer, PSDT/fused bits or a
    /// command identifier set is refused rather than silently stripped.
    fn try_from(c: Command) -> Result<Self, Self::Error> {
        if c.prp1 != 0 || c.prp2 != 0 || c.mptr != 0 || c.cdw0 & !0xff != 0 {
            return Err(AdminCommandError::PointerSet {
                opcode: c.opcode(),
                prp1: c.prp1,
                prp2: c.prp2,
                mptr: c.mptr,
                cdw0: c.cdw0,
            });
        }
        Ok(Self::of(c))
    }
}

/// The settings of a Format NVM command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FormatSettings {
    /// LBA format index (0..=63).
    pub lbaf: u8,
    /// Secure Erase Settings: 0 none, 1 user data erase, 2 cryptographic erase.
    pub ses: u8,
    /// Protection information type (0 none, 1..=3).
    pub pi: u8,
    /// The PI in the first 8 bytes of the metadata (PIL); else the last.
    pub pi_first: bool,
    /// Metadata after each block in the data buffer (MSET: extended LBAs); else a buffer of
    /// its own.
    pub extended: bool,
}

impl AdminCommand {
    /// A command with only the opcode set.
    pub const fn new(opcode: u8) -> Self {
        AdminCommand {
            opcode,
            nsid: 0,
            cdw2: 0,
            cdw3: 0,
            cdw10: 0,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
            cdw15: 0,
        }
    }

    /// The dword fields of `c` (its pointers are not copied).
    fn of(c: Command) -> Self {
        AdminCommand {
            opcode: c.opcode(),
            nsid: c.nsid,
            cdw2: c.cdw2,
            cdw3: c.cdw3,
            cdw10: c.cdw10,
            cdw11: c.cdw11,
            cdw12: c.cdw12,
            cdw13: c.cdw13,
            cdw14: c.cdw14,
            cdw15: c.cdw15,
        }
    }

    /// The submission queue entry with a zero data pointer and command identifier.
    pub fn to_command(&self) -> Command {
        let mut c = Command::new(self.opcode);
        c.nsid = self.nsid;
        c.cdw2 = self.cdw2;
        c.cdw3 = self.cdw3;
        c.cdw10 = self.cdw10;
        c.cdw11 = self.cdw11;
        c.cdw12 = self.cdw12;
        c.cdw13 = self.cdw13;
        c.cdw14 = self.cdw14;
        c.cdw15 = self.cdw15;
        c
    }

    // ---- Builders (the encodings are those of `Command`'s builders) ----

    /// Identify with the given CNS, NSID, CNTID and CSI (4 KiB of data).
    pub fn identify(cns: u8, nsid: u32, cntid: u16, csi: u8) -> Self {
        Self::of(Command::identify(cns, nsid, cntid, csi, 0))
    }
    /// Identify Controller (CNS 01h).
    pub fn identify_controller() -> Self {
        Self::identify(cns::CONTROLLER, 0, 0, 0)
    }
    /// Identify Namespace (CNS 00h).
    pub fn identify_namespace(nsid: u32) -> Self {
        Self::identify(cns::NAMESPACE, nsid, 0, 0)
    }
    /// Active Namespace ID list (CNS 02h): active nsids greater than `after_nsid`.
    pub fn identify_active_ns_list(after_nsid: u32) -> Self {
        Self::identify(cns::ACTIVE_NS_LIST, after_nsid, 0, 0)
    }
    /// Get Log Page `lid` for `nsid`: `len` bytes (a multiple of 4, ≥ 4) from byte `offset`.
    pub fn get_log_page(lid: u8, nsid: u32, len: u32, offset: u64, rae: bool) -> Self {
        Self::of(Command::get_log_page(lid, nsid, len, offset, rae, 0))
    }
    /// Get Features for `fid` (CDW10 SEL = current; put other selections in bits 10:8).
    pub fn get_features(fid: u8, cdw11: u32) -> Self {
        Self::of(Command::get_features(fid, cdw11))
    }
    /// Set Features for `fid` with value `cdw11` (not saved across resets).
    pub fn set_features(fid: u8, cdw11: u32) -> Self {
        Self::of(Command::set_features(fid, cdw11))
    }
    /// Set Features, Number of Queues: ask for `sq`/`cq` I/O queues (not 0's based, ≥ 1).
    pub fn set_number_of_queues(sq: u16, cq: u16) -> Self {
        Self::of(Command::set_number_of_queues(sq, cq))
    }
    /// Namespace Attachment: attach (`attach == true`) or detach `nsid` to/from the
    /// controllers of the 4 KiB controller list that goes with the command.
    pub fn namespace_attachment(nsid: u32, attach: bool) -> Self {
        Self::of(Command::namespace_attachment(nsid, attach, 0))
    }
    /// Namespace Management, create (SEL 0) for command set `csi`; the 4 KiB host buffer holds
    /// the namespace's Identify Namespace fields (NSZE, NCAP, FLBAS, DPS, NMIC, ...).
    pub fn namespace_create(csi: u8) -> Self {
        let mut c = Self::new(opcode::NAMESPACE_MANAGEMENT);
        c.cdw11 = u32::from(csi) << 24;
        c
    }
    /// Namespace Management, delete (SEL 1) namespace `nsid` (`0xffffffff` = all).
    pub fn namespace_delete(nsid: u32) -> Self {
        let mut c = Self::new(opcode::NAMESPACE_MANAGEMENT);
        c.nsid = nsid;
        c.cdw10 = 1;
        c
    }
    /// Format NVM of `nsid` with LBA format `lbaf` (0..=63) and Secure Erase Settings `ses`
    /// (0 none, 1 user data erase, 2 cryptographic erase); no protection information.
    pub fn format_nvm(nsid: u32, lbaf: u8, ses: u8) -> Self {
        Self::format_nvm_with(
            nsid,
            FormatSettings {
                lbaf,
                ses,
                ..FormatSettings::default()
            },
        )
    }
    /// Format NVM of `nsid` with `s` (LBA format, secure erase, PI type and place, extended
    /// LBAs): CDW10 as the specification lays it out.
    pub fn format_nvm_with(nsid: u32, s: FormatSettings) -> Self {
        let mut c = Self::new(opcode::FORMAT_NVM);
        c.nsid = nsid;
        let lbaf = u32::from(s.lbaf & 0x3f);
        c.cdw10 = (lbaf & 0xf)
            | u32::from(s.extended) << 4
            | u32::from(s.pi & 0x7) << 5
            | u32::from(s.pi_first) << 8
            | u32::from(s.ses & 0x7) << 9
            | (lbaf >> 4) << 12;
        c
    }
    /// Firmware Image Download of `len` bytes (a multiple of 4) at byte `offset` (a multiple
    /// of 4) of the image.
    pub fn firmware_image_download(offset: u32, len: u32) -> Self {
        let mut c = Self::new(opcode::FIRMWARE_IMAGE_DOWNLOAD);
        c.cdw10 = (len / 4).saturating_sub(1);
        c.cdw11 = offset / 4;
        c
    }
    /// Firmware Commit: `action` (Commit Action, 0..=7) for firmware `slot` (0..=7).
    pub fn firmware_commit(slot: u8, action: u8) -> Self {
        let mut c = Self::new(opcode::FIRMWARE_COMMIT);
        c.cdw10 = u32::from(slot & 0x7) | (u32::from(action & 0x7) << 3);
        c
    }
    /// Sanitize with action `sanact` (1 exit failure mode, 2 block erase, 3 overwrite,
    /// 4 crypto erase), Allow Unrestricted Sanitize Exit `ause`, and the overwrite pattern.
    pub fn sanitize(sanact: u8, ause: bool, overwrite_pattern: u32) -> Self {
        let mut c = Self::new(opcode::SANITIZE);
        c.cdw10 = u32::from(sanact & 0x7) | (u32::from(ause) << 3);
        c.cdw11 = overwrite_pattern;
        c
    }

    /// How many bytes the device will move through the data pointer for this command, read
    /// from the command the way the device reads it. Refuses the commands the safe API must
    /// not send (see the module documentation).
    pub fn transfer(&self) -> Result<DataTransfer, AdminCommandError> {
        use opcode as op;
        let refuse = |what, why| {
            Err(AdminCommandError::DriverOwned {
                opcode: self.opcode,
                what,
                why,
            })
        };
        const QUEUE: &str = "the driver owns the I/O queues";
        let dwords = |numd: u64| DataTransfer::Bytes((numd + 1) * 4);
        Ok(match self.opcode {
            op::DELETE_IO_SQ => return refuse("Delete I/O Submission Queue", QUEUE),
            op::CREATE_IO_SQ => return refuse("Create I/O Submission Queue", QUEUE),
            op::DELETE_IO_CQ => return refuse("Delete I/O Completion Queue", QUEUE),
            op::CREATE_IO_CQ => return refuse("Create I/O Completion Queue", QUEUE),
            op::ASYNC_EVENT_REQUEST => {
                return refuse(
                    "Asynchronous Event Request",
                    "the driver keeps its AERs outstanding",
                )
            }
            op::DOORBELL_BUFFER_CONFIG => {
                return refuse(
                    "Doorbell Buffer Config",
                    "the device keeps using its pages after it completes",
                )
            }
            op::FABRICS => return refuse("Fabrics", "it does not exist on PCIe"),
            op::GET_LOG_PAGE => {
                dwords(u64::from(self.cdw10 >> 16) | u64::from(self.cdw11 & 0xffff) << 16)
            }
            op::IDENTIFY => DataTransfer::Bytes(4096),
            op::SET_FEATURES | op::GET_FEATURES => {
                let fid = self.cdw10 as u8;
                let set = self.opcode == op::SET_FEATURES;
                match fid {
                    data_feature::HOST_MEMORY_BUFFER if set => {
                        return refuse(
                            "Set Features, Host Memory Buffer",
                            "it lends host memory to the device for as long as it runs",
                        )
                    }
                    data_feature::LBA_RANGE_TYPE | data_feature::HOST_MEMORY_BUFFER => {
                        DataTransfer::Bytes(4096)
                    }
                    data_feature::AUTONOMOUS_POWER_STATE_TRANSITION => DataTransfer::Bytes(256),
                    data_feature::TIMESTAMP => DataTransfer::Bytes(8),
                    data_feature::PREDICTABLE_LATENCY_MODE_CONFIG
                    | data_feature::HOST_BEHAVIOR_SUPPORT => DataTransfer::Bytes(512),
                    // EXHID (CDW11 bit 0) selects the 16-byte form; 16 covers both.
                    data_feature::HOST_IDENTIFIER => DataTransfer::Bytes(16),
                    // Features whose value is in CDW11..CDW15 and DW0 only.
                    0x01
                    | 0x02
                    | 0x04..=0x0b
                    | 0x0f..=0x12
                    | 0x14
                    | 0x15
                    | 0x17..=0x1b
                    | 0x80
                    | 0x82..=0x84 => DataTransfer::None,
                    _ => DataTransfer::Unknown,
                }
            }
            op::ABORT
            | op::FIRMWARE_COMMIT
            | op::DEVICE_SELF_TEST
            | op::KEEP_ALIVE
            | op::VIRTUALIZATION_MANAGEMENT
            | op::CAPACITY_MANAGEMENT
            | op::LOCKDOWN
            | op::FORMAT_NVM
            | op::SANITIZE => DataTransfer::None,
            op::NAMESPACE_MANAGEMENT => match self.cdw10 & 0xf {
                0 => DataTransfer::Bytes(4096),
                1 => DataTransfer::None,
                _ => DataTransfer::Unknown,
            },
            op::NAMESPACE_ATTACHMENT => DataTransfer::Bytes(4096),
            op::FIRMWARE_IMAGE_DOWNLOAD => dwords(u64::from(self.cdw10)),
            op::DIRECTIVE_SEND | op::DIRECTIVE_RECEIVE => dwords(u64::from(self.cdw10)),
            op::SECURITY_SEND | op::SECURITY_RECEIVE => match self.cdw11 {
                0 => DataTransfer::None,
                al => DataTransfer::Bytes(u64::from(al)),
            },
            op::GET_LBA_STATUS => dwords(u64::from(self.cdw12)),
            _ => DataTransfer::Unknown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_settings_land_in_their_cdw10_bits() {
        let c = AdminCommand::format_nvm_with(
            1,
            FormatSettings {
                lbaf: 0x13,
                ses: 2,
                pi: 3,
                pi_first: true,
                extended: true,
            },
        );
        // LBAF low nibble 3:0, MSET 4, PI 7:5, PIL 8, SES 11:9, LBAF high bits 13:12.
        assert_eq!(c.cdw10, 0x3 | 1 << 4 | 3 << 5 | 1 << 8 | 2 << 9 | 1 << 12);
        assert_eq!(AdminCommand::format_nvm(1, 2, 0).cdw10, 2);
    }

    #[test]
    fn builders_match_the_raw_encodings_without_pointers() {
        let raw = Command::get_log_page(0x02, 0xffff_ffff, 16384, 8, true, 0x1234_5000);
        let safe = AdminCommand::get_log_page(0x02, 0xffff_ffff, 16384, 8, true).to_command();
        assert_eq!(safe.prp1, 0);
        assert_eq!(
            (safe.cdw10, safe.cdw11, safe.cdw12),
            (raw.cdw10, raw.cdw11, raw.cdw12)
        );
        assert_eq!(safe.nsid, raw.nsid);
        let f = AdminCommand::format_nvm(3, 0x13, 2);
        assert_eq!(f.cdw10, 0x3 | (2 << 9) | (1 << 12));
        let d = AdminCommand::firmware_image_download(8192, 4096);
        assert_eq!((d.cdw10, d.cdw11), (1023, 2048));
    }

    #[test]
    fn transfer_lengths_come_from_the_command() {
        let t = |c: AdminCommand| c.transfer().unwrap();
        assert_eq!(
            t(AdminCommand::get_log_page(2, 0, 16384, 0, false)),
            DataTransfer::Bytes(16384)
        );
        // 1 MiB: NUMD spans CDW10 and CDW11.
        assert_eq!(
            t(AdminCommand::get_log_page(2, 0, 1 << 20, 0, false)),
            DataTransfer::Bytes(1 << 20)
        );
        assert_eq!(
            t(AdminCommand::identify_namespace(1)),
            DataTransfer::Bytes(4096)
        );
        assert_eq!(
            t(AdminCommand::set_number_of_queues(4, 4)),
            DataTransfer::None
        );
        assert_eq!(
            t(AdminCommand::get_features(data_feature::TIMESTAMP, 0)),
            DataTransfer::Bytes(8)
        );
        assert_eq!(
            t(AdminCommand::get_features(0xc1, 0)),
            DataTransfer::Unknown
        );
        assert_eq!(
            t(AdminCommand::firmware_image_download(0, 8192)),
            DataTransfer::Bytes(8192)
        );
        assert_eq!(t(AdminCommand::namespace_delete(1)), DataTransfer::None);
        assert_eq!(t(AdminCommand::new(0xc0)), DataTransfer::Unknown);
        // Directive Receive: NUMD (0's based) in CDW10; Security Receive: AL bytes in CDW11.
        let dir = AdminCommand {
            opcode: opcode::DIRECTIVE_RECEIVE,
            cdw10: 127,
            cdw11: 0xffff_ffff,
            ..Default::default()
        };
        assert_eq!(t(dir), DataTransfer::Bytes(512));
        let sec = AdminCommand {
            opcode: opcode::SECURITY_RECEIVE,
            cdw10: 0xffff_ffff,
            cdw11: 2048,
            ..Default::default()
        };
        assert_eq!(t(sec), DataTransfer::Bytes(2048));
    }

    #[test]
    fn driver_owned_commands_are_refused() {
        for c in [
            AdminCommand::new(opcode::CREATE_IO_SQ),
            AdminCommand::new(opcode::CREATE_IO_CQ),
            AdminCommand::new(opcode::DELETE_IO_SQ),
            AdminCommand::new(opcode::DELETE_IO_CQ),
            AdminCommand::new(opcode::ASYNC_EVENT_REQUEST),
            AdminCommand::new(opcode::DOORBELL_BUFFER_CONFIG),
            AdminCommand::set_features(data_feature::HOST_MEMORY_BUFFER, 1),
        ] {
            assert!(
                matches!(c.transfer(), Err(AdminCommandError::DriverOwned { opcode, .. }) if opcode == c.opcode),
                "{c:?}"
            );
        }
        // Reading the Host Memory Buffer attributes is fine.
        assert_eq!(
            AdminCommand::get_features(data_feature::HOST_MEMORY_BUFFER, 0).transfer(),
            Ok(DataTransfer::Bytes(4096))
        );
    }

    #[test]
    fn raw_commands_with_pointers_do_not_convert() {
        assert!(AdminCommand::try_from(Command::identify_controller(0x5000)).is_err());
        let mut psdt = Command::identify_controller(0);
        psdt.cdw0 |= 1 << 14;
        assert!(AdminCommand::try_from(psdt).is_err());
        let mut mptr = Command::get_features(1, 0);
        mptr.mptr = 0x1000;
        assert!(AdminCommand::try_from(mptr).is_err());
        assert_eq!(
            AdminCommand::try_from(Command::get_features(1, 7)),
            Ok(AdminCommand::get_features(1, 7))
        );
    }
}
