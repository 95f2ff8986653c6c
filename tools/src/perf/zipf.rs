//! A zipf-distributed choice of slots (`--zipf THETA`, as fio's and spdk_nvme_perf's `-F
//! zipf:THETA`): rank 0 is the hottest. Gray et al.'s method ("Quickly generating
//! billion-record synthetic databases", 1994), O(1) per draw after set-up.

/// Terms of the zeta sum added one by one; beyond this the rest is taken from the integral.
const EXACT_TERMS: u64 = 100_000;

/// A zipf sampler over `0..n`.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    half_pow_theta: f64,
}

/// ζ(n, θ) = Σ_{i=1..n} i^-θ: exact up to [`EXACT_TERMS`], then by the integral with the
/// Euler–Maclaurin end correction.
fn zeta(n: u64, theta: f64) -> f64 {
    let k = n.min(EXACT_TERMS);
    let mut sum: f64 = (1..=k).map(|i| (i as f64).powf(-theta)).sum();
    if n > k {
        let (a, b) = (k as f64, n as f64);
        let integral = if (theta - 1.0).abs() < 1e-12 {
            (b / a).ln()
        } else {
            (b.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta)
        };
        sum += integral + (b.powf(-theta) - a.powf(-theta)) / 2.0;
    }
    sum
}

impl Zipf {
    /// A sampler over `n` (≥ 1) slots with skew `theta` (> 0, ≠ 1; fio's default is 1.2).
    pub fn new(n: u64, theta: f64) -> Zipf {
        let n = n.max(1);
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2.min(n), theta);
        let nf = n as f64;
        let eta = if n > 2 {
            (1.0 - (2.0 / nf).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        } else {
            1.0
        };
        Zipf {
            n: nf,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
            half_pow_theta: 0.5f64.powf(theta),
        }
    }

    /// The slot for a uniform `u` in [0, 1).
    #[inline]
    pub fn slot(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 || self.n < 2.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1;
        }
        let v = self.n * (self.eta * u - self.eta + 1.0).powf(self.alpha);
        (v as u64).min(self.n as u64 - 1)
    }
}

/// Checks `--zipf THETA`.
pub fn check_theta(theta: f64) -> Result<f64, super::options::PerfInputError> {
    if theta.is_finite() && theta > 0.0 && (theta - 1.0).abs() > 1e-9 && theta <= 100.0 {
        Ok(theta)
    } else {
        Err(super::options::PerfInputError::BadZipf {
            theta: theta.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::worker::Rng;

    fn hot_share(n: u64, theta: f64) -> f64 {
        let z = Zipf::new(n, theta);
        let mut rng = Rng::new(3);
        let mut counts = vec![0u64; n as usize];
        let draws = 200_000;
        for _ in 0..draws {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let s = z.slot(u);
            assert!(s < n, "{s}");
            counts[s as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        counts[..(n as usize / 10)].iter().sum::<u64>() as f64 / draws as f64
    }

    #[test]
    fn the_hottest_tenth_gets_most_accesses() {
        assert!(hot_share(10_000, 1.2) > 0.6, "{}", hot_share(10_000, 1.2));
        assert!(hot_share(10_000, 0.8) > 0.3, "{}", hot_share(10_000, 0.8));
        // Large namespaces set up without summing every term.
        let z = Zipf::new(1 << 28, 1.2);
        assert_eq!(z.slot(0.0), 0);
        assert!(z.slot(0.999_999) < 1 << 28);
    }

    #[test]
    fn zeta_tail_matches_the_sum() {
        let exact: f64 = (1..=300_000u64).map(|i| (i as f64).powf(-0.9)).sum();
        assert!((zeta(300_000, 0.9) - exact).abs() / exact < 1e-6);
    }

    #[test]
    fn theta_checks() {
        assert!(check_theta(1.2).is_ok() && check_theta(0.5).is_ok());
        for bad in [0.0, -1.0, 1.0, f64::NAN, f64::INFINITY] {
            assert!(check_theta(bad).is_err(), "{bad}");
        }
    }
}
