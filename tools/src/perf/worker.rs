//! The measuring loop of one queue pair: keep `qd` I/Os outstanding, reap completions in
//! batches, resubmit their buffers at once and ring the doorbell once per batch.
//!
//! Clock reads (see [`super::clock`]): one per batch of completions (it is both the completion time
//! of the batch and the submission time of the I/Os resubmitted from it), plus one every
//! [`IDLE_POLLS_PER_CLOCK_READ`] empty polls to notice the end of the run or a stall. (In a TCG
//! guest the clocksource is the HPET: a clock read is a system call plus an emulated MMIO read,
//! and takes QEMU's global lock, which the NVMe emulation needs too.)

use super::clock::Clock;
use super::options::Pattern;
use super::progress::Counter;
use super::transport_stats::{doorbell_delta, TransportStats};
use super::zipf::Zipf;
use anyhow::{bail, Result};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use vfnvme::hal::DmaBuffer;
use vfnvme::multipath::ChannelError;
use vfnvme::platform::Platform;
use vfnvme::queue::{Op, PiOptions, Request};
use vfnvme::spec::Status;
use vfnvme::SubmitErrorKind;
use vfnvme::{DoorbellStats, Namespace, QueuePair};

/// Empty polls between two clock reads.
const IDLE_POLLS_PER_CLOCK_READ: u32 = 1 << 14;

/// How long without any completion before the run fails as stalled.
const STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Highest latency the histogram holds (larger values are clamped), in clock units (100 s at
/// up to 10 GHz).
const MAX_TRACKED_UNITS: u64 = 1_000_000_000_000;

/// What one worker does.
#[derive(Debug, Clone, Copy)]
pub struct WorkerPlan {
    /// I/Os kept outstanding.
    pub qd: u32,
    /// Bytes per I/O (a multiple of the LBA size).
    pub io_size: u64,
    /// The access pattern.
    pub pattern: Pattern,
    /// Percentage of reads (100 = read only, 0 = write only).
    pub read_pct: u8,
    /// Warm-up before measuring.
    pub ramp: Duration,
    /// Measured time.
    pub time: Duration,
    /// Seed of the offset and read/write choices.
    pub seed: u64,
    /// Time the I/Os of one completion batch in this many (1 = every I/O). Others are counted
    /// but not timed, which saves clock reads where they are slow (e.g. HPET under emulation).
    pub lat_sample: u32,
    /// Set (e.g. by a SIGINT handler) to end the run early: the worker stops submitting at
    /// its next clock read, waits for its I/Os and returns what it measured so far.
    pub stop: Option<&'static AtomicBool>,
    /// Stop after this many I/Os (0 = no limit): submitted in all, ramp included.
    pub ios_limit: u64,
    /// Zipf skew of random offsets (None = uniform).
    pub zipf: Option<f64>,
    /// Count failed I/Os and go on; without it, the first failure ends the worker's run.
    pub continue_on_error: bool,
}

/// What one worker measured (only I/Os completed inside the measured window count).
#[derive(Debug, Clone)]
pub struct WorkerResult {
    /// Reads completed.
    pub reads: u64,
    /// Writes completed.
    pub writes: u64,
    /// I/Os that completed with an error status.
    pub errors: u64,
    /// The first failure seen.
    pub first_error: Option<IoFailure>,
    /// Latency of every measured I/O, in clock units (see `Clock::ns_per_unit`).
    pub latency: Histogram<u64>,
    /// Completion batches reaped (for I/Os per doorbell).
    pub batches: u64,
    /// Length of the measured window in clock units: the planned time, or less when stopped.
    pub measured_units: u64,
    /// Whether [`WorkerPlan::stop`] ended the run early.
    pub stopped: bool,
    /// Whether the I/O limit or a failure (without continue-on-error) ended it early.
    pub ended_early: bool,
    /// Polls, completions, submissions and doorbells of the queue pair.
    pub transport: TransportStats,
    /// Commands sent per path (controller index) of a multipath head, failovers included;
    /// empty for a plain queue pair.
    pub per_path: Vec<u64>,
}

/// Why an I/O failed: the device's status, or a multipath channel's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoFailure {
    /// The completion status of a queue pair's command.
    Status(Status),
    /// A multipath channel's error (device status, no path, head removed, ...).
    Channel(ChannelError),
}

