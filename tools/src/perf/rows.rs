//! The per-namespace, per-thread rows of the report and their Total row (laid out by
//! `spdk_text`).

use super::percentiles;
use super::worker::WorkerResult;
use serde_json::{json, Value};

/// Which queue pair a row is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowId {
    /// The device (BDF, or "model").
    pub target: String,
    /// The namespace.
    pub nsid: u32,
    /// The thread's index among the namespace's threads.
    pub thread: u32,
    /// The core the thread was pinned to (`--cpus`).
    pub cpu: Option<usize>,
    /// The core the thread ran on when it finished (the pinned one, or where the scheduler
    /// last put it); what the spdk_nvme_perf-format report prints after "from core".
    pub ran_on: Option<usize>,
}

impl RowId {
    /// The row's label in vfnvme's own sections, e.g. `model NSID 1 thread 0 core 1`.
    pub fn label(&self) -> String {
        let core = self.cpu.map(|c| format!(" core {c}")).unwrap_or_default();
        format!(
            "{} NSID {} thread {}{core}",
            self.target, self.nsid, self.thread
        )
    }
}

/// One queue pair's figures.
#[derive(Debug, Clone)]
pub struct Row {
    /// Which.
    pub id: RowId,
    /// What it measured.
    pub result: WorkerResult,
}

/// The figures of a table line (a row or the Total).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    /// I/Os completed in the measured window.
    pub ios: u64,
    /// I/Os per second.
    pub iops: f64,
    /// MiB per second.
    pub mib_per_s: f64,
    /// Mean latency, ns (0 if nothing was timed).
    pub mean_ns: f64,
    /// Lowest latency, ns.
    pub min_ns: f64,
    /// Highest latency, ns.
    pub max_ns: f64,
}

impl Line {
    /// The line of `r` over `time_s` seconds.
    pub fn of(r: &WorkerResult, time_s: f64, io_size: u64, ns_per_unit: f64) -> Line {
        let ios = r.reads + r.writes;
        let iops = if time_s > 0.0 {
            ios as f64 / time_s
        } else {
            0.0
        };
        let h = &r.latency;
        let (mean_ns, min_ns, max_ns) = if h.is_empty() {
            (0.0, 0.0, 0.0)
        } else {
            (
                h.mean() * ns_per_unit,
                h.min() as f64 * ns_per_unit,
                h.max() as f64 * ns_per_unit,
            )
        };
        Line {
            ios,
            iops,
            mib_per_s: iops * io_size as f64 / (1024.0 * 1024.0),
            mean_ns,
            min_ns,
            max_ns,
        }
    }

    /// The JSON fields of the line.
    pub fn json(&self) -> Value {
        json!({
            "ios": self.ios,
            "iops": self.iops,
            "mib_per_s": self.mib_per_s,
            "latency_ns": {"mean": self.mean_ns, "min": self.min_ns, "max": self.max_ns},
        })
    }
}

/// What the report shows beyond the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Detail {
    /// 1 = percentiles (`-L`), 2 = also the histogram (`-LL`, `--histogram`).
    pub latency: u8,
    /// Transport statistics.
    pub transport: bool,
}

impl Row {
    /// The row's JSON: its line, identity, and the details asked for.
    pub fn json(&self, time_s: f64, io_size: u64, ns_per_unit: f64, detail: Detail) -> Value {
        let r = &self.result;
        let mut v = Line::of(r, time_s, io_size, ns_per_unit).json();
        v["target"] = json!(self.id.target);
        v["nsid"] = json!(self.id.nsid);
        v["thread"] = json!(self.id.thread);
        v["cpu"] = json!(self.id.cpu);
        v["ran_on"] = json!(self.id.ran_on);
        v["reads"] = json!(r.reads);
        v["writes"] = json!(r.writes);
        v["errors"] = json!(r.errors);
        v["timed_ios"] = json!(r.latency.len());
        if detail.latency >= 1 {
            v["percentiles"] =
                percentiles::percentiles_json(&percentiles::percentiles(&r.latency, ns_per_unit));
        }
        if detail.latency >= 2 {
            v["histogram"] =
                percentiles::buckets_json(&percentiles::buckets(&r.latency, ns_per_unit));
        }
        if detail.transport {
            v["transport"] = r.transport.json();
        }
        v
    }
}
