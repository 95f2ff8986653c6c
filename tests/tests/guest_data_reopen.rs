//! Scenario `data`: close and reopen. Dropping the controller deletes its queues, shuts it
//! down (CC.SHN) and then disables it (CC.EN = 0, CSTS.RDY = 0) before its memory is freed;
//! opening it again re-enables it, and data written before is still there.

use vfnvme::platform::Platform;
use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme::{Controller, ControllerOptions};
use vfnvme_tests::{guest, guest_io};

/// CC and CSTS register offsets (QEMU's reset clears CC, so CC.SHN can't be seen afterwards).
const CC: usize = 0x14;
const CSTS: usize = 0x1c;

#[test]
fn drop_shuts_down_and_reopen_finds_the_data() {
    if !guest::in_guest("guest_data_reopen::drop_shuts_down_and_reopen_finds_the_data") {
        return;
    }
    let bdf = guest::vfio_devices()[0].clone();
    for round in 0..3u64 {
        let platform = VfioPlatform::open(&bdf, VfioOptions::default())
            .unwrap_or_else(|e| panic!("round {round}: open: {e}"));
        let ctrl = Controller::new(platform.clone(), ControllerOptions::default())
            .unwrap_or_else(|e| panic!("round {round}: bring-up after the previous close: {e}"));
        let csts = platform.regs().read32(CSTS);
        assert_eq!(
            csts & 1,
            1,
            "round {round}: CSTS.RDY after bring-up ({csts:#x})"
        );
        let ns = guest_io::namespace(&ctrl, 1);
        let mut qp = guest_io::qpair(&ctrl, 16);
        if round > 0 {
            // What the previous round wrote survived its shutdown and this bring-up.
            guest_io::verify_pipelined(&ctrl, &mut qp, &ns, 8192 * round, 8192, 16, round - 1);
        }
        guest_io::pipelined_write_read_verify(
            &ctrl,
            &mut qp,
            &ns,
            8192 * (round + 1),
            8192,
            16,
            round,
        );
        if round == 1 {
            // The controller may go before its queue pairs: shutdown deletes them, and
            // dropping the queue pair afterwards sends nothing.
            drop(ctrl);
            drop(qp);
        } else {
            drop(qp);
            drop(ctrl);
        }
        let (cc, csts) = (platform.regs().read32(CC), platform.regs().read32(CSTS));
        assert_eq!(
            (cc & 1, csts & 1),
            (0, 0),
            "round {round}: disabled (CC.EN, CSTS.RDY) after dropping the controller \
             (CC {cc:#x}, CSTS {csts:#x})"
        );
        drop(platform);
    }
}

#[test]
fn dropping_a_queue_pair_with_io_in_flight_is_clean() {
    if !guest::in_guest("guest_data_reopen::dropping_a_queue_pair_with_io_in_flight_is_clean") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let ns = guest_io::namespace(&ctrl, 1);
    for round in 0..3 {
        let mut qp = guest_io::qpair(&ctrl, 32);
        for i in 0..31u64 {
            let buf = ctrl.dma().alloc(64 * 1024).expect("DMA buffer");
            qp.read(&ns, i * 128, 128, buf, i).expect("submit");
        }
        qp.commit();
        drop(qp); // deletes the queues on the controller with the reads still queued
                  // The controller goes on: a new queue pair (the same qid again) moves data.
        let mut qp = guest_io::qpair(&ctrl, 8);
        let data = guest_io::random_bytes(8192, round);
        guest_io::write_read_verify(&ctrl, &mut qp, &ns, 70_000, &data);
    }
}

#[test]
fn four_kib_pages_instead_of_hugepages() {
    if !guest::in_guest("guest_data_reopen::four_kib_pages_instead_of_hugepages") {
        return;
    }
    let platform = VfioPlatform::open(
        &guest::vfio_devices()[0],
        VfioOptions {
            page_size: vfnvme::hal::PageSize::Small4K,
            ..VfioOptions::default()
        },
    )
    .expect("open with 4 KiB pages");
    let ctrl = Controller::new(platform, ControllerOptions::default()).expect("bring-up");
    let ns = guest_io::namespace(&ctrl, 1);
    let mut qp = guest_io::qpair(&ctrl, 16);
    // Buffers of many 4 KiB pages: contiguous for the device only through the IOMMU.
    for (i, len) in [4096usize, 64 * 1024, 1 << 20].into_iter().enumerate() {
        let data = guest_io::random_bytes(len, 0x4b + i as u64);
        guest_io::write_read_verify(&ctrl, &mut qp, &ns, 80_000, &data);
    }
}

const DIE_MID_IO: &str = "VFNVME_TEST_DIE_MID_IO";
const CHILD_EXIT: i32 = 17;

#[test]
fn a_process_that_dies_mid_io_leaves_the_device_usable() {
    if !guest::in_guest("guest_data_reopen::a_process_that_dies_mid_io_leaves_the_device_usable") {
        return;
    }
    let bdf = guest::vfio_devices()[0].clone();
    if std::env::var_os(DIE_MID_IO).is_some() {
        // The child: write, flush, queue reads, and exit without any clean-up (no queue
        // deletion, no shutdown): as if killed.
        let ctrl = guest_io::open(&bdf);
        let ns = guest_io::namespace(&ctrl, 1);
        let mut qp = guest_io::qpair(&ctrl, 64);
        guest_io::write(
            &ctrl,
            &mut qp,
            &ns,
            90_000,
            &guest_io::random_bytes(64 * 1024, 0xdead),
        );
        qp.flush_sync(&ns).expect("flush");
        for i in 0..63u64 {
            let buf = ctrl.dma().alloc(32 * 1024).expect("DMA buffer");
            qp.read(&ns, i * 64, 64, buf, i).expect("submit");
        }
        qp.commit();
        std::process::exit(CHILD_EXIT);
    }
    let exe = std::env::current_exe().expect("own executable");
    let status = std::process::Command::new(exe)
        .args([
            "--exact",
            "a_process_that_dies_mid_io_leaves_the_device_usable",
            "--nocapture",
        ])
        .env(DIE_MID_IO, "1")
        .status()
        .expect("run the child");
    assert_eq!(
        status.code(),
        Some(CHILD_EXIT),
        "the child ran to its exit: {status}"
    );
    // The device, left enabled with queues and I/O by the dead process, comes up again.
    let ctrl = guest_io::open(&bdf);
    let ns = guest_io::namespace(&ctrl, 1);
    let mut qp = guest_io::qpair(&ctrl, 16);
    let got = guest_io::read(&ctrl, &mut qp, &ns, 90_000, 64 * 1024);
    guest_io::assert_same(
        &guest_io::random_bytes(64 * 1024, 0xdead),
        &got,
        ns.lba_size(),
        "what the dead process wrote and flushed",
    );
    guest_io::write_read_verify(
        &ctrl,
        &mut qp,
        &ns,
        91_000,
        &guest_io::random_bytes(8192, 2),
    );
}
