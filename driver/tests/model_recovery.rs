//! Faults and recovery on the model (issue 11): an I/O command that never completes is
//! aborted after the I/O timeout and, when the Abort does not help (QEMU's and the model's
//! Abort abort nothing), the controller is reset with the queue pair open. The request ends
//! exactly once with `ABORTED_BY_RESET` and its buffer back; the queue pair carries on. A
//! controller that can't be disabled ends requests without their buffers (leaked, counted); a
//! removed one ends them with `CONTROLLER_LOST`. Virtual time: no sleeps.

use std::sync::mpsc::Receiver;
use std::sync::Arc;
use vfnvme::admin::ControllerEvent;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::platform::Platform;
use vfnvme::spec::Status;
use vfnvme::{IoCompletion, QpairOptions, QueuePair};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform, Stall};

const READ: u8 = 0x02;
/// The I/O timeout of these tests (virtual time).
const IO_TIMEOUT_MS: u64 = 100;

fn config(stalls: Vec<Stall>, ignore_disable: bool) -> ModelConfig {
    ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 1 << 16,
            lba_size: 512,
            backing: Backing::Ram,
        }],
        io_latency_ns: 1_000,
        admin_latency_ns: 1_000,
        stalls,
        ignore_disable,
        ..ModelConfig::default()
    }
}

/// One read on I/O queue 1 that the device never completes.
fn stuck_read() -> Stall {
    Stall {
        qid: 1,
        opcode: READ,
        after_ns: u64::MAX / 4,
        completes: false,
        count: 1,
    }
}

fn up(cfg: ModelConfig) -> (Arc<ModelPlatform>, Controller<ModelPlatform>) {
    let platform = ModelPlatform::new(cfg).expect("model config");
    let options = ControllerOptions {
        io_timeout_ms: IO_TIMEOUT_MS,
        admin_timeout_ms: 1_000,
        ..ControllerOptions::default()
    };
    let ctrl = Controller::new(platform.clone(), options).expect("bring-up");
    (platform, ctrl)
}

/// Polls (letting virtual time pass) until `n` completions arrived or `limit` polls ran.
fn poll_for(
    p: &ModelPlatform,
    qp: &mut QueuePair<ModelPlatform>,
    n: usize,
    limit: usize,
) -> Vec<IoCompletion> {
    let mut got = Vec::new();
    for _ in 0..limit {
        qp.poll(usize::MAX, |c| got.push(c));
        if got.len() >= n {
            break;
        }
        p.relax();
    }
    got
}

fn events(rx: &Receiver<ControllerEvent>) -> Vec<ControllerEvent> {
    rx.try_iter().collect()
}

fn pattern(byte: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte ^ (i as u8)).collect()
}

