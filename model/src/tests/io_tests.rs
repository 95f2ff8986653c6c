use super::*;

fn rw(op: u8, cid: u16, nsid: u32, lba: u64, blocks: u32, prp1: u64, prp2: u64) -> [u8; 64] {
    sqe(
        op,
        cid,
        nsid,
        prp1,
        prp2,
        [lba as u32, (lba >> 32) as u32, blocks - 1, 0, 0, 0],
    )
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn write_then_read_back_512_and_4096() {
    let mut b = Bench::new(ModelConfig {
        namespaces: vec![ram_ns(1, 1 << 40, 512), ram_ns(2, 1000, 4096)],
        ..config()
    });
    let mut q = b.qpair(1, 32);
    for (nsid, lba, len) in [
        (1u32, (1u64 << 40) - 8, 4096usize),
        (2, 999, 4096),
        (1, 3, 512),
    ] {
        let mut w = b.p.dma().alloc(len).unwrap();
        w.as_mut_slice().copy_from_slice(&pattern(len, nsid as u8));
        let blocks = if nsid == 2 { 1 } else { (len / 512) as u32 };
        let c = q.run(&b.p, rw(0x01, 1, nsid, lba, blocks, w.iova(), 0));
        assert_eq!((c.status, c.sqid), (0, 1));
        let r = b.p.dma().alloc(len).unwrap();
        let c = q.run(&b.p, rw(0x02, 2, nsid, lba, blocks, r.iova(), 0));
        assert_eq!(c.status, 0);
        assert_eq!(r.as_slice(), w.as_slice(), "nsid {nsid} lba {lba}");
    }
    let c = q.run(&b.p, sqe(0x00, 3, 0xFFFF_FFFF, 0, 0, [0; 6]));
    assert_eq!(c.status, 0, "flush all namespaces");
    let s = b.p.stats();
    assert_eq!((s.io(0x01), s.io(0x02), s.io(0x00)), (3, 3, 1));
}

#[test]
fn prp_list_transfer_with_offset() {
    let mut b = Bench::new(ModelConfig {
        mdts: 0,
        ..config()
    });
    let mut q = b.qpair(1, 16);
    // 10 data pages; PRP1 starts 1 KiB into the first page.
    let len = 9 * 4096 + 3072;
    let mut data = b.p.dma().alloc(16 * 4096).unwrap();
    let mut list = b.p.dma().alloc(4096).unwrap();
    let prp1 = data.iova() + 1024;
    // Non-contiguous order: the list takes pages from the back of the buffer.
    let pages: Vec<u64> = (0..9).map(|i| data.iova() + (15 - i) * 4096).collect();
    for (i, p) in pages.iter().enumerate() {
        list.as_mut_slice()[8 * i..8 * i + 8].copy_from_slice(&p.to_le_bytes());
    }
    let src = pattern(len, 5);
    {
        let d = data.as_mut_slice();
        d[1024..4096].copy_from_slice(&src[..3072]);
        for (i, _) in pages.iter().enumerate() {
            let at = (15 - i) * 4096;
            d[at..at + 4096].copy_from_slice(&src[3072 + i * 4096..3072 + (i + 1) * 4096]);
        }
    }
    let c = q.run(
        &b.p,
        rw(0x01, 1, 1, 100, (len / 512) as u32, prp1, list.iova()),
    );
    assert_eq!(c.status, 0);
    // Read back contiguously (a fresh buffer with its own list) and compare.
    let out = b.p.dma().alloc(16 * 4096).unwrap();
    for i in 0..9u64 {
        let e = out.iova() + (i + 1) * 4096;
        list.as_mut_slice()[8 * i as usize..8 * i as usize + 8].copy_from_slice(&e.to_le_bytes());
    }
    let c = q.run(
        &b.p,
        rw(
            0x02,
            2,
            1,
            100,
            (len / 512) as u32,
            out.iova() + 1024,
            list.iova(),
        ),
    );
    assert_eq!(c.status, 0);
    assert_eq!(&out.as_slice()[1024..1024 + len], &src[..]);
}

#[test]
fn chained_prp_list() {
    let mut b = Bench::new(ModelConfig {
        mdts: 0,
        ..config()
    });
    let mut q = b.qpair(1, 16);
    let data = b.p.dma().alloc(4 * 4096).unwrap();
    let mut lists = b.p.dma().alloc(2 * 4096).unwrap();
    // First list page: only its last two slots are used (one data entry + chain pointer).
    let lists_iova = lists.iova();
    let l = lists.as_mut_slice();
    let first = 4096 - 16;
    l[first..first + 8].copy_from_slice(&(data.iova() + 4096).to_le_bytes());
    l[first + 8..first + 16].copy_from_slice(&(lists_iova + 4096).to_le_bytes());
    l[4096..4104].copy_from_slice(&(data.iova() + 2 * 4096).to_le_bytes());
    l[4104..4112].copy_from_slice(&(data.iova() + 3 * 4096).to_le_bytes());
    let mut src = b.p.dma().alloc(4 * 4096).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(4 * 4096, 9));
    let mut wlist = b.p.dma().alloc(4096).unwrap();
    for i in 0..3u64 {
        let e = src.iova() + (i + 1) * 4096;
        wlist.as_mut_slice()[8 * i as usize..8 * i as usize + 8].copy_from_slice(&e.to_le_bytes());
    }
    let c = q.run(&b.p, rw(0x01, 1, 1, 0, 32, src.iova(), wlist.iova()));
    assert_eq!(c.status, 0);
    // Now read it back through the chained list.
    let c = q.run(
        &b.p,
        rw(0x02, 2, 1, 0, 32, data.iova(), lists.iova() + first as u64),
    );
    assert_eq!(c.status, 0);
    assert_eq!(data.as_slice(), src.as_slice());
}

