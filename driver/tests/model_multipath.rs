//! Multipath heads on the model subsystem: heads and their paths, identifier mismatch, path
//! policies (numa, round-robin, queue-depth) and ANA tiers, the subsystem's admission rules.

mod mp_util;

use mp_util::{drain, pattern, rig, rig_with, Rig};
use std::sync::Arc;
use vfnvme::multipath::{
    ChannelOptions, HeadOptions, IoChannel, MultipathError, PathPolicy, PathState, Subsystem,
    UniqueId,
};
use vfnvme::{Controller, ControllerOptions};
use vfnvme_model::{AnaState, ModelConfig, ModelPlatform, ModelSubsystem, ModelSubsystemConfig};

fn per_path(ch: &IoChannel<ModelPlatform>) -> Vec<u64> {
    ch.stats().per_path[..4].to_vec()
}

/// Writes `n` single-block requests (tags 0..n) and waits for them; returns per-path counts.
fn write_n(rig: &Rig, ch: &mut IoChannel<ModelPlatform>, n: u64) -> Vec<u64> {
    let before = per_path(ch);
    for k in 0..n {
        let mut buf = rig.ctrls[0].dma().alloc(512).unwrap();
        buf.as_mut_slice().copy_from_slice(&pattern(k, 512));
        ch.write(k, 1, buf, k).unwrap();
    }
    ch.commit();
    let done = drain(rig, ch, n as usize, 10_000);
    assert_eq!(done.len() as u64, n);
    assert!(
        done.iter().all(|c| c.is_ok()),
        "{:?}",
        done.iter().find(|c| !c.is_ok())
    );
    per_path(ch)
        .iter()
        .zip(before)
        .map(|(a, b)| a - b)
        .collect()
}

#[test]
fn one_head_per_namespace_with_a_path_per_controller() {
    let r = rig(3, 4, HeadOptions::default());
    let heads = r.mp.heads();
    assert_eq!(heads.len(), 4);
    for (h, nsid) in heads.iter().zip(1..) {
        assert_eq!(h.nsid(), nsid);
        assert!(matches!(h.unique_id(), UniqueId::Nguid(_)));
        let paths = h.paths();
        assert_eq!(
            paths.paths.iter().map(|p| p.controller).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert!(paths.paths.iter().all(|p| p.state == PathState::Optimized));
        let uid = UniqueId::of(paths.paths[0].namespace.identity(), 0);
        assert_eq!(uid, h.unique_id());
    }
    assert!(r.mp.head(5).is_none());
    assert_eq!(r.mp.nqn(), r.model.nqn());
    assert!(r.mp.publications() >= 1);
}

#[test]
fn identifier_mismatch_under_one_nsid_gives_separate_heads() {
    let r = rig(2, 2, HeadOptions::default());
    // Controller 1 now reports other identifiers for namespace 2.
    r.model.controller(1).unwrap().change_identity(2).unwrap();
    let report = r.mp.poll();
    assert!(report.namespace_events > 0);
    let heads = r.mp.heads_for(2);
    assert_eq!(heads.len(), 2, "never merged");
    assert_ne!(heads[0].unique_id(), heads[1].unique_id());
    let mut ctrls: Vec<usize> = heads
        .iter()
        .map(|h| {
            let p = h.paths();
            assert_eq!(p.paths.len(), 1);
            p.paths[0].controller
        })
        .collect();
    ctrls.sort();
    assert_eq!(ctrls, vec![0, 1]);
    assert_eq!(r.mp.heads_for(1).len(), 1);
    assert_eq!(r.mp.heads_for(1)[0].paths().paths.len(), 2);
}

#[test]
fn round_robin_spreads_and_numa_sticks_to_one_path() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 256);
    ch.head().set_policy(PathPolicy::RoundRobin);
    assert_eq!(write_n(&r, &mut ch, 100), vec![50, 50, 0, 0]);
    ch.head().set_policy(PathPolicy::Numa);
    let n = write_n(&r, &mut ch, 40);
    assert!(
        n == vec![40, 0, 0, 0],
        "numa without nodes: the first optimized path: {n:?}"
    );
}

