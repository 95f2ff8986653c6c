//! `NamespaceRegistry`: the per-controller nsid → namespace map, with lock-free, wait-free
//! lookups for the I/O path (see docs/namespace-registry.md).
//!
//! Structure: a radix tree of 64-way nodes whose height grows only as far as the largest nsid
//! needs (an xarray-like layout): 1..=63 live in one leaf, the full 32-bit space needs six
//! levels. Empty nodes are unlinked, so memory follows the number of *active* namespaces.
//!
//! Readers pin a crossbeam-epoch guard and follow at most six atomic pointers: no lock, no
//! shared counter, no retry loop. Writers (insert/replace/remove) serialise on a writer mutex
//! that covers only their pointer updates (no allocation-heavy work, no waiting for readers);
//! unlinked memory is handed to the epoch collector and freed after every reader that could
//! have seen it has unpinned.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use super::epoch::{pin, unprotected, Atomic, AtomicUsize, Guard, Mutex, Owned, Shared};
use super::events::{EventBus, NamespaceEvent};
use super::node::{covers, index, root_shift_for, Node, BITS};
use crate::namespace::{Namespace, NamespaceState};

/// The smallest valid namespace ID.
pub const NSID_MIN: u32 = 1;
/// The largest valid namespace ID (0xFFFF_FFFF is the broadcast value, never a namespace).
pub const NSID_MAX: u32 = 0xFFFF_FFFE;

/// Why a registry update was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The nsid is 0 or 0xFFFF_FFFF.
    #[error("nsid {0:#x} is not a namespace ID: use 1..=0xFFFF_FFFE")]
    InvalidNsid(u32),
    /// A namespace with this nsid is already registered.
    #[error("nsid {0} is already registered: remove it first, or use replace()")]
    Occupied(u32),
    /// No namespace with this nsid is registered.
    #[error("nsid {0} is not registered: rescan the namespace list")]
    NotFound(u32),
}

/// Whether `nsid` can name a namespace.
#[inline]
pub fn is_valid_nsid(nsid: u32) -> bool {
    (NSID_MIN..=NSID_MAX).contains(&nsid)
}

/// A pinned epoch guard for batches of lookups with [`NamespaceRegistry::lookup`].
pub type RegistryGuard = Guard;

/// Pins the current thread for [`NamespaceRegistry::lookup`]; keep it short-lived (memory that
/// writers unlink is not freed while any guard from before the unlink is alive).
pub fn pin_guard() -> RegistryGuard {
    pin()
}

/// Memory to free after one grace period, and the namespaces to mark `Removed` then.
struct Garbage {
    leaves: Vec<Owned<Arc<Namespace>>>,
    nodes: Vec<Owned<Node>>,
}

impl Garbage {
    fn new() -> Self {
        Garbage {
            leaves: Vec::new(),
            nodes: Vec::new(),
        }
    }

    /// Defers everything in one closure: one grace period for the whole batch.
    fn retire(self, guard: &Guard) {
        if self.leaves.is_empty() && self.nodes.is_empty() {
            return;
        }
        guard.defer(move || {
            for leaf in &self.leaves {
                leaf.set_state(NamespaceState::Removed);
            }
            drop(self);
        });
        guard.flush();
    }
}

/// The namespaces of one controller, by nsid.
pub struct NamespaceRegistry {
    root: Atomic<Node>,
    /// Serialises writers; held only across pointer updates.
    writer: Mutex<()>,
    len: AtomicUsize,
    nodes: AtomicUsize,
    events: EventBus,
}

impl Default for NamespaceRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for NamespaceRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceRegistry")
            .field("len", &self.len())
            .field("nodes", &self.node_count())
            .finish()
    }
}

/// Where `nsid` lives, if it is in the tree.
fn find<'g>(root: Shared<'g, Node>, nsid: u32, guard: &'g Guard) -> Option<&'g Arc<Namespace>> {
    // SAFETY: every pointer reachable from the root is freed only through the epoch collector
    // after it was unlinked, and `guard` was pinned before the loads (so for every deref below).
    let mut node = unsafe { root.as_ref() }?;
    if !covers(node.shift(), nsid) {
        return None;
    }
    loop {
        match node {
            Node::Inner { shift, children } => {
                let child = children[index(*shift, nsid)].load(Ordering::Acquire, guard);
                // SAFETY: as above (loaded under `guard`, freed only through the collector).
                node = unsafe { child.as_ref() }?;
            }
            Node::Leaf { entries } => {
                let entry = entries[index(0, nsid)].load(Ordering::Acquire, guard);
                // SAFETY: as above (loaded under `guard`, freed only through the collector).
                return unsafe { entry.as_ref() };
            }
        }
    }
}

