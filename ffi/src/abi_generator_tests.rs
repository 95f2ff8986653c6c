//! A seeded generator of C ABI use on the model (issue 30, "exactly once"): per seed a random
//! model (queue limits, lost, late and duplicate completions, stalls, a controller that can't
//! be disabled, a small I/O timeout) and a random sequence of libvfnvme calls on it (queue
//! pairs of random depth, reads, writes and flushes on random parts of random buffers,
//! polls with random `max`, callbacks that free their buffer, try to free the queue pair or
//! close the controller, submit more or reset; resets, removals; or channels on the heads of a
//! model subsystem). After every step it checks:
//! - every request ends exactly once (a second end is "duplicated"; what has not ended after
//!   the final drain is "lost"; a request whose submission failed never ends);
//! - no completion is delivered while the device may still access the request's buffer
//!   ([`ModelPlatform::held_data`]) unless flagged as held (`cpl.rc == VFNVME_ERR_BUSY`):
//!   "handed back while held";
//! - no vfnvme_dma_free / vfnvme_subsys_dma_free returns 0 for a buffer the device may still
//!   access: "freed while held";
//! - the model saw no DMA outside live buffers (`dma_violations`);
//! - the calls that must be refused (depth 1 or above the controller's limit, freeing a queue
//!   pair or closing a controller from a callback, poll_completions with max 0) are refused
//!   with a status, not a panic: "misuse accepted".
//!
//! `SEEDS=N` runs N seeds (default 1000 in a release build, 200 in a debug build); `SEED=N`
//! replays seed N alone. Run with `--nocapture` for the table; `GEN_VERBOSE=1` also lists every
//! failing seed with its scenario and first failure.

use crate::abi_model_support::{open_ctrl, open_subsys, release};
use crate::ctrl::*;
use crate::model::vfnvme_ctrl_model_request_removal;
use crate::mp::channel::*;
use crate::mp::model::vfnvme_subsys_model_remove;
use crate::mp::subsys::*;
use crate::mp::types::ChannelOpts;
use crate::qpair::*;
use crate::types::{Completion, Cpl};
use crate::Status;
use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Arc;
use vfnvme::multipath::HeadOptions;
use vfnvme::platform::Platform;
use vfnvme::ControllerOptions;
use vfnvme_model::{
    AnaState, Backing, FaultPlan, ModelAnaGroup, ModelConfig, ModelNamespaceConfig, ModelPlatform,
    ModelSubsystemConfig, Stall,
};

const OK: i32 = 0;
const BUSY: i32 = Status::VfnvmeErrBusy as i32;
const INTERNAL: i32 = Status::VfnvmeErrInternal as i32;

/// splitmix64: the generator's only source of randomness.
struct Rng(u64);

impl Rng {
    /// The next 64 random bits.
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (0 for n = 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    /// True with probability `per_mille` / 1000.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
    /// Log-uniform in `1..=2^bits` (each power of two as likely as the next).
    fn log_uniform(&mut self, bits: u32) -> u64 {
        let b = self.below(u64::from(bits) + 1) as u32;
        let lo = 1u64 << b.saturating_sub(1);
        let hi = (1u64 << b).max(1);
        if b == 0 {
            1
        } else {
            self.range(lo + 1, hi)
        }
    }
}

/// The kinds of failure the generator counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A request that never ended.
    Lost,
    /// A request that ended twice (or a refused one that ended).
    Duplicated,
    /// Completion delivered while the device may still access the buffer, not flagged.
    HandedBackHeld,
    /// A buffer freed while the device may still access it.
    FreedHeld,
    /// A device access outside live buffers.
    Violation,
    /// A call that must be refused was accepted, or panicked.
    Misuse,
}

impl Kind {
    /// Every kind, in table order.
    const ALL: [Kind; 6] = [
        Kind::Lost,
        Kind::Duplicated,
        Kind::HandedBackHeld,
        Kind::FreedHeld,
        Kind::Violation,
        Kind::Misuse,
    ];
}

/// Counters of one seed (or all).
#[derive(Debug, Default, Clone)]
struct Tally {
    /// Requests submitted (submission returned 0).
    requests: u64,
    /// Requests that ended with success.
    ok: u64,
    /// Requests that ended with an error status.
    err: u64,
    /// Failures by [`Kind`] (index in `Kind::ALL`).
    bad: [u64; 6],
    /// A note on the first failure of each kind.
    note: [Option<String>; 6],
}

impl Tally {
    /// Counts a failure of `kind`, noting what happened.
    fn fail(&mut self, kind: Kind, what: impl FnOnce() -> String) {
        let i = Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.bad[i] += 1;
        if self.note[i].is_none() {
            self.note[i] = Some(what());
        }
    }
}

/// A DMA buffer of the run.
struct Buf {
    ptr: *mut u8,
    iova: u64,
    len: usize,
    live: bool,
}

/// What a callback does (single controllers), or what the generator does right after the
/// delivery (channels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    None,
    /// Frees the request's buffer.
    FreeBuf,
    /// Tries to free the queue pair (or close the channel): BUSY from a callback.
    TryFreeQp,
    /// Tries to close the controller (or subsystem): BUSY, queue pairs exist.
    TryClose,
    /// Submits another request.
    Submit,
    /// Resets the controller.
    Reset,
}

/// One request.
struct Req {
    /// Index in `World::bufs` (None: flush).
    buf: Option<usize>,
    /// The IOVA and length of its data.
    iova: u64,
    len: u64,
    /// Submission returned 0.
    accepted: bool,
    /// Times it ended.
    ends: u32,
    action: Action,
    /// A short description, for notes.
    what: String,
}

