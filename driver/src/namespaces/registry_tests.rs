//! Unit and concurrency tests of the namespace registry.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::node::BITS;
use super::registry::{pin_guard, NamespaceRegistry, RegistryError, NSID_MAX};
use super::NamespaceEvent;
use crate::namespace::{Namespace, NamespaceIdentity, NamespaceState};

fn ns(nsid: u32) -> Arc<Namespace> {
    let identity = NamespaceIdentity {
        lba_shift: 9,
        ..Default::default()
    };
    Arc::new(Namespace::new(nsid, identity, blocks_for(nsid)))
}

fn blocks_for(nsid: u32) -> u64 {
    u64::from(nsid) * 7 + 3
}

/// Nodes a radix tree over `keys` needs: one per distinct prefix at each level up to the root.
fn expected_nodes(keys: &BTreeSet<u32>) -> usize {
    let Some(&max) = keys.last() else { return 0 };
    let mut total = 0;
    let mut shift = 0;
    loop {
        let prefixes: BTreeSet<u64> = keys
            .iter()
            .map(|&k| u64::from(k) >> (shift + BITS))
            .collect();
        total += prefixes.len();
        if u64::from(max) >> (shift + BITS) == 0 {
            return total;
        }
        shift += BITS;
    }
}

/// Lets the epoch collector run deferred work until `done` holds (bounded, no sleeping).
fn drive_epochs_until(done: impl Fn() -> bool) -> bool {
    for _ in 0..200_000 {
        if done() {
            return true;
        }
        pin_guard().flush();
    }
    done()
}

#[test]
fn insert_lookup_remove_with_holes() {
    let reg = NamespaceRegistry::new();
    let keys = [1u32, 3, 64, 65, 4096, 1 << 20, 0x8000_0001];
    for &k in &keys {
        reg.insert(ns(k)).unwrap();
    }
    assert_eq!(reg.len(), keys.len());
    for &k in &keys {
        assert_eq!(reg.with(k, |n| n.nsid()), Some(k));
        assert_eq!(reg.get(k).map(|n| n.blocks()), Some(blocks_for(k)));
    }
    for hole in [
        2u32,
        4,
        63,
        66,
        4095,
        4097,
        (1 << 20) + 1,
        0x8000_0000,
        NSID_MAX,
    ] {
        assert!(reg.with(hole, |_| ()).is_none(), "hole {hole} found");
    }
    assert_eq!(reg.nsids(), keys.to_vec());
    let set: BTreeSet<u32> = keys.iter().copied().collect();
    assert_eq!(reg.node_count(), expected_nodes(&set));

    let gone = reg.remove(64).expect("64 was registered");
    assert_eq!(gone.nsid(), 64);
    assert!(reg.get(64).is_none());
    assert!(reg.remove(64).is_none());
    assert_eq!(reg.with(65, |n| n.nsid()), Some(65));
    assert_eq!(reg.len(), keys.len() - 1);
}

#[test]
fn nsid_bounds_are_typed_errors() {
    let reg = NamespaceRegistry::new();
    reg.insert(ns(1)).unwrap();
    reg.insert(ns(NSID_MAX)).unwrap();
    assert_eq!(reg.insert(ns(0)), Err(RegistryError::InvalidNsid(0)));
    assert_eq!(
        reg.insert(ns(0xFFFF_FFFF)),
        Err(RegistryError::InvalidNsid(0xFFFF_FFFF))
    );
    assert_eq!(
        reg.replace(ns(0)).err(),
        Some(RegistryError::InvalidNsid(0))
    );
    assert_eq!(reg.insert(ns(1)), Err(RegistryError::Occupied(1)));
    assert_eq!(
        reg.insert(ns(NSID_MAX)),
        Err(RegistryError::Occupied(NSID_MAX))
    );
    assert!(reg.with(0, |_| ()).is_none());
    assert!(reg.get(0xFFFF_FFFF).is_none());
    assert!(reg.remove(0).is_none());
    assert_eq!(reg.resize(0, 1), Err(RegistryError::InvalidNsid(0)));
    assert_eq!(reg.resize(2, 1), Err(RegistryError::NotFound(2)));
    assert_eq!(reg.with(NSID_MAX, |n| n.nsid()), Some(NSID_MAX));
    assert_eq!(reg.len(), 2);
    assert!(RegistryError::Occupied(1).to_string().contains("replace"));
}

