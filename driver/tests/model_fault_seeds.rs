//! Many seeds of faults (issue 11, "Proving it"): for each seed the model injects one class of
//! fault (or a mix) into I/O commands while three queue pairs write a per-block pattern and read
//! it back; then the run is checked: every I/O ended exactly once (success or a typed error), no
//! read returned data that was never written there, every acknowledged write reads back (through
//! the medium, and through a clean read after recovery when the controller survived), and no
//! buffer the device could still write was handed back (the model's DMA violations).
//!
//! The last class (issue 30) plays a controller that can't be disabled (`ignore_disable`) whose
//! device the kernel asks back while I/O is in flight (`ModelPlatform::request_removal`, then
//! `Controller::mark_removed` or the queue pairs' periodic checks), with commands the device
//! carries out late, and queue pairs dropped at random moments with requests outstanding; once
//! virtual time has run past every late command, the model must have seen no access to memory
//! the driver freed. A dropped queue pair's requests end by the drop (counted as dropped).
//!
//! `FAULT_SEEDS=N` runs seeds 0..N (default: 1000 in release builds, 500 in debug builds);
//! `FAULT_SEED=N` runs only seed N, which replays the run exactly (the model and the driver are
//! deterministic on virtual time). `--nocapture` shows a summary line per fault class;
//! `FAULT_DEBUG=1` prints each seed's virtual times.

use std::collections::BTreeMap;
use std::sync::Arc;
use vfnvme::admin::ControllerEvent;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::platform::Platform;
use vfnvme::{IoCompletion, Namespace, QpairOptions, QueuePair};
use vfnvme_model::{
    Backing, FaultCounts, FaultPlan, ModelConfig, ModelNamespaceConfig, ModelPlatform,
};

/// Seeds run by default in release builds (CI runs the tests in release too).
const RELEASE_SEEDS: u64 = 1000;
/// Seeds run by default in debug builds (about half a minute on a busy 2-core machine).
const DEBUG_SEEDS: u64 = 500;
const LBA: usize = 512;
const QPAIRS: usize = 3;
/// Blocks each queue pair owns (no two queue pairs touch the same block).
const REGION: u64 = 128;
const IOS: usize = 400;
const QD: usize = 8;
const MAX_BLOCKS: u64 = 8;
const IO_TIMEOUT_MS: u64 = 1;
/// Polls of every queue pair per step of virtual time. The driver looks at timeouts every 256
/// polls; an application polls many times per command's latency, and so does this test, so that
/// timeouts, Aborts and resets happen while I/O is in flight on every queue pair.
const POLLS_PER_STEP: usize = 16;
/// The largest virtual time between two bursts of submissions on a queue pair (random below
/// it): the I/O is spread over many I/O timeouts, so that faults, timeouts and resets hit I/O
/// in flight.
const SUBMIT_GAP_NS: u64 = 4_000_000;

/// Whether seed `seed` of `class` keeps every queue pair full instead of submitting in bursts:
/// the duplicate class always (a duplicate can only end another request when its identifier
/// is reused within the duplicate's delay, which a full queue pair does at once), the mixed
/// class every other ten seeds.
fn saturate(seed: u64, class: usize) -> bool {
    class == 2 || (class == 9 && (seed / 10).is_multiple_of(2))
}
/// Polls (each followed by a step of virtual time) after which a run counts as hung.
const POLL_LIMIT: usize = 20_000_000;

/// The fault classes, one per seed ([`class_of`]).
const CLASSES: [&str; 11] = [
    "late completion",
    "lost completion",
    "duplicate completion",
    "unknown command id",
    "retryable status",
    "media error",
    "fatal status (CFS)",
    "all-ones reads (gone)",
    "no ready after reset",
    "mixed",
    "stuck removal",
];

/// The class of a controller that can't be disabled, removed with I/O in flight while queue
/// pairs are dropped (see the module documentation).
const STUCK_REMOVAL: usize = 10;
/// The late commands of [`STUCK_REMOVAL`] execute this long after their fetch (by seed): past
/// the CAP.TO wait (500 ms) of the disable that `mark_removed` tries first, so that they land
/// after the queue pairs were dropped.
const STUCK_LATE_NS: [u64; 3] = [700_000_000, 1_200_000_000, 2_000_000_000];
/// The I/O timeout of [`STUCK_REMOVAL`] seeds where the removal comes first (longer than any
/// late command: no reset before the removal); the other seeds time out, fail to reset and
/// end stuck before the removal.
const STUCK_REMOVAL_FIRST_TIMEOUT_MS: u64 = 10_000;

