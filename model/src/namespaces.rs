//! The model's namespaces: size, format, identity and data.

use super::config::{Backing, ModelMetadata, ModelNamespaceConfig};
use super::storage::SparseStore;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// One namespace as the device sees it.
#[derive(Debug)]
pub(crate) struct ModelNamespace {
    pub nsid: u32,
    pub lba_shift: u8,
    /// The metadata of the LBA format in use (`None`: a format without metadata).
    pub metadata: Option<ModelMetadata>,
    /// Metadata bytes of the LBA formats 2 and 3 this namespace offers (0: only formats 0, 1).
    pub offered_ms: u16,
    pub blocks: AtomicU64,
    pub attached: AtomicBool,
    /// Bumped by `change_identity`: feeds the EUI64/NGUID/UUID.
    pub generation: AtomicU32,
    /// `None` for [`Backing::Null`]. Shared by every controller of a subsystem.
    pub store: Option<Arc<SparseStore>>,
    /// ANA group (0: the controller reports no ANA).
    pub anagrpid: u32,
    /// The ANA state of its group on this controller (`ana::state` codes; 0 = no ANA): read
    /// by every I/O command, written when the group's state changes.
    pub ana: AtomicU8,
    seed: u64,
}

/// SplitMix64: a small, good-enough mixer for seeded identifiers and choices.
pub(crate) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl ModelNamespace {
    pub fn new(cfg: &ModelNamespaceConfig, seed: u64) -> Self {
        ModelNamespace {
            nsid: cfg.nsid,
            lba_shift: cfg.lba_size.trailing_zeros() as u8,
            metadata: None,
            offered_ms: 0,
            blocks: AtomicU64::new(cfg.blocks),
            attached: AtomicBool::new(true),
            generation: AtomicU32::new(0),
            store: match cfg.backing {
                Backing::Ram => Some(Arc::new(SparseStore::new())),
                Backing::Null => None,
            },
            anagrpid: 0,
            ana: AtomicU8::new(0),
            seed,
        }
    }

    /// The namespace formatted with `metadata` (builder).
    pub fn with_metadata(mut self, metadata: Option<ModelMetadata>) -> Self {
        if let Some(md) = metadata {
            self.offered_ms = md.ms;
        }
        self.metadata = metadata;
        self
    }

    /// The namespace as one controller of a subsystem sees it: the subsystem's shared data
    /// (if it has some for this nsid), its ANA group and that group's state (builder).
    pub fn in_subsystem(mut self, link: Option<&super::subsystem::SubsystemLink>, ana: u8) -> Self {
        if let Some(link) = link {
            if let Some(store) = link.stores.get(&self.nsid) {
                self.store = store.clone();
            }
            self.anagrpid = link.group_of(self.nsid);
            self.ana = AtomicU8::new(if self.anagrpid == 0 { 0 } else { ana });
        }
        self
    }

    /// The namespace offering formats with `ms` bytes of metadata (0: none) (builder).
    pub fn offering(mut self, ms: u16) -> Self {
        if ms != 0 {
            self.offered_ms = ms;
        }
        self
    }

    pub fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::Acquire)
    }

    pub fn is_attached(&self) -> bool {
        self.attached.load(Ordering::Acquire)
    }

    fn id_word(&self, k: u64) -> u64 {
        let g = u64::from(self.generation.load(Ordering::Acquire));
        splitmix(self.seed ^ splitmix(u64::from(self.nsid) << 32 | g) ^ k)
    }
    /// IEEE EUI-64 (nonzero).
    pub fn eui64(&self) -> [u8; 8] {
        (self.id_word(1) | 1).to_be_bytes()
    }
    /// NGUID (nonzero).
    pub fn nguid(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&(self.id_word(2) | 1).to_be_bytes());
        b[8..].copy_from_slice(&self.id_word(3).to_be_bytes());
        b
    }
    /// UUID (version 4 layout).
    pub fn uuid(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.id_word(4).to_be_bytes());
        b[8..].copy_from_slice(&self.id_word(5).to_be_bytes());
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        b
    }
}

/// All namespaces the model knows (attached or not), by nsid.
pub(crate) type NamespaceTable = BTreeMap<u32, std::sync::Arc<ModelNamespace>>;
