//! Host tests of faults and recovery through the C ABI, on the in-memory controller model
//! (issue 11): the I/O timeout option, vfnvme_ctrl_reset, controller events, and the two
//! statuses vfnvme gives the commands it ends itself (sct 3 / sc 0x71 and 0x70).

use crate::ctrl::*;
use crate::error::vfnvme_last_error;
use crate::model::{vfnvme_ctrl_model_request_removal, vfnvme_ctrl_open_model, ModelOpts};
use crate::qpair::*;
use crate::types::{
    Cpl, CtrlEvent, CtrlEventKind, VFNVME_SCT_PATH, VFNVME_SC_ABORTED_BY_RESET,
    VFNVME_SC_CONTROLLER_LOST,
};
use crate::Status;
use std::cell::RefCell;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};

const OK: i32 = 0;

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated.
    unsafe { CStr::from_ptr(vfnvme_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Completions by argument id, recorded by `record` (a `RefCell`: the callback writes through
/// a pointer while the test reads through a reference).
#[derive(Default)]
struct Log(RefCell<Vec<(usize, Cpl)>>);

impl Log {
    fn of(&self, id: usize) -> Vec<Cpl> {
        let all = self.0.borrow();
        all.iter()
            .filter(|(i, _)| *i == id)
            .map(|(_, c)| *c)
            .collect()
    }
}

struct Arg {
    log: *const Log,
    id: usize,
}

unsafe extern "C" fn record(arg: *mut c_void, cpl: *const Cpl) {
    // SAFETY: `arg` is an `Arg` the test keeps alive until its completion; `cpl` is valid
    // during the call.
    unsafe {
        let a = &*(arg as *const Arg);
        (*a.log).0.borrow_mut().push((a.id, *cpl));
    }
}

/// A model of one 4 KiB namespace whose reads never complete.
fn hung_model(latency_ns: u32, io_timeout_ms: u32) -> *mut Ctrl {
    let opts = ModelOpts {
        lba_size: 4096,
        blocks: 1024,
        latency_ns,
        hang_reads: true,
        io_timeout_ms,
        ..ModelOpts::default()
    };
    let mut ctrl = null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_ctrl_open_model(&opts, &mut ctrl) };
    assert_eq!(rc, OK, "{}", last_error());
    ctrl
}

fn alloc(ctrl: *mut Ctrl, len: usize) -> *mut c_void {
    let (mut p, mut iova) = (null_mut(), 0);
    // SAFETY: `ctrl` is open; valid out pointers.
    let rc = unsafe { vfnvme_dma_alloc(ctrl, len, &mut p, &mut iova) };
    assert_eq!(rc, OK);
    p
}

fn events(ctrl: *mut Ctrl) -> Vec<CtrlEvent> {
    let mut out = Vec::new();
    loop {
        let mut e = CtrlEvent {
            kind: CtrlEventKind::VfnvmeCtrlEventTimedOut,
            qid: 9,
            cid: 9,
        };
        // SAFETY: `ctrl` is open; `e` is a valid out pointer.
        match unsafe { vfnvme_ctrl_next_ctrl_event(ctrl, &mut e) } {
            1 => out.push(e),
            0 => {
                assert_eq!(e.kind, CtrlEventKind::VfnvmeCtrlEventNone);
                return out;
            }
            rc => panic!("vfnvme_ctrl_next_ctrl_event: {rc}: {}", last_error()),
        }
    }
}

fn kinds(events: &[CtrlEvent]) -> Vec<CtrlEventKind> {
    events.iter().map(|e| e.kind).collect()
}

fn is(c: &Cpl, sc: u8) -> bool {
    c.sct == VFNVME_SCT_PATH && c.sc == sc && c.rc == 0 && c.status == 0x300 | u16::from(sc)
}

/// A hung read outlives `io_timeout_ms` (virtual time, advanced by writes of 10 ms each on the
/// same queue pair): vfnvme sends an Abort (the model aborts nothing), then resets the
/// controller; the read completes once with sct 3 / sc 0x71; the events reach C in order; the
/// queue pair carries on. With the option ignored (30 s default) the read would still hang.
#[test]
fn io_timeout_ms_aborts_then_resets_and_c_sees_events_and_status() {
    let ctrl = hung_model(10_000_000, 100);
    let log = Log::default();
    let read = Arg { log: &log, id: 0 };
    let write = Arg { log: &log, id: 1 };
    let rbuf = alloc(ctrl, 4096);
    let wbuf = alloc(ctrl, 4096);
    let mut qp = null_mut();
    // SAFETY: valid pointers; buffers and args outlive their completions.
    unsafe {
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
        let rarg = &read as *const Arg as *mut c_void;
        let warg = &write as *const Arg as *mut c_void;
        assert_eq!(vfnvme_qpair_read(qp, 1, rbuf, 0, 1, Some(record), rarg), OK);
        let mut writes = 0;
        while log.of(0).is_empty() && writes < 200 {
            let before = log.of(1).len();
            assert_eq!(
                vfnvme_qpair_write(qp, 1, wbuf, 1, 1, Some(record), warg),
                OK
            );
            writes += 1;
            // 300 polls per write: the timeout check runs every 256 polls.
            for _ in 0..300 {
                assert!(vfnvme_qpair_process_completions(qp, 0) >= 0);
            }
            assert!(log.of(1).len() > before, "the write completed");
        }
        let r = log.of(0);
        assert_eq!(r.len(), 1, "the read ends once, after {writes} writes");
        assert!(is(&r[0], VFNVME_SC_ABORTED_BY_RESET), "{:?}", r[0]);
        let ev = events(ctrl);
        assert_eq!(
            kinds(&ev),
            [
                CtrlEventKind::VfnvmeCtrlEventTimedOut,
                CtrlEventKind::VfnvmeCtrlEventAbortSent,
                CtrlEventKind::VfnvmeCtrlEventResetStarted,
                CtrlEventKind::VfnvmeCtrlEventResetDone,
            ]
        );
        assert_eq!((ev[0].qid, ev[0].cid), (ev[1].qid, ev[1].cid));
        assert_eq!(ev[0].qid, 1);
        assert_eq!(ev[2].qid, 0);
        // Every write ended once, successfully or aborted by the reset; a new one succeeds.
        let w = log.of(1);
        assert_eq!(w.len(), writes);
        assert!(w
            .iter()
            .all(|c| c.status == 0 || is(c, VFNVME_SC_ABORTED_BY_RESET)));
        assert_eq!(
            vfnvme_qpair_write(qp, 1, wbuf, 1, 1, Some(record), warg),
            OK
        );
        for _ in 0..10_000 {
            vfnvme_qpair_process_completions(qp, 0);
        }
        assert_eq!(log.of(1).len(), writes + 1);
        assert_eq!(log.of(1).last().unwrap().status, 0);
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_dma_free(ctrl, rbuf), OK, "the read's buffer is back");
        assert_eq!(vfnvme_dma_free(ctrl, wbuf), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

/// vfnvme_ctrl_reset with a queue pair open and a command in flight: the command completes
/// with sct 3 / sc 0x71 at the next poll, the events say the reset started and finished, and
/// I/O goes on.
#[test]
fn ctrl_reset_ends_commands_in_flight_and_io_goes_on() {
    let ctrl = hung_model(0, 0);
    let log = Log::default();
    let read = Arg { log: &log, id: 0 };
    let write = Arg { log: &log, id: 1 };
    let rbuf = alloc(ctrl, 4096);
    let mut qp = null_mut();
    // SAFETY: valid pointers; buffers and args outlive their completions.
    unsafe {
        assert_eq!(
            vfnvme_ctrl_reset(null()),
            Status::VfnvmeErrInvalidArgument.code()
        );
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
        let rarg = &read as *const Arg as *mut c_void;
        assert_eq!(vfnvme_qpair_read(qp, 1, rbuf, 0, 1, Some(record), rarg), OK);
        for _ in 0..1_000 {
            vfnvme_qpair_process_completions(qp, 0);
        }
        assert!(log.of(0).is_empty(), "the model's reads hang");
        assert_eq!(vfnvme_dma_free(ctrl, rbuf), Status::VfnvmeErrBusy.code());
        assert_eq!(vfnvme_ctrl_reset(ctrl), OK, "{}", last_error());
        assert_eq!(
            kinds(&events(ctrl)),
            [
                CtrlEventKind::VfnvmeCtrlEventResetStarted,
                CtrlEventKind::VfnvmeCtrlEventResetDone,
            ]
        );
        for _ in 0..1_000 {
            vfnvme_qpair_process_completions(qp, 0);
        }
        let r = log.of(0);
        assert_eq!(r.len(), 1, "exactly once");
        assert!(is(&r[0], VFNVME_SC_ABORTED_BY_RESET), "{:?}", r[0]);
        assert_eq!(vfnvme_dma_free(ctrl, rbuf), OK, "the buffer is back");
        let wbuf = alloc(ctrl, 4096);
        let warg = &write as *const Arg as *mut c_void;
        assert_eq!(
            vfnvme_qpair_write(qp, 1, wbuf, 3, 1, Some(record), warg),
            OK
        );
        for _ in 0..1_000 {
            vfnvme_qpair_process_completions(qp, 0);
        }
        assert_eq!(log.of(1).len(), 1);
        assert_eq!(
            log.of(1)[0].status,
            0,
            "the queue pair works after the reset"
        );
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_dma_free(ctrl, wbuf), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

/// The kernel asks for the device back (played by the model): the command in flight
/// completes with sct 3 / sc 0x70, C sees the REMOVED event, a reset is refused, and the
/// queue pair and controller are freed without hanging.
#[test]
fn removal_ends_commands_with_controller_lost_and_close_works() {
    let ctrl = hung_model(0, 0);
    let log = Log::default();
    let read = Arg { log: &log, id: 0 };
    let rbuf = alloc(ctrl, 4096);
    let mut qp = null_mut();
    // SAFETY: valid pointers; buffers and args outlive their completions.
    unsafe {
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
        let rarg = &read as *const Arg as *mut c_void;
        assert_eq!(vfnvme_qpair_read(qp, 1, rbuf, 0, 1, Some(record), rarg), OK);
        assert_eq!(vfnvme_ctrl_model_request_removal(ctrl), OK);
        for _ in 0..1_000 {
            vfnvme_qpair_process_completions(qp, 0);
        }
        let r = log.of(0);
        assert_eq!(r.len(), 1, "exactly once");
        assert!(is(&r[0], VFNVME_SC_CONTROLLER_LOST), "{:?}", r[0]);
        assert_eq!(
            kinds(&events(ctrl)),
            [CtrlEventKind::VfnvmeCtrlEventRemoved]
        );
        assert_eq!(vfnvme_ctrl_reset(ctrl), Status::VfnvmeErrDevice.code());
        assert!(last_error().contains("removed"), "{}", last_error());
        assert!(vfnvme_ctrl_process_admin(ctrl) < 0);
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_dma_free(ctrl, rbuf), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

/// `io_retries`: more than 255 is refused with a message; with retries on, writes in flight at
/// vfnvme_ctrl_reset are sent again and complete with success, each once, and
/// vfnvme_ctrl_info counts the retries.
#[test]
fn io_retries_make_a_reset_invisible_and_are_counted() {
    let mut opts = ModelOpts {
        lba_size: 4096,
        blocks: 1024,
        latency_ns: 1_000_000_000,
        io_retries: 256,
        ..ModelOpts::default()
    };
    let mut ctrl = null_mut();
    // SAFETY: valid pointers throughout; buffers and arguments outlive their commands.
    unsafe {
        assert_eq!(
            vfnvme_ctrl_open_model(&opts, &mut ctrl),
            Status::VfnvmeErrInvalidArgument.code()
        );
        assert!(last_error().contains("io_retries"), "{}", last_error());
        opts.io_retries = 2;
        assert_eq!(
            vfnvme_ctrl_open_model(&opts, &mut ctrl),
            OK,
            "{}",
            last_error()
        );
        let mut qp = null_mut();
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
        let log = Log::default();
        let args: Vec<Arg> = (0..4).map(|id| Arg { log: &log, id }).collect();
        let bufs: Vec<*mut c_void> = (0..4).map(|_| alloc(ctrl, 4096)).collect();
        for (i, (a, b)) in args.iter().zip(&bufs).enumerate() {
            let arg = a as *const Arg as *mut c_void;
            assert_eq!(
                vfnvme_qpair_write(qp, 1, *b, i as u64, 1, Some(record), arg),
                OK
            );
        }
        vfnvme_qpair_commit(qp);
        assert!(log.0.borrow().is_empty(), "still in flight");
        assert_eq!(vfnvme_ctrl_reset(ctrl), OK, "{}", last_error());
        for _ in 0..100_000 {
            vfnvme_qpair_process_completions(qp, 0);
            if log.0.borrow().len() == 4 {
                break;
            }
        }
        for id in 0..4 {
            let c = log.of(id);
            assert_eq!(c.len(), 1, "write {id} completes once");
            assert_eq!((c[0].rc, c[0].status), (0, 0), "write {id}: {:?}", c[0]);
        }
        let mut info = crate::types::CtrlInfo::default();
        assert_eq!(vfnvme_ctrl_info(ctrl, &mut info), OK);
        assert_eq!(info.io_retries, 4, "the four writes were sent again");
        assert_eq!(vfnvme_qpair_free(qp), OK);
        for b in bufs {
            assert_eq!(vfnvme_dma_free(ctrl, b), OK);
        }
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}
