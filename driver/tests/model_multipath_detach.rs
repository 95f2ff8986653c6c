//! A namespace detached from one controller (Namespace Attachment) under I/O on its head: the
//! device ends the I/O it still gets there with Invalid Namespace before the driver has
//! rescanned; the channel sends those requests once more on another path, so no error
//! reaches the user and every acknowledged write reads back. A request that fails so on
//! every path is delivered (with the status, or as the head's removal once the driver saw the
//! namespace go from every controller): it is sent again at most once, not for ever.

mod mp_util;

use mp_util::{drain, pattern, rig};
use std::collections::BTreeMap;
use vfnvme::multipath::{ChannelError, HeadOptions, PathPolicy};
use vfnvme::platform::Platform;
use vfnvme::spec::status::{generic, sct};

#[test]
fn io_to_a_path_whose_namespace_was_detached_fails_over() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 1024);
    ch.head().set_policy(PathPolicy::RoundRobin);
    let n = 400u64;
    for t in 0..n {
        let mut buf = r.ctrls[0].dma().alloc(512).unwrap();
        buf.as_mut_slice().copy_from_slice(&pattern(t, 512));
        ch.write(t % 4096, 1, buf, t).unwrap();
    }
    // Detached from controller 0 before the doorbell: its commands end with Invalid Namespace.
    r.model.controller(0).unwrap().detach_namespace(1).unwrap();
    ch.commit();
    let done = drain(&r, &mut ch, n as usize, 100_000);
    assert_eq!(done.len(), n as usize);
    let mut seen = vec![0u32; n as usize];
    for c in &done {
        assert!(c.is_ok(), "tag {}: {:?}", c.tag, c.result);
        seen[c.tag as usize] += 1;
    }
    assert!(seen.iter().all(|&k| k == 1), "exactly once");
    let over: Vec<_> = done.iter().filter(|c| c.failovers > 0).collect();
    assert!(!over.is_empty(), "the requests on path 0 failed over");
    assert!(over.iter().all(|c| c.path == Some(1)));
    // The rescan takes the path away; everything reads back through path 1.
    for _ in 0..20 {
        r.mp.poll();
        r.ctrls[0].platform().relax();
    }
    assert_eq!(ch.head().paths().paths.len(), 1, "path 0 is gone");
    let mut expect = BTreeMap::new();
    for t in 0..n {
        expect.insert(t % 4096, t);
    }
    for &lba in expect.keys() {
        ch.read(lba, 1, r.ctrls[0].dma().alloc(512).unwrap(), lba)
            .unwrap();
    }
    ch.commit();
    let back = drain(&r, &mut ch, expect.len(), 100_000);
    assert_eq!(back.len(), expect.len());
    for c in back {
        assert!(c.is_ok());
        assert_eq!(
            c.buffer.as_ref().unwrap().as_slice(),
            pattern(expect[&c.tag], 512).as_slice()
        );
    }
}

#[test]
fn a_request_that_fails_so_on_every_path_is_delivered_with_its_status() {
    let r = rig(2, 1, HeadOptions::default());
    let mut ch = r.channel(1, 64);
    ch.head().set_policy(PathPolicy::RoundRobin);
    for t in 0..8u64 {
        ch.write(t, 1, r.ctrls[0].dma().alloc(512).unwrap(), t)
            .unwrap();
    }
    for c in 0..2 {
        r.model.controller(c).unwrap().detach_namespace(1).unwrap();
    }
    ch.commit();
    let done = drain(&r, &mut ch, 8, 100_000);
    assert_eq!(
        done.len(),
        8,
        "every request is delivered, none retried for ever"
    );
    for c in &done {
        match &c.result {
            Err(ChannelError::Device { status }) => {
                assert_eq!(
                    (status.sct(), status.sc()),
                    (sct::GENERIC, generic::INVALID_NAMESPACE)
                );
            }
            // Both paths failed it in one poll: it waited for the head to change, and the
            // namespace is gone from every controller, so the head went with it.
            Err(ChannelError::HeadRemoved { nsid: 1 }) => {}
            other => panic!("tag {}: {other:?}", c.tag),
        }
        assert!(c.failovers <= 1, "sent at most once more: {}", c.failovers);
    }
    let mut tags: Vec<u64> = done.iter().map(|c| c.tag).collect();
    tags.sort();
    assert_eq!(tags, (0..8).collect::<Vec<_>>(), "exactly once");
}
