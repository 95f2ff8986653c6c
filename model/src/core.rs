//! The controller's shared state, the virtual clock, doorbells and completion posting.
//!
//! Lock order (never taken the other way): `ctrl` (admin SQ, registers, events) → an I/O `sqs`
//! slot → a `cqs` slot → the namespace table / storage / IOMMU table (leaf locks).

use super::config::ModelConfig;
use super::events::Events;
use super::faults::{Fault, Faults, NAMESPACE_NOT_READY, UNRECOVERED_READ, WRITE_FAULT};
use super::iommu::ModelIommu;
use super::namespaces::{ModelNamespace, NamespaceTable};
use super::queues::{Cq, Kind, Sq};
use super::sharded::ShardedRw;
use super::sqe::{Outcome, Sqe};
use super::stats::{Counters, Event};
use super::subsystem::SubsystemLink;
use super::{admin, io};
use crossbeam_utils::CachePadded;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLockReadGuard};
use std::time::Instant;

/// The smallest virtual-time step of an idle `relax()`.
const IDLE_STEP_MIN: u64 = 1_000;
/// The largest: repeated idle waits (e.g. a timeout on a controller that never gets ready)
/// double the step up to this.
const IDLE_STEP_MAX: u64 = 1_000_000;

/// State changed by register writes and admin commands.
#[derive(Debug, Default)]
pub(crate) struct CtrlState {
    pub cc: u32,
    pub aqa: u32,
    pub asq: u64,
    pub acq: u64,
    /// CC.EN accepted (admin queues set up).
    pub enabled: bool,
    /// CSTS.CFS from a bad enable.
    pub cfs: bool,
    pub ready_at: Option<u64>,
    /// Virtual time of the last CC.EN change (for `early_csts_read_fatal_ns`).
    pub en_changed_at: Option<u64>,
    /// CSTS.RDY keeps reading 1 until then after CC.EN=0 (`disable_delay_ns`).
    pub rdy_clear_at: Option<u64>,
    pub shutdown_at: Option<u64>,
    pub admin_sq: Option<Sq>,
    /// Memory page size from CC.MPS.
    pub page: u64,
    /// Number of Queues granted (0-based SQs, CQs), once set.
    pub queues_granted: Option<(u16, u16)>,
    /// Saved feature values by FID.
    pub features: BTreeMap<u8, u32>,
    pub events: Events,
    /// Firmware slots and sanitize state.
    pub maintenance: super::admin_maint::Maintenance,
    /// Enables (CC.EN 0 → 1) so far.
    pub enables: u32,
    /// ANA groups and their states on this controller (subsystem controllers only).
    pub ana: super::ana::AnaCtrl,
}

/// A command held back by a [`Stall`](super::config::Stall) rule.
#[derive(Debug)]
pub(crate) struct Stalled {
    pub qid: u16,
    pub cqid: u16,
    pub sqhd: u16,
    /// When it executes.
    pub at: u64,
    pub completes: bool,
    pub raw: [u8; super::sqe::SQE_BYTES],
}

/// The virtual clock in nanoseconds, alone in its cache line: every poll of every queue reads
/// it and the queues' pollers move it on, so a neighbour written by one thread would make the
/// others miss on each read.
pub(crate) type VirtualClock = Arc<CachePadded<AtomicU64>>;

/// The whole device.
#[derive(Debug)]
pub(crate) struct Core {
    pub cfg: ModelConfig,
    pub nn: u32,
    /// Virtual time; one clock for every controller of a subsystem.
    clock: VirtualClock,
    /// The subsystem this controller belongs to (shared namespaces, ANA groups).
    pub subsys: Option<Arc<SubsystemLink>>,
    /// The earliest scheduled ANA change (`u64::MAX`: none), checked by each poll.
    pub ana_next_at: AtomicU64,
    idle_step: AtomicU64,
    pub iommu: Arc<ModelIommu>,
    pub ctrl: Mutex<CtrlState>,
    namespaces: ShardedRw<NamespaceTable>,
    /// I/O submission queues by qid (slot 0 unused: the admin SQ lives in `ctrl`). Each slot
    /// has its own cache line: queues polled by different threads (a lock and a head written
    /// per command) would otherwise bounce a shared line between cores.
    pub sqs: Box<[CachePadded<Mutex<Option<Sq>>>]>,
    /// Completion queues by qid (slot 0 = admin), one cache line (or more) each, as `sqs`.
    pub cqs: Box<[CachePadded<Mutex<Option<Cq>>>]>,
    pub counters: Counters,
    /// A DMA failure the controller can't report in a CQE (CSTS.CFS).
    pub fatal: AtomicBool,
    /// Shadow doorbell buffer IOVA (0 = off).
    pub shadow: AtomicU64,
    /// EventIdx buffer IOVA.
    pub eventidx: AtomicU64,
    /// Memory page size for I/O queues (copied from `ctrl` at enable).
    pub io_page: AtomicU64,
    /// Commands held back by the configured stalls (leaf lock).
    pub stalled: Mutex<Vec<Stalled>>,
    /// Per stall rule: how many commands it held back so far.
    pub stall_used: Mutex<Vec<u32>>,
    /// Seeded fault injection (`ModelConfig::faults`).
    pub faults: Faults,
}

