//! Regression tests of issue 30 ("exactly once") through the C ABI on the model: every request
//! ends exactly once, and no buffer is handed back (its completion delivered) or freeable
//! (vfnvme_dma_free returns 0) while the device may still access it
//! ([`ModelPlatform::held_data`]). One test per defect found by the review; each fails on the
//! code the review looked at.

use crate::abi_model_support::{open_ctrl, release, ModelCtrl};
use crate::ctrl::*;
use crate::error::vfnvme_last_error;
use crate::model::{vfnvme_ctrl_model_request_removal, vfnvme_ctrl_open_model, ModelOpts};
use crate::qpair::*;
use crate::types::{Completion, Cpl, VFNVME_SCT_PATH};
use crate::Status;
use std::cell::RefCell;
use std::ffi::{c_void, CStr};
use std::ptr::null_mut;
use vfnvme::platform::Platform;
use vfnvme::ControllerOptions;
use vfnvme_model::{Backing, FaultPlan, ModelConfig, ModelNamespaceConfig, ModelPlatform, Stall};

const OK: i32 = 0;

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated.
    unsafe { CStr::from_ptr(vfnvme_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// One RAM namespace of `blocks` blocks of `lba_size` bytes.
fn ns(lba_size: u32, blocks: u64) -> Vec<ModelNamespaceConfig> {
    vec![ModelNamespaceConfig {
        nsid: 1,
        blocks,
        lba_size,
        backing: Backing::Ram,
    }]
}

/// A DMA buffer of `len` bytes from `ctrl`, and its IOVA.
fn alloc(ctrl: *mut Ctrl, len: usize) -> (*mut u8, u64) {
    let (mut p, mut iova) = (null_mut(), 0);
    // SAFETY: `ctrl` is open; valid out pointers.
    let rc = unsafe { vfnvme_dma_alloc(ctrl, len, &mut p, &mut iova) };
    assert_eq!(rc, OK, "{}", last_error());
    (p.cast(), iova)
}

/// Completions by request id, pushed by [`record`] (a `RefCell`: the callback writes through a
/// pointer while the test reads through a reference).
#[derive(Default)]
struct Log(RefCell<Vec<(usize, Cpl)>>);

/// The argument of one request: where its completion goes, and its id.
struct Arg {
    log: *const Log,
    id: usize,
}

/// The completion callback: records (id, cpl).
unsafe extern "C" fn record(arg: *mut c_void, cpl: *const Cpl) {
    // SAFETY: `arg` is an `Arg` the test keeps alive until its completion; `cpl` is valid
    // during the call.
    unsafe {
        let a = &*(arg as *const Arg);
        (*a.log).0.borrow_mut().push((a.id, *cpl));
    }
}

/// Whether `iova..iova+len` overlaps one of `held`.
fn overlaps(held: &[(u64, u64)], iova: u64, len: u64) -> bool {
    held.iter()
        .any(|&(s, l)| s < iova.saturating_add(len) && iova < s.saturating_add(l))
}

/// Defect 1: a controller that can't be disabled (`ignore_disable`) holds a read for 30 s;
/// after the I/O timeout (100 ms) the Abort and the reset get nowhere and the read ends with
/// sct 3h / sc 70h. The device may still write its buffer, so vfnvme_dma_free must refuse it
/// (VFNVME_ERR_BUSY), and when the read executes at 30 s no DMA violation is recorded and no
/// other live buffer is overwritten. (Before the fix the free succeeded, vfnvme_dma_alloc
/// handed the same memory to a new owner, and the stale read overwrote it.)
#[test]
fn stuck_controller_keeps_a_timed_out_reads_buffer_until_the_device_is_done() {
    let config = ModelConfig {
        namespaces: ns(4096, 1024),
        max_io_queue_pairs: 4,
        ignore_disable: true,
        stalls: vec![Stall {
            qid: 1,
            opcode: 0x02,
            after_ns: 30_000_000_000,
            completes: true,
            count: 1,
        }],
        ..ModelConfig::default()
    };
    let opts = ControllerOptions {
        io_timeout_ms: 100,
        ..ControllerOptions::default()
    };
    let ModelCtrl { ctrl, platform } = open_ctrl(config, opts).expect("model");
    let log = Log::default();
    let read = Arg { log: &log, id: 0 };
    let (rbuf, riova) = alloc(ctrl, 4096);
    let mut qp = null_mut();
    // SAFETY: valid pointers; buffers and args outlive their commands.
    unsafe {
        assert_eq!(
            vfnvme_qpair_alloc(ctrl, 16, &mut qp),
            OK,
            "{}",
            last_error()
        );
        let arg = &read as *const Arg as *mut c_void;
        assert_eq!(
            vfnvme_qpair_read(qp, 1, rbuf.cast(), 0, 1, Some(record), arg),
            OK
        );
        let mut polls = 0;
        while log.0.borrow().is_empty() && polls < 1_000_000 {
            assert!(vfnvme_qpair_process_completions(qp, 0) >= 0);
            platform.relax();
            polls += 1;
        }
        let ends = log.0.borrow().clone();
        assert_eq!(ends.len(), 1, "the read ends once (after {polls} polls)");
        let cpl = ends[0].1;
        assert!(
            platform.now_ns() < 30_000_000_000,
            "it ended before the device was done"
        );
        let held = overlaps(&platform.held_data(), riova, 4096);
        assert!(held, "the device still holds the read");
        // What the fixed code must do: refuse the free while the device may write the buffer.
        let freed = vfnvme_dma_free(ctrl, rbuf.cast());
        // A new owner of memory (the same chunk, if the free went through).
        let (nbuf, _) = alloc(ctrl, 4096);
        std::slice::from_raw_parts_mut(nbuf, 4096).fill(0xa5);
        while platform.now_ns() <= 31_000_000_000 {
            platform.relax();
            vfnvme_qpair_process_completions(qp, 0);
        }
        let overwritten = std::slice::from_raw_parts(nbuf, 4096)
            .iter()
            .any(|&b| b != 0xa5);
        let violations = platform.dma_violations();
        let same_chunk = nbuf == rbuf;
        assert!(
            freed == Status::VfnvmeErrBusy.code() && !overwritten && violations.is_empty(),
            "the read ended with {cpl:?} while the device held it; vfnvme_dma_free of its \
             buffer returned {freed} (want VFNVME_ERR_BUSY = -8); the next vfnvme_dma_alloc \
             returned the same memory: {same_chunk}; that new owner's buffer was overwritten \
             at 30 s: {overwritten}; DMA violations: {violations:?}"
        );
        assert_eq!(cpl.sct, VFNVME_SCT_PATH, "{cpl:?}");
        // The queue pair and controller may stay busy: a controller that can't be disabled
        // keeps what it held. Closing is best effort here.
        vfnvme_qpair_free(qp);
        vfnvme_dma_free(ctrl, nbuf.cast());
        vfnvme_ctrl_close(ctrl);
    }
    release(vec![platform]);
}

/// Defect 1, the end of the story: the application gives up on a controller that can't be
/// disabled (its read held for 30 s) and frees the queue pair and closes the controller before
/// the device is done. The held read's completion says so (sct 3h / sc 70h, rc
/// VFNVME_ERR_BUSY); closing leaks its buffer (the pool counts it) instead of freeing it, so
/// the read the device carries out at 30 s writes no memory the pool got back, and the queue
/// pair refuses new I/O with VFNVME_ERR_DEVICE meanwhile.
#[test]
fn closing_a_stuck_controller_keeps_the_buffers_the_device_may_still_write() {
    let config = ModelConfig {
        namespaces: ns(4096, 1024),
        max_io_queue_pairs: 4,
        ignore_disable: true,
        stalls: vec![Stall {
            qid: 1,
            opcode: 0x02,
            after_ns: 30_000_000_000,
            completes: true,
            count: 1,
        }],
        ..ModelConfig::default()
    };
    let opts = ControllerOptions {
        io_timeout_ms: 100,
        ..ControllerOptions::default()
    };
    let ModelCtrl { ctrl, platform } = open_ctrl(config, opts).expect("model");
    let pool = {
        // SAFETY: `ctrl` is open.
        let c = unsafe { &*ctrl };
        c.ops.dma().clone()
    };
    let log = Log::default();
    let read = Arg { log: &log, id: 0 };
    let (rbuf, _) = alloc(ctrl, 4096);
    let (other, _) = alloc(ctrl, 4096);
    let mut qp = null_mut();
    // SAFETY: valid pointers; buffers and args outlive their commands.
    unsafe {
        assert_eq!(
            vfnvme_qpair_alloc(ctrl, 16, &mut qp),
            OK,
            "{}",
            last_error()
        );
        let arg = &read as *const Arg as *mut c_void;
        assert_eq!(
            vfnvme_qpair_read(qp, 1, rbuf.cast(), 0, 1, Some(record), arg),
            OK
        );
        let mut polls = 0;
        while log.0.borrow().is_empty() && polls < 1_000_000 {
            assert!(vfnvme_qpair_process_completions(qp, 0) >= 0);
            platform.relax();
            polls += 1;
        }
        let ends = log.0.borrow().clone();
        assert_eq!(ends.len(), 1, "the read ends once (after {polls} polls)");
        let cpl = ends[0].1;
        assert_eq!((cpl.sct, cpl.sc), (VFNVME_SCT_PATH, 0x70), "{cpl:?}");
        assert_eq!(cpl.rc, Status::VfnvmeErrBusy.code(), "held: {cpl:?}");
        // The queue pair takes nothing more (its ring is never written again).
        let rc = vfnvme_qpair_read(qp, 1, other.cast(), 1, 1, None, null_mut());
        assert_eq!(rc, Status::VfnvmeErrDevice.code(), "{}", last_error());
        assert_eq!(vfnvme_qpair_outstanding(qp), 0);
        assert_eq!(
            vfnvme_dma_free(ctrl, rbuf.cast()),
            Status::VfnvmeErrBusy.code()
        );
        assert_eq!(vfnvme_qpair_free(qp), OK, "{}", last_error());
        assert_eq!(
            vfnvme_dma_free(ctrl, rbuf.cast()),
            Status::VfnvmeErrBusy.code(),
            "still held after the queue pair is gone"
        );
        let leaks = pool.leaks();
        assert_eq!(vfnvme_ctrl_close(ctrl), OK, "{}", last_error());
        assert!(pool.leaks() > leaks, "the held buffer was leaked at close");
    }
    while platform.now_ns() <= 31_000_000_000 {
        platform.relax();
    }
    assert!(
        platform.held_data().is_empty(),
        "the device carried the read out"
    );
    assert_eq!(platform.dma_violations(), Vec::<String>::new());
    release(vec![platform]);
}

/// Defect 2: with more than 32768 trackers a command identifier has no generation bits, so a
/// duplicate completion (a buggy device posting one twice, up to 5 ms late) of a finished read
/// ends the read that took its tracker next (trackers are reused last-in first-out). With a
/// fifth of the reads held 50 ms (late completions) and half completed twice, at depth 40,000
/// (the controller allows 65536 entries), such a read "succeeds" while the device still holds
/// it, its buffer not yet filled. No read may complete while `held_data` covers its buffer,
/// and every read's data must be the block's. (At depth 30,000, one generation bit, the same
/// happens when a tracker is reused twice within the 5 ms.)
#[test]
fn duplicate_completions_at_depth_40000_end_no_read_early() {
    const DEPTH: u32 = 40_000;
    const BLOCKS: u64 = 40_960;
    const READS: usize = DEPTH as usize + 4096;
    const BS: usize = 512;
    let config = ModelConfig {
        namespaces: ns(BS as u32, BLOCKS),
        max_io_queue_pairs: 2,
        max_queue_entries: 65536,
        io_latency_ns: 1_000,
        seed: 30,
        ..ModelConfig::default()
    };
    let ModelCtrl { ctrl, platform } =
        open_ctrl(config, ControllerOptions::default()).expect("model");
    /// Block `lba`'s content.
    fn block(lba: u64) -> [u8; BS] {
        let mut b = [(lba as u8).wrapping_mul(7) | 1; BS];
        b[..8].copy_from_slice(&(lba ^ 0x5eed_0000).to_le_bytes());
        b
    }
    let log = Log::default();
    let args: Vec<Arg> = (0..READS).map(|id| Arg { log: &log, id }).collect();
    let (wbuf, _) = alloc(ctrl, BLOCKS as usize * BS);
    let (rbuf, riova) = alloc(ctrl, READS * BS);
    let mut qp = null_mut();
    // SAFETY: valid pointers; buffers and args outlive their commands.
    unsafe {
        assert_eq!(
            vfnvme_qpair_alloc(ctrl, DEPTH, &mut qp),
            OK,
            "{}",
            last_error()
        );
        // The namespace's blocks, written 256 at a time without faults.
        let w = std::slice::from_raw_parts_mut(wbuf, BLOCKS as usize * BS);
        for lba in 0..BLOCKS {
            let at = lba as usize * BS;
            w[at..at + BS].copy_from_slice(&block(lba));
        }
        for lba in (0..BLOCKS).step_by(256) {
            let p = wbuf.add(lba as usize * BS);
            assert_eq!(
                vfnvme_qpair_write(qp, 1, p.cast(), lba, 256, None, null_mut()),
                OK
            );
        }
        for _ in 0..100_000 {
            if vfnvme_qpair_outstanding(qp) == 0 {
                break;
            }
            vfnvme_qpair_process_completions(qp, 0);
        }
        assert_eq!(vfnvme_qpair_outstanding(qp), 0, "the writes are done");
        platform
            .set_faults(FaultPlan {
                duplicate: 500,
                late: 200,
                late_ns: 50_000_000,
                duplicate_within_ns: 5_000_000,
                ..FaultPlan::default()
            })
            .unwrap();
        // Reads: read i reads block i % BLOCKS into slot i; the queue kept full.
        let mut next = 0usize;
        let mut early = Vec::new();
        let mut wrong = Vec::new();
        let mut seen = 0usize;
        let mut polls = 0u64;
        while seen < READS && polls < 2_000_000 {
            while next < READS {
                let arg = &args[next] as *const Arg as *mut c_void;
                let p = rbuf.add(next * BS);
                let lba = next as u64 % BLOCKS;
                match vfnvme_qpair_read(qp, 1, p.cast(), lba, 1, Some(record), arg) {
                    OK => next += 1,
                    rc if rc == Status::VfnvmeErrQueueFull.code() => break,
                    rc => panic!("read {next}: {rc}: {}", last_error()),
                }
            }
            polls += 1;
            if vfnvme_qpair_process_completions(qp, 0) == 0 {
                platform.relax();
                continue;
            }
            let held = platform.held_data();
            let done: Vec<(usize, Cpl)> = log.0.borrow_mut().drain(..).collect();
            for (id, cpl) in done {
                seen += 1;
                let iova = riova + (id * BS) as u64;
                if overlaps(&held, iova, BS as u64) {
                    early.push(id);
                }
                let data = std::slice::from_raw_parts(rbuf.add(id * BS), BS);
                if cpl.status != 0 || cpl.rc != 0 || data != block(id as u64 % BLOCKS) {
                    wrong.push((id, cpl));
                }
            }
        }
        let dups = platform.fault_counts().of(vfnvme_model::Fault::Duplicate);
        assert!(
            early.is_empty() && wrong.is_empty() && seen == READS,
            "{} of {READS} reads delivered ({dups} duplicate completions injected); {} \
             completed while the device held them (first: {:?}); {} with wrong data or \
             status (first: {:?})",
            seen,
            early.len(),
            early.first(),
            wrong.len(),
            wrong.first()
        );
        assert_eq!(vfnvme_qpair_free(qp), OK, "{}", last_error());
        assert_eq!(vfnvme_dma_free(ctrl, wbuf.cast()), OK);
        assert_eq!(vfnvme_dma_free(ctrl, rbuf.cast()), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
    assert!(platform.dma_violations().is_empty());
    release(vec![platform]);
}

/// How defect 3's commands are ended by the driver.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    /// vfnvme_ctrl_reset.
    Reset,
    /// vfnvme_ctrl_model_request_removal.
    Removal,
    /// The I/O timeout (100 ms), then Abort and reset.
    Timeout,
}

/// Four reads in flight on a model whose reads hang, ended by `trigger`, reaped one at a time
/// by 2000 calls of vfnvme_qpair_poll_completions(qp, 1, out) (`batch`) or
/// vfnvme_qpair_process_completions(qp, 1); returns how often each read was delivered and what
/// vfnvme_qpair_outstanding said at the end.
fn four_reads_reaped_one_at_a_time(trigger: Trigger, batch: bool) -> (Vec<usize>, u32) {
    let opts = ModelOpts {
        lba_size: 4096,
        blocks: 1024,
        hang_reads: true,
        io_timeout_ms: if matches!(trigger, Trigger::Timeout) {
            100
        } else {
            0
        },
        ..ModelOpts::default()
    };
    let mut ctrl = null_mut();
    let log = Log::default();
    let args: Vec<Arg> = (0..4).map(|id| Arg { log: &log, id }).collect();
    let mut counts = vec![0usize; 4];
    // SAFETY: valid pointers; buffers and args outlive their commands.
    unsafe {
        assert_eq!(
            vfnvme_ctrl_open_model(&opts, &mut ctrl),
            OK,
            "{}",
            last_error()
        );
        let platform = crate::abi_model_support::model_of(ctrl).expect("a model");
        let (buf, _) = alloc(ctrl, 4 * 4096);
        let mut qp = null_mut();
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
        for (i, a) in args.iter().enumerate() {
            let arg = a as *const Arg as *mut c_void;
            let p = buf.add(i * 4096).cast();
            assert_eq!(
                vfnvme_qpair_read(qp, 1, p, i as u64, 1, Some(record), arg),
                OK
            );
        }
        vfnvme_qpair_commit(qp);
        match trigger {
            Trigger::Reset => assert_eq!(vfnvme_ctrl_reset(ctrl), OK, "{}", last_error()),
            Trigger::Removal => assert_eq!(vfnvme_ctrl_model_request_removal(ctrl), OK),
            Trigger::Timeout => {}
        }
        let mut out = [Completion::default()];
        let polls = if matches!(trigger, Trigger::Timeout) {
            20_000
        } else {
            2000
        };
        for _ in 0..polls {
            if batch {
                let n = vfnvme_qpair_poll_completions(qp, 1, out.as_mut_ptr());
                assert!((0..=1).contains(&n), "{n}: {}", last_error());
                if n == 1 {
                    counts[(*(out[0].arg as *const Arg)).id] += 1;
                }
            } else {
                let n = vfnvme_qpair_process_completions(qp, 1);
                assert!(n >= 0, "{n}: {}", last_error());
            }
            platform.relax();
        }
        for (id, _) in log.0.borrow().iter() {
            counts[*id] += 1;
        }
        let outstanding = vfnvme_qpair_outstanding(qp);
        if vfnvme_qpair_free(qp) == OK {
            vfnvme_dma_free(ctrl, buf.cast());
            vfnvme_ctrl_close(ctrl);
        }
        (counts, outstanding)
    }
}

/// Defect 3: after a reset, a removal or a timeout the driver ends every command in flight at
/// once; a caller that reaps one completion per call (vfnvme_qpair_poll_completions with max
/// 1, or vfnvme_qpair_process_completions with max 1) must still get each of them exactly
/// once. Today poll_completions delivers the first and drops the others (outstanding 0).
#[test]
fn every_request_ended_by_a_reset_or_removal_is_delivered_once_one_at_a_time() {
    let mut bad = Vec::new();
    for trigger in [Trigger::Reset, Trigger::Removal, Trigger::Timeout] {
        for batch in [true, false] {
            let (counts, outstanding) = four_reads_reaped_one_at_a_time(trigger, batch);
            if counts != [1, 1, 1, 1] || outstanding != 0 {
                let how = if batch {
                    "vfnvme_qpair_poll_completions(qp, 1, out)"
                } else {
                    "vfnvme_qpair_process_completions(qp, 1)"
                };
                bad.push(format!(
                    "{trigger:?}, reaped by {how}: deliveries per read {counts:?} (want \
                     [1, 1, 1, 1]), outstanding {outstanding}"
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// [`ModelPlatform::held_data`] is what these tests rely on: a held read's buffer is listed.
#[test]
fn held_data_covers_a_held_reads_buffer() {
    let config = ModelConfig {
        namespaces: ns(4096, 64),
        stalls: vec![Stall {
            qid: 1,
            opcode: 0x02,
            after_ns: 1_000_000_000,
            completes: true,
            count: 1,
        }],
        ..ModelConfig::default()
    };
    let ModelCtrl { ctrl, platform } =
        open_ctrl(config, ControllerOptions::default()).expect("model");
    let p: &ModelPlatform = &platform;
    let (buf, iova) = alloc(ctrl, 8192);
    let mut qp = null_mut();
    // SAFETY: valid pointers; the buffer outlives the command.
    unsafe {
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
        assert_eq!(
            vfnvme_qpair_read(qp, 1, buf.cast(), 0, 2, None, null_mut()),
            OK
        );
        vfnvme_qpair_commit(qp);
        let held = p.held_data();
        assert!(overlaps(&held, iova, 8192), "{held:x?}");
        assert_eq!(held.iter().map(|r| r.1).sum::<u64>(), 8192, "{held:x?}");
        assert_eq!(
            vfnvme_dma_free(ctrl, buf.cast()),
            Status::VfnvmeErrBusy.code()
        );
        while vfnvme_qpair_outstanding(qp) != 0 {
            vfnvme_qpair_process_completions(qp, 0);
            p.relax();
        }
        assert!(p.held_data().is_empty());
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_dma_free(ctrl, buf.cast()), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
    release(vec![platform]);
}
