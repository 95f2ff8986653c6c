//! Failover and queue-if-no-path on the model subsystem: path errors (ANA inaccessible under
//! I/O, a controller removed, a controller reset) resubmit on another path with the same
//! buffer and every acknowledged write reads back; with no usable path requests queue, and
//! are resubmitted when a path returns in time, or fail all at once when the delayed removal
//! runs out, when queueing is switched off, or when the head is removed.

mod mp_util;

use mp_util::{drain, pattern, rig, Rig};
use std::collections::BTreeMap;
use vfnvme::multipath::{ChannelError, HeadOptions, IoChannel, PathPolicy};
use vfnvme::platform::Platform;
use vfnvme_model::{AnaState, ModelPlatform};

const BLOCKS: u64 = 4096;

/// Submits writes of tags `tags` (one block at lba = tag % BLOCKS, pattern of the tag).
fn submit_writes(rig: &Rig, ch: &mut IoChannel<ModelPlatform>, tags: std::ops::Range<u64>) {
    for t in tags {
        let mut buf = rig.ctrls[0].dma().alloc(512).unwrap();
        buf.as_mut_slice().copy_from_slice(&pattern(t, 512));
        ch.write(t % BLOCKS, 1, buf, t).unwrap();
    }
    ch.commit();
}

/// Reads every block in `expect` through the channel and checks its pattern.
fn verify(rig: &Rig, ch: &mut IoChannel<ModelPlatform>, expect: &BTreeMap<u64, u64>) {
    for (&lba, _) in expect.iter() {
        let buf = rig.ctrls[0].dma().alloc(512).unwrap();
        ch.read(lba, 1, buf, lba).unwrap();
    }
    ch.commit();
    let done = drain(rig, ch, expect.len(), 100_000);
    assert_eq!(done.len(), expect.len());
    for c in done {
        assert!(c.is_ok(), "read of lba {}: {:?}", c.tag, c.result);
        let want = pattern(expect[&c.tag], 512);
        assert!(
            c.buffer.as_ref().unwrap().as_slice() == want.as_slice(),
            "lba {} reads back what was acknowledged",
            c.tag
        );
    }
}

fn acked(done: &[vfnvme::multipath::ChannelCompletion]) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    let mut tags: Vec<u64> = done.iter().filter(|c| c.is_ok()).map(|c| c.tag).collect();
    tags.sort();
    for t in tags {
        m.insert(t % BLOCKS, t);
    }
    m
}

fn exactly_once(done: &[vfnvme::multipath::ChannelCompletion], n: u64) {
    let mut seen = vec![0u32; n as usize];
    for c in done {
        seen[c.tag as usize] += 1;
    }
    assert!(
        seen.iter().all(|&k| k == 1),
        "every request completes exactly once"
    );
}

#[test]
fn ana_inaccessible_under_io_fails_over_with_data_intact() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 1024);
    ch.head().set_policy(PathPolicy::RoundRobin);
    // Queued on both paths (not yet rung)...
    for t in 0..400u64 {
        let mut buf = r.ctrls[0].dma().alloc(512).unwrap();
        buf.as_mut_slice().copy_from_slice(&pattern(t, 512));
        ch.write(t % BLOCKS, 1, buf, t).unwrap();
    }
    // ...when the device turns path 0 inaccessible before the driver hears of it: the
    // commands there complete with Asymmetric Access Inaccessible and go to path 1.
    r.model.set_ana_state(0, 1, AnaState::Inaccessible).unwrap();
    ch.commit();
    let mut done = drain(&r, &mut ch, 400, 100_000);
    submit_writes(&r, &mut ch, 400..800);
    done.extend(drain(&r, &mut ch, 400, 100_000));
    exactly_once(&done, 800);
    assert!(done.iter().all(|c| c.is_ok()), "no error reaches the user");
    let failed_over = done.iter().filter(|c| c.failovers > 0).count();
    assert!(failed_over > 0, "some requests were on path 0");
    assert!(done
        .iter()
        .filter(|c| c.failovers > 0)
        .all(|c| c.path == Some(1)));
    assert_eq!(ch.stats().failovers, failed_over as u64);
    assert_eq!(
        ch.head().paths().paths[0].state,
        vfnvme::multipath::PathState::Inaccessible
    );
    verify(&r, &mut ch, &acked(&done));
}

