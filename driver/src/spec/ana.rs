//! The Asymmetric Namespace Access log page (0Ch): per ANA group, its state on the controller
//! that returned the page and the namespaces in it. Device data: every length and count is
//! checked against the bytes received, and a bad page is a typed error, never a panic.

use thiserror::Error;

/// Bytes of the log page header (change count, descriptor count, reserved).
pub const ANA_HEADER_BYTES: usize = 16;
/// Bytes of one group descriptor without its namespace list.
pub const ANA_DESCRIPTOR_BYTES: usize = 32;
/// Identify Controller CMIC bit 3: the controller reports ANA.
pub const CMIC_ANA: u8 = 1 << 3;
/// Identify Controller CMIC bit 1: the subsystem may have more than one controller.
pub const CMIC_MULTI_CONTROLLER: u8 = 1 << 1;
/// Identify Controller OAES bit 11: ANA change notices.
pub const OAES_ANA_CHANGE: u32 = 1 << 11;

/// The ANA state of a group on one controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum AnaState {
    /// Optimized (01h): the preferred path.
    Optimized = 0x01,
    /// Non-optimized (02h): usable, slower.
    NonOptimized = 0x02,
    /// Inaccessible (03h): I/O fails with a path error; may come back.
    Inaccessible = 0x03,
    /// Persistent loss (04h): will not come back on this controller.
    PersistentLoss = 0x04,
    /// Change (0Fh): in transition, for at most ANATT seconds.
    Change = 0x0F,
}

impl AnaState {
    /// Decodes the state field (bits 3:0); `None` for a reserved value.
    pub const fn from_code(code: u8) -> Option<Self> {
        Some(match code & 0x0F {
            0x01 => AnaState::Optimized,
            0x02 => AnaState::NonOptimized,
            0x03 => AnaState::Inaccessible,
            0x04 => AnaState::PersistentLoss,
            0x0F => AnaState::Change,
            _ => return None,
        })
    }
    /// Whether I/O may be sent to a path in this state (optimized or non-optimized).
    #[inline]
    pub const fn is_usable(self) -> bool {
        matches!(self, AnaState::Optimized | AnaState::NonOptimized)
    }
    /// A short name for tables and logs.
    pub const fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non-optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent-loss",
            AnaState::Change => "change",
        }
    }
}

impl std::fmt::Display for AnaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One ANA group descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnaGroup {
    /// ANA Group ID (nonzero).
    pub id: u32,
    /// The descriptor's change count.
    pub change_count: u64,
    /// The group's state on this controller.
    pub state: AnaState,
    /// The namespaces in the group attached to this controller (empty with RGO).
    pub nsids: Vec<u32>,
}

/// A parsed ANA log page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AnaLog {
    /// The page's change count.
    pub change_count: u64,
    /// The group descriptors, in page order.
    pub groups: Vec<AnaGroup>,
}

/// Why an ANA log page could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AnaLogError {
    /// The page ends before a structure it announces.
    #[error("ANA log page is {len} bytes but its {what} needs {needed}: the controller returned a short page; read it again with the size from ANAGRPMAX and NN, or report the device as broken")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes received.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// A group descriptor has a reserved state value.
    #[error("ANA group {group} has reserved state value {code:#x}: the controller reported bad data; check its firmware")]
    BadState {
        /// The group.
        group: u32,
        /// The state field.
        code: u8,
    },
    /// A group descriptor has ANA Group ID 0.
    #[error("ANA group descriptor {index} has group ID 0, which is reserved: the controller reported bad data; check its firmware")]
    ZeroGroupId {
        /// The descriptor's index.
        index: usize,
    },
    /// A namespace ID in a group's list is 0 or the broadcast value.
    #[error("ANA group {group} lists namespace ID {nsid:#x}, which can't name a namespace: the controller reported bad data")]
    BadNsid {
        /// The group.
        group: u32,
        /// The value listed.
        nsid: u32,
    },
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

impl AnaLog {
    /// Bytes to read for a full page of a controller with `anagrpmax` groups and `nn`
    /// namespaces (every namespace listed once), capped at `cap`.
    pub fn size_for(anagrpmax: u32, nn: u32, cap: usize) -> usize {
        let groups = (anagrpmax as usize).saturating_mul(ANA_DESCRIPTOR_BYTES);
        let nsids = (nn as usize).saturating_mul(4);
        ANA_HEADER_BYTES
            .saturating_add(groups)
            .saturating_add(nsids)
            .min(cap)
            .max(ANA_HEADER_BYTES)
            .next_multiple_of(4)
    }

