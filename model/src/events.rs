//! Asynchronous events: outstanding AER commands, events waiting for one, masking until the
//! log page is read, and the Changed Namespace List.

use std::collections::{BTreeSet, VecDeque};

/// AER completion DW0 for Notice / Namespace Attribute Changed / log page 04h.
pub(crate) const NS_CHANGED_DW0: u32 = 0x02 | 0x04 << 16;
/// AER completion DW0 for Notice / ANA Change / log page 0Ch.
pub(crate) const ANA_CHANGE_DW0: u32 = 0x02 | 0x03 << 8 | 0x0C << 16;
/// The Changed Namespace List holds at most this many entries.
const CHANGED_LIST_MAX: usize = 1024;

/// The controller's asynchronous event state.
#[derive(Debug, Default)]
pub(crate) struct Events {
    /// CIDs of outstanding Asynchronous Event Request commands, oldest first.
    pub aers: VecDeque<u16>,
    /// Events waiting for an AER (at most one per type).
    queued: VecDeque<u32>,
    /// A Namespace Attribute Changed event was reported and log page 04h not yet read.
    ns_masked: bool,
    /// Namespaces changed since the log page was last read.
    changed: BTreeSet<u32>,
    /// Report 0xFFFFFFFF on the next read of the log page.
    pub force_overflow: bool,
    /// An ANA change event was reported and log page 0Ch not yet read.
    ana_masked: bool,
}

impl Events {
    /// Controller reset: outstanding AERs are gone, events stay.
    pub fn reset(&mut self) {
        self.aers.clear();
        self.ns_masked = false;
        self.ana_masked = false;
    }

    /// Records an ANA change. Returns the AER (cid, dw0) to complete now, if any.
    pub fn ana_changed(&mut self) -> Option<(u16, u32)> {
        if self.ana_masked || self.queued.contains(&ANA_CHANGE_DW0) {
            return None;
        }
        match self.aers.pop_front() {
            Some(cid) => {
                self.ana_masked = true;
                Some((cid, ANA_CHANGE_DW0))
            }
            None => {
                self.queued.push_back(ANA_CHANGE_DW0);
                None
            }
        }
    }

    /// The ANA log page was read: unless `rae`, the event is unmasked.
    pub fn ana_read(&mut self, rae: bool) {
        if !rae {
            self.ana_masked = false;
        }
    }

    /// Records a namespace change. Returns the AER (cid, dw0) to complete now, if any.
    pub fn ns_changed(&mut self, nsid: u32) -> Option<(u16, u32)> {
        self.changed.insert(nsid);
        if self.ns_masked || self.queued.contains(&NS_CHANGED_DW0) {
            return None;
        }
        match self.aers.pop_front() {
            Some(cid) => {
                self.ns_masked = true;
                Some((cid, NS_CHANGED_DW0))
            }
            None => {
                self.queued.push_back(NS_CHANGED_DW0);
                None
            }
        }
    }

    /// An AER arrived: returns the DW0 to complete it with now, or holds it.
    pub fn aer_arrived(&mut self, cid: u16) -> Option<u32> {
        match self.queued.pop_front() {
            Some(dw0) => {
                if dw0 == NS_CHANGED_DW0 {
                    self.ns_masked = true;
                }
                if dw0 == ANA_CHANGE_DW0 {
                    self.ana_masked = true;
                }
                Some(dw0)
            }
            None => {
                self.aers.push_back(cid);
                None
            }
        }
    }

    /// The Changed Namespace List log page (4096 bytes); reading clears it, and unless `rae`
    /// (Retain Asynchronous Event) is set it unmasks the event.
    pub fn take_changed_list(&mut self, rae: bool) -> Vec<u8> {
        let mut page = vec![0u8; 4096];
        if self.force_overflow || self.changed.len() > CHANGED_LIST_MAX {
            page[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        } else {
            for (slot, nsid) in page.chunks_exact_mut(4).zip(&self.changed) {
                slot.copy_from_slice(&nsid.to_le_bytes());
            }
        }
        self.changed.clear();
        self.force_overflow = false;
        if !rae {
            self.ns_masked = false;
        }
        page
    }
}
