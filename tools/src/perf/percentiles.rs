//! Latency percentiles and the whole histogram, as spdk_nvme_perf prints them with `-L` and
//! `-LL`.

use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// The percentiles spdk_nvme_perf's `-L` prints.
pub const PERCENTILES: [f64; 15] = [
    1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.5, 99.9, 99.99, 99.999, 99.9999,
    99.99999,
];

/// One bucket of the histogram: latencies in `low_ns..=high_ns`.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// Lowest latency of the bucket, ns.
    pub low_ns: f64,
    /// Highest latency of the bucket, ns.
    pub high_ns: f64,
    /// Percentage of I/Os at or below this bucket.
    pub cumulative_pct: f64,
    /// I/Os in the bucket.
    pub count: u64,
}

/// `(percentile, latency in ns)` for each of [`PERCENTILES`] (empty for an empty histogram).
pub fn percentiles(h: &Histogram<u64>, ns_per_unit: f64) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    PERCENTILES
        .iter()
        .map(|&p| (p, h.value_at_percentile(p) as f64 * ns_per_unit))
        .collect()
}

/// Every non-empty bucket, lowest first; the counts add up to `h.len()`.
pub fn buckets(h: &Histogram<u64>, ns_per_unit: f64) -> Vec<Bucket> {
    let total = h.len().max(1) as f64;
    let mut cumulative = 0;
    h.iter_recorded()
        .map(|v| {
            let value = v.value_iterated_to();
            cumulative += v.count_at_value();
            Bucket {
                low_ns: h.lowest_equivalent(value) as f64 * ns_per_unit,
                high_ns: h.highest_equivalent(value) as f64 * ns_per_unit,
                cumulative_pct: cumulative as f64 * 100.0 / total,
                count: v.count_at_value(),
            }
        })
        .collect()
}

/// The percentile list as JSON: `[{"percentile": p, "ns": v}, …]`.
pub fn percentiles_json(list: &[(f64, f64)]) -> Value {
    Value::Array(
        list.iter()
            .map(|(p, ns)| json!({"percentile": p, "ns": ns}))
            .collect(),
    )
}

/// The histogram as JSON.
pub fn buckets_json(list: &[Bucket]) -> Value {
    Value::Array(
        list.iter()
            .map(|b| {
                json!({"low_ns": b.low_ns, "high_ns": b.high_ns,
                       "cumulative_pct": b.cumulative_pct, "count": b.count})
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_climb_and_buckets_add_up() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in 1..=10_000u64 {
            h.record(v * 10).unwrap();
        }
        let p = percentiles(&h, 2.0);
        assert_eq!(p.len(), 15);
        assert!(p.windows(2).all(|w| w[0].1 <= w[1].1), "{p:?}");
        // p50 of 10..=100000 in units of 2 ns: about 100 µs.
        let p50 = p.iter().find(|(q, _)| *q == 50.0).unwrap().1;
        assert!((99_000.0..101_000.0).contains(&p50), "{p50}");
        let b = buckets(&h, 2.0);
        assert_eq!(b.iter().map(|b| b.count).sum::<u64>(), 10_000);
        assert!((b.last().unwrap().cumulative_pct - 100.0).abs() < 1e-9);
        assert!(b.iter().all(|b| b.low_ns <= b.high_ns));
        assert!(percentiles(&Histogram::new(3).unwrap(), 1.0).is_empty());
    }
}
