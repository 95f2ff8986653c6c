//! The controller's enable state through its registers: CC.EN = 0 and 1 with CSTS.RDY waits
//! bounded by CAP.TO, and programming the admin queue's registers. Used by bring-up, reset and
//! the emergency disable of [`super::Shared::quiesce`].

use super::AdminQueue;
use crate::error::Error;
use crate::platform::{Platform, RegisterIo};
use crate::quirks::{Quirks, CHK_RDY_DELAY_NS};
use crate::spec::registers::{aqa, Cap, Cc, Csts, ACQ, AQA, ASQ, CC, CSTS};

/// Waits until `done(csts)` holds, at most CAP.TO (stopping early on an all-ones read, or on
/// CSTS.CFS if `fatal_is_error`). The error is the last CSTS and the time waited in ms.
fn wait_csts<P: Platform>(
    platform: &P,
    cap: Cap,
    done: impl Fn(Csts) -> bool,
    fatal_is_error: bool,
) -> Result<(), (Csts, u64)> {
    let start = platform.now_ns();
    loop {
        let csts = Csts(platform.regs().read32(CSTS));
        if done(csts) {
            return Ok(());
        }
        let waited = platform.now_ns().saturating_sub(start);
        if csts.is_all_ones() || (fatal_is_error && csts.cfs()) || waited > cap.timeout_ns() {
            return Err((csts, waited / 1_000_000));
        }
        platform.relax();
    }
}

fn csts_error(csts: Csts, waited_ms: u64, ready: bool) -> Error {
    if csts.is_all_ones() {
        Error::DeviceGone { csts: csts.0 }
    } else if ready && csts.cfs() {
        Error::ControllerFatal { csts: csts.0 }
    } else if ready {
        Error::NotReady {
            waited_ms,
            csts: csts.0,
        }
    } else {
        Error::DisableTimeout {
            waited_ms,
            csts: csts.0,
        }
    }
}

/// After a CC.EN write: the delay some controllers need before CSTS.RDY may be read
/// ([`Quirks::DELAY_BEFORE_CHK_RDY`]).
fn quirk_delay<P: Platform>(platform: &P, quirks: Quirks) {
    if !quirks.contains(Quirks::DELAY_BEFORE_CHK_RDY) {
        return;
    }
    let start = platform.now_ns();
    while platform.now_ns().saturating_sub(start) < CHK_RDY_DELAY_NS {
        platform.relax();
    }
}

/// Step 1: CC.EN = 0 and wait for CSTS.RDY = 0.
pub(crate) fn disable<P: Platform>(platform: &P, cap: Cap, quirks: Quirks) -> Result<(), Error> {
    let regs = platform.regs();
    let cc = Cc(regs.read32(CC));
    if cc.en() {
        // SAFETY: clearing CC.EN (the rest of CC unchanged) stops the controller; it names no
        // memory.
        unsafe { regs.write32(CC, cc.with_en(false).0) };
        quirk_delay(platform, quirks);
    }
    wait_csts(platform, cap, |c| !c.rdy() && !c.is_all_ones(), false)
        .map_err(|(c, ms)| csts_error(c, ms, false))
}

/// Step 2: program AQA/ASQ/ACQ.
///
/// # Safety
/// The controller is disabled (CSTS.RDY = 0), and `admin`'s rings stay allocated until it is
/// disabled again after any [`enable`] that uses these registers (or they are leaked).
pub(crate) unsafe fn program_admin_queue<P: Platform>(platform: &P, admin: &AdminQueue) {
    let regs = platform.regs();
    let depth = admin.depth() as u16;
    // SAFETY: the controller is disabled, so none of these writes starts DMA; AQA gives the
    // sizes of `admin`'s rings (`depth` entries each), ASQ and ACQ their addresses, and the
    // caller keeps the rings for as long as an enabled controller may use them.
    unsafe {
        regs.write32(AQA, aqa(depth, depth));
        regs.write64(ASQ, admin.sq_iova());
        regs.write64(ACQ, admin.cq_iova());
    }
}

/// Step 3: enable with 64-byte SQEs, 16-byte CQEs, 4 KiB pages, NVM command set; wait RDY.
///
/// # Safety
/// AQA/ASQ/ACQ were programmed by [`program_admin_queue`] with an admin queue that is kept
/// until the controller is disabled again (or leaked): enabling starts DMA into it.
pub(crate) unsafe fn enable<P: Platform>(
    platform: &P,
    cap: Cap,
    quirks: Quirks,
) -> Result<(), Error> {
    let cc = Cc(0)
        .with_css(0)
        .with_mps(0)
        .with_iosqes(6)
        .with_iocqes(4)
        .with_en(true);
    // SAFETY: the controller fetches from and posts to the admin rings the caller programmed
    // and keeps (this function's contract); no other address register is set by the driver.
    unsafe { platform.regs().write32(CC, cc.0) };
    quirk_delay(platform, quirks);
    wait_csts(platform, cap, |c| c.rdy() && !c.is_all_ones(), true)
        .map_err(|(c, ms)| csts_error(c, ms, true))
}
