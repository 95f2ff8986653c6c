//! Subsystem events: what a poll reported plus the differences between the heads' path lists
//! before and after it.

use super::types::{MpEvent, MpEventKind, MpPathState};
use std::collections::BTreeMap;
use std::sync::Arc;
use vfnvme::multipath::{Head, SubsystemReport};

/// The heads' paths at one moment: by head (address, which tells apart two heads of one
/// nsid), its nsid and (controller, state) per path. It holds the heads, so that an address
/// is not reused while the snapshot lives.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    paths: BTreeMap<usize, (u32, Vec<(usize, MpPathState)>)>,
    _heads: Vec<Arc<Head>>,
}

impl Snapshot {
    /// The paths of `heads` now.
    pub fn of(heads: &[Arc<Head>]) -> Self {
        Snapshot {
            paths: heads
                .iter()
                .map(|h| {
                    let paths = h
                        .paths()
                        .paths
                        .iter()
                        .map(|p| (p.controller, MpPathState::of(p.state)))
                        .collect();
                    (Arc::as_ptr(h) as usize, (h.nsid(), paths))
                })
                .collect(),
            _heads: heads.to_vec(),
        }
    }
}

fn path_event(
    kind: MpEventKind,
    nsid: u32,
    ctrl: usize,
    old: MpPathState,
    new: MpPathState,
) -> MpEvent {
    MpEvent {
        nsid,
        controller: i32::try_from(ctrl).unwrap_or(-1),
        old_state: old,
        new_state: new,
        ..MpEvent::new(kind)
    }
}

/// The events between `old` and `new` after a poll that reported `report`, appended to `out`
/// in this order: controllers lost and reset, ANA notices, heads added, path changes, heads
/// removed.
pub fn diff(old: &Snapshot, new: &Snapshot, report: &SubsystemReport, out: &mut Vec<MpEvent>) {
    for &c in &report.controllers_lost {
        out.push(MpEvent {
            controller: i32::try_from(c).unwrap_or(-1),
            ..MpEvent::new(MpEventKind::VfnvmeMpEventControllerLost)
        });
    }
    for &c in &report.controllers_reset {
        out.push(MpEvent {
            controller: i32::try_from(c).unwrap_or(-1),
            ..MpEvent::new(MpEventKind::VfnvmeMpEventControllerReset)
        });
    }
    if report.ana_notices > 0 {
        out.push(MpEvent {
            count: u32::try_from(report.ana_notices).unwrap_or(u32::MAX),
            ..MpEvent::new(MpEventKind::VfnvmeMpEventAnaChange)
        });
    }
    let none = MpPathState::VfnvmePathNone;
    for (key, (nsid, paths)) in &new.paths {
        let before = old.paths.get(key).map(|(_, p)| p.as_slice()).unwrap_or(&[]);
        if !old.paths.contains_key(key) {
            out.push(MpEvent {
                nsid: *nsid,
                ..MpEvent::new(MpEventKind::VfnvmeMpEventHeadAdded)
            });
        }
        for &(c, state) in paths {
            match before.iter().find(|(b, _)| *b == c) {
                None => out.push(path_event(
                    MpEventKind::VfnvmeMpEventPathAdded,
                    *nsid,
                    c,
                    none,
                    state,
                )),
                Some(&(_, was)) if was != state => out.push(path_event(
                    MpEventKind::VfnvmeMpEventPathState,
                    *nsid,
                    c,
                    was,
                    state,
                )),
                Some(_) => {}
            }
        }
        for &(c, was) in before {
            if !paths.iter().any(|(p, _)| *p == c) {
                out.push(path_event(
                    MpEventKind::VfnvmeMpEventPathRemoved,
                    *nsid,
                    c,
                    was,
                    none,
                ));
            }
        }
    }
    for (key, (nsid, _)) in &old.paths {
        if !new.paths.contains_key(key) {
            out.push(MpEvent {
                nsid: *nsid,
                ..MpEvent::new(MpEventKind::VfnvmeMpEventHeadRemoved)
            });
        }
    }
}
