//! Where a namespace's blocks live in its sparse store: the data, the metadata (after each
//! block's data for extended formats, far past the data for separate ones), and, for formats
//! with protection information, one "written" byte per block so that blocks never written
//! (or deallocated) read back with PI all FFh, as QEMU's do.

use super::namespaces::ModelNamespace;
use super::storage::SparseStore;

/// Where separately stored metadata lives in a namespace's sparse store (far past any data).
pub(crate) const METADATA_BASE: u64 = 1 << 62;

/// Where the per-block "written" bytes of PI formats live (past any separate metadata).
const WRITTEN_BASE: u64 = 3 << 62;

/// The block geometry of one namespace's store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Media {
    /// Data bytes per block.
    pub block: u64,
    /// Metadata bytes per block (0: none).
    pub ms: u64,
    /// Metadata stored after each block's data.
    pub extended: bool,
}

impl Media {
    /// The geometry of `ns`'s current format.
    pub fn of(ns: &ModelNamespace) -> Media {
        let md = ns.metadata;
        Media {
            block: 1 << ns.lba_shift,
            ms: md.map_or(0, |m| u64::from(m.ms)),
            extended: md.is_some_and(|m| m.extended),
        }
    }

    /// The store offset of `lba`'s data.
    fn data_at(&self, lba: u64) -> u64 {
        // Wrapping: the namespace's size bounds `lba`, and a huge configured namespace must
        // not panic the model.
        if self.extended {
            lba.wrapping_mul(self.block + self.ms)
        } else {
            lba.wrapping_mul(self.block)
        }
    }

    /// The store offset of `lba`'s metadata.
    fn md_at(&self, lba: u64) -> u64 {
        if self.extended {
            self.data_at(lba).wrapping_add(self.block)
        } else {
            METADATA_BASE.wrapping_add(lba.wrapping_mul(self.ms))
        }
    }

    /// Reads the data (`data`, whole blocks) and metadata (`md`, `ms` bytes per block) of the
    /// blocks from `slba`.
    pub fn load(&self, store: &SparseStore, slba: u64, data: &mut [u8], md: &mut [u8]) {
        if !self.extended {
            store.read(self.data_at(slba), data);
            store.read(self.md_at(slba), md);
            return;
        }
        let blocks = data.chunks_mut(self.block as usize);
        for (lba, (d, m)) in (slba..).zip(blocks.zip(md.chunks_mut(self.ms as usize))) {
            store.read(self.data_at(lba), d);
            store.read(self.md_at(lba), m);
        }
    }

    /// Stores the data and metadata of the blocks from `slba` (the layout of [`Media::load`]).
    pub fn save(&self, store: &SparseStore, slba: u64, data: &[u8], md: &[u8]) {
        if !self.extended {
            store.write(self.data_at(slba), data);
            store.write(self.md_at(slba), md);
            return;
        }
        let blocks = data.chunks(self.block as usize);
        for (lba, (d, m)) in (slba..).zip(blocks.zip(md.chunks(self.ms as usize))) {
            store.write(self.data_at(lba), d);
            store.write(self.md_at(lba), m);
        }
    }

    /// Stores only the metadata of the blocks from `slba` (`ms` bytes each).
    pub fn save_md(&self, store: &SparseStore, slba: u64, md: &[u8]) {
        if !self.extended {
            store.write(self.md_at(slba), md);
            return;
        }
        for (lba, m) in (slba..).zip(md.chunks(self.ms as usize)) {
            store.write(self.md_at(lba), m);
        }
    }

    /// Zeroes the data and metadata of `nlb` blocks from `slba`, and marks them unwritten.
    pub fn zero(&self, store: &SparseStore, slba: u64, nlb: u64) {
        if self.extended {
            store.zero(self.data_at(slba), nlb * (self.block + self.ms));
        } else {
            store.zero(self.data_at(slba), nlb * self.block);
            if self.ms != 0 {
                store.zero(self.md_at(slba), nlb * self.ms);
            }
        }
        if self.ms != 0 {
            store.zero(WRITTEN_BASE + slba, nlb);
        }
    }

    /// Marks `nlb` blocks from `slba` as written (their PI is what was stored).
    pub fn mark_written(store: &SparseStore, slba: u64, nlb: u64) {
        const ONES: [u8; 512] = [1; 512];
        let mut done = 0;
        while done < nlb {
            let n = (nlb - done).min(ONES.len() as u64);
            store.write(WRITTEN_BASE + slba + done, &ONES[..n as usize]);
            done += n;
        }
    }

    /// Fills `out` with one byte per block from `slba`: nonzero for written blocks.
    pub fn written(store: &SparseStore, slba: u64, out: &mut [u8]) {
        store.read(WRITTEN_BASE + slba, out);
    }
}
