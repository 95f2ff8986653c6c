//! Command retries on the model (issue 11, `ControllerOptions::io_retries`): a status the
//! controller allows to be retried (DNR = 0) sends the command again, a DNR status does not;
//! with retries on, a controller reset loses nothing (the requests in flight are sent again on
//! the re-created queues, split requests whole); a command that timed out is not retried. Each
//! retry is counted. Virtual time: no sleeps.

use std::sync::Arc;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::platform::Platform;
use vfnvme::spec::Status;
use vfnvme::{IoCompletion, QpairOptions, QueuePair};
use vfnvme_model::{
    Backing, Fault, FaultPlan, ModelConfig, ModelNamespaceConfig, ModelPlatform, Stall,
};

const LBA: usize = 512;
const BLOCKS: u64 = 1 << 16;

fn config() -> ModelConfig {
    ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: BLOCKS,
            lba_size: LBA as u32,
            backing: Backing::Ram,
        }],
        io_latency_ns: 1_000,
        admin_latency_ns: 1_000,
        seed: 11,
        ..ModelConfig::default()
    }
}

fn up(cfg: ModelConfig, retries: u8) -> (Arc<ModelPlatform>, Controller<ModelPlatform>) {
    let platform = ModelPlatform::new(cfg).expect("model config");
    let options = ControllerOptions {
        io_timeout_ms: 100,
        admin_timeout_ms: 1_000,
        io_retries: retries,
        ..ControllerOptions::default()
    };
    let ctrl = Controller::new(platform.clone(), options).expect("bring-up");
    (platform, ctrl)
}

fn poll_for(p: &ModelPlatform, qp: &mut QueuePair<ModelPlatform>, n: usize) -> Vec<IoCompletion> {
    poll_up_to(p, qp, n, 10_000_000)
}

