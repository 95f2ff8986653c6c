//! The cost of a submission through a multipath head (an `IoChannel` on a two-controller
//! model subsystem) against the same reads straight on a queue pair of one controller: 4 KiB
//! random reads on a null namespace, one thread, at QD 1 and 128.
//!
//! Per row: ns per I/O (driver alone: the model's time is measured and subtracted), heap
//! allocations per I/O of the driver, and with `--instructions` the driver's instructions per
//! I/O from callgrind (this binary re-run under valgrind, model entry points split off). The
//! `+instr` column is a head row's instructions minus the queue pair row's at the same QD
//! (goal: at most 20), split into the submission's share (`+submit`: inside `submit_one`) and
//! the rest (`+complete`: the poll and the delivery of the completion).
//!
//! Run: `cargo bench -p vfnvme --bench multipath_io -- [--ios N] [--qd 1,128] [--instructions]
//! [--json PATH]`

mod common;

use common::{
    arg_value, bench_subsystem, callgrind_per_io, in_model, model_ns, Bench, CountingAlloc, Marked,
};
use std::sync::atomic::Ordering;
use std::time::Instant;
use vfnvme::hal::DmaBuffer;
use vfnvme::multipath::{ChannelOptions, IoChannel, PathPolicy};
use vfnvme::{QpairOptions, QueuePair};
use vfnvme_model::{AnaState, Backing};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const MODES: [&str; 3] = ["qpair", "head numa", "head round-robin"];

enum Target {
    Qpair(Box<QueuePair<Marked>>, std::sync::Arc<vfnvme::Namespace>),
    Head(Box<IoChannel<Marked>>),
}

struct Setup {
    _bench: Bench,
    target: Target,
    bufs: Vec<DmaBuffer>,
}

fn setup(mode: usize, qd: usize) -> Setup {
    let bench = bench_subsystem(2, 1, Backing::Null, AnaState::Optimized, 1024);
    let qpair = QpairOptions {
        depth: (qd as u32 + 1).max(256),
        ..QpairOptions::default()
    };
    let target = if mode == 0 {
        let qp = bench.ctrls[0].alloc_qpair(qpair).expect("qpair");
        Target::Qpair(Box::new(qp), bench.ctrls[0].namespace(1).expect("ns"))
    } else {
        let head = bench.mp.head(1).expect("head");
        head.set_policy(if mode == 1 {
            PathPolicy::Numa
        } else {
            PathPolicy::RoundRobin
        });
        let mut ch = IoChannel::open(
            bench.mp.clone(),
            head,
            ChannelOptions {
                qpair,
                capacity: qd.max(1),
                numa_node: None,
            },
        )
        .expect("channel");
        // Open every path's queue pair before measuring.
        for k in 0..4u64 {
            let buf = bench.ctrls[0].dma().alloc(4096).expect("buffer");
            ch.read(k, 1, buf, k).expect("warm-up read");
            while ch.poll(usize::MAX, |_| {}) == 0 {}
        }
        Target::Head(Box::new(ch))
    };
    let bufs = (0..qd)
        .map(|_| bench.ctrls[0].dma().alloc(4096).expect("buffer"))
        .collect();
    Setup {
        _bench: bench,
        target,
        bufs,
    }
}

/// One read, out of line so that callgrind can tell the submission's cost from the rest (the
/// same call for both targets).
#[inline(never)]
fn submit_one(
    target: &mut Target,
    lba: u64,
    buf: DmaBuffer,
    tag: u64,
) -> Result<(), Option<DmaBuffer>> {
    match target {
        Target::Qpair(qp, ns) => qp.read(ns, lba, 1, buf, tag).map_err(|e| e.buffer),
        Target::Head(ch) => ch.read(lba, 1, buf, tag).map_err(|e| e.buffer),
    }
}

/// Keeps `qd` reads in flight until `ios` completed.
#[inline(never)]
fn measured_loop(s: &mut Setup, ios: u64) -> u64 {
    let blocks = 1u64 << 28;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next_lba = move || {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((rng as u128 * blocks as u128) >> 64) as u64
    };
    let (mut done, mut submitted, mut errors) = (0u64, 0u64, 0u64);
    let mut ready = std::mem::take(&mut s.bufs);
    while done < ios {
        while let Some(buf) = ready.pop() {
            if submitted >= ios {
                ready.push(buf);
                break;
            }
            let lba = next_lba();
            match submit_one(&mut s.target, lba, buf, submitted) {
                Ok(()) => submitted += 1,
                Err(b) => {
                    errors += 1;
                    ready.extend(b);
                    break;
                }
            }
        }
        match &mut s.target {
            Target::Qpair(qp, _) => {
                qp.poll(usize::MAX, |c| {
                    errors += u64::from(!c.is_ok());
                    done += 1;
                    ready.extend(c.buffer);
                });
            }
            Target::Head(ch) => {
                ch.poll(usize::MAX, |c| {
                    errors += u64::from(!c.is_ok());
                    done += 1;
                    ready.extend(c.buffer);
                });
            }
        }
    }
    s.bufs = ready;
    errors
}

