//! Splitting checked buffers into blocks: the lengths and the format are validated once per
//! call, so that the per-block work can't go out of bounds.

use super::error::PiError;
use super::format::{PiFormat, PiType, PI_BYTES};
use super::tuple::Pi;

/// The validated geometry of one call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    /// The PI type.
    pub ty: PiType,
    /// Data bytes per block.
    pub bs: usize,
    /// Metadata bytes per block (at least 8).
    pub ms: usize,
    /// The PI's offset in the metadata (`ms - 8` when last, else 0).
    pub at: usize,
}

fn layout(extended: bool) -> &'static str {
    if extended {
        "extended (metadata after each block's data)"
    } else {
        "separate (metadata in its own buffer)"
    }
}

impl Geometry {
    fn of(format: &PiFormat, extended: bool) -> Result<Geometry, PiError> {
        format.check()?;
        let Some((ty, _)) = format.pi else {
            return Err(PiError::NoPi);
        };
        if format.extended != extended {
            return Err(PiError::Layout {
                given: layout(extended),
                format: layout(format.extended),
            });
        }
        Ok(Geometry {
            ty,
            bs: format.block_size as usize,
            ms: usize::from(format.ms),
            at: format.pi_offset(),
        })
    }

    /// The geometry of an extended buffer of `len` bytes.
    pub fn extended(format: &PiFormat, len: usize) -> Result<Geometry, PiError> {
        let g = Geometry::of(format, true)?;
        let element = g.bs + g.ms;
        if !len.is_multiple_of(element) {
            return Err(PiError::DataLength { len, element });
        }
        Ok(g)
    }

    /// The geometry of a separate data buffer of `data` bytes and metadata of `md` bytes.
    pub fn separate(format: &PiFormat, data: usize, md: usize) -> Result<Geometry, PiError> {
        let g = Geometry::of(format, false)?;
        if !data.is_multiple_of(g.bs) {
            return Err(PiError::DataLength {
                len: data,
                element: g.bs,
            });
        }
        let blocks = data / g.bs;
        match blocks.checked_mul(g.ms) {
            Some(expected) if expected == md => Ok(g),
            expected => Err(PiError::MetadataLength {
                len: md,
                blocks,
                expected: expected.unwrap_or(usize::MAX),
            }),
        }
    }

    /// The bytes of one extended element.
    pub fn element(&self) -> usize {
        self.bs + self.ms
    }

    /// The guard of a block with `data` and metadata `md` (`ms` bytes).
    pub fn guard(&self, data: &[u8], md: &[u8]) -> u16 {
        super::guard(data, md.get(..self.at).unwrap_or_default())
    }

    /// The PI stored in metadata `md`.
    pub fn pi(&self, md: &[u8]) -> Pi {
        md.get(self.at..)
            .and_then(Pi::read_from)
            .unwrap_or(Pi::ALL_ONES)
    }

    /// Writes PI with `app` and `reference` and the block's guard into its metadata `md`.
    pub fn stamp(&self, data: &[u8], md: &mut [u8], app: u16, reference: u32) {
        let pi = Pi {
            guard: self.guard(data, md),
            app,
            reference,
        };
        if let Some(slot) = md.get_mut(self.at..self.at + PI_BYTES) {
            pi.write_to(slot);
        }
    }
}
