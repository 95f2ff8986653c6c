//! SGLs (PSDT 01b) end to end through raw submission queue entries: Identify SGLS, data moved
//! through Data Blocks and a Last Segment list, and QEMU 7.2's statuses for malformed lists.

use super::*;

/// A Read (0x02) or Write (0x01) of `blocks` 512-byte blocks at `lba` with PSDT 01b and the
/// data pointer `dptr` (one SGL descriptor).
fn rw_sgl(op: u8, cid: u16, lba: u64, blocks: u32, dptr: [u8; 16]) -> [u8; 64] {
    let mut e = sqe(
        op,
        cid,
        1,
        0,
        0,
        [lba as u32, (lba >> 32) as u32, blocks - 1, 0, 0, 0],
    );
    e[1] |= 1 << 6; // PSDT 01b
    e[24..40].copy_from_slice(&dptr);
    e
}

fn desc(addr: u64, len: u32, ty: u8) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&addr.to_le_bytes());
    d[8..12].copy_from_slice(&len.to_le_bytes());
    d[15] = ty << 4;
    d
}

/// Writes `descs` into `list` (a DMA buffer); returns a Last Segment descriptor over them.
fn last_segment(list: &mut DmaBuffer, descs: &[[u8; 16]]) -> [u8; 16] {
    for (i, d) in descs.iter().enumerate() {
        list.as_mut_slice()[16 * i..16 * i + 16].copy_from_slice(d);
    }
    desc(list.iova(), 16 * descs.len() as u32, 3)
}

#[test]
fn identify_reports_sgls_and_data_moves_through_sgls() {
    let mut b = Bench::new(config());
    let (c, id) = b.identify(1, 0);
    assert_eq!(c.status, 0);
    assert_eq!(&id.as_slice()[536..540], &[1, 0, 0, 0]);
    let mut q = b.qpair(1, 16);
    let mut src = b.p.dma().alloc(8192).unwrap();
    for (i, x) in src.as_mut_slice().iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(7).wrapping_add(3);
    }
    // 1024 bytes from three pieces at odd addresses.
    let mut list = b.p.dma().alloc(4096).unwrap();
    let base = src.iova();
    let dptr = last_segment(
        &mut list,
        &[
            desc(base + 1, 301, 0),
            desc(base + 999, 0, 0),
            desc(base + 4001, 723, 0),
        ],
    );
    assert_eq!(q.run(&b.p, rw_sgl(0x01, 1, 10, 2, dptr)).status, 0);
    let dst = b.p.dma().alloc(1024).unwrap();
    let c = q.run(&b.p, rw_sgl(0x02, 2, 10, 2, desc(dst.iova(), 1024, 0)));
    assert_eq!(c.status, 0);
    let s = src.as_slice();
    let want: Vec<u8> = s[1..302].iter().chain(&s[4001..4724]).copied().collect();
    assert_eq!(dst.as_slice(), &want[..]);
    assert_eq!(b.p.stats().sgl_commands, 2);
    assert_eq!(b.p.iommu().fault_count(), 0);
}

#[test]
fn malformed_sgls_fail_with_qemus_statuses() {
    let mut b = Bench::new(config());
    let mut q = b.qpair(1, 16);
    let buf = b.p.dma().alloc(4096).unwrap();
    let a = buf.iova();
    // (what, DPTR, or a Last Segment's list when DPTR is None, expected status)
    type Case = (&'static str, Option<[u8; 16]>, Vec<[u8; 16]>, u16);
    let seg = |l: Vec<[u8; 16]>| (None, l);
    let cases: Vec<Case> = vec![
        ("a Bit Bucket as DPTR", Some(desc(a, 512, 1)), vec![], 0x0D),
        (
            "a Data Block too short",
            Some(desc(a, 511, 0)),
            vec![],
            0x0F,
        ),
        (
            "a Data Block too long is fine",
            Some(desc(a, 600, 0)),
            vec![],
            0x00,
        ),
        ("a segment of 17 bytes", Some(desc(a, 17, 3)), vec![], 0x0D),
    ]
    .into_iter()
    .chain(
        [
            (
                "a Segment inside a list",
                seg(vec![desc(a, 16, 2), desc(a, 512, 0)]),
                0x0E,
            ),
            ("a Keyed Data Block", seg(vec![desc(a, 512, 4)]), 0x11),
            (
                "descriptors past the data",
                seg(vec![desc(a, 512, 0), desc(a, 8, 0)]),
                0x0F,
            ),
            (
                "a Last Segment that chains on",
                seg(vec![desc(a, 8, 0), desc(a, 16, 3)]),
                0x0D,
            ),
            (
                "a two-piece list",
                seg(vec![desc(a + 3, 500, 0), desc(a + 1001, 12, 0)]),
                0x00,
            ),
        ]
        .map(|(w, (d, l), st)| (w, d, l, st)),
    )
    .collect();
    for (i, (what, dptr, descs, status)) in cases.into_iter().enumerate() {
        let mut list = b.p.dma().alloc(4096).unwrap();
        let dptr = dptr.unwrap_or_else(|| last_segment(&mut list, &descs));
        let c = q.run(&b.p, rw_sgl(0x02, i as u16, 0, 1, dptr));
        assert_eq!(c.status, status, "{what}");
        assert_eq!(c.dnr, status != 0, "{what}");
    }
    assert_eq!(b.p.iommu().fault_count(), 0);
}

#[test]
fn without_sgl_support_psdt_01b_is_invalid_field() {
    let mut b = Bench::new(ModelConfig {
        sgl: false,
        ..config()
    });
    let (_, id) = b.identify(1, 0);
    assert_eq!(&id.as_slice()[536..540], &[0, 0, 0, 0]);
    let mut q = b.qpair(1, 16);
    let buf = b.p.dma().alloc(512).unwrap();
    let c = q.run(&b.p, rw_sgl(0x02, 1, 0, 1, desc(buf.iova(), 512, 0)));
    assert_eq!((c.status, c.dnr), (0x02, true));
}
