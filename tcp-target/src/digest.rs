//! CRC32C, the NVMe/TCP header and data digest (HDGST/DDGST): the CRC-32 of iSCSI
//! (`CRC_32_ISCSI`), sent little-endian right after the header or the data it covers.

use crc::{Crc, CRC_32_ISCSI};

/// The CRC32C algorithm (reflected, init and xorout all ones).
const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// Bytes of a digest on the wire.
pub const DIGEST_LEN: usize = 4;

/// The CRC32C of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    CRC32C.checksum(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_check_value() {
        // RFC 3720 / the CRC catalogue: CRC-32/ISCSI of "123456789" is 0xE3069283.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
    }
}
