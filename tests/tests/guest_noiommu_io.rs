//! Scenario `noiommu` (a guest without an IOMMU), the driver API in the no-IOMMU mode
//! (`VfioOptions::no_iommu`: BAR0 through sysfs `resource0`, physical DMA addresses from
//! `/proc/self/pagemap`):
//! - four threads, one queue pair each (different depths), write, read back and verify disjoint
//!   ranges with requests of 4 KiB, 64 KiB (PRP lists), 768 KiB and 1.5 MiB (split at MDTS,
//!   512 KiB); then one queue pair reads every range back (no cross-talk);
//! - what QEMU stored, byte for byte: seeded patterns written at known LBAs of both namespaces
//!   (one block, blocks across a page, MDTS-split requests, six 1.5 MiB buffers held at once so
//!   that each lies in its own hugepage) are exactly the bytes of the namespace's image file at
//!   `lba * lba_size`, and the blocks around them did not change. Each buffer's DMA address is
//!   also checked against this process's pagemap, for every 4 KiB piece of the buffer.

use vfnvme::hal::DmaBuffer;
use vfnvme_tests::guest;
use vfnvme_tests::guest_io::{self, assert_same, random_bytes};
use vfnvme_tests::guest_noiommu::{self as noiommu, read_image};

const MIB: usize = 1 << 20;
const KIB: usize = 1 << 10;

/// Per thread: (request size, how many), 3.75 MiB of ns 1's 16 MiB in all (4 MiB apart). The
/// split requests need 2 and 3 slots each: all of a shape's fit even the depth-8 queue pair.
const SHAPES: [(usize, usize); 4] = [
    (4 * KIB, 64),
    (64 * KIB, 8),
    (768 * KIB, 2),
    (1536 * KIB, 1),
];

/// The physical address of the 4 KiB page at `vaddr` from /proc/self/pagemap (0 if absent).
fn pagemap_phys(vaddr: usize) -> u64 {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open("/proc/self/pagemap").expect("opening /proc/self/pagemap");
    let mut e = [0u8; 8];
    f.read_exact_at(&mut e, (vaddr / 4096 * 8) as u64)
        .expect("reading pagemap");
    let e = u64::from_le_bytes(e);
    if e >> 63 == 0 {
        return 0;
    }
    (e & ((1 << 55) - 1)) * 4096 + (vaddr % 4096) as u64
}

/// The buffer's DMA address is its physical address, for every 4 KiB piece of it.
fn assert_physical(buf: &DmaBuffer) {
    let base = buf.as_slice().as_ptr() as usize;
    let mut off = 0;
    while off < buf.len() {
        let phys = pagemap_phys(base + off);
        assert_ne!(phys, 0, "byte {off} of the buffer has no frame");
        assert_eq!(
            phys,
            buf.iova() + off as u64,
            "byte {off}: DMA address {:#x} + {off} is not the physical address {phys:#x}",
            buf.iova()
        );
        off += 4096 - (base + off) % 4096;
    }
}

#[test]
fn queue_pairs_in_threads_with_prp_lists_and_mdts_splits() {
    if !guest::in_guest("guest_noiommu_io::queue_pairs_in_threads_with_prp_lists_and_mdts_splits") {
        return;
    }
    noiommu::assert_no_iommu();
    noiommu::ensure_bound();
    let ctrl = noiommu::open(&noiommu::staying());
    let mdts = ctrl.identify().mdts_bytes();
    assert_eq!(mdts, Some(512 * KIB as u64), "QEMU's default MDTS");
    let ns = guest_io::namespace(&ctrl, 1);
    let per_thread = (4 * MIB) as u64 / u64::from(ns.lba_size());
    let qpairs: Vec<_> = (0..4).map(|t| guest_io::qpair(&ctrl, 8 << t)).collect();
    std::thread::scope(|s| {
        for (t, mut qp) in qpairs.into_iter().enumerate() {
            let (ctrl, ns) = (&ctrl, &ns);
            s.spawn(move || {
                let mut lba = t as u64 * per_thread;
                for (i, (len, count)) in SHAPES.into_iter().enumerate() {
                    let seed = 0x0100_0000 + (t * 16 + i) as u64;
                    guest_io::pipelined_write_read_verify(ctrl, &mut qp, ns, lba, len, count, seed);
                    lba += (len * count) as u64 / u64::from(ns.lba_size());
                }
                assert_eq!(qp.outstanding(), 0);
            });
        }
    });
    let mut qp = guest_io::qpair(&ctrl, 64);
    for t in 0..4 {
        let mut lba = t as u64 * per_thread;
        for (i, (len, count)) in SHAPES.into_iter().enumerate() {
            let seed = 0x0100_0000 + (t * 16 + i) as u64;
            guest_io::verify_pipelined(&ctrl, &mut qp, &ns, lba, len, count, seed);
            lba += (len * count) as u64 / u64::from(ns.lba_size());
        }
    }
    println!("NOIOMMU-IO 4 queue pairs, 15 MiB written and verified, MDTS {mdts:?} bytes");
}