impl std::fmt::Display for IoFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IoFailure::Status(s) => s.fmt(f),
            IoFailure::Channel(e) => e.fmt(f),
        }
    }
}

/// What the measuring loop drives: a queue pair on a namespace, or a multipath channel on a
/// head.
pub trait IoTarget {
    /// Queues a read (or write) of `blocks` blocks at `lba`; `Ok(Some(buf))` hands the buffer
    /// back when the queue is full (perf holds the I/O and submits it later).
    fn submit(
        &mut self,
        read: bool,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: u64,
    ) -> Result<Option<DmaBuffer>>;
    /// Rings the doorbell(s) of what was queued.
    fn commit(&mut self);
    /// Reaps up to `max` completions: (tag, failure, buffer) each.
    fn poll<F: FnMut(u64, Option<IoFailure>, Option<DmaBuffer>)>(
        &mut self,
        max: usize,
        f: F,
    ) -> usize;
    /// I/Os submitted and not yet reaped.
    fn outstanding(&self) -> usize;
    /// The queue ID shown in transport statistics (0 for a channel).
    fn qid(&self) -> u16;
    /// The driver's doorbell counters, if any.
    fn doorbell_stats(&self) -> Option<DoorbellStats>;
    /// Commands per path (multipath only).
    fn per_path(&self) -> Vec<u64> {
        Vec::new()
    }
}

/// A queue pair on one namespace.
struct QpTarget<'a, P: Platform> {
    qp: &'a mut QueuePair<P>,
    ns: &'a Namespace,
}

/// Bytes of metadata an I/O of `io_size` data bytes moves on `ns` (0 without metadata).
pub fn metadata_bytes(ns: &Namespace, io_size: usize) -> usize {
    (io_size >> ns.lba_shift()) * usize::from(ns.identity().metadata_size)
}

/// A read or write of a namespace formatted with metadata: the metadata moves as the buffer
/// holds it, after each block (extended LBAs) or after the data (a separate buffer); no PI
/// action or check (spdk_nvme_perf's default).
#[cold]
#[inline(never)]
fn with_metadata<P: Platform>(
    qp: &mut QueuePair<P>,
    ns: &Namespace,
    read: bool,
    lba: u64,
    blocks: u32,
    buf: DmaBuffer,
    tag: u64,
) -> Result<(), vfnvme::SubmitError> {
    let op = if read { Op::Read } else { Op::Write };
    let data = (blocks as usize) << ns.lba_shift();
    let md_offset = (!ns.identity().metadata_extended).then_some(data);
    let pi = PiOptions::default();
    let req = Request::with_metadata(op, ns, lba, blocks, buf, md_offset, pi, tag)?;
    qp.submit(req).map(drop)
}

impl<P: Platform> IoTarget for QpTarget<'_, P> {
    #[inline]
    fn submit(
        &mut self,
        read: bool,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: u64,
    ) -> Result<Option<DmaBuffer>> {
        let r = if self.ns.io_refused() {
            with_metadata(self.qp, self.ns, read, lba, blocks, buf, tag)
        } else if read {
            self.qp.read(self.ns, lba, blocks, buf, tag)
        } else {
            self.qp.write(self.ns, lba, blocks, buf, tag)
        };
        match r {
            Ok(()) => Ok(None),
            Err(e) if matches!(e.kind, SubmitErrorKind::QueueFull { .. }) => match e.buffer {
                Some(buf) => Ok(Some(buf)),
                None => bail!("the driver kept no buffer of a refused I/O"),
            },
            Err(e) => Err(vfnvme::Error::from(e).into()),
        }
    }
    #[inline]
    fn commit(&mut self) {
        self.qp.commit();
    }
    #[inline]
    fn poll<F: FnMut(u64, Option<IoFailure>, Option<DmaBuffer>)>(
        &mut self,
        max: usize,
        mut f: F,
    ) -> usize {
        self.qp.poll(max, |c| {
            let failure = (!c.status.is_success()).then_some(IoFailure::Status(c.status));
            f(c.tag, failure, c.buffer)
        })
    }
    fn outstanding(&self) -> usize {
        self.qp.outstanding()
    }
    fn qid(&self) -> u16 {
        self.qp.qid()
    }
    fn doorbell_stats(&self) -> Option<DoorbellStats> {
        self.qp.doorbell_stats()
    }
}

