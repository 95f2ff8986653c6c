//! Radix-tree nodes of the namespace registry and the nsid → slot arithmetic.
//!
//! Each level consumes [`BITS`] bits of the nsid. A node at `shift` covers nsids below
//! `1 << (shift + BITS)` within its subtree, and its slot for `nsid` is
//! `(nsid >> shift) % FANOUT`. Leaves (shift 0) hold the namespaces; inner nodes hold children.
//! Dropping a node never frees what its slots point to: the registry frees explicitly.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::epoch::{Atomic, Guard};
use crate::namespace::Namespace;

/// Bits of the nsid consumed per level: 64-way nodes (4-way under loom, so that small nsids
/// already build multi-level trees in model checks).
pub(crate) const BITS: u32 = if cfg!(loom) { 2 } else { 6 };
/// Slots per node.
pub(crate) const FANOUT: usize = 1 << BITS;

/// One node of the tree.
pub(crate) enum Node {
    /// An interior node: `shift` is the bit position its slot index starts at (a multiple of
    /// `BITS`, at least `BITS`).
    Inner {
        shift: u32,
        children: [Atomic<Node>; FANOUT],
    },
    /// A bottom node (shift 0): each slot holds one namespace.
    Leaf {
        entries: [Atomic<Arc<Namespace>>; FANOUT],
    },
}

impl Node {
    /// An empty node at `shift` (a leaf when `shift == 0`).
    pub(crate) fn empty(shift: u32) -> Node {
        if shift == 0 {
            Node::Leaf {
                entries: std::array::from_fn(|_| Atomic::null()),
            }
        } else {
            Node::Inner {
                shift,
                children: std::array::from_fn(|_| Atomic::null()),
            }
        }
    }

    /// The bit position this node's slot index starts at.
    pub(crate) fn shift(&self) -> u32 {
        match self {
            Node::Inner { shift, .. } => *shift,
            Node::Leaf { .. } => 0,
        }
    }

    /// Whether every slot is empty.
    pub(crate) fn is_empty(&self, guard: &Guard) -> bool {
        match self {
            Node::Inner { children, .. } => children
                .iter()
                .all(|c| c.load(Ordering::Acquire, guard).is_null()),
            Node::Leaf { entries } => entries
                .iter()
                .all(|e| e.load(Ordering::Acquire, guard).is_null()),
        }
    }

    /// Whether only slot 0 may be occupied (the node adds no height that any key needs).
    pub(crate) fn only_first_slot_used(&self, guard: &Guard) -> bool {
        match self {
            Node::Inner { children, .. } => children
                .iter()
                .skip(1)
                .all(|c| c.load(Ordering::Acquire, guard).is_null()),
            Node::Leaf { .. } => false,
        }
    }
}

/// Whether a node at `shift` (at the root) can hold `nsid`.
#[inline]
pub(crate) fn covers(shift: u32, nsid: u32) -> bool {
    (u64::from(nsid) >> (shift + BITS)) == 0
}

/// The slot index of `nsid` in a node at `shift`.
#[inline]
pub(crate) fn index(shift: u32, nsid: u32) -> usize {
    ((u64::from(nsid) >> shift) as usize) & (FANOUT - 1)
}

/// The smallest root shift whose tree covers `nsid`.
pub(crate) fn root_shift_for(nsid: u32) -> u32 {
    let mut shift = 0;
    while !covers(shift, nsid) {
        shift += BITS;
    }
    shift
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_covers_the_whole_nsid_space() {
        assert_eq!(root_shift_for(1), 0);
        assert!(covers(root_shift_for(0xFFFF_FFFE), 0xFFFF_FFFE));
        assert!(!covers(0, FANOUT as u32));
        assert_eq!(index(0, FANOUT as u32 + 3), 3);
        assert_eq!(index(BITS, FANOUT as u32 + 3), 1);
    }
}