#[test]
fn the_image_holds_what_was_written_byte_for_byte() {
    if !guest::in_guest("guest_noiommu_io::the_image_holds_what_was_written_byte_for_byte") {
        return;
    }
    noiommu::ensure_bound();
    // The other controller than the thread test's: both translate through the same pagemap.
    let ctrl = noiommu::open(&noiommu::removable());
    let mut qp = guest_io::qpair(&ctrl, 32);
    // (nsid, LBA, bytes): one block, blocks across a 4 KiB page, MDTS-split requests.
    let writes: [(u32, u64, usize); 6] = [
        (1, 7, 512),
        (1, 1003, 9 * 512),
        (1, 5001, MIB + 512),
        (2, 3, 4096),
        (2, 101, 300 * 4096),
        (2, 1700, 4096 * 5),
    ];
    let mut checked = 0usize;
    for (i, (nsid, lba, len)) in writes.into_iter().enumerate() {
        let ns = guest_io::namespace(&ctrl, nsid);
        let bs = ns.lba_size() as usize;
        let at = lba * bs as u64;
        let before = read_image(nsid, at - bs as u64, bs);
        let after = read_image(nsid, at + len as u64, bs);
        let data = random_bytes(len, 0x1a6e_0000 + i as u64);
        let mut buf = ctrl.dma().alloc(len).expect("a DMA buffer");
        assert_physical(&buf);
        buf.as_mut_slice().copy_from_slice(&data);
        qp.write_sync(&ns, lba, (len / bs) as u32, buf)
            .unwrap_or_else(|e| panic!("ns {nsid} write at LBA {lba}: {e}"));
        let what = format!("ns {nsid} image at LBA {lba} +{len} bytes");
        assert_same(&data, &read_image(nsid, at, len), ns.lba_size(), &what);
        assert_eq!(
            read_image(nsid, at - bs as u64, bs),
            before,
            "{what}: block before"
        );
        assert_eq!(
            read_image(nsid, at + len as u64, bs),
            after,
            "{what}: block after"
        );
        checked += len;
    }
    // Six 1.5 MiB buffers held at once: each in its own hugepage, all in flight together.
    let ns = guest_io::namespace(&ctrl, 1);
    let len = 1536 * KIB;
    let blocks = (len / 512) as u32;
    let mut sent = Vec::new();
    for i in 0..6u64 {
        let mut buf = ctrl.dma().alloc(len).expect("a DMA buffer");
        assert_physical(&buf);
        let data = random_bytes(len, 0x6b0f_0000 + i);
        buf.as_mut_slice().copy_from_slice(&data);
        let lba = 8192 + i * u64::from(blocks);
        qp.write(&ns, lba, blocks, buf, i)
            .unwrap_or_else(|e| panic!("submitting the write at LBA {lba}: {}", e.kind));
        sent.push((lba, data));
    }
    let mut pages: Vec<u64> = Vec::new();
    for c in guest_io::wait_completions(&mut qp, 6) {
        assert!(c.is_ok(), "write {} failed: {:?}", c.tag, c.status);
        let b = c.buffer.as_ref().expect("the buffer comes back");
        pages.push(b.iova() >> 21);
    }
    pages.sort_unstable();
    pages.dedup();
    assert_eq!(pages.len(), 6, "six buffers, six 2 MiB pages");
    for (lba, data) in &sent {
        let what = format!("ns 1 image at LBA {lba} (one of six buffers in flight)");
        assert_same(data, &read_image(1, lba * 512, len), 512, &what);
        checked += len;
    }
    println!("NOIOMMU-IMAGE {checked} bytes written through physical addresses found in the image files byte for byte");
}

#[test]
fn two_controllers_opened_apart_do_io_at_once_each_with_its_own_pool() {
    if !guest::in_guest(
        "guest_noiommu_io::two_controllers_opened_apart_do_io_at_once_each_with_its_own_pool",
    ) {
        return;
    }
    noiommu::ensure_bound();
    // Two opens, two physical pools in one process (as the fio engine has with one job per
    // controller).
    let a = noiommu::open(&noiommu::removable());
    let b = noiommu::open(&noiommu::staying());
    let (ns_a, ns_b) = (guest_io::namespace(&a, 1), guest_io::namespace(&b, 2));
    let (mut qa, mut qb) = (guest_io::qpair(&a, 16), guest_io::qpair(&b, 16));
    std::thread::scope(|s| {
        let (a, ns_a, qa) = (&a, &ns_a, &mut qa);
        s.spawn(move || {
            for round in 0..4u64 {
                guest_io::pipelined_write_read_verify(a, qa, ns_a, 20000, 4096, 256, 0xa0 + round);
            }
        });
        let (b, ns_b, qb) = (&b, &ns_b, &mut qb);
        s.spawn(move || {
            for round in 0..4u64 {
                guest_io::pipelined_write_read_verify(b, qb, ns_b, 1024, 4096, 256, 0xb0 + round);
            }
        });
    });
    // What QEMU stored: each controller's last round, byte for byte.
    let want_a = (0..256)
        .flat_map(|i| random_bytes(4096, 0xa3 + i))
        .collect::<Vec<u8>>();
    assert_same(
        &want_a,
        &read_image(1, 20000 * 512, 256 * 4096),
        512,
        "ns 1 through A",
    );
    let want_b = (0..256)
        .flat_map(|i| random_bytes(4096, 0xb3 + i))
        .collect::<Vec<u8>>();
    assert_same(
        &want_b,
        &read_image(2, 1024 * 4096, 256 * 4096),
        4096,
        "ns 2 through B",
    );
}
