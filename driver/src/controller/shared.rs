//! State shared by the controller and its queue pairs.

use super::admin::{AdminQueue, AdminWork};
use crate::error::Error;
use crate::platform::{Platform, RegisterIo};
use crate::queue::ring::ShadowBuffers;
use crate::spec::registers::{Cap, Cc, Csts, CC, CSTS, SHN_NORMAL, SHST_COMPLETE};
use crate::spec::{AdminCommand, Command, Completion};
use std::sync::{Arc, Mutex};

/// Which I/O queue ids are in use, and whether the controller was shut down.
#[derive(Debug)]
pub(crate) struct QueueIds {
    /// Index `qid - 1`: whether that queue pair exists on the controller.
    pub in_use: Vec<bool>,
    /// Set once the controller began shutting down.
    pub shut_down: bool,
}

/// What the controller and every queue pair share.
pub(crate) struct Shared<P: Platform> {
    pub platform: Arc<P>,
    pub cap: Cap,
    pub admin: Mutex<AdminQueue>,
    pub admin_timeout_ns: u64,
    pub queues: Mutex<QueueIds>,
    pub shadow: Option<Arc<ShadowBuffers>>,
}

impl<P: Platform> Shared<P> {
    /// Runs one admin command that has no data or metadata pointer and waits for it; a
    /// command with a pointer (or CDW0 flags) is refused with
    /// [`AdminCommandError::PointerSet`].
    pub fn admin_sync(&self, cmd: Command) -> Result<Completion, Error> {
        AdminCommand::try_from(cmd)?;
        // SAFETY: the command has no data or metadata pointer (checked above), so the device
        // reaches no memory for it.
        unsafe { self.admin_sync_raw(cmd) }
    }

    /// Runs one admin command as given and waits for it.
    ///
    /// # Safety
    /// As [`Controller::admin_sync`](super::Controller::admin_sync): every address in `cmd`
    /// must stay valid for the device until the command completes, and for good if this
    /// returns [`Error::AdminTimeout`].
    pub unsafe fn admin_sync_raw(&self, cmd: Command) -> Result<Completion, Error> {
        let mut out = Err(Error::AdminTimeout {
            opcode: cmd.opcode(),
            waited_ms: 0,
        });
        // SAFETY: the caller vouches for the command's addresses.
        unsafe { self.admin_batch(std::slice::from_ref(&cmd), |_, r| out = r) };
        out
    }

    /// Runs `cmds` pipelined, as given.
    ///
    /// # Safety
    /// As [`Controller::admin_batch`](super::Controller::admin_batch).
    pub unsafe fn admin_batch(
        &self,
        cmds: &[Command],
        done: impl FnMut(usize, Result<Completion, Error>),
    ) {
        let mut admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        admin.run(&*self.platform, cmds, self.admin_timeout_ns, done);
    }

    /// Runs `work` through the admin queue's pipelined submitter.
    ///
    /// # Safety
    /// Every address in a command `work` hands out must stay valid for the device until
    /// `work.done` is called for its slot, and for good if that reports
    /// [`Error::AdminTimeout`].
    pub unsafe fn admin_pipeline(&self, work: &mut dyn AdminWork) {
        let mut admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        admin.pipeline(&*self.platform, work, self.admin_timeout_ns);
    }

    /// Takes a free I/O queue id.
    pub fn reserve_qid(&self) -> Result<u16, Error> {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if q.shut_down {
            return Err(Error::ShutDown);
        }
        let granted = q.in_use.len() as u16;
        let idx = q
            .in_use
            .iter()
            .position(|u| !u)
            .ok_or(Error::NoFreeQueue { granted })?;
        if let Some(u) = q.in_use.get_mut(idx) {
            *u = true;
        }
        Ok(idx as u16 + 1)
    }

    /// Returns a queue id without deleting anything (creation failed).
    pub fn unreserve_qid(&self, qid: u16) {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(u) = q.in_use.get_mut(qid as usize - 1) {
            *u = false;
        }
    }

    /// Deletes I/O queue `qid` (SQ, then CQ) unless the controller already shut down.
    pub fn release_qpair(&self, qid: u16) {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if q.shut_down {
            return;
        }
        self.delete_queue(qid);
        if let Some(u) = q.in_use.get_mut(qid as usize - 1) {
            *u = false;
        }
    }

    fn delete_queue(&self, qid: u16) {
        for cmd in [Command::delete_io_sq(qid), Command::delete_io_cq(qid)] {
            if let Err(e) = self.admin_sync(cmd) {
                log::warn!("deleting I/O queue {qid}: {e}");
            }
        }
    }

    /// Deletes every live I/O queue, then CC.SHN = normal and waits for SHST = complete.
    pub fn shutdown(&self) {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if q.shut_down {
            return;
        }
        q.shut_down = true;
        for (i, used) in q.in_use.iter_mut().enumerate() {
            if *used {
                self.delete_queue(i as u16 + 1);
                *used = false;
            }
        }
        drop(q);
        let regs = self.platform.regs();
        let cc = Cc(regs.read32(CC));
        regs.write32(CC, cc.with_shn(SHN_NORMAL).0);
        let start = self.platform.now_ns();
        loop {
            let csts = Csts(regs.read32(CSTS));
            if csts.shst() == SHST_COMPLETE || csts.is_all_ones() {
                break;
            }
            if self.platform.now_ns().saturating_sub(start) > self.cap.timeout_ns() {
                log::warn!(
                    "{}: shutdown did not complete within CAP.TO (CSTS {:#x}); the device may need a reset",
                    self.platform.name(),
                    csts.0
                );
                break;
            }
            self.platform.relax();
        }
    }
}
