//! Host tests of vfnvme_qpair_read_md / vfnvme_qpair_write_md on the model: separate metadata and
//! PI options through the C ABI, the metadata buffer refused by vfnvme_dma_free while a request
//! uses it, a PI check failure reaching the callback as SCT 2h / SC 82h, and every malformed
//! call refused with its code.

use crate::ctrl::*;
use crate::error::vfnvme_last_error;
use crate::model::{vfnvme_ctrl_open_model, ModelOpts};
use crate::qpair::*;
use crate::types::{Cpl, NsInfo, PiOpts, VFNVME_PI_CHECK_GUARD};
use crate::Status;
use std::cell::RefCell;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated.
    unsafe { CStr::from_ptr(vfnvme_last_error()) }
        .to_string_lossy()
        .into_owned()
}

thread_local! {
    static DONE: RefCell<Vec<Cpl>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn record(_arg: *mut c_void, cpl: *const Cpl) {
    // SAFETY: `cpl` is valid during the call.
    DONE.with(|d| d.borrow_mut().push(unsafe { *cpl }));
}

/// Polls `qp` until a completion arrives: it.
fn wait(qp: *mut Qpair) -> Cpl {
    for _ in 0..100_000 {
        if let Some(c) = DONE.with(|d| d.borrow_mut().pop()) {
            return c;
        }
        // SAFETY: a live queue pair of this thread.
        assert!(unsafe { vfnvme_qpair_process_completions(qp, 0) } >= 0);
    }
    panic!("no completion");
}

/// A model with 4 namespaces of 4096+16 bytes, separate metadata, PI type 1 first.
fn open() -> (*mut Ctrl, *mut Qpair) {
    let opts = ModelOpts {
        namespaces: 1,
        lba_size: 4096,
        blocks: 4096,
        metadata_size: 16,
        metadata_extended: false,
        protection_type: 1,
        protection_first: true,
        ..ModelOpts::default()
    };
    let (mut ctrl, mut qp) = (null_mut(), null_mut());
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(
            vfnvme_ctrl_open_model(&opts, &mut ctrl),
            0,
            "{}",
            last_error()
        );
        assert_eq!(vfnvme_qpair_alloc(ctrl, 64, &mut qp), 0, "{}", last_error());
    }
    (ctrl, qp)
}

fn alloc(ctrl: *mut Ctrl, len: usize) -> *mut u8 {
    let (mut p, mut iova) = (null_mut(), 0);
    // SAFETY: valid out pointers.
    assert_eq!(unsafe { vfnvme_dma_alloc(ctrl, len, &mut p, &mut iova) }, 0);
    p.cast()
}

#[test]
fn metadata_round_trips_and_a_spoiled_guard_fails_the_checked_read() {
    let (ctrl, qp) = open();
    // SAFETY: valid pointers and lengths throughout; buffers live until the end.
    unsafe {
        let mut info = [NsInfo::default(); 1];
        assert_eq!(vfnvme_ctrl_namespaces(ctrl, info.as_mut_ptr(), 1), 1);
        let i = info[0];
        assert_eq!(
            (i.metadata_size, i.protection_type, i.metadata_extended),
            (16, 1, false)
        );
        assert!(i.protection_first && !i.io_supported);
        // A plain read is refused: the format moves metadata.
        let data = alloc(ctrl, 4 * 4096);
        let md = alloc(ctrl, 4 * 16);
        let rc = vfnvme_qpair_read(qp, 1, data.cast(), 0, 4, Some(record), null_mut());
        assert_eq!(rc, Status::VfnvmeErrUnsupported.code());
        assert!(
            last_error().contains("vfnvme_qpair_read_md"),
            "{}",
            last_error()
        );
        // PRACT writes: the controller makes the PI; the host's metadata bytes around it move.
        for (k, b) in std::slice::from_raw_parts_mut(data, 4 * 4096)
            .iter_mut()
            .enumerate()
        {
            *b = (k % 251) as u8;
        }
        std::slice::from_raw_parts_mut(md, 64).fill(0xab);
        let act = PiOpts {
            act: true,
            check: VFNVME_PI_CHECK_GUARD,
            ..PiOpts::default()
        };
        let rc = vfnvme_qpair_write_md(
            qp,
            1,
            data.cast(),
            md.cast(),
            8,
            4,
            &act,
            Some(record),
            null_mut(),
        );
        assert_eq!(rc, 0, "{}", last_error());
        // The metadata buffer is in use: its free is refused until the completion.
        assert_eq!(
            vfnvme_dma_free(ctrl, md.cast()),
            Status::VfnvmeErrBusy.code()
        );
        let c = wait(qp);
        assert_eq!((c.sct, c.sc), (0, 0), "{c:?}");
        // Read back with the guard checked, into fresh buffers.
        let back = alloc(ctrl, 4 * 4096);
        let back_md = alloc(ctrl, 64);
        let rc = vfnvme_qpair_read_md(
            qp,
            1,
            back.cast(),
            back_md.cast(),
            8,
            4,
            &act,
            Some(record),
            null_mut(),
        );
        assert_eq!(rc, 0, "{}", last_error());
        let c = wait(qp);
        assert_eq!((c.sct, c.sc), (0, 0), "{c:?}");
        assert_eq!(
            std::slice::from_raw_parts(back, 4 * 4096),
            std::slice::from_raw_parts(data, 4 * 4096)
        );
        // PI first: bytes 8..16 of each block's metadata are the host's.
        let m = std::slice::from_raw_parts(back_md, 64);
        assert!(
            m.chunks(16).all(|c| c[8..].iter().all(|&b| b == 0xab)),
            "{m:?}"
        );
        // Spoil block 2's guard with an unchecked write of the metadata read back.
        let plain = PiOpts::default();
        std::slice::from_raw_parts_mut(back_md, 64)[2 * 16] ^= 0xff;
        let rc = vfnvme_qpair_write_md(
            qp,
            1,
            back.cast(),
            back_md.cast(),
            8,
            4,
            &plain,
            Some(record),
            null_mut(),
        );
        assert_eq!(rc, 0, "{}", last_error());
        let c = wait(qp);
        assert_eq!((c.sct, c.sc), (0, 0), "{c:?}");
        let rc = vfnvme_qpair_read_md(
            qp,
            1,
            back.cast(),
            back_md.cast(),
            8,
            4,
            &act,
            Some(record),
            null_mut(),
        );
        assert_eq!(rc, 0, "{}", last_error());
        let c = wait(qp);
        assert_eq!((c.sct, c.sc), (2, 0x82), "{c:?}");
        for p in [data, md, back, back_md] {
            assert_eq!(vfnvme_dma_free(ctrl, p.cast()), 0, "{}", last_error());
        }
        assert_eq!(vfnvme_qpair_free(qp), 0);
        assert_eq!(vfnvme_ctrl_close(ctrl), 0);
    }
}

