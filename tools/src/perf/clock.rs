//! The clock of `perf`'s I/O loop: `Instant` (vDSO `clock_gettime`), or the x86 time-stamp
//! counter.
//!
//! Why the TSC: in a QEMU TCG guest the kernel's clocksource is the emulated HPET, so every
//! `Instant::now()` is a system call plus an emulated MMIO read that takes QEMU's global lock,
//! which the NVMe emulation needs too. `rdtsc` there is far cheaper.
//! The TSC rate is measured against `Instant` over the whole run (pairs of reads taken at the
//! start and at the end), so reported latencies are in real nanoseconds.

use std::time::Instant;

/// Which clock to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockKind {
    /// The TSC on x86_64 where the kernel's clocksource is slow to read (hpet, acpi_pm: not
    /// served by the vDSO), else `Instant`.
    Auto,
    /// `std::time::Instant`.
    Instant,
    /// The x86 time-stamp counter (x86_64 only).
    Tsc,
}

/// Where the kernel names its clocksource.
const CLOCKSOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";

/// Whether `clocksource` is one `clock_gettime` reads in the vDSO without a system call.
pub fn clocksource_is_fast(clocksource: &str) -> bool {
    matches!(
        clocksource.trim(),
        "tsc" | "kvm-clock" | "hyperv_clocksource_tsc_page" | "arch_sys_counter" | "xen"
    )
}

/// The kernel's current clocksource, if it says.
pub fn current_clocksource() -> Option<String> {
    std::fs::read_to_string(CLOCKSOURCE)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Whether `kind` means the TSC, given the kernel's `clocksource`.
pub fn wants_tsc(kind: ClockKind, clocksource: Option<&str>) -> bool {
    cfg!(target_arch = "x86_64")
        && match kind {
            ClockKind::Instant => false,
            ClockKind::Tsc => true,
            ClockKind::Auto => clocksource.is_some_and(|c| !clocksource_is_fast(c)),
        }
}

/// A pair of simultaneous readings.
#[derive(Debug, Clone, Copy)]
struct Pair {
    instant: Instant,
    ticks: u64,
}

/// A started clock; `now()` counts units since the start (ns, or TSC ticks).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    tsc: bool,
    start: Pair,
    /// Units per ns, estimated at the start (for deadlines).
    units_per_ns: f64,
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_tsc() -> u64 {
    // SAFETY: RDTSC has no preconditions and exists on every x86_64 CPU; it only reads the
    // processor's time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn read_tsc() -> u64 {
    0
}

/// An `Instant` and the TSC read together: the TSC is read on both sides and the pair with the
/// smallest gap of a few tries is kept (a preemption in between would skew it).
fn pair() -> Pair {
    let mut best: Option<(u64, Pair)> = None;
    for _ in 0..16 {
        let a = read_tsc();
        let instant = Instant::now();
        let b = read_tsc();
        let gap = b.wrapping_sub(a);
        if best.is_none_or(|(g, _)| gap < g) {
            best = Some((
                gap,
                Pair {
                    instant,
                    ticks: a + gap / 2,
                },
            ));
        }
    }
    best.map(|(_, p)| p).unwrap_or(Pair {
        instant: Instant::now(),
        ticks: read_tsc(),
    })
}

impl Clock {
    /// Starts a clock of `kind` (a TSC clock first spends 20 ms measuring the TSC's rate).
    pub fn start(kind: ClockKind) -> Clock {
        let tsc = wants_tsc(kind, current_clocksource().as_deref());
        let start = pair();
        if !tsc {
            return Clock {
                tsc,
                start,
                units_per_ns: 1.0,
            };
        }
        while start.instant.elapsed().as_millis() < 20 {
            std::hint::spin_loop();
        }
        let end = pair();
        let ns = end.instant.duration_since(start.instant).as_nanos() as f64;
        let ticks = end.ticks.wrapping_sub(start.ticks) as f64;
        let units_per_ns = if ns > 0.0 && ticks > 0.0 {
            ticks / ns
        } else {
            1.0
        };
        Clock {
            tsc: units_per_ns > 0.01,
            start,
            units_per_ns,
        }
    }

    /// Whether this clock counts TSC ticks.
    pub fn is_tsc(&self) -> bool {
        self.tsc
    }

    /// Units since the start.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        if self.tsc {
            read_tsc().wrapping_sub(self.start.ticks)
        } else {
            u64::try_from(self.start.instant.elapsed().as_nanos()).unwrap_or(u64::MAX)
        }
    }

    /// `ns` nanoseconds in units (by the start-up estimate).
    pub fn units(&self, ns: u64) -> u64 {
        (ns as f64 * self.units_per_ns) as u64
    }

    /// Nanoseconds per unit, measured over the clock's whole life so far (call at the end).
    pub fn ns_per_unit(&self) -> f64 {
        if !self.tsc {
            return 1.0;
        }
        let end = pair();
        let ns = end.instant.duration_since(self.start.instant).as_nanos() as f64;
        let ticks = end.ticks.wrapping_sub(self.start.ticks) as f64;
        if ns > 0.0 && ticks > 0.0 {
            ns / ticks
        } else {
            1.0 / self.units_per_ns
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_clocks_count_up_and_agree_on_the_rate() {
        for kind in [ClockKind::Instant, ClockKind::Auto, ClockKind::Tsc] {
            let c = Clock::start(kind);
            let a = c.now();
            let t = Instant::now();
            while t.elapsed().as_millis() < 5 {
                std::hint::spin_loop();
            }
            let b = c.now();
            assert!(b > a, "{kind:?}: {a} then {b}");
            let ns = (b - a) as f64 * c.ns_per_unit();
            assert!(
                (4.0e6..5.0e8).contains(&ns),
                "{kind:?}: 5 ms measured as {ns} ns"
            );
            assert_eq!(c.units(0), 0);
        }
        assert!(!Clock::start(ClockKind::Instant).is_tsc());
    }

    #[test]
    fn auto_takes_the_tsc_only_where_the_system_clock_is_slow() {
        let x86 = cfg!(target_arch = "x86_64");
        assert_eq!(wants_tsc(ClockKind::Auto, Some("hpet")), x86);
        assert_eq!(wants_tsc(ClockKind::Auto, Some("acpi_pm\n")), x86);
        assert!(!wants_tsc(ClockKind::Auto, Some("tsc")));
        assert!(!wants_tsc(ClockKind::Auto, Some("kvm-clock")));
        assert!(!wants_tsc(ClockKind::Auto, None));
        assert!(!wants_tsc(ClockKind::Instant, Some("hpet")));
        assert_eq!(wants_tsc(ClockKind::Tsc, Some("tsc")), x86);
    }
}