#[test]
fn lba_range_mdts_and_namespace_checks() {
    let mut b = Bench::new(ModelConfig {
        namespaces: vec![ram_ns(1, 100, 512)],
        mdts: 1, // 8 KiB
        ..config()
    });
    let mut q = b.qpair(1, 16);
    let buf = b.p.dma().alloc(16384).unwrap();
    let c = q.run(&b.p, rw(0x02, 1, 1, 99, 2, buf.iova(), buf.iova() + 4096));
    assert_eq!(c.status, sc::LBA_OUT_OF_RANGE);
    assert!(c.dnr);
    let c = q.run(&b.p, rw(0x02, 1, 1, u64::MAX, 1, buf.iova(), 0));
    assert_eq!(c.status, sc::LBA_OUT_OF_RANGE, "no overflow");
    let c = q.run(&b.p, rw(0x02, 1, 1, 0, 17, buf.iova(), 0));
    assert_eq!(c.status, sc::INVALID_FIELD, "beyond MDTS");
    let c = q.run(&b.p, rw(0x02, 1, 1, 0, 16, buf.iova(), buf.iova() + 4096));
    assert_eq!(c.status, 0, "exactly MDTS");
    let c = q.run(&b.p, rw(0x02, 1, 2, 0, 1, buf.iova(), 0));
    assert_eq!(c.status, sc::INVALID_NAMESPACE);
    let c = q.run(&b.p, rw(0x08, 1, 1, 90, 11, 0, 0));
    assert_eq!(c.status, sc::LBA_OUT_OF_RANGE, "write zeroes too");
    let c = q.run(&b.p, sqe(0x7F, 1, 1, 0, 0, [0; 6]));
    assert_eq!(c.status, sc::INVALID_OPCODE);
}

