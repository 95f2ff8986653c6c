//! The measuring loop of one queue pair: keep `qd` I/Os outstanding, reap completions in
//! batches, resubmit their buffers at once and ring the doorbell once per batch.
//!
//! Clock reads (see [`super::clock`]): one per batch of completions (it is both the completion time
//! of the batch and the submission time of the I/Os resubmitted from it), plus one every
//! [`IDLE_POLLS_PER_CLOCK_READ`] empty polls to notice the end of the run or a stall. (In a TCG
//! guest the clocksource is the HPET: a clock read is a system call plus an emulated MMIO read,
//! about 1.6 µs, and takes QEMU's global lock, which the NVMe emulation needs too.)

use super::clock::Clock;
use super::options::Pattern;
use anyhow::{bail, Result};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use vfnvme::dma::DmaBuffer;
use vfnvme::platform::Platform;
use vfnvme::spec::Status;
use vfnvme::{Namespace, QueuePair};

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
    /// The first error status seen.
    pub first_error: Option<Status>,
    /// Latency of every measured I/O, in clock units (see `Clock::ns_per_unit`).
    pub latency: Histogram<u64>,
    /// Completion batches reaped (for I/Os per doorbell).
    pub batches: u64,
    /// Length of the measured window in clock units: the planned time, or less when stopped.
    pub measured_units: u64,
    /// Whether [`WorkerPlan::stop`] ended the run early.
    pub stopped: bool,
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
        }
    }

    /// The next I/O: (starting LBA, is a read).
    #[inline]
    pub fn next_io(&mut self) -> (u64, bool) {
        let slot = if self.random {
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
/// `plan.io_size` bytes long). Returns when the measured time is over and every I/O is back.
pub fn run<P: Platform>(
    qp: &mut QueuePair<P>,
    ns: &Namespace,
    buffers: Vec<DmaBuffer>,
    plan: &WorkerPlan,
    clock: &Clock,
) -> Result<WorkerResult> {
    let qd = buffers.len();
    if qd != plan.qd as usize || qd == 0 {
        bail!(
            "{} buffers for a queue depth of {}: give one buffer per outstanding I/O",
            qd,
            plan.qd
        );
    }
    let blocks_per_io = plan.io_size >> ns.lba_shift();
    let blocks = u32::try_from(blocks_per_io)?;
    let mut offsets = Offsets::new(plan, ns.blocks(), blocks_per_io);
    let mut latency = Histogram::<u64>::new_with_bounds(1, MAX_TRACKED_UNITS, 3)?;
    let mut res = WorkerResult {
        reads: 0,
        writes: 0,
        errors: 0,
        first_error: None,
        latency: Histogram::new(3)?,
        batches: 0,
        measured_units: 0,
        stopped: false,
    };
    // Per slot: submission time in ns since `start`, or UNTIMED.
    const UNTIMED: u64 = u64::MAX;
    let mut submitted_at = vec![UNTIMED; qd];
    let sample_every = u64::from(plan.lat_sample.max(1));
    let mut batch_no: u64 = 0;
    // Completions of one poll; capacity qd, so pushing never allocates.
    let mut reaped: Vec<(u64, Status, Option<DmaBuffer>)> = Vec::with_capacity(qd);

    let start = clock.now();
    let ramp_end = start + clock.units(u64::try_from(plan.ramp.as_nanos())?);
    let mut end = ramp_end + clock.units(u64::try_from(plan.time.as_nanos())?);
    // Checked at every clock read (not per I/O): a stop request moves the end to now.
    let mut check_stop = |now: u64, end: &mut u64| {
        if !res.stopped && plan.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            res.stopped = true;
            *end = now.min(*end);
        }
    };
    let stall_units = clock.units(u64::try_from(STALL_TIMEOUT.as_nanos())?);
    let mut now = start;

    let submit = |qp: &mut QueuePair<P>, offsets: &mut Offsets, slot: u64, buf: DmaBuffer| {
        let (lba, read) = offsets.next_io();
        if read {
            qp.read(ns, lba, blocks, buf, slot)
        } else {
            qp.write(ns, lba, blocks, buf, slot | WRITE_TAG)
        }
    };

    for (slot, buf) in buffers.into_iter().enumerate() {
        if let Some(t) = submitted_at.get_mut(slot) {
            *t = start;
        }
        submit(qp, &mut offsets, slot as u64, buf)?;
    }
    qp.commit();

    let mut last_progress = start;
    let mut idle: u32 = 0;
    loop {
        let n = qp.poll(qd, |c| reaped.push((c.tag, c.status, c.buffer)));
        if n == 0 {
            idle += 1;
            if idle >= IDLE_POLLS_PER_CLOCK_READ {
                idle = 0;
                now = clock.now();
                check_stop(now, &mut end);
                if now.saturating_sub(last_progress) > stall_units {
                    bail!(
                        "no I/O completed for {} s with {} outstanding on queue {}: the controller stopped responding; reset it (`vfnvme setup --reset` then `vfnvme setup`)",
                        STALL_TIMEOUT.as_secs(),
                        qp.outstanding(),
                        qp.qid()
                    );
                }
                if now >= end && qp.outstanding() == 0 {
                    break;
                }
            }
            continue;
        }
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
            check_stop(now, &mut end);
        }
        let measuring = now >= ramp_end && now < end;
        if measuring {
            res.batches += 1;
        }
        for (tag, status, buf) in reaped.drain(..) {
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
            if !status.is_success() {
                res.errors += 1;
                res.first_error.get_or_insert(status);
            }
            let Some(buf) = buf else { continue };
            if now < end {
                if let Some(t) = submitted_at.get_mut(slot as usize) {
                    *t = if sample { now } else { UNTIMED };
                }
                submit(qp, &mut offsets, slot, buf)?;
            }
        }
        qp.commit();
        if now >= end && qp.outstanding() == 0 {
            break;
        }
    }
    res.latency = latency;
    res.measured_units = end.saturating_sub(ramp_end);
    Ok(res)
}

#[cfg(test)]
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
        use vfnvme::model::ModelPlatform;
        use vfnvme::{Controller, ControllerOptions, QpairOptions};
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
        let r = run(&mut qp, &ns, buffers, &plan, &clock).unwrap();
        assert!(r.stopped);
        assert_eq!(qp.outstanding(), 0);
        assert!(
            r.measured_units < clock.units(3600 * 1_000_000_000),
            "{}",
            r.measured_units
        );
        assert_eq!(r.errors, 0);
    }
}
