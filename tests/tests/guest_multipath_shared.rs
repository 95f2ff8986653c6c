//! Scenario `multipath`: two controllers of one NVMe subsystem, both on vfio-pci, sharing two
//! namespaces: same subsystem NQN, CMIC says several controllers, distinct controller IDs, the
//! same namespaces; data written through one controller reads back identical through the other.

use vfnvme::spec::identify::IdentifyController;
use vfnvme_tests::{guest, guest_checks, guest_io};

/// CMIC bit 1: the subsystem may have two or more controllers.
const CMIC_MULTI_CONTROLLER: u8 = 1 << 1;

fn check_subsystem(id: &IdentifyController, bdf: &str) {
    assert_eq!(
        id.subnqn.trim_end_matches('\0').trim(),
        guest::expect_var("VFNVME_EXPECT_SUBNQN"),
        "{bdf}: subsystem NQN"
    );
    assert_ne!(
        id.cmic & CMIC_MULTI_CONTROLLER,
        0,
        "{bdf}: CMIC {:#x}",
        id.cmic
    );
}

#[test]
fn both_controllers_see_one_subsystem_and_the_same_data() {
    if !guest::in_guest(
        "guest_multipath_shared::both_controllers_see_one_subsystem_and_the_same_data",
    ) {
        return;
    }
    let devices = guest::vfio_devices();
    assert_eq!(
        devices.len(),
        2,
        "the multipath scenario has two vfio controllers"
    );
    let a = guest_io::open(&devices[0]);
    let b = guest_io::open(&devices[1]);
    guest_checks::check_identify(&a, Some(0x10));
    guest_checks::check_identify(&b, Some(0x11));
    check_subsystem(&a.identify().identify, &devices[0]);
    check_subsystem(&b.identify().identify, &devices[1]);
    assert_ne!(
        a.identify().identify.cntlid,
        b.identify().identify.cntlid,
        "controllers of one subsystem have distinct IDs"
    );
    let mut qa = guest_io::qpair(&a, 32);
    let mut qb = guest_io::qpair(&b, 32);
    for exp in guest::expected_namespaces(Some(0x10)) {
        let na = guest_io::namespace(&a, exp.nsid);
        let nb = guest_io::namespace(&b, exp.nsid);
        assert_eq!(
            na.identity(),
            nb.identity(),
            "ns {}: the same namespace identity through both controllers",
            exp.nsid
        );
        let len = 64 * 1024;
        let count = 16;
        let seed = 0x3a70_0000 + u64::from(exp.nsid) * 0x1000;
        // A writes, B reads; then B overwrites part, A reads.
        guest_io::pipelined_write_read_verify(&a, &mut qa, &na, 0, len, count, seed);
        guest_io::verify_pipelined(&b, &mut qb, &nb, 0, len, count, seed);
        let lba_count = (len / na.lba_size() as usize) as u64;
        let seed_b = seed + 0x800;
        guest_io::pipelined_write_read_verify(&b, &mut qb, &nb, 4 * lba_count, len, 4, seed_b);
        guest_io::verify_pipelined(&a, &mut qa, &na, 4 * lba_count, len, 4, seed_b);
        guest_io::verify_pipelined(&a, &mut qa, &na, 0, len, 4, seed);
        // The last block, through both.
        let last = guest_io::random_bytes(na.lba_size() as usize, seed + 0x900);
        guest_io::write(&b, &mut qb, &nb, exp.blocks - 1, &last);
        let got = guest_io::read(&a, &mut qa, &na, exp.blocks - 1, last.len());
        guest_io::assert_same(
            &last,
            &got,
            na.lba_size(),
            "last block, written by B, read by A",
        );
    }
}