/// The fault class of seed `seed`: [`STUCK_REMOVAL`] for one seed in eleven, else `seed % 10`
/// (so that every other seed runs exactly what it ran before that class was added).
fn class_of(seed: u64) -> usize {
    if seed % 11 == 10 {
        STUCK_REMOVAL
    } else {
        (seed % 10) as usize
    }
}

/// Whether [`STUCK_REMOVAL`] seed `seed` removes the device before any reset (long I/O timeout).
fn removal_first(seed: u64) -> bool {
    (seed / 11).is_multiple_of(2)
}

fn plan(seed: u64, class: usize) -> FaultPlan {
    let base = FaultPlan {
        // Past the I/O timeout: from just past it (before the driver looks), past the first
        // timeout (the Abort's second timeout saves it), to past the second (a reset ends it).
        late_ns: [2, 20, 50, 100, 200][(seed / 10 % 5) as usize] * IO_TIMEOUT_MS * 1_000_000,
        duplicate_within_ns: 200_000,
        ..FaultPlan::default()
    };
    match class {
        0 => FaultPlan { late: 20, ..base },
        1 => FaultPlan { lost: 10, ..base },
        // With late commands too: a duplicate that lands on a reused identifier would end a
        // command whose data has not moved yet, which a read notices.
        2 => FaultPlan {
            duplicate: 60,
            late: 30,
            ..base
        },
        3 => FaultPlan {
            unknown_cid: 60,
            ..base
        },
        4 => FaultPlan {
            retryable: 60,
            ..base
        },
        5 => FaultPlan {
            media_error: 60,
            ..base
        },
        6 => FaultPlan { fatal: 5, ..base },
        7 => FaultPlan { gone: 4, ..base },
        8 => FaultPlan {
            lost: 10,
            no_ready: 500,
            ..base
        },
        STUCK_REMOVAL => FaultPlan {
            late: 60,
            late_ns: STUCK_LATE_NS[(seed / 10 % 3) as usize],
            ..base
        },
        _ => FaultPlan {
            late: 5,
            lost: 3,
            duplicate: 20,
            unknown_cid: 20,
            retryable: 20,
            media_error: 20,
            fatal: 1,
            gone: 1,
            no_ready: 200,
            ..base
        },
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = splitmix(self.0);
        self.0 % n
    }
}

