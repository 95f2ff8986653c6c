//! Controller recovery shared by the controller and its queue pairs: the controller reset that
//! keeps queue pairs open, the state a failed or removed controller ends in, and the events
//! that tell subscribers.
//!
//! A reset disables the controller (CC.EN = 0, CSTS.RDY = 0 within CAP.TO): from then on the
//! device no longer touches any queue's memory, so the reset bumps the *reset epoch*. It then
//! programs a fresh admin queue, enables the controller and restores what the driver had set
//! (number of queues, shadow doorbells, asynchronous event configuration and requests, the
//! features set through the safe API). It does not touch the queue pairs, which belong to
//! other threads: each one notices the new epoch at its next poll that finds no completion (or
//! its next periodic check), ends every request it had in flight with
//! [`Status::ABORTED_BY_RESET`](crate::spec::Status::ABORTED_BY_RESET) (handing the buffers back: the device stopped), resets its
//! rings and creates its queues again. A doorbell written before that lands on a queue the
//! controller no longer has, which moves no data.

use super::enable;
use super::queue::AdminQueue;
use super::shared::{Shared, DISABLED, FAILED, GONE, LIVE, RESETTING, STUCK};
use crate::error::Error;
use crate::platform::{Platform, RegisterIo};
use crate::spec::command::feature_id;
use crate::spec::features::NumberOfQueues;
use crate::spec::Command;
use std::sync::atomic::Ordering;

/// A change of the controller's state, delivered to
/// [`Controller::subscribe_controller_events`](crate::Controller::subscribe_controller_events)
/// subscribers (and through the C ABI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControllerEvent {
    /// An I/O command did not complete within the I/O timeout.
    TimedOut {
        /// Its queue.
        qid: u16,
        /// Its command identifier.
        cid: u16,
    },
    /// An Abort was sent for a timed-out command.
    AbortSent {
        /// Its queue.
        qid: u16,
        /// Its command identifier.
        cid: u16,
    },
    /// A controller reset began.
    ResetStarted,
    /// The reset finished; queue pairs recreate their queues at their next poll.
    ResetDone,
    /// The controller failed (fatal status, or a reset that did not bring it back): every
    /// request ends with [`Status::CONTROLLER_LOST`](crate::spec::Status::CONTROLLER_LOST).
    Failed,
    /// The device is gone (its registers read all ones, or the kernel asked for it back).
    Removed,
}

/// What a queue pair finds when it looks at the controller after a reset epoch change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Enabled again: recreate the queues.
    Live,
    /// Disabled for good, failed or gone: the device no longer uses any queue memory.
    Lost,
    /// Could not be disabled: the device may still use queue memory, which must be leaked.
    Stuck,
}

