//! SGLs (PSDT 01b) as QEMU 7.2's NVMe device walks them (`hw/nvme/ctrl.c`, `nvme_map_sgl`):
//!
//! - DPTR is a Data Block (the whole transfer in one piece) or a Segment / Last Segment
//!   descriptor pointing at a list of descriptors; anything else is Invalid SGL Segment
//!   Descriptor (0x000D), as is a segment whose length is 0 or not a multiple of 16, or a Last
//!   Segment whose list does not end with a Data Block.
//! - Inside a list only Data Blocks, but for a Segment or Last Segment as its last entry (which
//!   chains the next list); one elsewhere is Invalid Number of SGL Descriptors (0x000E). Bit
//!   Bucket, Keyed and Transport Data Blocks are SGL Descriptor Type Invalid (0x0011).
//! - Data Blocks take any byte address and length (SGLS = 0x1); zero-length ones are skipped;
//!   the last piece may be longer than what is left. Descriptors past the end of the data,
//!   or too few of them, are Data SGL Length Invalid (0x000F).
//! - Lists are read from host memory through the IOMMU (a failed read is a Data Transfer
//!   Error), 256 descriptors at a time.
//!
//! One bound QEMU lacks: a chain of more than [`MAX_SEGMENTS`] lists (one that points back at
//! itself would never end) is Invalid SGL Segment Descriptor.

use super::sqe::Status;

/// Bytes of one SGL descriptor.
const DESCRIPTOR: usize = 16;
/// Descriptors read from a list in one DMA access (one 4 KiB page, as QEMU does).
const CHUNK: usize = 256;
/// Most lists one command may chain.
pub(crate) const MAX_SEGMENTS: usize = 4096;

/// SGL descriptor types (identifier bits 7:4).
mod ty {
    pub const DATA_BLOCK: u8 = 0x0;
    pub const SEGMENT: u8 = 0x2;
    pub const LAST_SEGMENT: u8 = 0x3;
}

/// One decoded descriptor.
#[derive(Debug, Clone, Copy, Default)]
struct Descriptor {
    addr: u64,
    len: u32,
    ty: u8,
}

impl Descriptor {
    fn parse(b: &[u8]) -> Descriptor {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        let mut l = [0u8; 4];
        l.copy_from_slice(&b[8..12]);
        Descriptor {
            addr: u64::from_le_bytes(a),
            len: u32::from_le_bytes(l),
            ty: b[15] >> 4,
        }
    }
}

/// Appends to `out` the (address, length) pieces of a `len`-byte transfer described by the
/// SGL whose first descriptor is `dptr` (SQE bytes 24..40), reading lists with
/// `read_list(iova, out)`.
pub(crate) fn map(
    mut read_list: impl FnMut(u64, &mut [u8]) -> Result<(), Status>,
    dptr: &[u8; DESCRIPTOR],
    len: u64,
    out: &mut Vec<(u64, usize)>,
) -> Result<(), Status> {
    let mut left = len;
    let first = Descriptor::parse(dptr);
    if first.ty == ty::DATA_BLOCK {
        map_data(&[first], &mut left, out)?;
        return finish(left);
    }
    let mut seg = first;
    let mut buf = vec![0u8; CHUNK * DESCRIPTOR];
    let mut descs = [Descriptor::default(); CHUNK];
    for _ in 0..MAX_SEGMENTS {
        if !matches!(seg.ty, ty::SEGMENT | ty::LAST_SEGMENT) {
            return Err(Status::INVALID_SGL_SEGMENT);
        }
        let seg_len = u64::from(seg.len);
        if seg_len == 0 || seg_len % DESCRIPTOR as u64 != 0 {
            return Err(Status::INVALID_SGL_SEGMENT);
        }
        if u64::MAX - seg.addr < seg_len {
            return Err(Status::DATA_SGL_LENGTH_INVALID);
        }
        let mut addr = seg.addr;
        let mut count = (seg_len / DESCRIPTOR as u64) as usize;
        while count > CHUNK {
            read_list(addr, &mut buf)?;
            let chunk = decode(&buf, &mut descs);
            map_data(chunk, &mut left, out)?;
            count -= CHUNK;
            addr += (CHUNK * DESCRIPTOR) as u64;
        }
        let bytes = &mut buf[..count * DESCRIPTOR];
        read_list(addr, bytes)?;
        let list = decode(bytes, &mut descs);
        let Some((&last, rest)) = list.split_last() else {
            return Err(Status::INVALID_SGL_SEGMENT);
        };
        if !matches!(last.ty, ty::SEGMENT | ty::LAST_SEGMENT) {
            // A list that ends with a data descriptor ends the SGL.
            map_data(list, &mut left, out)?;
            return finish(left);
        }
        if seg.ty == ty::LAST_SEGMENT {
            return Err(Status::INVALID_SGL_SEGMENT);
        }
        map_data(rest, &mut left, out)?;
        seg = last;
    }
    Err(Status::INVALID_SGL_SEGMENT)
}

/// Decodes the descriptors of `bytes` into `descs`; returns those decoded.
fn decode<'d>(bytes: &[u8], descs: &'d mut [Descriptor; CHUNK]) -> &'d [Descriptor] {
    let mut n = 0;
    for (d, b) in descs.iter_mut().zip(bytes.chunks_exact(DESCRIPTOR)) {
        *d = Descriptor::parse(b);
        n += 1;
    }
    &descs[..n]
}