/// The content of block `lba` after write `version` (0: never written, zeroes).
fn block(seed: u64, lba: u64, version: u32) -> Vec<u8> {
    if version == 0 {
        return vec![0; LBA];
    }
    let mut out = vec![0u8; LBA];
    let mut x = splitmix(seed ^ lba << 20 ^ u64::from(version));
    for chunk in out.chunks_mut(8) {
        x = splitmix(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    out[..8].copy_from_slice(&lba.to_le_bytes());
    out[8..12].copy_from_slice(&version.to_le_bytes());
    out
}

/// Which version a block's bytes are, among `candidates`.
fn which(seed: u64, lba: u64, bytes: &[u8], candidates: &[u32]) -> Option<u32> {
    candidates
        .iter()
        .copied()
        .find(|&v| block(seed, lba, v) == bytes)
}

/// One I/O of the run.
struct Io {
    qp: usize,
    lba: u64,
    blocks: u64,
    /// The version written, for a write.
    write: Option<u32>,
    ended: u32,
}

/// Per class: I/Os, ok, error, lost, duplicated, corrupt, faults injected, spurious completions.
#[derive(Default, Clone, Copy)]
struct Tally {
    seeds: u64,
    ios: u64,
    ok: u64,
    error: u64,
    lost: u64,
    duplicated: u64,
    corrupt: u64,
    injected: u64,
    spurious: u64,
    failed_ctrl: u64,
    timeouts: u64,
    resets: u64,
    retries: u64,
    /// I/Os ended by dropping their queue pair.
    dropped: u64,
}

struct Run {
    seed: u64,
    platform: Arc<ModelPlatform>,
    ios: Vec<Io>,
    /// Per block: the versions it may hold (one when known).
    may_hold: BTreeMap<u64, Vec<u32>>,
    /// Blocks with an I/O in flight.
    busy: BTreeMap<u64, ()>,
    problems: Vec<String>,
    tally: Tally,
    /// A fingerprint of the run: every completion's tag and status, in order.
    trace: u64,
    /// The controller may end stuck (can't be disabled): requests may end without their
    /// buffers (leaked, not handed back).
    may_stick: bool,
}

impl Run {
    fn end(&mut self, c: IoCompletion) {
        let status = u64::from(c.status.sct()) << 8 | u64::from(c.status.sc());
        self.trace = splitmix(self.trace ^ c.tag << 16 ^ status);
        let Some(io) = self.ios.get_mut(c.tag as usize) else {
            self.problems
                .push(format!("completion with unknown tag {}", c.tag));
            return;
        };
        io.ended += 1;
        if io.ended > 1 {
            self.tally.duplicated += 1;
            self.problems.push(format!(
                "I/O {} ended {} times (status {:?})",
                c.tag, io.ended, c.status
            ));
            return;
        }
        let (lba, blocks, write) = (io.lba, io.blocks, io.write);
        for b in lba..lba + blocks {
            self.busy.remove(&b);
        }
        let Some(buf) = c.buffer else {
            if self.may_stick && c.status.is_host_failure() {
                // Leaked: the device may still carry it out (the controller could not be
                // disabled), so its blocks stay busy for good and a write may land any time.
                self.tally.error += 1;
                for b in lba..lba + blocks {
                    self.busy.insert(b, ());
                    if let Some(v) = write {
                        self.may_hold.entry(b).or_insert_with(|| vec![0]).push(v);
                    }
                }
                return;
            }
            self.problems.push(format!(
                "I/O {} ended ({:?}) without its buffer: leaked, yet the controller could be disabled",
                c.tag, c.status
            ));
            return;
        };
        if c.status.is_success() {
            self.tally.ok += 1;
        } else {
            self.tally.error += 1;
        }
        match write {
            Some(v) if c.status.is_success() => {
                for b in lba..lba + blocks {
                    self.may_hold.insert(b, vec![v]);
                }
            }
            // Ended by a reset or a lost controller: the device may or may not have written.
            Some(v) if c.status.is_host_failure() => {
                for b in lba..lba + blocks {
                    self.may_hold.entry(b).or_insert_with(|| vec![0]).push(v);
                }
            }
            // A device error status: the model changes nothing.
            Some(_) => {}
            None if c.status.is_success() => {
                let data = buf.as_slice();
                for (i, b) in (lba..lba + blocks).enumerate() {
                    let bytes = &data[i * LBA..(i + 1) * LBA];
                    let cands = self.may_hold.get(&b).cloned().unwrap_or_else(|| vec![0]);
                    match which(self.seed, b, bytes, &cands) {
                        Some(v) => {
                            self.may_hold.insert(b, vec![v]);
                        }
                        None => {
                            self.tally.corrupt += 1;
                            self.problems.push(format!(
                                "read I/O {} of block {b} returned data that is none of versions {cands:?}",
                                c.tag
                            ));
                        }
                    }
                }
            }
            None => {}
        }
    }

    /// Queue pair `q` was dropped: its requests in flight end with it (no completion comes);
    /// a write among them may or may not have reached the medium.
    fn dropped_qpair(&mut self, q: usize) {
        for io in self.ios.iter_mut().filter(|io| io.qp == q && io.ended == 0) {
            io.ended = 1;
            self.tally.dropped += 1;
            for b in io.lba..io.lba + io.blocks {
                self.busy.remove(&b);
                if let Some(v) = io.write {
                    self.may_hold.entry(b).or_insert_with(|| vec![0]).push(v);
                }
            }
        }
    }

    /// Submits a read or write on queue pair `q` of a free range of its region, if any.
    fn submit(
        &mut self,
        q: usize,
        qp: &mut QueuePair<ModelPlatform>,
        ns: &Namespace,
        ctrl: &Controller<ModelPlatform>,
        rng: &mut Rng,
    ) {
        let start = q as u64 * REGION;
        let blocks = 1 + rng.below(MAX_BLOCKS);
        let lba = start + rng.below(REGION - blocks + 1);
        if (lba..lba + blocks).any(|b| self.busy.contains_key(&b)) {
            return;
        }
        let tag = self.ios.len() as u64;
        let write = (rng.below(2) == 0).then_some(tag as u32 + 1);
        let mut buf = ctrl.dma().alloc(blocks as usize * LBA).expect("DMA buffer");
        let result = match write {
            Some(v) => {
                for (i, b) in (lba..lba + blocks).enumerate() {
                    buf.as_mut_slice()[i * LBA..(i + 1) * LBA]
                        .copy_from_slice(&block(self.seed, b, v));
                }
                qp.write(ns, lba, blocks as u32, buf, tag)
            }
            None => qp.read(ns, lba, blocks as u32, buf, tag),
        };
        self.ios.push(Io {
            qp: q,
            lba,
            blocks,
            write,
            ended: 0,
        });
        match result {
            Ok(()) => {
                for b in lba..lba + blocks {
                    self.busy.insert(b, ());
                }
            }
            // Refused at submission (e.g. the controller failed): it ended, with an error.
            Err(e) => {
                assert!(
                    e.buffer.is_some(),
                    "a refused submission hands its buffer back"
                );
                self.ios[tag as usize].ended = 1;
                self.tally.error += 1;
            }
        }
    }
}

fn config(seed: u64, class: usize) -> ModelConfig {
    ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: REGION * QPAIRS as u64,
            lba_size: LBA as u32,
            backing: Backing::Ram,
        }],
        io_latency_ns: 200_000 + seed % 7 * 100_000,
        admin_latency_ns: 1_000,
        timeout_units: 1,
        reorder_completions: seed / 10 % 2 == 1,
        seed,
        faults: plan(seed, class),
        ignore_disable: class == STUCK_REMOVAL,
        ..ModelConfig::default()
    }
}

