//! Scenario `multipath`: both controllers in one VFIO container and DMA pool
//! (`VfioPlatform::open_shared`), one subsystem, the head of namespace 1, and write+read-verify
//! I/O at QD 32 through an `IoChannel` while namespace 1 is detached from controller 0 by
//! Namespace Attachment and attached again. No error reaches the user; during the detach
//! controller 0 gets no command, after the re-attach it gets some again.

use std::time::Duration;

use vfnvme::multipath::PathPolicy;
use vfnvme_tests::guest;
use vfnvme_tests::guest_multipath::{self as mp, delta, paths_of, sent};
use vfnvme_tests::mp_workload::Workload;

const NSID: u32 = 1;
const DEPTH: usize = 32;
const PHASE: u64 = 1500;

#[test]
fn namespace_detach_and_reattach_under_io_shift_the_paths_without_errors() {
    if !guest::in_guest(
        "guest_multipath_heads::namespace_detach_and_reattach_under_io_shift_the_paths_without_errors",
    ) {
        return;
    }
    let devices = guest::vfio_devices();
    assert_eq!(
        devices.len(),
        2,
        "the multipath scenario has two vfio controllers"
    );
    let ctrls = mp::open_shared(&devices);
    let sub = mp::subsystem(&ctrls, PathPolicy::RoundRobin);
    assert_eq!(
        paths_of(&sub, NSID),
        [0, 1],
        "namespace 1 through both controllers"
    );
    let mut ch = mp::channel(&sub, NSID, 64);
    let ns = ctrls[0]
        .namespace(NSID)
        .expect("namespace 1 on controller 0");
    let lba = ns.lba_size();
    drop(ns);
    // 4 KiB requests over the first 2 MiB.
    let blocks = 4096 / lba;
    let mut w = Workload::new(ctrls[0].dma().clone(), lba, blocks, 0, 512, DEPTH);

    w.run_count(&mut ch, &sub, PHASE, "before the detach");
    let s0 = sent(&ch);

    let cntlid0 = ctrls[0].identify().identify.cntlid;
    // Sent to controller 0 itself: its Namespace Attribute Changed notice is then in its admin
    // queue when the command completes, and the subsystem poll right after takes the path out
    // before this thread submits again (commands submitted to a detached namespace fail with
    // Invalid Field, which is not a path error: see docs/multipath.md).
    ctrls[0]
        .namespace_attachment(NSID, false, &[cntlid0])
        .unwrap_or_else(|e| panic!("detaching namespace {NSID} from controller 0: {e}"));
    sub.poll();
    w.run(
        &mut ch,
        &sub,
        Duration::from_secs(60),
        "path 0 leaving the head",
        |_| paths_of(&sub, NSID) == [1],
    );
    let s1 = sent(&ch);
    w.run_count(&mut ch, &sub, PHASE, "while detached");
    let s2 = sent(&ch);
    assert_eq!(
        paths_of(&sub, NSID),
        [1],
        "still detached from controller 0"
    );

    ctrls[0]
        .namespace_attachment(NSID, true, &[cntlid0])
        .unwrap_or_else(|e| panic!("attaching namespace {NSID} to controller 0 again: {e}"));
    sub.poll();
    w.run(
        &mut ch,
        &sub,
        Duration::from_secs(60),
        "path 0 coming back",
        |_| paths_of(&sub, NSID) == [0, 1],
    );
    let s3 = sent(&ch);
    w.run_count(&mut ch, &sub, PHASE, "after the re-attach");
    let s4 = sent(&ch);
    // Every slot written is read back once more, through whichever path.
    w.reread_all();
    w.run(
        &mut ch,
        &sub,
        Duration::from_secs(120),
        "reading every slot back",
        |w| w.reads_queued() == 0,
    );
    let lost = w.drain(&mut ch, &sub, Duration::from_secs(60));

    let before = delta([0, 0], s0);
    let detaching = delta(s0, s1);
    let during = delta(s1, s2);
    let attaching = delta(s2, s3);
    let after = delta(s3, s4);
    mp::report(
        "ns-attachment",
        &w.tally,
        lost,
        ch.stats().failovers,
        &[
            ("before", before),
            ("detaching", detaching),
            ("detached", during),
            ("attaching", attaching),
            ("after", after),
        ],
    );
    assert_eq!(w.first_error(), None, "{:?}", w.tally);
    assert_eq!(
        (w.tally.errors, lost, w.tally.duplicated, w.tally.corrupt),
        (0, 0, 0, 0),
        "{:?}",
        w.tally
    );
    assert_eq!(w.tally.ok, w.tally.issued);
    assert!(
        w.slots_written() >= 256,
        "{} slots written",
        w.slots_written()
    );
    assert!(
        before[0] > 0 && before[1] > 0,
        "round-robin over both paths: {before:?}"
    );
    assert_eq!(
        during[0], 0,
        "no command to controller 0 while detached: {during:?}"
    );
    assert!(
        during[1] >= PHASE / 2,
        "controller 1 carried the I/O: {during:?}"
    );
    assert!(
        after[0] > 0 && after[1] > 0,
        "both paths again after the re-attach: {after:?}"
    );
    assert_eq!(ch.stats().failed_no_path, 0);
}
