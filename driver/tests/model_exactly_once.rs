//! Issue 30, "exactly once": every request ends exactly once, and no buffer is handed back or
//! freed while the device may still access it. These tests pin the cases where the driver's
//! idea of "the device stopped" and the device's own state part ways: a controller that can't
//! be disabled when it is removed or reset (the model's `ignore_disable`), with a read the
//! device carries out 30 s later (a stall), and queue pairs dropped before they noticed; and
//! the safe admin API, which refuses commands whose memory the device keeps using after they
//! complete and gives commands of unknown length only memory the driver keeps. The model
//! records every device access outside the pool's live allocations
//! (`ModelPlatform::dma_violations`). Virtual time: no sleeps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vfnvme::admin::ControllerEvent;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::hal::DmaPool;
use vfnvme::platform::{Platform, RegisterIo};
use vfnvme::spec::admin_command::{data_feature, opcode, AdminCommandError};
use vfnvme::spec::registers::{Csts, CC, CSTS};
use vfnvme::spec::AdminCommand;
use vfnvme::{Error, QpairOptions, QueuePair};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform, ModelRegs, Stall};

const READ: u8 = 0x02;
/// When the stalled read moves its data (4096 bytes into its buffer), after its submission.
const STALL_NS: u64 = 30_000_000_000;
/// The admin timeout of these tests (virtual time).
const ADMIN_TIMEOUT_MS: u64 = 100;

/// One namespace of 512-byte blocks; `ignore_disable`: CC.EN = 0 is ignored.
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

/// One read on I/O queue `qid` that the device carries out (and completes) 30 s late.
fn late_read(qid: u16) -> Stall {
    Stall {
        qid,
        opcode: READ,
        after_ns: STALL_NS,
        completes: true,
        count: 1,
    }
}

/// The controller options of these tests (I/O timeouts off unless a test sets them).
fn options() -> ControllerOptions {
    ControllerOptions {
        admin_timeout_ms: ADMIN_TIMEOUT_MS,
        io_timeout_ms: 0,
        ..ControllerOptions::default()
    }
}

/// A model with `cfg` and a controller up on it.
fn up(cfg: ModelConfig) -> (Arc<ModelPlatform>, Controller<ModelPlatform>) {
    let platform = ModelPlatform::new(cfg).expect("model config");
    let ctrl = Controller::new(platform.clone(), options()).expect("bring-up");
    (platform, ctrl)
}

/// Lets virtual time pass until `t` (the model runs stalled commands as time passes them).
fn run_until<P: Platform>(p: &P, t: u64) {
    while p.now_ns() < t {
        p.relax();
    }
}

/// Submits an 8-block (4096-byte) read into a fresh buffer on `qp` and rings its doorbell.
fn read_in_flight<P: Platform>(qp: &mut QueuePair<P>, ctrl: &Controller<P>) {
    let ns = ctrl.namespace(1).expect("namespace 1");
    let buf = ctrl.dma().alloc(4096).expect("DMA buffer");
    qp.read(&ns, 0, 8, buf, 1).expect("read submitted");
    qp.commit();
}

/// The verdict of the memory checks after a stuck controller: the device wrote nothing outside
/// the live allocations, and what it still had was leaked (counted) rather than freed.
fn assert_memory_kept(violations: &[String], leaks: usize, what: &str) {
    assert!(
        violations.is_empty(),
        "{what}: the device wrote memory the driver had freed (defect 4): {violations:#?}"
    );
    assert!(
        leaks >= 1,
        "{what}: the queue pair's memory must be leaked (the device may still use it), yet the pool counts {leaks} leaks"
    );
}

// ----- Defect 4: a queue pair dropped after a stuck removal -----

