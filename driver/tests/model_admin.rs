//! Admin path against the model: discovery of many namespaces, pipelined admin batches,
//! admin errors.

use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};
use vfnvme::spec::identify::IdentifyNamespace;
use vfnvme::spec::Command;
use vfnvme::Error;

fn many_namespaces(n: u32) -> ModelConfig {
    ModelConfig {
        namespaces: (1..=n)
            .map(|nsid| ModelNamespaceConfig {
                nsid,
                blocks: 1000 + nsid as u64,
                lba_size: if nsid % 2 == 0 { 4096 } else { 512 },
                backing: Backing::Null,
            })
            .collect(),
        io_latency_ns: 0,
        admin_latency_ns: 1_000,
        ..ModelConfig::default()
    }
}

#[test]
fn discovery_finds_every_namespace_with_its_format() {
    let platform = ModelPlatform::new(many_namespaces(40)).unwrap();
    let ctrl = Controller::new(platform, ControllerOptions::default()).unwrap();
    let all = ctrl.namespaces();
    assert_eq!(all.len(), 40);
    for ns in all {
        assert_eq!(ns.blocks(), 1000 + ns.nsid() as u64);
        let want = if ns.nsid() % 2 == 0 { 4096 } else { 512 };
        assert_eq!(ns.lba_size(), want, "nsid {}", ns.nsid());
    }
}

#[test]
fn admin_batch_pipelines_past_the_queue_depth() {
    let platform = ModelPlatform::new(many_namespaces(20)).unwrap();
    let ctrl = Controller::new(
        platform.clone(),
        ControllerOptions {
            admin_depth: 4,
            ..Default::default()
        },
    )
    .unwrap();
    let bufs: Vec<_> = (0..20).map(|_| ctrl.dma().alloc(4096).unwrap()).collect();
    let cmds: Vec<Command> = bufs
        .iter()
        .enumerate()
        .map(|(i, b)| Command::identify_namespace(i as u32 + 1, b.iova()))
        .collect();
    let t0 = platform.now_ns();
    let mut seen = [false; 20];
    ctrl.admin_batch(&cmds, |i, r| {
        assert!(r.is_ok(), "{i}: {:?}", r.err());
        seen[i] = true;
    });
    assert!(seen.iter().all(|&s| s));
    // Three in flight at a time (depth 4): well under 20 serial latencies.
    let elapsed = platform.now_ns() - t0;
    assert!(elapsed < 20 * 1_000, "pipelined: {elapsed} ns");
    for (i, b) in bufs.iter().enumerate() {
        let id = IdentifyNamespace::parse(b.as_slice()).unwrap();
        assert_eq!(id.nsze, 1000 + i as u64 + 1);
    }
}

#[test]
fn admin_errors_are_typed() {
    let platform = ModelPlatform::new(many_namespaces(1)).unwrap();
    let ctrl = Controller::new(platform, ControllerOptions::default()).unwrap();
    let e = ctrl.admin_sync(Command::new(0xbf)).unwrap_err();
    match &e {
        Error::AdminFailed {
            opcode: 0xbf,
            status,
        } => {
            assert_eq!((status.sct, status.sc), (0, 0x01));
        }
        other => panic!("expected AdminFailed, got {other}"),
    }
    assert!(e.to_string().contains("Invalid Command Opcode"), "{e}");
}