/// When a [`STUCK_REMOVAL`] seed drops one of its queue pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DropAt {
    /// With the others, after the run.
    End,
    /// Once this many I/Os were submitted (before or after the removal).
    Ios(usize),
    /// Right after the controller is seen removed (or failed), before the queue pair polls
    /// again: it has not noticed, and may still have requests outstanding.
    AtGone,
    /// This many rounds of polls after the controller is seen removed (or failed).
    AfterGone(usize),
}

/// When and how a [`STUCK_REMOVAL`] seed removes the device and drops its queue pairs.
struct RemovalPlan {
    /// Submitted I/Os after which the kernel asks for the device back.
    after_ios: usize,
    /// `Controller::mark_removed` at once; otherwise the queue pairs' periodic checks notice.
    mark: bool,
    /// Per queue pair, when it is dropped.
    drops: [DropAt; QPAIRS],
    /// Set once the removal was requested (no more submissions then).
    requested: bool,
    /// The round at which the controller was seen removed or failed (its events).
    gone_at: Option<usize>,
    /// The controller's events (`Removed`, `Failed`).
    events: std::sync::mpsc::Receiver<ControllerEvent>,
}

impl RemovalPlan {
    /// The plan of seed `seed` (its own generator: the I/O stream is drawn as for any class).
    fn new(seed: u64, events: std::sync::mpsc::Receiver<ControllerEvent>) -> Self {
        let mut rng = Rng(splitmix(seed ^ 0x7265_6d6f_7665));
        let after_ios = IOS / 8 + rng.below(IOS as u64 / 2) as usize;
        let mark = rng.below(2) == 0;
        let drops = std::array::from_fn(|_| match rng.below(8) {
            0..=3 => DropAt::AtGone,
            4 => DropAt::Ios(rng.below(IOS as u64) as usize),
            5 => DropAt::AfterGone(1 + rng.below(300) as usize),
            _ => DropAt::End,
        });
        RemovalPlan {
            after_ios,
            mark,
            drops,
            requested: false,
            gone_at: None,
            events,
        }
    }

