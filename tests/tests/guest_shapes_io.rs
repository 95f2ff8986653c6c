//! Scenario `shapes`: a QEMU controller unlike its defaults (MDTS 2 = 16 KiB, one I/O queue
//! pair, namespaces 1, 2, 9 and 200 with 512 B, 4096 B and 4096+8 metadata formats). vfnvme uses
//! what the controller reports: splits at 16 KiB, one queue pair (a second is refused with a
//! clear error), every namespace found across the gaps, data verified on each plain namespace,
//! the metadata one refused; and the IOMMU logs no fault.

use std::process::Command;

use vfnvme::{Error, SubmitErrorKind};
use vfnvme_tests::{guest, guest_io};

fn dmar_faults() -> usize {
    let out = Command::new("dmesg").output().expect("dmesg");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("DMAR") && (l.contains("fault") || l.contains("Request device")))
        .count()
}

#[test]
fn driver_follows_the_controller_limits_and_formats() {
    if !guest::in_guest("guest_shapes_io::driver_follows_the_controller_limits_and_formats") {
        return;
    }
    let faults = dmar_faults();
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let info = ctrl.identify();
    let mdts: u32 = guest::expect_var("VFNVME_EXPECT_MDTS").parse().unwrap();
    assert_eq!(mdts, 2);
    assert_eq!(info.max_transfer_bytes, 4096 << mdts, "MDTS from Identify");
    let pairs: u16 = guest::expect_var("VFNVME_EXPECT_IOQPAIRS").parse().unwrap();
    assert_eq!(
        info.io_queue_pairs, pairs,
        "fewer I/O queues granted than asked"
    );

    let expected = guest::expected_namespaces(None);
    let nsids: Vec<u32> = ctrl.namespaces().iter().map(|n| n.nsid()).collect();
    assert_eq!(nsids, expected.iter().map(|e| e.nsid).collect::<Vec<_>>());

    let mut qp = guest_io::qpair(&ctrl, 64);
    match ctrl.alloc_qpair(vfnvme::QpairOptions::default()) {
        Err(Error::NoFreeQueue { granted }) => assert_eq!(granted, pairs),
        other => panic!("a second queue pair: {:?}", other.map(|_| ())),
    }
    for e in &expected {
        let ns = guest_io::namespace(&ctrl, e.nsid);
        assert_eq!(
            (ns.lba_size(), ns.blocks()),
            (e.lba_size, e.blocks),
            "ns {}",
            e.nsid
        );
        if ns.io_refused() {
            assert_eq!(e.nsid, 200, "only ns 200 has metadata");
            let buf = ctrl.dma().alloc(4096).unwrap();
            let err = qp.write(&ns, 0, 1, buf, 0).unwrap_err();
            assert!(
                matches!(
                    err.kind,
                    SubmitErrorKind::MetadataUnsupported { nsid: 200, .. }
                ),
                "{:?}",
                err.kind
            );
            continue;
        }
        // One block, two pages, a PRP list, and 256 KiB = 16 commands of 16 KiB.
        for (i, len) in [e.lba_size as usize, 8192, 16384, 256 << 10]
            .into_iter()
            .enumerate()
        {
            let lba = (i as u64) * 1024;
            let data = guest_io::random_bytes(len, u64::from(e.nsid) << 8 | i as u64);
            guest_io::write_read_verify(&ctrl, &mut qp, &ns, lba, &data);
        }
    }
    drop(qp);
    drop(ctrl);
    assert_eq!(dmar_faults(), faults, "the IOMMU logged DMA faults");
}