    /// Parses a page; bytes past the last descriptor are ignored.
    pub fn parse(b: &[u8]) -> Result<Self, AnaLogError> {
        let short = |what, needed| AnaLogError::Truncated {
            what,
            len: b.len(),
            needed,
        };
        if b.len() < ANA_HEADER_BYTES {
            return Err(short("header", ANA_HEADER_BYTES));
        }
        let change_count = u64_at(b, 0);
        let count = usize::from(u16::from_le_bytes([b[8], b[9]]));
        // Every descriptor takes at least 32 bytes: refuse a count the page can't hold before
        // reserving anything for it.
        let min = ANA_HEADER_BYTES.saturating_add(count.saturating_mul(ANA_DESCRIPTOR_BYTES));
        if b.len() < min {
            return Err(short("descriptor count", min));
        }
        let mut groups = Vec::with_capacity(count);
        let mut at = ANA_HEADER_BYTES;
        for index in 0..count {
            let end = at.saturating_add(ANA_DESCRIPTOR_BYTES);
            if b.len() < end {
                return Err(short("group descriptor", end));
            }
            let id = u32_at(b, at);
            if id == 0 {
                return Err(AnaLogError::ZeroGroupId { index });
            }
            let n = u32_at(b, at + 4) as usize;
            let code = b[at + 16];
            let state =
                AnaState::from_code(code).ok_or(AnaLogError::BadState { group: id, code })?;
            let list_end = end.saturating_add(n.saturating_mul(4));
            if b.len() < list_end {
                return Err(short("namespace list", list_end));
            }
            let mut nsids = Vec::with_capacity(n);
            for k in 0..n {
                let nsid = u32_at(b, end + 4 * k);
                if nsid == 0 || nsid == u32::MAX {
                    return Err(AnaLogError::BadNsid { group: id, nsid });
                }
                nsids.push(nsid);
            }
            groups.push(AnaGroup {
                id,
                change_count: u64_at(b, at + 8),
                state,
                nsids,
            });
            at = list_end;
        }
        Ok(AnaLog {
            change_count,
            groups,
        })
    }

    /// The state of group `id`, if the page lists it.
    pub fn state_of(&self, id: u32) -> Option<AnaState> {
        self.groups.iter().find(|g| g.id == id).map(|g| g.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(groups: &[(u32, u8, &[u32])]) -> Vec<u8> {
        let mut b = vec![0u8; 16];
        b[0] = 7;
        b[8..10].copy_from_slice(&(groups.len() as u16).to_le_bytes());
        for (id, state, nsids) in groups {
            let mut d = [0u8; 32];
            d[0..4].copy_from_slice(&id.to_le_bytes());
            d[4..8].copy_from_slice(&(nsids.len() as u32).to_le_bytes());
            d[8] = 3;
            d[16] = *state;
            b.extend_from_slice(&d);
            for n in *nsids {
                b.extend_from_slice(&n.to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn parses_groups_states_and_lists() {
        let b = page(&[(1, 1, &[1, 2]), (2, 0x0F, &[]), (5, 3, &[9])]);
        let log = AnaLog::parse(&b).unwrap();
        assert_eq!(log.change_count, 7);
        assert_eq!(log.groups.len(), 3);
        assert_eq!(log.groups[0].nsids, vec![1, 2]);
        assert_eq!(log.state_of(2), Some(AnaState::Change));
        assert_eq!(log.state_of(5), Some(AnaState::Inaccessible));
        assert_eq!(log.state_of(3), None);
        assert_eq!(log.groups[2].change_count, 3);
    }

    #[test]
    fn refuses_bad_pages() {
        let mut b = page(&[(1, 1, &[1, 2])]);
        assert!(matches!(
            AnaLog::parse(&b[..50]),
            Err(AnaLogError::Truncated { .. })
        ));
        b[16 + 16] = 0x7;
        assert_eq!(
            AnaLog::parse(&b),
            Err(AnaLogError::BadState { group: 1, code: 7 })
        );
        let mut z = page(&[(1, 1, &[0])]);
        assert!(matches!(
            AnaLog::parse(&z),
            Err(AnaLogError::BadNsid { .. })
        ));
        z[16..20].fill(0);
        assert_eq!(
            AnaLog::parse(&z),
            Err(AnaLogError::ZeroGroupId { index: 0 })
        );
        let mut huge = page(&[]);
        huge[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(matches!(
            AnaLog::parse(&huge),
            Err(AnaLogError::Truncated { .. })
        ));
        assert_eq!(AnaLog::size_for(4, 10, 1 << 20), 16 + 128 + 40);
        assert_eq!(AnaLog::size_for(u32::MAX, u32::MAX, 4096), 4096);
    }
}
