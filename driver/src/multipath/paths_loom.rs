//! Loom model checks of a head's path list swap and path selection (`RUSTFLAGS="--cfg loom"`,
//! see docs/testing-loom.md): a channel-like reader checks the generation, reads the list
//! under a guard and picks a path while a writer publishes new lists in one batch; the
//! stand-in collector makes loom report any free of a list a reader may still hold.

use super::paths::{retire, Path, PathCell, PathList, PathState};
use super::policy::{pick, PathPolicy};
use crate::namespace::{Namespace, NamespaceIdentity};
use crate::namespaces::epoch::pin;
use loom::thread;
use std::sync::Arc;

fn list(ns: &Arc<Namespace>, states: &[PathState]) -> PathList {
    PathList {
        paths: states
            .iter()
            .enumerate()
            .map(|(controller, &state)| Path {
                controller,
                namespace: ns.clone(),
                state,
                numa_node: None,
            })
            .collect(),
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// What a reader sees: one whole list (never a mix), and a pick that is usable in it.
fn read_and_pick(cell: &PathCell) -> (usize, Option<usize>) {
    let generation = cell.generation();
    let guard = pin();
    let chosen = cell.read(&guard, |l| {
        let opt = l.mask(PathState::Optimized);
        let non = l.mask(PathState::NonOptimized);
        let tier = if opt != 0 { opt } else { non };
        (tier != 0).then(|| {
            let mut cursor = 31;
            let i = pick(PathPolicy::RoundRobin, tier, 0, &mut cursor, |_| 0);
            assert!(l.paths[i].state.is_usable(), "picked an unusable path");
            i
        })
    });
    (generation, chosen)
}

#[test]
fn readers_see_whole_lists_and_frees_wait_for_them() {
    model(|| {
        let ns = Arc::new(Namespace::new(1, NamespaceIdentity::default(), 8));
        let cell = Arc::new(PathCell::new(list(
            &ns,
            &[PathState::Inaccessible, PathState::Optimized],
        )));
        let c = cell.clone();
        let reader = thread::spawn(move || {
            let (g, pick) = read_and_pick(&c);
            // Before the swap path 1 is the only usable one; after it, path 0.
            assert!(matches!(pick, Some(0) | Some(1)));
            if g >= 2 {
                // The generation is bumped after the list is published: a reader that saw
                // the new generation sees the new list.
                let (_, again) = read_and_pick(&c);
                assert_eq!(again, Some(0));
            }
        });
        let guard = pin();
        let mut garbage = Vec::new();
        cell.publish(
            list(&ns, &[PathState::Optimized, PathState::Inaccessible]),
            &guard,
            &mut garbage,
        );
        retire(garbage, &guard);
        drop(guard);
        reader.join().unwrap();
        drop(pin());
        assert_eq!(cell.generation(), 2);
    });
}

#[test]
fn one_batch_publishes_many_heads() {
    model(|| {
        let ns = Arc::new(Namespace::new(1, NamespaceIdentity::default(), 8));
        let cells: Arc<Vec<PathCell>> = Arc::new(
            (0..2)
                .map(|_| PathCell::new(list(&ns, &[PathState::Inaccessible])))
                .collect(),
        );
        let c = cells.clone();
        let reader = thread::spawn(move || {
            for cell in c.iter() {
                let (g, pick) = read_and_pick(cell);
                if g >= 2 {
                    assert_eq!(pick, Some(0));
                }
            }
        });
        let guard = pin();
        let mut garbage = Vec::new();
        for cell in cells.iter() {
            cell.publish(list(&ns, &[PathState::Optimized]), &guard, &mut garbage);
        }
        assert_eq!(garbage.len(), 2);
        retire(garbage, &guard);
        drop(guard);
        reader.join().unwrap();
        drop(pin());
    });
}