#[derive(Debug, Default, Clone)]
struct Row {
    mode: usize,
    qd: usize,
    ios: u64,
    driver_ns_per_io: f64,
    model_ns_per_io: f64,
    driver_allocs_per_io: f64,
    driver_instr_per_io: Option<f64>,
    /// Of those, the submission's (`submit_one`).
    submit_instr_per_io: Option<f64>,
}

fn run_wall(mode: usize, qd: usize, ios: u64) -> Row {
    let mut s = setup(mode, qd);
    measured_loop(&mut s, ios / 10 + 1);
    let m0 = model_ns();
    let a0 = common::DRIVER_ALLOCS.load(Ordering::Relaxed);
    let t = Instant::now();
    let errors = measured_loop(&mut s, ios);
    let elapsed = t.elapsed().as_nanos() as f64;
    let allocs = common::DRIVER_ALLOCS.load(Ordering::Relaxed) - a0;
    assert_eq!(errors, 0, "reads failed on the model");
    let model = (model_ns() - m0) as f64;
    let n = ios as f64;
    Row {
        mode,
        qd,
        ios,
        driver_ns_per_io: (elapsed - model) / n,
        model_ns_per_io: model / n,
        driver_allocs_per_io: allocs as f64 / n,
        driver_instr_per_io: None,
        submit_instr_per_io: None,
    }
}

/// Instructions per I/O of the driver, from one run under callgrind.
fn run_callgrind(mode: usize, qd: usize, ios: u64) -> Option<common::PerIo> {
    let args: Vec<String> = [
        "--child".to_string(),
        "--mode".to_string(),
        mode.to_string(),
        "--qd".to_string(),
        qd.to_string(),
        "--ios".to_string(),
        ios.to_string(),
    ]
    .into();
    callgrind_per_io(&format!("{mode}.{qd}"), &args, ios)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ios: u64 = arg_value(&args, "--ios")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let qds: Vec<usize> = arg_value(&args, "--qd")
        .map(|v| v.split(',').filter_map(|q| q.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 128]);
    if args.iter().any(|a| a == "--child") {
        common::TIME_MODEL.store(false, Ordering::Relaxed);
        let mode = arg_value(&args, "--mode")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut s = setup(mode, qds.first().copied().unwrap_or(1));
        measured_loop(&mut s, ios);
        return;
    }
    in_model(|| ());
    let instructions = args.iter().any(|a| a == "--instructions");
    let mut rows = Vec::new();
    for &qd in &qds {
        for mode in 0..MODES.len() {
            let mut row = run_wall(mode, qd, ios);
            if instructions {
                let per_io = run_callgrind(mode, qd, 200_000);
                row.driver_instr_per_io = per_io.map(|p| p.driver);
                row.submit_instr_per_io = per_io.map(|p| p.submit);
            }
            rows.push(row);
        }
    }
    let base = |qd: usize| rows.iter().find(|r| r.qd == qd && r.mode == 0);
    let delta = |r: &Row, of: fn(&Row) -> Option<f64>| match (of(r), base(r.qd).and_then(of)) {
        (Some(a), Some(b)) if r.mode != 0 => Some(a - b),
        _ => None,
    };
    let total = |r: &Row| r.driver_instr_per_io;
    let submit = |r: &Row| r.submit_instr_per_io;
    println!("4 KiB random reads, model null namespace, 2-controller subsystem, one thread ({ios} I/Os per row)");
    println!(
        "{:>17} | {:>4} | {:>10} | {:>11} | {:>10} | {:>9} | {:>9} | {:>9} | {:>10}",
        "path",
        "QD",
        "ns/IO drv",
        "ns/IO model",
        "instr drv",
        "+instr",
        "+submit",
        "+complete",
        "allocs drv"
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for r in &rows {
        let (plus, plus_submit) = (delta(r, total), delta(r, submit));
        println!(
            "{:>17} | {:>4} | {:>10.1} | {:>11.1} | {:>10} | {:>9} | {:>9} | {:>9} | {:>10.4}",
            MODES[r.mode],
            r.qd,
            r.driver_ns_per_io,
            r.model_ns_per_io,
            opt(r.driver_instr_per_io),
            opt(plus),
            opt(plus_submit),
            opt(plus.zip(plus_submit).map(|(a, b)| a - b)),
            r.driver_allocs_per_io
        );
    }
    if let Some(path) = arg_value(&args, "--json") {
        let o = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.2}"));
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"path\":\"{}\",\"qd\":{},\"ios\":{},\"ns_per_io_driver\":{:.2},\"ns_per_io_model\":{:.2},\"instructions_per_io_driver\":{},\"extra_instructions_per_io\":{},\"extra_submit_instructions_per_io\":{},\"allocs_per_io_driver\":{:.4}}}",
                    MODES[r.mode], r.qd, r.ios, r.driver_ns_per_io, r.model_ns_per_io,
                    o(r.driver_instr_per_io), o(delta(r, total)), o(delta(r, submit)), r.driver_allocs_per_io
                )
            })
            .collect();
        if let Err(e) = std::fs::write(&path, format!("[{}]\n", items.join(",\n"))) {
            eprintln!("could not write {path}: {e}");
        }
    }
}