/// A small, fast, seeded random number generator (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; 0 is remapped).
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }
    /// The next value.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A value in `0..n` (`n` > 0), by multiply-shift (no division).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Chooses each I/O's offset and direction.
#[derive(Debug)]
pub struct Offsets {
    rng: Rng,
    random: bool,
    read_pct: u64,
    blocks_per_io: u64,
    slots: u64,
    next_slot: u64,
    zipf: Option<Zipf>,
}

impl Offsets {
    /// Offsets over a namespace of `ns_blocks` blocks, `blocks_per_io` per I/O (≤ ns_blocks).
    pub fn new(plan: &WorkerPlan, ns_blocks: u64, blocks_per_io: u64) -> Self {
        let blocks_per_io = blocks_per_io.max(1);
        let mut rng = Rng::new(plan.seed);
        let slots = (ns_blocks / blocks_per_io).max(1);
        // Sequential workers of different threads start at different places.
        let next_slot = if plan.pattern.is_random() {
            0
        } else {
            rng.below(slots)
        };
        Offsets {
            rng,
            random: plan.pattern.is_random(),
            read_pct: u64::from(plan.read_pct),
            blocks_per_io,
            slots,
            next_slot,
            zipf: plan.zipf.map(|theta| Zipf::new(slots, theta)),
        }
    }

    /// The next I/O: (starting LBA, is a read).
    #[inline]
    pub fn next_io(&mut self) -> (u64, bool) {
        let slot = if let Some(z) = &self.zipf {
            z.slot((self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64))
        } else if self.random {
            self.rng.below(self.slots)
        } else {
            let s = self.next_slot;
            self.next_slot = if s + 1 >= self.slots { 0 } else { s + 1 };
            s
        };
        let read = match self.read_pct {
            100 => true,
            0 => false,
            pct => self.rng.below(100) < pct,
        };
        (slot * self.blocks_per_io, read)
    }
}

/// Tag layout: bit 63 = write, the rest = buffer slot.
const WRITE_TAG: u64 = 1 << 63;

/// Runs the loop on `qp` against `ns` with `buffers` (one per outstanding I/O, each
/// `plan.io_size` bytes long). Returns when the measured time is over (or the I/O limit is
/// reached, or an I/O failed without `continue_on_error`) and every I/O is back. Publishes the
/// completed I/Os to `progress` at each clock read.
pub fn run<P: Platform>(
    qp: &mut QueuePair<P>,
    ns: &Namespace,
    buffers: Vec<DmaBuffer>,
    plan: &WorkerPlan,
    clock: &Clock,
    progress: Option<&Counter>,
) -> Result<WorkerResult> {
    let (blocks, shift) = (ns.blocks(), u32::from(ns.lba_shift()));
    run_on(
        &mut QpTarget { qp, ns },
        blocks,
        shift,
        buffers,
        plan,
        clock,
        progress,
    )
}

