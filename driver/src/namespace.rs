//! One namespace as the driver knows it: identity, format, size and state. A leaf value type:
//! queues use it without the registry, scan and events of [`crate::namespaces`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// What identifies a namespace across rescans. If any of it changes, the namespace is treated as
/// removed and a new one added (a format or identity change is not a resize).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NamespaceIdentity {
    /// IEEE Extended Unique Identifier (0 when not reported).
    pub eui64: [u8; 8],
    /// Namespace Globally Unique Identifier (0 when not reported).
    pub nguid: [u8; 16],
    /// Namespace UUID (0 when not reported).
    pub uuid: [u8; 16],
    /// Command Set Identifier (0 = NVM).
    pub csi: u8,
    /// log2 of the LBA data size.
    pub lba_shift: u8,
    /// Metadata bytes per LBA.
    pub metadata_size: u16,
    /// Whether the metadata is transferred at the end of each LBA in the data buffer (FLBAS
    /// bit 4, extended LBA); otherwise it has its own buffer (MPTR).
    pub metadata_extended: bool,
    /// End-to-end protection information type in use (DPS bits 2:0; 0 = none).
    pub protection_type: u8,
    /// The protection information is in the first 8 bytes of the metadata (DPS bit 3);
    /// otherwise in the last 8.
    pub protection_first: bool,
    /// ANA group (Identify Namespace ANAGRPID; 0 when the controller reports no ANA).
    pub anagrpid: u32,
    /// The namespace may be attached to several controllers of its subsystem (Identify
    /// Namespace NMIC bit 0): the same nsid names it on every one of them.
    pub shared: bool,
}

impl NamespaceIdentity {
    /// Whether vfnvme can do I/O on this format: only formats without metadata and without
    /// protection information (metadata transfer is not implemented).
    #[inline]
    pub fn io_supported(&self) -> bool {
        self.metadata_size == 0 && self.protection_type == 0
    }

    /// The format's metadata (displays as e.g. `no metadata`, `8 B metadata per block
    /// (extended LBA)`, `16 B metadata per block (separate buffer), protection information
    /// type 1`, `..., protection information type 1 (first 8 bytes)`).
    pub fn metadata_format(&self) -> MetadataFormat {
        MetadataFormat {
            size: self.metadata_size,
            extended: self.metadata_extended,
            protection_type: self.protection_type,
            protection_first: self.protection_first,
        }
    }

    /// Whether `other` has the same format: block size, metadata (size and place) and
    /// protection information (type and place). The paths of one multipath head must agree on
    /// it: the same LBA must mean the same bytes on every path.
    pub fn same_format(&self, other: &NamespaceIdentity) -> bool {
        (
            self.lba_shift,
            self.metadata_size,
            self.metadata_extended,
            self.protection_type,
            self.protection_first,
        ) == (
            other.lba_shift,
            other.metadata_size,
            other.metadata_extended,
            other.protection_type,
            other.protection_first,
        )
    }

    /// The LBA format as storage engineers write it: `512`, `4096+8`, `4096+8, PI type 1,
    /// first` (the protection information's place in the metadata), `4096+64 separate`.
    pub fn format_label(&self) -> String {
        let block = 1u64 << self.lba_shift.min(63);
        let md = self.metadata_format();
        if md.size == 0 && md.protection_type == 0 {
            return block.to_string();
        }
        let mut s = format!("{block}+{}", md.size);
        if !md.extended {
            s.push_str(" separate");
        }
        if md.protection_type != 0 {
            let place = if md.protection_first { "first" } else { "last" };
            s.push_str(&format!(", PI type {}, {place}", md.protection_type));
        }
        s
    }
}

/// The metadata of a namespace's LBA format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetadataFormat {
    /// Metadata bytes per block.
    pub size: u16,
    /// In the data buffer after each block (extended LBA) rather than in a separate buffer.
    pub extended: bool,
    /// Protection information type (0 = none).
    pub protection_type: u8,
    /// The protection information is in the first 8 bytes of the metadata (else the last).
    pub protection_first: bool,
}

impl MetadataFormat {
    /// A short form for tables: `none`, `8 ext`, `16 sep`, `8 ext pi1`, `8 ext pi1f` (PI in
    /// the first bytes).
    pub fn short(&self) -> String {
        if self.size == 0 && self.protection_type == 0 {
            return "none".into();
        }
        let layout = if self.extended { "ext" } else { "sep" };
        match self.protection_type {
            0 => format!("{} {layout}", self.size),
            t => {
                let first = if self.protection_first { "f" } else { "" };
                format!("{} {layout} pi{t}{first}", self.size)
            }
        }
    }
}

impl std::fmt::Display for MetadataFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.size == 0 && self.protection_type == 0 {
            return f.write_str("no metadata");
        }
        let layout = if self.extended {
            "extended LBA"
        } else {
            "separate buffer"
        };
        write!(f, "{} B metadata per block ({layout})", self.size)?;
        if self.protection_type != 0 {
            write!(f, ", protection information type {}", self.protection_type)?;
            if self.protection_first {
                f.write_str(" (first 8 bytes)")?;
            }
        }
        Ok(())
    }
}

