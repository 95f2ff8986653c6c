//! A head's path list: an immutable snapshot swapped as a whole (epoch-protected, as the
//! namespace registry's nodes), with a generation counter that channels compare on each
//! submission to know when to re-read it.

use crate::namespace::Namespace;
use crate::namespaces::epoch::{pin, Atomic, AtomicUsize, Guard, Owned};
use crate::spec::ana::AnaState;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The most controllers (paths) a subsystem has over its lifetime: path sets are `u32` masks.
pub const MAX_PATHS: usize = 32;

/// The state of one path as selection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathState {
    /// ANA optimized (or the controller reports no ANA): preferred.
    Optimized,
    /// ANA non-optimized: used when no optimized path is usable.
    NonOptimized,
    /// ANA inaccessible: not used.
    Inaccessible,
    /// ANA persistent loss: not used.
    PersistentLoss,
    /// ANA change: not used; the head keeps queueing while a path is in transition (for at
    /// most the controller's ANATT).
    Change,
    /// The controller failed, was removed, or the namespace is being removed: not used.
    Gone,
}

impl PathState {
    /// From an ANA state (`None`: no ANA reported, which counts as optimized).
    pub fn from_ana(ana: Option<AnaState>) -> Self {
        match ana {
            None | Some(AnaState::Optimized) => PathState::Optimized,
            Some(AnaState::NonOptimized) => PathState::NonOptimized,
            Some(AnaState::Inaccessible) => PathState::Inaccessible,
            Some(AnaState::PersistentLoss) => PathState::PersistentLoss,
            Some(AnaState::Change) => PathState::Change,
        }
    }
    /// Whether I/O may go to a path in this state.
    pub fn is_usable(self) -> bool {
        matches!(self, PathState::Optimized | PathState::NonOptimized)
    }
    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            PathState::Optimized => "optimized",
            PathState::NonOptimized => "non-optimized",
            PathState::Inaccessible => "inaccessible",
            PathState::PersistentLoss => "persistent-loss",
            PathState::Change => "change",
            PathState::Gone => "gone",
        }
    }
}

impl std::fmt::Display for PathState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One path of a head: a controller's view of the namespace.
#[derive(Debug, Clone)]
pub struct Path {
    /// The controller's index in the subsystem (0..[`MAX_PATHS`]).
    pub controller: usize,
    /// The namespace as that controller's registry holds it.
    pub namespace: Arc<Namespace>,
    /// Its state.
    pub state: PathState,
    /// The controller's NUMA node, if known.
    pub numa_node: Option<u32>,
}

/// A head's paths at one moment.
#[derive(Debug, Clone, Default)]
pub struct PathList {
    /// The paths, by controller index.
    pub paths: Vec<Path>,
}

impl PathList {
    /// The mask of paths (by controller index) in `state`.
    pub fn mask(&self, state: PathState) -> u32 {
        self.paths
            .iter()
            .filter(|p| p.state == state && p.controller < MAX_PATHS)
            .fold(0, |m, p| m | 1 << p.controller)
    }
    /// Whether some path is usable.
    pub fn any_usable(&self) -> bool {
        self.paths.iter().any(|p| p.state.is_usable())
    }
    /// Whether some path is in ANA transition (the head then keeps queueing).
    pub fn any_changing(&self) -> bool {
        self.paths.iter().any(|p| p.state == PathState::Change)
    }
    /// The same paths in the same states (what selection sees)?
    pub fn same_as(&self, other: &PathList) -> bool {
        self.paths.len() == other.paths.len()
            && self.paths.iter().zip(&other.paths).all(|(a, b)| {
                a.controller == b.controller
                    && a.state == b.state
                    && a.numa_node == b.numa_node
                    && Arc::ptr_eq(&a.namespace, &b.namespace)
            })
    }
}

/// The epoch-protected cell holding a head's current [`PathList`].
pub(crate) struct PathCell {
    list: Atomic<PathList>,
    /// Bumped (Release) after every swap and every change of the head's options, so that a
    /// channel that reads it (Acquire) and finds it unchanged knows its cached view is current:
    /// the head's route stamp, which a channel checks before each submission.
    generation: AtomicUsize,
}