#[test]
fn four_thousand_namespaces_and_node_count_follows_active_ones() {
    let reg = NamespaceRegistry::new();
    // Miri interprets every step: 300 namespaces still span several leaf nodes.
    let count = if cfg!(miri) { 130 } else { 4096 };
    let keys: BTreeSet<u32> = (1..=count).collect();
    for &k in &keys {
        reg.insert(ns(k)).unwrap();
    }
    assert_eq!(reg.len(), count as usize);
    for &k in &keys {
        assert_eq!(
            reg.with(k, |n| (n.nsid(), n.blocks())),
            Some((k, blocks_for(k)))
        );
    }
    assert_eq!(reg.node_count(), expected_nodes(&keys));

    // Remove all but a few: the emptied nodes go away.
    let keep: BTreeSet<u32> = [5u32, count / 2].into_iter().collect();
    let drop_list: Vec<u32> = keys.difference(&keep).copied().collect();
    assert_eq!(reg.remove_batch(&drop_list).len(), drop_list.len());
    assert_eq!(reg.len(), 2);
    assert_eq!(reg.node_count(), expected_nodes(&keep));
    assert_eq!(reg.nsids(), keep.iter().copied().collect::<Vec<_>>());

    assert_eq!(reg.clear().len(), 2);
    assert_eq!(reg.node_count(), 0);
    assert!(reg.is_empty());
}

#[test]
fn sparse_nsids_cost_a_path_not_a_table() {
    let reg = NamespaceRegistry::new();
    reg.insert(ns(1)).unwrap();
    assert_eq!(reg.node_count(), 1);
    reg.insert(ns(NSID_MAX)).unwrap();
    let both: BTreeSet<u32> = [1, NSID_MAX].into_iter().collect();
    assert_eq!(reg.node_count(), expected_nodes(&both));
    assert!(reg.node_count() <= 2 * (32 / BITS as usize + 1));
    // Removing the high nsid collapses the root back to one leaf.
    reg.remove(NSID_MAX).unwrap();
    assert_eq!(reg.node_count(), 1);
    assert_eq!(reg.with(1, |n| n.nsid()), Some(1));
}

#[test]
fn batch_removal_marks_removing_unlinks_all_then_releases_after_grace() {
    let reg = NamespaceRegistry::new();
    for k in 1..=100 {
        reg.insert(ns(k)).unwrap();
    }
    let events = reg.events().subscribe();
    let mut batch: Vec<u32> = (2..=100).step_by(2).collect();
    batch.extend([7777, 0, 0xFFFF_FFFF, 4]); // absent, invalid, duplicate
    let removed = reg.remove_batch(&batch);
    assert_eq!(removed.len(), 50);
    for ns in &removed {
        assert_eq!(ns.nsid() % 2, 0);
        assert_ne!(ns.state(), NamespaceState::Active);
        assert!(
            reg.get(ns.nsid()).is_none(),
            "{} still reachable",
            ns.nsid()
        );
    }
    for k in (1..=99).step_by(2) {
        assert_eq!(reg.with(k, |n| n.state()), Some(NamespaceState::Active));
    }
    assert_eq!(reg.len(), 50);
    let got: Vec<NamespaceEvent> = events.try_iter().collect();
    let want: Vec<NamespaceEvent> = (2..=100).step_by(2).map(NamespaceEvent::Removed).collect();
    assert_eq!(got, want);

    // After the grace period the registry's references are released and state is Removed.
    let all_released = || {
        removed
            .iter()
            .all(|n| Arc::strong_count(n) == 1 && n.state() == NamespaceState::Removed)
    };
    assert!(drive_epochs_until(all_released), "grace period never ended");
}