#[test]
fn controller_removed_under_io_fails_over() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 1024);
    ch.head().set_policy(PathPolicy::RoundRobin);
    submit_writes(&r, &mut ch, 0..300);
    // Path 0 is pulled: its in-flight commands end with "controller lost".
    r.model.controller(0).unwrap().request_removal();
    r.ctrls[0].mark_removed();
    let mut done = drain(&r, &mut ch, 300, 1_000_000);
    let report = r.mp.poll();
    assert!(report.controllers_lost.is_empty() || report.controllers_lost == vec![0]);
    assert_eq!(ch.head().paths().paths.len(), 1, "path 0 is gone");
    submit_writes(&r, &mut ch, 300..600);
    done.extend(drain(&r, &mut ch, 300, 100_000));
    exactly_once(&done, 600);
    assert!(
        done.iter().all(|c| c.is_ok()),
        "{:?}",
        done.iter().find(|c| !c.is_ok())
    );
    assert!(done
        .iter()
        .filter(|c| c.tag >= 300)
        .all(|c| c.path == Some(1)));
    assert!(
        done.iter().any(|c| c.failovers > 0),
        "requests in flight on the removed controller failed over"
    );
    verify(&r, &mut ch, &acked(&done));
}

#[test]
fn a_removed_controller_is_released_while_the_head_carries_on() {
    let mut r = rig(2, 1, HeadOptions::default());
    // Only the subsystem (and the channel's queue pair) may hold controller 0 from here on.
    let c0 = r.ctrls.remove(0);
    let weak = std::sync::Arc::downgrade(&c0);
    let model0 = r.model.controller(0).unwrap().clone();
    drop(c0);
    let mut ch = r.channel(1, 1024);
    ch.head().set_policy(PathPolicy::RoundRobin);
    submit_writes(&r, &mut ch, 0..300);
    assert_eq!(ch.open_paths(), 0b11);
    let held_before = std::sync::Arc::strong_count(&model0);
    model0.request_removal();
    let mut done = drain(&r, &mut ch, 300, 1_000_000);
    // The same channel keeps going on path 1 while path 0's device is let go of.
    submit_writes(&r, &mut ch, 300..600);
    done.extend(drain(&r, &mut ch, 300, 100_000));
    exactly_once(&done, 600);
    assert!(
        done.iter().all(|c| c.is_ok()),
        "{:?}",
        done.iter().find(|c| !c.is_ok())
    );
    assert!(
        weak.upgrade().is_none(),
        "the subsystem and the channel released the removed controller (strong count {})",
        weak.strong_count()
    );
    assert!(r.mp.controller(0).is_none());
    assert_eq!(
        ch.open_paths(),
        0b10,
        "the channel dropped its queue pair on path 0"
    );
    assert!(
        std::sync::Arc::strong_count(&model0) < held_before,
        "nothing of the driver holds the removed device's platform any more"
    );
    let named = r.mp.paths_named();
    assert_eq!(named.len(), 2);
    assert_eq!((named[0].2, named[0].3), (false, false), "{named:?}");
    assert_eq!((named[1].2, named[1].3), (true, true), "{named:?}");
    assert_eq!(r.mp.controllers().len(), 1);
    verify(&r, &mut ch, &acked(&done));
}

#[test]
fn a_controller_taken_out_then_removed_is_released_too() {
    let mut r = rig(2, 1, HeadOptions::default());
    let c0 = r.ctrls.remove(0);
    let weak = std::sync::Arc::downgrade(&c0);
    let model0 = r.model.controller(0).unwrap().clone();
    drop(c0);
    let mut ch = r.channel(1, 1024);
    ch.head().set_policy(PathPolicy::RoundRobin);
    submit_writes(&r, &mut ch, 0..100);
    let mut done = drain(&r, &mut ch, 100, 100_000);
    assert_eq!(ch.open_paths(), 0b11);
    // Out of the head first (the path list no longer names it), removed afterwards: the
    // channel still drops its queue pair there.
    assert!(r.mp.remove_controller(0));
    submit_writes(&r, &mut ch, 100..200);
    done.extend(drain(&r, &mut ch, 100, 100_000));
    assert_eq!(
        ch.open_paths(),
        0b11,
        "taken out, not removed: the queue pair stays"
    );
    model0.request_removal();
    submit_writes(&r, &mut ch, 200..300);
    done.extend(drain(&r, &mut ch, 100, 100_000));
    // The subsystem's poll notices the removal; the channel's next poll lets go.
    r.mp.poll();
    assert_eq!(ch.poll(usize::MAX, |c| done.push(c)), 0);
    exactly_once(&done, 300);
    assert!(done.iter().all(|c| c.is_ok()));
    assert_eq!(
        ch.open_paths(),
        0b10,
        "the channel dropped its queue pair on path 0"
    );
    assert!(
        weak.upgrade().is_none(),
        "the subsystem released controller 0"
    );
    verify(&r, &mut ch, &acked(&done));
}

