//! State shared by the controller and its queue pairs.

use super::queue::{AdminQueue, AdminWork, DeviceUse};
use super::recovery::ControllerEvent;
use crate::error::Error;
use crate::event_bus::EventBus;
use crate::platform::{Platform, RegisterIo};
use crate::queue::ring::ShadowBuffers;
use crate::spec::registers::{Cap, Cc, Csts, CC, CSTS, SHN_NORMAL, SHST_COMPLETE};
use crate::spec::{AdminCommand, Command, Completion};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The controller may be enabled: it may use any memory it was given.
pub(crate) const LIVE: u8 = 0;
/// CC.EN = 0 and CSTS.RDY = 0 were seen: the device no longer uses memory it was given.
pub(crate) const DISABLED: u8 = 1;
/// Disabling failed: the device may still use memory it was given, which is leaked.
pub(crate) const STUCK: u8 = 2;
/// A reset is running (see `recovery.rs`).
pub(crate) const RESETTING: u8 = 3;
/// A reset disabled the controller but could not bring it back: it stays disabled.
pub(crate) const FAILED: u8 = 4;
/// The device is gone (all-ones registers, or the kernel asked for it back).
pub(crate) const GONE: u8 = 5;

/// Which I/O queue ids are in use, and whether the controller was shut down.
#[derive(Debug)]
pub(crate) struct QueueIds {
    /// Index `qid - 1`: whether that queue pair exists on the controller.
    pub in_use: Vec<bool>,
    /// Set once the controller began shutting down.
    pub shut_down: bool,
}

/// What the controller and every queue pair share.
///
/// Memory the device was given (admin rings, parked buffers, shadow doorbells) is freed on drop
/// only once the controller is disabled; if it can't be, it is leaked (see [`Shared::quiesce`]).
pub(crate) struct Shared<P: Platform> {
    pub platform: Arc<P>,
    pub cap: Cap,
    /// Taken out only in `drop` (to free or leak it).
    pub admin: ManuallyDrop<Mutex<AdminQueue>>,
    pub admin_timeout_ns: u64,
    pub queues: Mutex<QueueIds>,
    pub shadow: Option<Arc<ShadowBuffers>>,
    /// [`LIVE`], [`DISABLED`], [`STUCK`], [`RESETTING`], [`FAILED`] or [`GONE`].
    pub device: AtomicU8,
    /// The controller's quirks (delays around CC.EN), for disabling it from here.
    pub quirks: crate::quirks::Quirks,
    /// The reset epoch (see `recovery.rs`).
    pub epoch: AtomicU32,
    /// How long an I/O command may take before its queue pair aborts it (0: never).
    pub io_timeout_ns: u64,
    /// Most retries of an I/O command (0: none).
    pub io_retries: u8,
    /// I/O commands sent again so far, on every queue pair.
    pub io_retry_count: Arc<AtomicU64>,
    /// Controller state changes, for subscribers.
    pub events: EventBus<ControllerEvent>,
    /// How many Asynchronous Event Requests to keep outstanding.
    pub aer_target: AtomicUsize,
    /// The Asynchronous Event Configuration value the driver set (0: none), restored by a
    /// reset.
    pub async_event_config: AtomicU32,
    /// Features set through the safe API without data (Feature ID, CDW11), in order, restored
    /// by a reset.
    pub features: Mutex<Vec<(u8, u32)>>,
    /// Set by a reset: the namespaces should be scanned again.
    pub rescan_due: AtomicBool,
    /// The pages every admin command of unknown length moves its data through (guard list,
    /// scratch, bounce; see `controller/admin_data.rs`): the device may keep using them after
    /// such a command completes, so they are the driver's alone, kept until the controller is
    /// disabled on drop (or leaked).
    pub unknown_pages: Mutex<Option<vfnvme_hal::DmaBuffer>>,
}

impl<P: Platform> Shared<P> {
    /// Shared state over the admin queue `admin`, programmed and (about to be) enabled.
    pub fn new(
        platform: Arc<P>,
        cap: Cap,
        admin: AdminQueue,
        admin_timeout_ns: u64,
        quirks: crate::quirks::Quirks,
    ) -> Self {
        Shared {
            platform,
            cap,
            admin: ManuallyDrop::new(Mutex::new(admin)),
            admin_timeout_ns,
            queues: Mutex::new(QueueIds {
                in_use: Vec::new(),
                shut_down: false,
            }),
            shadow: None,
            device: AtomicU8::new(LIVE),
            quirks,
            epoch: AtomicU32::new(0),
            io_timeout_ns: 0,
            io_retries: 0,
            io_retry_count: Arc::new(AtomicU64::new(0)),
            events: EventBus::default(),
            aer_target: AtomicUsize::new(0),
            async_event_config: AtomicU32::new(0),
            features: Mutex::new(Vec::new()),
            rescan_due: AtomicBool::new(false),
            unknown_pages: Mutex::new(None),
        }
    }

