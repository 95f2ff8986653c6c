//! Asymmetric Namespace Access as the target reports it: every exported namespace is its own
//! ANA group (group id = its index + 1), whose state is what the backend's paths allow; a
//! change bumps the change count and is announced to hosts with an ANA change AER.

use crate::backend::{AnaState, Backend};
use crate::export::Export;

/// DW0 of an AER completion for an ANA change: notice (2h), ANA change (03h), log 0Ch.
pub const AER_ANA_CHANGE: u64 = 0x000C_0302;
/// Asynchronous Event Configuration bit: ANA change notices.
pub const AEC_ANA_CHANGE: u32 = 1 << 11;

/// The ANA state of every exported namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnaView {
    states: Vec<AnaState>,
    changes: u64,
}

impl AnaView {
    /// Every namespace of `export` optimized, change count 1.
    pub fn new(export: &Export) -> Self {
        AnaView {
            states: vec![AnaState::Optimized; export.namespaces.len()],
            changes: 1,
        }
    }

    /// Reads the states again from `backend`; true if any changed (the change count moved).
    pub fn refresh<B: Backend>(&mut self, export: &Export, backend: &B) -> bool {
        let mut changed = false;
        for (state, ns) in self.states.iter_mut().zip(&export.namespaces) {
            let now = backend.ana_state(ns.nsid);
            if *state != now {
                log::info!("namespace {}: ANA state {:?} -> {now:?}", ns.nsid, *state);
                *state = now;
                changed = true;
            }
        }
        if changed {
            self.changes += 1;
        }
        changed
    }

    /// The ANA group of the namespace at `index` of the export.
    pub fn group_of(index: usize) -> u32 {
        index as u32 + 1
    }

    /// The ANA log page: a descriptor per group, with its namespace unless `rgo`.
    pub fn log(&self, export: &Export, rgo: bool) -> Vec<u8> {
        let n = self.states.len();
        let mut p = Vec::with_capacity(16 + n * (32 + 4));
        p.extend_from_slice(&self.changes.to_le_bytes());
        p.extend_from_slice(&(n as u16).to_le_bytes());
        p.extend_from_slice(&[0; 6]);
        for (i, (state, ns)) in self.states.iter().zip(&export.namespaces).enumerate() {
            p.extend_from_slice(&Self::group_of(i).to_le_bytes());
            p.extend_from_slice(&u32::from(!rgo).to_le_bytes());
            p.extend_from_slice(&self.changes.to_le_bytes());
            p.push(*state as u8);
            p.extend_from_slice(&[0; 15]);
            if !rgo {
                p.extend_from_slice(&ns.nsid.to_le_bytes());
            }
        }
        p
    }
}
