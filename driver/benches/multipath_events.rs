//! Two control-path figures of multipath heads on the model subsystem (two controllers):
//!
//! - **ANA flip**: 1024 namespaces in one ANA group, inaccessible on both controllers; the
//!   device flips the group to optimized on one controller, and the time is measured until
//!   every head has a usable path (the driver's `Subsystem::poll`: the ANA change event, the
//!   ANA log page, the path lists of all 1024 heads published in one batch). Goal <= 1 ms
//!   (the kernel: 49.5 ms after seed 003's second patch).
//! - **Fail queued**: 10,000 requests queued in a channel without a usable path; the time from
//!   switching queueing off until the last has completed with its error. Goal <= 1 ms (the
//!   kernel: 3.5 ms after seed 003's first patch).
//!
//! Each is repeated (`--runs N`, default 20) and the median, minimum and maximum are printed,
//! with the driver's and the model's shares of the ANA flip (the model's time is measured in
//! its entry points) and the publications (grace periods) per flip.
//!
//! Run: `cargo bench -p vfnvme --bench multipath_events -- [--runs N] [--namespaces N]
//! [--queued N] [--json PATH]`

mod common;

use common::{arg_value, bench_subsystem, median, model_ns, CountingAlloc};
use std::time::Instant;
use vfnvme::multipath::{ChannelOptions, IoChannel};
use vfnvme_model::{AnaState, Backing};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

struct Flip {
    total_ns: f64,
    model_ns: f64,
    publications: u64,
}

fn ana_flip(namespaces: u32) -> Flip {
    let b = bench_subsystem(2, namespaces, Backing::Null, AnaState::Inaccessible, 256);
    b.mp.poll();
    let heads = b.mp.heads();
    assert_eq!(heads.len(), namespaces as usize);
    assert!(heads.iter().all(|h| !h.has_usable_path()));
    let p0 = b.mp.publications();
    let m0 = model_ns();
    let t = Instant::now();
    b.model
        .set_ana_state(1, 1, AnaState::Optimized)
        .expect("group 1");
    let mut polls = 0;
    while !heads.iter().all(|h| h.has_usable_path()) {
        b.mp.poll();
        polls += 1;
        assert!(polls < 1000, "the heads never became usable");
    }
    let total = t.elapsed().as_nanos() as f64;
    Flip {
        total_ns: total,
        model_ns: (model_ns() - m0) as f64,
        publications: b.mp.publications() - p0,
    }
}

fn fail_queued(n: usize) -> f64 {
    let b = bench_subsystem(2, 1, Backing::Null, AnaState::Inaccessible, 256);
    let head = b.mp.head(1).expect("head");
    let mut ch = IoChannel::open(
        b.mp.clone(),
        head.clone(),
        ChannelOptions {
            capacity: n,
            ..ChannelOptions::default()
        },
    )
    .expect("channel");
    // A warmed-up pool, as in a running application: its free list has grown to `n` before
    // the clock starts, so that the timed drops of the failed requests' buffers measure the
    // driver, not the first growth of the pool's free list (and whatever the allocator then
    // has to fault in).
    let warm: Vec<_> = (0..n)
        .map(|_| b.ctrls[0].dma().alloc(4096).expect("buffer"))
        .collect();
    drop(warm);
    for k in 0..n as u64 {
        let buf = b.ctrls[0].dma().alloc(4096).expect("buffer");
        ch.read(k, 1, buf, k).expect("queued");
    }
    assert_eq!(ch.queued(), n);
    let mut failed = 0usize;
    let t = Instant::now();
    head.set_queue_if_no_path(false);
    while failed < n {
        ch.poll(usize::MAX, |c| {
            assert!(c.result.is_err());
            failed += 1;
        });
    }
    let ns = t.elapsed().as_nanos() as f64;
    assert_eq!(ch.outstanding(), 0);
    ns
}

fn stats(v: &mut [f64]) -> (f64, f64, f64) {
    let m = median(v);
    (m, v[0], v[v.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = arg_value(&args, "--runs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
        .max(1);
    let namespaces: u32 = arg_value(&args, "--namespaces")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let queued: usize = arg_value(&args, "--queued")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let flips: Vec<Flip> = (0..runs).map(|_| ana_flip(namespaces)).collect();
    let mut total: Vec<f64> = flips.iter().map(|f| f.total_ns).collect();
    let mut driver: Vec<f64> = flips.iter().map(|f| f.total_ns - f.model_ns).collect();
    let publications = flips.iter().map(|f| f.publications).max().unwrap_or(0);
    let mut fails: Vec<f64> = (0..runs).map(|_| fail_queued(queued)).collect();
    let (tm, tmin, tmax) = stats(&mut total);
    let (dm, dmin, dmax) = stats(&mut driver);
    let (fm, fmin, fmax) = stats(&mut fails);
    println!("multipath control path, model subsystem of 2 controllers, {runs} runs each");
    println!(
        "{:<44} | {:>11} | {:>11} | {:>11} | {:>8}",
        "figure", "median us", "min us", "max us", "goal us"
    );
    let row = |name: &str, m: f64, lo: f64, hi: f64| {
        println!(
            "{:<44} | {:>11.1} | {:>11.1} | {:>11.1} | {:>8}",
            name,
            m / 1e3,
            lo / 1e3,
            hi / 1e3,
            1000
        )
    };
    row(
        &format!("ANA flip of {namespaces} namespaces, until all usable"),
        tm,
        tmin,
        tmax,
    );
    row(
        "  of which the driver (model time taken out)",
        dm,
        dmin,
        dmax,
    );
    row(
        &format!("fail {queued} queued requests (queueing off)"),
        fm,
        fmin,
        fmax,
    );
    println!("publications (grace periods) per ANA flip: {publications}");
    if let Some(path) = arg_value(&args, "--json") {
        let json = format!(
            "{{\"runs\":{runs},\"ana_flip\":{{\"namespaces\":{namespaces},\"median_ns\":{tm:.0},\"min_ns\":{tmin:.0},\"max_ns\":{tmax:.0},\"driver_median_ns\":{dm:.0},\"publications\":{publications}}},\"fail_queued\":{{\"requests\":{queued},\"median_ns\":{fm:.0},\"min_ns\":{fmin:.0},\"max_ns\":{fmax:.0}}}}}\n"
        );
        if let Err(e) = std::fs::write(&path, json) {
            eprintln!("could not write {path}: {e}");
        }
    }
}
