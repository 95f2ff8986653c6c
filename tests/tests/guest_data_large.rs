//! Scenario `data`: I/O that needs PRP lists and MDTS splits (QEMU's MDTS 7 = 512 KiB per
//! command): 1 MiB, 3 MiB and odd sizes, split counts and every byte checked.

use vfnvme_tests::{guest, guest_checks, guest_io};

#[test]
fn large_and_odd_sizes_split_and_verify() {
    if !guest::in_guest("guest_data_large::large_and_odd_sizes_split_and_verify") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    guest_checks::check_large_io(&ctrl, 1, 0x1a26e);
}