#[test]
fn unmapped_and_misaligned_addresses_fail_cleanly() {
    let mut b = Bench::new(config());
    let mut q = b.qpair(1, 16);
    let buf = b.p.dma().alloc(8192).unwrap();
    // A process address, not an IOVA: not mapped.
    let va = buf.as_ptr() as u64;
    let c = q.run(&b.p, rw(0x02, 1, 1, 0, 1, va, 0));
    assert_eq!(c.status, sc::DATA_TRANSFER_ERROR);
    let c = q.run(&b.p, rw(0x01, 1, 1, 0, 1, 0x10_0000, 0));
    assert_eq!(c.status, sc::DATA_TRANSFER_ERROR);
    // The second page is outside every mapping.
    let c = q.run(&b.p, rw(0x02, 1, 1, 0, 2, buf.iova() + 4096 - 512, 1 << 46));
    assert_eq!(c.status, sc::DATA_TRANSFER_ERROR);
    let c = q.run(
        &b.p,
        rw(0x02, 1, 1, 0, 16, buf.iova(), buf.iova() + 4096 + 8),
    );
    assert_eq!(
        c.status,
        sc::INVALID_PRP_OFFSET,
        "PRP2 data pointer with an offset"
    );
    let c = q.run(&b.p, rw(0x02, 1, 1, 0, 1, buf.iova() + 2, 0));
    assert_eq!(c.status, sc::INVALID_PRP_OFFSET, "PRP1 not dword aligned");
    let c = q.run(&b.p, rw(0x02, 1, 1, 0, 24, buf.iova(), va));
    assert_eq!(c.status, sc::DATA_TRANSFER_ERROR, "PRP list unmapped");
    assert_eq!(b.p.regs().read32(0x1C) & 0b10, 0, "still healthy");
}

#[test]
fn write_zeroes_and_deallocate_read_back_zeroes() {
    let mut b = Bench::new(config());
    let mut q = b.qpair(1, 16);
    let mut w = b.p.dma().alloc(8192).unwrap();
    w.as_mut_slice().fill(0xAB);
    assert_eq!(
        q.run(&b.p, rw(0x01, 1, 1, 0, 16, w.iova(), w.iova() + 4096))
            .status,
        0
    );
    assert_eq!(q.run(&b.p, rw(0x08, 2, 1, 2, 2, 0, 0)).status, 0);
    // DSM deallocate of LBAs 10..13 (one range).
    let mut ranges = b.p.dma().alloc(4096).unwrap();
    ranges.as_mut_slice()[4..8].copy_from_slice(&3u32.to_le_bytes());
    ranges.as_mut_slice()[8..16].copy_from_slice(&10u64.to_le_bytes());
    assert_eq!(
        q.run(
            &b.p,
            sqe(0x09, 3, 1, ranges.iova(), 0, [0, 1 << 2, 0, 0, 0, 0])
        )
        .status,
        0
    );
    let r = b.p.dma().alloc(8192).unwrap();
    assert_eq!(
        q.run(&b.p, rw(0x02, 4, 1, 0, 16, r.iova(), r.iova() + 4096))
            .status,
        0
    );
    for (lba, block) in r.as_slice().chunks(512).enumerate() {
        let zero = (2..4).contains(&lba) || (10..13).contains(&lba);
        assert!(
            block.iter().all(|&x| x == if zero { 0 } else { 0xAB }),
            "lba {lba}"
        );
    }
    ranges.as_mut_slice()[8..16].copy_from_slice(&(1u64 << 20).to_le_bytes());
    let c = q.run(
        &b.p,
        sqe(0x09, 5, 1, ranges.iova(), 0, [0, 1 << 2, 0, 0, 0, 0]),
    );
    assert_eq!(c.status, sc::LBA_OUT_OF_RANGE);
}

#[test]
fn null_backing_discards_and_skips_copies() {
    let mut b = Bench::new(ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 1 << 30,
            lba_size: 4096,
            backing: Backing::Null,
        }],
        ..config()
    });
    let mut q = b.qpair(1, 16);
    let mut buf = b.p.dma().alloc(4096).unwrap();
    buf.as_mut_slice().fill(0x5A);
    assert_eq!(q.run(&b.p, rw(0x01, 1, 1, 7, 1, buf.iova(), 0)).status, 0);
    assert_eq!(q.run(&b.p, rw(0x02, 2, 1, 7, 1, buf.iova(), 0)).status, 0);
    assert!(
        buf.as_slice().iter().all(|&x| x == 0x5A),
        "read left the buffer alone"
    );
    assert_eq!(
        q.run(&b.p, rw(0x02, 2, 1, 1 << 30, 1, buf.iova(), 0))
            .status,
        sc::LBA_OUT_OF_RANGE
    );
}
