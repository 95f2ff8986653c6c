//! The device never DMAs into memory the driver gave back (issue 9, part 2): timed-out admin
//! commands keep their buffers parked, queue pairs and failed bring-ups free memory only once
//! the controller is provably done with it (queues deleted, or controller disabled), and leak it
//! (counted) when even a disable fails. The model refuses and records every device access
//! outside the pool's live allocations (`ModelPlatform::dma_violations`).

use std::sync::Arc;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::platform::{Platform, RegisterIo};
use vfnvme::spec::registers::{Csts, CSTS};
use vfnvme::{Error, QpairOptions};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform, Stall};

/// The admin timeout of these tests; stalled commands execute well after it.
const ADMIN_TIMEOUT_MS: u64 = 100;
/// When a stalled command executes, after its submission.
const STALL_NS: u64 = 1_000_000_000;

const GET_LOG_PAGE: u8 = 0x02;
const IDENTIFY: u8 = 0x06;
const DELETE_SQ: u8 = 0x00;
const READ: u8 = 0x02;

fn config(stalls: Vec<Stall>) -> ModelConfig {
    ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 1 << 20,
            lba_size: 512,
            backing: Backing::Ram,
        }],
        io_latency_ns: 1_000,
        admin_latency_ns: 1_000,
        stalls,
        ..ModelConfig::default()
    }
}

fn options() -> ControllerOptions {
    ControllerOptions {
        admin_timeout_ms: ADMIN_TIMEOUT_MS,
        ..ControllerOptions::default()
    }
}

fn up(cfg: ModelConfig) -> (Arc<ModelPlatform>, Controller<ModelPlatform>) {
    let platform = ModelPlatform::new(cfg).expect("model config");
    let ctrl = Controller::new(platform.clone(), options()).expect("bring-up");
    (platform, ctrl)
}

/// Lets virtual time pass (the model runs stalled commands that become due) until `t`.
fn run_until(p: &ModelPlatform, t: u64) {
    while p.now_ns() < t {
        p.relax();
    }
}

fn stall(qid: u16, opcode: u8, completes: bool) -> Stall {
    Stall {
        count: 0,
        qid,
        opcode,
        after_ns: STALL_NS,
        completes,
    }
}

fn ready(p: &ModelPlatform) -> bool {
    Csts(p.regs().read32(CSTS)).rdy()
}

