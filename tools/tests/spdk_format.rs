//! One parser for spdk_nvme_perf's report and `vfnvme perf`'s: a sample laid out as
//! spdk_nvme_perf prints it with `-LL` (tests/fixtures/spdk_nvme_perf_LL.txt: perf.c's
//! format strings and SPDK's histogram buckets, two namespaces on cores 0 and 1, `-o 4096`),
//! and `vfnvme perf --model` with spdk_nvme_perf's flags, must both parse, with figures that
//! agree with each other.

#[path = "support/spdk_format.rs"]
mod spdk_format;

use spdk_format::{Figures, Report};
use std::process::Command;

/// The percentiles spdk_nvme_perf's `-L` prints.
const CUTOFFS: [f64; 15] = [
    1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.5, 99.9, 99.99, 99.999, 99.9999,
    99.99999,
];

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

/// IOPS and MiB/s agree given the I/O size (both printed with 2 decimals).
fn check_throughput(f: &Figures, io_size: u64, what: &str) {
    let mib = f.iops * io_size as f64 / (1024.0 * 1024.0);
    assert!(close(f.mib_s, mib, 0.011), "{what}: {f:?} at {io_size} B");
    assert!(
        f.min_us <= f.avg_us + 0.01 && f.avg_us <= f.max_us + 0.01,
        "{what}: {f:?}"
    );
}

/// Everything that must hold in any spdk_nvme_perf-format report: rows, Total, and the `-L`
/// (`level` ≥ 1) and `-LL` (`level` 2) sections. Returns the I/Os each row's histogram counts
/// (with `-LL`).
fn check(r: &Report, io_size: u64, rows: usize, level: u8) -> Vec<u64> {
    assert_eq!(r.rows.len(), rows, "{r:#?}");
    let total = r.total.expect("a Total line");
    for row in &r.rows {
        check_throughput(&row.figures, io_size, &row.name);
    }
    check_throughput(&total, io_size, "Total");
    // The Total is the rows added up (each printed value rounded to 0.01).
    let sum = |f: fn(&Figures) -> f64| r.rows.iter().map(|x| f(&x.figures)).sum::<f64>();
    let tol = 0.005 * (rows as f64 + 1.0);
    assert!(close(total.iops, sum(|f| f.iops), tol), "{r:#?}");
    assert!(close(total.mib_s, sum(|f| f.mib_s), tol), "{r:#?}");
    let fold = |f: fn(&Figures) -> f64, min: bool| {
        r.rows
            .iter()
            .map(|x| f(&x.figures))
            .fold(if min { f64::MAX } else { 0.0 }, |a, b| {
                if min {
                    a.min(b)
                } else {
                    a.max(b)
                }
            })
    };
    assert_eq!(total.min_us, fold(|f| f.min_us, true), "{r:#?}");
    assert_eq!(total.max_us, fold(|f| f.max_us, false), "{r:#?}");
    assert!(
        total.avg_us >= fold(|f| f.avg_us, true) - 0.01
            && total.avg_us <= fold(|f| f.avg_us, false) + 0.01,
        "{r:#?}"
    );
    if level == 0 {
        assert!(r.summaries.is_empty() && r.histograms.is_empty());
        return Vec::new();
    }
    // -L: a section per row, in the rows' order, with SPDK's 15 cutoffs, latencies climbing.
    assert_eq!(r.summaries.len(), rows);
    for (s, row) in r.summaries.iter().zip(&r.rows) {
        assert!(
            row.name.starts_with(&s.name) && s.core == row.core,
            "{s:?} vs {row:?}"
        );
        let p: Vec<f64> = s.lines.iter().map(|l| l.0).collect();
        assert_eq!(p, CUTOFFS, "{s:?}");
        assert!(
            s.lines.windows(2).all(|w| w[0].1 <= w[1].1),
            "not monotone: {s:?}"
        );
        assert!(
            s.lines[0].1 >= row.figures.min_us - 0.01,
            "{s:?} vs {row:?}"
        );
    }
    if level == 1 {
        assert!(r.histograms.is_empty());
        return Vec::new();
    }
    // -LL: buckets in order, cumulative percentages that are the counts' running sum, and
    // each percentile at the end of the first bucket that reaches it.
    assert_eq!(r.histograms.len(), rows);
    let mut ios = Vec::new();
    for (h, s) in r.histograms.iter().zip(&r.summaries) {
        assert_eq!((&h.name, h.core), (&s.name, s.core));
        let n: u64 = h.lines.iter().map(|b| b.count).sum();
        assert!(n > 0, "{h:?}");
        let mut cum = 0;
        let mut exact = Vec::new();
        for (i, b) in h.lines.iter().enumerate() {
            assert!(b.low_us <= b.high_us && b.count > 0, "{b:?}");
            if i > 0 {
                assert!(b.low_us >= h.lines[i - 1].high_us - 0.001, "{b:?}");
            }
            cum += b.count;
            let pct = cum as f64 * 100.0 / n as f64;
            assert!(close(b.cumulative_pct, pct, 0.00006), "{b:?}: {pct}");
            exact.push(pct);
        }
        for &(p, us) in &s.lines {
            // The text has 3 decimals of µs: buckets a nanosecond apart can both match, and
            // the percentile is in one of them.
            let matching: Vec<usize> = (0..h.lines.len())
                .filter(|&k| close(h.lines[k].high_us, us, 0.0015))
                .collect();
            assert!(
                !matching.is_empty(),
                "{p}% = {us} us is no bucket's end in {h:?}"
            );
            assert!(
                matching
                    .iter()
                    .any(|&k| exact[k] >= p - 1e-6 && (k == 0 || exact[k - 1] < p + 1e-6)),
                "{p}% = {us} us: no bucket among {matching:?} holds it ({:?})",
                matching.iter().map(|&k| exact[k]).collect::<Vec<_>>()
            );
        }
        ios.push(n);
    }
    // Every row measured over the same time: IOPS per I/O counted is the same for all.
    let per_io: Vec<f64> = r
        .rows
        .iter()
        .zip(&ios)
        .map(|(row, &n)| row.figures.iops / n as f64)
        .collect();
    assert!(
        per_io
            .iter()
            .all(|x| close(*x, per_io[0], per_io[0] * 1e-3)),
        "{per_io:?}"
    );
    ios
}

