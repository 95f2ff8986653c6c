//! The controller's shared state, the virtual clock, doorbells and completion posting.
//!
//! Lock order (never taken the other way): `ctrl` (admin SQ, registers, events) → an I/O `sqs`
//! slot → a `cqs` slot → the namespace table / storage / IOMMU table (leaf locks).

use super::config::ModelConfig;
use super::dma_engine;
use super::events::Events;
use super::iommu::ModelIommu;
use super::namespaces::{ModelNamespace, NamespaceTable};
use super::queues::{Cq, Sq};
use super::sqe::{Outcome, Sqe};
use super::stats::Counters;
use super::{admin, io};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

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
    pub shutdown_at: Option<u64>,
    pub admin_sq: Option<Sq>,
    /// Memory page size from CC.MPS.
    pub page: u64,
    /// Number of Queues granted (0-based SQs, CQs), once set.
    pub queues_granted: Option<(u16, u16)>,
    /// Saved feature values by FID.
    pub features: BTreeMap<u8, u32>,
    pub events: Events,
}

/// The whole device.
#[derive(Debug)]
pub(crate) struct Core {
    pub cfg: ModelConfig,
    pub nn: u32,
    clock: AtomicU64,
    idle_step: AtomicU64,
    pub iommu: Arc<ModelIommu>,
    pub ctrl: Mutex<CtrlState>,
    namespaces: RwLock<NamespaceTable>,
    /// I/O submission queues by qid (slot 0 unused: the admin SQ lives in `ctrl`).
    pub sqs: Box<[Mutex<Option<Sq>>]>,
    /// Completion queues by qid (slot 0 = admin).
    pub cqs: Box<[Mutex<Option<Cq>>]>,
    pub counters: Counters,
    /// A DMA failure the controller can't report in a CQE (CSTS.CFS).
    pub fatal: AtomicBool,
    /// Shadow doorbell buffer IOVA (0 = off).
    pub shadow: AtomicU64,
    /// EventIdx buffer IOVA.
    pub eventidx: AtomicU64,
    /// Memory page size for I/O queues (copied from `ctrl` at enable).
    pub io_page: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Core {
    pub fn new(cfg: ModelConfig, iommu: Arc<ModelIommu>) -> Self {
        let nn = cfg.effective_nn();
        let queues = usize::from(cfg.max_io_queue_pairs) + 1;
        let table = cfg
            .namespaces
            .iter()
            .map(|n| (n.nsid, Arc::new(ModelNamespace::new(n, cfg.seed))))
            .collect();
        Core {
            nn,
            clock: AtomicU64::new(0),
            idle_step: AtomicU64::new(IDLE_STEP_MIN),
            iommu,
            ctrl: Mutex::new(CtrlState {
                page: 4096,
                ..CtrlState::default()
            }),
            namespaces: RwLock::new(table),
            sqs: (0..queues).map(|_| Mutex::new(None)).collect(),
            cqs: (0..queues).map(|_| Mutex::new(None)).collect(),
            counters: Counters::new(),
            fatal: AtomicBool::new(false),
            shadow: AtomicU64::new(0),
            eventidx: AtomicU64::new(0),
            io_page: AtomicU64::new(4096),
            cfg,
        }
    }

    pub fn lock_ctrl(&self) -> MutexGuard<'_, CtrlState> {
        lock(&self.ctrl)
    }
    pub fn ns_read(&self) -> RwLockReadGuard<'_, NamespaceTable> {
        self.namespaces.read().unwrap_or_else(|e| e.into_inner())
    }
    pub fn ns_write(&self) -> RwLockWriteGuard<'_, NamespaceTable> {
        self.namespaces.write().unwrap_or_else(|e| e.into_inner())
    }
    /// The attached namespace `nsid`.
    pub fn active_ns(&self, nsid: u32) -> Option<Arc<ModelNamespace>> {
        self.ns_read()
            .get(&nsid)
            .filter(|n| n.is_attached())
            .cloned()
    }

    // ----- virtual time -----

    pub fn now(&self) -> u64 {
        self.clock.load(Ordering::Acquire)
    }
    /// Moves the clock forward to `t` (never backwards).
    pub fn advance_to(&self, t: u64) {
        self.clock.fetch_max(t, Ordering::AcqRel);
    }
    fn reset_idle(&self) {
        if self.idle_step.load(Ordering::Relaxed) != IDLE_STEP_MIN {
            self.idle_step.store(IDLE_STEP_MIN, Ordering::Relaxed);
        }
    }

    /// Advances virtual time to the next model event after now, or by an idle step.
    pub fn relax(&self) {
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
        }
        for cq in self.cqs.iter() {
            consider(lock(cq).as_ref().and_then(Cq::next_due));
        }
        match next {
            Some(t) => {
                self.reset_idle();
                self.advance_to(t);
            }
            None => {
                let step = self.idle_step.load(Ordering::Relaxed);
                self.idle_step
                    .store((step * 2).min(IDLE_STEP_MAX), Ordering::Relaxed);
                self.clock.fetch_add(step, Ordering::AcqRel);
            }
        }
    }

    // ----- doorbells -----

    /// A write to doorbell register `index` (offset 0x1000 + 4 * index, DSTRD = 0).
    pub fn doorbell(&self, index: usize, value: u32) {
        self.reset_idle();
        let qid = index / 2;
        if index.is_multiple_of(2) {
            Counters::bump(&self.counters.sq_doorbells);
            if qid == 0 {
                self.ring_admin_sq(value);
            } else {
                self.ring_io_sq(qid, value);
            }
        } else {
            Counters::bump(&self.counters.cq_doorbells);
            if !self.set_cq_head(qid, value) {
                Counters::bump(&self.counters.invalid_doorbells);
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
                true
            }
            _ => false,
        }
    }

    fn ring_admin_sq(&self, tail: u32) {
        let mut c = self.lock_ctrl();
        let c = &mut *c;
        let Some(sq) = c.admin_sq.as_mut().filter(|sq| sq.tail_ok(tail)) else {
            Counters::bump(&self.counters.invalid_doorbells);
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
            Counters::bump(&self.counters.invalid_doorbells);
            return;
        };
        let mut g = lock(slot);
        match g.as_mut() {
            Some(sq) if sq.tail_ok(tail) => {
                sq.tail = tail;
                self.run_io_sq(sq);
            }
            _ => Counters::bump(&self.counters.invalid_doorbells),
        }
    }

    /// Fetches and executes everything between head and tail of an I/O SQ.
    fn run_io_sq(&self, sq: &mut Sq) {
        let page = self.io_page.load(Ordering::Relaxed);
        while sq.head != sq.tail {
            let raw = match sq.fetch(&self.iommu) {
                Ok(raw) => raw,
                Err(_) => {
                    self.fatal.store(true, Ordering::Release);
                    sq.head = sq.tail;
                    return;
                }
            };
            let sqe = Sqe(raw);
            let o = io::execute(self, &sqe, page);
            let due = self.now() + self.cfg.io_latency_ns;
            self.complete(
                sq.cqid,
                due,
                (sqe.cid(), sqe.opcode()),
                (sq.qid, sq.head as u16),
                o,
            );
        }
        self.write_eventidx(2 * usize::from(sq.qid), sq.tail);
    }

    /// Queues the completion of command (cid, opcode) from (sqid, sqhd) on CQ `cqid`.
    pub fn complete(&self, cqid: u16, due: u64, cmd: (u16, u8), sq: (u16, u16), o: Outcome) {
        if let Some(slot) = self.cqs.get(usize::from(cqid)) {
            if let Some(cq) = lock(slot).as_mut() {
                cq.push(due, cmd.0, sq.0, sq.1, cmd.1, o.status, o.dw0);
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

    // ----- shadow doorbells -----

    fn shadow_on(&self) -> Option<(u64, u64)> {
        let s = self.shadow.load(Ordering::Acquire);
        (s != 0).then(|| (s, self.eventidx.load(Ordering::Acquire)))
    }

    fn write_eventidx(&self, index: usize, value: u32) {
        if let Some((_, ei)) = self.shadow_on() {
            let _ = dma_engine::write_u32(&self.iommu, ei + 4 * index as u64, value);
        }
    }

    fn read_shadow(&self, index: usize) -> Option<u32> {
        let (s, _) = self.shadow_on()?;
        Counters::bump(&self.counters.shadow_reads);
        dma_engine::read_u32(&self.iommu, s + 4 * index as u64).ok()
    }

    /// Picks up shadow doorbell values of I/O CQ `cqid` and the SQs completing into it.
    fn poll_shadow(&self, cqid: usize) {
        if cqid == 0 || self.shadow_on().is_none() {
            return;
        }
        if let Some(head) = self.read_shadow(2 * cqid + 1) {
            if let Some(slot) = self.cqs.get(cqid) {
                let mut g = lock(slot);
                if let Some(cq) = g.as_mut() {
                    if head != cq.head && cq.head_ok(head) {
                        cq.head = head;
                        Counters::bump(&self.counters.shadow_updates);
                    }
                }
            }
            self.write_eventidx(2 * cqid + 1, head);
        }
        let mut i = 0;
        while let Some(sqid) = self.cq_sq_at(cqid, i) {
            let sqid = usize::from(sqid);
            i += 1;
            let Some(slot) = self.sqs.get(sqid) else {
                continue;
            };
            let mut g = lock(slot);
            let Some(sq) = g.as_mut() else { continue };
            let Some(tail) = self.read_shadow(2 * sqid) else {
                continue;
            };
            if tail != sq.tail && sq.tail_ok(tail) {
                Counters::bump(&self.counters.shadow_updates);
                sq.tail = tail;
                self.run_io_sq(sq);
            }
        }
    }

    /// The `i`-th submission queue completing into CQ `cqid`.
    fn cq_sq_at(&self, cqid: usize, i: usize) -> Option<u16> {
        let slot = self.cqs.get(cqid)?;
        let g = lock(slot);
        g.as_ref()?.sqs.get(i).copied()
    }

    // ----- polling -----

    /// Posts CQ `cqid`'s due completions; if none is due, jumps to its next one.
    pub fn before_poll(&self, cqid: u16) {
        let cqid = usize::from(cqid);
        self.poll_shadow(cqid);
        let Some(slot) = self.cqs.get(cqid) else {
            return;
        };
        let mut g = lock(slot);
        let Some(cq) = g.as_mut() else { return };
        if cq.pending.is_empty() || cq.free() == 0 {
            return;
        }
        let reorder = self.cfg.reorder_completions;
        let admin = cqid == 0;
        let counters = &self.counters;
        let post = |cq: &mut Cq, now: u64| {
            cq.post_due(&self.iommu, now, reorder, |op| {
                counters.completed(admin, op)
            })
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
