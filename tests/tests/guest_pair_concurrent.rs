//! Scenario `pair`: two controllers on vfio-pci driven at once, one thread per controller
//! (each brings its own controller up), same LBAs with different data; afterwards each
//! controller holds its own data only.

use vfnvme_tests::{guest, guest_checks, guest_io};

const CHUNK: usize = 32 * 1024;
const CHUNKS: usize = 64; // 2 MiB per controller
const FIRST_LBA: u64 = 4096;

fn seed_of(i: usize) -> u64 {
    0x9a12_0000 + i as u64 * 0x1_0000
}

#[test]
fn two_controllers_at_once_keep_their_own_data() {
    if !guest::in_guest("guest_pair_concurrent::two_controllers_at_once_keep_their_own_data") {
        return;
    }
    let devices = guest::vfio_devices();
    assert_eq!(
        devices.len(),
        2,
        "the pair scenario has two vfio controllers"
    );
    std::thread::scope(|s| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(i, bdf)| {
                s.spawn(move || {
                    let ctrl = guest_io::open(bdf);
                    guest_checks::check_identify(&ctrl, Some(0x10 + i as u8));
                    let ns = guest_io::namespace(&ctrl, 1);
                    let mut qp = guest_io::qpair(&ctrl, 32);
                    guest_io::pipelined_write_read_verify(
                        &ctrl,
                        &mut qp,
                        &ns,
                        FIRST_LBA,
                        CHUNK,
                        CHUNKS,
                        seed_of(i),
                    );
                })
            })
            .collect();
        for (h, bdf) in handles.into_iter().zip(&devices) {
            if let Err(e) = h.join() {
                std::panic::resume_unwind(Box::new(format!("{bdf}: {e:?}")));
            }
        }
    });
    // Both open at once again: each reads back its own data, not the other's.
    let ctrls: Vec<_> = devices.iter().map(|b| guest_io::open(b)).collect();
    for (i, ctrl) in ctrls.iter().enumerate() {
        let ns = guest_io::namespace(ctrl, 1);
        let mut qp = guest_io::qpair(ctrl, 32);
        guest_io::verify_pipelined(ctrl, &mut qp, &ns, FIRST_LBA, CHUNK, CHUNKS, seed_of(i));
    }
}