/// The argument of a request: the world and the request's index.
struct Arg {
    world: *const World,
    id: usize,
}

/// Everything a run (and its callbacks) shares.
struct World {
    seed: u64,
    ctrl: *mut Ctrl,
    sub: *mut Subsys,
    platforms: Vec<Arc<ModelPlatform>>,
    lba_size: u64,
    ns_blocks: u64,
    rng: RefCell<Rng>,
    bufs: RefCell<Vec<Buf>>,
    reqs: RefCell<Vec<Req>>,
    /// Every request's argument, boxed so that its address (given to C) stays put while the
    /// vector grows.
    #[allow(clippy::vec_box)]
    args: RefCell<Vec<Box<Arg>>>,
    /// Completions delivered since the last settle (id, cpl).
    delivered: RefCell<Vec<(usize, Cpl)>>,
    /// The queue pair being polled (callbacks submit on it).
    cur_qp: Cell<*mut Qpair>,
    tally: RefCell<Tally>,
    removed: Cell<bool>,
    /// Resets asked for (steps and callbacks).
    resets: Cell<u32>,
    /// Depths of the queue pairs allocated.
    depths: RefCell<Vec<u32>>,
}

/// Whether `iova..iova+len` overlaps one of `held`.
fn overlaps(held: &[(u64, u64)], iova: u64, len: u64) -> bool {
    len > 0
        && held
            .iter()
            .any(|&(s, l)| s < iova.saturating_add(len) && iova < s.saturating_add(l))
}

impl World {
    /// What every model of the run holds.
    fn held(&self) -> Vec<(u64, u64)> {
        self.platforms.iter().flat_map(|p| p.held_data()).collect()
    }

    /// Relaxes every model `n` times (virtual time passes).
    fn relax(&self, n: u64) {
        for _ in 0..n {
            for p in &self.platforms {
                p.relax();
            }
        }
    }

    /// Counts violations seen so far (after every step).
    fn check_violations(&self, step: &str) {
        let n: usize = self
            .platforms
            .iter()
            .map(|p| p.dma_violations().len())
            .sum();
        let mut t = self.tally.borrow_mut();
        let have = t.bad[4] as usize;
        if n > have {
            let first = self
                .platforms
                .iter()
                .flat_map(|p| p.dma_violations())
                .next()
                .unwrap_or_default();
            for _ in have..n {
                t.fail(Kind::Violation, || format!("at step {step}: {first}"));
            }
        }
    }

    /// A free range for a new request of up to `max_blocks` blocks: a live buffer, an offset in
    /// it, not overlapping any request in flight. Returns (buffer, offset, blocks).
    fn pick_range(&self, max_blocks: u64) -> Option<(usize, usize, u32)> {
        let bufs = self.bufs.borrow();
        let reqs = self.reqs.borrow();
        let mut rng = self.rng.borrow_mut();
        let live: Vec<usize> = (0..bufs.len()).filter(|&i| bufs[i].live).collect();
        if live.is_empty() {
            return None;
        }
        for _ in 0..4 {
            let bi = live[rng.below(live.len() as u64) as usize];
            let b = &bufs[bi];
            let units = b.len as u64 / self.lba_size;
            if units == 0 {
                continue;
            }
            let blocks = rng.range(1, units.min(max_blocks));
            let off = rng.below(units - blocks + 1) * self.lba_size;
            let iova = b.iova + off;
            let len = blocks * self.lba_size;
            let busy = reqs.iter().any(|r| {
                r.accepted
                    && r.ends == 0
                    && r.buf.is_some()
                    && r.iova < iova + len
                    && iova < r.iova + r.len
            });
            if !busy {
                return Some((bi, off as usize, blocks as u32));
            }
        }
        None
    }

    /// A random action for a new request.
    fn action(&self, channel: bool) -> Action {
        let r = self.rng.borrow_mut().below(100);
        match r {
            0..=69 => Action::None,
            70..=81 => Action::FreeBuf,
            82..=86 => Action::TryFreeQp,
            87..=90 => Action::TryClose,
            91..=97 if !channel => Action::Submit,
            98..=99 if !channel => Action::Reset,
            _ => Action::None,
        }
    }

    /// Records a new request and returns its id and argument pointer.
    fn new_req(
        &self,
        buf: Option<(usize, usize, u32)>,
        action: Action,
        what: String,
    ) -> (usize, *mut c_void) {
        let (bi, iova, len) = match buf {
            Some((bi, off, blocks)) => {
                let b = &self.bufs.borrow()[bi];
                (
                    Some(bi),
                    b.iova + off as u64,
                    u64::from(blocks) * self.lba_size,
                )
            }
            None => (None, 0, 0),
        };
        let mut reqs = self.reqs.borrow_mut();
        let id = reqs.len();
        reqs.push(Req {
            buf: bi,
            iova,
            len,
            accepted: false,
            ends: 0,
            action,
            what,
        });
        let arg = Box::new(Arg { world: self, id });
        let p = &*arg as *const Arg as *mut c_void;
        self.args.borrow_mut().push(arg);
        (id, p)
    }

    /// Marks request `id` accepted (its submission returned `rc`).
    fn submitted(&self, id: usize, rc: i32) {
        if rc == OK {
            self.reqs.borrow_mut()[id].accepted = true;
            self.tally.borrow_mut().requests += 1;
        } else if rc == INTERNAL {
            self.tally
                .borrow_mut()
                .fail(Kind::Misuse, || format!("submit of request {id} panicked"));
        }
    }

