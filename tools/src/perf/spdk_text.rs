//! The report's first block, laid out as spdk_nvme_perf prints its own: the `Latency(us)`
//! table with a row per namespace and core (`… NSID 1 from core  0:`), the `Total` line, and
//! with `-L`/`-LL` the "Summary latency data" and "Latency histogram" sections. Whatever
//! reads spdk_nvme_perf's output reads this the same way (see `spdk_format`).

use super::percentiles;
use super::rows::{Detail, Line, Row, RowId};
use hdrhistogram::Histogram;
use std::fmt::Write;

/// The `=` rule above the table and above the Total line.
pub const TABLE_RULE: &str = "========================================================";
/// The `=` rule under a "Summary latency data" heading.
pub const SUMMARY_RULE: &str =
    "=================================================================================";
/// The `=` rule under a "Latency histogram" heading.
pub const HISTOGRAM_RULE: &str =
    "==============================================================================";
/// The column heading of a histogram.
pub const HISTOGRAM_HEADING: &str = "       Range in us     Cumulative    IO count";

/// A row's name as spdk_nvme_perf builds it: `PCIE (0000:00:04.0) NSID 1` for a PCI
/// controller (other targets, e.g. the model, keep their own name), with ` thread N` after it
/// when the namespace has more than one thread on that target (spdk_nvme_perf tells those
/// apart by core alone).
pub fn row_name(id: &RowId, several_threads: bool) -> String {
    let target = match vfnvme::hal::PciAddress::parse(&id.target) {
        Ok(addr) => format!("PCIE ({addr})"),
        Err(_) => id.target.clone(),
    };
    let thread = if several_threads {
        format!(" thread {}", id.thread)
    } else {
        String::new()
    };
    format!("{target} NSID {}{thread}", id.nsid)
}

/// The core a row prints after "from core": the pinned core, else where the thread ran.
fn core_of(id: &RowId) -> usize {
    id.cpu.or(id.ran_on).unwrap_or(0)
}

/// What the block is made of: the rows with their names and lines, and the Total line.
pub struct Table<'a> {
    /// The rows that completed I/O (spdk_nvme_perf leaves idle ones out), with their names.
    pub rows: Vec<(&'a Row, String, Line)>,
    /// The Total line.
    pub total: Line,
}

impl<'a> Table<'a> {
    /// The table of `rows`, each line over `time_s` seconds.
    pub fn new(rows: &'a [Row], total: Line, time_s: f64, io_size: u64, ns_per_unit: f64) -> Self {
        let several = |r: &Row| {
            rows.iter()
                .filter(|o| o.id.target == r.id.target && o.id.nsid == r.id.nsid)
                .count()
                > 1
        };
        let rows = rows
            .iter()
            .map(|r| {
                let line = Line::of(&r.result, time_s, io_size, ns_per_unit);
                (r, row_name(&r.id, several(r)), line)
            })
            .filter(|(_, _, line)| line.ios > 0)
            .collect();
        Table { rows, total }
    }

    /// The whole block: table, Total, and the sections `detail` asks for.
    pub fn text(&self, ns_per_unit: f64, detail: Detail) -> String {
        let mut s = self.table();
        if detail.latency >= 1 && self.total.ios > 0 {
            for (r, name, _) in &self.rows {
                s += &summary_section(name, core_of(&r.id), &r.result.latency, ns_per_unit);
            }
        }
        if detail.latency >= 2 && self.total.ios > 0 {
            for (r, name, _) in &self.rows {
                s += &histogram_section(name, core_of(&r.id), &r.result.latency, ns_per_unit);
            }
        }
        s
    }