/// The lifecycle state of a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum NamespaceState {
    /// Usable for I/O.
    Active = 0,
    /// Being removed: new I/O is refused, in-flight I/O drains or fails.
    Removing = 1,
    /// Gone from the controller.
    Removed = 2,
}

/// One namespace of one controller.
///
/// Size and state are atomics so that a resize or a removal updates the namespace in place while
/// I/O paths read it without locks.
#[derive(Debug)]
pub struct Namespace {
    nsid: u32,
    identity: NamespaceIdentity,
    blocks: AtomicU64,
    /// The [`NamespaceState`], plus [`REFUSED_BIT`] when I/O is refused for the format, so
    /// that the I/O path checks both with one load and one compare ([`Namespace::io_ready`]).
    state: AtomicU32,
    /// `!identity.io_supported()`.
    io_refused: bool,
}

/// Set in a namespace's state byte when its format takes no I/O.
const REFUSED_BIT: u32 = 0x80;

impl Namespace {
    /// A namespace with `blocks` logical blocks of `1 << identity.lba_shift` bytes.
    pub fn new(nsid: u32, identity: NamespaceIdentity, blocks: u64) -> Self {
        Namespace {
            nsid,
            identity,
            blocks: AtomicU64::new(blocks),
            state: AtomicU32::new(
                NamespaceState::Active as u32
                    | if identity.io_supported() {
                        0
                    } else {
                        REFUSED_BIT
                    },
            ),
            io_refused: !identity.io_supported(),
        }
    }
    /// The namespace ID.
    #[inline]
    pub fn nsid(&self) -> u32 {
        self.nsid
    }
    /// Identity and format.
    #[inline]
    pub fn identity(&self) -> &NamespaceIdentity {
        &self.identity
    }
    /// Whether I/O to this namespace is refused because its format has metadata or protection
    /// information (see [`NamespaceIdentity::io_supported`]).
    #[inline]
    pub fn io_refused(&self) -> bool {
        self.io_refused
    }
    /// Whether I/O may be submitted: active, and a format without metadata (one load).
    #[inline(always)]
    pub fn io_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == NamespaceState::Active as u32
    }
    /// The LBA data size in bytes.
    #[inline]
    pub fn lba_size(&self) -> u32 {
        1u32 << self.identity.lba_shift
    }
    /// log2 of the LBA data size.
    #[inline]
    pub fn lba_shift(&self) -> u8 {
        self.identity.lba_shift
    }
    /// The size in logical blocks (NSZE).
    #[inline]
    pub fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::Acquire)
    }
    /// The size in bytes (`u64::MAX` if NSZE is too large for that to fit: it comes from the
    /// device).
    pub fn size_bytes(&self) -> u64 {
        self.blocks().saturating_mul(u64::from(self.lba_size()))
    }
    /// Updates the size in place (a resize event).
    pub fn set_blocks(&self, blocks: u64) {
        self.blocks.store(blocks, Ordering::Release);
    }
    /// The current state.
    #[inline]
    pub fn state(&self) -> NamespaceState {
        match self.state.load(Ordering::Acquire) & !REFUSED_BIT {
            0 => NamespaceState::Active,
            1 => NamespaceState::Removing,
            _ => NamespaceState::Removed,
        }
    }
    /// Moves the namespace to `state`.
    pub fn set_state(&self, state: NamespaceState) {
        let refused = if self.io_refused { REFUSED_BIT } else { 0 };
        let byte = state as u32 | refused;
        self.state.store(byte, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(lba_shift: u8, ms: u16, extended: bool, pi: u8, first: bool) -> NamespaceIdentity {
        NamespaceIdentity {
            lba_shift,
            metadata_size: ms,
            metadata_extended: extended,
            protection_type: pi,
            protection_first: first,
            ..NamespaceIdentity::default()
        }
    }

    #[test]
    fn formats_are_labelled_as_storage_engineers_write_them() {
        assert_eq!(id(9, 0, false, 0, false).format_label(), "512");
        assert_eq!(id(12, 8, true, 0, false).format_label(), "4096+8");
        assert_eq!(
            id(12, 64, false, 0, false).format_label(),
            "4096+64 separate"
        );
        assert_eq!(
            id(12, 8, true, 1, true).format_label(),
            "4096+8, PI type 1, first"
        );
        assert_eq!(
            id(9, 16, false, 3, false).format_label(),
            "512+16 separate, PI type 3, last"
        );
        assert_eq!(
            id(12, 8, true, 2, true).metadata_format().short(),
            "8 ext pi2f"
        );
        assert_eq!(
            id(12, 8, true, 2, false).metadata_format().short(),
            "8 ext pi2"
        );
        assert_eq!(
            id(12, 8, true, 1, true).metadata_format().to_string(),
            "8 B metadata per block (extended LBA), protection information type 1 (first 8 bytes)"
        );
        // A device's out-of-range block size does not overflow the label.
        assert_eq!(
            id(200, 0, false, 0, false).format_label(),
            (1u64 << 63).to_string()
        );
    }
}
