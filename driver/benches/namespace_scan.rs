//! Namespace scan of 1024 namespaces at 1 ms admin latency on the model: the pipelined scan
//! (the admin queue kept full, one doorbell per round) at several admin queue depths, and the
//! one-command-at-a-time scan, in the same run. Virtual time is exact (the model's clock);
//! wall time is what this machine spent simulating it.
//!
//! Each row clears the registry, then times `Controller::rescan_with(mode)`: the Active
//! Namespace ID list (2 pages), then Identify Namespace + Namespace Identification Descriptors
//! for every namespace (2048 commands).
//!
//! Run: `cargo bench -p vfnvme --bench namespace_scan -- [--namespaces 1024] [--json out.json]`

use std::sync::Arc;
use std::time::Instant;

use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::namespaces::ScanMode;
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

const ADMIN_LATENCY_NS: u64 = 1_000_000;

struct Row {
    mode: &'static str,
    admin_depth: u32,
    namespaces: usize,
    commands: usize,
    virtual_ms: f64,
    wall_ms: f64,
}

fn run(count: u32, admin_depth: u16, mode: ScanMode) -> Row {
    let platform = ModelPlatform::new(ModelConfig {
        namespaces: (1..=count)
            .map(|nsid| ModelNamespaceConfig {
                nsid,
                blocks: 1 << 20,
                lba_size: 4096,
                backing: Backing::Null,
            })
            .collect(),
        admin_latency_ns: ADMIN_LATENCY_NS,
        max_queue_entries: 4096,
        ..ModelConfig::default()
    })
    .expect("model config");
    let options = ControllerOptions {
        admin_depth,
        ..ControllerOptions::default()
    };
    let ctrl = Controller::new(Arc::clone(&platform), options).expect("bring-up");
    let all = ctrl.registry().nsids();
    ctrl.remove_namespaces(&all);
    let v0 = platform.now_ns();
    let w0 = Instant::now();
    let report = ctrl.rescan_with(mode).expect("scan");
    let wall = w0.elapsed();
    let virt = platform.now_ns() - v0;
    assert_eq!(report.added.len(), count as usize, "scan missed namespaces");
    Row {
        mode: match mode {
            ScanMode::Pipelined => "pipelined",
            ScanMode::OneAtATime => "one at a time",
        },
        admin_depth: u32::from(admin_depth),
        namespaces: report.added.len(),
        commands: report.admin_commands,
        virtual_ms: virt as f64 / 1e6,
        wall_ms: wall.as_secs_f64() * 1e3,
    }
}

fn main() {
    let mut json: Option<String> = None;
    let mut count = 1024u32;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = args.next(),
            "--namespaces" => count = args.next().and_then(|v| v.parse().ok()).unwrap_or(count),
            _ => {} // cargo bench passes --bench
        }
    }
    println!(
        "namespace scan: {count} namespaces, admin latency {} ms (model, virtual time exact)",
        ADMIN_LATENCY_NS / 1_000_000
    );
    println!(
        "{:<14} {:>11} {:>10} {:>9} {:>12} {:>10} {:>9}",
        "mode", "admin depth", "namespaces", "commands", "virtual ms", "wall ms", "speedup"
    );
    let serial = run(count, 256, ScanMode::OneAtATime);
    let mut rows = Vec::new();
    for depth in [32u16, 256, 1024] {
        rows.push(run(count, depth, ScanMode::Pipelined));
    }
    rows.push(serial);
    let base = rows.last().map_or(1.0, |r| r.virtual_ms);
    for r in &rows {
        println!(
            "{:<14} {:>11} {:>10} {:>9} {:>12.3} {:>10.1} {:>8.1}x",
            r.mode,
            r.admin_depth,
            r.namespaces,
            r.commands,
            r.virtual_ms,
            r.wall_ms,
            base / r.virtual_ms
        );
    }
    if let Some(path) = json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"mode\":\"{}\",\"admin_depth\":{},\"namespaces\":{},\"commands\":{},\"virtual_ms\":{:.3},\"wall_ms\":{:.3},\"speedup_vs_one_at_a_time\":{:.2}}}",
                    r.mode, r.admin_depth, r.namespaces, r.commands, r.virtual_ms, r.wall_ms, base / r.virtual_ms
                )
            })
            .collect();
        let text = format!(
            "{{\"bench\":\"namespace_scan\",\"admin_latency_ns\":{ADMIN_LATENCY_NS},\"rows\":[{}]}}\n",
            items.join(",")
        );
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("cannot write {path}: {e}");
            std::process::exit(1);
        }
        println!("wrote {path}");
    }
}
