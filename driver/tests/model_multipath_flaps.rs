//! Seeded random schedules of path flaps under I/O (issue 12, "Proving it"): for each seed a
//! subsystem of 2 or 3 model controllers serves one head while a channel writes and reads
//! single blocks with a random policy, and the schedule flips ANA states (told to the driver
//! at once, or only by the device's path errors until the next subsystem poll), resets
//! controllers, removes one, and switches the policy. At the end every path comes back and the
//! run is checked: every request accepted completed exactly once, none failed (queueing is on
//! and paths return), no read returned other data than the last acknowledged write of its
//! block, and every acknowledged write reads back through the head and from the medium.
//!
//! `MP_FLAP_SEEDS=N` runs seeds 0..N (default: 1000 in release builds, 100 in debug builds);
//! `MP_FLAP_SEED=N` runs only seed N and replays it exactly (virtual time, seeded model).
//! `--nocapture` prints the tally table.

mod mp_util;

use mp_util::{pattern, rig_with, Rig};
use std::collections::{BTreeMap, BTreeSet};
use vfnvme::multipath::{ChannelCompletion, HeadOptions, PathPolicy};
use vfnvme::platform::Platform;
use vfnvme_model::AnaState;

const RELEASE_SEEDS: u64 = 1000;
const DEBUG_SEEDS: u64 = 100;
const BLOCKS: u64 = 64;
const STEPS: usize = 120;
const LBA: usize = 512;

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    issued: u64,
    ok: u64,
    error: u64,
    lost: u64,
    duplicated: u64,
    corrupt: u64,
    failovers: u64,
    queued: u64,
    flips: u64,
    resets: u64,
    removals: u64,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// A write of pattern `version` to the block.
    Write { lba: u64, version: u64 },
    /// A read expecting this version (0: never written).
    Read { lba: u64, expect: u64 },
}