#[test]
fn controller_reset_under_io_fails_over_and_the_path_returns() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 1024);
    ch.head().set_policy(PathPolicy::RoundRobin);
    submit_writes(&r, &mut ch, 0..200);
    r.ctrls[0].reset().unwrap();
    let mut done = drain(&r, &mut ch, 200, 1_000_000);
    let report = r.mp.poll();
    let _ = report;
    submit_writes(&r, &mut ch, 200..400);
    done.extend(drain(&r, &mut ch, 200, 100_000));
    exactly_once(&done, 400);
    assert!(
        done.iter().all(|c| c.is_ok()),
        "{:?}",
        done.iter().find(|c| !c.is_ok())
    );
    assert!(
        done.iter().any(|c| c.failovers > 0),
        "requests aborted by the reset failed over"
    );
    assert!(
        done.iter().any(|c| c.tag >= 200 && c.path == Some(0)),
        "path 0 is used again after the reset"
    );
    verify(&r, &mut ch, &acked(&done));
}

fn all_paths(r: &Rig, state: AnaState) {
    for c in 0..r.ctrls.len() {
        r.model.set_ana_state(c, 1, state).unwrap();
    }
    r.mp.poll();
}

#[test]
fn queued_requests_go_out_when_a_path_returns_in_time() {
    let r = rig(
        2,
        1,
        HeadOptions {
            delayed_removal_ms: 1_000,
            ..HeadOptions::default()
        },
    );
    let mut ch = r.channel(1, 1024);
    all_paths(&r, AnaState::Inaccessible);
    assert!(!ch.head().has_usable_path());
    submit_writes(&r, &mut ch, 0..500);
    assert_eq!(ch.queued(), 500);
    assert_eq!(
        ch.poll(usize::MAX, |_| panic!("nothing completes without a path")),
        0
    );
    // 500 ms of virtual time later (before the 1 s runs out) path 1 comes back.
    let p = r.model.controller(0).unwrap();
    let until = p.now_ns() + 500_000_000;
    while p.now_ns() < until {
        p.relax();
        assert_eq!(ch.poll(usize::MAX, |_| panic!("still waiting")), 0);
    }
    r.set(1, 1, AnaState::Optimized);
    let done = drain(&r, &mut ch, 500, 100_000);
    exactly_once(&done, 500);
    assert!(done.iter().all(|c| c.is_ok() && c.path == Some(1)));
    assert_eq!(ch.stats().queued, 500);
    verify(&r, &mut ch, &acked(&done));
}

#[test]
fn queued_requests_fail_at_once_when_the_delayed_removal_runs_out() {
    let r = rig(
        2,
        1,
        HeadOptions {
            delayed_removal_ms: 200,
            ..HeadOptions::default()
        },
    );
    let mut ch = r.channel(1, 1024);
    all_paths(&r, AnaState::Inaccessible);
    let lost_at = r.mp.now_ns();
    submit_writes(&r, &mut ch, 0..700);
    let p = r.model.controller(0).unwrap();
    let mut batches = Vec::new();
    while batches.is_empty() {
        p.relax();
        let mut got = Vec::new();
        ch.poll(usize::MAX, |c| got.push(c));
        if !got.is_empty() {
            batches.push((p.now_ns(), got));
        }
    }
    let (at, done) = batches.pop().unwrap();
    assert!(at >= lost_at + 200_000_000, "not before the time ran out");
    assert!(at < lost_at + 210_000_000, "soon after it");
    assert_eq!(done.len(), 700, "all at once, in one poll");
    exactly_once(&done, 700);
    for c in &done {
        assert!(matches!(
            c.result,
            Err(ChannelError::NoPathTimeout { nsid: 1 })
        ));
        assert!(c.buffer.is_some(), "the buffer comes back");
    }
    assert_eq!(ch.outstanding(), 0);
    assert_eq!(ch.stats().failed_no_path, 700);
}

