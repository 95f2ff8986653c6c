//! `--cpus 0,1,4-6`: the cores perf's threads run on, one thread pinned to each, as
//! spdk_nvme_perf's `-c`.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use thiserror::Error;

/// A bad core list.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CpuListError {
    /// Not a list of numbers and ranges.
    #[error("--cpus '{text}' is not a core list: give core numbers and ranges, e.g. 0,1 or 0-3,6")]
    Syntax {
        /// What was given.
        text: String,
    },
    /// A core this process may not run on (absent, offline, or outside its affinity mask).
    #[error("--cpus: core {cpu} does not exist or is not available to this process; available cores: {available}")]
    Unavailable {
        /// The core.
        cpu: usize,
        /// The cores that are, comma-separated.
        available: String,
    },
    /// The kernel refused.
    #[error("pinning a perf thread to core {cpu} failed: {errno}")]
    Pin {
        /// The core.
        cpu: usize,
        /// The kernel's answer.
        errno: nix::errno::Errno,
    },
}

/// A parsed `--cpus` list (a newtype, so that clap takes it as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Parses `0,1,4-6` (each core once, in the order given).
pub fn parse(text: &str) -> Result<Vec<usize>, CpuListError> {
    let bad = || CpuListError::Syntax {
        text: text.to_string(),
    };
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: usize = a.trim().parse().map_err(|_| bad())?;
        let b: usize = b.trim().parse().map_err(|_| bad())?;
        if a > b || b >= CpuSet::count() {
            return Err(bad());
        }
        for c in a..=b {
            if !cpus.contains(&c) {
                cpus.push(c);
            }
        }
    }
    Ok(cpus)
}

/// Checks every core of `cpus` against this process's affinity mask.
pub fn check(cpus: &[usize]) -> Result<(), CpuListError> {
    let Ok(mask) = sched_getaffinity(Pid::from_raw(0)) else {
        return Ok(());
    };
    let allowed = |c: usize| mask.is_set(c).unwrap_or(false);
    if let Some(&cpu) = cpus.iter().find(|&&c| !allowed(c)) {
        let available: Vec<String> = (0..CpuSet::count())
            .filter(|&c| allowed(c))
            .map(|c| c.to_string())
            .collect();
        return Err(CpuListError::Unavailable {
            cpu,
            available: available.join(","),
        });
    }
    Ok(())
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> Result<(), CpuListError> {
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|errno| CpuListError::Pin { cpu, errno })?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|errno| CpuListError::Pin { cpu, errno })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        assert_eq!(parse("0,1"), Ok(vec![0, 1]));
        assert_eq!(parse("2-4,0"), Ok(vec![2, 3, 4, 0]));
        assert_eq!(parse("1,1"), Ok(vec![1]));
        for bad in ["", "a", "3-1", "1,,2", "99999"] {
            assert!(
                matches!(parse(bad), Err(CpuListError::Syntax { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_core_that_does_not_exist_is_refused() {
        let e = check(&[0, 1000]).unwrap_err();
        assert!(e.to_string().contains("core 1000 does not exist"), "{e}");
        assert!(check(&[]).is_ok());
    }
}
