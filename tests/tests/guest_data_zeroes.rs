//! Scenario `data`: Write Zeroes (also one split past 65536 blocks), Dataset Management
//! deallocate, and flush on QEMU's controller with a raw image.
//!
//! Deallocate: QEMU 7.2 turns it into a block-layer discard, and the scenario's drives use
//! QEMU's default `discard=ignore`, so the data usually stays (even though Identify Namespace
//! says deallocated blocks read as zeroes). The test therefore asserts success, and that every
//! block afterwards holds either its old data or zeroes (never anything else).

use vfnvme::spec::command::DsmRange;
use vfnvme::spec::identify::{ONCS_DSM, ONCS_WRITE_ZEROES};
use vfnvme_tests::{guest, guest_io};

const MAX_BLOCKS_PER_COMMAND: u64 = 1 << 16;

#[test]
fn write_zeroes_clears_exactly_its_range() {
    if !guest::in_guest("guest_data_zeroes::write_zeroes_clears_exactly_its_range") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    assert_ne!(
        ctrl.identify().identify.oncs & ONCS_WRITE_ZEROES,
        0,
        "QEMU supports Write Zeroes"
    );
    let ns = guest_io::namespace(&ctrl, 1);
    let lba = ns.lba_size() as usize;
    let mut qp = guest_io::qpair(&ctrl, 16);
    let data = guest_io::random_bytes(512 * lba, 0x2e805);
    guest_io::write(&ctrl, &mut qp, &ns, 2000, &data);
    qp.write_zeroes(&ns, 2100, 300, 1)
        .expect("submit Write Zeroes");
    guest_io::expect_success(&mut qp, "Write Zeroes of 300 blocks");
    let got = guest_io::read(&ctrl, &mut qp, &ns, 2000, data.len());
    let mut want = data.clone();
    want[100 * lba..400 * lba].fill(0);
    guest_io::assert_same(
        &want,
        &got,
        ns.lba_size(),
        "after Write Zeroes of LBAs 2100..2400",
    );
}

#[test]
fn write_zeroes_past_65536_blocks_is_split() {
    if !guest::in_guest("guest_data_zeroes::write_zeroes_past_65536_blocks_is_split") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let ns = guest_io::namespace(&ctrl, 1);
    let lba = ns.lba_size() as usize;
    let mut qp = guest_io::qpair(&ctrl, 16);
    let first = 40_000u64;
    let blocks = MAX_BLOCKS_PER_COMMAND + 100;
    assert!(first + blocks + 64 <= ns.blocks(), "namespace too small");
    // Random data at the start, across the 65536-block boundary, at the end and just past it.
    let spots = [
        first,
        first + MAX_BLOCKS_PER_COMMAND - 4,
        first + blocks - 8,
        first + blocks,
    ];
    for (i, &at) in spots.iter().enumerate() {
        guest_io::write(
            &ctrl,
            &mut qp,
            &ns,
            at,
            &guest_io::random_bytes(8 * lba, 77 + i as u64),
        );
    }
    qp.write_zeroes(&ns, first, blocks as u32, 2)
        .expect("submit Write Zeroes");
    assert_eq!(qp.outstanding(), 2, "65636 blocks take two commands");
    guest_io::expect_success(&mut qp, "Write Zeroes of 65636 blocks");
    for &at in &spots[..3] {
        let got = guest_io::read(&ctrl, &mut qp, &ns, at, 8 * lba);
        guest_io::assert_same(
            &vec![0; 8 * lba],
            &got,
            ns.lba_size(),
            &format!("LBA {at} zeroed"),
        );
    }
    let after = guest_io::read(&ctrl, &mut qp, &ns, spots[3], 8 * lba);
    guest_io::assert_same(
        &guest_io::random_bytes(8 * lba, 77 + 3),
        &after,
        ns.lba_size(),
        "the blocks just past the range keep their data",
    );
}

#[test]
fn deallocate_succeeds_and_leaves_old_data_or_zeroes() {
    if !guest::in_guest("guest_data_zeroes::deallocate_succeeds_and_leaves_old_data_or_zeroes") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    assert_ne!(
        ctrl.identify().identify.oncs & ONCS_DSM,
        0,
        "QEMU supports DSM"
    );
    let ns = guest_io::namespace(&ctrl, 1);
    let lba = ns.lba_size() as usize;
    let mut qp = guest_io::qpair(&ctrl, 16);
    let ranges = [
        DsmRange {
            attributes: 0,
            blocks: 64,
            slba: 10_000,
        },
        DsmRange {
            attributes: 0,
            blocks: 8,
            slba: 20_000,
        },
        DsmRange {
            attributes: 0,
            blocks: 2048,
            slba: 30_000,
        },
    ];
    let datas: Vec<Vec<u8>> = ranges
        .iter()
        .enumerate()
        .map(|(i, r)| guest_io::random_bytes(r.blocks as usize * lba, 0xdea1 + i as u64))
        .collect();
    for (r, d) in ranges.iter().zip(&datas) {
        guest_io::write(&ctrl, &mut qp, &ns, r.slba, d);
    }
    qp.deallocate(&ns, &ranges, 3).expect("submit deallocate");
    guest_io::expect_success(&mut qp, "Dataset Management deallocate of 3 ranges");
    let (mut kept, mut zeroed) = (0usize, 0usize);
    for (r, d) in ranges.iter().zip(&datas) {
        let got = guest_io::read(&ctrl, &mut qp, &ns, r.slba, d.len());
        for (b, (old, now)) in d.chunks(lba).zip(got.chunks(lba)).enumerate() {
            if old == now {
                kept += 1;
            } else if now.iter().all(|&x| x == 0) {
                zeroed += 1;
            } else {
                panic!(
                    "LBA {}: neither its old data nor zeroes after deallocate",
                    r.slba + b as u64
                );
            }
        }
    }
    eprintln!("deallocate: {kept} blocks kept their data, {zeroed} read as zeroes");
    // Out-of-range and empty range lists never reach the device.
    let past = [DsmRange {
        attributes: 0,
        blocks: 2,
        slba: ns.blocks() - 1,
    }];
    assert!(
        qp.deallocate(&ns, &past, 4).is_err(),
        "a range past the end is refused"
    );
    assert!(
        qp.deallocate(&ns, &[], 5).is_err(),
        "an empty range list is refused"
    );
    assert_eq!(qp.outstanding(), 0);
}

#[test]
fn flush_after_pipelined_writes() {
    if !guest::in_guest("guest_data_zeroes::flush_after_pipelined_writes") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let ns = guest_io::namespace(&ctrl, 1);
    let mut qp = guest_io::qpair(&ctrl, 16);
    guest_io::pipelined_write_read_verify(&ctrl, &mut qp, &ns, 50_000, 8192, 32, 0xf1);
    qp.flush_sync(&ns).expect("flush");
    // A flush queued together with writes in one batch.
    let mut buf = ctrl.dma().alloc(4096).expect("DMA buffer");
    buf.as_mut_slice().fill(0x3c);
    qp.write(&ns, 60_000, (4096 / ns.lba_size()) as u32, buf, 1)
        .expect("submit write");
    qp.flush(&ns, 2).expect("submit flush");
    let done = guest_io::wait_completions(&mut qp, 2);
    assert!(done.iter().all(|c| c.is_ok()), "{done:?}");
    let got = guest_io::read(&ctrl, &mut qp, &ns, 60_000, 4096);
    assert!(
        got.iter().all(|&b| b == 0x3c),
        "the write before the flush landed"
    );
}