#[test]
fn erase_happens_before_release_and_release_waits_for_readers() {
    let reg = NamespaceRegistry::new();
    reg.insert(ns(5)).unwrap();
    let guard = pin_guard();
    let seen = reg.lookup(5, &guard).expect("registered");
    let removed = reg.remove(5).expect("registered");
    // Erased: new lookups miss it at once.
    assert!(reg.get(5).is_none());
    // Not released: a reader pinned before the removal still reads it, and the registry's
    // reference is still alive.
    assert_eq!(seen.nsid(), 5);
    for _ in 0..1000 {
        pin_guard().flush();
    }
    assert_eq!(Arc::strong_count(&removed), 2);
    assert_eq!(removed.state(), NamespaceState::Removing);
    drop(guard);
    assert!(drive_epochs_until(|| Arc::strong_count(&removed) == 1));
    assert_eq!(removed.state(), NamespaceState::Removed);
}

#[test]
fn replace_and_resize_publish_events() {
    let reg = NamespaceRegistry::new();
    let events = reg.events().subscribe();
    assert!(reg.replace(ns(9)).unwrap().is_none());
    let old = reg.replace(ns(9)).unwrap().expect("9 was registered");
    assert_eq!(old.state(), NamespaceState::Removing);
    reg.resize(9, 42).unwrap();
    assert_eq!(reg.with(9, |n| n.blocks()), Some(42));
    assert_eq!(old.blocks(), blocks_for(9));
    assert_eq!(reg.len(), 1);
    let got: Vec<NamespaceEvent> = events.try_iter().collect();
    assert_eq!(
        got,
        vec![
            NamespaceEvent::Added(9),
            NamespaceEvent::Removed(9),
            NamespaceEvent::Added(9),
            NamespaceEvent::Changed(9)
        ]
    );
}

#[test]
fn readers_see_only_consistent_namespaces_while_a_writer_churns() {
    const KEYS: [u32; 8] = [1, 2, 63, 64, 65, 4097, 1 << 24, NSID_MAX];
    const ROUNDS: usize = if cfg!(miri) { 6 } else { 3000 };
    let reg = Arc::new(NamespaceRegistry::new());
    let stop = Arc::new(AtomicBool::new(false));
    let hits = Arc::new(AtomicU64::new(0));
    for &k in &KEYS {
        reg.insert(ns(k)).unwrap();
    }
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (reg, stop, hits) = (reg.clone(), stop.clone(), hits.clone());
            std::thread::spawn(move || {
                let mut held = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    for &k in &KEYS {
                        let seen = reg.with(k, |n| {
                            assert_eq!(n.nsid(), k);
                            assert_eq!(n.blocks(), blocks_for(k));
                        });
                        if seen.is_some() {
                            hits.fetch_add(1, Ordering::Relaxed);
                        }
                        if r == 1 {
                            if let Some(n) = reg.get(k) {
                                assert_eq!(n.nsid(), k);
                                held.push(n);
                            }
                        }
                    }
                    held.truncate(16);
                }
                for n in held {
                    assert_eq!(n.blocks(), blocks_for(n.nsid()));
                }
            })
        })
        .collect();
    // Start churning only once the readers are running.
    while hits.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }
    for round in 0..ROUNDS {
        for (i, &k) in KEYS.iter().enumerate() {
            if (round + i) % 3 == 0 {
                let _ = reg.insert(ns(k));
            } else if (round + i) % 3 == 1 {
                let _ = reg.replace(ns(k));
            }
        }
        let batch: Vec<u32> = KEYS
            .iter()
            .copied()
            .filter(|k| k % 2 == round as u32 % 2)
            .collect();
        for n in reg.remove_batch(&batch) {
            assert_eq!(n.blocks(), blocks_for(n.nsid()));
        }
    }
    stop.store(true, Ordering::Release);
    for r in readers {
        r.join().expect("reader panicked");
    }
    let present = reg.nsids();
    assert_eq!(present.len(), reg.len());
    for k in present {
        assert_eq!(reg.with(k, |n| n.nsid()), Some(k));
    }
    assert!(hits.load(Ordering::Relaxed) > 0);
}