/// Polls (letting virtual time pass) until `n` completions arrived or `limit` polls ran.
fn poll_up_to(
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

/// The bytes of block `lba` as written by the tests.
fn block(lba: u64, version: u8) -> Vec<u8> {
    (0..LBA)
        .map(|i| (lba as u8) ^ (i as u8).wrapping_mul(7) ^ version)
        .collect()
}

/// Writes `count` requests of `blocks` blocks each (request `i` at `i * blocks`), without
/// polling.
fn submit_writes(
    ctrl: &Controller<ModelPlatform>,
    qp: &mut QueuePair<ModelPlatform>,
    count: u64,
    blocks: u64,
    version: u8,
) {
    let ns = ctrl.namespace(1).unwrap();
    for i in 0..count {
        let mut buf = ctrl.dma().alloc(blocks as usize * LBA).unwrap();
        for b in 0..blocks {
            let lba = i * blocks + b;
            buf.as_mut_slice()[b as usize * LBA..(b as usize + 1) * LBA]
                .copy_from_slice(&block(lba, version));
        }
        qp.write(&ns, i * blocks, blocks as u32, buf, i).unwrap();
    }
    qp.commit();
}

/// Reads blocks `0..blocks` back, 8 at a time, and checks them against `version`.
fn verify(
    ctrl: &Controller<ModelPlatform>,
    qp: &mut QueuePair<ModelPlatform>,
    blocks: u64,
    version: u8,
) {
    let ns = ctrl.namespace(1).unwrap();
    for start in (0..blocks).step_by(8) {
        let n = (blocks - start).min(8);
        let back = qp
            .read_sync(
                &ns,
                start,
                n as u32,
                ctrl.dma().alloc(n as usize * LBA).unwrap(),
            )
            .expect("read back");
        for i in 0..n {
            let got = &back.as_slice()[i as usize * LBA..(i as usize + 1) * LBA];
            assert_eq!(got, &block(start + i, version)[..], "block {}", start + i);
        }
    }
}

/// Runs 200 one-block writes with 30% of commands failing Namespace Not Ready (DNR = 0);
/// returns the completions' statuses, the retries counted and the faults injected.
fn writes_under_retryable_faults(retries: u8) -> (Vec<Status>, u64, u64) {
    let (p, ctrl) = up(config(), retries);
    p.set_faults(FaultPlan {
        retryable: 300,
        ..FaultPlan::default()
    })
    .unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let mut statuses = Vec::new();
    for chunk in 0..4 {
        submit_writes(&ctrl, &mut qp, 50, 1, chunk);
        statuses.extend(poll_for(&p, &mut qp, 50).iter().map(|c| c.status));
    }
    p.set_faults(FaultPlan::default()).unwrap();
    if retries > 0 {
        verify(&ctrl, &mut qp, 50, 3);
    }
    assert_eq!(
        qp.retries(),
        ctrl.io_retries(),
        "one queue pair: same count"
    );
    let injected = p.fault_counts().of(Fault::Retryable);
    let retried = ctrl.io_retries();
    drop(qp);
    drop(ctrl);
    assert!(p.dma_violations().is_empty());
    (statuses, retried, injected)
}

#[test]
fn retryable_statuses_are_sent_again_and_counted() {
    let (off, retried_off, injected_off) = writes_under_retryable_faults(0);
    assert_eq!(off.len(), 200);
    let failed_off = off.iter().filter(|s| !s.is_success()).count() as u64;
    assert_eq!(retried_off, 0);
    assert_eq!(
        failed_off, injected_off,
        "retries off: every fault reaches the caller"
    );
    assert!(failed_off > 20, "the faults were injected: {failed_off}");
    assert!(off
        .iter()
        .filter(|s| !s.is_success())
        .all(|s| *s == Status::generic(0x82)));

    let (on, retried_on, injected_on) = writes_under_retryable_faults(10);
    assert_eq!(on.len(), 200, "each request ends exactly once");
    assert!(on.iter().all(|s| s.is_success()), "{on:?}");
    assert_eq!(retried_on, injected_on, "one retry per injected fault");
    assert!(retried_on > 20);
}

#[test]
fn a_command_out_of_retries_ends_with_the_device_status() {
    let (p, ctrl) = up(config(), 2);
    p.set_faults(FaultPlan {
        retryable: 1000,
        ..FaultPlan::default()
    })
    .unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    submit_writes(&ctrl, &mut qp, 1, 1, 1);
    let got = poll_for(&p, &mut qp, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, Status::generic(0x82));
    assert!(got[0].buffer.is_some());
    assert_eq!(qp.retries(), 2, "sent three times in all");
    assert_eq!(p.fault_counts().of(Fault::Retryable), 3);
    assert!(
        poll_up_to(&p, &mut qp, 1, 10_000).is_empty(),
        "and ended once"
    );
}

#[test]
fn a_do_not_retry_status_is_not_retried() {
    let (p, ctrl) = up(config(), 5);
    p.set_faults(FaultPlan {
        media_error: 1000,
        ..FaultPlan::default()
    })
    .unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    submit_writes(&ctrl, &mut qp, 4, 1, 1);
    let got = poll_for(&p, &mut qp, 4);
    assert_eq!(got.len(), 4);
    for c in &got {
        assert_eq!(c.status.sct(), 2, "{:?}", c.status);
        assert!(c.status.dnr());
    }
    assert_eq!(ctrl.io_retries(), 0);
}

#[test]
fn a_reset_with_retries_on_loses_nothing() {
    let (p, ctrl) = up(config(), 3);
    let mut qp = ctrl
        .alloc_qpair(QpairOptions {
            depth: 64,
            ..QpairOptions::default()
        })
        .unwrap();
    submit_writes(&ctrl, &mut qp, 48, 4, 9);
    let in_flight = qp.outstanding() as u64;
    assert_eq!(in_flight, 48);
    ctrl.reset().expect("reset");
    let got = poll_for(&p, &mut qp, 48);
    assert_eq!(got.len(), 48);
    assert!(
        got.iter().all(|c| c.is_ok() && c.buffer.is_some()),
        "{:?}",
        got.iter().map(|c| c.status).collect::<Vec<_>>()
    );
    let mut tags: Vec<u64> = got.iter().map(|c| c.tag).collect();
    tags.sort_unstable();
    assert_eq!(tags, (0..48).collect::<Vec<_>>(), "each request once");
    assert!(
        qp.retries() >= 1 && qp.retries() <= in_flight,
        "the commands in flight at the reset were sent again: {}",
        qp.retries()
    );
    verify(&ctrl, &mut qp, 48 * 4, 9);
    drop(qp);
    drop(ctrl);
    assert!(p.dma_violations().is_empty());
    assert_eq!(p.dma().leaks(), 0);
}

#[test]
fn a_split_request_in_flight_at_a_reset_is_sent_again_whole() {
    // MDTS 2^1 pages of 4 KiB: 8 KiB per command; a 64 KiB write is 8 commands.
    let cfg = ModelConfig {
        mdts: 1,
        io_latency_ns: 50_000,
        ..config()
    };
    let (p, ctrl) = up(cfg, 1);
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    submit_writes(&ctrl, &mut qp, 3, 128, 4);
    assert_eq!(qp.outstanding(), 24, "commands in flight");
    ctrl.reset().expect("reset");
    let got = poll_for(&p, &mut qp, 3);
    assert_eq!(got.len(), 3);
    assert!(
        got.iter().all(|c| c.is_ok()),
        "{:?}",
        got.iter().map(|c| c.status).collect::<Vec<_>>()
    );
    assert_eq!(
        qp.retries(),
        24,
        "every command of the three requests again"
    );
    assert!(poll_up_to(&p, &mut qp, 1, 10_000).is_empty());
    verify(&ctrl, &mut qp, 3 * 128, 4);
    drop(qp);
    drop(ctrl);
    assert!(p.dma_violations().is_empty());
}

#[test]
fn a_command_that_timed_out_is_not_retried_after_the_reset() {
    let cfg = ModelConfig {
        stalls: vec![Stall {
            qid: 1,
            opcode: 0x02,
            after_ns: u64::MAX / 4,
            completes: false,
            count: 1,
        }],
        ..config()
    };
    let (p, ctrl) = up(cfg, 3);
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    qp.read(&ns, 0, 1, ctrl.dma().alloc(LBA).unwrap(), 5)
        .unwrap();
    let got = poll_for(&p, &mut qp, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, Status::ABORTED_BY_RESET);
    assert_eq!(qp.retries(), 0);
    assert!(p.dma_violations().is_empty());
}

#[test]
fn writes_queued_just_before_a_reset_complete_with_their_own_data() {
    // Earlier commands on the same trackers leave copies behind: the unrung ones must not be
    // confused with them.
    let (p, ctrl) = up(config(), 2);
    let mut qp = ctrl
        .alloc_qpair(QpairOptions {
            depth: 8,
            ..QpairOptions::default()
        })
        .unwrap();
    submit_writes(&ctrl, &mut qp, 4, 1, 1);
    assert_eq!(poll_for(&p, &mut qp, 4).len(), 4);
    // Same trackers, other blocks and data; queued without a doorbell.
    let ns = ctrl.namespace(1).unwrap();
    for i in 0..4u64 {
        let mut buf = ctrl.dma().alloc(LBA).unwrap();
        buf.as_mut_slice().copy_from_slice(&block(100 + i, 7));
        qp.write(&ns, 100 + i, 1, buf, 10 + i).unwrap();
    }
    ctrl.reset().expect("reset");
    let got = poll_for(&p, &mut qp, 4);
    assert_eq!(got.len(), 4);
    assert!(got.iter().all(|c| c.is_ok()));
    for i in 0..4u64 {
        let back = qp
            .read_sync(&ns, 100 + i, 1, ctrl.dma().alloc(LBA).unwrap())
            .unwrap();
        assert_eq!(back.as_slice(), &block(100 + i, 7)[..], "block {}", 100 + i);
        let old = qp
            .read_sync(&ns, i, 1, ctrl.dma().alloc(LBA).unwrap())
            .unwrap();
        assert_eq!(old.as_slice(), &block(i, 1)[..], "block {i} unchanged");
    }
    drop(qp);
    drop(ctrl);
    assert!(p.dma_violations().is_empty());
}