#[test]
fn malformed_metadata_calls_are_refused_with_their_codes() {
    let (ctrl, qp) = open();
    // SAFETY: valid pointers, except where a call is meant to be refused.
    unsafe {
        let data = alloc(ctrl, 2 * 4096);
        let md = alloc(ctrl, 32);
        let cb = Some(record as unsafe extern "C" fn(*mut c_void, *const Cpl));
        let read = |buf: *mut u8, m: *mut u8, blocks: u32, pi: *const PiOpts| {
            vfnvme_qpair_read_md(qp, 1, buf.cast(), m.cast(), 0, blocks, pi, cb, null_mut())
        };
        // Separate metadata needed.
        assert_eq!(
            read(data, null_mut(), 2, null()),
            Status::VfnvmeErrBadBuffer.code()
        );
        // Metadata buffer too short for 3 blocks (32 bytes for 48) / data too short.
        assert_eq!(read(data, md, 3, null()), Status::VfnvmeErrBadBuffer.code());
        // Not DMA memory.
        let mut stack = [0u8; 64];
        assert_eq!(
            read(data, stack.as_mut_ptr(), 2, null()),
            Status::VfnvmeErrBadBuffer.code()
        );
        // Unknown check bits; a zero size.
        let bad = PiOpts {
            check: 0x10,
            ..PiOpts::default()
        };
        assert_eq!(
            read(data, md, 2, &bad),
            Status::VfnvmeErrInvalidArgument.code()
        );
        let zero = PiOpts {
            size: 0,
            ..PiOpts::default()
        };
        assert_eq!(
            read(data, md, 2, &zero),
            Status::VfnvmeErrInvalidArgument.code()
        );
        // Type 1's reference tag must be the LBA.
        let wrong_ref = PiOpts {
            check: crate::types::VFNVME_PI_CHECK_REF,
            has_ref_tag: true,
            ref_tag: 99,
            ..PiOpts::default()
        };
        assert_eq!(
            read(data, md, 2, &wrong_ref),
            Status::VfnvmeErrInvalidArgument.code()
        );
        // Zero blocks; NULL queue pair.
        assert_eq!(
            read(data, md, 0, null()),
            Status::VfnvmeErrOutOfRange.code()
        );
        assert_eq!(
            vfnvme_qpair_read_md(
                null_mut(),
                1,
                data.cast(),
                md.cast(),
                0,
                1,
                null(),
                cb,
                null_mut()
            ),
            Status::VfnvmeErrInvalidArgument.code()
        );
        // Nothing was queued: the buffers free at once.
        assert_eq!(vfnvme_qpair_process_completions(qp, 0), 0);
        assert_eq!(vfnvme_dma_free(ctrl, data.cast()), 0);
        assert_eq!(vfnvme_dma_free(ctrl, md.cast()), 0);
        assert_eq!(vfnvme_qpair_free(qp), 0);
        assert_eq!(vfnvme_ctrl_close(ctrl), 0);
    }
}
