//! Host tests: the C ABI exercised from Rust against the in-memory controller model: the same calls a C
//! program makes, with their error codes.

use crate::ctrl::*;
use crate::error::{vfnvme_last_error, vfnvme_strerror};
use crate::model::{vfnvme_ctrl_model_stats, vfnvme_ctrl_open_model, ModelOpts, ModelStats};
use crate::qpair::*;
use crate::types::{Completion, Cpl, CtrlInfo, NsInfo, QpairOpts, Range};
use crate::Status;
use std::cell::RefCell;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};

const OK: i32 = 0;

fn code(s: Status) -> i32 {
    s.code()
}

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated.
    unsafe { CStr::from_ptr(vfnvme_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Completions recorded by `record`.
///
/// The callback appends through a shared pointer while the test reads through `&Log`, so the
/// list sits in a `RefCell`: interior mutability makes that sound (a plain `Vec` written through
/// a raw pointer while a `&Log` is live is undefined behaviour, and the optimiser hoisted its
/// length out of the polling loop in release builds).
#[derive(Default)]
struct Log {
    cpls: RefCell<Vec<(usize, Cpl)>>,
}

impl Log {
    fn len(&self) -> usize {
        self.cpls.borrow().len()
    }
    fn all(&self) -> Vec<(usize, Cpl)> {
        self.cpls.borrow().clone()
    }
}

struct Arg {
    log: *const Log,
    id: usize,
}

unsafe extern "C" fn record(arg: *mut c_void, cpl: *const Cpl) {
    // SAFETY: `arg` is an `Arg` that the test keeps alive until its completion; `cpl` is valid
    // during the call.
    unsafe {
        let a = &*(arg as *const Arg);
        (*a.log).cpls.borrow_mut().push((a.id, *cpl));
    }
}

fn model(namespaces: u32, lba_size: u32, blocks: u64) -> *mut Ctrl {
    let opts = ModelOpts {
        namespaces,
        lba_size,
        blocks,
        ..ModelOpts::default()
    };
    let mut ctrl = null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_ctrl_open_model(&opts, &mut ctrl) };
    assert_eq!(rc, OK, "{}", last_error());
    assert!(!ctrl.is_null());
    ctrl
}

fn alloc(ctrl: *mut Ctrl, len: usize) -> (*mut u8, u64) {
    let mut p = null_mut();
    let mut iova = 0;
    assert_eq!(
        // SAFETY: `ctrl` is open; `p` and `iova` are valid out pointers.
        unsafe { vfnvme_dma_alloc(ctrl, len, &mut p, &mut iova) },
        OK
    );
    (p.cast(), iova)
}

/// Polls until `n` completions are logged.
fn wait(qp: *mut Qpair, log: &Log, n: usize) {
    for _ in 0..100_000 {
        if log.len() >= n {
            return;
        }
        // SAFETY: a live queue pair used by this thread.
        let r = unsafe { vfnvme_qpair_process_completions(qp, 0) };
        assert!(r >= 0, "{}", last_error());
    }
    panic!("only {} of {n} completions arrived", log.len());
}

#[test]
fn lists_namespaces_and_info() {
    let ctrl = model(3, 512, 2048);
    // SAFETY: valid pointers and sizes throughout.
    unsafe {
        assert_eq!(vfnvme_ctrl_namespaces(ctrl, null_mut(), 0), 3);
        let mut ns = [NsInfo::default(); 2];
        assert_eq!(
            vfnvme_ctrl_namespaces(ctrl, ns.as_mut_ptr(), 2),
            3,
            "total even if cap is smaller"
        );
        assert_eq!(
            ns[0],
            NsInfo {
                nsid: 1,
                lba_size: 512,
                blocks: 2048,
                io_supported: true,
                ..NsInfo::default()
            }
        );
        assert_eq!(ns[1].nsid, 2);
        let mut one = NsInfo::default();
        assert_eq!(vfnvme_ctrl_namespace(ctrl, 3, &mut one), OK);
        assert_eq!(one.nsid, 3);
        assert_eq!(
            vfnvme_ctrl_namespace(ctrl, 9, &mut one),
            code(Status::VfnvmeErrNotFound)
        );
        assert!(last_error().contains("namespace 9"), "{}", last_error());
        let mut info = CtrlInfo::default();
        assert_eq!(vfnvme_ctrl_info(ctrl, &mut info), OK);
        assert!(info.max_transfer >= 4096 && info.max_queue_depth >= 2);
        assert!(info.serial[0] != 0, "serial is filled");
        assert_eq!(
            vfnvme_ctrl_namespace(null(), 1, &mut one),
            code(Status::VfnvmeErrInvalidArgument)
        );
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

#[test]
fn write_read_verify_and_every_command() {
    let ctrl = model(1, 4096, 1024);
    let (w, w_iova) = alloc(ctrl, 8192);
    let (r, _) = alloc(ctrl, 8192);
    let log = Log::default();
    let args: Vec<Arg> = (0..8).map(|id| Arg { log: &log, id }).collect();
    let arg = |i: usize| &args[i] as *const Arg as *mut c_void;
    // SAFETY: buffers from vfnvme_dma_alloc, live until freed below; args outlive completions.
    unsafe {
        let mut translated = 0;
        assert_eq!(
            vfnvme_dma_translate(ctrl, w.add(100).cast(), &mut translated),
            OK
        );
        assert_eq!(translated, w_iova + 100);
        for i in 0..8192 {
            *w.add(i) = (i % 251) as u8;
        }
        let mut qp = null_mut();
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
        assert_eq!(
            vfnvme_qpair_write(qp, 1, w.cast(), 10, 2, Some(record), arg(0)),
            OK
        );
        assert_eq!(vfnvme_qpair_commit(qp), OK);
        wait(qp, &log, 1);
        assert_eq!(
            vfnvme_qpair_read(qp, 1, r.cast(), 10, 2, Some(record), arg(1)),
            OK
        );
        wait(qp, &log, 2);
        assert_eq!(
            std::slice::from_raw_parts(r, 8192),
            std::slice::from_raw_parts(w, 8192)
        );
        assert!(log.all().iter().all(|(_, c)| c.status == 0 && c.rc == 0));

        // Write Zeroes, then the block reads back as zeroes.
        assert_eq!(
            vfnvme_qpair_write_zeroes(qp, 1, 10, 1, Some(record), arg(2)),
            OK
        );
        assert_eq!(vfnvme_qpair_flush(qp, 1, Some(record), arg(3)), OK);
        wait(qp, &log, 4);
        assert_eq!(
            vfnvme_qpair_read(qp, 1, r.cast(), 10, 2, Some(record), arg(4)),
            OK
        );
        wait(qp, &log, 5);
        assert!(std::slice::from_raw_parts(r, 4096).iter().all(|&b| b == 0));
        assert_eq!(*r.add(4096), *w.add(4096), "the second block is untouched");

        // Deallocate (the model reads deallocated blocks as zeroes).
        let ranges = [Range { lba: 11, blocks: 1 }];
        assert_eq!(
            vfnvme_qpair_deallocate(qp, 1, ranges.as_ptr(), 1, Some(record), arg(5)),
            OK
        );
        wait(qp, &log, 6);
        assert_eq!(
            vfnvme_qpair_read(qp, 1, r.cast(), 11, 1, Some(record), arg(6)),
            OK
        );
        wait(qp, &log, 7);
        assert!(std::slice::from_raw_parts(r, 4096).iter().all(|&b| b == 0));
        let ids: Vec<usize> = log.all().iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4, 5, 6]);
        assert!(
            log.all().iter().all(|(_, c)| c.status == 0 && c.rc == 0),
            "{:?}",
            log.all()
        );

        assert_eq!(
            vfnvme_ctrl_close(ctrl),
            code(Status::VfnvmeErrBusy),
            "qpair still alive"
        );
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_dma_free(ctrl, w.cast()), OK);
        assert_eq!(vfnvme_dma_free(ctrl, r.cast()), OK);
        assert_eq!(
            vfnvme_dma_free(ctrl, r.cast()),
            code(Status::VfnvmeErrBadBuffer),
            "double free"
        );
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

#[test]
fn rejects_bad_buffers_ranges_and_arguments() {
    let ctrl = model(1, 4096, 64);
    let (buf, _) = alloc(ctrl, 4096);
    let mut stack = [0u8; 4096];
    // SAFETY: valid pointers; rejected calls queue nothing.
    unsafe {
        let mut qp = null_mut();
        assert_eq!(
            vfnvme_qpair_alloc(ctrl, 1, &mut qp),
            code(Status::VfnvmeErrInvalidArgument)
        );
        assert_eq!(
            vfnvme_qpair_alloc(ctrl, 1 << 20, &mut qp),
            code(Status::VfnvmeErrInvalidArgument)
        );
        assert_eq!(vfnvme_qpair_alloc(ctrl, 4, &mut qp), OK);
        let rc = vfnvme_qpair_write(qp, 1, stack.as_mut_ptr().cast(), 0, 1, None, null_mut());
        assert_eq!(rc, code(Status::VfnvmeErrBadBuffer));
        assert!(
            last_error().contains("vfnvme_dma_alloc"),
            "{}",
            last_error()
        );
        let rc = vfnvme_qpair_read(qp, 1, buf.cast(), 64, 1, None, null_mut());
        assert_eq!(rc, code(Status::VfnvmeErrOutOfRange));
        // A range that wraps past the end (the buffer holds its one block).
        let rc = vfnvme_qpair_read(qp, 1, buf.cast(), u64::MAX, 1, None, null_mut());
        assert_eq!(rc, code(Status::VfnvmeErrOutOfRange));
        // Both wrong (2 blocks past the end into a 1-block buffer): the buffer is checked
        // first, where the C pointer is translated; the range once, by the driver.
        let rc = vfnvme_qpair_read(qp, 1, buf.cast(), u64::MAX, 2, None, null_mut());
        assert_eq!(rc, code(Status::VfnvmeErrBadBuffer));
        let rc = vfnvme_qpair_read(qp, 1, buf.cast(), 0, 0, None, null_mut());
        assert_eq!(rc, code(Status::VfnvmeErrOutOfRange));
        let rc = vfnvme_qpair_read(qp, 2, buf.cast(), 0, 1, None, null_mut());
        assert_eq!(rc, code(Status::VfnvmeErrNotFound));
        let rc = vfnvme_qpair_read(null_mut(), 1, buf.cast(), 0, 1, None, null_mut());
        assert_eq!(rc, code(Status::VfnvmeErrInvalidArgument));
        assert_eq!(
            vfnvme_qpair_deallocate(qp, 1, null(), 1, None, null_mut()),
            code(Status::VfnvmeErrInvalidArgument)
        );
        assert_eq!(
            vfnvme_qpair_outstanding(qp),
            0,
            "rejected commands are not queued"
        );
        assert_eq!(
            vfnvme_dma_free(ctrl, stack.as_mut_ptr().cast()),
            code(Status::VfnvmeErrBadBuffer)
        );
        let mut p = null_mut();
        assert_eq!(
            vfnvme_dma_alloc(ctrl, 0, &mut p, null_mut()),
            code(Status::VfnvmeErrInvalidArgument)
        );

        // The queue fills up: depth 4 holds at most 3 commands in flight.
        let mut n = 0;
        let mut rc = OK;
        while rc == OK && n < 10 {
            rc = vfnvme_qpair_read(qp, 1, buf.cast(), 0, 1, None, null_mut());
            n += 1;
        }
        assert_eq!(rc, code(Status::VfnvmeErrQueueFull));
        assert_eq!(n - 1, 3);
        assert_eq!(vfnvme_qpair_free(qp), code(Status::VfnvmeErrBusy));
        while vfnvme_qpair_outstanding(qp) > 0 {
            assert!(vfnvme_qpair_process_completions(qp, 0) >= 0);
        }
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
        assert_eq!(vfnvme_ctrl_close(null_mut()), OK);
    }
    // SAFETY: static strings.
    let s = unsafe { CStr::from_ptr(vfnvme_strerror(code(Status::VfnvmeErrQueueFull))) };
    assert!(s.to_string_lossy().contains("queue full"));
}

struct Chain {
    qp: *mut Qpair,
    buf: *mut u8,
    remaining: u32,
    done: u32,
    nested_rc: i32,
}

unsafe extern "C" fn resubmit(arg: *mut c_void, cpl: *const Cpl) {
    // SAFETY: `arg` is the test's `Chain`, alive until the chain ends; `cpl` valid in the call.
    unsafe {
        let c = &mut *(arg as *mut Chain);
        assert_eq!((*cpl).status, 0);
        c.done += 1;
        c.nested_rc = vfnvme_qpair_process_completions(c.qp, 0);
        if c.remaining > 0 {
            c.remaining -= 1;
            let rc = vfnvme_qpair_read(
                c.qp,
                1,
                c.buf.cast(),
                u64::from(c.remaining),
                1,
                Some(resubmit),
                arg,
            );
            assert_eq!(rc, 0);
        }
    }
}

#[test]
fn poll_completions_returns_args_in_an_array_without_callbacks() {
    let ctrl = model(1, 512, 64);
    let (buf, _) = alloc(ctrl, 8 * 512);
    let log = Log::default();
    let arg = Arg { log: &log, id: 0 };
    let empty = Completion::default();
    // SAFETY: valid pointers; `buf` holds 8 blocks; `arg` outlives the commands.
    unsafe {
        let mut qp = null_mut();
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
        let mut out = [empty; 16];
        assert_eq!(
            vfnvme_qpair_poll_completions(qp, 0, out.as_mut_ptr()),
            code(Status::VfnvmeErrInvalidArgument)
        );
        assert_eq!(
            vfnvme_qpair_poll_completions(qp, 4, null_mut()),
            code(Status::VfnvmeErrInvalidArgument)
        );
        for i in 0..8u64 {
            let cb = if i == 0 { Some(record as _) } else { None };
            let a = if i == 0 {
                &arg as *const Arg as *mut c_void
            } else {
                (0x1000 + i) as *mut c_void
            };
            assert_eq!(
                vfnvme_qpair_read(qp, 1, buf.add(i as usize * 512).cast(), i, 1, cb, a),
                OK
            );
        }
        // Memory outside DMA memory is still rejected (the region cache is per queue pair).
        let mut host = [0u8; 4096];
        assert_eq!(
            vfnvme_qpair_read(qp, 1, host.as_mut_ptr().cast(), 0, 1, None, null_mut()),
            code(Status::VfnvmeErrBadBuffer)
        );
        let mut got = Vec::new();
        for _ in 0..100_000 {
            if got.len() >= 8 {
                break;
            }
            let n = vfnvme_qpair_poll_completions(qp, 3, out.as_mut_ptr());
            assert!((0..=3).contains(&n), "{n}: {}", last_error());
            got.extend(out[..n as usize].iter().map(|c| (c.arg as usize, c.cpl)));
        }
        got.sort_by_key(|g| g.0);
        let mut want: Vec<usize> = (1..8).map(|i| 0x1000 + i).collect();
        want.insert(0, &arg as *const Arg as usize);
        want.sort();
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), want);
        assert!(got.iter().all(|g| g.1.status == 0 && g.1.rc == 0));
        assert!(log.len() == 0, "no callback runs for polled completions");
        assert_eq!(vfnvme_qpair_outstanding(qp), 0);
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

#[test]
fn callbacks_may_submit_but_not_poll() {
    let ctrl = model(1, 512, 64);
    let (buf, _) = alloc(ctrl, 4096);
    // SAFETY: valid pointers; `chain` outlives every completion (polled to the end).
    unsafe {
        let mut qp = null_mut();
        assert_eq!(vfnvme_qpair_alloc(ctrl, 2, &mut qp), OK);
        let mut chain = Chain {
            qp,
            buf,
            remaining: 20,
            done: 0,
            nested_rc: 0,
        };
        let arg = &mut chain as *mut Chain as *mut c_void;
        assert_eq!(
            vfnvme_qpair_read(qp, 1, buf.cast(), 0, 1, Some(resubmit), arg),
            OK
        );
        while vfnvme_qpair_outstanding(qp) > 0 {
            assert!(vfnvme_qpair_process_completions(qp, 1) >= 0);
        }
        assert_eq!(chain.done, 21, "each callback submitted the next read");
        assert_eq!(
            chain.nested_rc,
            code(Status::VfnvmeErrBusy),
            "polling from a callback is refused"
        );
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

#[test]
#[cfg_attr(miri, ignore = "reads sysfs, which Miri's isolation forbids")]
fn open_rejects_bad_pci_addresses() {
    let mut ctrl = null_mut();
    // SAFETY: valid C strings and out pointer.
    unsafe {
        assert_eq!(
            vfnvme_ctrl_open(c"zz:zz".as_ptr(), null(), &mut ctrl),
            code(Status::VfnvmeErrInvalidArgument)
        );
        assert!(last_error().contains("pci_addr"), "{}", last_error());
        // A well-formed address with no device behind it is a device error, not a crash.
        let rc = vfnvme_ctrl_open(c"0000.00.1f.7".as_ptr(), null(), &mut ctrl);
        assert_eq!(rc, code(Status::VfnvmeErrDevice), "{}", last_error());
        assert!(ctrl.is_null());
        assert_eq!(
            vfnvme_ctrl_open(null(), null(), &mut ctrl),
            code(Status::VfnvmeErrInvalidArgument)
        );
    }
}

#[test]
fn namespace_events_follow_the_controller() {
    use crate::types::{NsEvent, NsEventKind};
    use std::sync::Arc;
    use vfnvme::{Controller, ControllerOptions};
    use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

    let ns = |nsid| ModelNamespaceConfig {
        nsid,
        blocks: 1024,
        lba_size: 512,
        backing: Backing::Ram,
    };
    let platform = ModelPlatform::new(ModelConfig {
        namespaces: vec![ns(1), ns(2)],
        ..ModelConfig::default()
    })
    .expect("model");
    let controller = Controller::new(platform.clone(), ControllerOptions::default()).expect("up");
    let mut ctrl = null_mut();
    assert_eq!(publish(Arc::new(controller), &mut ctrl), OK);
    let mut ev = NsEvent {
        kind: NsEventKind::VfnvmeNsEventAdded,
        nsid: 9,
    };
    assert_eq!(
        // SAFETY: `ctrl` is open and `ev` is a valid out pointer (so for the calls below).
        unsafe { vfnvme_ctrl_next_event(ctrl, &mut ev) },
        0,
        "no event yet"
    );
    assert_eq!(ev.kind, NsEventKind::VfnvmeNsEventNone);

    platform.detach_namespace(2).expect("detach");
    // SAFETY: `ctrl` is open; `ev`/`info` are valid out pointers.
    let arrived = unsafe { vfnvme_ctrl_process_admin(ctrl) };
    assert!(arrived >= 1, "{arrived}: {}", last_error());
    // SAFETY: `ctrl` is open; `ev`/`info` are valid out pointers.
    assert_eq!(unsafe { vfnvme_ctrl_next_event(ctrl, &mut ev) }, 1);
    assert_eq!(
        ev,
        NsEvent {
            kind: NsEventKind::VfnvmeNsEventRemoved,
            nsid: 2
        }
    );
    let mut info = NsInfo::default();
    assert_eq!(
        // SAFETY: `ctrl` is open; `ev`/`info` are valid out pointers.
        unsafe { vfnvme_ctrl_namespace(ctrl, 2, &mut info) },
        code(Status::VfnvmeErrNotFound)
    );

    platform.attach_namespace(ns(2)).expect("attach");
    // SAFETY: `ctrl` is open; `ev`/`info` are valid out pointers.
    assert!(unsafe { vfnvme_ctrl_process_admin(ctrl) } >= 1);
    // SAFETY: `ctrl` is open; `ev`/`info` are valid out pointers.
    assert_eq!(unsafe { vfnvme_ctrl_next_event(ctrl, &mut ev) }, 1);
    assert_eq!(ev.kind, NsEventKind::VfnvmeNsEventAdded);
    assert_eq!(ev.nsid, 2);
    // SAFETY: `ctrl` is open; `ev`/`info` are valid out pointers.
    assert_eq!(unsafe { vfnvme_ctrl_namespace(ctrl, 2, &mut info) }, OK);
    assert_eq!(
        // SAFETY: `ctrl` is open; `ev`/`info` are valid out pointers.
        unsafe { vfnvme_ctrl_next_event(null(), &mut ev) },
        code(Status::VfnvmeErrInvalidArgument)
    );
    // SAFETY: `ctrl` is open; `ev`/`info` are valid out pointers.
    assert_eq!(unsafe { vfnvme_ctrl_close(ctrl) }, OK);
}

#[test]
fn model_stats_count_commands_and_doorbell_writes() {
    let ctrl = model(1, 512, 64);
    let (buf, _) = alloc(ctrl, 8 * 512);
    let empty = Completion::default();
    let stats = || {
        let mut s = ModelStats::default();
        // SAFETY: valid pointers.
        assert_eq!(unsafe { vfnvme_ctrl_model_stats(ctrl, &mut s) }, OK);
        s
    };
    // SAFETY: valid pointers; `buf` holds 8 blocks.
    unsafe {
        let mut s = ModelStats::default();
        assert_eq!(
            vfnvme_ctrl_model_stats(null(), &mut s),
            code(Status::VfnvmeErrInvalidArgument)
        );
        assert_eq!(
            vfnvme_ctrl_model_stats(ctrl, null_mut()),
            code(Status::VfnvmeErrInvalidArgument)
        );
        let mut qp = null_mut();
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
        let before = stats();
        // Two batches of 4 reads, one commit each: two SQ doorbell writes, eight commands.
        let mut out = [empty; 16];
        for batch in 0..2u64 {
            for i in 0..4u64 {
                let block = batch * 4 + i;
                let data = buf.add(block as usize * 512).cast();
                assert_eq!(
                    vfnvme_qpair_read(qp, 1, data, block, 1, None, null_mut()),
                    OK
                );
            }
            assert_eq!(vfnvme_qpair_commit(qp), OK);
            let mut got = 0;
            while got < 4 {
                let n = vfnvme_qpair_poll_completions(qp, 16, out.as_mut_ptr());
                assert!(n >= 0, "{}", last_error());
                got += n;
            }
        }
        let after = stats();
        assert_eq!(after.io_commands - before.io_commands, 8);
        assert_eq!(after.sq_doorbell_writes - before.sq_doorbell_writes, 2);
        assert!(after.virtual_ns >= before.virtual_ns);
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

#[test]
fn qpair_opts_defer_sq_doorbell_batches_commits() {
    let ctrl = model(1, 512, 64);
    let (buf, _) = alloc(ctrl, 8 * 512);
    let sq_writes = || {
        let mut s = ModelStats::default();
        // SAFETY: valid pointers.
        assert_eq!(unsafe { vfnvme_ctrl_model_stats(ctrl, &mut s) }, OK);
        s.sq_doorbell_writes
    };
    // SAFETY: valid pointers; `buf` holds 8 blocks.
    unsafe {
        let mut qp = null_mut();
        let bad = QpairOpts {
            depth: 1,
            defer_sq_doorbell: true,
            ..QpairOpts::default()
        };
        assert_eq!(
            vfnvme_qpair_alloc_opts(ctrl, &bad, &mut qp),
            code(Status::VfnvmeErrInvalidArgument)
        );
        // NULL options: the defaults (depth 256, every commit rings).
        assert_eq!(vfnvme_qpair_alloc_opts(ctrl, null(), &mut qp), OK);
        assert_eq!(vfnvme_qpair_free(qp), OK);
        let opts = QpairOpts {
            depth: 16,
            defer_sq_doorbell: true,
            ..QpairOpts::default()
        };
        assert_eq!(vfnvme_qpair_alloc_opts(ctrl, &opts, &mut qp), OK);
        let before = sq_writes();
        // A commit after every read, nothing polled: rung at the 1st (idle controller), the
        // 2nd (1 of 2 waits) and the 4th (2 of 4); the 3rd and the 5th to 7th are deferred.
        let mut rung = vec![];
        for block in 0..7u64 {
            let data = buf.add(block as usize * 512).cast();
            assert_eq!(
                vfnvme_qpair_read(qp, 1, data, block, 1, None, null_mut()),
                OK
            );
            assert_eq!(vfnvme_qpair_commit(qp), OK);
            rung.push(sq_writes() - before);
        }
        assert_eq!(rung, vec![1, 2, 2, 3, 3, 3, 3]);
        // The poll rings what was deferred.
        let mut out = [Completion::default(); 16];
        let mut got = 0;
        while got < 7 {
            let n = vfnvme_qpair_poll_completions(qp, 16, out.as_mut_ptr());
            assert!(n >= 0, "{}", last_error());
            got += n;
        }
        assert_eq!(sq_writes() - before, 4);
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

/// The fio engine's admin poller calls vfnvme_ctrl_process_admin and vfnvme_ctrl_next_event
/// on its own thread while I/O threads submit and poll: both must be safe beside them.
#[test]
fn process_admin_runs_beside_io_on_another_thread() {
    let ctrl = model(1, 512, 64);
    let (buf, _) = alloc(ctrl, 8 * 512);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr = ctrl as usize;
    let poller = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let ctrl = addr as *const Ctrl;
            let mut calls = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || calls == 0 {
                // SAFETY: the controller stays open until this thread is joined.
                let rc = unsafe { vfnvme_ctrl_process_admin(ctrl) };
                assert!(rc >= 0, "process_admin: {rc}");
                let mut ev = crate::types::NsEvent {
                    kind: crate::types::NsEventKind::VfnvmeNsEventNone,
                    nsid: 0,
                };
                // SAFETY: as above; `ev` is a valid out pointer.
                assert_eq!(unsafe { vfnvme_ctrl_next_event(ctrl, &mut ev) }, 0);
                calls += 1;
            }
            calls
        })
    };
    let mut out = [Completion::default(); 8];
    // SAFETY: valid pointers; `buf` holds 8 blocks; the poller only uses the controller.
    unsafe {
        let mut qp = null_mut();
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
        for round in 0..2000u64 {
            for i in 0..8u64 {
                let data = buf.add(i as usize * 512);
                let rc = if round % 2 == 0 {
                    vfnvme_qpair_write(qp, 1, data.cast(), i, 1, None, null_mut())
                } else {
                    vfnvme_qpair_read(qp, 1, data.cast(), i, 1, None, null_mut())
                };
                assert_eq!(rc, OK, "{}", last_error());
            }
            let mut got = 0;
            while got < 8 {
                let n = vfnvme_qpair_poll_completions(qp, 8, out.as_mut_ptr());
                assert!(n >= 0, "{}", last_error());
                for c in &out[..n as usize] {
                    assert_eq!(c.cpl.status, 0);
                }
                got += n;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(poller.join().unwrap() > 0);
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}
