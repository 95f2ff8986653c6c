//! Scenario `ns256`: a controller with 256 namespaces; bring-up's discovery finds each with
//! its size and LBA size, and I/O reaches the first, a middle and the last one.

use vfnvme_tests::{guest, guest_checks, guest_io};

#[test]
fn all_256_namespaces_are_found_and_usable() {
    if !guest::in_guest("guest_ns256_identify::all_256_namespaces_are_found_and_usable") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    guest_checks::check_identify(&ctrl, None);
    assert_eq!(ctrl.namespaces().len(), 256);
    let mut qp = guest_io::qpair(&ctrl, 16);
    for nsid in [1u32, 128, 256] {
        let ns = guest_io::namespace(&ctrl, nsid);
        let data = guest_io::random_bytes(8 * ns.lba_size() as usize, u64::from(nsid));
        guest_io::write_read_verify(&ctrl, &mut qp, &ns, ns.blocks() - 8, &data);
    }
    // Each namespace is its own image: what went to 128 is not on 127 or 129.
    for nsid in [127u32, 129] {
        let ns = guest_io::namespace(&ctrl, nsid);
        let got = guest_io::read(
            &ctrl,
            &mut qp,
            &ns,
            ns.blocks() - 8,
            8 * ns.lba_size() as usize,
        );
        assert!(got.iter().all(|&b| b == 0), "ns {nsid} was never written");
    }
}