impl std::fmt::Debug for PathCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathCell")
            .field("generation", &self.generation())
            .finish()
    }
}

impl PathCell {
    /// A cell holding `list`.
    pub fn new(list: PathList) -> Self {
        let cell = PathCell {
            list: Atomic::null(),
            generation: AtomicUsize::new(1),
        };
        let guard = pin();
        cell.list
            .store(Owned::new(list).into_shared(&guard), Ordering::Release);
        cell
    }

    /// The generation (one Acquire load: the I/O path's check).
    #[inline(always)]
    pub fn generation(&self) -> usize {
        self.generation.load(Ordering::Acquire)
    }

    /// Marks the head changed without a new list (options changed, head removed).
    pub fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Runs `f` on the current list under `guard`.
    pub fn read<R>(&self, guard: &Guard, f: impl FnOnce(&PathList) -> R) -> R {
        let shared = self.list.load(Ordering::Acquire, guard);
        // SAFETY: the list is freed only through the epoch collector after it was swapped out,
        // and `guard` was pinned before this load; it is never null (set in `new`).
        match unsafe { shared.as_ref() } {
            Some(list) => f(list),
            None => f(&PathList::default()),
        }
    }

    /// Swaps in `list` and bumps the generation; the old list goes to `garbage`, to be freed
    /// with every other list of the batch after one grace period.
    pub fn publish(&self, list: PathList, guard: &Guard, garbage: &mut Vec<Owned<PathList>>) {
        let old = self
            .list
            .swap(Owned::new(list).into_shared(guard), Ordering::AcqRel, guard);
        self.generation.fetch_add(1, Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: `old` was just unlinked by this swap (writers are serialised by the
            // subsystem's writer lock), so nothing else frees it; readers that may still hold
            // it are covered by the grace period `retire` waits for.
            let old = unsafe { old.into_owned() };
            garbage.push(old);
        }
    }
}

/// Frees a batch of swapped-out lists after one grace period (one deferred closure for the
/// whole batch: one epoch advance however many heads changed).
pub(crate) fn retire(garbage: Vec<Owned<PathList>>, guard: &Guard) {
    if garbage.is_empty() {
        return;
    }
    guard.defer(move || drop(garbage));
    guard.flush();
}

impl Drop for PathCell {
    fn drop(&mut self) {
        let guard = pin();
        let old = self.list.swap(
            crate::namespaces::epoch::Shared::null(),
            Ordering::AcqRel,
            &guard,
        );
        if !old.is_null() {
            // SAFETY: the cell is being dropped: no new reader can load the pointer, and
            // readers still pinned are covered by deferring the free.
            let owned = unsafe { old.into_owned() };
            guard.defer(move || drop(owned));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::namespace::NamespaceIdentity;

    fn path(controller: usize) -> Path {
        Path {
            controller,
            namespace: Arc::new(Namespace::new(1, NamespaceIdentity::default(), 8)),
            state: PathState::Optimized,
            numa_node: None,
        }
    }

    #[test]
    fn every_change_moves_the_heads_stamp_and_leaves_its_namespaces_alone() {
        let (a, b, c) = (path(0), path(1), path(2));
        let cell = PathCell::new(PathList {
            paths: vec![a.clone(), b.clone()],
        });
        let states = |p: &[&Path]| p.iter().map(|p| p.namespace.state()).collect::<Vec<_>>();
        let before = states(&[&a, &b, &c]);
        let generation = cell.generation();
        // Options change.
        cell.bump();
        assert_eq!(cell.generation(), generation + 1);
        // A swap from [a, b] to [b, c].
        let guard = pin();
        let mut garbage = Vec::new();
        cell.publish(
            PathList {
                paths: vec![b.clone(), c.clone()],
            },
            &guard,
            &mut garbage,
        );
        retire(garbage, &guard);
        assert_eq!(cell.generation(), generation + 2);
        assert_eq!(
            states(&[&a, &b, &c]),
            before,
            "the head writes no namespace"
        );
        assert!([&a, &b, &c].iter().all(|p| p.namespace.io_ready()));
        cell.read(&guard, |l| {
            assert_eq!(
                l.paths.iter().map(|p| p.controller).collect::<Vec<_>>(),
                [1, 2]
            )
        });
    }
}