    /// A random read, write or flush on `qp`.
    fn submit_qp(&self, qp: *mut Qpair) {
        let kind = self.rng.borrow_mut().below(10);
        let action = self.action(false);
        let max = (128 * 1024 / self.lba_size).max(1);
        if kind == 0 {
            let (id, arg) = self.new_req(None, action, "flush".into());
            // SAFETY: a live queue pair; `arg` lives as long as the world.
            let rc = unsafe { vfnvme_qpair_flush(qp, 1, Some(on_done), arg) };
            self.submitted(id, rc);
            return;
        }
        let Some(range) = self.pick_range(max) else {
            return;
        };
        let lba = self
            .rng
            .borrow_mut()
            .below(self.ns_blocks - u64::from(range.2) + 1);
        let write = kind <= 4;
        let what = format!(
            "{} of {} blocks at lba {lba}",
            if write { "write" } else { "read" },
            range.2
        );
        let ptr = self.bufs.borrow()[range.0].ptr.wrapping_add(range.1);
        let (id, arg) = self.new_req(Some(range), action, what);
        // SAFETY: a live queue pair; the buffer is live (checked by the ABI); `arg` lives as
        // long as the world.
        let rc = unsafe {
            if write {
                vfnvme_qpair_write(qp, 1, ptr.cast(), lba, range.2, Some(on_done), arg)
            } else {
                vfnvme_qpair_read(qp, 1, ptr.cast(), lba, range.2, Some(on_done), arg)
            }
        };
        self.submitted(id, rc);
    }

    /// A random read, write or flush on channel `ch`.
    fn submit_ch(&self, ch: *mut Channel) {
        let kind = self.rng.borrow_mut().below(10);
        let action = self.action(true);
        let max = (128 * 1024 / self.lba_size).max(1);
        if kind == 0 {
            let (id, arg) = self.new_req(None, action, "flush".into());
            // SAFETY: an open channel; `arg` lives as long as the world.
            let rc = unsafe { vfnvme_channel_flush(ch, arg) };
            self.submitted(id, rc);
            return;
        }
        let Some(range) = self.pick_range(max) else {
            return;
        };
        let lba = self
            .rng
            .borrow_mut()
            .below(self.ns_blocks - u64::from(range.2) + 1);
        let write = kind <= 4;
        let what = format!(
            "channel {} of {} blocks at lba {lba}",
            if write { "write" } else { "read" },
            range.2
        );
        let ptr = self.bufs.borrow()[range.0].ptr.wrapping_add(range.1);
        let (id, arg) = self.new_req(Some(range), action, what);
        // SAFETY: an open channel; the buffer is live (checked by the ABI); `arg` lives as
        // long as the world.
        let rc = unsafe {
            if write {
                vfnvme_channel_write(ch, ptr.cast(), lba, range.2, arg)
            } else {
                vfnvme_channel_read(ch, ptr.cast(), lba, range.2, arg)
            }
        };
        self.submitted(id, rc);
    }

    /// Allocates a buffer of random size.
    fn alloc_buf(&self) {
        let len = {
            let mut rng = self.rng.borrow_mut();
            let units = rng.log_uniform(8) * 512;
            units.max(self.lba_size) as usize
        };
        let (mut p, mut iova) = (null_mut(), 0u64);
        // SAFETY: a live controller or subsystem; valid out pointers.
        let rc = unsafe {
            if self.sub.is_null() {
                vfnvme_dma_alloc(self.ctrl, len, &mut p, &mut iova)
            } else {
                vfnvme_subsys_dma_alloc(self.sub, len, &mut p, &mut iova)
            }
        };
        if rc == OK {
            self.bufs.borrow_mut().push(Buf {
                ptr: p.cast(),
                iova,
                len,
                live: true,
            });
        }
    }

    /// Frees buffer `bi` (if live) and checks it was not held.
    fn free_buf(&self, bi: usize, context: &str) {
        let (ptr, iova, len) = {
            let b = &self.bufs.borrow()[bi];
            if !b.live {
                return;
            }
            (b.ptr, b.iova, b.len as u64)
        };
        let held = self.held();
        // SAFETY: a live controller or subsystem; `ptr` is one of its buffers.
        let rc = unsafe {
            if self.sub.is_null() {
                vfnvme_dma_free(self.ctrl, ptr.cast())
            } else {
                vfnvme_subsys_dma_free(self.sub, ptr.cast())
            }
        };
        if rc == OK {
            self.bufs.borrow_mut()[bi].live = false;
            if overlaps(&held, iova, len) {
                self.tally.borrow_mut().fail(Kind::FreedHeld, || {
                    format!("{context}: buffer {iova:#x}+{len:#x} freed while the device holds it")
                });
            }
        } else if rc == INTERNAL {
            self.tally
                .borrow_mut()
                .fail(Kind::Misuse, || format!("{context}: dma_free panicked"));
        }
    }

