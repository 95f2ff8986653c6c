//! Adding up the workers' results, and printing them as text and JSON.

use super::path_counts::PathCounts;
use super::percentiles;
use super::rows::{Detail, Line, Row, RowId};
use super::spdk_text;
use super::worker::WorkerResult;
use anyhow::Result;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// The figures of one run, all workers together.
#[derive(Debug, Clone)]
pub struct Summary {
    /// What was measured (device addresses, or "model").
    pub targets: Vec<String>,
    /// Namespace.
    pub nsid: u32,
    /// Pattern name.
    pub pattern: &'static str,
    /// Percentage of reads.
    pub read_pct: u8,
    /// Bytes per I/O.
    pub io_size: u64,
    /// Queue depth per worker.
    pub qd: u32,
    /// Workers (queue pairs).
    pub workers: usize,
    /// Measured seconds.
    pub time_s: f64,
    /// Warm-up seconds.
    pub ramp_s: f64,
    /// Whether shadow doorbells were on.
    pub shadow_doorbells: bool,
    /// Reads completed in the measured window.
    pub reads: u64,
    /// Writes completed in the measured window.
    pub writes: u64,
    /// Failed I/Os.
    pub errors: u64,
    /// The first failure, as text.
    pub first_error: Option<String>,
    /// Completion batches (polls that reaped something) in the measured window.
    pub batches: u64,
    /// All latencies, in clock units.
    pub latency: Histogram<u64>,
    /// Nanoseconds per clock unit.
    pub ns_per_unit: f64,
    /// The clock used ("tsc" or "instant") and why, e.g. "tsc (clocksource hpet)".
    pub clock: String,
    /// Whether Ctrl-C ended the run early (the figures cover the time measured until then).
    pub interrupted: bool,
    /// One row per queue pair (namespace × thread).
    pub rows: Vec<Row>,
    /// Percentiles, histogram, transport statistics: what to show.
    pub detail: Detail,
    /// I/O limit per queue pair (0 = none).
    pub ios_limit: u64,
    /// Zipf skew of the offsets, if any.
    pub zipf: Option<f64>,
    /// Whether failed I/Os were counted and the run went on.
    pub continue_on_error: bool,
    /// Entries of each queue pair's rings.
    pub queue_size: u32,
    /// On a multipath head: the policy and the I/Os per path.
    pub paths: Option<PathCounts>,
}

impl Summary {
    /// Adds up `results`, keeping each as a row.
    pub fn merge(mut self, results: Vec<(RowId, WorkerResult)>) -> Result<Self> {
        for (id, r) in results {
            self.rows.push(Row {
                id,
                result: r.clone(),
            });
            self.reads += r.reads;
            self.writes += r.writes;
            self.errors += r.errors;
            self.batches += r.batches;
            if self.first_error.is_none() {
                self.first_error = r.first_error.map(|s| s.to_string());
            }
            self.latency.add(&r.latency)?;
            if let Some(p) = self.paths.as_mut() {
                p.add(&r.per_path);
            }
        }
        Ok(self)
    }

    /// I/Os completed in the measured window.
    pub fn ios(&self) -> u64 {
        self.reads + self.writes
    }

    /// I/Os per second.
    pub fn iops(&self) -> f64 {
        if self.time_s > 0.0 {
            self.ios() as f64 / self.time_s
        } else {
            0.0
        }
    }

    /// MiB per second.
    pub fn mib_per_s(&self) -> f64 {
        self.iops() * self.io_size as f64 / (1024.0 * 1024.0)
    }

    fn ns(&self, units: u64) -> u64 {
        (units as f64 * self.ns_per_unit).round() as u64
    }

    fn percentile_ns(&self, p: f64) -> u64 {
        if self.latency.is_empty() {
            0
        } else {
            self.ns(self.latency.value_at_quantile(p))
        }
    }

    fn min_ns(&self) -> u64 {
        if self.latency.is_empty() {
            0
        } else {
            self.ns(self.latency.min())
        }
    }

    fn max_ns(&self) -> u64 {
        self.ns(self.latency.max())
    }

    /// Mean latency in ns.
    pub fn mean_ns(&self) -> f64 {
        if self.latency.is_empty() {
            0.0
        } else {
            self.latency.mean() * self.ns_per_unit
        }
    }

    /// spdk_nvme_perf's block (the table with a row per namespace and thread, the Total, the
    /// `-L`/`-LL` sections), then what vfnvme adds: the percentiles of all I/Os, the I/Os per
    /// path, the transport statistics.
    pub fn table(&self) -> String {
        let mut s = spdk_text::Table::new(
            &self.rows,
            self.total_line(),
            self.time_s,
            self.io_size,
            self.ns_per_unit,
        )
        .text(self.ns_per_unit, self.detail);
        if self.detail.latency >= 1 && self.rows.len() > 1 && !self.latency.is_empty() {
            s += "Latency percentiles of all I/Os (us):\n";
            s += &spdk_text::percentile_lines(&percentiles::percentiles(
                &self.latency,
                self.ns_per_unit,
            ));
            s += "\n";
        }
        if let Some(p) = &self.paths {
            s += &p.text();
            s += "\n";
        }
        if self.detail.transport {
            s += "PCIE transport statistics (per queue pair, whole run):\n";
            for r in &self.rows {
                s += &r.result.transport.text(&r.id.label());
            }
            s += "\n";
        }
        s
    }