/// Defect 4: the kernel asks for the device back, `mark_removed` can't disable it (state
/// STUCK, epoch bumped), and a queue pair with a read in flight is dropped before it polled.
/// `QueuePair::drop` takes the epoch change for "a reset disabled the controller" and frees the
/// rings, trackers and the read's buffer; 30 s later the device writes the read's data into
/// freed memory.
#[test]
fn a_queue_pair_dropped_after_a_stuck_removal_keeps_its_memory() {
    let (p, ctrl) = up(config(vec![late_read(1)], true));
    let rx = ctrl.subscribe_controller_events();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    assert_eq!(qp.qid(), 1);
    let start = p.now_ns();
    read_in_flight(&mut qp, &ctrl);
    p.request_removal();
    assert!(
        ctrl.mark_removed(),
        "marked removed (stuck: CC.EN = 0 ignored)"
    );
    assert!(rx.try_iter().any(|e| e == ControllerEvent::Removed));
    assert!(
        Csts(p.regs().read32(CSTS)).rdy(),
        "the model ignored CC.EN = 0: the controller still runs"
    );
    drop(qp);
    run_until(&*p, start + STALL_NS + 1_000_000_000);
    let (violations, leaks) = (p.dma_violations(), p.dma().leaks());
    assert_memory_kept(&violations, leaks, "drop after mark_removed");
    drop(ctrl);
}

/// Defect 4 as an application meets it: one queue pair's periodic check notices the removal
/// request (`Platform::removed`) and marks the controller removed (stuck); another queue pair,
/// with a read in flight, is dropped without having polled since.
#[test]
fn a_queue_pair_dropped_after_another_noticed_a_stuck_removal_keeps_its_memory() {
    let (p, ctrl) = up(config(vec![late_read(2)], true));
    let mut a = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let mut b = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    assert_eq!((a.qid(), b.qid()), (1, 2));
    let start = p.now_ns();
    read_in_flight(&mut b, &ctrl);
    p.request_removal();
    // The periodic check runs every 256 polls.
    for _ in 0..512 {
        a.poll(usize::MAX, drop);
    }
    assert!(
        a.is_stuck(),
        "queue pair 1 noticed: the controller is stuck"
    );
    assert!(!ctrl.mark_removed(), "already marked removed by the poll");
    drop(b);
    run_until(&*p, start + STALL_NS + 1_000_000_000);
    let (violations, leaks) = (p.dma_violations(), p.dma().leaks());
    assert_memory_kept(&violations, leaks, "drop after another queue pair's poll");
    drop(a);
    drop(ctrl);
}

/// Item c, for contrast: a reset whose disable fails marks the controller stuck *without*
/// bumping the epoch, so an unpolled queue pair's drop goes to `Shared::release_qpair`, which
/// sees STUCK and leaks. Guards the fix of defect 4 against freeing here.
#[test]
fn a_queue_pair_dropped_after_a_reset_whose_disable_failed_keeps_its_memory() {
    let (p, ctrl) = up(config(vec![late_read(1)], true));
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let start = p.now_ns();
    read_in_flight(&mut qp, &ctrl);
    let e = ctrl.reset().unwrap_err();
    assert!(matches!(e, Error::DisableTimeout { .. }), "{e}");
    drop(qp);
    run_until(&*p, start + STALL_NS + 1_000_000_000);
    let (violations, leaks) = (p.dma_violations(), p.dma().leaks());
    assert_memory_kept(
        &violations,
        leaks,
        "drop after a reset whose disable failed",
    );
    drop(ctrl);
}

// ----- The second branch: `fail()` after a successful first disable -----

/// Offset of the admin submission queue's tail doorbell (DSTRD = 0).
const ADMIN_SQ_DOORBELL: usize = 0x1000;

/// A register file over the model's that, once [`Saboteur::armed`], lets the next CC.EN = 0
/// through and from then on ignores every CC.EN = 0 and every admin SQ doorbell: a controller
/// that a reset disables once, that then takes no admin command, and that the reset's fallback
/// disable (`Shared::fail`) can't stop.
struct SaboteurRegs {
    model: Arc<ModelPlatform>,
    /// Set by the test: the next disable is the last one the controller honours.
    armed: AtomicBool,
    /// Set by that disable.
    sabotaged: AtomicBool,
}

impl SaboteurRegs {
    fn inner(&self) -> &ModelRegs {
        self.model.regs()
    }
}