    /// Whether the device may still use memory it was given: the controller could not be
    /// disabled. The one rule for everything the device was given (queue rings, trackers,
    /// request buffers owned or borrowed, admin pages): none of it is freed, reused or handed
    /// back while this holds, and once set it holds for the life of the process.
    #[inline]
    pub fn memory_held(&self) -> bool {
        self.device.load(Ordering::Acquire) == STUCK
    }

    /// Records that disabling the controller failed (`why`): from now on
    /// [`memory_held`](Self::memory_held). Logged once.
    #[cold]
    pub(crate) fn mark_stuck(&self, why: &dyn std::fmt::Display) {
        if self.device.swap(STUCK, Ordering::AcqRel) != STUCK {
            log::error!(
                "{}: the controller could not be disabled ({why}); the device may still use every buffer it was given, which is kept (leaked) for the life of the process",
                self.platform.name()
            );
        }
    }

    /// Whether the controller may be enabled (not disabled by [`quiesce`](Self::quiesce), nor
    /// stuck).
    pub(crate) fn live(&self) -> bool {
        self.device.load(Ordering::Acquire) == LIVE
    }

    /// Why a command can't be sent to a controller that is not live.
    pub(crate) fn not_live_error(&self) -> Error {
        match self.device.load(Ordering::Acquire) {
            RESETTING => Error::Resetting,
            FAILED => Error::ControllerFailed,
            GONE => Error::ControllerRemoved,
            _ => Error::ShutDown,
        }
    }

    /// Makes sure the device no longer uses memory it was given: disables the controller
    /// (CC.EN = 0, CSTS.RDY = 0 within CAP.TO) unless that was done, and frees what timed-out
    /// admin commands left parked. Returns whether memory the device was given may now be
    /// freed; `false` (the controller can't be disabled) means it must be leaked.
    pub fn quiesce(&self) -> bool {
        match self.device.load(Ordering::Acquire) {
            DISABLED => return true,
            STUCK => return false,
            _ => {}
        }
        let mut admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        match self.device.load(Ordering::Acquire) {
            LIVE => {}
            // Gone: disabled by `mark_removed`, or no longer there at all (all ones). Nothing
            // is sent to it; what it was given may be freed.
            GONE => {
                admin.release_parked();
                return true;
            }
            state => return state == DISABLED,
        }
        match super::enable::disable(&*self.platform, self.cap, self.quirks) {
            Ok(()) => {
                self.device.store(DISABLED, Ordering::Release);
                admin.release_parked();
                true
            }
            Err(e) => {
                self.mark_stuck(&e);
                false
            }
        }
    }