impl NamespaceRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        NamespaceRegistry {
            root: Atomic::null(),
            writer: Mutex::new(()),
            len: AtomicUsize::new(0),
            nodes: AtomicUsize::new(0),
            events: EventBus::new(),
        }
    }

    /// Runs `f` on namespace `nsid` under a pinned epoch guard (no reference count taken).
    /// `None` when the nsid is not registered or not valid.
    #[inline]
    pub fn with<R>(&self, nsid: u32, f: impl FnOnce(&Namespace) -> R) -> Option<R> {
        let guard = pin();
        self.lookup(nsid, &guard).map(|ns| f(ns))
    }

    /// Looks `nsid` up under a caller-pinned guard ([`pin_guard`]), so a batch of lookups pins
    /// once. The reference lives as long as the guard.
    #[inline]
    pub fn lookup<'g>(&self, nsid: u32, guard: &'g RegistryGuard) -> Option<&'g Arc<Namespace>> {
        find(self.root.load(Ordering::Acquire, guard), nsid, guard)
    }

    /// A counted handle to namespace `nsid`, for callers that keep it beyond one call.
    pub fn get(&self, nsid: u32) -> Option<Arc<Namespace>> {
        let guard = pin();
        self.lookup(nsid, &guard).cloned()
    }

    /// Registers `ns`; refused if its nsid is invalid or already registered.
    pub fn insert(&self, ns: Arc<Namespace>) -> Result<(), RegistryError> {
        let nsid = ns.nsid();
        self.install(ns, false)?;
        self.events.publish(NamespaceEvent::Added(nsid));
        Ok(())
    }

    /// Registers `ns`, replacing (and returning) any namespace with the same nsid. The old one
    /// is marked `Removing` at once and `Removed` after the grace period, like a removal.
    pub fn replace(&self, ns: Arc<Namespace>) -> Result<Option<Arc<Namespace>>, RegistryError> {
        let nsid = ns.nsid();
        let old = self.install(ns, true)?;
        if old.is_some() {
            self.events.publish(NamespaceEvent::Removed(nsid));
        }
        self.events.publish(NamespaceEvent::Added(nsid));
        Ok(old)
    }

    /// Sets the size of namespace `nsid` in place and publishes `Changed`.
    pub fn resize(&self, nsid: u32, blocks: u64) -> Result<(), RegistryError> {
        if !is_valid_nsid(nsid) {
            return Err(RegistryError::InvalidNsid(nsid));
        }
        self.with(nsid, |ns| ns.set_blocks(blocks))
            .ok_or(RegistryError::NotFound(nsid))?;
        self.events.publish(NamespaceEvent::Changed(nsid));
        Ok(())
    }

    fn install(
        &self,
        ns: Arc<Namespace>,
        allow_replace: bool,
    ) -> Result<Option<Arc<Namespace>>, RegistryError> {
        let nsid = ns.nsid();
        if !is_valid_nsid(nsid) {
            return Err(RegistryError::InvalidNsid(nsid));
        }
        // Allocate the entry before taking the writer lock.
        let mut entry = Some(Owned::new(ns));
        let guard = pin();
        let mut garbage = Garbage::new();
        let old = {
            let _w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
            if !allow_replace
                && find(self.root.load(Ordering::Acquire, &guard), nsid, &guard).is_some()
            {
                return Err(RegistryError::Occupied(nsid));
            }
            let mut node_ptr = self.grow_root_for(nsid, &guard);
            loop {
                // SAFETY: non-null pointers in the tree stay allocated while we hold the writer
                // lock (only writers unlink) and the guard.
                let Some(node) = (unsafe { node_ptr.as_ref() }) else {
                    unreachable!("grow_root_for returns a non-null root");
                };
                match node {
                    Node::Inner { shift, children } => {
                        let slot = &children[index(*shift, nsid)];
                        let mut child = slot.load(Ordering::Acquire, &guard);
                        if child.is_null() {
                            child = Owned::new(Node::empty(shift - BITS)).into_shared(&guard);
                            slot.store(child, Ordering::Release);
                            self.nodes.fetch_add(1, Ordering::Relaxed);
                        }
                        node_ptr = child;
                    }
                    Node::Leaf { entries } => {
                        let new = entry
                            .take()
                            .map_or(Shared::null(), |e| e.into_shared(&guard));
                        let old = entries[index(0, nsid)].swap(new, Ordering::AcqRel, &guard);
                        // SAFETY: `old` was unlinked by this swap under the writer lock, so we
                        // are its only owner; it is freed by the collector after a grace period.
                        let old_entry = (!old.is_null()).then(|| unsafe { old.into_owned() });
                        let kept = old_entry.as_deref().cloned();
                        match old_entry {
                            Some(o) => {
                                o.set_state(NamespaceState::Removing);
                                garbage.leaves.push(o);
                            }
                            None => {
                                self.len.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        break kept;
                    }
                }
            }
        };
        garbage.retire(&guard);
        Ok(old)
    }

    /// Adds levels on top of the root until it covers `nsid`; returns the root (never null).
    /// Writer lock held.
    fn grow_root_for<'g>(&self, nsid: u32, guard: &'g Guard) -> Shared<'g, Node> {
        let mut root = self.root.load(Ordering::Acquire, guard);
        // SAFETY: as in `find`; the writer lock keeps the root from being retired meanwhile.
        let Some(mut shift) = (unsafe { root.as_ref() }).map(Node::shift) else {
            let new = Owned::new(Node::empty(root_shift_for(nsid))).into_shared(guard);
            self.root.store(new, Ordering::Release);
            self.nodes.fetch_add(1, Ordering::Relaxed);
            return new;
        };
        while !covers(shift, nsid) {
            // The old root becomes slot 0 of a new, taller root: readers holding the old root
            // still see a valid subtree for the keys it covers.
            let taller = Node::empty(shift + BITS);
            if let Node::Inner { children, .. } = &taller {
                children[0].store(root, Ordering::Relaxed);
            }
            root = Owned::new(taller).into_shared(guard);
            self.root.store(root, Ordering::Release);
            self.nodes.fetch_add(1, Ordering::Relaxed);
            shift += BITS;
        }
        root
    }

    /// Removes one namespace; see [`remove_batch`](Self::remove_batch).
    pub fn remove(&self, nsid: u32) -> Option<Arc<Namespace>> {
        self.remove_batch(&[nsid]).pop()
    }

    /// Removes every listed namespace that is registered and returns them (invalid or absent
    /// nsids are skipped).
    ///
    /// Order: all of them are marked `Removing` first (I/O paths holding one refuse new
    /// commands), then all are unlinked so new lookups miss them, then the whole batch is
    /// handed to the epoch collector in one deferred closure: one grace period for N
    /// namespaces. When it has passed, each is marked `Removed` and the registry's references
    /// and any emptied nodes are freed. Nothing here waits for readers, and removals run
    /// against lookups and each other without a controller-wide lock.
    pub fn remove_batch(&self, nsids: &[u32]) -> Vec<Arc<Namespace>> {
        let guard = pin();
        for &nsid in nsids {
            if let Some(ns) = self.lookup(nsid, &guard) {
                ns.set_state(NamespaceState::Removing);
            }
        }
        let mut garbage = Garbage::new();
        let mut removed = Vec::new();
        {
            let _w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
            for &nsid in nsids {
                if !is_valid_nsid(nsid) {
                    continue;
                }
                if let Some(leaf) = self.unlink(nsid, &guard, &mut garbage) {
                    leaf.set_state(NamespaceState::Removing);
                    removed.push(Arc::clone(&leaf));
                    garbage.leaves.push(leaf);
                    self.len.fetch_sub(1, Ordering::Relaxed);
                }
            }
            self.shrink_root(&guard, &mut garbage);
        }
        garbage.retire(&guard);
        for ns in &removed {
            self.events.publish(NamespaceEvent::Removed(ns.nsid()));
        }
        removed
    }

    /// Removes every namespace registered when the call starts.
    pub fn clear(&self) -> Vec<Arc<Namespace>> {
        self.remove_batch(&self.nsids())
    }

    /// Unlinks `nsid`'s entry and any node it leaves empty. Writer lock held.
    fn unlink(
        &self,
        nsid: u32,
        guard: &Guard,
        garbage: &mut Garbage,
    ) -> Option<Owned<Arc<Namespace>>> {
        let root = self.root.load(Ordering::Acquire, guard);
        // SAFETY: as in `find`; under the writer lock nothing we reach is retired meanwhile.
        let node = unsafe { root.as_ref() }?;
        if !covers(node.shift(), nsid) {
            return None;
        }
        self.unlink_in(node, nsid, guard, garbage)
    }

    fn unlink_in(
        &self,
        node: &Node,
        nsid: u32,
        guard: &Guard,
        garbage: &mut Garbage,
    ) -> Option<Owned<Arc<Namespace>>> {
        match node {
            Node::Leaf { entries } => {
                let slot = &entries[index(0, nsid)];
                if slot.load(Ordering::Acquire, guard).is_null() {
                    return None;
                }
                let old = slot.swap(Shared::null(), Ordering::AcqRel, guard);
                // SAFETY: unlinked by this swap under the writer lock: we are the only owner;
                // it is dropped only by the deferred closure, after the grace period.
                Some(unsafe { old.into_owned() })
            }
            Node::Inner { shift, children } => {
                let slot = &children[index(*shift, nsid)];
                let child_ptr = slot.load(Ordering::Acquire, guard);
                // SAFETY: as in `find`.
                let child = unsafe { child_ptr.as_ref() }?;
                let leaf = self.unlink_in(child, nsid, guard, garbage)?;
                if child.is_empty(guard) {
                    let old = slot.swap(Shared::null(), Ordering::AcqRel, guard);
                    // SAFETY: as for the leaf entry above.
                    garbage.nodes.push(unsafe { old.into_owned() });
                    self.nodes.fetch_sub(1, Ordering::Relaxed);
                }
                Some(leaf)
            }
        }
    }

    /// Drops root levels that no key needs (root empty, or only its slot 0 used). Writer lock
    /// held.
    fn shrink_root(&self, guard: &Guard, garbage: &mut Garbage) {
        loop {
            let root = self.root.load(Ordering::Acquire, guard);
            // SAFETY: as in `find`.
            let Some(node) = (unsafe { root.as_ref() }) else {
                return;
            };
            let next = if node.is_empty(guard) {
                Shared::null()
            } else if node.only_first_slot_used(guard) {
                match node {
                    Node::Inner { children, .. } => children[0].load(Ordering::Acquire, guard),
                    Node::Leaf { .. } => return,
                }
            } else {
                return;
            };
            // Readers that already hold the old root still reach slot 0 through it until the
            // grace period ends; the old root's own slots are not freed with it.
            self.root.store(next, Ordering::Release);
            // SAFETY: unlinked by the store above under the writer lock; freed after the grace
            // period; dropping a node does not free its children.
            garbage.nodes.push(unsafe { root.into_owned() });
            self.nodes.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The number of registered namespaces.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether no namespace is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of tree nodes allocated (memory is proportional to it).
    pub fn node_count(&self) -> usize {
        self.nodes.load(Ordering::Relaxed)
    }

    /// The registered nsids in ascending order (a lock-free snapshot: concurrent changes may or
    /// may not be included).
    pub fn nsids(&self) -> Vec<u32> {
        self.snapshot().iter().map(|ns| ns.nsid()).collect()
    }

    /// Handles to every registered namespace in nsid order (a lock-free snapshot).
    pub fn snapshot(&self) -> Vec<Arc<Namespace>> {
        let guard = pin();
        let mut out = Vec::with_capacity(self.len());
        // SAFETY: as in `find`.
        if let Some(root) = unsafe { self.root.load(Ordering::Acquire, &guard).as_ref() } {
            collect(root, &guard, &mut out);
        }
        out
    }

    /// The change events of this registry (subscribe here).
    pub fn events(&self) -> &EventBus {
        &self.events
    }
}

fn collect(node: &Node, guard: &Guard, out: &mut Vec<Arc<Namespace>>) {
    match node {
        Node::Inner { children, .. } => {
            for c in children {
                // SAFETY: as in `find`.
                if let Some(child) = unsafe { c.load(Ordering::Acquire, guard).as_ref() } {
                    collect(child, guard, out);
                }
            }
        }
        Node::Leaf { entries } => {
            for e in entries {
                // SAFETY: as in `find`.
                if let Some(ns) = unsafe { e.load(Ordering::Acquire, guard).as_ref() } {
                    out.push(Arc::clone(ns));
                }
            }
        }
    }
}

/// Frees a subtree. Only for `Drop`, where no reader can exist.
fn free_subtree(ptr: Shared<'_, Node>, guard: &Guard) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: called from Drop with `&mut` access: no reader holds a pointer into the tree and
    // each node/entry is owned by exactly one slot, so each is freed exactly once.
    let node = unsafe { ptr.into_owned() };
    match &*node {
        Node::Inner { children, .. } => {
            for c in children {
                free_subtree(c.load(Ordering::Relaxed, guard), guard);
            }
        }
        Node::Leaf { entries } => {
            for e in entries {
                let entry = e.load(Ordering::Relaxed, guard);
                if !entry.is_null() {
                    // SAFETY: as above.
                    drop(unsafe { entry.into_owned() });
                }
            }
        }
    }
}

impl Drop for NamespaceRegistry {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can reach the tree (see free_subtree).
        let guard = unsafe { unprotected() };
        free_subtree(self.root.load(Ordering::Relaxed, guard), guard);
    }
}
