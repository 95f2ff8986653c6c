//! Namespace scans against the model: holes in the nsid space, 4096 namespaces (paginated
//! Active Namespace ID list), the 1..=NN fallback, pipelining, rescans that change nothing.

use std::sync::Arc;

use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::namespaces::ScanMode;
use vfnvme::spec::command::admin_opcode;
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

fn ns(nsid: u32, lba_size: u32) -> ModelNamespaceConfig {
    ModelNamespaceConfig {
        nsid,
        blocks: 1000 + u64::from(nsid),
        lba_size,
        backing: Backing::Null,
    }
}

fn model(nsids: &[u32], nn: u32) -> ModelConfig {
    ModelConfig {
        namespaces: nsids
            .iter()
            .map(|&n| ns(n, if n % 3 == 0 { 4096 } else { 512 }))
            .collect(),
        nn,
        io_latency_ns: 1_000,
        admin_latency_ns: 10_000,
        max_queue_entries: 4096,
        ..ModelConfig::default()
    }
}

fn check_found(ctrl: &Controller<ModelPlatform>, nsids: &[u32]) {
    let found: Vec<u32> = ctrl.namespaces().iter().map(|n| n.nsid()).collect();
    assert_eq!(found, nsids);
    for &nsid in nsids {
        let n = ctrl.namespace(nsid).expect("registered");
        assert_eq!(n.blocks(), 1000 + u64::from(nsid));
        let want = if nsid % 3 == 0 { 4096 } else { 512 };
        assert_eq!(n.lba_size(), want, "nsid {nsid}");
        assert_ne!(n.identity().uuid, [0; 16], "descriptors gave no UUID");
        assert_eq!(
            ctrl.with_namespace(nsid, |n| n.nsid()),
            Some(nsid),
            "lock-free lookup"
        );
    }
}

#[test]
fn scan_with_holes_finds_exactly_the_active_namespaces() {
    let nsids = [1, 3, 7, 63, 64, 65, 1000, 1025, 4000, 4096];
    let platform = ModelPlatform::new(model(&nsids, 4096)).unwrap();
    let ctrl = Controller::new(platform, ControllerOptions::default()).unwrap();
    check_found(&ctrl, &nsids);
    for hole in [2, 4, 62, 66, 999, 4095] {
        assert!(ctrl.namespace(hole).is_none(), "nsid {hole} is a hole");
        assert!(ctrl.with_namespace(hole, |_| ()).is_none());
    }
}

#[test]
fn scan_of_4096_namespaces_pages_through_the_active_list() {
    let nsids: Vec<u32> = (1..=4096).collect();
    let platform = ModelPlatform::new(model(&nsids, 4096)).unwrap();
    let ctrl = Controller::new(platform.clone(), ControllerOptions::default()).unwrap();
    check_found(&ctrl, &nsids);
    let report = ctrl.rescan().unwrap();
    assert!(report.full);
    assert!(!report.used_fallback);
    assert_eq!(report.probed, 4096);
    // 5 list pages (the 4th is full, so a 5th, empty one confirms the end) + 2 per namespace.
    assert_eq!(report.admin_commands, 5 + 2 * 4096);
    assert!(report.added.is_empty() && report.removed.is_empty() && report.resized.is_empty());
}

#[test]
fn controller_without_active_list_is_probed_one_nsid_at_a_time_up_to_nn() {
    let nsids = [2, 5, 6, 30];
    let platform = ModelPlatform::new(ModelConfig {
        legacy_identify: true,
        ..model(&nsids, 32)
    })
    .unwrap();
    let ctrl = Controller::new(platform, ControllerOptions::default()).unwrap();
    let found: Vec<u32> = ctrl.namespaces().iter().map(|n| n.nsid()).collect();
    assert_eq!(found, nsids);
    for &nsid in &nsids {
        let n = ctrl.namespace(nsid).unwrap();
        assert_eq!(n.blocks(), 1000 + u64::from(nsid));
        // No descriptor list: the identity comes from Identify Namespace alone.
        assert_eq!(n.identity().uuid, [0; 16]);
        assert_ne!(n.identity().eui64, [0; 8]);
    }
    let report = ctrl.rescan().unwrap();
    assert!(report.used_fallback);
    assert_eq!(report.probed, 32);
}

#[test]
fn pipelined_scan_keeps_the_admin_queue_full() {
    let nsids: Vec<u32> = (1..=512).collect();
    let cfg = ModelConfig {
        admin_latency_ns: 1_000_000,
        ..model(&nsids, 512)
    };
    let platform = ModelPlatform::new(cfg).unwrap();
    let ctrl = Controller::new(Arc::clone(&platform), ControllerOptions::default()).unwrap();
    let all: Vec<u32> = ctrl.namespaces().iter().map(|n| n.nsid()).collect();

    ctrl.remove_namespaces(&all);
    let t0 = platform.now_ns();
    let doorbells = platform.stats().sq_doorbell_writes;
    let piped = ctrl.rescan_with(ScanMode::Pipelined).unwrap();
    let piped_ns = platform.now_ns() - t0;
    assert_eq!(piped.added.len(), 512);
    // One doorbell per round: 1 list page + the probe rounds, not one per command.
    let piped_doorbells = platform.stats().sq_doorbell_writes - doorbells;
    assert!(piped_doorbells <= 8, "{piped_doorbells} doorbells");

    ctrl.remove_namespaces(&all);
    let t1 = platform.now_ns();
    let doorbells = platform.stats().sq_doorbell_writes;
    let serial = ctrl.rescan_with(ScanMode::OneAtATime).unwrap();
    let serial_ns = platform.now_ns() - t1;
    assert_eq!(serial.added.len(), 512);
    // One at a time: one doorbell per command.
    assert_eq!(
        platform.stats().sq_doorbell_writes - doorbells,
        serial.admin_commands as u64
    );
    // 1024 probes over 255 slots: 5 rounds of 1 ms, plus 1 list page.
    assert!(piped_ns <= 7_000_000, "pipelined scan took {piped_ns} ns");
    assert!(
        serial_ns >= 1_025_000_000,
        "serial scan took {serial_ns} ns"
    );
    assert!(platform.stats().admin(admin_opcode::IDENTIFY) > 3 * 1024);
}

#[test]
fn non_nvm_command_set_gets_its_csi_specific_identify() {
    let nsids = [1, 2, 3];
    let platform = ModelPlatform::new(ModelConfig {
        namespace_csi: vec![(2, 2)],
        ..model(&nsids, 8)
    })
    .unwrap();
    let ctrl = Controller::new(Arc::clone(&platform), ControllerOptions::default()).unwrap();
    check_found(&ctrl, &nsids);
    assert_eq!(ctrl.namespace(2).unwrap().identity().csi, 2);
    assert_eq!(ctrl.namespace(1).unwrap().identity().csi, 0);
    // Identify Controller + active list + 3 × (namespace, descriptors) + 1 × CNS 05h.
    assert_eq!(
        platform.stats().admin(admin_opcode::IDENTIFY),
        1 + 1 + 6 + 1
    );
    let report = ctrl.rescan().unwrap();
    assert_eq!(report.admin_commands, 1 + 6 + 1);
    assert!(report.failed.is_empty() && report.added.is_empty());
}
