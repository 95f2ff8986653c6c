//! A line per second with IOPS and MiB/s while perf runs on a terminal.
//!
//! Each worker publishes its completed-I/O count in its own cache line with a relaxed store at
//! its clock reads (a plain store on x86: no read-modify-write on the I/O path); this thread
//! reads them once a second.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One worker's completed I/Os, alone in its cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct Counter(AtomicU64);

impl Counter {
    /// Publishes `ios` (called by the owning worker only).
    #[inline]
    pub fn publish(&self, ios: u64) {
        self.0.store(ios, Ordering::Relaxed);
    }

    /// The last published count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The line for second `second`: `ios` I/Os of `io_size` bytes in `elapsed`.
pub fn line(second: u64, ios: u64, io_size: u64, elapsed: Duration) -> String {
    let s = elapsed.as_secs_f64().max(1e-9);
    let iops = ios as f64 / s;
    format!(
        "[{second:>4} s] IOPS {iops:>12.0}   {mibs:>10.2} MiB/s",
        mibs = iops * io_size as f64 / (1024.0 * 1024.0)
    )
}

/// Prints a line each second to standard output until `done`.
pub fn run(counters: &[std::sync::Arc<Counter>], io_size: u64, done: &AtomicBool) {
    let start = Instant::now();
    let mut last = (start, 0u64);
    let mut second = 0;
    while !done.load(Ordering::Acquire) {
        let next = start + Duration::from_secs(second + 1);
        let now = Instant::now();
        if now < next {
            std::thread::park_timeout(next - now);
            continue;
        }
        second += 1;
        let total: u64 = counters.iter().map(|c| c.get()).sum();
        println!(
            "{}",
            line(second, total - last.1.min(total), io_size, now - last.0)
        );
        last = (now, total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_iops_and_mib_per_s() {
        let l = line(3, 256_000, 4096, Duration::from_secs(1));
        assert!(
            l.contains("[   3 s]") && l.contains("256000") && l.contains("1000.00 MiB/s"),
            "{l}"
        );
        assert_eq!(std::mem::align_of::<Counter>(), 64);
    }
}
