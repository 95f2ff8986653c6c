//! End-to-end data protection (NVMe protection information, T10 DIF) computed on the host:
//! the math that both the driver (PRACT=0: the host generates and checks PI) and the model
//! (PRACT=1 and PRCHK: the device does) use, so that neither crate depends on the other.
//!
//! - [`format`](mod@format): a namespace's metadata geometry ([`PiFormat`]: block size, metadata size,
//!   extended or separate, PI type and position) and its validation.
//! - [`tuple`](mod@tuple): the 8-byte PI tuple ([`Pi`]: guard, application tag, reference tag), big-endian.
//! - [`guard()`]: the 16-bit guard, CRC-16 T10-DIF (polynomial 0x8BB7, seed 0), table-driven.
//! - [`generate`]: writing PI for each block ([`generate_extended`], [`generate_separate`],
//!   and the controller's PRACT variants [`insert_extended`], [`insert_separate`]).
//! - [`verify`]: checking it ([`verify_extended`], [`verify_separate`]) per [`PiChecks`],
//!   with the skips of the specification (application tag FFFFh; for type 3 also reference
//!   tag FFFFFFFFh).
//! - [`error`]: [`PiError`], which names the failed check, the LBA and the values, and maps to
//!   the NVMe status (SCT 2h, SC 82h/83h/84h).
//!
//! Only 16-bit guards with 8-byte PI are supported (NVMe's "16b Guard" format, `pif=0`). No
//! function allocates or panics, whatever the lengths of the buffers it is given.

mod blocks;
pub mod error;
pub mod format;
pub mod generate;
pub mod tuple;
pub mod verify;

#[cfg(test)]
mod tests;

pub use error::PiError;
pub use format::{PiFormat, PiFormatError, PiLocation, PiType, PI_BYTES};
pub use generate::{generate_extended, generate_separate, insert_extended, insert_separate};
pub use tuple::Pi;
pub use verify::{verify_extended, verify_separate, PiChecks, PiExpected};

use crc::{Crc, Table, CRC_16_T10_DIF};

/// CRC-16 T10-DIF, sliced by 16 (tables built at compile time).
static T10DIF: Crc<u16, Table<16>> = Crc::<u16, Table<16>>::new(&CRC_16_T10_DIF);

/// CRC-16 T10-DIF (polynomial 0x8BB7, initial value 0, not reflected) of `bytes`.
pub fn crc16_t10dif(bytes: &[u8]) -> u16 {
    T10DIF.checksum(bytes)
}

/// The guard of one block: CRC-16 T10-DIF of its `data`, followed, when `format` puts PI in the
/// last 8 bytes of the metadata, by the metadata bytes before the PI (`md_before_pi`; pass an
/// empty slice otherwise). The caller hands in the slices; see [`PiFormat::pi_offset`].
pub fn guard(data: &[u8], md_before_pi: &[u8]) -> u16 {
    let mut digest = T10DIF.digest();
    digest.update(data);
    digest.update(md_before_pi);
    digest.finalize()
}
