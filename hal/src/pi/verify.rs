//! Checking the protection information of each block of a buffer.

use super::blocks::Geometry;
use super::error::PiError;
use super::format::{PiFormat, PiType};

/// Which fields to check (a command's PRCHK bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PiChecks {
    /// Check the guard (PRCHK bit 2, CDW12 bit 28).
    pub guard: bool,
    /// Check the application tag under the mask (PRCHK bit 1, CDW12 bit 27).
    pub app: bool,
    /// Check the reference tag (PRCHK bit 0, CDW12 bit 26).
    pub reference: bool,
}

impl PiChecks {
    /// Every check.
    pub const ALL: PiChecks = PiChecks {
        guard: true,
        app: true,
        reference: true,
    };

    /// The checks of PRINFO's PRCHK field (bits 2:0 of PRINFO: guard, application, reference).
    pub const fn from_prchk(prchk: u8) -> PiChecks {
        PiChecks {
            guard: prchk & 0b100 != 0,
            app: prchk & 0b010 != 0,
            reference: prchk & 0b001 != 0,
        }
    }

    /// Whether any check is asked for.
    pub const fn any(&self) -> bool {
        self.guard || self.app || self.reference
    }
}

/// The expected tags of a command (CDW14 and CDW15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PiExpected {
    /// The expected application tag (CDW15 bits 15:0).
    pub app_tag: u16,
    /// The bits of it compared (CDW15 bits 31:16).
    pub app_mask: u16,
    /// The expected reference tag of the first block for types 2 and 3 (CDW14); for type 1 the
    /// first LBA's low 32 bits are expected instead.
    pub ref_tag: u32,
}

/// Checks the PI of every block of an extended buffer whose first block is `first_lba`: the
/// fields `checks` asks for, against `expected` (reference tags incremented per block for types
/// 1 and 2). Blocks whose application tag is FFFFh are not checked (types 1 and 2), nor, for
/// type 3, those whose application tag is FFFFh and reference tag FFFFFFFFh. The first failure
/// is returned, with its LBA.
pub fn verify_extended(
    format: &PiFormat,
    buf: &[u8],
    first_lba: u64,
    checks: PiChecks,
    expected: PiExpected,
) -> Result<(), PiError> {
    let g = Geometry::extended(format, buf.len())?;
    let first_ref = g.ty.initial_ref(first_lba, expected.ref_tag);
    for (i, element) in buf.chunks_exact(g.element()).enumerate() {
        let (data, md) = element.split_at(g.bs);
        block(&g, data, md, first_lba, i, checks, expected, first_ref)?;
    }
    Ok(())
}

/// [`verify_extended`] for data and metadata in separate buffers.
pub fn verify_separate(
    format: &PiFormat,
    data: &[u8],
    md: &[u8],
    first_lba: u64,
    checks: PiChecks,
    expected: PiExpected,
) -> Result<(), PiError> {
    let g = Geometry::separate(format, data.len(), md.len())?;
    let first_ref = g.ty.initial_ref(first_lba, expected.ref_tag);
    let blocks = data.chunks_exact(g.bs).zip(md.chunks_exact(g.ms));
    for (i, (data, md)) in blocks.enumerate() {
        block(&g, data, md, first_lba, i, checks, expected, first_ref)?;
    }
    Ok(())
}

/// Checks block `i` of a command.
#[allow(clippy::too_many_arguments)] // the per-block inner loop of the two public functions
#[inline]
fn block(
    g: &Geometry,
    data: &[u8],
    md: &[u8],
    first_lba: u64,
    i: usize,
    checks: PiChecks,
    expected: PiExpected,
    first_ref: u32,
) -> Result<(), PiError> {
    let pi = g.pi(md);
    let escaped = match g.ty {
        PiType::Type1 | PiType::Type2 => pi.app == 0xFFFF,
        PiType::Type3 => pi.app == 0xFFFF && pi.reference == 0xFFFF_FFFF,
    };
    if escaped {
        return Ok(());
    }
    let lba = first_lba.wrapping_add(i as u64);
    if checks.guard {
        let crc = g.guard(data, md);
        if crc != pi.guard {
            return Err(PiError::Guard {
                lba,
                expected: crc,
                found: pi.guard,
            });
        }
    }
    let mask = expected.app_mask;
    if checks.app && pi.app & mask != expected.app_tag & mask {
        return Err(PiError::AppTag {
            lba,
            expected: expected.app_tag,
            mask,
            found: pi.app,
        });
    }
    let want = g.ty.ref_at(first_ref, i);
    if checks.reference && pi.reference != want {
        return Err(PiError::RefTag {
            lba,
            expected: want,
            found: pi.reference,
        });
    }
    Ok(())
}
