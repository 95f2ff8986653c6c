//! Asymmetric Namespace Access: per-controller group states, scheduled transitions in virtual
//! time, the ANA log page (0Ch) and the path-related statuses of I/O to a namespace whose
//! group is not accessible.

use super::core::{Core, CtrlState};
use super::sqe::Status;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// The state of an ANA group as one controller reports it (ANA log page, bits 3:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AnaState {
    /// ANA Optimized (01h).
    Optimized = 0x01,
    /// ANA Non-Optimized (02h).
    NonOptimized = 0x02,
    /// ANA Inaccessible (03h): I/O fails with Asymmetric Access Inaccessible.
    Inaccessible = 0x03,
    /// ANA Persistent Loss (04h): I/O fails with Asymmetric Access Persistent Loss.
    PersistentLoss = 0x04,
    /// ANA Change (0Fh): in transition; I/O fails with Asymmetric Access Transition.
    Change = 0x0F,
}

impl AnaState {
    /// Every state, in code order.
    pub const ALL: [AnaState; 5] = [
        AnaState::Optimized,
        AnaState::NonOptimized,
        AnaState::Inaccessible,
        AnaState::PersistentLoss,
        AnaState::Change,
    ];
}

/// Path-related status (SCT 3h) of an I/O to a namespace whose group is in ANA state `code`;
/// `None` if I/O is allowed (no ANA, optimized, non-optimized).
#[inline]
pub(crate) fn io_status(code: u8) -> Option<Status> {
    match code {
        0x03 => Some(Status::ANA_INACCESSIBLE),
        0x04 => Some(Status::ANA_PERSISTENT_LOSS),
        0x0F => Some(Status::ANA_TRANSITION),
        _ => None,
    }
}

/// One group on one controller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Group {
    pub state: AnaState,
    /// The change count of this group's descriptor.
    pub change_count: u64,
}

/// A state change that becomes true at a virtual time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scheduled {
    pub at: u64,
    pub group: u32,
    pub state: AnaState,
}

/// One controller's ANA state (in `CtrlState`).
#[derive(Debug, Default)]
pub(crate) struct AnaCtrl {
    pub groups: BTreeMap<u32, Group>,
    /// The log page's change count: bumped on every change.
    pub change_count: u64,
    pub scheduled: Vec<Scheduled>,
}

impl AnaCtrl {
    /// The earliest scheduled change (`u64::MAX`: none).
    pub fn next_at(&self) -> u64 {
        self.scheduled
            .iter()
            .map(|s| s.at)
            .min()
            .unwrap_or(u64::MAX)
    }
}

impl Core {
    /// Whether this controller reports ANA.
    pub fn ana_reporting(&self) -> bool {
        self.subsys.as_ref().is_some_and(|l| !l.groups.is_empty())
    }

    /// Sets group `group` to `state` on this controller now: every namespace of the group
    /// answers I/O accordingly from now on, and an ANA change event is raised. Returns
    /// whether the group exists.
    pub fn set_ana(&self, c: &mut CtrlState, group: u32, state: AnaState) -> bool {
        let Some(g) = c.ana.groups.get_mut(&group) else {
            return false;
        };
        if g.state == state {
            return true;
        }
        c.ana.change_count += 1;
        g.state = state;
        g.change_count = c.ana.change_count;
        for ns in self.ns_read().values().filter(|n| n.anagrpid == group) {
            ns.ana.store(state as u8, Ordering::Release);
        }
        if let Some((cid, dw0)) = c.events.ana_changed() {
            let sqhd = c.admin_sq.as_ref().map_or(0, |sq| sq.head as u16);
            self.complete(
                0,
                self.now(),
                (cid, super::admin::op::AER),
                (0, sqhd),
                super::sqe::Outcome::ok(dw0),
            );
        }
        true
    }

    /// Applies the scheduled changes that are due.
    pub fn run_ana_schedule(&self) {
        if self.ana_next_at.load(Ordering::Acquire) > self.now() {
            return;
        }
        let mut c = self.lock_ctrl();
        let now = self.now();
        let (due, later): (Vec<Scheduled>, Vec<Scheduled>) = std::mem::take(&mut c.ana.scheduled)
            .into_iter()
            .partition(|s| s.at <= now);
        c.ana.scheduled = later;
        for s in due {
            self.set_ana(&mut c, s.group, s.state);
        }
        self.ana_next_at.store(c.ana.next_at(), Ordering::Release);
    }

    /// The ANA log page (0Ch) of this controller; `groups_only` (LSP bit 0, RGO) leaves the
    /// namespace lists out.
    pub fn ana_log(&self, c: &CtrlState, groups_only: bool) -> Vec<u8> {
        let table = self.ns_read();
        let mut b = vec![0u8; 16];
        b[0..8].copy_from_slice(&c.ana.change_count.to_le_bytes());
        let count = c.ana.groups.len() as u16;
        b[8..10].copy_from_slice(&count.to_le_bytes());
        for (&id, g) in &c.ana.groups {
            let nsids: Vec<u32> = if groups_only {
                Vec::new()
            } else {
                table
                    .values()
                    .filter(|n| n.anagrpid == id && n.is_attached())
                    .map(|n| n.nsid)
                    .collect()
            };
            let mut d = [0u8; 32];
            d[0..4].copy_from_slice(&id.to_le_bytes());
            d[4..8].copy_from_slice(&(nsids.len() as u32).to_le_bytes());
            d[8..16].copy_from_slice(&g.change_count.to_le_bytes());
            d[16] = g.state as u8;
            b.extend_from_slice(&d);
            for n in nsids {
                b.extend_from_slice(&n.to_le_bytes());
            }
        }
        b
    }
}