#[test]
fn numa_prefers_the_channel_node() {
    let r = rig_with(2, 1, vec![], HeadOptions::default(), |_| {});
    // Rebuild the subsystem with NUMA nodes for the two controllers.
    let mp = Subsystem::new(r.model.nqn(), HeadOptions::default());
    mp.add_controller(r.ctrls[0].clone(), Some(0)).unwrap();
    mp.add_controller(r.ctrls[1].clone(), Some(1)).unwrap();
    let mut ch = IoChannel::open(
        mp.clone(),
        mp.head(1).unwrap(),
        ChannelOptions {
            numa_node: Some(1),
            ..ChannelOptions::default()
        },
    )
    .unwrap();
    let r2 = Rig {
        model: r.model,
        ctrls: r.ctrls,
        mp,
    };
    assert_eq!(write_n(&r2, &mut ch, 20), vec![0, 20, 0, 0]);
    // Its node's path becomes non-optimized: the optimized one wins over locality.
    r2.set(1, 1, AnaState::NonOptimized);
    assert_eq!(write_n(&r2, &mut ch, 20), vec![20, 0, 0, 0]);
}

#[test]
fn queue_depth_balances_outstanding_requests() {
    let r = rig(3, 1, HeadOptions::default());
    let mut ch = r.channel(1, 1024);
    ch.head().set_policy(PathPolicy::QueueDepth);
    // All submitted before any completes: the least busy path each time.
    let n = write_n(&r, &mut ch, 90);
    assert_eq!(n, vec![30, 30, 30, 0]);
}

#[test]
fn optimized_before_non_optimized_and_never_inaccessible() {
    let r = rig(3, 1, HeadOptions::default());
    let mut ch = r.channel(1, 256);
    ch.head().set_policy(PathPolicy::RoundRobin);
    r.set(0, 1, AnaState::NonOptimized);
    assert_eq!(write_n(&r, &mut ch, 40), vec![0, 20, 20, 0]);
    r.set(1, 1, AnaState::Inaccessible);
    assert_eq!(write_n(&r, &mut ch, 40), vec![0, 0, 40, 0]);
    r.set(2, 1, AnaState::PersistentLoss);
    assert_eq!(
        write_n(&r, &mut ch, 40),
        vec![40, 0, 0, 0],
        "non-optimized when nothing better"
    );
    r.set(0, 1, AnaState::Change);
    r.set(1, 1, AnaState::Optimized);
    assert_eq!(write_n(&r, &mut ch, 40), vec![0, 40, 0, 0]);
    let states: Vec<PathState> = ch.head().paths().paths.iter().map(|p| p.state).collect();
    assert_eq!(
        states,
        vec![
            PathState::Change,
            PathState::Optimized,
            PathState::PersistentLoss
        ]
    );
}

#[test]
fn policy_switches_while_io_runs() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 4096);
    let head = ch.head().clone();
    let mut tag = 0u64;
    let mut done = 0;
    for round in 0..30 {
        head.set_policy(PathPolicy::ALL[round % 3]);
        for _ in 0..20 {
            let buf = r.ctrls[0].dma().alloc(512).unwrap();
            ch.write(tag % 4096, 1, buf, tag).unwrap();
            tag += 1;
        }
        ch.commit();
        ch.poll(usize::MAX, |c| {
            assert!(c.is_ok());
            done += 1;
        });
    }
    done += drain(&r, &mut ch, (tag - done) as usize, 10_000).len() as u64;
    assert_eq!(done, tag);
    let s = per_path(&ch);
    assert!(s[0] > 0 && s[1] > 0, "both paths used: {s:?}");
}