#[test]
fn switching_queueing_off_fails_thousands_at_once() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 10_000);
    all_paths(&r, AnaState::Inaccessible);
    submit_writes(&r, &mut ch, 0..10_000);
    assert_eq!(ch.queued(), 10_000);
    let e = ch
        .write(0, 1, r.ctrls[0].dma().alloc(512).unwrap(), 99)
        .unwrap_err();
    assert!(matches!(
        e.error,
        ChannelError::ChannelFull { capacity: 10_000 }
    ));
    assert!(e.buffer.is_some());
    ch.head().set_queue_if_no_path(false);
    let mut done = Vec::new();
    let n = ch.poll(usize::MAX, |c| done.push(c));
    assert_eq!(n, 10_000, "one poll fails them all");
    exactly_once(&done, 10_000);
    assert!(done
        .iter()
        .all(|c| matches!(c.result, Err(ChannelError::QueueingOff { nsid: 1 }))));
    // New requests fail at submission now.
    let e = ch
        .write(0, 1, r.ctrls[0].dma().alloc(512).unwrap(), 1)
        .unwrap_err();
    assert!(
        matches!(e.error, ChannelError::NoPath { nsid: 1 }),
        "{}",
        e.error
    );
    assert!(e.buffer.is_some());
}

#[test]
fn head_removal_fails_queued_requests() {
    let r = rig(2, 2, HeadOptions::default());
    let mut ch = r.channel(2, 2048);
    for c in 0..2 {
        r.model.set_ana_state(c, 1, AnaState::Inaccessible).unwrap();
    }
    r.mp.poll();
    submit_writes(&r, &mut ch, 0..1000);
    assert_eq!(ch.queued(), 1000);
    // Namespace 2 is detached from both controllers: the head loses its last path and, with
    // no delayed removal, is removed.
    for c in &r.ctrls {
        c.namespace_attachment(2, false, &[c.identify().identify.cntlid])
            .unwrap();
    }
    let report = r.mp.poll();
    assert_eq!(report.heads_removed, 1);
    assert!(ch.head().is_removed());
    assert!(r.mp.head(2).is_none());
    assert!(r.mp.head(1).is_some());
    let mut done = Vec::new();
    assert_eq!(ch.poll(usize::MAX, |c| done.push(c)), 1000);
    exactly_once(&done, 1000);
    assert!(done
        .iter()
        .all(|c| matches!(c.result, Err(ChannelError::HeadRemoved { nsid: 2 }))));
    let e = ch
        .write(0, 1, r.ctrls[0].dma().alloc(512).unwrap(), 1)
        .unwrap_err();
    assert!(matches!(e.error, ChannelError::HeadRemoved { nsid: 2 }));
}

#[test]
fn explicit_head_removal_fails_queued_requests() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 512);
    all_paths(&r, AnaState::PersistentLoss);
    submit_writes(&r, &mut ch, 0..300);
    assert_eq!(r.mp.remove_head(1), 1);
    let mut done = Vec::new();
    assert_eq!(ch.poll(usize::MAX, |c| done.push(c)), 300);
    assert!(done
        .iter()
        .all(|c| matches!(c.result, Err(ChannelError::HeadRemoved { nsid: 1 }))));
}

#[test]
fn ana_change_keeps_queueing_until_anatt_even_without_queue_if_no_path() {
    let r = rig(
        2,
        1,
        HeadOptions {
            queue_if_no_path: false,
            ..HeadOptions::default()
        },
    );
    let mut ch = r.channel(1, 512);
    all_paths(&r, AnaState::Change);
    submit_writes(&r, &mut ch, 0..50);
    assert_eq!(ch.queued(), 50, "a path in transition: wait for it");
    // It comes back optimized within ANATT (2 s).
    let p = r.model.controller(1).unwrap();
    p.schedule_ana_state(1, AnaState::Optimized, p.now_ns() + 1_000_000_000)
        .unwrap();
    let done = drain(&r, &mut ch, 50, 1_000_000);
    assert!(done.iter().all(|c| c.is_ok() && c.path == Some(1)));
    // Another transition that never ends: after ANATT the paths count as inaccessible and,
    // without queueing, the waiting requests fail.
    all_paths(&r, AnaState::Change);
    submit_writes(&r, &mut ch, 50..80);
    let done = drain(&r, &mut ch, 30, 1_000_000);
    assert_eq!(done.len(), 30);
    assert!(done
        .iter()
        .all(|c| matches!(c.result, Err(ChannelError::NoPath { nsid: 1 }))));
    assert!(r.mp.now_ns() > 2_000_000_000);
}
