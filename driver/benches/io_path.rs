//! The driver's CPU cost per 4 KiB read on the model's null namespace, one thread, at several
//! queue depths.
//!
//! For each queue depth it reports:
//! - wall-clock ns per I/O, for driver and model together and for the driver alone (the time
//!   spent inside the model's entry points is measured and subtracted);
//! - doorbell MMIO writes per I/O, SQ tail and CQ head separately, from the model's counters
//!   (one SQ write per submitted batch; the CQ head only when the CQ could run short of slots);
//! - heap allocations per I/O made by the driver (allocations inside the model are counted
//!   separately);
//! - with `--instructions`: instructions per I/O from valgrind's callgrind, re-running this
//!   binary under it, split into driver and model the same way.
//!
//! Rows come with shadow doorbells off (MMIO doorbells, as on most SSDs) and on.
//!
//! Run: `cargo bench -p vfnvme --bench io_path -- [--ios N] [--qd 1,32,128] [--shadow on|off|both]
//! [--instructions] [--json PATH]`

mod common;

use common::{arg_value, callgrind_per_io, model_ns, CountingAlloc, Marked};
use common::{DRIVER_ALLOCS, MODEL_ALLOCS, TIME_MODEL};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use vfnvme::hal::DmaBuffer;
use vfnvme::{Controller, ControllerOptions, Namespace, QpairOptions, QueuePair};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

// ---- the measured loop -----------------------------------------------------------------------

struct Setup {
    model: Arc<ModelPlatform>,
    _ctrl: Controller<Marked>,
    qp: QueuePair<Marked>,
    ns: Arc<Namespace>,
    bufs: Vec<DmaBuffer>,
}

fn setup(qd: usize, shadow: bool) -> Setup {
    let model = ModelPlatform::new(ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 1 << 28,
            lba_size: 4096,
            backing: Backing::Null,
        }],
        max_queue_entries: 1024,
        ..ModelConfig::default()
    })
    .expect("model config");
    let marked = Marked::new(model.clone());
    let options = ControllerOptions {
        shadow_doorbells: shadow,
        ..ControllerOptions::default()
    };
    let ctrl = Controller::new(marked, options).expect("bring-up");
    let qp = ctrl
        .alloc_qpair(QpairOptions {
            depth: (qd as u32 + 1).max(256),
            ..QpairOptions::default()
        })
        .expect("qpair");
    let ns = ctrl.namespace(1).expect("namespace 1");
    let bufs = (0..qd)
        .map(|_| ctrl.dma().alloc(4096).expect("buffer"))
        .collect();
    Setup {
        model,
        _ctrl: ctrl,
        qp,
        ns,
        bufs,
    }
}

/// Keeps `qd` reads in flight until `ios` have completed. Completed buffers are resubmitted
/// after each poll, so every poll commits one batch with one doorbell write.
#[inline(never)]
fn measured_loop(s: &mut Setup, ios: u64) -> u64 {
    let blocks = s.ns.blocks();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    // A 64-bit LCG (Knuth's MMIX constants: full period) and multiply-high onto 0..blocks,
    // which uses the generator's good high bits: random LBAs for three instructions.
    let mut next_lba = move || {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((rng as u128 * blocks as u128) >> 64) as u64
    };
    let mut done = 0u64;
    let mut submitted = 0u64;
    let mut ready: Vec<DmaBuffer> = std::mem::take(&mut s.bufs);
    let mut errors = 0u64;
    while done < ios {
        while let Some(buf) = ready.pop() {
            if submitted >= ios {
                ready.push(buf);
                break;
            }
            match s.qp.read(&s.ns, next_lba(), 1, buf, submitted) {
                Ok(()) => submitted += 1,
                Err(e) => {
                    errors += 1;
                    if let Some(b) = e.buffer {
                        ready.push(b);
                    }
                    break;
                }
            }
        }
        s.qp.poll(usize::MAX, |c| {
            if !c.is_ok() {
                errors += 1;
            }
            done += 1;
            if let Some(b) = c.buffer {
                ready.push(b);
            }
        });
    }
    s.bufs = ready;
    errors
}

#[derive(Debug, Default, Clone)]
struct Row {
    qd: usize,
    shadow: bool,
    ios: u64,
    total_ns_per_io: f64,
    driver_ns_per_io: f64,
    model_ns_per_io: f64,
    sq_doorbells_per_io: f64,
    cq_doorbells_per_io: f64,
    driver_allocs_per_io: f64,
    model_allocs_per_io: f64,
    driver_instr_per_io: Option<f64>,
    model_instr_per_io: Option<f64>,
}

