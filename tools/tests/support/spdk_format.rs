//! A reader of spdk_nvme_perf's text report, as scripts that parse it read it: the
//! `Latency(us)` table (a row per namespace and core, then `Total`), and the `-L` "Summary
//! latency data" and `-LL` "Latency histogram" sections. Lines outside them (SPDK's
//! "Attaching…" preamble, vfnvme's own summary after the block) are skipped.

/// The five figures of a table line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// I/Os per second.
    pub iops: f64,
    /// MiB per second.
    pub mib_s: f64,
    /// Mean latency, µs.
    pub avg_us: f64,
    /// Lowest latency, µs.
    pub min_us: f64,
    /// Highest latency, µs.
    pub max_us: f64,
}

/// A device row: `NAME from core N: figures`.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceRow {
    /// The namespace's name, e.g. `PCIE (0000:00:04.0) NSID 1`.
    pub name: String,
    /// The core after "from core".
    pub core: u32,
    /// Its figures.
    pub figures: Figures,
}

/// One histogram line: a bucket's range, the cumulative percentage and its count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Start of the range, µs.
    pub low_us: f64,
    /// End of the range, µs.
    pub high_us: f64,
    /// Percentage of I/Os up to and including this bucket.
    pub cumulative_pct: f64,
    /// I/Os in the bucket.
    pub count: u64,
}

/// A `-L` or `-LL` section of one row.
#[derive(Debug, Clone, PartialEq)]
pub struct Section<T> {
    /// The row's name (the heading's, padding trimmed).
    pub name: String,
    /// The core.
    pub core: u32,
    /// The lines: `(percentile, µs)` or buckets.
    pub lines: Vec<T>,
}

/// Everything read from one report.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// The device rows, in order.
    pub rows: Vec<DeviceRow>,
    /// The Total line.
    pub total: Option<Figures>,
    /// The "Summary latency data" sections.
    pub summaries: Vec<Section<(f64, f64)>>,
    /// The "Latency histogram" sections.
    pub histograms: Vec<Section<Bucket>>,
}

/// Where the reader is.
enum State {
    Outside,
    Table,
    Summary,
    Histogram,
}

/// A line that should parse and does not.
#[derive(Debug)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// The line.
    pub text: String,
    /// What was expected.
    pub expected: &'static str,
}

fn floats<const N: usize>(text: &str) -> Option<[f64; N]> {
    let v: Vec<f64> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    v.try_into().ok()
}

/// `NAME from core N` (of a row or heading) → (name, core).
fn name_and_core(text: &str) -> Option<(String, u32)> {
    let (name, core) = text.rsplit_once(" from core ")?;
    Some((name.trim_end().to_string(), core.trim().parse().ok()?))
}

fn figures(text: &str) -> Option<Figures> {
    let [iops, mib_s, avg_us, min_us, max_us] = floats::<5>(text)?;
    Some(Figures {
        iops,
        mib_s,
        avg_us,
        min_us,
        max_us,
    })
}

/// `  99.00000% :    33.890us`
fn percentile(text: &str) -> Option<(f64, f64)> {
    let (p, v) = text.split_once("% :")?;
    Some((
        p.trim().parse().ok()?,
        v.trim().strip_suffix("us")?.parse().ok()?,
    ))
}

/// `    3.063 -     3.078:    0.0006%  (        1)`
fn bucket(text: &str) -> Option<Bucket> {
    let (range, rest) = text.split_once(':')?;
    let (low, high) = range.split_once(" - ")?;
    let (pct, count) = rest.split_once("%")?;
    let count = count.trim().strip_prefix('(')?.strip_suffix(')')?.trim();
    Some(Bucket {
        low_us: low.trim().parse().ok()?,
        high_us: high.trim().parse().ok()?,
        cumulative_pct: pct.trim().parse().ok()?,
        count: count.parse().ok()?,
    })
}

/// Reads a report.
pub fn parse(text: &str) -> Result<Report, ParseError> {
    let mut r = Report::default();
    let mut state = State::Outside;
    for (i, line) in text.lines().enumerate() {
        let err = |expected| ParseError {
            line: i + 1,
            text: line.to_string(),
            expected,
        };
        if line.trim().is_empty() {
            state = State::Outside;
            continue;
        }
        if line.starts_with("====") {
            continue;
        }
        match state {
            State::Outside | State::Table if line.trim() == "Latency(us)" => state = State::Table,
            State::Outside => {
                if let Some(h) = line.strip_prefix("Summary latency data for ") {
                    let (name, core) = name_and_core(h.trim_end_matches(':'))
                        .ok_or_else(|| err("NAME from core N:"))?;
                    r.summaries.push(Section {
                        name,
                        core,
                        lines: Vec::new(),
                    });
                    state = State::Summary;
                } else if let Some(h) = line.strip_prefix("Latency histogram for ") {
                    let (name, core) = name_and_core(h.trim_end_matches(':'))
                        .ok_or_else(|| err("NAME from core N:"))?;
                    r.histograms.push(Section {
                        name,
                        core,
                        lines: Vec::new(),
                    });
                    state = State::Histogram;
                }
            }
            State::Table => {
                // Figures follow the last ": " (a row's name may hold ':', as in a BDF).
                let (label, rest) = line
                    .rsplit_once(": ")
                    .ok_or_else(|| err("LABEL: figures"))?;
                match label.trim() {
                    "Device Information" => {}
                    "Total" => r.total = Some(figures(rest).ok_or_else(|| err("five numbers"))?),
                    _ => {
                        let (name, core) =
                            name_and_core(label).ok_or_else(|| err("NAME from core N"))?;
                        let figures = figures(rest).ok_or_else(|| err("five numbers"))?;
                        r.rows.push(DeviceRow {
                            name,
                            core,
                            figures,
                        });
                    }
                }
            }
            State::Summary => {
                let p = percentile(line).ok_or_else(|| err("PCT% : VALUEus"))?;
                if let Some(s) = r.summaries.last_mut() {
                    s.lines.push(p);
                }
            }
            State::Histogram => {
                if line.trim_start().starts_with("Range in us") {
                    continue;
                }
                let b = bucket(line).ok_or_else(|| err("LOW - HIGH: PCT%  (COUNT)"))?;
                if let Some(h) = r.histograms.last_mut() {
                    h.lines.push(b);
                }
            }
        }
    }
    Ok(r)
}