#[test]
fn spdk_nvme_perf_sample_parses() {
    let text = include_str!("fixtures/spdk_nvme_perf_LL.txt");
    let r = spdk_format::parse(text).unwrap();
    let ios = check(&r, 4096, 2, 2);
    assert_eq!(r.rows[0].name, "PCIE (0000:00:04.0) [1b36:0010] NSID 1");
    assert_eq!((r.rows[0].core, r.rows[1].core), (0, 1));
    assert_eq!(ios.len(), 2);
}

/// Runs `vfnvme perf --model ARGS` and returns its standard output.
fn vfnvme_perf(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_vfnvme"))
        .args(["perf", "--model"])
        .args(args)
        .output()
        .expect("run vfnvme");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{args:?}: {err}");
    String::from_utf8(o.stdout).expect("UTF-8")
}

#[test]
fn vfnvme_perf_output_parses_with_the_same_parser() {
    const IOS: u64 = 2000;
    // spdk_nvme_perf's flags; -d stops each queue pair after IOS I/Os (-t is only a bound).
    let common = [
        "-q",
        "4",
        "-o",
        "8192",
        "-w",
        "randrw",
        "-M",
        "70",
        "-t",
        "60",
        "-d",
        "2000",
        "--threads",
        "2",
    ];
    let mut args = common.to_vec();
    args.push("-LL");
    let text = vfnvme_perf(&args);
    let r = spdk_format::parse(&text).unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
    let ios = check(&r, 8192, 2, 2);
    assert_eq!(ios, [IOS, IOS], "every I/O is in its row's histogram");
    assert!(
        r.rows
            .iter()
            .all(|row| row.name.starts_with("model NSID 1 thread ")),
        "{r:#?}"
    );
    // vfnvme's own summary follows the block.
    assert!(text.contains("\nIOPS "), "{text}");

    let mut args = common.to_vec();
    args.push("-L");
    let text = vfnvme_perf(&args);
    let r = spdk_format::parse(&text).unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
    check(&r, 8192, 2, 1);

    let text = vfnvme_perf(&common);
    check(&spdk_format::parse(&text).unwrap(), 8192, 2, 0);
}

#[test]
fn the_parser_refuses_a_mangled_row() {
    let text = include_str!("fixtures/spdk_nvme_perf_LL.txt").replacen(" 140.62 ", " x ", 1);
    let e = spdk_format::parse(&text).unwrap_err();
    assert_eq!(e.expected, "five numbers", "{e:?}");
    assert_eq!(e.line, 9, "{e:?}");
    assert!(e.text.contains(" x "), "{e:?}");
}
