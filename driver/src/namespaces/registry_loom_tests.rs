//! Loom model checks of the registry's slot protocol (`RUSTFLAGS="--cfg loom"`, see
//! docs/testing-loom.md). Under loom the registry runs on loom atomics and mutexes and on the
//! `epoch_loom` stand-in collector, whose cells make loom report any free that is not ordered
//! after every reader that could have seen the pointer. Nodes are 4-way, so small nsids already
//! grow, prune and collapse multi-level trees.

use std::sync::Arc;

use loom::thread;

use super::registry::{pin_guard, NamespaceRegistry};
use crate::namespace::{Namespace, NamespaceIdentity, NamespaceState};

fn ns(nsid: u32) -> Arc<Namespace> {
    Arc::new(Namespace::new(
        nsid,
        NamespaceIdentity::default(),
        u64::from(nsid) + 100,
    ))
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// Runs deferred frees that no guard holds back any more (all threads joined).
fn settle() {
    drop(pin_guard());
}

#[test]
fn lookups_race_growth_pruning_and_collapse() {
    model(|| {
        let reg = Arc::new(NamespaceRegistry::new());
        reg.insert(ns(1)).unwrap();
        let r = reg.clone();
        let reader = thread::spawn(move || {
            for k in [5u32, 1] {
                if let Some(seen) = r.with(k, |n| (n.nsid(), n.blocks())) {
                    assert_eq!(seen, (k, u64::from(k) + 100));
                }
            }
        });
        // Insert 5: the leaf root gains a parent. Removing both prunes and empties the tree.
        reg.insert(ns(5)).unwrap();
        let removed = reg.remove_batch(&[1, 5]);
        reader.join().unwrap();
        settle();
        assert_eq!(removed.len(), 2);
        assert_eq!(reg.len(), 0);
        assert_eq!(reg.node_count(), 0);
        for n in &removed {
            assert_eq!(n.state(), NamespaceState::Removed);
            assert_eq!(Arc::strong_count(n), 1);
        }
    });
}

#[test]
fn concurrent_writers_and_a_counted_reader() {
    model(|| {
        let reg = Arc::new(NamespaceRegistry::new());
        reg.insert(ns(2)).unwrap();
        let w = reg.clone();
        let writer = thread::spawn(move || {
            w.insert(ns(6)).unwrap();
        });
        let r = reg.clone();
        let reader = thread::spawn(move || {
            let held = r.get(2);
            let six = r.with(6, |n| n.nsid());
            assert!(six.is_none() || six == Some(6));
            held.map(|n| (n.nsid(), n.blocks()))
        });
        let removed = reg.remove(2).map(|n| n.nsid());
        writer.join().unwrap();
        let held = reader.join().unwrap();
        settle();
        assert_eq!(removed, Some(2));
        if let Some(seen) = held {
            assert_eq!(seen, (2, 102));
        }
        assert_eq!(reg.nsids(), vec![6]);
        assert_eq!(reg.with(6, |n| n.nsid()), Some(6));
    });
}

#[test]
fn insert_is_exclusive_per_nsid() {
    model(|| {
        let reg = Arc::new(NamespaceRegistry::new());
        let others: Vec<_> = (0..2)
            .map(|_| {
                let r = reg.clone();
                thread::spawn(move || r.insert(ns(3)).is_ok())
            })
            .collect();
        let wins = others
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&ok| ok)
            .count();
        assert_eq!(wins, 1);
        assert_eq!(reg.len(), 1);
    });
}

#[test]
fn insert_into_an_existing_leaf_publishes_the_namespace() {
    model(|| {
        let reg = Arc::new(NamespaceRegistry::new());
        reg.insert(ns(1)).unwrap();
        let r = reg.clone();
        let reader = thread::spawn(move || r.with(2, |n| (n.nsid(), n.blocks())));
        // Same leaf as nsid 1: the slot store is the only publication.
        reg.insert(ns(2)).unwrap();
        if let Some(seen) = reader.join().unwrap() {
            assert_eq!(seen, (2, 102));
        }
    });
}