impl<P: Platform> Shared<P> {
    /// The reset epoch: bumped each time the controller is disabled by a reset, or marked
    /// failed or gone. Queue pairs compare it with the epoch they created their queues in.
    #[inline(always)]
    pub(crate) fn epoch(&self) -> u32 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Waits (bounded by the reset's own timeouts) until no reset is running, and says what
    /// the controller is now.
    pub(crate) fn settled(&self) -> Settled {
        loop {
            match self.device.load(Ordering::Acquire) {
                RESETTING => self.platform.relax(),
                LIVE => return Settled::Live,
                STUCK => return Settled::Stuck,
                _ => return Settled::Lost,
            }
        }
    }

    /// Resets the controller with its queue pairs open (see the module documentation). With
    /// `if_epoch`, does nothing when a reset happened since that epoch was read (two queue
    /// pairs that time out together reset once). On failure the controller ends failed (or
    /// stuck, if it could not even be disabled) and every later call fails.
    pub fn reset(&self, if_epoch: Option<u32>) -> Result<(), Error> {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if queues.shut_down {
            return Err(Error::ShutDown);
        }
        match self.device.load(Ordering::Acquire) {
            LIVE => {}
            FAILED => return Err(Error::ControllerFailed),
            GONE => return Err(Error::ControllerRemoved),
            _ => return Err(Error::ShutDown),
        }
        if if_epoch.is_some_and(|e| e != self.epoch()) {
            return Ok(());
        }
        let requested = queues.in_use.len() as u16;
        self.device.store(RESETTING, Ordering::Release);
        self.events.publish(ControllerEvent::ResetStarted);
        // A reset the driver decided on (recovery: `if_epoch`) is news; one the caller asked
        // for is not, unless it fails.
        let level = if if_epoch.is_some() {
            log::Level::Warn
        } else {
            log::Level::Info
        };
        log::log!(level, "{}: resetting the controller", self.platform.name());
        let result = self.reset_locked(requested);
        match &result {
            Ok(()) => {
                self.device.store(LIVE, Ordering::Release);
                self.events.publish(ControllerEvent::ResetDone);
                log::log!(level, "{}: controller reset done", self.platform.name());
            }
            Err(e) => {
                log::error!("{}: controller reset failed: {e}", self.platform.name());
                self.events.publish(ControllerEvent::Failed);
            }
        }
        drop(queues);
        result
    }

    /// The steps of [`reset`](Self::reset), under the queue id lock.
    fn reset_locked(&self, requested: u16) -> Result<(), Error> {
        let platform = &*self.platform;
        {
            let mut admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = enable::disable(platform, self.cap, self.quirks) {
                // The device may still use every queue's memory: nobody may reclaim it.
                self.mark_stuck(&e);
                return Err(e);
            }
            // The device stopped: queue pairs may now end their requests and take their
            // buffers back. Parked admin buffers go with the old admin queue.
            self.epoch.fetch_add(1, Ordering::AcqRel);
            let fresh = AdminQueue::new(
                platform.dma(),
                platform.regs(),
                admin.depth() as u16,
                self.cap.dstrd(),
            )
            .map_err(|e| self.fail_disabled(e.into()))?;
            // SAFETY: the controller is disabled (above); `fresh` becomes the admin queue
            // `self` keeps until the controller is disabled again (or leaks it on drop).
            unsafe { enable::program_admin_queue(platform, &fresh) };
            *admin = fresh;
            // SAFETY: the admin queue just programmed is `self.admin`'s (as above).
            unsafe { enable::enable(platform, self.cap, self.quirks) }.map_err(|e| self.fail(e))?;
        }
        let c = self
            .admin_sync_resetting(Command::set_number_of_queues(requested, requested))
            .map_err(|e| self.fail(e))?;
        let granted = NumberOfQueues::from_dw0(c.dw0).pairs();
        if granted < u32::from(requested) {
            log::warn!(
                "{}: after the reset the controller grants {granted} I/O queue pairs, fewer than the {requested} before: queue pairs above that fail",
                platform.name()
            );
        }
        if let Some(s) = &self.shadow {
            let cmd = Command::doorbell_buffer_config(s.doorbells.iova(), s.event_idx.iova());
            // SAFETY: the shadow pages belong to `self.shadow`, kept as long as the controller
            // runs (the device used them before the reset already).
            unsafe { self.admin_batch_unchecked(std::slice::from_ref(&cmd)) }
                .map_err(|e| self.fail(e))?;
        }
        let aec = self.async_event_config.load(Ordering::Relaxed);
        if aec != 0 {
            let cmd = Command::set_features(feature_id::ASYNC_EVENT_CONFIG, aec);
            if let Err(e) = self.admin_sync_resetting(cmd) {
                log::warn!(
                    "{}: restoring the asynchronous event configuration: {e}",
                    platform.name()
                );
            }
        }
        let features = self
            .features
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (fid, cdw11) in features {
            if let Err(e) = self.admin_sync_resetting(Command::set_features(fid, cdw11)) {
                log::warn!("{}: restoring feature {fid:#04x}: {e}", platform.name());
            }
        }
        let want = self.aer_target.load(Ordering::Relaxed);
        self.admin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .arm_aers(platform, want);
        self.rescan_due.store(true, Ordering::Release);
        Ok(())
    }

    /// A step after the disable failed: the controller is marked failed (a best-effort disable
    /// first, so that it stays off) and `e` passed on.
    fn fail(&self, e: Error) -> Error {
        if let Err(d) = enable::disable(&*self.platform, self.cap, self.quirks) {
            self.mark_stuck(&d);
            return e;
        }
        self.fail_disabled(e)
    }

    /// As [`fail`](Self::fail), for a controller known to be disabled.
    fn fail_disabled(&self, e: Error) -> Error {
        self.device.store(FAILED, Ordering::Release);
        e
    }

    /// Marks the device gone (registers read all ones, or the kernel asked for it back): every
    /// request in flight ends with [`Status::CONTROLLER_LOST`](crate::spec::Status) at its
    /// queue pair's next poll, and every later call fails with
    /// [`Error::ControllerRemoved`]. A device that still answers (the kernel asked for it
    /// back but has not pulled it yet) is disabled first, so that the memory it was given may
    /// be freed; if that fails it is marked stuck (memory leaked) instead. Waits for a running
    /// reset to finish. Returns whether this call made the change.
    pub fn mark_removed(&self) -> bool {
        let _queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.device.load(Ordering::Acquire);
        if matches!(old, GONE | DISABLED | STUCK) {
            return false;
        }
        let csts =
            crate::spec::registers::Csts(self.platform.regs().read32(crate::spec::registers::CSTS));
        if !csts.is_all_ones() {
            let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = enable::disable(&*self.platform, self.cap, self.quirks) {
                self.mark_stuck(&format_args!("it is going away: {e}"));
                // Queue pairs notice at their next check and end their requests, held.
                self.epoch.fetch_add(1, Ordering::AcqRel);
                self.events.publish(ControllerEvent::Removed);
                return true;
            }
        }
        self.device.store(GONE, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.events.publish(ControllerEvent::Removed);
        log::error!("{}: the controller is gone", self.platform.name());
        true
    }

    /// Runs one admin command without data during a reset (the state is not yet live).
    fn admin_sync_resetting(&self, cmd: Command) -> Result<crate::spec::Completion, Error> {
        crate::spec::AdminCommand::try_from(cmd)?;
        // SAFETY: the command has no data or metadata pointer (checked above).
        unsafe { self.admin_batch_unchecked(std::slice::from_ref(&cmd)) }
    }

    /// Runs `cmds` whatever the controller's state; returns the last result.
    ///
    /// # Safety
    /// As [`Shared::admin_batch`].
    unsafe fn admin_batch_unchecked(
        &self,
        cmds: &[Command],
    ) -> Result<crate::spec::Completion, Error> {
        let mut out = Err(Error::AdminTimeout {
            opcode: cmds.first().map_or(0, |c| c.opcode()),
            waited_ms: 0,
        });
        let mut admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        admin.run(&*self.platform, cmds, self.admin_timeout_ns, |_, r| out = r);
        out
    }
}