    /// At the start of round `round`: requests the removal when its time came (and marks the
    /// controller removed, if the plan says so), notes when the controller is seen gone, and
    /// drops the queue pairs whose moment came.
    fn step(
        &mut self,
        round: usize,
        run: &mut Run,
        ctrl: &Controller<ModelPlatform>,
        qps: &mut [Option<QueuePair<ModelPlatform>>],
    ) {
        if !self.requested && run.ios.len() >= self.after_ios {
            run.platform.request_removal();
            self.requested = true;
            if self.mark {
                ctrl.mark_removed();
            }
        }
        if self.gone_at.is_none()
            && self
                .events
                .try_iter()
                .any(|e| matches!(e, ControllerEvent::Removed | ControllerEvent::Failed))
        {
            self.gone_at = Some(round);
        }
        for (q, slot) in qps.iter_mut().enumerate() {
            let now = match self.drops[q] {
                DropAt::End => false,
                DropAt::Ios(n) => run.ios.len() >= n,
                DropAt::AtGone => self.gone_at.is_some(),
                DropAt::AfterGone(k) => self.gone_at.is_some_and(|g| round >= g + k),
            };
            if now && slot.take().is_some() {
                run.dropped_qpair(q);
            }
        }
    }
}

/// What one seed's run came to.
struct Outcome {
    class: usize,
    tally: Tally,
    problems: Vec<String>,
    /// Fingerprint of the completions (tag and status, in order) and the final virtual time.
    trace: (u64, u64),
}

/// Runs seed `seed`.
/// Whether seed `seed` runs with command retries on (half the seeds of each class).
fn retries_on(seed: u64) -> bool {
    seed / 10 % 4 >= 2
}