/// [`run`] on any [`IoTarget`] over `ns_blocks` blocks of `1 << lba_shift` bytes.
pub fn run_on<T: IoTarget>(
    qp: &mut T,
    ns_blocks: u64,
    lba_shift: u32,
    buffers: Vec<DmaBuffer>,
    plan: &WorkerPlan,
    clock: &Clock,
    progress: Option<&Counter>,
) -> Result<WorkerResult> {
    let qd = buffers.len();
    if qd != plan.qd as usize || qd == 0 {
        bail!(
            "{} buffers for a queue depth of {}: give one buffer per outstanding I/O",
            qd,
            plan.qd
        );
    }
    let blocks_per_io = plan.io_size >> lba_shift;
    let blocks = u32::try_from(blocks_per_io)?;
    let mut offsets = Offsets::new(plan, ns_blocks, blocks_per_io);
    let mut latency = Histogram::<u64>::new_with_bounds(1, MAX_TRACKED_UNITS, 3)?;
    let doorbells_before = qp.doorbell_stats();
    let mut res = WorkerResult {
        reads: 0,
        writes: 0,
        errors: 0,
        first_error: None,
        latency: Histogram::new(3)?,
        batches: 0,
        measured_units: 0,
        stopped: false,
        ended_early: false,
        transport: TransportStats {
            qid: qp.qid(),
            ..TransportStats::default()
        },
        per_path: Vec::new(),
    };
    // Per slot: submission time in ns since `start`, or UNTIMED.
    const UNTIMED: u64 = u64::MAX;
    let mut submitted_at = vec![UNTIMED; qd];
    let sample_every = u64::from(plan.lat_sample.max(1));
    let mut batch_no: u64 = 0;
    // Completions of one poll; capacity qd, so pushing never allocates.
    let mut reaped: Vec<(u64, Option<IoFailure>, Option<DmaBuffer>)> = Vec::with_capacity(qd);
    // I/Os held back while the submission queue is full (capacity qd: never allocates).
    let mut held: std::collections::VecDeque<(u64, DmaBuffer)> =
        std::collections::VecDeque::with_capacity(qd);
    let limit = if plan.ios_limit == 0 {
        u64::MAX
    } else {
        plan.ios_limit
    };
    let mut stats = res.transport;

    let start = clock.now();
    let ramp_end = start + clock.units(u64::try_from(plan.ramp.as_nanos())?);
    let mut end = ramp_end + clock.units(u64::try_from(plan.time.as_nanos())?);
    // Whether submitting is over (limit reached, stop requested, or a failure).
    let mut draining = false;
    let stall_units = clock.units(u64::try_from(STALL_TIMEOUT.as_nanos())?);
    let mut now = start;

    // Submits one I/O from `slot`; a full queue hands the buffer back to be held.
    let submit = |qp: &mut T,
                  offsets: &mut Offsets,
                  stats: &mut TransportStats,
                  slot: u64,
                  buf: DmaBuffer|
     -> Result<Option<(u64, DmaBuffer)>> {
        let (lba, read) = offsets.next_io();
        let tag = if read { slot } else { slot | WRITE_TAG };
        match qp.submit(read, lba, blocks, buf, tag)? {
            None => {
                stats.submitted += 1;
                Ok(None)
            }
            Some(buf) => {
                stats.queued += 1;
                Ok(Some((slot, buf)))
            }
        }
    };

    for (slot, buf) in buffers.into_iter().enumerate() {
        if stats.submitted + held.len() as u64 >= limit {
            // Fewer I/Os than the queue depth: the rest of the buffers stay unused.
            break;
        }
        if let Some(t) = submitted_at.get_mut(slot) {
            *t = start;
        }
        if held.is_empty() {
            if let Some(h) = submit(qp, &mut offsets, &mut stats, slot as u64, buf)? {
                held.push_back(h);
            }
        } else {
            held.push_back((slot as u64, buf));
        }
    }
    qp.commit();

    let mut last_progress = start;
    let mut idle: u32 = 0;
    loop {
        stats.polls += 1;
        let n = qp.poll(qd, |tag, failure, buf| reaped.push((tag, failure, buf)));
        if n == 0 {
            stats.idle_polls += 1;
            idle += 1;
            if idle >= IDLE_POLLS_PER_CLOCK_READ {
                idle = 0;
                now = clock.now();
                if let Some(p) = progress {
                    p.publish(res.reads + res.writes);
                }
                if !res.stopped && plan.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                    res.stopped = true;
                    end = now.min(end);
                }
                if now.saturating_sub(last_progress) > stall_units {
                    bail!(
                        "no I/O completed for {} s with {} outstanding on queue {}: the controller stopped responding; reset it (`vfnvme setup --reset` then `vfnvme setup`)",
                        STALL_TIMEOUT.as_secs(),
                        qp.outstanding(),
                        qp.qid()
                    );
                }
                if (now >= end || draining) && qp.outstanding() == 0 {
                    break;
                }
            }
            continue;
        }
        stats.completions += n as u64;
        idle = 0;
        batch_no += 1;
        // Read the clock if this batch starts timed I/Os, or completes one.
        let sample = batch_no.is_multiple_of(sample_every);
        if sample
            || reaped
                .iter()
                .any(|(tag, _, _)| submitted_at.get((tag & !WRITE_TAG) as usize) != Some(&UNTIMED))
        {
            now = clock.now();
            last_progress = now;
            if let Some(p) = progress {
                p.publish(res.reads + res.writes);
            }
            if !res.stopped && plan.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                res.stopped = true;
                end = now.min(end);
            }
        }
        let measuring = now >= ramp_end && now < end;
        if measuring {
            res.batches += 1;
        }
        for (tag, failure, buf) in reaped.drain(..) {
            let slot = tag & !WRITE_TAG;
            if measuring {
                let t0 = submitted_at.get(slot as usize).copied().unwrap_or(UNTIMED);
                if t0 != UNTIMED {
                    latency.saturating_record(now.saturating_sub(t0).max(1));
                }
                if tag & WRITE_TAG != 0 {
                    res.writes += 1;
                } else {
                    res.reads += 1;
                }
            }
            if let Some(failure) = failure {
                res.errors += 1;
                if res.first_error.is_none() {
                    res.first_error = Some(failure);
                }
                if !plan.continue_on_error {
                    draining = true;
                }
            }
            let Some(buf) = buf else { continue };
            if now < end && !draining && stats.submitted + (held.len() as u64) < limit {
                if let Some(t) = submitted_at.get_mut(slot as usize) {
                    *t = if sample { now } else { UNTIMED };
                }
                if held.is_empty() {
                    if let Some(h) = submit(qp, &mut offsets, &mut stats, slot, buf)? {
                        held.push_back(h);
                    }
                } else {
                    held.push_back((slot, buf));
                }
            }
        }
        // Held I/Os go first once the queue has room again.
        while let Some((slot, buf)) = held.pop_front() {
            if draining || now >= end {
                break;
            }
            if let Some(h) = submit(qp, &mut offsets, &mut stats, slot, buf)? {
                // Still waiting: counted once, when it was first held back.
                stats.queued -= 1;
                held.push_front(h);
                break;
            }
        }
        qp.commit();
        if stats.submitted >= limit {
            draining = true;
        }
        if (now >= end || draining) && qp.outstanding() == 0 {
            break;
        }
    }
    if draining && !res.stopped && now < end {
        // Ended by the I/O limit or a failure: the measured window ends with the last completion.
        res.ended_early = true;
        end = clock.now().max(ramp_end);
    }
    res.latency = latency;
    res.measured_units = end.saturating_sub(ramp_end);
    stats.doorbells = doorbell_delta(doorbells_before, qp.doorbell_stats());
    res.transport = stats;
    res.per_path = qp.per_path();
    if let Some(p) = progress {
        p.publish(res.reads + res.writes);
    }
    Ok(res)
}

