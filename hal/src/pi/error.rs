//! What a PI generation or check can report.

use super::format::PiFormatError;
use thiserror::Error;

/// A failed PI check (with the NVMe status a controller would complete with), or buffers and
/// a format the PI functions can't work on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PiError {
    /// The guard stored with the block is not the CRC of its data (status 2h/82h).
    #[error("end-to-end guard check failed at LBA {lba}: the data's CRC is {expected:#06x}, the stored guard {found:#06x}")]
    Guard {
        /// The block.
        lba: u64,
        /// The guard computed from the data.
        expected: u16,
        /// The guard stored in the PI.
        found: u16,
    },
    /// The application tag differs under the mask (status 2h/83h).
    #[error("end-to-end application tag check failed at LBA {lba}: expected {expected:#06x} under mask {mask:#06x}, found {found:#06x}")]
    AppTag {
        /// The block.
        lba: u64,
        /// The expected tag.
        expected: u16,
        /// The bits compared.
        mask: u16,
        /// The tag stored in the PI.
        found: u16,
    },
    /// The reference tag differs (status 2h/84h).
    #[error("end-to-end reference tag check failed at LBA {lba}: expected {expected:#010x}, found {found:#010x}")]
    RefTag {
        /// The block.
        lba: u64,
        /// The expected tag.
        expected: u32,
        /// The tag stored in the PI.
        found: u32,
    },
    /// The format is unusable.
    #[error(transparent)]
    Format(#[from] PiFormatError),
    /// The format has no protection information.
    #[error("the format has no protection information: there is nothing to generate or check")]
    NoPi,
    /// An extended-layout function was given a separate format, or the other way round.
    #[error("the buffers are laid out {given} but the format says {format}: call the function for the format's layout")]
    Layout {
        /// The layout of the function called.
        given: &'static str,
        /// The layout of the format.
        format: &'static str,
    },
    /// The data buffer is not a whole number of blocks.
    #[error("a data buffer of {len} bytes is not a whole number of {element}-byte blocks")]
    DataLength {
        /// The buffer's length.
        len: usize,
        /// The bytes per block in it.
        element: usize,
    },
    /// The metadata buffer does not hold exactly the metadata of the data's blocks.
    #[error(
        "a metadata buffer of {len} bytes for {blocks} blocks: it must be exactly {expected} bytes"
    )]
    MetadataLength {
        /// The buffer's length.
        len: usize,
        /// The blocks of the data buffer.
        blocks: usize,
        /// The length it must have.
        expected: usize,
    },
}

impl PiError {
    /// Status Code Type 2h (Media and Data Integrity Errors).
    pub const SCT_MEDIA: u8 = 2;

    /// The NVMe status a controller completes a command with for this failure, as
    /// `SCT << 8 | SC` (0x0282 guard, 0x0283 application tag, 0x0284 reference tag, without
    /// DNR); `None` for the errors that are not check failures.
    pub const fn status(&self) -> Option<u16> {
        let sc: u8 = match self {
            PiError::Guard { .. } => 0x82,
            PiError::AppTag { .. } => 0x83,
            PiError::RefTag { .. } => 0x84,
            _ => return None,
        };
        Some((Self::SCT_MEDIA as u16) << 8 | sc as u16)
    }

    /// The LBA of a failed check (`None` for the other errors).
    pub const fn lba(&self) -> Option<u64> {
        match self {
            PiError::Guard { lba, .. }
            | PiError::AppTag { lba, .. }
            | PiError::RefTag { lba, .. } => Some(*lba),
            _ => None,
        }
    }
}
