//! Scenario `data`: close and reopen. Dropping the controller deletes its queues and shuts it
//! down (CSTS.SHST = complete); opening it again re-enables it, and data written before is
//! still there.

use vfnvme::platform::Platform;
use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme::{Controller, ControllerOptions};
use vfnvme_tests::{guest, guest_io};

/// CSTS register offset and its SHST field (bits 3:2; 0b10 = shutdown complete).
const CSTS: usize = 0x1c;
const SHST_COMPLETE: u32 = 0b10;

#[test]
fn drop_shuts_down_and_reopen_finds_the_data() {
    if !guest::in_guest("guest_data_reopen::drop_shuts_down_and_reopen_finds_the_data") {
        return;
    }
    let bdf = guest::vfio_devices()[0].clone();
    for round in 0..3u64 {
        let platform = VfioPlatform::open(&bdf, VfioOptions::default())
            .unwrap_or_else(|e| panic!("round {round}: open: {e}"));
        let ctrl = Controller::new(platform.clone(), ControllerOptions::default())
            .unwrap_or_else(|e| panic!("round {round}: bring-up after the previous close: {e}"));
        let csts = platform.regs().read32(CSTS);
        assert_eq!(
            csts & 1,
            1,
            "round {round}: CSTS.RDY after bring-up ({csts:#x})"
        );
        let ns = guest_io::namespace(&ctrl, 1);
        let mut qp = guest_io::qpair(&ctrl, 16);
        if round > 0 {
            // What the previous round wrote survived its shutdown and this bring-up.
            guest_io::verify_pipelined(&ctrl, &mut qp, &ns, 8192 * round, 8192, 16, round - 1);
        }
        guest_io::pipelined_write_read_verify(
            &ctrl,
            &mut qp,
            &ns,
            8192 * (round + 1),
            8192,
            16,
            round,
        );
        if round == 1 {
            // The controller may go before its queue pairs: shutdown deletes them, and
            // dropping the queue pair afterwards sends nothing.
            drop(ctrl);
            drop(qp);
        } else {
            drop(qp);
            drop(ctrl);
        }
        let csts = platform.regs().read32(CSTS);
        assert_eq!(
            (csts >> 2) & 0b11,
            SHST_COMPLETE,
            "round {round}: CSTS.SHST after dropping the controller ({csts:#x})"
        );
        drop(platform);
    }
}