impl RegisterIo for SaboteurRegs {
    fn read32(&self, offset: usize) -> u32 {
        self.inner().read32(offset)
    }
    unsafe fn write32(&self, offset: usize, value: u32) {
        if self.sabotaged.load(Ordering::Acquire) {
            let disabling = offset == CC && self.inner().read32(CC) & 1 == 1 && value & 1 == 0;
            if disabling || offset == ADMIN_SQ_DOORBELL {
                return;
            }
        } else if offset == CC && value & 1 == 0 && self.armed.load(Ordering::Acquire) {
            self.sabotaged.store(true, Ordering::Release);
        }
        // SAFETY: forwarded as given; the caller's guarantee covers it.
        unsafe { self.inner().write32(offset, value) }
    }
    fn read64(&self, offset: usize) -> u64 {
        self.inner().read64(offset)
    }
    unsafe fn write64(&self, offset: usize, value: u64) {
        // SAFETY: forwarded as given; the caller's guarantee covers it.
        unsafe { self.inner().write64(offset, value) }
    }
    fn size(&self) -> usize {
        self.inner().size()
    }
}

/// A platform over the model whose registers are a [`SaboteurRegs`] (test-only helper).
struct Saboteur {
    model: Arc<ModelPlatform>,
    regs: SaboteurRegs,
}

impl Saboteur {
    /// From now on the next disable is the last the controller honours.
    fn arm(&self) {
        self.regs.armed.store(true, Ordering::Release);
    }
}

impl Platform for Saboteur {
    type Regs = SaboteurRegs;
    fn regs(&self) -> &SaboteurRegs {
        &self.regs
    }
    fn dma(&self) -> &DmaPool {
        self.model.dma()
    }
    fn now_ns(&self) -> u64 {
        self.model.now_ns()
    }
    fn relax(&self) {
        Platform::relax(&*self.model);
    }
    fn before_poll(&self, cq_id: u16) {
        self.model.before_poll(cq_id);
    }
    fn name(&self) -> String {
        self.model.name()
    }
    fn pci_id(&self) -> Option<(u16, u16)> {
        self.model.pci_id()
    }
    fn removed(&self) -> bool {
        Platform::removed(&*self.model)
    }
}

/// The second branch of defect 4's report: a reset disables the controller (epoch bumped),
/// the next step fails (Set Number of Queues times out) and so does `fail()`'s disable
/// (state STUCK). An unpolled queue pair's drop then frees its memory, as after defect 4 —
/// but here rightly: the successful first disable deleted its queues and dropped the stalled
/// read, so the device no longer has any of it. No violation: not a defect.
#[test]
fn a_queue_pair_dropped_after_a_reset_that_failed_past_its_disable_frees_only_unused_memory() {
    let model = ModelPlatform::new(config(vec![late_read(1)], false)).unwrap();
    let p = Arc::new(Saboteur {
        model: model.clone(),
        regs: SaboteurRegs {
            model: model.clone(),
            armed: AtomicBool::new(false),
            sabotaged: AtomicBool::new(false),
        },
    });
    let ctrl = Controller::new(p.clone(), options()).expect("bring-up");
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let start = p.now_ns();
    read_in_flight(&mut qp, &ctrl);
    p.arm();
    let e = ctrl.reset().unwrap_err();
    assert!(
        matches!(e, Error::AdminTimeout { .. }),
        "Set Number of Queues timed out after the first disable: {e}"
    );
    assert!(
        Csts(p.regs().read32(CSTS)).rdy(),
        "the fallback disable was ignored: the controller runs (stuck)"
    );
    assert!(
        matches!(ctrl.identify_controller(), Err(Error::ShutDown)),
        "stuck controllers refuse admin commands"
    );
    drop(qp);
    run_until(&*p, start + STALL_NS + 1_000_000_000);
    assert_eq!(model.dma_violations(), Vec::<String>::new());
    drop(ctrl);
    assert_eq!(model.dma_violations(), Vec::<String>::new());
}

// ----- Item b: the safe admin API and memory the device keeps using -----

/// Admin commands the model completed (any opcode): a refused command never reaches it.
fn admin_sent(p: &ModelPlatform) -> u64 {
    p.stats().admin_completed.values().sum()
}

/// Asserts that `r` is the safe API's typed refusal (an `AdminCommandError`) and that the
/// command never reached the device.
fn assert_refused<T: std::fmt::Debug>(
    p: &ModelPlatform,
    before: u64,
    r: Result<T, Error>,
    what: &str,
) {
    match r {
        Err(Error::AdminCommand(_)) => {}
        other => panic!(
            "{what}: the safe admin API must refuse it (typed error): the device may keep using its memory after it completes, and the driver frees that memory at completion; got {other:?}"
        ),
    }
    assert_eq!(
        admin_sent(p),
        before,
        "{what}: a refused command reached the device"
    );
}

