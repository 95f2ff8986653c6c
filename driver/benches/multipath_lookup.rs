//! Head lookup while another thread churns the heads (a namespace removed from and added back
//! to every controller, then `Subsystem::poll` rebuilding the head table), against the same
//! lookups in a controller's namespace registry under the same churn.
//!
//! Rows: readers (1, 2) x structure (`Subsystem::with_head`: no reference count;
//! `Subsystem::head`: an `Arc` per lookup; `NamespaceRegistry::with` of controller 0).
//! `--ms N` per row (default 300), `--json PATH`.
//!
//! Run: `cargo bench -p vfnvme --bench multipath_lookup -- [--ms 300] [--json out.json]`

mod common;

use common::{arg_value, bench_subsystem};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vfnvme_model::{AnaState, Backing};

/// Namespaces looked up (always present).
const STABLE: u32 = 32;
/// The namespace the churn thread removes and adds back.
const CHURNED: u32 = STABLE + 1;

const STRUCTURES: [&str; 3] = ["heads with_head", "heads head() Arc", "registry with"];

struct Row {
    readers: usize,
    structure: usize,
    ns_per_lookup: f64,
    churn_ops_per_s: f64,
}

fn run(structure: usize, readers: usize, dur: Duration) -> Row {
    let b = Arc::new(bench_subsystem(
        2,
        CHURNED,
        Backing::Null,
        AnaState::Optimized,
        64,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let churn = {
        let (b, stop, ops) = (b.clone(), stop.clone(), ops.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for c in &b.ctrls {
                    c.remove_namespaces(&[CHURNED]);
                }
                b.mp.poll();
                for c in &b.ctrls {
                    c.rescan_namespaces(&[CHURNED]);
                }
                b.mp.poll();
                ops.fetch_add(2, Ordering::Relaxed);
            }
        })
    };
    let lookups = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let threads: Vec<_> = (0..readers)
        .map(|r| {
            let (b, stop, lookups) = (b.clone(), stop.clone(), lookups.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                let mut k = r as u32;
                let reg = b.ctrls[0].registry().clone();
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..1024 {
                        k = (k + 7) % STABLE + 1;
                        let found = match structure {
                            0 => b.mp.with_head(k, |h| h.nsid()),
                            1 => b.mp.head(k).map(|h| h.nsid()),
                            _ => reg.with(k, |ns| ns.nsid()),
                        };
                        black_box(found);
                        n += 1;
                    }
                }
                lookups.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("reader");
    }
    churn.join().expect("churn");
    let wall = start.elapsed().as_secs_f64();
    let n = lookups.load(Ordering::Relaxed) as f64;
    Row {
        readers,
        structure,
        ns_per_lookup: wall * 1e9 * readers as f64 / n,
        churn_ops_per_s: ops.load(Ordering::Relaxed) as f64 / wall,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ms: u64 = arg_value(&args, "--ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut rows = Vec::new();
    for readers in [1, 2] {
        for s in 0..STRUCTURES.len() {
            rows.push(run(s, readers, Duration::from_millis(ms)));
        }
    }
    println!("head lookup under churn ({STABLE} stable namespaces looked up, one removed and added back nonstop on 2 controllers; {ms} ms/row)");
    println!(
        "{:>7} | {:>17} | {:>10} | {:>12}",
        "readers", "structure", "ns/lookup", "churn ops/s"
    );
    for r in &rows {
        println!(
            "{:>7} | {:>17} | {:>10.1} | {:>12.0}",
            r.readers, STRUCTURES[r.structure], r.ns_per_lookup, r.churn_ops_per_s
        );
    }
    if let Some(path) = arg_value(&args, "--json") {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"readers\":{},\"structure\":\"{}\",\"ns_per_lookup\":{:.2},\"churn_ops_per_s\":{:.0}}}",
                    r.readers, STRUCTURES[r.structure], r.ns_per_lookup, r.churn_ops_per_s
                )
            })
            .collect();
        if let Err(e) = std::fs::write(&path, format!("[{}]\n", items.join(",\n"))) {
            eprintln!("could not write {path}: {e}");
        }
    }
}
