//! Scenario `ns256` (in the QEMU guest): one controller with 256 namespaces. The pipelined scan
//! must find every one of them with the size and LBA size the scenario promises, and a rescan
//! must change nothing.

use std::time::Instant;

use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme::{Controller, ControllerOptions};
use vfnvme_tests::guest;

#[test]
fn pipelined_scan_finds_all_256_namespaces_with_their_sizes() {
    if !guest::in_guest(
        "guest_ns256_scan::pipelined_scan_finds_all_256_namespaces_with_their_sizes",
    ) {
        return;
    }
    let expected = guest::expected_namespaces(None);
    assert_eq!(
        expected.len(),
        256,
        "the ns256 scenario promises 256 namespaces"
    );
    let bdf = guest::vfio_devices()
        .into_iter()
        .next()
        .expect("no vfio-pci controller in VFNVME_VFIO_DEVICES");
    let platform = VfioPlatform::open(&bdf, VfioOptions::default())
        .unwrap_or_else(|e| panic!("opening {bdf}: {e}"));
    let started = Instant::now();
    let ctrl = Controller::new(platform, ControllerOptions::default())
        .unwrap_or_else(|e| panic!("bring-up of {bdf}: {e}"));
    let bring_up = started.elapsed();

    let found = ctrl.namespaces();
    let nsids: Vec<u32> = found.iter().map(|n| n.nsid()).collect();
    let want: Vec<u32> = expected.iter().map(|n| n.nsid).collect();
    assert_eq!(nsids, want, "namespace IDs differ from the scenario's");
    for e in &expected {
        let ns = ctrl
            .namespace(e.nsid)
            .unwrap_or_else(|| panic!("nsid {} missing", e.nsid));
        assert_eq!(ns.blocks(), e.blocks, "nsid {}: size", e.nsid);
        assert_eq!(ns.lba_size(), e.lba_size, "nsid {}: LBA size", e.nsid);
        assert_eq!(ctrl.with_namespace(e.nsid, |n| n.blocks()), Some(e.blocks));
    }

    let started = Instant::now();
    let report = ctrl.rescan().expect("rescan");
    let rescan = started.elapsed();
    assert!(
        !report.used_fallback,
        "QEMU supports the Active Namespace ID list"
    );
    assert_eq!(report.probed, 256);
    assert!(report.added.is_empty(), "{report:?}");
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(report.resized.is_empty(), "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    eprintln!(
        "ns256: bring-up incl. scan {:.1} ms, rescan of 256 namespaces ({} admin commands) {:.1} ms",
        bring_up.as_secs_f64() * 1e3,
        report.admin_commands,
        rescan.as_secs_f64() * 1e3
    );
}