    /// The `Latency(us)` table and its Total line (the Total only if some I/O completed).
    fn table(&self) -> String {
        let width = self.rows.iter().map(|(_, n, _)| n.len()).max().unwrap_or(0);
        let mut s = String::new();
        let _ = writeln!(s, "{TABLE_RULE}");
        let _ = writeln!(s, "{:>w$}", "Latency(us)", w = width + 60);
        let _ = writeln!(
            s,
            "{:<w$}: {:>10} {:>10} {:>10} {:>10} {:>10}",
            "Device Information",
            "IOPS",
            "MiB/s",
            "Average",
            "min",
            "max",
            w = width + 13
        );
        for (r, name, line) in &self.rows {
            let _ = writeln!(
                s,
                "{name:<width$} from core {:>2}: {}",
                core_of(&r.id),
                figures(line)
            );
        }
        if self.total.ios > 0 {
            let _ = writeln!(s, "{TABLE_RULE}");
            let _ = writeln!(
                s,
                "{:<w$}: {}",
                "Total",
                figures(&self.total),
                w = width + 13
            );
            s.push('\n');
        }
        s
    }
}

/// IOPS, MiB/s, mean, min and max latency (µs), `%10.2f` each.
fn figures(l: &Line) -> String {
    format!(
        "{:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
        l.iops,
        l.mib_per_s,
        l.mean_ns / 1000.0,
        l.min_ns / 1000.0,
        l.max_ns / 1000.0
    )
}

/// `-L`: one row's "Summary latency data" section (percentile lines, then a blank line).
pub fn summary_section(name: &str, core: usize, h: &Histogram<u64>, ns_per_unit: f64) -> String {
    let mut s =
        format!("Summary latency data for {name:<43.43} from core {core}:\n{SUMMARY_RULE}\n");
    s += &percentile_lines(&percentiles::percentiles(h, ns_per_unit));
    s.push('\n');
    s
}

/// Percentile lines as spdk_nvme_perf prints them: ` 99.00000% :   123.456us`.
pub fn percentile_lines(list: &[(f64, f64)]) -> String {
    list.iter()
        .map(|(p, ns)| format!("{p:>9.5}% : {:>9.3}us\n", ns / 1000.0))
        .collect()
}

/// `-LL`: one row's "Latency histogram" section (a line per non-empty bucket).
pub fn histogram_section(name: &str, core: usize, h: &Histogram<u64>, ns_per_unit: f64) -> String {
    let mut s = format!(
        "Latency histogram for {name:<43.43} from core {core}:\n{HISTOGRAM_RULE}\n{HISTOGRAM_HEADING}\n"
    );
    for b in percentiles::buckets(h, ns_per_unit) {
        let _ = writeln!(
            s,
            "{:>9.3} - {:>9.3}: {:>9.4}%  ({:>9})",
            b.low_ns / 1000.0,
            b.high_ns / 1000.0,
            b.cumulative_pct,
            b.count
        );
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(target: &str, thread: u32) -> RowId {
        RowId {
            target: target.into(),
            nsid: 1,
            thread,
            cpu: None,
            ran_on: Some(3),
        }
    }

    #[test]
    fn names_as_spdk_builds_them() {
        assert_eq!(
            row_name(&id("0000:00:04.0", 0), false),
            "PCIE (0000:00:04.0) NSID 1"
        );
        assert_eq!(row_name(&id("model", 1), true), "model NSID 1 thread 1");
        assert_eq!(core_of(&id("model", 0)), 3);
    }

    #[test]
    fn sections_use_spdk_columns() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in [5_000u64, 7_000, 9_000] {
            h.record(v).unwrap();
        }
        let s = summary_section("PCIE (0000:00:04.0) NSID 1", 0, &h, 1.0);
        let first = s.lines().nth(2).unwrap();
        // `%9.5f%% : %9.3fus`
        assert!(first.starts_with("  1.00000% :     5."), "{first:?}");
        assert!(first.ends_with("us"), "{first:?}");
        let s = histogram_section("x", 2, &h, 1.0);
        assert!(s.starts_with(&format!(
            "Latency histogram for x{} from core 2:",
            " ".repeat(42)
        )));
        assert_eq!(s.lines().filter(|l| l.ends_with(')')).count(), 3, "{s}");
    }
}
