//! Scenario `null`: a null-co namespace (1 GiB, 4 KiB LBAs, reads return zeroes): many small
//! reads pipelined through one queue pair, so that the rings and the CQ phase wrap dozens of
//! times; every read returns zeroes over the poisoned buffer.

use vfnvme_tests::{guest, guest_checks, guest_io};

#[test]
fn many_pipelined_reads_return_zeroes() {
    if !guest::in_guest("guest_null_reads::many_pipelined_reads_return_zeroes") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    guest_checks::check_identify(&ctrl, None);
    let ns = guest_io::namespace(&ctrl, 1);
    let mut qp = guest_io::qpair(&ctrl, 64);
    let count = 64 * 40;
    let mut done = 0usize;
    guest_io::pipelined(
        &ctrl,
        &mut qp,
        &ns,
        0,
        4096,
        count,
        false,
        |_, _| {},
        |c| {
            assert!(c.is_ok(), "read {}: {:?}", c.tag, c.status);
            let buf = c.buffer.expect("buffer back");
            assert!(
                buf.as_slice().iter().all(|&b| b == 0),
                "read {} did not return zeroes",
                c.tag
            );
            done += 1;
        },
    );
    assert_eq!(done, count);
}