fn run_seed(seed: u64) -> Outcome {
    let class = class_of(seed);
    let platform = ModelPlatform::new(config(seed, class)).expect("model config");
    let stuck_class = class == STUCK_REMOVAL;
    let options = ControllerOptions {
        io_timeout_ms: if stuck_class && removal_first(seed) {
            STUCK_REMOVAL_FIRST_TIMEOUT_MS
        } else {
            IO_TIMEOUT_MS
        },
        admin_timeout_ms: 50,
        io_retries: if retries_on(seed) { 3 } else { 0 },
        ..ControllerOptions::default()
    };
    let ctrl = Controller::new(platform.clone(), options).expect("bring-up (admin is not faulted)");
    let events = ctrl.subscribe_controller_events();
    let ns = ctrl.namespace(1).expect("namespace 1");
    let mut qps: Vec<Option<QueuePair<ModelPlatform>>> = (0..QPAIRS)
        .map(|_| {
            Some(
                ctrl.alloc_qpair(QpairOptions {
                    depth: 16,
                    ..QpairOptions::default()
                })
                .expect("queue pair"),
            )
        })
        .collect();
    let mut removal =
        stuck_class.then(|| RemovalPlan::new(seed, ctrl.subscribe_controller_events()));
    let mut run = Run {
        seed,
        platform: platform.clone(),
        ios: Vec::new(),
        may_hold: BTreeMap::new(),
        busy: BTreeMap::new(),
        problems: Vec::new(),
        tally: Tally {
            seeds: 1,
            ..Tally::default()
        },
        trace: 0,
        may_stick: stuck_class,
    };
    let mut rng = Rng(splitmix(seed ^ 0x7465_7374));
    if std::env::var_os("FAULT_DEBUG").is_some() {
        eprintln!(
            "seed {seed}: virtual time after bring-up {} ns",
            platform.now_ns()
        );
    }
    let mut polls = 0;
    let mut next_submit = [platform.now_ns(); QPAIRS];
    let saturated = saturate(seed, class);
    loop {
        if let Some(r) = removal.as_mut() {
            r.step(polls, &mut run, &ctrl, &mut qps);
        }
        let removing = removal.as_ref().is_some_and(|r| r.requested);
        for (q, slot) in qps.iter_mut().enumerate() {
            let Some(qp) = slot.as_mut() else {
                continue;
            };
            while run.ios.len() < IOS
                && !removing
                && platform.now_ns() >= next_submit[q]
                && run
                    .ios
                    .iter()
                    .filter(|io| io.qp == q && io.ended == 0)
                    .count()
                    < QD
            {
                let before = run.ios.len();
                // Bursts of about four I/Os, then a pause.
                if !saturated && rng.below(4) == 0 {
                    next_submit[q] += rng.below(SUBMIT_GAP_NS);
                }
                run.submit(q, qp, &ns, &ctrl, &mut rng);
                if run.ios.len() == before {
                    break; // the range was busy: try again next round
                }
            }
            // As an application does: poll, then resubmit at once (a poll with completions
            // pending lets virtual time run to the next one).
            qp.poll(usize::MAX, |c| run.end(c));
        }
        if (run.ios.len() >= IOS || removing) && run.ios.iter().all(|io| io.ended > 0) {
            break;
        }
        polls += 1;
        if polls > POLL_LIMIT {
            break;
        }
        if polls % POLLS_PER_STEP == 0 {
            run.platform.relax();
        }
    }
    if std::env::var_os("FAULT_DEBUG").is_some() {
        eprintln!(
            "seed {seed}: I/O loop ended after {polls} rounds at {} ns",
            platform.now_ns()
        );
    }
    // Nothing more arrives for I/Os that ended (a late duplicate would show here): about half
    // a second of virtual time (idle steps grow to 1 ms), past every delay the model injects.
    for _ in 0..500 {
        for qp in qps.iter_mut().flatten() {
            qp.poll(usize::MAX, |c| run.end(c));
        }
        run.platform.relax();
    }
    if std::env::var_os("FAULT_DEBUG").is_some() {
        eprintln!(
            "seed {seed}: virtual time at the end of the I/O {} ns",
            platform.now_ns()
        );
    }
    run.tally.ios = run.ios.len() as u64;
    let lost: Vec<usize> = (0..run.ios.len())
        .filter(|&i| run.ios[i].ended == 0)
        .collect();
    run.tally.lost = lost.len() as u64;
    if !lost.is_empty() {
        run.problems.push(format!(
            "{} I/Os never ended (first: {:?}) within {POLL_LIMIT} polls",
            lost.len(),
            &lost[..lost.len().min(5)]
        ));
    }

    // What the medium holds: every block is one of the versions it may hold, and an
    // acknowledged write (a single candidate) is exactly there.
    let mut stored = vec![0u8; LBA];
    for b in 0..REGION * QPAIRS as u64 {
        platform
            .read_stored(1, b * LBA as u64, &mut stored)
            .expect("namespace 1");
        let cands = run.may_hold.get(&b).cloned().unwrap_or_else(|| vec![0]);
        match which(seed, b, &stored, &cands) {
            Some(v) => {
                run.may_hold.insert(b, vec![v]);
            }
            None => {
                run.tally.corrupt += 1;
                run.problems.push(format!(
                    "block {b} holds none of the versions {cands:?} it may hold"
                ));
            }
        }
    }

    // A clean read after recovery, through the driver, when the controller survived.
    platform
        .set_faults(FaultPlan::default())
        .expect("no faults");
    run.tally.retries = ctrl.io_retries();
    let survived = ctrl.identify_controller().is_ok();
    if !survived {
        run.tally.failed_ctrl += 1;
    }
    for (q, slot) in qps.iter_mut().enumerate() {
        let Some(qp) = slot.as_mut() else {
            continue;
        };
        let start = q as u64 * REGION;
        match qp.read_sync(
            &ns,
            start,
            REGION as u32,
            ctrl.dma().alloc(REGION as usize * LBA).unwrap(),
        ) {
            Ok(buf) => {
                for b in start..start + REGION {
                    let i = (b - start) as usize;
                    let want = run.may_hold.get(&b).cloned().unwrap_or_else(|| vec![0]);
                    if which(seed, b, &buf.as_slice()[i * LBA..(i + 1) * LBA], &want).is_none() {
                        run.tally.corrupt += 1;
                        run.problems
                            .push(format!("clean read of block {b}: not version {want:?}"));
                    }
                }
            }
            Err(e) if !survived => {
                let _ = e; // a failed or removed controller: every request still ended
            }
            Err(e) => run
                .problems
                .push(format!("clean read on queue pair {q} after recovery: {e}")),
        }
    }
    for e in events.try_iter() {
        match e {
            ControllerEvent::TimedOut { .. } => run.tally.timeouts += 1,
            ControllerEvent::ResetStarted => run.tally.resets += 1,
            _ => {}
        }
    }
    run.tally.spurious = qps
        .iter()
        .flatten()
        .map(|qp| qp.spurious_completions())
        .sum();
    drop(qps);
    drop(ctrl);
    if stuck_class {
        // The device can't be stopped: let virtual time run past every late command it holds.
        let until = platform.now_ns() + STUCK_LATE_NS[2] + 1_000_000_000;
        while platform.now_ns() < until {
            platform.relax();
        }
    }
    let violations = platform.dma_violations();
    if !violations.is_empty() {
        run.problems.push(format!(
            "the device wrote memory the driver had handed back: {violations:?}"
        ));
    }
    let end_ns = platform.now_ns();
    let counts: FaultCounts = platform.fault_counts();
    run.tally.injected = counts.total();
    if !violations.is_empty() {
        // Keep the platform's drop from panicking on violations already reported.
        std::mem::forget(platform);
    }
    Outcome {
        class,
        tally: run.tally,
        problems: run.problems,
        trace: (run.trace, end_ns),
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn every_io_ends_once_and_acknowledged_writes_survive_faults() {
    let seeds: Vec<u64> = match env_u64("FAULT_SEED") {
        Some(s) => vec![s],
        None => {
            let n = env_u64("FAULT_SEEDS").unwrap_or(if cfg!(debug_assertions) {
                DEBUG_SEEDS
            } else {
                RELEASE_SEEDS
            });
            (0..n).collect()
        }
    };
    let mut tallies = [Tally::default(); CLASSES.len()];
    let mut failures = Vec::new();
    for &seed in &seeds {
        let Outcome {
            class,
            tally: t,
            problems,
            ..
        } = run_seed(seed);
        let sum = &mut tallies[class];
        sum.seeds += t.seeds;
        sum.ios += t.ios;
        sum.ok += t.ok;
        sum.error += t.error;
        sum.lost += t.lost;
        sum.duplicated += t.duplicated;
        sum.corrupt += t.corrupt;
        sum.injected += t.injected;
        sum.spurious += t.spurious;
        sum.failed_ctrl += t.failed_ctrl;
        sum.timeouts += t.timeouts;
        sum.resets += t.resets;
        sum.retries += t.retries;
        sum.dropped += t.dropped;
        if !problems.is_empty() {
            eprintln!(
                "seed {seed} ({}) FAILED: {}\n  rerun just it: FAULT_SEED={seed} cargo test -p vfnvme --test model_fault_seeds -- --nocapture",
                CLASSES[class],
                problems[..problems.len().min(5)].join("; ")
            );
            failures.push(seed);
        }
    }
    let header = [
        "seeds",
        "I/Os",
        "ok",
        "error",
        "lost",
        "duplicated",
        "corrupt",
        "injected",
        "spurious",
        "timeouts",
        "resets",
        "failed",
        "retries",
        "dropped",
    ];
    let cells: Vec<String> = header.iter().map(|h| format!("{h:>10}")).collect();
    println!("{:<24} | {}", "fault class", cells.join(" | "));
    for (name, t) in CLASSES.iter().zip(tallies.iter()) {
        if t.seeds == 0 {
            continue;
        }
        let values = [
            t.seeds,
            t.ios,
            t.ok,
            t.error,
            t.lost,
            t.duplicated,
            t.corrupt,
            t.injected,
            t.spurious,
            t.timeouts,
            t.resets,
            t.failed_ctrl,
            t.retries,
            t.dropped,
        ];
        let cells: Vec<String> = values.iter().map(|v| format!("{v:>10}")).collect();
        println!("{name:<24} | {}", cells.join(" | "));
    }
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed: {failures:?} (each prints how to rerun it)",
        failures.len(),
        seeds.len()
    );
    // The faults were really injected (a model that injects nothing would pass the checks).
    if seeds.len() >= CLASSES.len() * 5 {
        for (name, t) in CLASSES.iter().zip(tallies.iter()) {
            assert!(
                t.injected > 0,
                "class {name}: no fault injected in {} seeds",
                t.seeds
            );
        }
        // Half the seeds retry: retryable statuses were sent again there.
        assert!(
            tallies[4].retries > 0,
            "retryable statuses: no command was retried"
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    // One seed of each class with resets, duplicates, a mix, and a stuck removal.
    for seed in [1, 12, 59, 21] {
        let a = run_seed(seed);
        let b = run_seed(seed);
        assert!(a.tally.injected > 0, "seed {seed} injected faults");
        assert_eq!(a.trace, b.trace, "seed {seed} replays the same completions");
        assert_eq!(a.tally.injected, b.tally.injected);
        assert_eq!(a.problems, b.problems);
    }
}