    /// The Total line: the rows added up.
    pub fn total_line(&self) -> Line {
        let all = WorkerResult {
            reads: self.reads,
            writes: self.writes,
            errors: self.errors,
            first_error: None,
            latency: self.latency.clone(),
            batches: self.batches,
            measured_units: 0,
            stopped: false,
            ended_early: false,
            transport: Default::default(),
            per_path: Vec::new(),
        };
        Line::of(&all, self.time_s, self.io_size, self.ns_per_unit)
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let options = {
            let mut o = Vec::new();
            if self.ios_limit > 0 {
                o.push(format!("--ios {} per queue pair", self.ios_limit));
            }
            if let Some(z) = self.zipf {
                o.push(format!("zipf {z}"));
            }
            if self.continue_on_error {
                o.push("continue on error".to_string());
            }
            if o.is_empty() {
                String::new()
            } else {
                format!(", {}", o.join(", "))
            }
        };
        format!(
            "{table}{summary}",
            table = self.table(),
            summary = self.text_summary(&options)
        )
    }

    fn text_summary(&self, options: &str) -> String {
        let us = |ns: u64| ns as f64 / 1000.0;
        let mix = match self.read_pct {
            100 => String::new(),
            0 => String::new(),
            p => format!(" ({p}% reads)"),
        };
        format!(
            "{targets} ns {nsid}: {pattern}{mix} {size} B, QD {qd} x {workers} queue pair(s) of {queue_size} entries, {time:.1} s (ramp {ramp:.1} s), shadow doorbells {shadow}{options}\n\
             IOPS {iops:.0} ({kiops:.1} K)   {mibs:.1} MiB/s   {ios} I/Os ({reads} reads, {writes} writes), {per_batch:.2} I/Os per doorbell batch\n\
             latency (us, {timed} timed, clock {clock}): mean {mean:.2}   p50 {p50:.2}   p99 {p99:.2}   p99.9 {p999:.2}   max {max:.2}   min {min:.2}\n\
             errors: {errors}{first}{interrupted}",
            targets = self.targets.join(","),
            nsid = self.nsids(),
            queue_size = self.queue_size,
            pattern = self.pattern,
            size = self.io_size,
            qd = self.qd,
            workers = self.workers,
            time = self.time_s,
            ramp = self.ramp_s,
            shadow = if self.shadow_doorbells { "on" } else { "off" },
            iops = self.iops(),
            kiops = self.iops() / 1000.0,
            mibs = self.mib_per_s(),
            ios = self.ios(),
            reads = self.reads,
            writes = self.writes,
            per_batch = if self.batches > 0 { self.ios() as f64 / self.batches as f64 } else { 0.0 },
            mean = self.mean_ns() / 1000.0,
            p50 = us(self.percentile_ns(0.5)),
            p99 = us(self.percentile_ns(0.99)),
            p999 = us(self.percentile_ns(0.999)),
            max = us(self.max_ns()),
            min = us(self.min_ns()),
            timed = self.latency.len(),
            clock = self.clock,
            errors = self.errors,
            first = self
                .first_error
                .as_ref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default(),
            interrupted = if self.interrupted {
                "\ninterrupted (Ctrl-C): partial results, over the time measured until then"
            } else {
                ""
            },
        )
    }

    /// The namespaces measured, comma-separated.
    fn nsids(&self) -> String {
        let mut ids: Vec<u32> = self.rows.iter().map(|r| r.id.nsid).collect();
        ids.dedup();
        if ids.is_empty() {
            self.nsid.to_string()
        } else {
            ids.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        }
    }

    /// The JSON report.
    pub fn json(&self) -> Value {
        let mut v = self.json_summary();
        let d = self.detail;
        v["rows"] = Value::Array(
            self.rows
                .iter()
                .map(|r| r.json(self.time_s, self.io_size, self.ns_per_unit, d))
                .collect(),
        );
        v["total"] = self.total_line().json();
        if let Some(p) = &self.paths {
            v["multipath"] = p.json();
        }
        if d.latency >= 1 {
            v["percentiles"] = percentiles::percentiles_json(&percentiles::percentiles(
                &self.latency,
                self.ns_per_unit,
            ));
        }
        if d.latency >= 2 {
            v["histogram"] =
                percentiles::buckets_json(&percentiles::buckets(&self.latency, self.ns_per_unit));
        }
        if d.transport {
            v["transport_stats"] = Value::Array(
                self.rows
                    .iter()
                    .map(|r| {
                        let mut t = r.result.transport.json();
                        t["target"] = json!(r.id.target);
                        t["nsid"] = json!(r.id.nsid);
                        t["thread"] = json!(r.id.thread);
                        t
                    })
                    .collect(),
            );
        }
        v["ios_limit"] = json!(self.ios_limit);
        v["zipf"] = json!(self.zipf);
        v["continue_on_error"] = json!(self.continue_on_error);
        v["queue_size"] = json!(self.queue_size);
        v["nsids"] = json!(self.rows.iter().map(|r| r.id.nsid).collect::<Vec<_>>());
        v
    }