    /// Takes the completions delivered since the last call and checks each against `held`
    /// (what the device holds right after the poll that delivered them).
    fn settle(&self, held: &[(u64, u64)], step: &str) {
        let done: Vec<(usize, Cpl)> = self.delivered.borrow_mut().drain(..).collect();
        let mut reqs = self.reqs.borrow_mut();
        let mut t = self.tally.borrow_mut();
        for (id, cpl) in done {
            let r = &mut reqs[id];
            r.ends += 1;
            if r.ends > 1 || !r.accepted {
                let (ends, what) = (r.ends, r.what.clone());
                t.fail(Kind::Duplicated, || {
                    format!(
                        "{step}: request {id} ({what}) ended {ends} times (accepted {})",
                        r.accepted
                    )
                });
                continue;
            }
            if cpl.status == 0 && cpl.rc == 0 {
                t.ok += 1;
            } else {
                t.err += 1;
            }
            let flagged = cpl.rc == BUSY;
            if !flagged && overlaps(held, r.iova, r.len) {
                let what = r.what.clone();
                t.fail(Kind::HandedBackHeld, || {
                    format!("{step}: request {id} ({what}) delivered with {cpl:?} while the device holds its buffer")
                });
            }
        }
    }

    /// Requests accepted and not ended.
    fn in_flight(&self) -> usize {
        self.reqs
            .borrow()
            .iter()
            .filter(|r| r.accepted && r.ends == 0)
            .count()
    }

    /// The buffer of request `id`.
    fn buf_of(&self, id: usize) -> Option<usize> {
        self.reqs.borrow()[id].buf
    }
}

/// The completion callback of every generated request on a queue pair: records the end and
/// does the request's action.
unsafe extern "C" fn on_done(arg: *mut c_void, cpl: *const Cpl) {
    // SAFETY: `arg` is an `Arg` owned by the world, which outlives every poll; `cpl` is valid
    // during the call.
    let (w, id, cpl) = unsafe {
        let a = &*(arg as *const Arg);
        (&*a.world, a.id, *cpl)
    };
    w.delivered.borrow_mut().push((id, cpl));
    let action = w.reqs.borrow()[id].action;
    let qp = w.cur_qp.get();
    match action {
        Action::None => {}
        Action::FreeBuf => {
            if let Some(bi) = w.buf_of(id) {
                w.free_buf(bi, "callback");
            }
        }
        Action::TryFreeQp => {
            // SAFETY: the queue pair being polled; this call must refuse (BUSY).
            let rc = unsafe { vfnvme_qpair_free(qp) };
            if rc != BUSY {
                w.tally.borrow_mut().fail(Kind::Misuse, || {
                    format!("vfnvme_qpair_free from a callback returned {rc}")
                });
            }
        }
        Action::TryClose => {
            // SAFETY: the live controller; this call must refuse (BUSY: a queue pair exists).
            let rc = unsafe { vfnvme_ctrl_close(w.ctrl) };
            if rc != BUSY {
                w.tally.borrow_mut().fail(Kind::Misuse, || {
                    format!("vfnvme_ctrl_close from a callback returned {rc}")
                });
            }
        }
        Action::Submit => w.submit_qp(qp),
        Action::Reset => {
            w.resets.set(w.resets.get() + 1);
            // SAFETY: the live controller.
            let rc = unsafe { vfnvme_ctrl_reset(w.ctrl) };
            if rc == INTERNAL {
                w.tally.borrow_mut().fail(Kind::Misuse, || {
                    "vfnvme_ctrl_reset from a callback panicked".into()
                });
            }
        }
    }
}

/// A random fault configuration for a model (`deep`: the duplicate-heavy one for deep queues).
fn model_config(rng: &mut Rng, seed: u64, deep: bool) -> (ModelConfig, u64) {
    let lba_size = if rng.chance(500) { 512 } else { 4096 };
    let max_queue_entries = if deep {
        65536
    } else {
        [64, 256, 1024, 4096, 65536][rng.below(5) as usize]
    };
    let mut faults = FaultPlan::default();
    if deep || rng.chance(600) {
        faults = FaultPlan {
            late: rng.below(150) as u16,
            lost: rng.below(30) as u16,
            duplicate: rng.below(150) as u16,
            unknown_cid: rng.below(20) as u16,
            retryable: rng.below(30) as u16,
            media_error: rng.below(30) as u16,
            fatal: if rng.chance(100) { 3 } else { 0 },
            gone: if rng.chance(100) { 3 } else { 0 },
            no_ready: if rng.chance(100) { 200 } else { 0 },
            late_ns: if rng.chance(100) {
                30_000_000_000
            } else {
                rng.range(1, 60) * 1_000_000
            },
            duplicate_within_ns: rng.range(0, 10) * 1_000_000,
        };
        if deep {
            faults.duplicate = rng.range(300, 600) as u16;
            faults.late = rng.range(100, 300) as u16;
            faults.late_ns = rng.range(20, 60) * 1_000_000;
            faults.duplicate_within_ns = rng.range(2, 8) * 1_000_000;
            faults.fatal = 0;
            faults.gone = 0;
        }
    }
    let mut stalls = Vec::new();
    if !deep && rng.chance(300) {
        for _ in 0..rng.range(1, 3) {
            stalls.push(Stall {
                qid: rng.range(1, 2) as u16,
                opcode: if rng.chance(700) { 0x02 } else { 0x01 },
                after_ns: if rng.chance(300) {
                    30_000_000_000
                } else {
                    rng.log_uniform(26) * 1_000
                },
                completes: rng.chance(700),
                count: rng.range(1, 4) as u32,
            });
        }
    }
    let ignore_disable = !deep && rng.chance(250);
    if ignore_disable && rng.chance(700) {
        // A controller that can't be disabled holding reads long past the I/O timeout.
        stalls.push(Stall {
            qid: 1,
            opcode: 0x02,
            after_ns: 30_000_000_000,
            completes: true,
            count: rng.range(1, 3) as u32,
        });
    }
    let config = ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 4096,
            lba_size: lba_size as u32,
            backing: Backing::Ram,
        }],
        max_io_queue_pairs: 8,
        max_queue_entries,
        io_latency_ns: rng.range(1, 50) * 1_000,
        seed: seed.wrapping_add(1),
        reorder_completions: rng.chance(300),
        shadow_doorbells: rng.chance(500),
        ignore_disable,
        stalls,
        faults,
        ..ModelConfig::default()
    };
    (config, lba_size)
}

