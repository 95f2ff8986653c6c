//! Namespace change events against the model: AERs stay armed, identity changes are a removal
//! plus an addition, resizes change in place, detach/attach, overflowed change lists.

use std::sync::mpsc::Receiver;
use std::sync::Arc;

use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::namespace::NamespaceState;
use vfnvme::namespaces::NamespaceEvent;
use vfnvme::spec::command::admin_opcode;
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

fn ns(nsid: u32) -> ModelNamespaceConfig {
    ModelNamespaceConfig {
        nsid,
        blocks: 4096,
        lba_size: 512,
        backing: Backing::Ram,
    }
}

fn setup(
    count: u32,
) -> (
    Arc<ModelPlatform>,
    Controller<ModelPlatform>,
    Receiver<NamespaceEvent>,
) {
    let platform = ModelPlatform::new(ModelConfig {
        namespaces: (1..=count).map(ns).collect(),
        nn: 2048,
        aerl: 3,
        ..ModelConfig::default()
    })
    .unwrap();
    let ctrl = Controller::new(Arc::clone(&platform), ControllerOptions::default()).unwrap();
    let rx = ctrl.subscribe_namespace_events();
    (platform, ctrl, rx)
}

fn drain(rx: &Receiver<NamespaceEvent>) -> Vec<NamespaceEvent> {
    rx.try_iter().collect()
}

#[test]
fn nothing_happens_without_events() {
    let (_p, ctrl, rx) = setup(4);
    let r = ctrl.process_admin_completions().unwrap();
    assert_eq!(r.async_events, 0);
    assert!(r.scan.is_none());
    assert!(drain(&rx).is_empty());
}

#[test]
fn resize_is_a_change_in_place() {
    let (p, ctrl, rx) = setup(4);
    let before = ctrl.namespace(2).unwrap();
    p.resize_namespace(2, 9999).unwrap();
    let r = ctrl.process_admin_completions().unwrap();
    assert_eq!(r.namespace_notices, 1);
    let scan = r.scan.unwrap();
    assert!(!scan.full, "only the listed namespace is rescanned");
    assert_eq!(scan.probed, 1);
    assert_eq!(scan.resized, [2]);
    assert_eq!(drain(&rx), [NamespaceEvent::Changed(2)]);
    assert!(
        Arc::ptr_eq(&before, &ctrl.namespace(2).unwrap()),
        "same object"
    );
    assert_eq!(before.blocks(), 9999);
    assert_eq!(before.state(), NamespaceState::Active);
}

#[test]
fn identity_change_is_a_removal_plus_an_addition() {
    let (p, ctrl, rx) = setup(4);
    let before = ctrl.namespace(3).unwrap();
    p.change_identity(3).unwrap();
    let scan = ctrl.process_admin_completions().unwrap().scan.unwrap();
    assert_eq!(scan.removed, [3]);
    assert_eq!(scan.added, [3]);
    assert_eq!(
        drain(&rx),
        [NamespaceEvent::Removed(3), NamespaceEvent::Added(3)]
    );
    let after = ctrl.namespace(3).unwrap();
    assert!(!Arc::ptr_eq(&before, &after));
    assert_ne!(before.identity(), after.identity());
    assert_ne!(
        before.state(),
        NamespaceState::Active,
        "the old one is retired"
    );
    assert_eq!(after.state(), NamespaceState::Active);
}

#[test]
fn detach_and_attach_follow_and_aers_are_rearmed_every_time() {
    let (p, ctrl, rx) = setup(8);
    for round in 0..6u32 {
        let nsid = 1 + round % 8;
        p.detach_namespace(nsid).unwrap();
        let scan = ctrl.process_admin_completions().unwrap().scan.unwrap();
        assert_eq!(scan.removed, [nsid], "round {round}");
        assert!(ctrl.namespace(nsid).is_none());
        p.attach_namespace(ns(nsid)).unwrap();
        let scan = ctrl.process_admin_completions().unwrap().scan.unwrap();
        assert_eq!(scan.added, [nsid], "round {round}");
        assert!(ctrl.namespace(nsid).is_some());
        assert_eq!(
            drain(&rx),
            [NamespaceEvent::Removed(nsid), NamespaceEvent::Added(nsid)]
        );
    }
    // Every event consumed one AER and each was re-armed (AERL + 1 = 4 keep waiting).
    assert_eq!(p.stats().admin(admin_opcode::ASYNC_EVENT_REQUEST), 12);
    assert_eq!(ctrl.namespaces().len(), 8);
}

#[test]
fn several_changes_in_one_notice_rescan_only_the_listed_namespaces() {
    let (p, ctrl, rx) = setup(16);
    p.detach_namespace(5).unwrap();
    p.resize_namespace(6, 100).unwrap();
    p.attach_namespace(ns(100)).unwrap();
    let r = ctrl.process_admin_completions().unwrap();
    assert_eq!(r.namespace_notices, 1, "masked until the log page is read");
    let scan = r.scan.unwrap();
    assert_eq!(scan.probed, 3);
    assert_eq!(scan.removed, [5]);
    assert_eq!(scan.resized, [6]);
    assert_eq!(scan.added, [100]);
    let mut events = drain(&rx);
    events.sort_by_key(|e| e.nsid());
    assert_eq!(
        events,
        [
            NamespaceEvent::Removed(5),
            NamespaceEvent::Changed(6),
            NamespaceEvent::Added(100)
        ]
    );
}

#[test]
fn overflowed_change_list_means_a_full_rescan() {
    let (p, ctrl, rx) = setup(32);
    p.detach_namespace(7).unwrap();
    p.detach_namespace(8).unwrap();
    p.resize_namespace(9, 77).unwrap();
    p.set_changed_list_overflow(true);
    let logs_before = p.stats().admin(admin_opcode::GET_LOG_PAGE);
    let r = ctrl.process_admin_completions().unwrap();
    assert_eq!(p.stats().admin(admin_opcode::GET_LOG_PAGE), logs_before + 1);
    assert!(r.list_overflowed);
    let scan = r.scan.unwrap();
    assert!(scan.full);
    assert_eq!(scan.probed, 30);
    assert_eq!(scan.removed, [7, 8]);
    assert_eq!(scan.resized, [9]);
    let mut events = drain(&rx);
    events.sort_by_key(|e| e.nsid());
    assert_eq!(
        events,
        [
            NamespaceEvent::Removed(7),
            NamespaceEvent::Removed(8),
            NamespaceEvent::Changed(9)
        ]
    );
}

#[test]
fn more_than_1024_changes_overflow_in_the_model_too() {
    let (p, ctrl, _rx) = setup(1100);
    for nsid in 1..=1100 {
        p.resize_namespace(nsid, 5000).unwrap();
    }
    let r = ctrl.process_admin_completions().unwrap();
    assert!(r.list_overflowed);
    assert_eq!(r.scan.unwrap().resized.len(), 1100);
    assert!(ctrl.namespaces().iter().all(|n| n.blocks() == 5000));
}

#[test]
fn dropping_the_controller_removes_every_namespace() {
    let (_p, ctrl, rx) = setup(5);
    let held = ctrl.namespaces();
    drop(ctrl);
    assert!(held.iter().all(|n| n.state() != NamespaceState::Active));
    let mut removed: Vec<u32> = drain(&rx).iter().map(|e| e.nsid()).collect();
    removed.sort_unstable();
    assert_eq!(removed, [1, 2, 3, 4, 5]);
}