    /// Runs one admin command on DMA memory the admin queue owns while the device may use it
    /// (see [`AdminQueue::run_owned`]): `data` comes back with a successful completion; after a
    /// timeout it stays parked until the completion arrives or the controller is disabled.
    ///
    /// # Safety
    /// Every device address in `cmd` (PRP1/PRP2, the PRP list entries, MPTR) must lie inside
    /// DMA buffers that `data` owns, covering every byte the command moves; `device_use` must
    /// say how long the device uses them.
    pub unsafe fn admin_sync_owned<T: Send + 'static>(
        &self,
        cmd: Command,
        data: T,
        device_use: DeviceUse,
    ) -> Result<(Completion, T), Error> {
        if !self.live() {
            return Err(self.not_live_error());
        }
        let mut admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        admin.run_owned(
            &*self.platform,
            cmd,
            data,
            device_use,
            self.admin_timeout_ns,
        )
    }

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
        mut done: impl FnMut(usize, Result<Completion, Error>),
    ) {
        if !self.live() {
            for i in 0..cmds.len() {
                done(i, Err(self.not_live_error()));
            }
            return;
        }
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
        if !self.live() {
            work.timed_out(0);
            return;
        }
        let mut admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        admin.pipeline(&*self.platform, work, self.admin_timeout_ns);
    }

    /// Takes a free I/O queue id.
    pub fn reserve_qid(&self) -> Result<u16, Error> {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if q.shut_down {
            return Err(Error::ShutDown);
        }
        if !self.live() {
            return Err(self.not_live_error());
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

    /// Tears down I/O queue pair `qid` for a dropped queue pair and says whether its memory
    /// (rings, trackers, buffers in flight) may be freed: SPDK's order, Delete SQ, `reap` what
    /// completed, Delete CQ; the caller then fails what is left. If a delete fails the controller
    /// is disabled first; `false` means it could not be, and the memory must be leaked.
    pub fn release_qpair(&self, qid: u16, reap: impl FnMut()) -> bool {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if q.shut_down || !self.live() {
            // Deleted by `shutdown`, or the controller was disabled (or is stuck).
            return self.quiesced_or_live_deleted();
        }
        let ok = self.delete_queue(qid, true, reap);
        if ok {
            if let Some(u) = q.in_use.get_mut(qid as usize - 1) {
                *u = false;
            }
            return true;
        }
        self.quiesce()
    }

    /// A queue pair whose creation failed: deletes what may exist of it (`sq`, `cq`: whether
    /// a create command for it succeeded or timed out) and says whether its memory may be
    /// freed, as [`release_qpair`](Self::release_qpair) does.
    pub fn abandon_qpair(&self, qid: u16, sq: bool, cq: bool) -> bool {
        if !cq {
            // The SQ is created after the CQ (`sq` implies `cq`): the device never got any of
            // this queue pair's memory.
            self.unreserve_qid(qid);
            return true;
        }
        let q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if !self.live() {
            return self.quiesced_or_live_deleted();
        }
        let ok = self.delete_queue(qid, sq, || {});
        drop(q);
        if ok {
            self.unreserve_qid(qid);
            return true;
        }
        self.quiesce()
    }

    /// After `shutdown` or a disable: whether queue memory may be freed.
    fn quiesced_or_live_deleted(&self) -> bool {
        // While LIVE with `shut_down` set, `shutdown` deleted every queue successfully (a
        // failure disables the controller under the same lock).
        !self.memory_held()
    }

    /// Delete SQ `qid` (if `sq`), `reap`, Delete CQ `qid`: whether every delete succeeded.
    fn delete_queue(&self, qid: u16, sq: bool, mut reap: impl FnMut()) -> bool {
        if sq {
            if let Err(e) = self.admin_sync(Command::delete_io_sq(qid)) {
                log::warn!("deleting I/O submission queue {qid}: {e}; disabling the controller before its memory is freed");
                return false;
            }
            reap();
        }
        self.delete_cq(qid)
    }

    fn delete_cq(&self, qid: u16) -> bool {
        match self.admin_sync(Command::delete_io_cq(qid)) {
            Ok(_) => true,
            Err(e) => {
                log::warn!("deleting I/O completion queue {qid}: {e}; disabling the controller before its memory is freed");
                false
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
        let mut all_deleted = true;
        for (i, used) in q.in_use.iter_mut().enumerate() {
            if *used && self.live() {
                all_deleted &= self.delete_queue(i as u16 + 1, true, || {});
                *used = false;
            }
        }
        if !all_deleted {
            // Under the queue lock, so that a queue pair dropped meanwhile sees the outcome.
            self.quiesce();
        }
        drop(q);
        if !self.live() {
            return;
        }
        let regs = self.platform.regs();
        let cc = Cc(regs.read32(CC));
        // SAFETY: a shutdown notification (the rest of CC unchanged) names no memory; the
        // controller finishes with memory it was given, which `self` keeps until `quiesce`.
        unsafe { regs.write32(CC, cc.with_shn(SHN_NORMAL).0) };
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

impl<P: Platform> Drop for Shared<P> {
    /// Frees the admin rings, parked buffers and shadow doorbells only once the controller is
    /// disabled (a failed bring-up, or after `shutdown`); leaks them if it can't be.
    fn drop(&mut self) {
        let idle = self.quiesce();
        // SAFETY: `admin` is taken exactly once, here, and `self` is not used afterwards (only
        // its remaining fields are dropped).
        let admin = unsafe { ManuallyDrop::take(&mut self.admin) };
        let unknown_pages = self
            .unknown_pages
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if idle {
            return;
        }
        let pool = self.platform.dma();
        pool.leak(admin);
        if let Some(pages) = unknown_pages {
            pool.leak(pages);
        }
        if let Some(shadow) = self.shadow.take() {
            pool.leak(shadow);
        }
        log::error!(
            "{}: leaked the admin queue's DMA memory (the controller could not be disabled)",
            self.platform.name()
        );
    }
}