#[cfg(all(test, feature = "model"))]
mod tests {
    use super::*;

    fn plan(pattern: Pattern, read_pct: u8) -> WorkerPlan {
        WorkerPlan {
            qd: 1,
            io_size: 4096,
            pattern,
            read_pct,
            ramp: Duration::ZERO,
            time: Duration::from_secs(1),
            seed: 7,
            lat_sample: 1,
            stop: None,
            ios_limit: 0,
            zipf: None,
            continue_on_error: false,
        }
    }

    #[test]
    fn random_offsets_stay_inside_and_aligned() {
        let mut o = Offsets::new(&plan(Pattern::Randread, 100), 1000, 8);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let (lba, read) = o.next_io();
            assert!(read);
            assert_eq!(lba % 8, 0);
            assert!(lba + 8 <= 1000, "{lba}");
            seen.insert(lba);
        }
        assert!(
            seen.len() > 100,
            "random offsets repeat too much: {}",
            seen.len()
        );
    }

    #[test]
    fn sequential_offsets_wrap() {
        let mut o = Offsets::new(&plan(Pattern::Write, 0), 32, 8);
        let first = o.next_io();
        assert!(!first.1);
        let lbas: Vec<u64> = (0..4).map(|_| o.next_io().0).collect();
        // Four slots: after the first, the next four visit the other three and come back.
        assert_eq!(lbas[3], first.0);
        for w in lbas.windows(2) {
            assert!(w[1] == w[0] + 8 || w[1] == 0, "{lbas:?}");
        }
    }

    #[test]
    fn mix_follows_the_percentage() {
        let mut o = Offsets::new(&plan(Pattern::Randrw, 70), 1 << 20, 1);
        let reads = (0..100_000).filter(|_| o.next_io().1).count();
        assert!((68_000..72_000).contains(&reads), "{reads}");
    }

    #[test]
    fn a_stop_request_ends_an_hour_long_run_with_what_was_measured() {
        use vfnvme::{Controller, ControllerOptions, QpairOptions};
        use vfnvme_model::ModelPlatform;
        static STOP: AtomicBool = AtomicBool::new(true);
        let ctrl = Controller::new(
            ModelPlatform::new(super::super::model_config()).unwrap(),
            ControllerOptions::default(),
        )
        .unwrap();
        let ns = ctrl.namespaces().into_iter().next().unwrap();
        let mut qp = ctrl
            .alloc_qpair(QpairOptions {
                depth: 16,
                ..QpairOptions::default()
            })
            .unwrap();
        let buffers = (0..4).map(|_| ctrl.dma().alloc(4096).unwrap()).collect();
        let plan = WorkerPlan {
            qd: 4,
            time: Duration::from_secs(3600),
            stop: Some(&STOP),
            ..plan(Pattern::Randread, 100)
        };
        let clock = Clock::start(super::super::clock::ClockKind::Instant);
        let r = run(&mut qp, &ns, buffers, &plan, &clock, None).unwrap();
        assert!(r.stopped);
        assert_eq!(qp.outstanding(), 0);
        assert!(
            r.measured_units < clock.units(3600 * 1_000_000_000),
            "{}",
            r.measured_units
        );
        assert_eq!(r.errors, 0);
    }

    #[test]
    fn metadata_formats_run_with_their_metadata_moved() {
        use vfnvme::{Controller, ControllerOptions, QpairOptions};
        use vfnvme_model::{ModelMetadata, ModelPlatform};
        let mut cfg = super::super::model_config();
        cfg.mdts = 1;
        cfg.namespace_metadata = vec![
            (1, ModelMetadata::new(8, true)),
            (2, ModelMetadata::new(64, false)),
        ];
        let platform = ModelPlatform::new(cfg).unwrap();
        let ctrl = Controller::new(platform.clone(), ControllerOptions::default()).unwrap();
        for ns in ctrl.namespaces() {
            assert!(
                ns.io_refused(),
                "plain I/O refused: the worker moves the metadata"
            );
            let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
            // 16 KiB I/Os: split at MDTS (8 KiB), metadata included.
            let len = 16384 + metadata_bytes(&ns, 16384);
            let buffers = (0..4).map(|_| ctrl.dma().alloc(len).unwrap()).collect();
            let plan = WorkerPlan {
                qd: 4,
                io_size: 16384,
                time: Duration::from_secs(3600),
                ios_limit: 400,
                ..plan(Pattern::Randrw, 50)
            };
            let clock = Clock::start(super::super::clock::ClockKind::Instant);
            let before = platform.stats().io_completed.values().sum::<u64>();
            let r = run(&mut qp, &ns, buffers, &plan, &clock, None).unwrap();
            assert_eq!(r.errors, 0, "{:?}", r.first_error);
            assert!(r.reads > 0 && r.writes > 0);
            let commands = platform.stats().io_completed.values().sum::<u64>() - before;
            assert!(commands >= 2 * (r.reads + r.writes), "split: {commands}");
            assert_eq!(platform.iommu().fault_count(), 0);
        }
    }

    fn model_qpair(
        depth: u32,
    ) -> (
        vfnvme::Controller<vfnvme_model::ModelPlatform>,
        std::sync::Arc<vfnvme_model::ModelPlatform>,
        QueuePair<vfnvme_model::ModelPlatform>,
    ) {
        use vfnvme::{Controller, ControllerOptions, QpairOptions};
        use vfnvme_model::ModelPlatform;
        let platform = ModelPlatform::new(super::super::model_config()).unwrap();
        let ctrl = Controller::new(platform.clone(), ControllerOptions::default()).unwrap();
        let qp = ctrl
            .alloc_qpair(QpairOptions {
                depth,
                ..QpairOptions::default()
            })
            .unwrap();
        (ctrl, platform, qp)
    }

    fn buffers<P: Platform>(ctrl: &vfnvme::Controller<P>, n: usize) -> Vec<DmaBuffer> {
        (0..n).map(|_| ctrl.dma().alloc(4096).unwrap()).collect()
    }

    #[test]
    fn an_io_limit_does_exactly_that_many_ios() {
        let clock = Clock::start(super::super::clock::ClockKind::Instant);
        // Below, equal to and above the queue depth; and with a queue too small for the
        // depth, so that I/Os wait in perf's hold.
        for (limit, depth) in [(3, 17), (8, 17), (1001, 17), (1001, 4)] {
            let (ctrl, _platform, mut qp) = model_qpair(depth);
            let ns = ctrl.namespaces().into_iter().next().unwrap();
            let plan = WorkerPlan {
                qd: 8,
                time: Duration::from_secs(3600),
                ios_limit: limit,
                ..plan(Pattern::Randread, 100)
            };
            let r = run(&mut qp, &ns, buffers(&ctrl, 8), &plan, &clock, None).unwrap();
            assert_eq!(r.reads, limit, "limit {limit} depth {depth}");
            assert!(r.ended_early && !r.stopped);
            assert_eq!(r.latency.len(), limit);
            let t = r.transport;
            assert_eq!((t.submitted, t.completions), (limit, limit), "{t:?}");
            assert_eq!(t.queued > 0, depth == 4, "{t:?}");
            assert!(t.polls > t.idle_polls);
            let d = t
                .doorbells
                .expect("tools builds the driver with doorbell-stats");
            // One SQ update per batch at most, at least one in all; the CQ head at most once
            // per batch too, and only when the CQ could run short (maybe never in a short
            // run); with shadow doorbells (the model offers them) each update goes to the
            // shadow, and MMIO only when the EventIdx asks.
            let (sq, cq) = if qp.uses_shadow_doorbells() {
                assert!(
                    d.sq_mmio <= d.sq_shadow && d.cq_mmio <= d.cq_shadow,
                    "{d:?}"
                );
                (d.sq_shadow, d.cq_shadow)
            } else {
                assert_eq!((d.sq_shadow, d.cq_shadow), (0, 0));
                (d.sq_mmio, d.cq_mmio)
            };
            assert!((1..=limit).contains(&sq) && cq <= limit, "{d:?}");
            assert!(r.measured_units < clock.units(3_600_000_000_000));
        }
    }

    #[test]
    fn failures_end_the_run_unless_continue_on_error() {
        let clock = Clock::start(super::super::clock::ClockKind::Instant);
        for continue_on_error in [false, true] {
            let (ctrl, platform, mut qp) = model_qpair(17);
            let ns = ctrl.namespace(2).unwrap();
            // Every I/O to a detached namespace fails (Invalid Namespace or Format).
            platform.detach_namespace(2).unwrap();
            let plan = WorkerPlan {
                qd: 4,
                time: Duration::from_secs(3600),
                ios_limit: 500,
                continue_on_error,
                ..plan(Pattern::Randread, 100)
            };
            let r = run(&mut qp, &ns, buffers(&ctrl, 4), &plan, &clock, None).unwrap();
            assert!(r.first_error.is_some());
            if continue_on_error {
                assert_eq!(r.errors, 500, "{r:?}");
            } else {
                // The first failure stops new submissions: only the first queue depth's worth.
                assert!((1..=4).contains(&r.errors), "{}", r.errors);
                assert_eq!(r.transport.submitted, 4);
            }
            assert_eq!(qp.outstanding(), 0);
        }
    }

    #[test]
    fn zipf_offsets_concentrate_on_few_lbas() {
        let p = WorkerPlan {
            zipf: Some(1.2),
            ..plan(Pattern::Randread, 100)
        };
        let blocks = 100_000;
        let mut o = Offsets::new(&p, blocks, 1);
        let mut counts = vec![0u32; blocks as usize];
        let draws = 200_000;
        for _ in 0..draws {
            let (lba, _) = o.next_io();
            counts[lba as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let hot: u32 = counts[..(blocks as usize / 10)].iter().sum();
        assert!(
            f64::from(hot) > 0.5 * draws as f64,
            "the hottest 10% of LBAs got {hot} of {draws}"
        );
        // Uniform offsets: the hottest tenth gets about its share.
        let mut o = Offsets::new(&plan(Pattern::Randread, 100), blocks, 1);
        let mut counts = vec![0u32; blocks as usize];
        for _ in 0..draws {
            counts[o.next_io().0 as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let hot: u32 = counts[..(blocks as usize / 10)].iter().sum();
        assert!(f64::from(hot) < 0.3 * draws as f64, "{hot}");
    }
}
