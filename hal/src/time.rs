//! A clock cheap enough for the I/O path's periodic checks.

use std::sync::OnceLock;

/// Monotonic nanoseconds from `CLOCK_MONOTONIC_COARSE`, counted from the first call.
///
/// The vDSO serves the coarse clock from memory (the time of the last tick) whatever the
/// kernel's clocksource is. `CLOCK_MONOTONIC` (`std::time::Instant`) is served there only for
/// clocksources the vDSO can read (tsc, kvm-clock): on hpet or acpi_pm, the clocksource of a
/// guest on QEMU's default CPU model, every read is a system call and an emulated register read
/// that takes QEMU's global lock. The resolution is one tick (1 to 10 ms), ample for I/O
/// timeouts of seconds. Returns 0 if the clock can't be read (it always can on Linux).
pub fn coarse_now_ns() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    let now = raw_coarse_ns();
    now.saturating_sub(*START.get_or_init(|| now))
}

fn raw_coarse_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_MONOTONIC_COARSE).map_or(0, |t| {
        let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
        let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
        secs.saturating_mul(1_000_000_000).saturating_add(nanos)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_is_monotonic_and_follows_the_real_one() {
        let a = coarse_now_ns();
        let t = std::time::Instant::now();
        // Spin (no sleep) until the real clock has moved 30 ms: several ticks at any HZ.
        while t.elapsed() < std::time::Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        let b = coarse_now_ns();
        assert!(b >= a, "went back: {a} then {b}");
        let moved = b - a;
        assert!(
            (15_000_000..=60_000_000_000).contains(&moved),
            "moved {moved} ns while 30 ms passed"
        );
    }
}
