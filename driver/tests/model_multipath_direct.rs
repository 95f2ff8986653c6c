//! The channel's direct mode (the numa policy, one path taking every request) on the model
//! subsystem: path errors, a reset and a policy switch while requests are in flight on the
//! direct path take the channel out of direct mode without losing, repeating or corrupting a
//! request, the per-path counts add up, and the channel goes back to direct mode afterwards.

mod mp_util;

use mp_util::{drain, pattern, rig, Rig};
use std::collections::BTreeMap;
use vfnvme::multipath::{ChannelCompletion, HeadOptions, IoChannel, PathPolicy};
use vfnvme_model::{AnaState, ModelPlatform};

const BLOCKS: u64 = 4096;

/// Queues writes of tags `tags` (one block at lba = tag % BLOCKS, pattern of the tag); rings
/// the doorbells only if `commit`.
fn write_tags(
    r: &Rig,
    ch: &mut IoChannel<ModelPlatform>,
    tags: std::ops::Range<u64>,
    commit: bool,
) {
    for t in tags {
        let mut buf = r.ctrls[0].dma().alloc(512).unwrap();
        buf.as_mut_slice().copy_from_slice(&pattern(t, 512));
        ch.write(t % BLOCKS, 1, buf, t).unwrap();
    }
    if commit {
        ch.commit();
    }
}

/// Every tag of `0..n` exactly once, all successful; returns the last write per lba.
fn exactly_once_ok(done: &[ChannelCompletion], n: u64) -> BTreeMap<u64, u64> {
    let mut seen = vec![0u32; n as usize];
    for c in done {
        assert!(c.is_ok(), "tag {}: {:?}", c.tag, c.result);
        seen[c.tag as usize] += 1;
    }
    assert!(seen.iter().all(|&k| k == 1), "every request exactly once");
    let mut last = BTreeMap::new();
    for t in 0..n {
        last.insert(t % BLOCKS, t);
    }
    last
}

/// Reads back every lba of `expect` and checks the pattern of its last write.
fn verify(r: &Rig, ch: &mut IoChannel<ModelPlatform>, expect: &BTreeMap<u64, u64>) {
    for &lba in expect.keys() {
        ch.read(lba, 1, r.ctrls[0].dma().alloc(512).unwrap(), lba)
            .unwrap();
    }
    ch.commit();
    let done = drain(r, ch, expect.len(), 100_000);
    assert_eq!(done.len(), expect.len());
    for c in done {
        assert!(c.is_ok());
        assert_eq!(
            c.buffer.as_ref().unwrap().as_slice(),
            pattern(expect[&c.tag], 512).as_slice(),
            "lba {} reads back its last acknowledged write",
            c.tag
        );
    }
}

fn sent(ch: &IoChannel<ModelPlatform>) -> u64 {
    ch.stats().per_path.iter().sum()
}

#[test]
fn a_path_error_on_the_direct_path_fails_over_and_direct_mode_resumes_on_the_other() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 1024);
    assert_eq!(ch.head().policy(), PathPolicy::Numa);
    // Queued on path 0 (the numa path; fewer than its queue pair's slots), not yet rung, when
    // the device turns it inaccessible.
    write_tags(&r, &mut ch, 0..200, false);
    r.model.set_ana_state(0, 1, AnaState::Inaccessible).unwrap();
    ch.commit();
    let mut done = drain(&r, &mut ch, 200, 100_000);
    assert!(done.iter().all(|c| c.failovers == 1 && c.path == Some(1)));
    // The driver hears of it; new requests take path 1 directly.
    r.mp.poll();
    write_tags(&r, &mut ch, 200..400, true);
    let more = drain(&r, &mut ch, 200, 100_000);
    assert!(more.iter().all(|c| c.failovers == 0 && c.path == Some(1)));
    done.extend(more);
    let last = exactly_once_ok(&done, 400);
    let per_path = ch.stats().per_path;
    assert_eq!(per_path[0], 200, "commands sent on path 0");
    assert_eq!(per_path[1], 400, "200 failed over + 200 new on path 1");
    assert_eq!(ch.stats().failovers, 200);
    assert_eq!(ch.outstanding(), 0);
    verify(&r, &mut ch, &last);
}

#[test]
fn a_reset_under_direct_io_fails_over_and_nothing_is_lost() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 1024);
    write_tags(&r, &mut ch, 0..200, true);
    r.ctrls[0].reset().unwrap();
    let mut done = drain(&r, &mut ch, 200, 1_000_000);
    r.mp.poll();
    write_tags(&r, &mut ch, 200..400, true);
    done.extend(drain(&r, &mut ch, 200, 100_000));
    let last = exactly_once_ok(&done, 400);
    assert!(
        done.iter().any(|c| c.failovers > 0),
        "requests aborted by the reset were sent again"
    );
    assert_eq!(sent(&ch), 400 + ch.stats().failovers);
    verify(&r, &mut ch, &last);
}