/// Driver options: a small I/O timeout (so that held commands time out), some retries.
fn controller_options(rng: &mut Rng) -> ControllerOptions {
    ControllerOptions {
        io_timeout_ms: rng.range(20, 300),
        io_retries: if rng.chance(200) { 1 } else { 0 },
        shadow_doorbells: rng.chance(500),
        ..ControllerOptions::default()
    }
}

/// Polls `qp` once in a random way (callbacks or batch, random max), then settles.
fn poll_qp(w: &World, qp: *mut Qpair, step: &str) {
    let (batch, max) = {
        let mut rng = w.rng.borrow_mut();
        // GEN_NO_BATCH (a diagnostic): callbacks only, to tell which failures need
        // vfnvme_qpair_poll_completions.
        let batch = rng.chance(500) && std::env::var("GEN_NO_BATCH").is_err();
        let max = match rng.below(4) {
            0 => 1,
            1 => rng.range(1, 4) as u32,
            2 => rng.range(1, 64) as u32,
            _ => 0,
        };
        (batch, max)
    };
    w.cur_qp.set(qp);
    if batch {
        let mut out = vec![Completion::default(); max.max(1) as usize];
        // SAFETY: a live queue pair; `out` has room for `max` entries.
        let n = unsafe { vfnvme_qpair_poll_completions(qp, max, out.as_mut_ptr()) };
        if max == 0 {
            if n >= 0 || n == INTERNAL {
                w.tally.borrow_mut().fail(Kind::Misuse, || {
                    format!("poll_completions with max 0 returned {n}")
                });
            }
        } else if n > 0 {
            for c in &out[..n as usize] {
                // SAFETY: every generated request's arg is an `Arg` of this world.
                let id = unsafe { (*(c.arg as *const Arg)).id };
                w.delivered.borrow_mut().push((id, c.cpl));
            }
        }
        let held = w.held();
        w.settle(&held, step);
        // Actions of requests delivered in a batch: the generator does them now.
        let ids: Vec<usize> = out[..n.max(0) as usize]
            .iter()
            // SAFETY: as above.
            .map(|c| unsafe { (*(c.arg as *const Arg)).id })
            .collect();
        for id in ids {
            if w.reqs.borrow()[id].action == Action::FreeBuf {
                if let Some(bi) = w.buf_of(id) {
                    w.free_buf(bi, step);
                }
            }
        }
    } else {
        // SAFETY: a live queue pair; callbacks get `Arg`s of this world.
        let n = unsafe { vfnvme_qpair_process_completions(qp, max) };
        if n == INTERNAL {
            w.tally
                .borrow_mut()
                .fail(Kind::Misuse, || "process_completions panicked".into());
        }
        let held = w.held();
        w.settle(&held, step);
    }
}

/// Polls channel `ch` once with a random max, settles, and does the delivered requests'
/// actions.
fn poll_ch(w: &World, ch: *mut Channel, step: &str) {
    let max = {
        let mut rng = w.rng.borrow_mut();
        match rng.below(4) {
            0 => 1,
            1 => 0,
            _ => rng.range(1, 32) as u32,
        }
    };
    let mut out = vec![Completion::default(); max.max(1) as usize];
    // SAFETY: an open channel; `out` has room for `max` entries.
    let n = unsafe { vfnvme_channel_poll(ch, out.as_mut_ptr(), max) };
    if n == INTERNAL {
        w.tally
            .borrow_mut()
            .fail(Kind::Misuse, || "vfnvme_channel_poll panicked".into());
    }
    let got: Vec<(usize, Cpl)> = out[..n.max(0) as usize]
        .iter()
        // SAFETY: every generated request's arg is an `Arg` of this world.
        .map(|c| (unsafe { (*(c.arg as *const Arg)).id }, c.cpl))
        .collect();
    w.delivered.borrow_mut().extend(got.iter().copied());
    let held = w.held();
    w.settle(&held, step);
    for (id, _) in got {
        match w.reqs.borrow()[id].action {
            Action::FreeBuf => {
                if let Some(bi) = w.buf_of(id) {
                    w.free_buf(bi, step);
                }
            }
            Action::TryClose => {
                // SAFETY: the live subsystem; it has a channel, so closing must be refused.
                let rc = unsafe { vfnvme_subsys_close(w.sub) };
                if rc != BUSY {
                    w.tally.borrow_mut().fail(Kind::Misuse, || {
                        format!("vfnvme_subsys_close with a channel open returned {rc}")
                    });
                }
            }
            _ => {}
        }
    }
}

/// What a seed is.
fn scenario(seed: u64) -> (bool, bool) {
    let mut rng = Rng(seed ^ 0x5ce7_a410);
    let channels = rng.chance(200);
    let deep = !channels && rng.chance(40);
    (channels, deep)
}

