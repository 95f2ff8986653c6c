//! Namespace lookup cost while another thread adds and removes namespaces nonstop.
//!
//! Compares the lock-free `NamespaceRegistry` (one epoch pin per lookup, and one pin per batch
//! of 64 lookups) with an `RwLock<BTreeMap<u32, Arc<Namespace>>>` baseline, with 1 and 2 reader
//! threads. Prints a table; `--json PATH` also writes the rows as JSON; `--ms N` sets the time
//! per row (default 300 ms, 6 rows).
//!
//! Run: `cargo bench -p vfnvme --bench namespace_lookup -- [--ms 300] [--json out.json]`

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use vfnvme::namespace::{Namespace, NamespaceIdentity};
use vfnvme::namespaces::registry::pin_guard;
use vfnvme::namespaces::NamespaceRegistry;

/// Namespaces always present (what readers look up).
const STABLE: u32 = 32;
/// Namespaces the churn thread adds and removes: nsids STABLE+1..=STABLE+CHURN and a sparse one.
const CHURN: u32 = 32;
const SPARSE_NSID: u32 = 0xFFFF_0000;
/// Lookups per pinned guard in the batched variant.
const BATCH: usize = 64;

fn ns(nsid: u32) -> Arc<Namespace> {
    let id = NamespaceIdentity {
        lba_shift: 12,
        ..Default::default()
    };
    Arc::new(Namespace::new(nsid, id, u64::from(nsid) << 20))
}

#[derive(Clone, Copy, PartialEq)]
enum Structure {
    RegistryWith,
    RegistryBatched,
    RwLockBTreeMap,
}

impl Structure {
    fn name(self) -> &'static str {
        match self {
            Structure::RegistryWith => "registry.with (pin/lookup)",
            Structure::RegistryBatched => "registry.lookup (pin/64)",
            Structure::RwLockBTreeMap => "RwLock<BTreeMap>",
        }
    }
}

struct Row {
    readers: usize,
    structure: &'static str,
    ns_per_lookup: f64,
    lookups_per_s: f64,
    churn_ops_per_s: f64,
}

/// A small xorshift so readers hit nsids in an unpredictable order without allocation.
fn next(state: &mut u64) -> u32 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % u64::from(STABLE)) as u32 + 1
}

fn run(structure: Structure, readers: usize, dur: Duration) -> Row {
    let reg = Arc::new(NamespaceRegistry::new());
    let map = Arc::new(RwLock::new(BTreeMap::new()));
    for nsid in 1..=STABLE {
        reg.insert(ns(nsid)).expect("fresh registry");
        map.write().expect("not poisoned").insert(nsid, ns(nsid));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let churn_ops = Arc::new(AtomicU64::new(0));

    let churn = {
        let (reg, map, stop, ops) = (reg.clone(), map.clone(), stop.clone(), churn_ops.clone());
        std::thread::spawn(move || {
            let batch: Vec<u32> = (STABLE + 1..=STABLE + CHURN).chain([SPARSE_NSID]).collect();
            while !stop.load(Ordering::Relaxed) {
                for &nsid in &batch {
                    if structure == Structure::RwLockBTreeMap {
                        map.write().expect("not poisoned").insert(nsid, ns(nsid));
                    } else {
                        reg.insert(ns(nsid)).expect("removed in the previous round");
                    }
                }
                if structure == Structure::RwLockBTreeMap {
                    let mut m = map.write().expect("not poisoned");
                    for nsid in &batch {
                        m.remove(nsid);
                    }
                } else {
                    reg.remove_batch(&batch);
                }
                ops.fetch_add(2 * batch.len() as u64, Ordering::Relaxed);
            }
        })
    };

    let start_line = Arc::new(std::sync::Barrier::new(readers + 1));
    let handles: Vec<_> = (0..readers)
        .map(|r| {
            let (reg, map, stop, start) =
                (reg.clone(), map.clone(), stop.clone(), start_line.clone());
            std::thread::spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (r as u64 + 1);
                let mut count = 0u64;
                let mut sum = 0u64;
                start.wait();
                let t0 = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    match structure {
                        Structure::RegistryWith => {
                            for _ in 0..BATCH {
                                let k = next(&mut rng);
                                sum += reg.with(k, |n| n.blocks()).unwrap_or(0);
                            }
                        }
                        Structure::RegistryBatched => {
                            let guard = pin_guard();
                            for _ in 0..BATCH {
                                let k = next(&mut rng);
                                sum += reg.lookup(k, &guard).map_or(0, |n| n.blocks());
                            }
                        }
                        Structure::RwLockBTreeMap => {
                            for _ in 0..BATCH {
                                let k = next(&mut rng);
                                let m = map.read().expect("not poisoned");
                                sum += m.get(&k).map_or(0, |n| n.blocks());
                            }
                        }
                    }
                    count += BATCH as u64;
                }
                black_box(sum);
                (count, t0.elapsed())
            })
        })
        .collect();
    start_line.wait();
    let t0 = Instant::now();
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    let results: Vec<(u64, Duration)> = handles
        .into_iter()
        .map(|h| h.join().expect("reader panicked"))
        .collect();
    churn.join().expect("churn thread panicked");
    let wall = t0.elapsed().as_secs_f64();

    let total: u64 = results.iter().map(|r| r.0).sum();
    let ns_per_lookup = results
        .iter()
        .map(|(c, d)| d.as_nanos() as f64 / (*c).max(1) as f64)
        .sum::<f64>()
        / readers as f64;
    Row {
        readers,
        structure: structure.name(),
        ns_per_lookup,
        lookups_per_s: total as f64 / wall,
        churn_ops_per_s: churn_ops.load(Ordering::Relaxed) as f64 / wall,
    }
}

fn main() {
    let mut json: Option<String> = None;
    let mut ms = 300u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = args.next(),
            "--ms" => ms = args.next().and_then(|v| v.parse().ok()).unwrap_or(ms),
            _ => {} // cargo bench passes --bench
        }
    }
    let dur = Duration::from_millis(ms);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "namespace lookup under churn ({STABLE} stable nsids looked up, {} added+removed nonstop; {cpus} CPUs, {ms} ms/row)",
        CHURN + 1
    );
    println!(
        "{:>7}  {:<28} {:>12} {:>14} {:>14}",
        "readers", "structure", "ns/lookup", "lookups/s", "churn ops/s"
    );
    let mut rows = Vec::new();
    for readers in [1usize, 2] {
        for s in [
            Structure::RegistryWith,
            Structure::RegistryBatched,
            Structure::RwLockBTreeMap,
        ] {
            let row = run(s, readers, dur);
            println!(
                "{:>7}  {:<28} {:>12.1} {:>14.3e} {:>14.3e}",
                row.readers,
                row.structure,
                row.ns_per_lookup,
                row.lookups_per_s,
                row.churn_ops_per_s
            );
            rows.push(row);
        }
    }
    if let Some(path) = json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"readers\":{},\"structure\":\"{}\",\"ns_per_lookup\":{:.2},\"lookups_per_s\":{:.0},\"churn_ops_per_s\":{:.0}}}",
                    r.readers, r.structure, r.ns_per_lookup, r.lookups_per_s, r.churn_ops_per_s
                )
            })
            .collect();
        let text = format!(
            "{{\"bench\":\"namespace_lookup\",\"cpus\":{cpus},\"ms_per_row\":{ms},\"rows\":[{}]}}\n",
            items.join(",")
        );
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("cannot write {path}: {e}");
            std::process::exit(1);
        }
        println!("wrote {path}");
    }
}