fn run_seed(seed: u64) -> (Tally, Vec<String>) {
    let mut rng = Rng(seed ^ 0x6d70_666c_6170);
    let controllers = 2 + rng.below(2) as u16;
    let r: Rig = rig_with(
        controllers,
        1,
        vec![],
        HeadOptions {
            policy: PathPolicy::ALL[rng.below(3) as usize],
            queue_if_no_path: true,
            delayed_removal_ms: 0,
        },
        |c| {
            c.base.seed = seed;
            c.base.reorder_completions = rng.below(2) == 0;
            c.base.io_latency_ns = 1_000 + rng.below(20_000);
            c.base.namespaces[0].blocks = BLOCKS;
        },
    );
    let mut ch = r.channel(1, 256);
    let mut t = Tally::default();
    let mut problems = Vec::new();
    let mut ops: Vec<Op> = Vec::new();
    let mut done_count: Vec<u32> = Vec::new();
    let mut busy: BTreeSet<u64> = BTreeSet::new();
    // Block → last acknowledged version.
    let mut acked: BTreeMap<u64, u64> = BTreeMap::new();
    let mut removed = false;
    let p0 = r.model.controller(0).unwrap().clone();
    let finish = |c: ChannelCompletion,
                  ops: &[Op],
                  done_count: &mut Vec<u32>,
                  busy: &mut BTreeSet<u64>,
                  acked: &mut BTreeMap<u64, u64>,
                  t: &mut Tally,
                  problems: &mut Vec<String>| {
        let k = c.tag as usize;
        done_count[k] += 1;
        if done_count[k] > 1 {
            t.duplicated += 1;
            problems.push(format!("request {k} completed {} times", done_count[k]));
            return;
        }
        t.failovers += u64::from(c.failovers);
        if let Err(e) = &c.result {
            t.error += 1;
            problems.push(format!("request {k} failed: {e}"));
            return;
        }
        t.ok += 1;
        match ops[k] {
            Op::Write { lba, version } => {
                busy.remove(&lba);
                acked.insert(lba, version);
            }
            Op::Read { lba, expect } => {
                busy.remove(&lba);
                let want = if expect == 0 {
                    vec![0u8; LBA]
                } else {
                    pattern(expect, LBA)
                };
                if c.buffer.as_ref().map(|b| b.as_slice()) != Some(want.as_slice()) {
                    t.corrupt += 1;
                    problems.push(format!(
                        "read of block {lba} (request {k}) is not version {expect}"
                    ));
                }
            }
        }
    };
    for step in 0..STEPS {
        match rng.below(10) {
            // A burst of I/O on blocks not in flight.
            0..=4 => {
                for _ in 0..1 + rng.below(12) {
                    let lba = rng.below(BLOCKS);
                    if !busy.insert(lba) {
                        continue;
                    }
                    let k = ops.len() as u64;
                    let res = if rng.below(3) == 0 {
                        let expect = acked.get(&lba).copied().unwrap_or(0);
                        ops.push(Op::Read { lba, expect });
                        ch.read(lba, 1, r.ctrls[0].dma().alloc(LBA).unwrap(), k)
                    } else {
                        let version = k + 1;
                        let mut buf = r.ctrls[0].dma().alloc(LBA).unwrap();
                        buf.as_mut_slice().copy_from_slice(&pattern(version, LBA));
                        ops.push(Op::Write { lba, version });
                        ch.write(lba, 1, buf, k)
                    };
                    done_count.push(0);
                    if let Err(e) = res {
                        problems.push(format!("step {step}: submit refused: {}", e.error));
                    }
                    t.issued += 1;
                }
                if rng.below(2) == 0 {
                    ch.commit();
                }
            }
            // An ANA flip, told to the driver now or left for the device to report.
            5 | 6 => {
                let c = rng.below(u64::from(controllers)) as usize;
                let s = AnaState::ALL[rng.below(5) as usize];
                r.model.set_ana_state(c, 1, s).unwrap();
                t.flips += 1;
                if rng.below(2) == 0 {
                    r.mp.poll();
                }
            }
            7 => {
                if rng.below(6) == 0 {
                    let c = rng.below(u64::from(controllers)) as usize;
                    if r.ctrls[c].reset().is_ok() {
                        t.resets += 1;
                    }
                } else if rng.below(8) == 0 && controllers == 3 && !removed {
                    r.model.controller(2).unwrap().request_removal();
                    r.ctrls[2].mark_removed();
                    removed = true;
                    t.removals += 1;
                } else {
                    ch.head().set_policy(PathPolicy::ALL[rng.below(3) as usize]);
                }
            }
            _ => {
                r.mp.poll();
            }
        }
        // Poll a few times, letting virtual time pass.
        for _ in 0..rng.below(4) {
            let mut got = Vec::new();
            ch.poll(usize::MAX, |c| got.push(c));
            for c in got {
                finish(
                    c,
                    &ops,
                    &mut done_count,
                    &mut busy,
                    &mut acked,
                    &mut t,
                    &mut problems,
                );
            }
            p0.relax();
        }
    }
    t.queued = ch.stats().queued;
    // Every path comes back; everything must complete.
    for c in 0..controllers as usize {
        r.model.set_ana_state(c, 1, AnaState::Optimized).unwrap();
    }
    r.mp.poll();
    let mut polls = 0;
    while ch.outstanding() > 0 && polls < 200_000 {
        let mut got = Vec::new();
        ch.poll(usize::MAX, |c| got.push(c));
        for c in got {
            finish(
                c,
                &ops,
                &mut done_count,
                &mut busy,
                &mut acked,
                &mut t,
                &mut problems,
            );
        }
        if polls % 16 == 0 {
            r.mp.poll();
        }
        p0.relax();
        polls += 1;
    }
    t.lost = done_count.iter().filter(|&&n| n == 0).count() as u64;
    if t.lost > 0 {
        problems.push(format!("{} requests never completed", t.lost));
    }
    // Every acknowledged write reads back: from the medium, and through the head.
    for (&lba, &version) in &acked {
        let mut out = vec![0u8; LBA];
        r.model
            .controller(0)
            .unwrap()
            .read_stored(1, lba * LBA as u64, &mut out)
            .unwrap();
        if out != pattern(version, LBA) {
            t.corrupt += 1;
            problems.push(format!(
                "block {lba}: the medium lacks acknowledged version {version}"
            ));
        }
        ch.read(lba, 1, r.ctrls[0].dma().alloc(LBA).unwrap(), lba)
            .unwrap();
    }
    ch.commit();
    let mut reads = Vec::new();
    let mut polls = 0;
    while reads.len() < acked.len() && polls < 200_000 {
        ch.poll(usize::MAX, |c| reads.push(c));
        r.ctrls[0].platform().relax();
        polls += 1;
    }
    for c in reads {
        let ok = c.is_ok()
            && c.buffer.as_ref().map(|b| b.as_slice())
                == Some(pattern(acked[&c.tag], LBA).as_slice());
        if !ok {
            t.corrupt += 1;
            problems.push(format!(
                "block {} does not read back through the head",
                c.tag
            ));
        }
    }
    if !r.model.controller(0).unwrap().dma_violations().is_empty() {
        problems.push("DMA to memory outside live allocations".into());
    }
    (t, problems)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn path_flaps_lose_duplicate_and_corrupt_nothing() {
    let seeds: Vec<u64> = match env_u64("MP_FLAP_SEED") {
        Some(s) => vec![s],
        None => {
            let n = env_u64("MP_FLAP_SEEDS").unwrap_or(if cfg!(debug_assertions) {
                DEBUG_SEEDS
            } else {
                RELEASE_SEEDS
            });
            (0..n).collect()
        }
    };
    let mut sum = Tally::default();
    let mut failures = Vec::new();
    for &seed in &seeds {
        let (t, problems) = run_seed(seed);
        sum.issued += t.issued;
        sum.ok += t.ok;
        sum.error += t.error;
        sum.lost += t.lost;
        sum.duplicated += t.duplicated;
        sum.corrupt += t.corrupt;
        sum.failovers += t.failovers;
        sum.queued += t.queued;
        sum.flips += t.flips;
        sum.resets += t.resets;
        sum.removals += t.removals;
        if !problems.is_empty() {
            eprintln!(
                "seed {seed} FAILED: {}\n  rerun just it: MP_FLAP_SEED={seed} cargo test -p vfnvme --test model_multipath_flaps -- --nocapture",
                problems[..problems.len().min(5)].join("; ")
            );
            failures.push(seed);
        }
    }
    println!(
        "| seeds | I/Os issued | completed OK | with error | lost | duplicated | corrupt | failovers | queued | ANA flips | resets | removals |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        seeds.len(),
        sum.issued,
        sum.ok,
        sum.error,
        sum.lost,
        sum.duplicated,
        sum.corrupt,
        sum.failovers,
        sum.queued,
        sum.flips,
        sum.resets,
        sum.removals
    );
    assert!(failures.is_empty(), "failing seeds: {failures:?}");
    assert_eq!(sum.ok, sum.issued);
    if seeds.len() >= 100 {
        assert!(
            sum.failovers > 0 && sum.queued > 0 && sum.resets > 0 && sum.removals > 0,
            "the schedules exercised failover, queueing, resets and removals: {sum:?}"
        );
    }
}
