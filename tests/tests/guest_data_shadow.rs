//! Scenario `data`: shadow doorbells (Doorbell Buffer Config, which QEMU implements) on and
//! off: the queue pairs use what was asked for, and data written through one mode reads back
//! through the other. Many more commands than ring entries, so the rings wrap many times.

use vfnvme::spec::identify::OACS_DOORBELL_BUFFER_CONFIG;
use vfnvme::ControllerOptions;
use vfnvme_tests::{guest, guest_io};

const CHUNK: usize = 4096;
const CHUNKS: usize = 200;

fn run(shadow: bool, write_seed: u64, verify_seed: Option<u64>) {
    let options = ControllerOptions {
        shadow_doorbells: shadow,
        ..ControllerOptions::default()
    };
    let ctrl = guest_io::open_with(&guest::vfio_devices()[0], options);
    assert_ne!(
        ctrl.identify().oacs() & OACS_DOORBELL_BUFFER_CONFIG,
        0,
        "QEMU 7.2 advertises Doorbell Buffer Config"
    );
    assert_eq!(ctrl.identify().shadow_doorbells, shadow, "controller info");
    let ns = guest_io::namespace(&ctrl, 1);
    // Two queue pairs: slots for both qids in the shadow pages are used.
    for (i, depth) in [8u32, 32].into_iter().enumerate() {
        let mut qp = guest_io::qpair(&ctrl, depth);
        assert_eq!(
            qp.uses_shadow_doorbells(),
            shadow,
            "queue pair {}",
            qp.qid()
        );
        let first = 10_000 + i as u64 * 4096;
        if let Some(seed) = verify_seed {
            guest_io::verify_pipelined(&ctrl, &mut qp, &ns, first, CHUNK, CHUNKS, seed + i as u64);
        }
        guest_io::pipelined_write_read_verify(
            &ctrl,
            &mut qp,
            &ns,
            first,
            CHUNK,
            CHUNKS,
            write_seed + i as u64,
        );
    }
}

#[test]
fn shadow_doorbells_on_then_off() {
    if !guest::in_guest("guest_data_shadow::shadow_doorbells_on_then_off") {
        return;
    }
    run(true, 0x5ad0_0000, None);
    run(false, 0x5ad1_0000, Some(0x5ad0_0000));
    run(true, 0x5ad2_0000, Some(0x5ad1_0000));
}
