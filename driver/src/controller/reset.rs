//! Controller reset (CC.EN 1 → 0 → 1) for a controller without I/O queue pairs.

use super::admin::AdminQueue;
use super::{bringup, events, Controller};
use crate::error::Error;
use crate::platform::Platform;
use crate::spec::Command;

impl<P: Platform> Controller<P> {
    /// Resets the controller: CC.EN = 0 and wait for CSTS.RDY = 0 (within CAP.TO), program a
    /// fresh admin queue, CC.EN = 1 and wait for CSTS.RDY = 1, then ask again for the I/O queue
    /// count (Set Features, Number of Queues), re-send Doorbell Buffer Config if shadow
    /// doorbells were on, and re-arm the Asynchronous Event Requests.
    ///
    /// A reset deletes every I/O queue on the controller, so this refuses with
    /// [`Error::ResetWithQueues`] while any [`QueuePair`](crate::QueuePair) is open (it does
    /// not recreate them). Namespaces stay registered; call [`rescan`](Self::rescan) if the
    /// reset may have changed them. Admin commands that timed out earlier are forgotten: the
    /// memory parked with them is freed once the controller is disabled. A controller that was
    /// already disabled to free memory after a failed queue delete (or could not be) is not
    /// brought back: that is [`Error::ShutDown`].
    pub fn reset(&self) -> Result<(), Error> {
        let shared = &self.shared;
        let mut queues = shared.queues.lock().unwrap_or_else(|e| e.into_inner());
        // Not after `quiesce`: memory freed (or leaked) on the promise that the controller
        // stays disabled must not meet an enabled controller again.
        if queues.shut_down || !shared.live() {
            return Err(Error::ShutDown);
        }
        let pairs = queues.in_use.iter().filter(|u| **u).count();
        if pairs > 0 {
            return Err(Error::ResetWithQueues { pairs });
        }
        let platform = &*shared.platform;
        {
            let mut admin = shared.admin.lock().unwrap_or_else(|e| e.into_inner());
            bringup::disable(platform, shared.cap, self.info.quirks)?;
            // The controller is disabled: it no longer reads or writes the old rings, nor the
            // memory parked with timed-out commands, which goes with the old queue.
            let fresh = AdminQueue::new(
                platform.dma(),
                platform.regs(),
                admin.depth() as u16,
                shared.cap.dstrd(),
            )?;
            bringup::program_admin_queue(platform, &fresh);
            *admin = fresh;
            bringup::enable(platform, shared.cap, self.info.quirks)?;
        }
        let granted = bringup::number_of_queues(shared, queues.in_use.len() as u16)?;
        queues.in_use.truncate(usize::from(granted));
        if let Some(s) = &shared.shadow {
            let cmd = Command::doorbell_buffer_config(s.doorbells.iova(), s.event_idx.iova());
            // SAFETY: the shadow pages belong to `shared.shadow`, kept for as long as the
            // controller runs (the device used them before the reset already).
            // The I/O queues created later write these pages: a reset that can't restore
            // them fails rather than leave the queues ringing doorbells nobody reads.
            unsafe { shared.admin_sync_raw(cmd) }?;
        }
        drop(queues);
        events::enable_namespace_notices(self);
        Ok(())
    }
}