fn run_wall(qd: usize, shadow: bool, ios: u64) -> Row {
    let mut s = setup(qd, shadow);
    measured_loop(&mut s, ios / 10 + 1); // warm up
    let before = s.model.stats();
    let ns0 = model_ns();
    let (d0, m0) = (
        DRIVER_ALLOCS.load(Ordering::Relaxed),
        MODEL_ALLOCS.load(Ordering::Relaxed),
    );
    let t = Instant::now();
    let errors = measured_loop(&mut s, ios);
    let elapsed = t.elapsed().as_nanos() as f64;
    let (d1, m1) = (
        DRIVER_ALLOCS.load(Ordering::Relaxed),
        MODEL_ALLOCS.load(Ordering::Relaxed),
    );
    assert_eq!(errors, 0, "reads failed on the model");
    let after = s.model.stats();
    let model_ns = (model_ns() - ns0) as f64;
    let n = ios as f64;
    Row {
        qd,
        shadow,
        ios,
        total_ns_per_io: elapsed / n,
        driver_ns_per_io: (elapsed - model_ns) / n,
        model_ns_per_io: model_ns / n,
        sq_doorbells_per_io: (after.sq_doorbell_writes - before.sq_doorbell_writes) as f64 / n,
        cq_doorbells_per_io: (after.cq_doorbell_writes - before.cq_doorbell_writes) as f64 / n,
        driver_allocs_per_io: (d1 - d0) as f64 / n,
        model_allocs_per_io: (m1 - m0) as f64 / n,
        ..Row::default()
    }
}

/// Runs the loop once under callgrind, collecting only inside `measured_loop`, and splits the
/// instructions into the model's (inclusive cost of the wrapper's entry points) and the rest.
fn run_callgrind(qd: usize, shadow: bool, ios: u64) -> Option<(f64, f64)> {
    let args: Vec<String> = [
        "--child",
        "--qd",
        &qd.to_string(),
        "--ios",
        &ios.to_string(),
        "--shadow",
        if shadow { "on" } else { "off" },
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let per_io = callgrind_per_io(&format!("qd{qd}.{shadow}"), &args, ios)?;
    Some((per_io.driver, per_io.model))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ios: u64 = arg_value(&args, "--ios")
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let qds: Vec<usize> = arg_value(&args, "--qd")
        .map(|v| v.split(',').filter_map(|q| q.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 32, 128]);
    if args.iter().any(|a| a == "--child") {
        // Under callgrind: one run of the loop, nothing else measured.
        TIME_MODEL.store(false, Ordering::Relaxed);
        let qd = qds.first().copied().unwrap_or(1);
        let shadow = arg_value(&args, "--shadow").as_deref() != Some("off");
        let mut s = setup(qd, shadow);
        measured_loop(&mut s, ios);
        return;
    }
    let instructions = args.iter().any(|a| a == "--instructions");
    let shadows: Vec<bool> = match arg_value(&args, "--shadow").as_deref() {
        Some("on") => vec![true],
        Some("off") => vec![false],
        _ => vec![false, true],
    };
    let mut rows = Vec::new();
    for &shadow in &shadows {
        for &qd in &qds {
            let mut row = run_wall(qd, shadow, ios);
            if instructions {
                if let Some((d, m)) = run_callgrind(qd, shadow, 200_000) {
                    row.driver_instr_per_io = Some(d);
                    row.model_instr_per_io = Some(m);
                }
            }
            rows.push(row);
        }
    }
    println!("4 KiB random reads, model null namespace, one thread ({ios} I/Os per row)");
    println!(
        "{:>6} | {:>5} | {:>10} | {:>11} | {:>10} | {:>12} | {:>12} | {:>9} | {:>9} | {:>12} | {:>12}",
        "shadow",
        "QD",
        "ns/IO all",
        "ns/IO drv",
        "ns/IO model",
        "instr drv",
        "instr model",
        "SQ db/IO",
        "CQ db/IO",
        "allocs drv",
        "allocs model"
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for r in &rows {
        println!(
            "{:>6} | {:>5} | {:>10.1} | {:>11.1} | {:>11.1} | {:>12} | {:>12} | {:>9.4} | {:>9.4} | {:>12.3} | {:>12.3}",
            if r.shadow { "on" } else { "off" },
            r.qd,
            r.total_ns_per_io,
            r.driver_ns_per_io,
            r.model_ns_per_io,
            opt(r.driver_instr_per_io),
            opt(r.model_instr_per_io),
            r.sq_doorbells_per_io,
            r.cq_doorbells_per_io,
            r.driver_allocs_per_io,
            r.model_allocs_per_io
        );
    }
    if let Some(path) = arg_value(&args, "--json") {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                let o = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.2}"));
                format!(
                    "{{\"shadow_doorbells\":{},\"qd\":{},\"ios\":{},\"ns_per_io_total\":{:.2},\"ns_per_io_driver\":{:.2},\"ns_per_io_model\":{:.2},\"instructions_per_io_driver\":{},\"instructions_per_io_model\":{},\"sq_doorbells_per_io\":{:.4},\"cq_doorbells_per_io\":{:.4},\"allocs_per_io_driver\":{:.4},\"allocs_per_io_model\":{:.4}}}",
                    r.shadow, r.qd, r.ios, r.total_ns_per_io, r.driver_ns_per_io, r.model_ns_per_io,
                    o(r.driver_instr_per_io), o(r.model_instr_per_io), r.sq_doorbells_per_io, r.cq_doorbells_per_io,
                    r.driver_allocs_per_io, r.model_allocs_per_io
                )
            })
            .collect();
        if let Err(e) = std::fs::write(&path, format!("[{}]\n", items.join(",\n"))) {
            eprintln!("could not write {path}: {e}");
        }
    }
}