/// Maps the Data Blocks of one list (QEMU's `nvme_map_sgl_data`).
fn map_data(
    list: &[Descriptor],
    left: &mut u64,
    out: &mut Vec<(u64, usize)>,
) -> Result<(), Status> {
    for d in list {
        match d.ty {
            ty::DATA_BLOCK => {}
            ty::SEGMENT | ty::LAST_SEGMENT => return Err(Status::INVALID_SGL_DESCRIPTOR_COUNT),
            _ => return Err(Status::SGL_DESCRIPTOR_TYPE_INVALID),
        }
        let len = u64::from(d.len);
        if len == 0 {
            continue;
        }
        if *left == 0 {
            // Descriptors past the end of the data (SGLS bit 18, excess length, is clear).
            return Err(Status::DATA_SGL_LENGTH_INVALID);
        }
        if u64::MAX - d.addr < len {
            return Err(Status::DATA_SGL_LENGTH_INVALID);
        }
        let n = len.min(*left);
        out.push((d.addr, n as usize));
        *left -= n;
    }
    Ok(())
}

/// Too few descriptors for the transfer: Data SGL Length Invalid.
fn finish(left: u64) -> Result<(), Status> {
    if left != 0 {
        return Err(Status::DATA_SGL_LENGTH_INVALID);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(addr: u64, len: u32, ty: u8) -> [u8; 16] {
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&addr.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[15] = ty << 4;
        d
    }

    /// Maps `dptr` over host "memory" of lists keyed by address.
    fn run(
        dptr: [u8; 16],
        lists: &[(u64, Vec<[u8; 16]>)],
        len: u64,
    ) -> Result<Vec<(u64, usize)>, Status> {
        let mut out = Vec::new();
        let read = |iova: u64, buf: &mut [u8]| {
            for (at, list) in lists {
                let bytes: Vec<u8> = list.iter().flatten().copied().collect();
                if iova >= *at && iova - at + buf.len() as u64 <= bytes.len() as u64 {
                    let off = (iova - at) as usize;
                    buf.copy_from_slice(&bytes[off..off + buf.len()]);
                    return Ok(());
                }
            }
            Err(Status::DATA_TRANSFER_ERROR)
        };
        map(read, &dptr, len, &mut out).map(|()| out)
    }

    #[test]
    fn data_block_and_segments() {
        assert_eq!(run(desc(0x1003, 100, 0), &[], 100), Ok(vec![(0x1003, 100)]));
        assert_eq!(
            run(desc(0x1003, 99, 0), &[], 100),
            Err(Status::DATA_SGL_LENGTH_INVALID)
        );
        let list = vec![desc(0x10, 7, 0), desc(0x20, 0, 0), desc(0x30, 9, 0)];
        assert_eq!(
            run(desc(0x9000, 48, 3), &[(0x9000, list.clone())], 16),
            Ok(vec![(0x10, 7), (0x30, 9)])
        );
        // A Segment chaining to a Last Segment.
        let first = vec![desc(0x10, 7, 0), desc(0xA000, 16, 3)];
        let second = vec![desc(0x40, 5, 0)];
        assert_eq!(
            run(
                desc(0x9000, 32, 2),
                &[(0x9000, first), (0xA000, second)],
                12
            ),
            Ok(vec![(0x10, 7), (0x40, 5)])
        );
    }

    #[test]
    fn errors_as_qemu() {
        let seg = |l: Vec<[u8; 16]>| vec![(0x9000u64, l)];
        // DPTR a Bit Bucket; a segment of a bad length.
        assert_eq!(run(desc(0, 8, 1), &[], 8), Err(Status::INVALID_SGL_SEGMENT));
        assert_eq!(
            run(desc(0x9000, 17, 3), &seg(vec![desc(0, 8, 0)]), 8),
            Err(Status::INVALID_SGL_SEGMENT)
        );
        // A Segment inside a list, not last.
        let l = vec![desc(0x9000, 16, 2), desc(0, 8, 0)];
        assert_eq!(
            run(desc(0x9000, 32, 3), &seg(l), 8),
            Err(Status::INVALID_SGL_DESCRIPTOR_COUNT)
        );
        // A Last Segment whose list chains on.
        let l = vec![desc(0, 8, 0), desc(0x9000, 16, 2)];
        assert_eq!(
            run(desc(0x9000, 32, 3), &seg(l), 8),
            Err(Status::INVALID_SGL_SEGMENT)
        );
        // Bit Bucket, Keyed Data Block in a list.
        for t in [1, 4, 5] {
            let l = vec![desc(0, 8, t), desc(0, 8, 0)];
            assert_eq!(
                run(desc(0x9000, 32, 3), &seg(l), 8),
                Err(Status::SGL_DESCRIPTOR_TYPE_INVALID)
            );
        }
        // Too much and too little.
        let l = vec![desc(0, 8, 0), desc(0x100, 8, 0)];
        assert_eq!(
            run(desc(0x9000, 32, 3), &seg(l.clone()), 8),
            Err(Status::DATA_SGL_LENGTH_INVALID)
        );
        assert_eq!(
            run(desc(0x9000, 32, 3), &seg(l), 17),
            Err(Status::DATA_SGL_LENGTH_INVALID)
        );
        // A list that can't be read; one that loops.
        assert_eq!(
            run(desc(0x5000, 16, 3), &[], 8),
            Err(Status::DATA_TRANSFER_ERROR)
        );
        let l = vec![desc(0, 0, 0), desc(0x9000, 32, 2)];
        assert_eq!(
            run(desc(0x9000, 32, 2), &seg(l), 8),
            Err(Status::INVALID_SGL_SEGMENT)
        );
    }
}