#[test]
fn a_stuck_read_is_aborted_then_reset_and_the_queue_pair_carries_on() {
    let (p, ctrl) = up(config(vec![stuck_read()], false));
    let rx = ctrl.subscribe_controller_events();
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let mut buf = ctrl.dma().alloc(4096).unwrap();
    buf.as_mut_slice().copy_from_slice(&pattern(0x5a, 4096));
    let buf = qp.write_sync(&ns, 0, 8, buf).unwrap();
    let start = p.now_ns();

    qp.read(&ns, 0, 8, buf, 7).unwrap();
    let got = poll_for(&p, &mut qp, 1, 10_000_000);
    assert_eq!(got.len(), 1, "the stuck read ends");
    let c = &got[0];
    assert_eq!(c.tag, 7);
    assert_eq!(c.status, Status::ABORTED_BY_RESET);
    assert!(c.status.is_host_failure());
    assert!(
        c.buffer.is_some(),
        "the buffer comes back: the reset stopped the device"
    );
    let waited = p.now_ns() - start;
    assert!(
        waited >= 2 * IO_TIMEOUT_MS * 1_000_000,
        "a timeout, an Abort, then another timeout before the reset: {waited} ns"
    );
    let seen = events(&rx);
    // Tracker 0 (255 trackers: 8 index bits), second command on it: generation 1.
    let cid = 0x100;
    let want_order = [
        ControllerEvent::TimedOut { qid: 1, cid },
        ControllerEvent::AbortSent { qid: 1, cid },
        ControllerEvent::ResetStarted,
        ControllerEvent::ResetDone,
    ];
    let positions: Vec<usize> = want_order
        .iter()
        .map(|w| {
            seen.iter()
                .position(|e| e == w)
                .unwrap_or_else(|| panic!("event {w:?} missing from {seen:?}"))
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{seen:?}");

    // Exactly once: nothing more arrives for it.
    assert!(poll_for(&p, &mut qp, 1, 1_000).is_empty());
    assert_eq!(qp.outstanding(), 0);

    // The queue pair was created again: I/O works, and the data written before is intact.
    let back = qp
        .read_sync(&ns, 0, 8, ctrl.dma().alloc(4096).unwrap())
        .expect("read after the reset");
    assert_eq!(back.as_slice(), &pattern(0x5a, 4096)[..]);
    drop(qp);
    drop(ctrl);
    assert!(p.dma_violations().is_empty());
}

/// A host that only polls (no `relax()`, as the C ABI and fio's engine do) still reaches the
/// I/O timeout of a read the device holds: virtual time passes on its empty polls. Without
/// that the read hung for good.
#[test]
fn a_stuck_read_times_out_for_a_host_that_only_polls() {
    let (p, ctrl) = up(config(vec![stuck_read()], false));
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let start = p.now_ns();
    qp.read(&ns, 0, 1, ctrl.dma().alloc(512).unwrap(), 3)
        .unwrap();
    let mut got = Vec::new();
    let mut polls = 0u64;
    while got.is_empty() && polls < 1_000_000 {
        qp.poll(usize::MAX, |c| got.push(c));
        polls += 1;
    }
    assert_eq!(got.len(), 1, "the stuck read ends ({polls} polls)");
    assert_eq!((got[0].tag, got[0].status), (3, Status::ABORTED_BY_RESET));
    let waited = p.now_ns() - start;
    assert!(
        waited >= 2 * IO_TIMEOUT_MS * 1_000_000,
        "a timeout, an Abort, then another timeout before the reset: {waited} ns"
    );
    // An idle queue pair with nothing held polls without moving the clock.
    let idle = p.now_ns();
    for _ in 0..1_000 {
        assert_eq!(qp.poll(usize::MAX, |_| ()), 0);
    }
    assert_eq!(p.now_ns(), idle);
    // And I/O goes on after the reset.
    qp.write_sync(&ns, 0, 1, ctrl.dma().alloc(512).unwrap())
        .expect("a write after the reset");
}

#[test]
fn reset_with_open_queue_pairs_keeps_them_usable() {
    let (p, ctrl) = up(config(vec![], false));
    let ns = ctrl.namespace(1).unwrap();
    let mut a = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let mut b = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let mut buf = ctrl.dma().alloc(512).unwrap();
    buf.as_mut_slice().fill(0xab);
    let buf = a.write_sync(&ns, 3, 1, buf).unwrap();
    // A read in flight on `b` across the reset ends once, aborted by the reset.
    b.read(&ns, 3, 1, buf, 1).unwrap();
    b.commit();
    ctrl.reset().expect("reset with queue pairs open");
    let got = poll_for(&p, &mut b, 1, 1_000);
    assert_eq!(got.len(), 1);
    assert!(
        got[0].status == Status::ABORTED_BY_RESET || got[0].status.is_success(),
        "{:?}",
        got[0].status
    );
    for qp in [&mut a, &mut b] {
        let back = qp
            .read_sync(&ns, 3, 1, ctrl.dma().alloc(512).unwrap())
            .expect("I/O after the reset");
        assert!(back.as_slice().iter().all(|&x| x == 0xab));
    }
    drop((a, b));
    drop(ctrl);
    assert!(p.dma_violations().is_empty());
    assert_eq!(p.dma().leaks(), 0);
}

#[test]
fn a_removed_controller_ends_requests_once_with_controller_lost() {
    let (p, ctrl) = up(config(vec![stuck_read()], false));
    let rx = ctrl.subscribe_controller_events();
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    qp.read(&ns, 0, 1, ctrl.dma().alloc(512).unwrap(), 9)
        .unwrap();
    qp.commit();
    assert!(ctrl.mark_removed());
    assert!(!ctrl.mark_removed(), "once");
    let got = poll_for(&p, &mut qp, 1, 1_000);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].tag, got[0].status), (9, Status::CONTROLLER_LOST));
    assert!(events(&rx).contains(&ControllerEvent::Removed));
    // Later requests end the same way; admin calls fail with a typed error.
    qp.read(&ns, 0, 1, ctrl.dma().alloc(512).unwrap(), 10)
        .unwrap();
    let got = poll_for(&p, &mut qp, 1, 1_000);
    assert_eq!((got[0].tag, got[0].status), (10, Status::CONTROLLER_LOST));
    assert!(matches!(
        ctrl.identify_controller(),
        Err(vfnvme::Error::ControllerRemoved)
    ));
}