/// One seed on a single controller: returns its tally and a one-word scenario.
fn run_ctrl(seed: u64, deep: bool) -> (Tally, String) {
    let mut rng = Rng(seed);
    let (config, lba_size) = model_config(&mut rng, seed, deep);
    let opts = controller_options(&mut rng);
    let label = format!(
        "ctrl mqe={} faults={} stalls={} ignore_disable={} timeout={}ms",
        config.max_queue_entries,
        config.faults.is_on(),
        config.stalls.len(),
        config.ignore_disable,
        opts.io_timeout_ms
    );
    let max_entries = u64::from(config.max_queue_entries);
    let m = match open_ctrl(config, opts) {
        Ok(m) => m,
        Err(e) => {
            let mut t = Tally::default();
            t.fail(Kind::Misuse, || format!("open failed: {e}"));
            return (t, label);
        }
    };
    let w = Box::new(World {
        seed,
        ctrl: m.ctrl,
        sub: null_mut(),
        platforms: vec![m.platform],
        lba_size,
        ns_blocks: 4096,
        rng: RefCell::new(rng),
        bufs: RefCell::new(Vec::new()),
        reqs: RefCell::new(Vec::new()),
        args: RefCell::new(Vec::new()),
        delivered: RefCell::new(Vec::new()),
        cur_qp: Cell::new(null_mut()),
        tally: RefCell::new(Tally::default()),
        removed: Cell::new(false),
        resets: Cell::new(0),
        depths: RefCell::new(Vec::new()),
    });
    let mut qps: Vec<*mut Qpair> = Vec::new();
    let alloc_qp = |w: &World, qps: &mut Vec<*mut Qpair>, deep_now: bool| {
        let depth = {
            let mut rng = w.rng.borrow_mut();
            if deep_now {
                rng.range(32769, 65536)
            } else if rng.chance(800) {
                rng.range(2, max_entries.min(256))
            } else {
                rng.log_uniform(16)
            }
        } as u32;
        let mut qp = null_mut();
        // SAFETY: the live controller; a valid out pointer.
        let rc = unsafe { vfnvme_qpair_alloc(w.ctrl, depth, &mut qp) };
        let must_refuse = depth < 2 || u64::from(depth) > max_entries;
        if rc == OK {
            w.depths.borrow_mut().push(depth);
        }
        if rc == OK && !must_refuse {
            qps.push(qp);
        } else if rc == OK || rc == INTERNAL {
            w.tally.borrow_mut().fail(Kind::Misuse, || {
                format!(
                    "vfnvme_qpair_alloc(depth {depth}, controller max {max_entries}) returned {rc}"
                )
            });
            if rc == OK {
                qps.push(qp);
            }
        }
    };
    for _ in 0..3 {
        w.alloc_buf();
    }
    alloc_qp(&w, &mut qps, deep);
    if qps.is_empty() {
        alloc_qp(&w, &mut qps, false);
    }
    let steps = w.rng.borrow_mut().range(20, 60);
    for s in 0..steps {
        let step = format!("step {s}");
        let pick = w.rng.borrow_mut().below(100);
        let qp = if qps.is_empty() {
            null_mut()
        } else {
            let i = w.rng.borrow_mut().below(qps.len() as u64) as usize;
            qps[i]
        };
        match pick {
            0..=44 if !qp.is_null() => {
                let n = w.rng.borrow_mut().range(1, 8);
                for _ in 0..n {
                    w.submit_qp(qp);
                }
            }
            45..=74 if !qp.is_null() => poll_qp(&w, qp, &step),
            75..=84 => {
                let n = w.rng.borrow_mut().log_uniform(8);
                w.relax(n);
            }
            85..=87 if !deep => {
                w.resets.set(w.resets.get() + 1);
                // SAFETY: the live controller.
                let rc = unsafe { vfnvme_ctrl_reset(w.ctrl) };
                if rc == INTERNAL {
                    w.tally
                        .borrow_mut()
                        .fail(Kind::Misuse, || "vfnvme_ctrl_reset panicked".into());
                }
            }
            88 if w.rng.borrow_mut().chance(300) && !w.removed.get() => {
                w.removed.set(true);
                // SAFETY: the live controller.
                unsafe { vfnvme_ctrl_model_request_removal(w.ctrl) };
            }
            89..=92 => {
                let n = w.bufs.borrow().len() as u64;
                let bi = w.rng.borrow_mut().below(n) as usize;
                if n > 0 {
                    w.free_buf(bi, &step);
                }
            }
            93..=95 => w.alloc_buf(),
            96..=97 if !qp.is_null() => {
                // SAFETY: a live queue pair (not polled now).
                let outstanding = unsafe { vfnvme_qpair_outstanding(qp) };
                // SAFETY: as above; on success the pointer is given up.
                let rc = unsafe { vfnvme_qpair_free(qp) };
                if rc == OK {
                    qps.retain(|&q| q != qp);
                    if outstanding != 0 {
                        w.tally.borrow_mut().fail(Kind::Misuse, || {
                            format!("vfnvme_qpair_free with {outstanding} outstanding returned 0")
                        });
                    }
                }
            }
            98..=99 if qps.len() < 3 => alloc_qp(&w, &mut qps, false),
            _ => {}
        }
        w.check_violations(&step);
    }
    // Drain: poll everything until nothing is in flight (bounded).
    for round in 0..20_000u32 {
        if w.in_flight() == 0 {
            break;
        }
        let step = format!("drain {round}");
        for &qp in &qps {
            poll_qp(&w, qp, &step);
        }
        w.relax(1);
        w.check_violations(&step);
    }
    let label = step_label(&w, &label);
    finish(&w);
    // Cleanup: best effort; what can't be freed is leaked.
    let mut all_freed = true;
    for qp in qps {
        // SAFETY: a live queue pair; on success the pointer is given up.
        all_freed &= unsafe { vfnvme_qpair_free(qp) } == OK;
    }
    let n = w.bufs.borrow().len();
    for bi in 0..n {
        w.free_buf(bi, "cleanup");
    }
    if all_freed {
        // SAFETY: the live controller, with no queue pair left.
        unsafe { vfnvme_ctrl_close(w.ctrl) };
    }
    w.check_violations("cleanup");
    let t = w.tally.borrow().clone();
    let World { platforms, .. } = *w;
    release(platforms);
    (t, label)
}

