//! Path selection policies (as the Linux driver's `iopolicy`), switchable per head while I/O
//! runs: the head keeps the policy in an atomic that each submission reads.

use std::str::FromStr;
use thiserror::Error;

/// How a channel picks among the usable paths of the best ANA tier (optimized paths if any,
/// else non-optimized; never an inaccessible, changing or lost one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum PathPolicy {
    /// The first path on the channel's NUMA node, else the first path (Linux `numa`).
    #[default]
    Numa = 0,
    /// Each request on the next path (Linux `round-robin`).
    RoundRobin = 1,
    /// The path with the fewest requests outstanding from this channel (Linux `queue-depth`).
    QueueDepth = 2,
}

impl PathPolicy {
    /// Every policy.
    pub const ALL: [PathPolicy; 3] = [
        PathPolicy::Numa,
        PathPolicy::RoundRobin,
        PathPolicy::QueueDepth,
    ];

    /// Decodes the value kept in the head's atomic.
    #[inline(always)]
    pub(crate) const fn from_u8(v: u8) -> Self {
        match v {
            1 => PathPolicy::RoundRobin,
            2 => PathPolicy::QueueDepth,
            _ => PathPolicy::Numa,
        }
    }

    /// The Linux name (`numa`, `round-robin`, `queue-depth`).
    pub const fn name(self) -> &'static str {
        match self {
            PathPolicy::Numa => "numa",
            PathPolicy::RoundRobin => "round-robin",
            PathPolicy::QueueDepth => "queue-depth",
        }
    }
}

impl std::fmt::Display for PathPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown policy name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown path policy {0:?}: use numa, round-robin or queue-depth")]
pub struct UnknownPolicy(pub String);

impl FromStr for PathPolicy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PathPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// Picks a path from `tier` (a bit mask of path indices, nonzero) by `policy`. `cursor` is the
/// channel's round-robin position, `local` the mask of paths on the channel's NUMA node and
/// `depth(i)` the requests outstanding on path `i` from this channel.
#[inline(always)]
pub(crate) fn pick(
    policy: PathPolicy,
    tier: u32,
    local: u32,
    cursor: &mut u32,
    depth: impl Fn(usize) -> u32,
) -> usize {
    match policy {
        PathPolicy::Numa => {
            let near = tier & local;
            (if near != 0 { near } else { tier }).trailing_zeros() as usize
        }
        PathPolicy::RoundRobin => {
            // The next set bit after the cursor, wrapping.
            let after = tier & !(u32::MAX >> (31 - (*cursor & 31)));
            let i = if after != 0 { after } else { tier }.trailing_zeros();
            *cursor = i;
            i as usize
        }
        PathPolicy::QueueDepth => {
            let mut best = tier.trailing_zeros() as usize;
            let mut best_depth = depth(best);
            let mut rest = tier & (tier - 1);
            while rest != 0 {
                let i = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                let d = depth(i);
                if d < best_depth {
                    best = i;
                    best_depth = d;
                }
            }
            best
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in PathPolicy::ALL {
            assert_eq!(p.name().parse::<PathPolicy>().unwrap(), p);
            assert_eq!(PathPolicy::from_u8(p as u8), p);
        }
        let e = "fastest".parse::<PathPolicy>().unwrap_err();
        assert!(e.to_string().contains("round-robin"));
    }

    #[test]
    fn round_robin_visits_every_path_of_the_tier_in_turn() {
        let mut cursor = 31;
        let seen: Vec<usize> = (0..6)
            .map(|_| pick(PathPolicy::RoundRobin, 0b1011, 0, &mut cursor, |_| 0))
            .collect();
        assert_eq!(seen, vec![0, 1, 3, 0, 1, 3]);
        let mut cursor = 31;
        let seen: Vec<usize> = (0..3)
            .map(|_| pick(PathPolicy::RoundRobin, 1 << 31 | 1, 0, &mut cursor, |_| 0))
            .collect();
        assert_eq!(seen, vec![0, 31, 0]);
    }

    #[test]
    fn numa_prefers_the_local_node_then_the_first_path() {
        let mut c = 0;
        assert_eq!(pick(PathPolicy::Numa, 0b110, 0b100, &mut c, |_| 0), 2);
        assert_eq!(pick(PathPolicy::Numa, 0b110, 0b001, &mut c, |_| 0), 1);
    }

    #[test]
    fn queue_depth_takes_the_least_busy_path() {
        let mut c = 0;
        let depths = [5u32, 2, 9, 2];
        assert_eq!(
            pick(PathPolicy::QueueDepth, 0b1111, 0, &mut c, |i| depths[i]),
            1
        );
        assert_eq!(
            pick(PathPolicy::QueueDepth, 0b1101, 0, &mut c, |i| depths[i]),
            3
        );
    }
}
