//! The 8-byte protection information tuple with a 16-bit guard.

use super::format::PI_BYTES;

/// One block's protection information: all fields big-endian on the medium and in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Pi {
    /// CRC-16 T10-DIF of the block (see [`super::guard`]).
    pub guard: u16,
    /// The application tag (checked under the command's mask).
    pub app: u16,
    /// The reference tag (the LBA's low 32 bits for type 1).
    pub reference: u32,
}

impl Pi {
    /// PI that disables every check when read back (as an unwritten block has).
    pub const ALL_ONES: Pi = Pi {
        guard: 0xFFFF,
        app: 0xFFFF,
        reference: 0xFFFF_FFFF,
    };

    /// The 8 bytes as stored: guard, application tag, reference tag, each big-endian.
    pub const fn encode(&self) -> [u8; PI_BYTES] {
        let g = self.guard.to_be_bytes();
        let a = self.app.to_be_bytes();
        let r = self.reference.to_be_bytes();
        [g[0], g[1], a[0], a[1], r[0], r[1], r[2], r[3]]
    }

    /// The tuple from its 8 stored bytes.
    pub const fn decode(b: &[u8; PI_BYTES]) -> Pi {
        Pi {
            guard: u16::from_be_bytes([b[0], b[1]]),
            app: u16::from_be_bytes([b[2], b[3]]),
            reference: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// The tuple at the start of `bytes`, or `None` if fewer than 8 bytes are given.
    pub fn read_from(bytes: &[u8]) -> Option<Pi> {
        let b: &[u8; PI_BYTES] = bytes.get(..PI_BYTES)?.try_into().ok()?;
        Some(Pi::decode(b))
    }

    /// Writes the tuple at the start of `bytes`; `false` (nothing written) if they are fewer
    /// than 8.
    pub fn write_to(&self, bytes: &mut [u8]) -> bool {
        match bytes.get_mut(..PI_BYTES) {
            Some(out) => {
                out.copy_from_slice(&self.encode());
                true
            }
            None => false,
        }
    }
}