    fn json_summary(&self) -> Value {
        json!({
            "targets": self.targets,
            "nsid": self.nsid,
            "pattern": self.pattern,
            "read_pct": self.read_pct,
            "io_size": self.io_size,
            "qd": self.qd,
            "queue_pairs": self.workers,
            "time_s": self.time_s,
            "ramp_s": self.ramp_s,
            "shadow_doorbells": self.shadow_doorbells,
            "ios": self.ios(),
            "reads": self.reads,
            "writes": self.writes,
            "iops": self.iops(),
            "mib_per_s": self.mib_per_s(),
            "ios_per_batch": if self.batches > 0 { self.ios() as f64 / self.batches as f64 } else { 0.0 },
            "latency_ns": {
                "mean": self.mean_ns(),
                "min": self.min_ns(),
                "p50": self.percentile_ns(0.5),
                "p99": self.percentile_ns(0.99),
                "p99_9": self.percentile_ns(0.999),
                "max": self.max_ns(),
            },
            "clock": self.clock,
            "timed_ios": self.latency.len(),
            "errors": self.errors,
            "first_error": self.first_error,
            "interrupted": self.interrupted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Summary {
        Summary {
            targets: vec!["model".into()],
            nsid: 1,
            pattern: "randread",
            read_pct: 100,
            io_size: 4096,
            qd: 4,
            workers: 1,
            time_s: 2.0,
            ramp_s: 0.0,
            shadow_doorbells: true,
            reads: 0,
            writes: 0,
            errors: 0,
            first_error: None,
            batches: 0,
            latency: Histogram::new(3).unwrap(),
            ns_per_unit: 1.0,
            clock: "instant".into(),
            interrupted: false,
            rows: Vec::new(),
            paths: None,
            detail: Detail::default(),
            ios_limit: 0,
            zipf: None,
            continue_on_error: false,
            queue_size: 9,
        }
    }

    #[test]
    fn adds_up_workers() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in [1000, 2000, 3000, 100_000] {
            h.record(v).unwrap();
        }
        let w = WorkerResult {
            reads: 3,
            writes: 1,
            errors: 0,
            first_error: None,
            latency: h,
            batches: 2,
            measured_units: 2_000_000_000,
            stopped: false,
            ended_early: false,
            transport: Default::default(),
            per_path: Vec::new(),
        };
        let id = |thread| RowId {
            target: "model".into(),
            nsid: 1,
            thread,
            cpu: None,
            ran_on: None,
        };
        let s = summary()
            .merge(vec![(id(0), w.clone()), (id(1), w)])
            .unwrap();
        assert_eq!(s.ios(), 8);
        assert_eq!(s.iops(), 4.0);
        let j = s.json();
        assert_eq!(j["ios"], 8);
        assert_eq!(j["ios_per_batch"], 2.0);
        assert!(j["latency_ns"]["p99"].as_u64().unwrap() >= 99_000);
        assert!(s.text().contains("IOPS 4 "), "{}", s.text());
        // The Total row is the rows added up.
        let rows = j["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        let sum: u64 = rows.iter().map(|r| r["ios"].as_u64().unwrap()).sum();
        assert_eq!(j["total"]["ios"], sum);
        assert_eq!(j["total"]["iops"].as_f64(), Some(4.0));
        let t = s.text();
        assert!(
            t.contains("model NSID 1 thread 1 from core  0: ") && t.contains("\nTotal "),
            "{t}"
        );
    }

    #[test]
    fn an_interrupted_run_says_so() {
        let mut s = summary().merge(vec![]).unwrap();
        assert!(!s.text().contains("interrupted"), "{}", s.text());
        assert_eq!(s.json()["interrupted"], false);
        s.interrupted = true;
        assert!(
            s.text().contains("interrupted (Ctrl-C): partial results"),
            "{}",
            s.text()
        );
        assert_eq!(s.json()["interrupted"], true);
    }

    #[test]
    fn empty_run_reports_zeroes() {
        let s = summary().merge(vec![]).unwrap();
        assert_eq!(s.json()["latency_ns"]["p50"], 0);
        assert_eq!(s.iops(), 0.0);
    }
}
