//! Scenario `slowns`: an I/O timeout on QEMU's device. Namespace 2 is a null-co
//! drive whose every I/O takes 3 s (`latency-ns`); the controller is opened with a 400 ms I/O
//! timeout. A read there times out, the driver sends an Abort (QEMU's Abort aborts nothing: it
//! completes with "not aborted"), the read outlives another timeout, the controller is reset,
//! and the read ends once with `ABORTED_BY_RESET`, its buffer back. Meanwhile a second queue
//! pair keeps writing and reading back namespace 1 (a fast raw image) of the same controller,
//! and it keeps completing after the reset.

use std::time::{Duration, Instant};
use vfnvme::admin::ControllerEvent;
use vfnvme::spec::Status;
use vfnvme::ControllerOptions;
use vfnvme_tests::{guest, guest_io};

const IO_TIMEOUT_MS: u64 = 400;

#[test]
fn a_slow_read_times_out_is_aborted_then_reset_and_the_fast_namespace_goes_on() {
    if !guest::in_guest(
        "guest_slowns_timeout::a_slow_read_times_out_is_aborted_then_reset_and_the_fast_namespace_goes_on",
    ) {
        return;
    }
    let bdf = &guest::vfio_devices()[0];
    let ctrl = guest_io::open_with(
        bdf,
        ControllerOptions {
            io_timeout_ms: IO_TIMEOUT_MS,
            ..ControllerOptions::default()
        },
    );
    let events = ctrl.subscribe_controller_events();
    let fast = guest_io::namespace(&ctrl, 1);
    let slow = guest_io::namespace(&ctrl, 2);
    let mut slow_qp = guest_io::qpair(&ctrl, 16);
    let mut fast_qp = guest_io::qpair(&ctrl, 16);
    let blocks = 4096 / fast.lba_size();

    let submitted = Instant::now();
    slow_qp
        .read(&slow, 0, 1, ctrl.dma().alloc(4096).unwrap(), 77)
        .unwrap();
    slow_qp.commit();
    let mut slow_done = None;
    let (mut fast_ok, mut fast_aborted, mut fast_ok_after_reset) = (0u64, 0u64, 0u64);
    let mut reset_done_at = None;
    let mut seen = Vec::new();
    let mut n = 0u64;
    let deadline = Instant::now() + Duration::from_secs(300);
    while (slow_done.is_none() || fast_ok_after_reset < 50) && Instant::now() < deadline {
        // The timeout check runs every 256th poll: poll the slow queue pair that often per
        // round, so that the check runs every few milliseconds.
        for _ in 0..256 {
            slow_qp.poll(usize::MAX, |c| {
                assert!(slow_done.is_none(), "the slow read completed twice");
                slow_done = Some((c, submitted.elapsed()));
            });
        }
        if let Some((c, at)) = &slow_done {
            assert!(
                !c.status.is_success(),
                "the slow read succeeded after {at:?}: the timeout path did not run"
            );
        }
        // One write and read-back on the fast namespace per round, through the sync helpers.
        let data = guest_io::random_bytes(4096, 0xfa57_0000 + n);
        let lba = 100 + (n % 512) * u64::from(blocks);
        n += 1;
        let mut buf = ctrl.dma().alloc(4096).unwrap();
        buf.as_mut_slice().copy_from_slice(&data);
        let result = fast_qp
            .write_sync(&fast, lba, blocks, buf)
            .and_then(|b| fast_qp.read_sync(&fast, lba, blocks, b));
        match result {
            Ok(back) => {
                guest_io::assert_same(&data, back.as_slice(), fast.lba_size(), "fast namespace");
                fast_ok += 1;
                if reset_done_at.is_some() {
                    fast_ok_after_reset += 1;
                }
            }
            Err(vfnvme::Error::IoFailed { status }) if status == Status::ABORTED_BY_RESET => {
                fast_aborted += 1;
            }
            Err(e) => panic!("fast namespace I/O failed: {e}"),
        }
        for e in events.try_iter() {
            if e == ControllerEvent::ResetDone {
                reset_done_at = Some(submitted.elapsed());
            }
            seen.push((e, submitted.elapsed()));
        }
    }
    eprintln!("events (time since the slow read was submitted): {seen:?}");
    let (c, took) = slow_done.expect("the slow read ended");
    println!(
        "SLOW-READ-TIMEOUT io_timeout_ms={IO_TIMEOUT_MS} latency_ms=3000 slow_read_status={} ended_after={took:?} reset_done_after={reset_done_at:?} fast_ok={fast_ok} fast_aborted={fast_aborted} fast_ok_after_reset={fast_ok_after_reset}",
        c.status
    );
    assert_eq!(c.tag, 77);
    assert_eq!(c.status, Status::ABORTED_BY_RESET);
    assert!(c.buffer.is_some(), "the buffer is back");
    let kinds: Vec<ControllerEvent> = seen.iter().map(|(e, _)| *e).collect();
    let qid = slow_qp.qid();
    let cid = match kinds.first() {
        Some(ControllerEvent::TimedOut { qid: q, cid }) if *q == qid => *cid,
        other => panic!("first event {other:?}, expected TimedOut on queue {qid}"),
    };
    assert_eq!(
        kinds,
        [
            ControllerEvent::TimedOut { qid, cid },
            ControllerEvent::AbortSent { qid, cid },
            ControllerEvent::ResetStarted,
            ControllerEvent::ResetDone,
        ]
    );
    let timed_out_at = seen[0].1;
    assert!(
        timed_out_at >= Duration::from_millis(IO_TIMEOUT_MS),
        "timed out after {timed_out_at:?}, not before the timeout"
    );
    assert!(
        fast_ok_after_reset >= 50,
        "the fast namespace kept completing after the reset"
    );
    // The slow namespace itself works again after the reset (slowly).
    let mut after = None;
    slow_qp
        .read(&slow, 8, 1, ctrl.dma().alloc(4096).unwrap(), 78)
        .unwrap();
    slow_qp.commit();
    let deadline = Instant::now() + Duration::from_secs(120);
    while after.is_none() && Instant::now() < deadline {
        slow_qp.poll(usize::MAX, |c| after = Some(c.status));
    }
    eprintln!("a second slow read after the reset: {after:?}");
    assert!(after.is_some(), "the second slow read ended");
}