/// Set Features, Host Memory Buffer (FID 0Dh) lends host memory for as long as the controller
/// runs: refused by every safe entry point. (`AdminCommand::transfer` refuses it.)
#[test]
fn the_safe_admin_api_refuses_host_memory_buffer_enable() {
    let (p, ctrl) = up(config(Vec::new(), false));
    let before = admin_sent(&p);
    let page = vec![0u8; 4096];
    let hmb = |cdw11| AdminCommand::set_features(data_feature::HOST_MEMORY_BUFFER, cdw11);
    assert_refused(
        &p,
        before,
        ctrl.set_features(0x0d, 1, Some(&page)),
        "set_features(0Dh, data)",
    );
    assert_refused(
        &p,
        before,
        ctrl.set_features(0x0d, 1, None),
        "set_features(0Dh)",
    );
    assert_refused(
        &p,
        before,
        ctrl.admin_write(hmb(1), &page),
        "admin_write(HMB)",
    );
    assert_refused(&p, before, ctrl.admin(hmb(1)), "admin(HMB)");
    // With Save (CDW10 bit 31) the FID is still 0Dh.
    let mut saved = hmb(1);
    saved.cdw10 |= 1 << 31;
    assert_refused(
        &p,
        before,
        ctrl.admin_write(saved, &page),
        "admin_write(HMB, SV)",
    );
    // Reading its attributes is fine.
    ctrl.admin_read(AdminCommand::get_features(0x0d, 0), 4096)
        .map(|_| ())
        .or_else(|e| match e {
            Error::AdminFailed { .. } => Ok(()),
            e => Err(e),
        })
        .expect("Get Features (HMB) goes through");
}

/// Doorbell Buffer Config (7Ch) makes the device keep using its two pages: refused. Passes
/// today.
#[test]
fn the_safe_admin_api_refuses_doorbell_buffer_config() {
    let (p, ctrl) = up(config(Vec::new(), false));
    let before = admin_sent(&p);
    let dbbc = AdminCommand::new(opcode::DOORBELL_BUFFER_CONFIG);
    let buf = ctrl.dma().alloc(8192).unwrap();
    assert_refused(
        &p,
        before,
        ctrl.admin_with_data(dbbc, buf),
        "admin_with_data(7Ch)",
    );
    assert_refused(&p, before, ctrl.admin_read(dbbc, 4096), "admin_read(7Ch)");
    assert_refused(&p, before, ctrl.admin(dbbc), "admin(7Ch)");
}

/// A vendor-specific opcode (C0h and up) with data: the driver can't know whether the device
/// keeps using the memory after the command completes, so the device never gets the caller's
/// buffer: the data goes through the controller's own unknown-length pages (copied in before,
/// back out after a success), which are not freed at completion but kept until the controller
/// is disabled. The model's vendor fill (C2h) writes CDW10 bytes of CDW11's value.
#[test]
fn a_vendor_opcode_with_data_gets_the_data_through_pages_that_stay() {
    let (p, ctrl) = up(config(Vec::new(), false));
    let pool = ctrl.dma().clone();
    let fill = |len: u32, byte: u32| AdminCommand {
        opcode: vfnvme_model::VENDOR_FILL_OPCODE,
        cdw10: len,
        cdw11: byte,
        ..AdminCommand::default()
    };
    let before = pool.live_allocations();
    let buf = ctrl.dma().alloc(4096).unwrap();
    let (_, buf) = ctrl.admin_with_data(fill(4096, 0x5a), buf).unwrap();
    assert!(
        buf.as_slice().iter().all(|&b| b == 0x5a),
        "the data came back"
    );
    drop(buf);
    // The unknown-length pages stay (one allocation), the same for the next command.
    assert_eq!(pool.live_allocations(), before + 1);
    let (_, buf) = ctrl.admin_read(fill(512, 0x33), 512).unwrap();
    assert!(buf.as_slice().iter().all(|&b| b == 0x33));
    drop(buf);
    assert_eq!(pool.live_allocations(), before + 1);
    // Without data: the same pages.
    ctrl.admin(fill(4096, 0x11)).unwrap();
    assert_eq!(pool.live_allocations(), before + 1);
    // More than one page of buffer: the driver can't bound the transfer (typed refusal).
    let e = ctrl.admin_read(fill(8192, 1), 8192).unwrap_err();
    assert!(
        matches!(
            e,
            Error::AdminCommand(AdminCommandError::UnknownLength { .. })
        ),
        "{e}"
    );
    drop(ctrl);
    assert_eq!(
        pool.live_allocations(),
        0,
        "freed once the controller is disabled"
    );
    assert_eq!(p.dma_violations(), Vec::<String>::new());
}