/// Makes the controller read the Changed Namespace List (a 4 KiB Get Log Page), which is stalled.
fn trigger_log_page_timeout(p: &ModelPlatform, ctrl: &Controller<ModelPlatform>) {
    p.resize_namespace(1, 1 << 19).unwrap();
    let err = ctrl.process_admin_completions().unwrap_err();
    assert!(
        matches!(
            err,
            Error::AdminTimeout {
                opcode: GET_LOG_PAGE,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn late_admin_completion_frees_the_parked_page_only_then() {
    let (p, ctrl) = up(config(vec![stall(0, GET_LOG_PAGE, true)]));
    let start = p.now_ns();
    trigger_log_page_timeout(&p, &ctrl);
    let parked = p.dma().live_allocations();
    // The device writes the log page and completes the command long after the timeout.
    run_until(&p, start + 2 * STALL_NS);
    assert_eq!(p.dma_violations(), Vec::<String>::new());
    assert_eq!(
        p.dma().live_allocations(),
        parked,
        "the page stays parked until its completion is reaped"
    );
    // The next admin poll reaps the late completion: now the page is freed.
    ctrl.process_admin_completions().unwrap();
    assert_eq!(
        p.dma().live_allocations(),
        parked - 1,
        "freed on completion"
    );
    drop(ctrl);
    assert_eq!(p.dma().live_allocations(), 0);
    assert_eq!(p.dma().leaks(), 0);
    assert_eq!(p.dma_violations(), Vec::<String>::new());
}

#[test]
fn data_written_after_the_timeout_lands_in_the_parked_page() {
    // The device writes the log page late and never completes the command.
    let (p, ctrl) = up(config(vec![stall(0, GET_LOG_PAGE, false)]));
    let start = p.now_ns();
    trigger_log_page_timeout(&p, &ctrl);
    // Memory allocated after the timeout must not be where the device writes.
    let mut mine = p.dma().alloc(4096).unwrap();
    mine.as_mut_slice().fill(0xAA);
    run_until(&p, start + 2 * STALL_NS);
    assert!(
        mine.as_slice().iter().all(|&b| b == 0xAA),
        "the device wrote into a buffer allocated after the timeout"
    );
    assert_eq!(p.dma_violations(), Vec::<String>::new());
    // It never completes: the page is freed when the controller is disabled (drop).
    drop(ctrl);
    assert!(!ready(&p), "disabled");
    assert_eq!(p.dma().live_allocations(), 1, "only `mine` is left");
    assert_eq!(p.dma().leaks(), 0);
}

/// A read that the device executes late, on a queue pair that is then dropped.
fn drop_qpair_with_read_in_flight(p: &ModelPlatform, ctrl: &Controller<ModelPlatform>) {
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let buf = p.dma().alloc(4096).unwrap();
    qp.read(&ns, 0, 8, buf, 7).unwrap();
    qp.commit();
    assert_eq!(qp.poll(16, |_| {}), 0, "the read is stalled");
    drop(qp);
}

#[test]
fn failing_delete_sq_disables_the_controller_before_freeing() {
    let (p, ctrl) = up(ModelConfig {
        fail_delete_sq: true,
        ..config(vec![stall(1, READ, true)])
    });
    let start = p.now_ns();
    drop_qpair_with_read_in_flight(&p, &ctrl);
    run_until(&p, start + 2 * STALL_NS);
    assert_eq!(p.dma_violations(), Vec::<String>::new());
    assert!(!ready(&p), "Delete SQ failed: the controller was disabled");
    assert_eq!(p.dma().leaks(), 0);
    drop(ctrl);
    assert_eq!(p.dma().live_allocations(), 0);
}

#[test]
fn timed_out_delete_sq_disables_the_controller_before_freeing() {
    let (p, ctrl) = up(config(vec![
        stall(1, READ, true),
        stall(0, DELETE_SQ, false),
    ]));
    let start = p.now_ns();
    drop_qpair_with_read_in_flight(&p, &ctrl);
    run_until(&p, start + 2 * STALL_NS);
    assert_eq!(p.dma_violations(), Vec::<String>::new());
    assert!(
        !ready(&p),
        "Delete SQ timed out: the controller was disabled"
    );
    assert_eq!(p.dma().leaks(), 0);
    drop(ctrl);
    assert_eq!(p.dma().live_allocations(), 0);
}

#[test]
fn failing_delete_sq_and_disable_leak_the_queue_memory() {
    let (p, ctrl) = up(ModelConfig {
        fail_delete_sq: true,
        ignore_disable: true,
        ..config(vec![stall(1, READ, true)])
    });
    let start = p.now_ns();
    drop_qpair_with_read_in_flight(&p, &ctrl);
    // The late read lands in leaked (still allocated) memory.
    run_until(&p, start + 2 * STALL_NS);
    assert_eq!(p.dma_violations(), Vec::<String>::new());
    assert!(ready(&p), "the controller ignored CC.EN = 0");
    assert_eq!(p.dma().leaks(), 1, "the queue pair's memory was leaked");
    drop(ctrl);
    assert_eq!(
        p.dma().leaks(),
        4,
        "then what the controller also still has: scan pages, admin queue, shadow doorbells"
    );
    assert_eq!(p.dma_violations(), Vec::<String>::new());
}

#[test]
fn bring_up_failure_after_enable_disables_before_freeing_the_admin_rings() {
    let p = ModelPlatform::new(config(vec![stall(0, IDENTIFY, true)])).unwrap();
    let err = Controller::new(p.clone(), options()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::AdminTimeout {
                opcode: IDENTIFY,
                ..
            }
        ),
        "{err}"
    );
    // The stalled Identify writes its page and a completion into the admin CQ now, unless the
    // controller was disabled.
    run_until(&p, p.now_ns() + 2 * STALL_NS);
    assert_eq!(p.dma_violations(), Vec::<String>::new());
    assert!(!ready(&p), "disabled before the admin rings were freed");
    assert_eq!(p.dma().live_allocations(), 0);
    assert_eq!(p.dma().leaks(), 0);
}

#[test]
fn bring_up_failure_on_a_controller_that_cannot_be_disabled_leaks_the_admin_queue() {
    let p = ModelPlatform::new(ModelConfig {
        ignore_disable: true,
        ..config(vec![stall(0, IDENTIFY, true)])
    })
    .unwrap();
    let err = Controller::new(p.clone(), options()).unwrap_err();
    assert!(matches!(err, Error::AdminTimeout { .. }), "{err}");
    run_until(&p, p.now_ns() + 2 * STALL_NS);
    assert_eq!(p.dma_violations(), Vec::<String>::new());
    assert_eq!(p.dma().leaks(), 1, "the admin queue (rings, parked page)");
}

#[test]
fn reset_frees_what_a_timed_out_admin_command_left_parked() {
    // The device writes the log page late and never completes the command.
    let (p, ctrl) = up(config(vec![stall(0, GET_LOG_PAGE, false)]));
    trigger_log_page_timeout(&p, &ctrl);
    let parked = p.dma().live_allocations();
    // The reset disables the controller first: the parked page goes back to the pool (the
    // fresh admin rings replace the old ones one for one).
    ctrl.reset().unwrap();
    assert!(ready(&p), "enabled again");
    assert_eq!(p.dma().live_allocations(), parked - 1, "the page was freed");
    assert_eq!(p.dma_violations(), Vec::<String>::new());
    assert_eq!(ctrl.identify_active_ns_list(0).unwrap(), vec![1]);
    drop(ctrl);
    assert_eq!(p.dma().live_allocations(), 0);
    assert_eq!(p.dma().leaks(), 0);
}

#[test]
fn reset_refuses_a_controller_disabled_to_free_memory() {
    let mut cfg = config(Vec::new());
    cfg.fail_delete_sq = true;
    let (p, ctrl) = up(cfg);
    drop(ctrl.alloc_qpair(QpairOptions::default()).unwrap());
    assert!(!ready(&p), "disabled after the failed Delete SQ");
    let e = ctrl.reset().unwrap_err();
    assert!(matches!(e, Error::ShutDown), "{e}");
    assert!(
        !ready(&p),
        "still disabled: the queue pair's memory was freed"
    );
}