/// The label, with what the run did.
fn step_label(w: &World, label: &str) -> String {
    format!(
        "seed {} ({label} depths={:?} resets={} removed={})",
        w.seed,
        w.depths.borrow(),
        w.resets.get(),
        w.removed.get()
    )
}

/// Counts the requests still in flight after the drain as lost.
fn finish(w: &World) {
    let lost: Vec<(usize, String)> = w
        .reqs
        .borrow()
        .iter()
        .enumerate()
        .filter(|(_, r)| r.accepted && r.ends == 0)
        .map(|(i, r)| (i, r.what.clone()))
        .collect();
    let mut t = w.tally.borrow_mut();
    let n = lost.len();
    for (id, what) in lost {
        t.fail(Kind::Lost, || {
            format!("request {id} ({what}) never ended ({n} lost)")
        });
    }
}

/// One seed on channels of a model subsystem's head.
fn run_channels(seed: u64) -> (Tally, String) {
    let mut rng = Rng(seed);
    let (base, lba_size) = model_config(&mut rng, seed, false);
    let opts = controller_options(&mut rng);
    let faulty = if rng.chance(500) { vec![0] } else { vec![] };
    let label = format!(
        "channels mqe={} faults={} stalls={} ignore_disable={} faulty={faulty:?} timeout={}ms",
        base.max_queue_entries,
        base.faults.is_on(),
        base.stalls.len(),
        base.ignore_disable,
        opts.io_timeout_ms
    );
    let max_entries = base.max_queue_entries;
    let cfg = ModelSubsystemConfig {
        controllers: 2,
        base,
        ana_groups: vec![ModelAnaGroup {
            id: 1,
            nsids: vec![1],
            state: AnaState::Optimized,
        }],
        faulty,
        ..ModelSubsystemConfig::default()
    };
    let heads = HeadOptions {
        queue_if_no_path: false,
        ..HeadOptions::default()
    };
    let m = match open_subsys(cfg, opts, heads) {
        Ok(m) => m,
        Err(e) => {
            let mut t = Tally::default();
            t.fail(Kind::Misuse, || format!("open failed: {e}"));
            return (t, label);
        }
    };
    let w = Box::new(World {
        seed,
        ctrl: null_mut(),
        sub: m.sub,
        platforms: m.platforms,
        lba_size,
        ns_blocks: 4096,
        rng: RefCell::new(rng),
        bufs: RefCell::new(Vec::new()),
        reqs: RefCell::new(Vec::new()),
        args: RefCell::new(Vec::new()),
        delivered: RefCell::new(Vec::new()),
        cur_qp: Cell::new(null_mut()),
        tally: RefCell::new(Tally::default()),
        removed: Cell::new(false),
        resets: Cell::new(0),
        depths: RefCell::new(Vec::new()),
    });
    let open_ch = |w: &World| -> *mut Channel {
        let depth = {
            let mut rng = w.rng.borrow_mut();
            if rng.chance(100) {
                [1, 65537][rng.below(2) as usize]
            } else {
                rng.range(2, u64::from(max_entries).min(128)) as u32
            }
        };
        let o = ChannelOpts {
            qpair_depth: depth,
            capacity: 256,
            ..ChannelOpts::default()
        };
        let mut ch = null_mut();
        // SAFETY: the live subsystem; valid pointers.
        let rc = unsafe { vfnvme_channel_open(w.sub, 1, &o, &mut ch) };
        let must_refuse = !(2..=65536).contains(&depth);
        if (rc == OK) == must_refuse || rc == INTERNAL {
            w.tally.borrow_mut().fail(Kind::Misuse, || {
                format!("vfnvme_channel_open(qpair_depth {depth}) returned {rc}")
            });
        }
        if rc == OK {
            ch
        } else {
            null_mut()
        }
    };
    for _ in 0..3 {
        w.alloc_buf();
    }
    let mut ch = open_ch(&w);
    if ch.is_null() {
        ch = open_ch(&w);
    }
    let steps = w.rng.borrow_mut().range(20, 60);
    for s in 0..steps {
        let step = format!("step {s}");
        let pick = w.rng.borrow_mut().below(100);
        match pick {
            0..=44 if !ch.is_null() => {
                let n = w.rng.borrow_mut().range(1, 8);
                for _ in 0..n {
                    w.submit_ch(ch);
                }
            }
            45..=74 if !ch.is_null() => poll_ch(&w, ch, &step),
            75..=84 => {
                let n = w.rng.borrow_mut().log_uniform(8);
                w.relax(n);
                // SAFETY: the live subsystem.
                unsafe { vfnvme_subsys_poll(w.sub) };
            }
            85..=86 if !w.removed.get() => {
                w.removed.set(true);
                // SAFETY: the live subsystem; controller 1 of 2.
                unsafe { vfnvme_subsys_model_remove(w.sub, 1) };
            }
            87..=92 => {
                let n = w.bufs.borrow().len() as u64;
                let bi = w.rng.borrow_mut().below(n) as usize;
                if n > 0 {
                    w.free_buf(bi, &step);
                }
            }
            93..=95 => w.alloc_buf(),
            96..=97 if !ch.is_null() => {
                // SAFETY: an open channel; on success the pointer is given up.
                let rc = unsafe { vfnvme_channel_close(ch) };
                if rc == OK {
                    ch = open_ch(&w);
                }
            }
            _ => {
                // SAFETY: the live subsystem.
                unsafe { vfnvme_subsys_poll(w.sub) };
            }
        }
        w.check_violations(&step);
    }
    for round in 0..20_000u32 {
        if w.in_flight() == 0 || ch.is_null() {
            break;
        }
        let step = format!("drain {round}");
        poll_ch(&w, ch, &step);
        w.relax(1);
        // SAFETY: the live subsystem.
        unsafe { vfnvme_subsys_poll(w.sub) };
        w.check_violations(&step);
    }
    let label = step_label(&w, &label);
    finish(&w);
    // SAFETY: an open channel (or NULL, a no-op); on success the pointer is given up.
    let closed = unsafe { vfnvme_channel_close(ch) } == OK;
    let n = w.bufs.borrow().len();
    for bi in 0..n {
        w.free_buf(bi, "cleanup");
    }
    if closed {
        // SAFETY: the live subsystem, with no channel left.
        unsafe { vfnvme_subsys_close(w.sub) };
    }
    w.check_violations("cleanup");
    let t = w.tally.borrow().clone();
    let World { platforms, .. } = *w;
    release(platforms);
    (t, label)
}

