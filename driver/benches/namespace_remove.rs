//! Removing every namespace of a controller while I/O is in flight on each, for N = 8, 64 and
//! 1024 namespaces, on the model.
//!
//! Per row: a queue pair has 2 writes in flight on every namespace (submitted and doorbell
//! rung, 50 µs device latency). The clock starts, then:
//! - `batched`: `Controller::remove_namespaces(all)` — all marked Removing, unlinked in one
//!   writer section, one deferred reclamation for the batch;
//! - `event-driven`: the device detaches every namespace, `process_admin_completions()` reaps
//!   the AER, reads the Changed Namespace List, probes the listed nsids (pipelined) and removes
//!   the gone ones in one batch;
//! - `one by one` (baseline): remove one namespace and wait for its grace period, N times.
//!
//! Measured until (1) every namespace is unlinked ("unlinked"), (2) every in-flight I/O has
//! completed on the queue pair ("drained"; the driver never blocks on it: the qpair owner
//! polls) and (3) every namespace is `Removed`, i.e. its grace period has passed ("quiescent").
//! "last wait" is the wait for the grace period after the drain (flat in N when batched).
//! Virtual time is the model's clock (device latency); wall time is this machine's, and
//! includes the epoch grace period (wall-clock work only, no device time).
//!
//! Run: `cargo bench -p vfnvme --bench namespace_remove -- [--json out.json]`

use std::sync::Arc;
use std::time::Instant;

use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::namespace::{Namespace, NamespaceState};
use vfnvme::platform::Platform;
use vfnvme::{QpairOptions, QueuePair};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

const IO_PER_NAMESPACE: u64 = 2;
const IO_LATENCY_NS: u64 = 50_000;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Batched,
    EventDriven,
    OneByOne,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Batched => "batched",
            Mode::EventDriven => "event-driven",
            Mode::OneByOne => "one by one",
        }
    }
}

struct Row {
    mode: &'static str,
    namespaces: usize,
    in_flight: usize,
    unlinked_wall_us: f64,
    quiescent_wall_us: f64,
    grace_wall_us: f64,
    drained_virtual_us: f64,
    unlinked_virtual_us: f64,
}

fn wait_quiescent(handles: &[Arc<Namespace>]) {
    while handles.iter().any(|n| n.state() != NamespaceState::Removed) {
        // Unpinning with garbage queued lets the epoch advance and run deferred frees.
        crossbeam_epoch::pin().flush();
    }
}

fn drain(platform: &ModelPlatform, qp: &mut QueuePair<ModelPlatform>) -> usize {
    let mut done = 0;
    while qp.outstanding() > 0 {
        let n = qp.poll(usize::MAX, |_| {});
        done += n;
        if n == 0 {
            platform.relax();
        }
    }
    done
}

