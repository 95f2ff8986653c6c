//! A namespace's metadata geometry and its protection information settings.

use thiserror::Error;

/// The size of one protection information tuple (16-bit guard format).
pub const PI_BYTES: usize = 8;

/// Protection information type (Identify Namespace DPS bits 2:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PiType {
    /// Type 1: the reference tag is the LBA's low 32 bits.
    Type1,
    /// Type 2: the reference tag starts at the command's initial value, one more per block.
    Type2,
    /// Type 3: the reference tag has no defined meaning (not incremented).
    Type3,
}

impl PiType {
    /// The type from its DPS code (1..=3); `None` for 0 (no PI) and reserved codes.
    pub const fn from_code(code: u8) -> Option<PiType> {
        match code {
            1 => Some(PiType::Type1),
            2 => Some(PiType::Type2),
            3 => Some(PiType::Type3),
            _ => None,
        }
    }

    /// The DPS code of the type (1..=3).
    pub const fn code(self) -> u8 {
        match self {
            PiType::Type1 => 1,
            PiType::Type2 => 2,
            PiType::Type3 => 3,
        }
    }
}

/// Where the PI sits in a block's metadata (Identify Namespace DPS bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PiLocation {
    /// The first 8 bytes of the metadata (DPS bit 3 set).
    First,
    /// The last 8 bytes of the metadata (DPS bit 3 clear); the guard then also covers the
    /// metadata bytes before the PI.
    Last,
}

/// A format the PI functions refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PiFormatError {
    /// Protection information needs at least 8 metadata bytes per block.
    #[error("{ms} metadata bytes per block can't hold 8 bytes of protection information: use a format with at least 8")]
    MetadataTooSmall {
        /// The metadata size given.
        ms: u16,
    },
    /// A block size of 0 bytes.
    #[error("a block size of 0 bytes is not a format: use the namespace's LBA data size")]
    ZeroBlockSize,
}

/// A namespace format as far as metadata and PI go: `block_size` data bytes and `ms` metadata
/// bytes per block, interleaved (`extended`) or in a separate buffer, with PI or without.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PiFormat {
    /// Data bytes per block (the LBA data size).
    pub block_size: u32,
    /// Metadata bytes per block (LBAF.MS).
    pub ms: u16,
    /// Metadata follows each block's data in one buffer (extended LBA, FLBAS bit 4); otherwise
    /// it is in a separate buffer.
    pub extended: bool,
    /// The PI type and position, or `None` for a format without PI.
    pub pi: Option<(PiType, PiLocation)>,
}

impl PiFormat {
    /// A checked format: refuses PI with fewer than 8 metadata bytes and a 0-byte block.
    pub const fn new(
        block_size: u32,
        ms: u16,
        extended: bool,
        pi: Option<(PiType, PiLocation)>,
    ) -> Result<PiFormat, PiFormatError> {
        let format = PiFormat {
            block_size,
            ms,
            extended,
            pi,
        };
        match format.check() {
            Ok(()) => Ok(format),
            Err(e) => Err(e),
        }
    }

    /// Checks the fields (for a format built by hand rather than by [`PiFormat::new`]).
    pub const fn check(&self) -> Result<(), PiFormatError> {
        if self.block_size == 0 {
            return Err(PiFormatError::ZeroBlockSize);
        }
        if self.pi.is_some() && (self.ms as usize) < PI_BYTES {
            return Err(PiFormatError::MetadataTooSmall { ms: self.ms });
        }
        Ok(())
    }

    /// The offset of the PI inside a block's metadata: 0 when first, `ms - 8` when last (also
    /// the number of metadata bytes the guard covers). 0 without PI or if `ms` is below 8.
    pub const fn pi_offset(&self) -> usize {
        match self.pi {
            Some((_, PiLocation::Last)) if self.ms as usize >= PI_BYTES => {
                self.ms as usize - PI_BYTES
            }
            _ => 0,
        }
    }

    /// The Identify Namespace DPS byte of the format: type in bits 2:0, bit 3 for PI first.
    pub const fn dps(&self) -> u8 {
        match self.pi {
            Some((t, PiLocation::First)) => t.code() | 1 << 3,
            Some((t, PiLocation::Last)) => t.code(),
            None => 0,
        }
    }

    /// The bytes one block occupies in the data buffer: data plus, when extended, metadata.
    pub const fn element_size(&self) -> usize {
        self.block_size as usize + if self.extended { self.ms as usize } else { 0 }
    }
}

impl PiType {
    /// The reference tag of a command's first block: the LBA's low 32 bits for type 1, `given`
    /// (the caller's, as in CDW14) for types 2 and 3.
    pub const fn initial_ref(self, first_lba: u64, given: u32) -> u32 {
        match self {
            PiType::Type1 => first_lba as u32,
            PiType::Type2 | PiType::Type3 => given,
        }
    }

    /// The reference tag of block `index` of a command whose first block has `first`:
    /// incremented per block (wrapping) for types 1 and 2, the same for type 3.
    pub const fn ref_at(self, first: u32, index: usize) -> u32 {
        match self {
            PiType::Type1 | PiType::Type2 => first.wrapping_add(index as u32),
            PiType::Type3 => first,
        }
    }
}
