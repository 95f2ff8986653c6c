//! The 16-byte completion queue entry.

use super::status::Status;

/// A completion queue entry, laid out exactly as the controller writes it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    /// DW0: command specific result.
    pub dw0: u32,
    /// DW1: command specific result.
    pub dw1: u32,
    /// SQ head pointer at the time of the completion.
    pub sq_head: u16,
    /// The submission queue the command came from.
    pub sq_id: u16,
    /// The command identifier.
    pub cid: u16,
    /// Phase tag (bit 0) and status field (bits 15:1).
    pub status_phase: u16,
}

const _: () = assert!(std::mem::size_of::<Completion>() == 16);

impl Completion {
    /// The phase tag.
    #[inline(always)]
    pub const fn phase(&self) -> bool {
        self.status_phase & 1 != 0
    }
    /// The decoded status field.
    #[inline(always)]
    pub const fn status(&self) -> Status {
        Status::from_field(self.status_phase >> 1)
    }
    /// Decodes 16 little-endian bytes.
    pub fn from_bytes(b: &[u8; 16]) -> Self {
        let dw = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let w = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Completion {
            dw0: dw(0),
            dw1: dw(4),
            sq_head: w(8),
            sq_id: w(10),
            cid: w(12),
            status_phase: w(14),
        }
    }
    /// Encodes into 16 little-endian bytes.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.dw0.to_le_bytes());
        b[4..8].copy_from_slice(&self.dw1.to_le_bytes());
        b[8..10].copy_from_slice(&self.sq_head.to_le_bytes());
        b[10..12].copy_from_slice(&self.sq_id.to_le_bytes());
        b[12..14].copy_from_slice(&self.cid.to_le_bytes());
        b[14..16].copy_from_slice(&self.status_phase.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_fields() {
        let mut b = [0u8; 16];
        b[0] = 0x11;
        b[8] = 5;
        b[10] = 2;
        b[12] = 0x34;
        b[13] = 0x12;
        // phase 1, SC 0x80 (LBA out of range), SCT 0, DNR
        let sf: u16 = 1 | (0x80 << 1) | (1 << 15);
        b[14..16].copy_from_slice(&sf.to_le_bytes());
        let c = Completion::from_bytes(&b);
        assert_eq!(c.dw0, 0x11);
        assert_eq!(c.sq_head, 5);
        assert_eq!(c.sq_id, 2);
        assert_eq!(c.cid, 0x1234);
        assert!(c.phase());
        let s = c.status();
        assert_eq!((s.sct(), s.sc(), s.dnr(), s.more()), (0, 0x80, true, false));
        assert_eq!(c.to_bytes(), b);
        assert_eq!(std::mem::offset_of!(Completion, cid), 12);
        assert_eq!(std::mem::offset_of!(Completion, status_phase), 14);
    }
}