/// A vendor command that times out and is carried out later (a stalled fill, 1 s late): the
/// caller's buffer came back with the timeout and went to a new owner, and the late write
/// lands in the controller's unknown-length pages, never in the new owner's buffer.
#[test]
fn a_late_vendor_command_never_writes_the_callers_memory() {
    let stall = Stall {
        qid: 0,
        opcode: vfnvme_model::VENDOR_FILL_OPCODE,
        after_ns: 1_000_000_000,
        completes: true,
        count: 1,
    };
    let (p, ctrl) = up(config(vec![stall], false));
    let start = p.now_ns();
    let fill = AdminCommand {
        opcode: vfnvme_model::VENDOR_FILL_OPCODE,
        cdw10: 4096,
        cdw11: 0xee,
        ..AdminCommand::default()
    };
    let buf = ctrl.dma().alloc(4096).unwrap();
    let at = buf.iova();
    let e = ctrl.admin_with_data(fill, buf).unwrap_err();
    assert!(matches!(e, Error::AdminTimeout { .. }), "{e}");
    // The pool hands freed chunks out first: find the caller's old chunk with a new owner.
    let owners: Vec<_> = (0..8).map(|_| ctrl.dma().alloc(4096).unwrap()).collect();
    let reused = owners
        .iter()
        .find(|b| b.iova() == at)
        .expect("the caller's buffer went back to the pool and out again");
    run_until(&*p, start + 2_000_000_000);
    assert!(
        reused.as_slice().iter().all(|&b| b == 0),
        "the late vendor write reached the new owner's buffer"
    );
    assert_eq!(p.dma_violations(), Vec::<String>::new());
    // The admin queue goes on.
    ctrl.identify_controller().unwrap();
}

/// An opcode the specification reserves (here 3Fh) with data reaches the device through the
/// same pages; the model answers Invalid Opcode: a typed error, nothing freed early.
#[test]
fn a_reserved_opcode_with_data_is_a_typed_device_error() {
    let (p, ctrl) = up(config(Vec::new(), false));
    let e = ctrl.admin_read(AdminCommand::new(0x3f), 4096).unwrap_err();
    assert!(matches!(e, Error::AdminFailed { .. }), "{e}");
    let e = ctrl.set_features(0xc0, 1, Some(&[0; 4096])).unwrap_err();
    assert!(matches!(e, Error::AdminFailed { .. }), "{e}");
    assert_eq!(p.dma_violations(), Vec::<String>::new());
}

/// A queue pair whose controller another one disabled (its queue delete failed, so dropping it
/// disabled the controller to free its memory) ends its requests at its next periodic check,
/// with `CONTROLLER_LOST` and the buffer back (the device stopped), even with I/O timeouts off:
/// the generator's seed 1213 found requests that never ended once the controller was
/// disabled this way.
#[test]
fn requests_end_when_another_queue_pair_disabled_the_controller() {
    let mut cfg = config(vec![late_read(1)], false);
    cfg.fail_delete_sq = true;
    let (p, ctrl) = up(cfg);
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let other = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    read_in_flight(&mut qp, &ctrl);
    // Delete I/O SQ fails: the drop disables the controller before freeing the queue's memory.
    drop(other);
    let mut ended = Vec::new();
    for _ in 0..100_000 {
        qp.poll(1, |c| {
            ended.push((c.status, c.buffer.is_some(), c.memory_held))
        });
        if !ended.is_empty() {
            break;
        }
        p.relax();
    }
    assert_eq!(
        ended,
        vec![(vfnvme::spec::Status::CONTROLLER_LOST, true, false)],
        "the read ends once, its buffer back"
    );
    assert_eq!(qp.outstanding(), 0);
    drop(qp);
    drop(ctrl);
    assert_eq!(p.dma_violations(), Vec::<String>::new());
}
