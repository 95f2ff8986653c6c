//! Scenario `data`: bring-up and identify against QEMU's NVMe controller on vfio-pci; serial,
//! model, MDTS and every namespace's size and LBA size match what QEMU was told; the first and
//! last blocks of each namespace take data.

use vfnvme_tests::{guest, guest_checks, guest_io};

#[test]
fn identify_matches_qemu() {
    if !guest::in_guest("guest_data_identify::identify_matches_qemu") {
        return;
    }
    assert_eq!(guest::expect_var("VFNVME_SCENARIO"), "data");
    let bdf = &guest::vfio_devices()[0];
    let ctrl = guest_io::open(bdf);
    guest_checks::check_identify(&ctrl, None);
}

#[test]
fn first_and_last_blocks_roundtrip() {
    if !guest::in_guest("guest_data_identify::first_and_last_blocks_roundtrip") {
        return;
    }
    let bdf = &guest::vfio_devices()[0];
    let ctrl = guest_io::open(bdf);
    guest_checks::check_namespace_edges(&ctrl, 0x1d);
}
