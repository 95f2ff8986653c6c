//! Rebuilding the heads: every head's paths recomputed from the live controllers'
//! namespaces and ANA states, and the changed ones published in one batch.

use super::{Subsystem, Writer};
use crate::controller::Controller;
use crate::multipath::head::{Head, UniqueId};
use crate::multipath::paths::{retire, Path, PathList, PathState};
use crate::namespaces::epoch::pin;
use crate::platform::Platform;
use crate::spec::ana::AnaState;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl<P: Platform> Subsystem<P> {
    /// Recomputes every head's paths from the live controllers' namespaces and ANA states and
    /// publishes the heads that changed in one batch (one grace period for all old lists);
    /// heads of `bump` controllers are republished even if unchanged (a reset finished: their
    /// channels may use the paths again), and every head if `all` (a removed controller was
    /// released: every channel must look again and drop its queue pair there). Returns
    /// (heads changed, heads removed).
    pub(super) fn rebuild(&self, w: &mut Writer, bump: &[usize], all: bool) -> (usize, usize) {
        let now = self.now_ns();
        let mut found: BTreeMap<(u32, UniqueId), Vec<Path>> = BTreeMap::new();
        let mut changing = HashMap::new();
        for (i, slot) in self.members.iter().enumerate() {
            let Some(m) = slot.get().filter(|m| m.alive.load(Ordering::Acquire)) else {
                continue;
            };
            let Some(ctrl) = m.ctrl() else { continue };
            let ana_log = ctrl.ana_log();
            if let Some(log) = &ana_log {
                w.ana_seen.insert(i, log.clone());
            }
            for ns in ctrl.namespaces() {
                let grp = ns.identity().anagrpid;
                let ana = if ctrl.reports_ana() {
                    match ana_log.as_ref().map(|l| l.state_of(grp)) {
                        Some(Some(s)) => Some(s),
                        // No page, or the group is not listed: don't send I/O there.
                        _ => Some(AnaState::Inaccessible),
                    }
                } else {
                    None
                };
                let mut state = PathState::from_ana(ana);
                if state == PathState::Change {
                    let since = *w.change_since.get(&(i, grp)).unwrap_or(&now);
                    changing.insert((i, grp), since);
                    if now.saturating_sub(since) > anatt_ns(&ctrl) {
                        // ANATT passed: the transition failed; treat it as inaccessible.
                        state = PathState::Inaccessible;
                    }
                }
                if !ns.io_ready() {
                    state = PathState::Gone;
                }
                let uid = UniqueId::of(ns.identity(), i);
                found.entry((ns.nsid(), uid)).or_default().push(Path {
                    controller: i,
                    namespace: ns,
                    state,
                    numa_node: m.numa,
                });
            }
        }
        w.change_since = changing;
        // The paths of a head must agree on the format (block size, metadata, PI): a request
        // made for one path must mean the same bytes on every other it may fail over to. The
        // first usable path (lowest controller index) sets it; a path that disagrees is not
        // used, and is reported once.
        for ((nsid, _), paths) in found.iter_mut() {
            let Some(reference) = paths
                .iter()
                .find(|p| p.state != PathState::Gone)
                .or(paths.first())
                .map(|p| (p.controller, *p.namespace.identity()))
            else {
                continue;
            };
            for p in paths.iter_mut() {
                let id = p.namespace.identity();
                if id.same_format(&reference.1) {
                    continue;
                }
                if w.format_mismatch_logged.insert((*nsid, p.controller)) {
                    log::warn!(
                        "subsystem {}: namespace {nsid} is formatted {} on controller {} but {} on controller {}: that path is not used (the same LBA would mean other bytes there)",
                        self.nqn,
                        id.format_label(),
                        p.controller,
                        reference.1.format_label(),
                        reference.0
                    );
                }
                p.state = PathState::Gone;
            }
        }
        // Identifier mismatches under one nsid: separate heads, reported once.
        let mut by_nsid: BTreeMap<u32, usize> = BTreeMap::new();
        for (nsid, _) in found.keys() {
            *by_nsid.entry(*nsid).or_default() += 1;
        }
        for (&nsid, &n) in &by_nsid {
            if n > 1 && w.mismatch_logged.insert(nsid) {
                log::warn!(
                    "subsystem {}: namespace {nsid} reports {n} different identifiers on different controllers; kept as {n} separate heads, never merged",
                    self.nqn
                );
            }
        }
        let old = self.heads.snapshot();
        let mut old_by_key: HashMap<(u32, UniqueId), Arc<Head>> = old
            .iter()
            .map(|h| ((h.nsid(), h.unique_id()), h.clone()))
            .collect();
        let guard = pin();
        let mut garbage = Vec::new();
        let mut keep = Vec::with_capacity(found.len());
        let mut set_changed = false;
        let (mut changed, mut removed) = (0, 0);
        let publish = |head: &Arc<Head>, list: PathList, garbage: &mut Vec<_>| -> bool {
            let bumped = all || list.paths.iter().any(|p| bump.contains(&p.controller));
            let (same, was_usable) = head
                .paths
                .read(&guard, |l| (l.same_as(&list), l.any_usable()));
            let usable = list.any_usable();
            let current = head.deadline_ns.load(Ordering::Acquire);
            let wait = head.delayed_removal_ns();
            let finite = current < u64::MAX - 1;
            let deadline = if usable {
                u64::MAX
            } else if list.paths.is_empty() {
                // No path at all: removed once the delayed removal runs out (at once if 0).
                let end = if wait == 0 {
                    now
                } else {
                    now.saturating_add(wait)
                };
                if finite {
                    current.min(end)
                } else {
                    end
                }
            } else if was_usable || current == u64::MAX {
                // Paths, none usable: queue for the delayed removal time (for ever if 0).
                if wait == 0 {
                    u64::MAX - 1
                } else {
                    now.saturating_add(wait)
                }
            } else {
                current
            };
            head.deadline_ns.store(deadline, Ordering::Release);
            if same && !bumped {
                return false;
            }
            head.paths.publish(list, &guard, garbage);
            true
        };
        for (key, paths) in found {
            let head = match old_by_key.remove(&key) {
                Some(h) => h,
                None => {
                    set_changed = true;
                    Arc::new(Head::new(key.0, key.1, self.defaults))
                }
            };
            if publish(&head, PathList { paths }, &mut garbage) {
                changed += 1;
            }
            keep.push(head);
        }
        // Heads whose namespace is gone from every live controller: kept (queueing) until
        // their delayed removal runs out, then removed.
        for (_, head) in old_by_key {
            if publish(&head, PathList::default(), &mut garbage) {
                changed += 1;
            }
            let deadline = head.deadline_ns.load(Ordering::Acquire);
            if deadline <= now {
                head.mark_removed();
                removed += 1;
                set_changed = true;
            } else {
                keep.push(head);
            }
        }
        if set_changed {
            self.heads.replace(keep);
        }
        if !garbage.is_empty() || set_changed {
            self.publications.fetch_add(1, Ordering::Relaxed);
        }
        retire(garbage, &guard);
        (changed, removed)
    }
}

/// ANATT of a controller in ns (at least one second).
pub(super) fn anatt_ns<P: Platform>(ctrl: &Controller<P>) -> u64 {
    u64::from(ctrl.identify().identify.anatt.max(1)) * 1_000_000_000
}