#[test]
fn switching_policy_with_requests_in_flight_on_the_direct_path_loses_none() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 4096);
    let head = ch.head().clone();
    // In flight on path 0 (direct), then round-robin: the old path keeps being polled.
    write_tags(&r, &mut ch, 0..100, true);
    head.set_policy(PathPolicy::RoundRobin);
    write_tags(&r, &mut ch, 100..200, true);
    let mut done = drain(&r, &mut ch, 200, 100_000);
    // Back to numa with requests in flight on both paths, then path 0 loses its optimized
    // state: the route moves to path 1 while path 0 still drains.
    write_tags(&r, &mut ch, 200..300, false);
    head.set_policy(PathPolicy::Numa);
    write_tags(&r, &mut ch, 300..400, true);
    r.set(0, 1, AnaState::NonOptimized);
    write_tags(&r, &mut ch, 400..500, true);
    done.extend(drain(&r, &mut ch, 300, 100_000));
    let last = exactly_once_ok(&done, 500);
    assert!(done
        .iter()
        .filter(|c| c.tag >= 400)
        .all(|c| c.path == Some(1)));
    assert_eq!(sent(&ch), 500, "no failover: every command sent once");
    assert_eq!(ch.outstanding(), 0);
    assert_eq!(ch.open_paths(), 0b11);
    verify(&r, &mut ch, &last);
}

#[test]
fn an_idle_channel_in_direct_mode_lets_go_of_a_removed_controller_within_256_polls() {
    let mut r = rig(2, 1, HeadOptions::default());
    let c0 = r.ctrls.remove(0);
    let weak = std::sync::Arc::downgrade(&c0);
    let model0 = r.model.controller(0).unwrap().clone();
    drop(c0);
    let mut ch = r.channel(1, 1024);
    write_tags(&r, &mut ch, 0..50, true);
    let done = drain(&r, &mut ch, 50, 100_000);
    let last = exactly_once_ok(&done, 50);
    assert!(
        done.iter().all(|c| c.path == Some(0)),
        "numa: path 0, direct"
    );
    assert_eq!(ch.open_paths(), 0b01);
    // The direct path's controller goes while the channel has nothing in flight and submits
    // nothing: the subsystem hears of it, and the channel's idle polls let go of it.
    model0.request_removal();
    r.mp.poll();
    let mut idle = 0;
    while ch.open_paths() & 1 != 0 {
        assert!(idle < 256, "still holding path 0 after {idle} idle polls");
        assert_eq!(
            ch.poll(usize::MAX, |c| panic!("nothing in flight: {c:?}")),
            0
        );
        idle += 1;
    }
    assert!(idle >= 1);
    assert!(weak.upgrade().is_none(), "controller 0 was released");
    // New requests take path 1.
    write_tags(&r, &mut ch, 50..100, true);
    let more = drain(&r, &mut ch, 50, 100_000);
    assert!(more.iter().all(|c| c.path == Some(1) && c.is_ok()));
    let mut all = done;
    all.extend(more);
    let last2 = exactly_once_ok(&all, 100);
    assert_eq!(last.len() + 50, last2.len());
    verify(&r, &mut ch, &last2);
}

#[test]
fn the_first_submission_after_a_head_change_takes_the_new_route_in_direct_mode() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 1024);
    let head = ch.head().clone();
    write_tags(&r, &mut ch, 0..10, true);
    let mut done = drain(&r, &mut ch, 10, 100_000);
    assert!(done.iter().all(|c| c.path == Some(0)), "numa: path 0");
    // Path 0 turns inaccessible and the driver hears of it; the channel neither polls nor
    // submits in between, so only its next submission can notice. Sent down path 0, the
    // request would fail there and come back failed over (failovers 1).
    r.set(0, 1, AnaState::Inaccessible);
    write_tags(&r, &mut ch, 10..11, true);
    let one = drain(&r, &mut ch, 1, 100_000);
    assert_eq!(
        (one[0].path, one[0].failovers),
        (Some(1), 0),
        "{:?}",
        one[0]
    );
    done.extend(one);
    // Direct mode again, on path 1; then a policy switch, seen by the very next submission:
    // round-robin sends the next two requests down both paths once path 0 is back.
    write_tags(&r, &mut ch, 11..20, true);
    done.extend(drain(&r, &mut ch, 9, 100_000));
    r.set(0, 1, AnaState::Optimized);
    write_tags(&r, &mut ch, 20..21, true);
    let back = drain(&r, &mut ch, 1, 100_000);
    assert_eq!(
        back[0].path,
        Some(0),
        "numa prefers path 0 again: {:?}",
        back[0]
    );
    done.extend(back);
    head.set_policy(PathPolicy::RoundRobin);
    write_tags(&r, &mut ch, 21..23, true);
    let rr = drain(&r, &mut ch, 2, 100_000);
    let paths: std::collections::BTreeSet<_> = rr.iter().map(|c| c.path).collect();
    assert_eq!(paths.len(), 2, "round-robin at once: {rr:?}");
    done.extend(rr);
    let last = exactly_once_ok(&done, 23);
    assert_eq!(
        ch.stats().failovers,
        0,
        "no request went down a stale route"
    );
    verify(&r, &mut ch, &last);
}