#[test]
fn admission_rules_are_typed_errors() {
    let r = rig(2, 1, HeadOptions::default());
    // A lone controller is not multi-controller.
    let lone = ModelPlatform::new(ModelConfig::default()).unwrap();
    let lone = Arc::new(Controller::new(lone, ControllerOptions::default()).unwrap());
    let e = r.mp.add_controller(lone, None).unwrap_err();
    assert!(
        matches!(e, MultipathError::NotMultiController { .. }),
        "{e}"
    );
    // Another subsystem's NQN.
    let other = ModelSubsystem::new(ModelSubsystemConfig {
        nqn: "nqn.2024-01.io.vfnvme:other".into(),
        ..ModelSubsystemConfig::default()
    })
    .unwrap();
    let o = Arc::new(
        Controller::new(
            other.controller(0).unwrap().clone(),
            ControllerOptions::default(),
        )
        .unwrap(),
    );
    let e = r.mp.add_controller(o, None).unwrap_err();
    assert!(matches!(e, MultipathError::SubsystemMismatch { .. }), "{e}");
    // Same NQN, but its own DMA pool.
    let twin = ModelSubsystem::new(ModelSubsystemConfig::default()).unwrap();
    let t = Arc::new(
        Controller::new(
            twin.controller(0).unwrap().clone(),
            ControllerOptions::default(),
        )
        .unwrap(),
    );
    let e = r.mp.add_controller(t, None).unwrap_err();
    assert!(matches!(e, MultipathError::DmaPoolMismatch { .. }), "{e}");
    let e = r.mp.add_controller(r.ctrls[0].clone(), None).unwrap_err();
    assert!(matches!(e, MultipathError::AlreadyMember { .. }), "{e}");
    let e = IoChannel::open(
        r.mp.clone(),
        r.mp.head(1).unwrap(),
        ChannelOptions {
            capacity: 0,
            ..ChannelOptions::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("capacity"));
}

#[test]
fn one_ana_change_publishes_many_heads_in_one_batch() {
    let r = rig(2, 64, HeadOptions::default());
    for c in 0..2 {
        r.model.set_ana_state(c, 1, AnaState::Inaccessible).unwrap();
    }
    r.mp.poll();
    assert!(r.mp.heads().iter().all(|h| !h.has_usable_path()));
    let gens: Vec<_> = r.mp.heads().iter().map(|h| h.paths().paths.len()).collect();
    assert!(gens.iter().all(|&n| n == 2));
    let before = r.mp.publications();
    r.model.set_ana_state(1, 1, AnaState::Optimized).unwrap();
    let report = r.mp.poll();
    assert_eq!(report.ana_notices, 1);
    assert_eq!(report.heads_changed, 64);
    assert!(r.mp.heads().iter().all(|h| h.has_usable_path()));
    assert_eq!(
        r.mp.publications() - before,
        1,
        "64 heads made usable by one ANA change: one publication (one grace period)"
    );
    // Nothing changed: nothing published.
    r.mp.poll();
    assert_eq!(r.mp.publications() - before, 1);
}

#[test]
fn channels_move_between_threads_and_subsystems_are_shared() {
    fn send<T: Send>() {}
    fn sync<T: Send + Sync>() {}
    send::<IoChannel<ModelPlatform>>();
    sync::<Subsystem<ModelPlatform>>();
    sync::<vfnvme::multipath::Head>();
    // A channel per thread on one head, I/O on both at once.
    let r = rig(2, 1, HeadOptions::default());
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let mut ch = r.channel(1, 256);
            let dma = r.ctrls[0].dma().clone();
            s.spawn(move || {
                for k in 0..64u64 {
                    let lba = t * 1024 + k;
                    let mut buf = dma.alloc(512).unwrap();
                    buf.as_mut_slice().copy_from_slice(&pattern(lba, 512));
                    ch.write(lba, 1, buf, lba).unwrap();
                }
                ch.commit();
                let mut done = 0;
                while done < 64 {
                    ch.poll(usize::MAX, |c| {
                        assert!(c.is_ok());
                        done += 1;
                    });
                }
            });
        }
    });
    let mut out = vec![0u8; 512];
    for t in 0..2u64 {
        for k in 0..64u64 {
            let lba = t * 1024 + k;
            r.model
                .controller(1)
                .unwrap()
                .read_stored(1, lba * 512, &mut out)
                .unwrap();
            assert_eq!(out, pattern(lba, 512));
        }
    }
}

#[test]
fn an_ana_change_consumed_by_the_application_still_reaches_the_heads() {
    let r = rig(2, 3, HeadOptions::default());
    r.model.set_ana_state(1, 1, AnaState::Inaccessible).unwrap();
    // The application polls controller 1 itself: the event and the ANA page are consumed there.
    let report = r.ctrls[1].process_admin_completions().unwrap();
    assert_eq!(report.ana_notices, 1);
    let s = r.mp.poll();
    assert_eq!(s.ana_notices, 0, "the subsystem saw no event of its own");
    assert_eq!(s.heads_changed, 3, "but noticed the new ANA page");
    for h in r.mp.heads() {
        let states: Vec<PathState> = h.paths().paths.iter().map(|p| p.state).collect();
        assert_eq!(states, vec![PathState::Optimized, PathState::Inaccessible]);
    }
}

#[test]
fn a_path_queue_pair_deeper_than_its_controller_allows_is_capped() {
    let r = rig_with(2, 1, vec![], HeadOptions::default(), |cfg| {
        cfg.base.max_queue_entries = 32;
    });
    assert_eq!(r.ctrls[0].identify().max_queue_depth, 32);
    let mut ch = IoChannel::open(
        r.mp.clone(),
        r.mp.head(1).unwrap(),
        ChannelOptions {
            qpair: vfnvme::QpairOptions {
                depth: 256,
                ..vfnvme::QpairOptions::default()
            },
            capacity: 256,
            ..ChannelOptions::default()
        },
    )
    .unwrap();
    // More requests than a 32-entry queue pair holds: the rest wait in the channel.
    assert_eq!(write_n(&r, &mut ch, 100), vec![100, 0, 0, 0]);
    assert_eq!(ch.open_paths(), 0b01);
    assert_eq!(ch.outstanding(), 0);
}
