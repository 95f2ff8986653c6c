//! Scenario `data`: admin commands against QEMU beyond bring-up: Get Features (Number of
//! Queues) agrees with what bring-up granted, the SMART / Health log counts exactly the
//! commands and data the test sent; and a second open of a device in use fails cleanly.

use vfnvme::spec::command::feature_id;
use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme_tests::{guest, guest_io};

/// Log page 02h, SMART / Health Information.
const LID_SMART: u8 = 0x02;

/// The SMART counters (data units in thousands of 512-byte units, rounded up; commands).
#[derive(Debug, Clone, Copy)]
struct Smart {
    units_read: u128,
    units_written: u128,
    read_commands: u128,
    write_commands: u128,
}

fn smart(ctrl: &guest_io::Ctrl) -> Smart {
    let buf = ctrl
        .get_log_page(LID_SMART, 0xffff_ffff, 512, false)
        .expect("Get Log Page (SMART)");
    let b = buf.as_slice();
    let at = |o: usize| u128::from_le_bytes(b[o..o + 16].try_into().expect("16 bytes"));
    Smart {
        units_read: at(32),
        units_written: at(48),
        read_commands: at(64),
        write_commands: at(80),
    }
}

#[test]
fn get_features_number_of_queues_matches_bring_up() {
    if !guest::in_guest("guest_data_admin::get_features_number_of_queues_matches_bring_up") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let dw0 = ctrl
        .get_features(feature_id::NUMBER_OF_QUEUES, 0)
        .expect("Get Features (Number of Queues)");
    let (nsq, ncq) = ((dw0 & 0xffff) + 1, (dw0 >> 16) + 1);
    let granted = u32::from(ctrl.identify().io_queue_pairs);
    assert_eq!(nsq.min(ncq), granted, "dw0 {dw0:#x}");
}

#[test]
fn smart_log_counts_what_was_sent() {
    if !guest::in_guest("guest_data_admin::smart_log_counts_what_was_sent") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let ns = guest_io::namespace(&ctrl, 1);
    let mut qp = guest_io::qpair(&ctrl, 32);
    let before = smart(&ctrl);
    // 20 writes of 100 KiB (200 units of 512 B each): 4000 units = 4 thousand-units.
    guest_io::pipelined_write_read_verify(&ctrl, &mut qp, &ns, 1000, 100 * 1024, 20, 0x5a);
    let after = smart(&ctrl);
    assert_eq!(
        after.write_commands - before.write_commands,
        20,
        "{before:?} -> {after:?}"
    );
    assert_eq!(
        after.read_commands - before.read_commands,
        20,
        "{before:?} -> {after:?}"
    );
    let written = after.units_written - before.units_written;
    let read = after.units_read - before.units_read;
    assert!((4..=5).contains(&written), "{before:?} -> {after:?}");
    assert!((4..=5).contains(&read), "{before:?} -> {after:?}");
}

#[test]
fn second_open_of_a_device_in_use_fails_cleanly() {
    if !guest::in_guest("guest_data_admin::second_open_of_a_device_in_use_fails_cleanly") {
        return;
    }
    let bdf = &guest::vfio_devices()[0];
    let ctrl = guest_io::open(bdf);
    let err = VfioPlatform::open(bdf, VfioOptions::default())
        .expect_err("the device is already open in this process");
    let msg = err.to_string();
    assert!(msg.contains("already open"), "says why: {msg}");
    // The first user is unaffected.
    let ns = guest_io::namespace(&ctrl, 1);
    let mut qp = guest_io::qpair(&ctrl, 8);
    guest_io::write_read_verify(&ctrl, &mut qp, &ns, 3, &guest_io::random_bytes(4096, 1));
}
