//! Scenario `sidebyside`: one controller on vfio-pci driven by vfnvme while its twin stays on
//! the kernel nvme driver; both work at the same time in one guest.

use std::fs;
use std::path::Path;

use vfnvme_tests::{guest, guest_checks, guest_io};

#[test]
fn vfnvme_and_the_kernel_side_by_side() {
    if !guest::in_guest("guest_sidebyside_smoke::vfnvme_and_the_kernel_side_by_side") {
        return;
    }
    let kernel = guest::kernel_devices();
    assert_eq!(kernel.len(), 1, "one controller on the kernel driver");
    let nvme_dir = Path::new("/sys/bus/pci/devices")
        .join(&kernel[0])
        .join("nvme");
    let ctrls: Vec<_> = fs::read_dir(&nvme_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", nvme_dir.display()))
        .flatten()
        .collect();
    assert_eq!(ctrls.len(), 1, "the kernel drives {}", kernel[0]);
    let serial = fs::read_to_string(ctrls[0].path().join("serial")).expect("serial");
    assert_eq!(serial.trim(), guest_checks::expected_serial(Some(0x11)));

    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    guest_checks::check_identify(&ctrl, Some(0x10));
    let ns = guest_io::namespace(&ctrl, 1);
    let mut qp = guest_io::qpair(&ctrl, 32);
    let got = guest_io::read(&ctrl, &mut qp, &ns, 1000, 64 * 1024);
    assert!(got.iter().all(|&b| b == 0), "null-co reads zeroes");
}
