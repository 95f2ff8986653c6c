//! What hosts see of the exported subsystem: the configuration plus what the backend
//! reported (namespaces, transfer limit), fixed when the target starts.

use crate::backend::ExportedNamespace;
use crate::config::TargetConfig;

/// The subsystem as exported.
#[derive(Debug, Clone)]
pub struct Export {
    /// The target's configuration.
    pub config: TargetConfig,
    /// The namespaces, sorted by nsid.
    pub namespaces: Vec<ExportedNamespace>,
    /// MDTS in units of 4 KiB pages, as a power of two (Identify Controller byte 77).
    pub mdts: u8,
    /// Optional NVM commands offered (Identify Controller ONCS): the backend's.
    pub oncs: u16,
}

impl Export {
    /// The export of `namespaces` under `config` for a backend moving at most `max_transfer`
    /// bytes per I/O (MDTS: the largest power of two of 4 KiB pages within it, at most 1 MiB).
    pub fn new(
        config: TargetConfig,
        namespaces: Vec<ExportedNamespace>,
        max_transfer: usize,
    ) -> Self {
        let limit = max_transfer.clamp(4096, 1 << 20);
        let mdts = (limit / 4096).ilog2() as u8;
        Export {
            config,
            namespaces,
            mdts,
            oncs: 0,
        }
    }

    /// The largest transfer of one command in bytes.
    pub fn max_transfer(&self) -> u32 {
        4096 << self.mdts
    }

    /// The namespace `nsid`, if exported.
    pub fn namespace(&self, nsid: u32) -> Option<&ExportedNamespace> {
        self.namespaces
            .binary_search_by_key(&nsid, |n| n.nsid)
            .ok()
            .map(|i| &self.namespaces[i])
    }

    /// The largest nsid exported (Identify Controller NN).
    pub fn nn(&self) -> u32 {
        self.namespaces.last().map_or(0, |n| n.nsid)
    }
}
