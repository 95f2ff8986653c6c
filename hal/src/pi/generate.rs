//! Writing protection information for each block of a buffer.

use super::blocks::Geometry;
use super::error::PiError;
use super::format::PiFormat;

/// Generates PI for every block of an extended buffer (`block_size + ms` bytes per block,
/// data then metadata), as a host does for PRACT=0 writes: the guard over the data (and, PI
/// last, the metadata before it), application tag `app_tag`, reference tag the LBA's low 32
/// bits from `first_lba` for type 1, `ref_tag_start` incremented per block for type 2, and
/// `ref_tag_start` on every block for type 3.
pub fn generate_extended(
    format: &PiFormat,
    buf: &mut [u8],
    first_lba: u64,
    app_tag: u16,
    ref_tag_start: u32,
) -> Result<(), PiError> {
    let g = Geometry::extended(format, buf.len())?;
    insert_extended(
        format,
        buf,
        app_tag,
        g.ty.initial_ref(first_lba, ref_tag_start),
    )
}

/// [`generate_extended`] for data and metadata in separate buffers (`md` holds `ms` bytes for
/// each block of `data`).
pub fn generate_separate(
    format: &PiFormat,
    data: &[u8],
    md: &mut [u8],
    first_lba: u64,
    app_tag: u16,
    ref_tag_start: u32,
) -> Result<(), PiError> {
    let g = Geometry::separate(format, data.len(), md.len())?;
    insert_separate(
        format,
        data,
        md,
        app_tag,
        g.ty.initial_ref(first_lba, ref_tag_start),
    )
}

/// Inserts PI into every block of an extended buffer as a controller does for PRACT=1: the
/// reference tags start at `first_ref` (the command's CDW14) for every type, incremented per
/// block for types 1 and 2.
pub fn insert_extended(
    format: &PiFormat,
    buf: &mut [u8],
    app_tag: u16,
    first_ref: u32,
) -> Result<(), PiError> {
    let g = Geometry::extended(format, buf.len())?;
    for (i, element) in buf.chunks_exact_mut(g.element()).enumerate() {
        let (data, md) = element.split_at_mut(g.bs);
        g.stamp(data, md, app_tag, g.ty.ref_at(first_ref, i));
    }
    Ok(())
}

/// [`insert_extended`] for data and metadata in separate buffers.
pub fn insert_separate(
    format: &PiFormat,
    data: &[u8],
    md: &mut [u8],
    app_tag: u16,
    first_ref: u32,
) -> Result<(), PiError> {
    let g = Geometry::separate(format, data.len(), md.len())?;
    let blocks = data.chunks_exact(g.bs).zip(md.chunks_exact_mut(g.ms));
    for (i, (data, md)) in blocks.enumerate() {
        g.stamp(data, md, app_tag, g.ty.ref_at(first_ref, i));
    }
    Ok(())
}
