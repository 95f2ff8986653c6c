//! `--cpus 0,1,4-6` and `-c 0x3`: the cores perf's threads run on, one thread pinned to each.
//!
//! `--cpus` takes a list (`0,1`, `0-3,6`), a list in brackets (`[0-1]`) or a hex mask with its
//! `0x` (`0x3`). `-c` reads its value as spdk_nvme_perf does: a list in brackets, or else a hex
//! mask with or without `0x` (`-c 3` is cores 0 and 1, as in SPDK).

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use thiserror::Error;

/// A bad core list.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CpuListError {
    /// Not a list of numbers and ranges.
    #[error("{flag} '{text}' is not a core list: give core numbers and ranges (e.g. 0,1 or 0-3,6), a list in brackets as SPDK writes it ([0-1]) or a hex mask (0x3)")]
    Syntax {
        /// The flag (`--cpus` or `-c`).
        flag: &'static str,
        /// What was given.
        text: String,
    },
    /// Not a hex core mask.
    #[error("{flag} '{text}' is not a core mask: give a hex mask (0x3 = cores 0 and 1) or a list in brackets ([0-1])")]
    BadMask {
        /// The flag (`--cpus` or `-c`).
        flag: &'static str,
        /// What was given.
        text: String,
    },
    /// A mask or list that selects no core.
    #[error("{flag} '{text}' selects no core: set at least one bit (0x1 = core 0)")]
    NoCore {
        /// The flag.
        flag: &'static str,
        /// What was given.
        text: String,
    },
    /// `-c 0,1`: spdk_nvme_perf reads it as a hex mask with Linux's comma groups, not a list.
    #[error("-c '{text}': spdk_nvme_perf reads this as a hex mask in comma groups (so 0,1 = core 0 only), not as a list; write the list in brackets (-c [0,1]) or as --cpus 0,1, or the mask as -c 0x3")]
    CommaMask {
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

/// Parses `--cpus`: `0,1,4-6` (each core once, in the order given), `[0-1]`, or a hex mask
/// with its prefix (`0x3`).
pub fn parse(text: &str) -> Result<Vec<usize>, CpuListError> {
    const FLAG: &str = "--cpus";
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return parse_mask(FLAG, text, hex);
    }
    match bracketed(t) {
        Some(inner) => parse_list(FLAG, text, inner),
        None => parse_list(FLAG, text, t),
    }
}

/// Parses `-c` as spdk_nvme_perf does: `[0-1]` is a list, anything else a hex mask with or
/// without `0x` (`3` = cores 0 and 1). A bare mask with commas is refused
/// ([`CpuListError::CommaMask`]): SPDK would read `0,1` as core 0 alone.
pub fn parse_core_mask(text: &str) -> Result<Vec<usize>, CpuListError> {
    const FLAG: &str = "-c";
    let t = text.trim();
    if let Some(inner) = bracketed(t) {
        return parse_list(FLAG, text, inner);
    }
    if t.contains(',') {
        return Err(CpuListError::CommaMask {
            text: text.to_string(),
        });
    }
    let hex = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    parse_mask(FLAG, text, hex)
}

/// The inside of `[…]`, if `t` is bracketed.
fn bracketed(t: &str) -> Option<&str> {
    t.strip_prefix('[')?.strip_suffix(']')
}

/// Parses hex digits (lowest core in the last digit) into the cores set, lowest first.
fn parse_mask(flag: &'static str, text: &str, hex: &str) -> Result<Vec<usize>, CpuListError> {
    let bad = || CpuListError::BadMask {
        flag,
        text: text.to_string(),
    };
    if hex.is_empty() {
        return Err(bad());
    }
    let mut cpus = Vec::new();
    for (i, c) in hex.chars().rev().enumerate() {
        let v = c.to_digit(16).ok_or_else(bad)? as usize;
        for bit in 0..4 {
            if v & (1 << bit) != 0 {
                let cpu = i * 4 + bit;
                if cpu >= CpuSet::count() {
                    return Err(bad());
                }
                cpus.push(cpu);
            }
        }
    }
    if cpus.is_empty() {
        return Err(CpuListError::NoCore {
            flag,
            text: text.to_string(),
        });
    }
    cpus.sort_unstable();
    Ok(cpus)
}

/// Parses `0,1,4-6` (each core once, in the order given).
fn parse_list(flag: &'static str, text: &str, list: &str) -> Result<Vec<usize>, CpuListError> {
    let bad = || CpuListError::Syntax {
        flag,
        text: text.to_string(),
    };
    let mut cpus = Vec::new();
    for part in list.split(',') {
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

/// The core the calling thread runs on now, if the kernel says.
pub fn current() -> Option<usize> {
    nix::sched::sched_getcpu().ok()
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
        for bad in ["", "a", "3-1", "1,,2", "99999", "[1", "[]"] {
            assert!(
                matches!(parse(bad), Err(CpuListError::Syntax { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn cpus_takes_hex_masks_and_bracketed_lists() {
        assert_eq!(parse("0x1"), Ok(vec![0]));
        assert_eq!(parse("0x3"), Ok(vec![0, 1]));
        assert_eq!(parse("0XA"), Ok(vec![1, 3]));
        assert_eq!(parse("0x100"), Ok(vec![8]));
        assert_eq!(parse("[0-1]"), Ok(vec![0, 1]));
        // Without 0x, --cpus keeps its list meaning: core 3.
        assert_eq!(parse("3"), Ok(vec![3]));
        assert!(matches!(parse("0x0"), Err(CpuListError::NoCore { .. })));
        assert!(matches!(parse("0xg"), Err(CpuListError::BadMask { .. })));
        assert!(matches!(parse("0x"), Err(CpuListError::BadMask { .. })));
    }

    #[test]
    fn dash_c_reads_masks_as_spdk_does() {
        assert_eq!(parse_core_mask("0x1"), Ok(vec![0]));
        assert_eq!(parse_core_mask("3"), Ok(vec![0, 1]));
        assert_eq!(parse_core_mask("[0-1]"), Ok(vec![0, 1]));
        assert_eq!(parse_core_mask("[2,0]"), Ok(vec![2, 0]));
        let e = parse_core_mask("0,1").unwrap_err();
        assert!(matches!(e, CpuListError::CommaMask { .. }));
        assert!(e.to_string().contains("-c [0,1]"), "{e}");
        let e = parse_core_mask("zz").unwrap_err();
        assert!(
            e.to_string().starts_with("-c 'zz' is not a core mask"),
            "{e}"
        );
        assert!(matches!(
            parse_core_mask("0"),
            Err(CpuListError::NoCore { .. })
        ));
        // A bit beyond the cores the kernel can name.
        let huge = format!("0x1{}", "0".repeat(CpuSet::count() / 4));
        assert!(matches!(
            parse_core_mask(&huge),
            Err(CpuListError::BadMask { .. })
        ));
    }

    #[test]
    fn a_core_that_does_not_exist_is_refused() {
        let e = check(&[0, 1000]).unwrap_err();
        assert!(e.to_string().contains("core 1000 does not exist"), "{e}");
        assert!(check(&[]).is_ok());
    }
}