/// What fault injection did with a command just fetched.
enum Injected {
    /// No fault: execute it as usual.
    None,
    /// The fault took care of it.
    Handled,
    /// The controller stopped: fetch nothing more.
    Stop,
}

/// Adds the host time between its creation and its drop to a queue's busy counter.
pub(crate) struct BusyTimer<'a> {
    start: Option<Instant>,
    counters: &'a Counters,
    qid: usize,
}

impl Drop for BusyTimer<'_> {
    fn drop(&mut self) {
        if let Some(start) = self.start {
            let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.counters.add_busy(self.qid, ns);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Core {
    pub fn new(
        cfg: ModelConfig,
        iommu: Arc<ModelIommu>,
        subsys: Option<Arc<SubsystemLink>>,
    ) -> Self {
        let nn = cfg.effective_nn();
        let queues = usize::from(cfg.max_io_queue_pairs) + 1;
        let link = subsys.as_deref();
        let initial = |nsid: u32| {
            link.and_then(|l| l.initial.get(&l.group_of(nsid)))
                .map_or(0, |&s| s as u8)
        };
        let table = cfg
            .namespaces
            .iter()
            .map(|n| {
                let ns = ModelNamespace::new(n, cfg.seed)
                    .with_metadata(cfg.metadata_of(n.nsid))
                    .in_subsystem(link, initial(n.nsid));
                (n.nsid, Arc::new(ns))
            })
            .collect();
        let mut ana = super::ana::AnaCtrl::default();
        if let Some(l) = link {
            for (&id, &state) in &l.initial {
                ana.groups.insert(
                    id,
                    super::ana::Group {
                        state,
                        change_count: 0,
                    },
                );
            }
        }
        Core {
            nn,
            clock: subsys
                .as_ref()
                .map_or_else(VirtualClock::default, |l| l.clock.clone()),
            subsys,
            ana_next_at: AtomicU64::new(u64::MAX),
            idle_step: AtomicU64::new(IDLE_STEP_MIN),
            iommu,
            ctrl: Mutex::new(CtrlState {
                page: 4096,
                ana,
                ..CtrlState::default()
            }),
            namespaces: ShardedRw::new(table),
            sqs: (0..queues)
                .map(|_| CachePadded::new(Mutex::new(None)))
                .collect(),
            cqs: (0..queues)
                .map(|_| CachePadded::new(Mutex::new(None)))
                .collect(),
            counters: Counters::new(queues),
            fatal: AtomicBool::new(false),
            shadow: AtomicU64::new(0),
            eventidx: AtomicU64::new(0),
            io_page: AtomicU64::new(4096),
            stalled: Mutex::new(Vec::new()),
            stall_used: Mutex::new(vec![0; cfg.stalls.len()]),
            faults: Faults::new(cfg.faults, cfg.seed),
            cfg,
        }
    }

    pub fn lock_ctrl(&self) -> MutexGuard<'_, CtrlState> {
        lock(&self.ctrl)
    }
    pub fn ns_read(&self) -> RwLockReadGuard<'_, NamespaceTable> {
        self.namespaces.read()
    }
    /// Changes the namespace table (all shards).
    pub fn ns_write<R>(&self, f: impl FnOnce(&mut NamespaceTable) -> R) -> R {
        self.namespaces.write(f)
    }
    /// Runs `f` on the attached namespace `nsid` without cloning its `Arc` (the I/O path).
    pub fn with_active_ns<R>(&self, nsid: u32, f: impl FnOnce(&ModelNamespace) -> R) -> Option<R> {
        let table = self.ns_read();
        table.get(&nsid).filter(|n| n.is_attached()).map(|n| f(n))
    }
    /// The attached namespace `nsid`.
    pub fn active_ns(&self, nsid: u32) -> Option<Arc<ModelNamespace>> {
        self.ns_read()
            .get(&nsid)
            .filter(|n| n.is_attached())
            .cloned()
    }

    /// Measures host time spent in the model on queue `qid` until dropped (if configured).
    fn busy(&self, qid: usize) -> BusyTimer<'_> {
        BusyTimer {
            start: self.cfg.measure_busy_time.then(Instant::now),
            counters: &self.counters,
            qid,
        }
    }

    // ----- virtual time -----

    pub fn now(&self) -> u64 {
        self.clock.load(Ordering::Acquire)
    }
    /// Moves the clock forward to `t` (never backwards).
    pub fn advance_to(&self, t: u64) {
        if t > self.now() {
            self.clock.fetch_max(t, Ordering::AcqRel);
        }
    }
    fn reset_idle(&self) {
        if self.idle_step.load(Ordering::Relaxed) != IDLE_STEP_MIN {
            self.idle_step.store(IDLE_STEP_MIN, Ordering::Relaxed);
        }
    }

    /// Advances virtual time by the idle step, then doubles the step (up to `IDLE_STEP_MAX`).
    fn idle_advance(&self) {
        let step = self.idle_step.load(Ordering::Relaxed);
        self.idle_step
            .store((step * 2).min(IDLE_STEP_MAX), Ordering::Relaxed);
        self.clock.fetch_add(step, Ordering::AcqRel);
    }

    /// Whether fault injection may hold commands that complete late or never (configured
    /// stalls, or armed faults).
    #[inline]
    fn may_hold_commands(&self) -> bool {
        !self.cfg.stalls.is_empty() || self.faults.armed.load(Ordering::Relaxed)
    }

    /// Whether commands that complete on `cq` (number `cqid`) are held back with nothing
    /// pending for them: stalled, or (fault injection) still open with their completion lost.
    fn holds_for(&self, cqid: usize, cq: &Cq) -> bool {
        !cq.open.is_empty()
            || lock(&self.stalled)
                .iter()
                .any(|s| usize::from(s.cqid) == cqid)
    }

    /// Advances virtual time to the next model event after now, or by an idle step.
    pub fn relax(&self) {
        let _busy = self.busy(0);
        let now = self.now();
        let mut next: Option<u64> = None;
        let mut consider = |t: Option<u64>| {
            if let Some(t) = t.filter(|&t| t > now) {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        {
            let c = self.lock_ctrl();
            consider(c.ready_at);
            consider(c.shutdown_at);
            consider(Some(c.ana.next_at()).filter(|&t| t != u64::MAX));
        }
        for cq in self.cqs.iter() {
            consider(lock(cq).as_ref().and_then(Cq::next_due));
        }
        match next {
            Some(t) => {
                self.reset_idle();
                self.advance_to(t);
            }
            None => self.idle_advance(),
        }
        // Stalled commands are not events to jump to (they would complete before the driver
        // saw its timeout): they run when time passes them.
        self.run_stalled();
        self.run_ana_schedule();
    }

    // ----- doorbells -----

    /// A write to doorbell register `index` (offset 0x1000 + 4 * index, DSTRD = 0).
    pub fn doorbell(&self, index: usize, value: u32) {
        if self.halted() {
            return;
        }
        self.reset_idle();
        let qid = index / 2;
        let _busy = self.busy(qid);
        if index.is_multiple_of(2) {
            self.counters.queue(qid, Event::SqDoorbell);
            if qid == 0 {
                self.ring_admin_sq(value);
            } else {
                self.ring_io_sq(qid, value);
            }
        } else {
            self.counters.queue(qid, Event::CqDoorbell);
            if !self.set_cq_head(qid, value) {
                self.counters.invalid_doorbell();
            }
        }
    }

    fn set_cq_head(&self, qid: usize, head: u32) -> bool {
        let Some(slot) = self.cqs.get(qid) else {
            return false;
        };
        let mut g = lock(slot);
        match g.as_mut() {
            Some(cq) if cq.head_ok(head) => {
                cq.head = head;
                if qid != 0 && self.shadow_on().is_some() {
                    // Trust the shadow head only while the host keeps it equal to what it rings.
                    cq.shadow_ok = self.read_shadow(2 * qid + 1) == Some(head);
                    self.cq_eventidx(qid, cq);
                }
                true
            }
            _ => false,
        }
    }

    fn ring_admin_sq(&self, tail: u32) {
        let mut c = self.lock_ctrl();
        let c = &mut *c;
        let Some(sq) = c.admin_sq.as_mut().filter(|sq| sq.tail_ok(tail)) else {
            self.counters.invalid_doorbell();
            return;
        };
        sq.tail = tail;
        while let Some(sq) = c.admin_sq.as_mut().filter(|sq| sq.head != sq.tail) {
            let raw = match sq.fetch(&self.iommu) {
                Ok(raw) => raw,
                Err(_) => {
                    self.fatal.store(true, Ordering::Release);
                    sq.head = sq.tail;
                    return;
                }
            };
            let sqhd = sq.head as u16;
            if self.stall(0, 0, sqhd, &raw) {
                continue;
            }
            let sqe = Sqe(raw);
            let outcome = admin::execute(self, c, &sqe);
            if let Some(o) = outcome {
                let due = self.now() + self.cfg.admin_latency_ns;
                self.complete(0, due, (sqe.cid(), sqe.opcode()), (0, sqhd), o);
            }
        }
    }

    fn ring_io_sq(&self, qid: usize, tail: u32) {
        let Some(slot) = self.sqs.get(qid) else {
            self.counters.invalid_doorbell();
            return;
        };
        let mut g = lock(slot);
        match g.as_mut() {
            Some(sq) if sq.tail_ok(tail) => {
                sq.tail = tail;
                self.run_io_sq(sq);
                if self.shadow_on().is_some() {
                    // Rung: the model now polls this queue's shadow tail in `before_poll`, if
                    // the host keeps the shadow equal to what it rings.
                    sq.awake = self.read_shadow(2 * qid) == Some(tail);
                    self.sq_eventidx(sq);
                }
            }
            _ => self.counters.invalid_doorbell(),
        }
    }

    /// Fetches and executes everything between head and tail of an I/O SQ. The commands of one
    /// doorbell (or shadow tail) arrive together: one reading of the virtual clock dates them
    /// all, so that they come due together even if another queue's poller moves the shared
    /// clock meanwhile (which would split the batch, and make each command read a line that
    /// poller just wrote).
    pub(super) fn run_io_sq(&self, sq: &mut Sq) {
        let page = self.io_page.load(Ordering::Relaxed);
        let due = self.now() + self.cfg.io_latency_ns;
        while sq.head != sq.tail {
            let raw = match sq.fetch(&self.iommu) {
                Ok(raw) => raw,
                Err(_) => {
                    self.fatal.store(true, Ordering::Release);
                    sq.head = sq.tail;
                    return;
                }
            };
            if !self.cfg.stalls.is_empty() && self.stall(sq.qid, sq.cqid, sq.head as u16, &raw) {
                continue;
            }
            if self.faults.on.load(Ordering::Relaxed) {
                match self.faulted(sq, &raw, page) {
                    Injected::Handled => continue,
                    Injected::Stop => return,
                    Injected::None => {}
                }
            }
            let sqe = Sqe(raw);
            let o = io::execute(self, &sqe, page);
            self.complete(
                sq.cqid,
                due,
                (sqe.cid(), sqe.opcode()),
                (sq.qid, sq.head as u16),
                o,
            );
        }
    }

    /// Whether a fault stopped the controller: fatal status or a vanished device (fault
    /// injection only; the controller runs on after other fatal conditions).
    #[inline]
    pub fn halted(&self) -> bool {
        self.faults.armed.load(Ordering::Relaxed)
            && (self.faults.gone.load(Ordering::Acquire) || self.fatal.load(Ordering::Acquire))
    }

    /// Fault injection: draws the fault of the I/O command `raw` just fetched from `sq` (its
    /// head is past it) and carries it out. See `faults.rs`.
    fn faulted(&self, sq: &mut Sq, raw: &[u8; super::sqe::SQE_BYTES], page: u64) -> Injected {
        let sqe = Sqe(*raw);
        let (cid, opcode) = (sqe.cid(), sqe.opcode());
        let sqhd = sq.head as u16;
        let Some(fault) = self.faults.draw() else {
            self.open(sq.cqid, sq.qid, cid);
            return Injected::None;
        };
        let due = self.now() + self.cfg.io_latency_ns;
        let plan = self.faults.plan();
        let extra = |kind: Kind, due: u64, o: &Outcome| {
            if let Some(cq) = self.cqs.get(usize::from(sq.cqid)) {
                if let Some(cq) = lock(cq).as_mut() {
                    cq.push(due, cid, sq.qid, sqhd, opcode, o.status, o.dw0, kind);
                }
            }
        };
        match fault {
            Fault::Late => {
                self.open(sq.cqid, sq.qid, cid);
                lock(&self.stalled).push(Stalled {
                    qid: sq.qid,
                    cqid: sq.cqid,
                    sqhd,
                    at: self.now().saturating_add(plan.late_ns),
                    completes: true,
                    raw: *raw,
                });
            }
            Fault::Lost => {
                // Its identifier stays in use: the host still waits for it.
                self.open(sq.cqid, sq.qid, cid);
                io::execute(self, &sqe, page);
            }
            Fault::Duplicate | Fault::UnknownCid => {
                self.open(sq.cqid, sq.qid, cid);
                let o = io::execute(self, &sqe, page);
                self.complete(sq.cqid, due, (cid, opcode), (sq.qid, sqhd), o);
                if fault == Fault::Duplicate {
                    let later = self.faults.next() % plan.duplicate_within_ns.saturating_add(1);
                    extra(Kind::Duplicate, due.saturating_add(later), &o);
                } else {
                    extra(Kind::UnknownCid, due, &Outcome::ok(0));
                }
            }
            Fault::Retryable | Fault::MediaError => {
                self.open(sq.cqid, sq.qid, cid);
                let status = match (fault, opcode) {
                    (Fault::Retryable, _) => NAMESPACE_NOT_READY,
                    (_, io::op::READ) => UNRECOVERED_READ,
                    _ => WRITE_FAULT,
                };
                self.complete(sq.cqid, due, (cid, opcode), (sq.qid, sqhd), status.into());
            }
            Fault::Fatal => {
                self.fatal.store(true, Ordering::Release);
                return Injected::Stop;
            }
            Fault::Gone => {
                self.faults.gone.store(true, Ordering::Release);
                return Injected::Stop;
            }
            // Drawn at enable only (see `registers.rs`).
            Fault::NoReady => {
                self.open(sq.cqid, sq.qid, cid);
                return Injected::None;
            }
        }
        Injected::Handled
    }

    /// Fault injection: marks command `cid` of `sqid` outstanding on CQ `cqid`.
    fn open(&self, cqid: u16, sqid: u16, cid: u16) {
        if let Some(cq) = self.cqs.get(usize::from(cqid)) {
            if let Some(cq) = lock(cq).as_mut() {
                cq.open(sqid, cid);
            }
        }
    }

    /// Holds the command `raw` back if a stall rule matches it; returns whether it did.
    fn stall(&self, qid: u16, cqid: u16, sqhd: u16, raw: &[u8; super::sqe::SQE_BYTES]) -> bool {
        let opcode = Sqe(*raw).opcode();
        let Some((i, rule)) = self
            .cfg
            .stalls
            .iter()
            .enumerate()
            .find(|(_, s)| s.qid == qid && s.opcode == opcode)
        else {
            return false;
        };
        {
            let mut used = lock(&self.stall_used);
            let Some(n) = used.get_mut(i) else {
                return false;
            };
            if rule.count != 0 && *n >= rule.count {
                return false;
            }
            *n += 1;
        }
        lock(&self.stalled).push(Stalled {
            qid,
            cqid,
            sqhd,
            at: self.now().saturating_add(rule.after_ns),
            completes: rule.completes,
            raw: *raw,
        });
        true
    }

    /// Executes the held-back commands that are due (their data moves now) and queues their
    /// completions (due now) if they complete.
    pub fn run_stalled(&self) {
        if !self.may_hold_commands() {
            return;
        }
        // A stopped (fatal) or vanished device moves no data.
        if self.halted() {
            return;
        }
        let now = self.now();
        let due: Vec<Stalled> = {
            let mut s = lock(&self.stalled);
            let (due, later) = std::mem::take(&mut *s)
                .into_iter()
                .partition(|s| s.at <= now);
            *s = later;
            due
        };
        for st in due {
            let sqe = Sqe(st.raw);
            let outcome = if st.qid == 0 {
                let mut c = self.lock_ctrl();
                if !c.enabled {
                    continue;
                }
                admin::execute(self, &mut c, &sqe)
            } else {
                Some(io::execute(
                    self,
                    &sqe,
                    self.io_page.load(Ordering::Relaxed),
                ))
            };
            if let (Some(o), true) = (outcome, st.completes) {
                self.complete(
                    st.cqid,
                    now,
                    (sqe.cid(), sqe.opcode()),
                    (st.qid, st.sqhd),
                    o,
                );
            }
        }
    }

    /// The host memory of every I/O command the device holds and has not executed yet
    /// (configured stalls and late completions), as (IOVA, length) ranges: see
    /// [`io::data_ranges`]. Empty once the device is gone (it will execute nothing).
    pub fn held_data(&self) -> Vec<(u64, u64)> {
        if self.faults.gone.load(Ordering::Acquire) {
            return Vec::new();
        }
        let page = self.io_page.load(Ordering::Relaxed);
        let held: Vec<[u8; super::sqe::SQE_BYTES]> = lock(&self.stalled)
            .iter()
            .filter(|s| s.qid != 0)
            .map(|s| s.raw)
            .collect();
        let mut out = Vec::new();
        for raw in held {
            io::data_ranges(self, &Sqe(raw), page, &mut out);
        }
        out
    }

    /// Queues the completion of command (cid, opcode) from (sqid, sqhd) on CQ `cqid`.
    pub fn complete(&self, cqid: u16, due: u64, cmd: (u16, u8), sq: (u16, u16), o: Outcome) {
        if let Some(slot) = self.cqs.get(usize::from(cqid)) {
            if let Some(cq) = lock(slot).as_mut() {
                cq.push(
                    due,
                    cmd.0,
                    sq.0,
                    sq.1,
                    cmd.1,
                    o.status,
                    o.dw0,
                    Kind::Genuine,
                );
            }
        }
    }

    /// Records a namespace change and completes an outstanding AER for it if there is one.
    pub fn ns_changed(&self, c: &mut CtrlState, nsid: u32) {
        if let Some((cid, dw0)) = c.events.ns_changed(nsid) {
            let sqhd = c.admin_sq.as_ref().map_or(0, |sq| sq.head as u16);
            self.complete(
                0,
                self.now(),
                (cid, admin::op::AER),
                (0, sqhd),
                Outcome::ok(dw0),
            );
        }
    }

    // ----- polling -----

    /// Posts CQ `cqid`'s due completions; if none is due, jumps to its next one.
    pub fn before_poll(&self, cqid: u16) {
        if self.halted() {
            return;
        }
        self.run_stalled();
        self.run_ana_schedule();
        let cqid = usize::from(cqid);
        let _busy = self.busy(cqid);
        self.poll_shadow(cqid);
        let Some(slot) = self.cqs.get(cqid) else {
            return;
        };
        let mut g = lock(slot);
        let Some(cq) = g.as_mut() else { return };
        if cq.pending.is_empty() && self.may_hold_commands() && self.holds_for(cqid, cq) {
            // Nothing will complete on this queue unless time passes: a command the device
            // holds (a stall, a lost completion) is only noticed by the host's timeout, which
            // a host that just polls would otherwise never reach. Time passes while it polls,
            // as on a real device: the smallest idle step per poll (about what a poll of an
            // idle queue costs; a 30 s timeout takes 30 M polls, a 200 ms wait of the host
            // polls far fewer).
            drop(g);
            self.clock.fetch_add(IDLE_STEP_MIN, Ordering::AcqRel);
            return;
        }
        if cq.pending.is_empty() || cq.free() == 0 {
            return;
        }
        let reorder = self.cfg.reorder_completions;
        let counters = &self.counters;
        let post = |cq: &mut Cq, now: u64| {
            cq.post_due(&self.iommu, now, reorder, |op| counters.completed(cqid, op))
        };
        let result = match post(cq, self.now()) {
            Ok(0) => match cq.next_due() {
                Some(t) => {
                    self.advance_to(t);
                    post(cq, self.now())
                }
                None => Ok(0),
            },
            r => r,
        };
        if result.is_err() {
            self.fatal.store(true, Ordering::Release);
        }
    }

    // ----- reset -----

    /// Tears down every queue (CC.EN 1 → 0).
    pub fn reset_queues(&self, c: &mut CtrlState) {
        c.admin_sq = None;
        lock(&self.stalled).clear();
        for s in self.sqs.iter() {
            *lock(s) = None;
        }
        for q in self.cqs.iter() {
            *lock(q) = None;
        }
        self.shadow.store(0, Ordering::Release);
        self.eventidx.store(0, Ordering::Release);
        self.fatal.store(false, Ordering::Release);
    }
}