fn run(count: u32, mode: Mode) -> Row {
    let platform = ModelPlatform::new(ModelConfig {
        namespaces: (1..=count)
            .map(|nsid| ModelNamespaceConfig {
                nsid,
                blocks: 1 << 16,
                lba_size: 4096,
                backing: Backing::Null,
            })
            .collect(),
        io_latency_ns: IO_LATENCY_NS,
        admin_latency_ns: 20_000,
        max_queue_entries: 4096,
        ..ModelConfig::default()
    })
    .expect("model config");
    let ctrl = Controller::new(Arc::clone(&platform), ControllerOptions::default()).expect("up");
    let in_flight = (u64::from(count) * IO_PER_NAMESPACE) as usize;
    let mut qp = ctrl
        .alloc_qpair(QpairOptions {
            depth: (in_flight as u32 + 1).max(2),
            ..QpairOptions::default()
        })
        .expect("qpair");
    let handles = ctrl.namespaces();
    for ns in &handles {
        for i in 0..IO_PER_NAMESPACE {
            let buf = ctrl.dma().alloc(4096).expect("dma");
            qp.write(ns, i, 1, buf, i).expect("submit");
        }
    }
    qp.commit();
    let nsids: Vec<u32> = handles.iter().map(|n| n.nsid()).collect();

    let v0 = platform.now_ns();
    let w0 = Instant::now();
    match mode {
        Mode::Batched => {
            ctrl.remove_namespaces(&nsids);
        }
        Mode::EventDriven => {
            for &nsid in &nsids {
                platform.detach_namespace(nsid).expect("detach");
            }
            let mut removed = 0;
            while removed < nsids.len() {
                let report = ctrl.process_admin_completions().expect("events");
                removed += report.scan.map_or(0, |s| s.removed.len());
            }
        }
        Mode::OneByOne => {
            for (ns, &nsid) in handles.iter().zip(&nsids) {
                ctrl.remove_namespaces(&[nsid]);
                wait_quiescent(std::slice::from_ref(ns));
            }
        }
    }
    let unlinked_wall = w0.elapsed();
    let unlinked_virtual = platform.now_ns() - v0;
    assert!(ctrl.registry().is_empty());
    let completed = drain(&platform, &mut qp);
    assert_eq!(completed, in_flight, "lost completions");
    let drained_virtual = platform.now_ns() - v0;
    let g0 = Instant::now();
    wait_quiescent(&handles);
    let grace_wall = g0.elapsed();
    let quiescent_wall = w0.elapsed();
    Row {
        mode: mode.name(),
        namespaces: count as usize,
        in_flight,
        unlinked_wall_us: unlinked_wall.as_secs_f64() * 1e6,
        quiescent_wall_us: quiescent_wall.as_secs_f64() * 1e6,
        grace_wall_us: grace_wall.as_secs_f64() * 1e6,
        drained_virtual_us: drained_virtual as f64 / 1e3,
        unlinked_virtual_us: unlinked_virtual as f64 / 1e3,
    }
}

fn main() {
    let mut json: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--json" {
            json = args.next();
        } // cargo bench passes --bench
    }
    println!(
        "remove every namespace with {IO_PER_NAMESPACE} I/Os in flight on each (model, I/O latency {} µs)",
        IO_LATENCY_NS / 1000
    );
    println!(
        "{:<13} {:>5} {:>9} {:>16} {:>18} {:>14} {:>17} {:>17}",
        "mode",
        "N",
        "in flight",
        "unlinked wall µs",
        "quiescent wall µs",
        "last wait µs",
        "unlinked virt µs",
        "drained virt µs"
    );
    let mut rows = Vec::new();
    for mode in [Mode::Batched, Mode::EventDriven, Mode::OneByOne] {
        for n in [8u32, 64, 1024] {
            let r = run(n, mode);
            println!(
                "{:<13} {:>5} {:>9} {:>16.1} {:>18.1} {:>14.1} {:>17.1} {:>17.1}",
                r.mode,
                r.namespaces,
                r.in_flight,
                r.unlinked_wall_us,
                r.quiescent_wall_us,
                r.grace_wall_us,
                r.unlinked_virtual_us,
                r.drained_virtual_us
            );
            rows.push(r);
        }
    }
    if let Some(path) = json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"mode\":\"{}\",\"namespaces\":{},\"in_flight\":{},\"unlinked_wall_us\":{:.1},\"quiescent_wall_us\":{:.1},\"grace_wall_us\":{:.1},\"unlinked_virtual_us\":{:.1},\"drained_virtual_us\":{:.1}}}",
                    r.mode, r.namespaces, r.in_flight, r.unlinked_wall_us, r.quiescent_wall_us, r.grace_wall_us, r.unlinked_virtual_us, r.drained_virtual_us
                )
            })
            .collect();
        let text = format!(
            "{{\"bench\":\"namespace_remove\",\"io_latency_ns\":{IO_LATENCY_NS},\"rows\":[{}]}}\n",
            items.join(",")
        );
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("cannot write {path}: {e}");
            std::process::exit(1);
        }
        println!("wrote {path}");
    }
}