#[test]
fn a_controller_that_cannot_be_disabled_ends_requests_without_their_buffers() {
    let (p, ctrl) = up(config(vec![stuck_read()], true));
    let rx = ctrl.subscribe_controller_events();
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    qp.read(&ns, 0, 1, ctrl.dma().alloc(512).unwrap(), 3)
        .unwrap();
    let got = poll_for(&p, &mut qp, 1, 10_000_000);
    assert_eq!(got.len(), 1, "the request ends: nothing hangs");
    assert_eq!(got[0].status, Status::CONTROLLER_LOST);
    assert!(
        got[0].buffer.is_none(),
        "the device may still write it: leaked, not handed back"
    );
    assert!(p.dma().leaks() >= 1);
    assert!(events(&rx).contains(&ControllerEvent::Failed));
    assert!(poll_for(&p, &mut qp, 1, 1_000).is_empty(), "exactly once");
}

/// The kernel asks for the device back (VFIO's device request, played by the model) while a
/// read is in flight: the queue pair's periodic check notices it through `Platform::removed`,
/// the controller is disabled and marked removed, the read ends once with `CONTROLLER_LOST`
/// and its buffer back, and dropping everything sends the gone device no admin command and
/// frees all memory (nothing leaked, no device access to freed memory).
#[test]
fn a_removal_request_ends_io_with_controller_lost_and_releases_everything() {
    let (p, ctrl) = up(config(vec![stuck_read()], false));
    let rx = ctrl.subscribe_controller_events();
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    qp.read(&ns, 0, 1, ctrl.dma().alloc(512).unwrap(), 7)
        .unwrap();
    qp.commit();
    assert!(
        poll_for(&p, &mut qp, 1, 10).is_empty(),
        "stuck until removal"
    );
    p.request_removal();
    let got = poll_for(&p, &mut qp, 1, 1_000);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].tag, got[0].status), (7, Status::CONTROLLER_LOST));
    assert!(
        got[0].buffer.is_some(),
        "the device was disabled: buffer back"
    );
    assert!(events(&rx).contains(&ControllerEvent::Removed));
    assert!(poll_for(&p, &mut qp, 1, 1_000).is_empty(), "exactly once");
    use vfnvme::platform::RegisterIo;
    let cc = p.regs().read32(vfnvme::spec::registers::CC);
    assert_eq!(cc & 1, 0, "disabled before its memory is handed back");
    assert!(matches!(
        ctrl.process_admin_completions(),
        Err(vfnvme::Error::ControllerRemoved)
    ));
    let admin_before = p.stats().admin_completed.values().sum::<u64>();
    drop(qp);
    drop(ctrl);
    let admin_after = p.stats().admin_completed.values().sum::<u64>();
    assert_eq!(
        admin_before, admin_after,
        "no admin command to a removed device"
    );
    assert!(p.dma_violations().is_empty());
    assert_eq!(p.dma().leaks(), 0, "every mapping released");
}

/// The admin poll's health check notices a removal request with no I/O running.
#[test]
fn the_admin_poll_notices_a_removal_request() {
    let (p, ctrl) = up(config(Vec::new(), false));
    let rx = ctrl.subscribe_controller_events();
    assert!(ctrl.process_admin_completions().is_ok());
    p.request_removal();
    assert!(matches!(
        ctrl.process_admin_completions(),
        Err(vfnvme::Error::ControllerRemoved)
    ));
    assert_eq!(events(&rx), vec![ControllerEvent::Removed]);
    assert!(matches!(
        ctrl.alloc_qpair(QpairOptions::default()),
        Err(vfnvme::Error::ControllerRemoved)
    ));
    drop(ctrl);
    assert_eq!(p.dma().leaks(), 0);
}
