//! RLIMIT_MEMLOCK: VFIO type1 pins every mapped page and charges it to the process's locked
//! memory, so a mapping fails with ENOMEM once the soft limit is reached (unless the process
//! has CAP_IPC_LOCK). Checking first gives a clear error instead.

use crate::error::HalError;
use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The soft and hard RLIMIT_MEMLOCK, in bytes (`u64::MAX` = unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemlockLimits {
    /// The limit that is enforced.
    pub soft: u64,
    /// The ceiling the soft limit may be raised to without privilege.
    pub hard: u64,
}

/// What to do before locking more memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemlockPlan {
    /// The mapping fits under the soft limit (or the process is exempt from it).
    Fits,
    /// The mapping fits once the soft limit is raised to this value (the hard limit).
    RaiseSoft(u64),
    /// The mapping does not fit even under the hard limit.
    TooLow {
        /// The current soft limit.
        limit: u64,
        /// The locked total the mapping needs.
        needed: u64,
    },
}

/// Decides whether `additional` more locked bytes on top of `locked` fit under `limits`.
/// `exempt` is true when the process has CAP_IPC_LOCK, which the kernel lets bypass the limit.
pub fn plan(locked: u64, additional: u64, limits: MemlockLimits, exempt: bool) -> MemlockPlan {
    let needed = locked.saturating_add(additional);
    if exempt || needed <= limits.soft {
        MemlockPlan::Fits
    } else if needed <= limits.hard {
        MemlockPlan::RaiseSoft(limits.hard)
    } else {
        MemlockPlan::TooLow {
            limit: limits.soft,
            needed,
        }
    }
}

/// The process's current RLIMIT_MEMLOCK.
pub fn current_limits() -> Result<MemlockLimits, HalError> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_MEMLOCK).map_err(|e| HalError::Io {
        path: "getrlimit(RLIMIT_MEMLOCK)".to_string(),
        source: e.into(),
    })?;
    Ok(MemlockLimits { soft, hard })
}

/// Whether the capability set in a `/proc/self/status` text has CAP_IPC_LOCK (bit 14) in
/// `CapEff`.
pub fn status_has_ipc_lock(status: &str) -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

fn has_ipc_lock() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| status_has_ipc_lock(&s))
}

/// Makes sure `additional` more bytes can be locked on top of `locked`: raises the soft limit
/// to the hard limit if that is enough, and otherwise fails with [`HalError::MemlockTooLow`].
pub fn ensure(locked: u64, additional: u64) -> Result<(), HalError> {
    let limits = current_limits()?;
    match plan(locked, additional, limits, has_ipc_lock()) {
        MemlockPlan::Fits => Ok(()),
        MemlockPlan::RaiseSoft(to) => {
            setrlimit(Resource::RLIMIT_MEMLOCK, to, limits.hard).map_err(|_| {
                HalError::MemlockTooLow {
                    limit: limits.soft,
                    needed: locked.saturating_add(additional),
                }
            })?;
            log::info!(
                "raised the RLIMIT_MEMLOCK soft limit from {} to {to} bytes",
                limits.soft
            );
            Ok(())
        }
        MemlockPlan::TooLow { limit, needed } => Err(HalError::MemlockTooLow { limit, needed }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn fits_under_the_soft_limit() {
        let l = MemlockLimits {
            soft: 64 * MIB,
            hard: 64 * MIB,
        };
        assert_eq!(plan(32 * MIB, 32 * MIB, l, false), MemlockPlan::Fits);
    }

    #[test]
    fn raises_the_soft_limit_when_the_hard_one_allows() {
        let l = MemlockLimits {
            soft: 8 * MIB,
            hard: u64::MAX,
        };
        assert_eq!(
            plan(0, 512 * MIB, l, false),
            MemlockPlan::RaiseSoft(u64::MAX)
        );
    }

    #[test]
    fn too_low_names_limit_and_need_and_the_fix() {
        let l = MemlockLimits {
            soft: 8 * MIB,
            hard: 8 * MIB,
        };
        let p = plan(6 * MIB, 4 * MIB, l, false);
        assert_eq!(
            p,
            MemlockPlan::TooLow {
                limit: 8 * MIB,
                needed: 10 * MIB
            }
        );
        let MemlockPlan::TooLow { limit, needed } = p else {
            unreachable!()
        };
        let msg = HalError::MemlockTooLow { limit, needed }.to_string();
        assert!(msg.contains("ulimit -l unlimited"), "{msg}");
        assert!(msg.contains(&(8 * MIB).to_string()), "{msg}");
    }

    #[test]
    fn cap_ipc_lock_is_exempt_and_saturates() {
        let l = MemlockLimits { soft: 0, hard: 0 };
        assert_eq!(plan(u64::MAX, u64::MAX, l, true), MemlockPlan::Fits);
        assert!(matches!(
            plan(u64::MAX, 1, l, false),
            MemlockPlan::TooLow {
                needed: u64::MAX,
                ..
            }
        ));
    }

    #[test]
    fn parses_cap_eff() {
        assert!(status_has_ipc_lock("Name:\tx\nCapEff:\t000001ffffffffff\n"));
        assert!(!status_has_ipc_lock("CapEff:\t0000000000000000\n"));
        assert!(!status_has_ipc_lock("CapEff:\tzz\n"));
        assert!(!status_has_ipc_lock(""));
    }
}
