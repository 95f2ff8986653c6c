//! SGL (Scatter Gather List) data pointers for NVMe over PCIe.
//!
//! With PSDT 01b in CDW0 the command's data pointer is one 16-byte SGL descriptor: a Data
//! Block (address, length) when the command moves one contiguous piece, else a Last Segment
//! descriptor pointing at a list of Data Blocks, one per piece, written in the command
//! tracker's preallocated 4 KiB page (256 descriptors: [`MAX_SPANS`](super::spans::MAX_SPANS)).
//! Data Blocks take any byte address and length unless the controller reports dword
//! alignment and granularity (Identify Controller SGLS bits 1:0 = 10b).

use crate::error::{PrpError, SubmitErrorKind};

/// Bytes of one SGL descriptor.
pub(crate) const DESCRIPTOR_BYTES: usize = 16;
/// SGL identifier of a Data Block descriptor (type 0, subtype 0: address).
pub(crate) const DATA_BLOCK: u8 = 0x00;
/// SGL identifier of a Last Segment descriptor (type 3, subtype 0: address).
pub(crate) const LAST_SEGMENT: u8 = 0x30;

/// What a controller's Identify Controller SGLS (bits 1:0) says about SGLs for NVM commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SglSupport {
    /// No SGLs (00b): PRPs only.
    #[default]
    None,
    /// SGLs with no alignment or granularity requirement (01b).
    Any,
    /// SGLs whose Data Blocks must be dword aligned in address and length (10b).
    Dword,
}

impl SglSupport {
    /// From Identify Controller SGLS.
    pub(crate) fn from_sgls(sgls: u32) -> Self {
        match sgls & 3 {
            1 => SglSupport::Any,
            2 => SglSupport::Dword,
            // 11b is reserved: treated as none.
            _ => SglSupport::None,
        }
    }

    /// Whether the controller takes SGLs at all.
    pub(crate) fn supported(self) -> bool {
        self != SglSupport::None
    }

    /// Checks one piece of span `index` against the alignment this support requires.
    pub(crate) fn check_piece(
        self,
        index: usize,
        iova: u64,
        len: usize,
    ) -> Result<(), SubmitErrorKind> {
        if self == SglSupport::Dword && (iova & 3 != 0 || len & 3 != 0) {
            return Err(SubmitErrorKind::SglMisaligned { index, iova, len });
        }
        Ok(())
    }
}

/// Builds the SGL of one command from its pieces in order.
pub(crate) struct SglBuilder<'l> {
    list: &'l mut [u8],
    first: (u64, u32),
    count: usize,
}

impl<'l> SglBuilder<'l> {
    /// A builder writing Data Block descriptors into `list` (the tracker's list page).
    pub(crate) fn new(list: &'l mut [u8]) -> Self {
        SglBuilder {
            list,
            first: (0, 0),
            count: 0,
        }
    }

    /// Adds the next piece: `len` bytes at `iova`.
    pub(crate) fn push(&mut self, iova: u64, len: usize) -> Result<(), PrpError> {
        let at = self.count * DESCRIPTOR_BYTES;
        let have = self.list.len() / DESCRIPTOR_BYTES;
        let Some(d) = self.list.get_mut(at..at + DESCRIPTOR_BYTES) else {
            return Err(PrpError::ListTooSmall {
                have,
                need: self.count + 1,
            });
        };
        let len = u32::try_from(len).map_err(|_| PrpError::TooLarge {
            len,
            max: u32::MAX as usize,
        })?;
        d[..8].copy_from_slice(&iova.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[12..15].fill(0);
        d[15] = DATA_BLOCK;
        if self.count == 0 {
            self.first = (iova, len);
        }
        self.count += 1;
        Ok(())
    }

    /// The command's data pointer: (address, length, SGL identifier) of a Data Block for one
    /// piece, or of a Last Segment over the list at `list_iova`.
    pub(crate) fn finish(&self, list_iova: u64) -> Result<(u64, u32, u8), PrpError> {
        match self.count {
            0 => Err(PrpError::Empty),
            1 => Ok((self.first.0, self.first.1, DATA_BLOCK)),
            n => Ok((list_iova, (n * DESCRIPTOR_BYTES) as u32, LAST_SEGMENT)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_piece_is_a_data_block_more_are_a_last_segment() {
        let mut page = vec![0u8; 4096];
        let mut b = SglBuilder::new(&mut page);
        b.push(0x1001, 511).unwrap();
        assert_eq!(b.finish(0x9000), Ok((0x1001, 511, DATA_BLOCK)));
        b.push(0x5000, 13).unwrap();
        assert_eq!(b.finish(0x9000), Ok((0x9000, 32, LAST_SEGMENT)));
        assert_eq!(&page[..8], &0x1001u64.to_le_bytes());
        assert_eq!(&page[8..12], &511u32.to_le_bytes());
        assert_eq!(page[15], DATA_BLOCK);
        assert_eq!(&page[16..24], &0x5000u64.to_le_bytes());
    }

    #[test]
    fn a_full_page_refuses_more() {
        let mut page = vec![0u8; 32];
        let mut b = SglBuilder::new(&mut page);
        b.push(0, 4).unwrap();
        b.push(4, 4).unwrap();
        assert_eq!(
            b.push(8, 4),
            Err(PrpError::ListTooSmall { have: 2, need: 3 })
        );
        assert_eq!(SglBuilder::new(&mut page).finish(0), Err(PrpError::Empty));
    }

    #[test]
    fn support_from_sgls() {
        assert_eq!(SglSupport::from_sgls(0), SglSupport::None);
        assert_eq!(SglSupport::from_sgls(0x1), SglSupport::Any);
        assert_eq!(SglSupport::from_sgls(0x2 | 1 << 20), SglSupport::Dword);
        assert!(SglSupport::Dword.check_piece(0, 2, 4).is_err());
        assert!(SglSupport::Any.check_piece(0, 2, 3).is_ok());
    }
}
