//! Controller reset and health checks from the controller's side (the mechanism, shared with
//! the queue pairs, is in `admin/recovery.rs`).

use super::Controller;
use crate::error::Error;
use crate::platform::{Platform, RegisterIo};
use crate::spec::registers::{Csts, CSTS};
use std::sync::atomic::Ordering;

impl<P: Platform> Controller<P> {
    /// Resets the controller: CC.EN = 0 and wait for CSTS.RDY = 0 (within CAP.TO), a fresh
    /// admin queue, CC.EN = 1 and wait for CSTS.RDY = 1, then the number of queues, shadow
    /// doorbells, the asynchronous event configuration and requests and the features set
    /// through [`set_features`](Self::set_features) again, and a rescan of the namespaces.
    ///
    /// Queue pairs stay valid handles: at their next poll, each ends the requests it had in
    /// flight with [`Status::ABORTED_BY_RESET`](crate::spec::Status::ABORTED_BY_RESET)
    /// (buffers handed back) and creates its queues again. Admin commands that timed out
    /// earlier are forgotten: the memory parked with them is freed once the controller is
    /// disabled. If the reset fails the controller is marked failed: later calls fail with
    /// [`Error::ControllerFailed`] and queue pairs end their requests with
    /// [`Status::CONTROLLER_LOST`](crate::spec::Status::CONTROLLER_LOST). A controller that
    /// was shut down, or disabled to free memory after a failed queue delete, is not brought
    /// back: that is [`Error::ShutDown`].
    pub fn reset(&self) -> Result<(), Error> {
        self.shared.reset(None)?;
        self.rescan_after_reset()
    }

    /// Looks at the controller's health (the admin poll does this): registers that read all ones,
    /// or a platform that says the device is going away ([`Platform::removed`]: the kernel asked
    /// for it back), mark it removed; Controller Fatal Status (CSTS.CFS) resets it; a reset done by
    /// a queue pair is followed by the namespace rescan it calls for.
    pub fn check_health(&self) -> Result<(), Error> {
        let csts = Csts(self.shared.platform.regs().read32(CSTS));
        if csts.is_all_ones() || self.shared.platform.removed() {
            self.shared.mark_removed();
            return Err(Error::ControllerRemoved);
        }
        if !self.shared.live() {
            return Err(self.shared.not_live_error());
        }
        if csts.cfs() {
            log::error!(
                "{}: Controller Fatal Status (CSTS {:#x}); resetting",
                self.shared.platform.name(),
                csts.0
            );
            self.shared.reset(None)?;
        }
        self.rescan_after_reset()
    }

    /// Rescans the namespaces if a reset asked for it.
    fn rescan_after_reset(&self) -> Result<(), Error> {
        if self.shared.rescan_due.swap(false, Ordering::AcqRel) {
            self.rescan()?;
        }
        Ok(())
    }
}