/// A number from the environment.
fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The generator: runs the seeds, prints the table and fails on any failure.
#[test]
fn generated_abi_use_ends_every_request_once_and_hands_back_nothing_held() {
    let seeds: Vec<u64> = match env_u64("SEED") {
        Some(s) => vec![s],
        None => {
            let n = env_u64("SEEDS").unwrap_or(if cfg!(debug_assertions) { 200 } else { 1000 });
            (0..n).collect()
        }
    };
    let start = std::time::Instant::now();
    let mut total = Tally::default();
    let mut first: [Option<(u64, String)>; 6] = Default::default();
    let mut failing: [Vec<u64>; 6] = Default::default();
    let mut lines = Vec::new();
    for &seed in &seeds {
        let (channels, deep) = scenario(seed);
        let (t, label) = if channels {
            run_channels(seed)
        } else {
            run_ctrl(seed, deep)
        };
        total.requests += t.requests;
        total.ok += t.ok;
        total.err += t.err;
        for i in 0..6 {
            total.bad[i] += t.bad[i];
            if t.bad[i] > 0 {
                failing[i].push(seed);
                if first[i].is_none() {
                    first[i] = Some((
                        seed,
                        format!("{label}: {}", t.note[i].clone().unwrap_or_default()),
                    ));
                }
            }
        }
        if t.bad.iter().any(|&n| n > 0) {
            let kinds: Vec<String> = (0..6)
                .filter(|&i| t.bad[i] > 0)
                .map(|i| {
                    format!(
                        "{}={}",
                        ["lost", "dup", "handed", "freed", "viol", "misuse"][i],
                        t.bad[i]
                    )
                })
                .collect();
            let note = t.note.iter().flatten().next().cloned().unwrap_or_default();
            lines.push(format!("  {seed:>5} [{}] {label}: {note}", kinds.join(" ")));
        }
        if seeds.len() == 1 {
            println!("seed {seed}: {label}: {t:#?}");
        }
    }
    let names = [
        "lost",
        "duplicated",
        "handed back while held",
        "freed while held",
        "DMA violations",
        "misuse accepted",
    ];
    println!(
        "\nABI generator: {} seeds in {:.1} s",
        seeds.len(),
        start.elapsed().as_secs_f64()
    );
    println!("  {:<24} {:>10}", "requests", total.requests);
    println!("  {:<24} {:>10}", "ended OK", total.ok);
    println!("  {:<24} {:>10}", "ended with error", total.err);
    for i in 0..6 {
        let seeds_of = &failing[i];
        println!(
            "  {:<24} {:>10}   seeds: {:>4}   first: {}",
            names[i],
            total.bad[i],
            seeds_of.len(),
            first[i]
                .as_ref()
                .map_or("-".to_string(), |(s, _)| s.to_string())
        );
    }
    for i in 0..6 {
        if let Some((_, note)) = &first[i] {
            println!("  first {}: {note}", names[i]);
            let list: Vec<String> = failing[i].iter().take(40).map(|s| s.to_string()).collect();
            println!("    seeds: {}", list.join(" "));
        }
    }
    if std::env::var("GEN_VERBOSE").is_ok() {
        println!("failing seeds:");
        for l in &lines {
            println!("{l}");
        }
    }
    let bad: Vec<String> = (0..6)
        .filter(|&i| total.bad[i] > 0)
        .map(|i| {
            format!(
                "{}: {} (seeds {:?})",
                names[i],
                total.bad[i],
                &failing[i][..failing[i].len().min(20)]
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "the generator found failures (replay one with SEED=N):\n{}",
        bad.join("\n")
    );
}
