//! Host tests: the C ABI lets the device touch only the live buffer a data pointer is in, up
//! to the length given to vfnvme_dma_alloc (issue 9, part 1), on the controller model.

use crate::ctrl::*;
use crate::error::vfnvme_last_error;
use crate::model::{vfnvme_ctrl_open_model, ModelOpts};
use crate::qpair::*;
use crate::Status;
use std::ffi::{c_void, CStr};
use std::ptr::{null_mut, NonNull};

const OK: i32 = 0;
const BAD_BUFFER: i32 = Status::VfnvmeErrBadBuffer as i32;

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated.
    unsafe { CStr::from_ptr(vfnvme_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A model controller with one namespace of 512-byte blocks, and one queue pair.
fn open() -> (*mut Ctrl, *mut Qpair) {
    let opts = ModelOpts {
        namespaces: 1,
        lba_size: 512,
        blocks: 4096,
        ..ModelOpts::default()
    };
    let mut ctrl = null_mut();
    let mut qp = null_mut();
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(vfnvme_ctrl_open_model(&opts, &mut ctrl), OK);
        assert_eq!(vfnvme_qpair_alloc(ctrl, 16, &mut qp), OK);
    }
    (ctrl, qp)
}

fn alloc(ctrl: *mut Ctrl, len: usize) -> NonNull<u8> {
    let mut p = null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_dma_alloc(ctrl, len, &mut p, null_mut()) };
    assert_eq!(rc, OK);
    NonNull::new(p.cast()).expect("vfnvme_dma_alloc gave NULL")
}

/// Reads `blocks` blocks at LBA 0 into `buf` and, if accepted, waits for the completion.
fn read(qp: *mut Qpair, buf: *mut u8, blocks: u32) -> i32 {
    // SAFETY: a live queue pair; `buf` is only used by the device if the call accepts it.
    unsafe {
        let rc = vfnvme_qpair_read(qp, 1, buf.cast::<c_void>(), 0, blocks, None, null_mut());
        while vfnvme_qpair_outstanding(qp) > 0 {
            assert!(vfnvme_qpair_process_completions(qp, 0) >= 0);
        }
        rc
    }
}

/// Fills LBA 0..256 with 0x5a, so that a read that lands somewhere is seen.
fn fill_disk(ctrl: *mut Ctrl, qp: *mut Qpair) {
    let src = alloc(ctrl, 128 << 10);
    // SAFETY: 128 KiB from vfnvme_dma_alloc, freed once the write completed.
    unsafe {
        std::ptr::write_bytes(src.as_ptr(), 0x5a, 128 << 10);
        assert_eq!(
            vfnvme_qpair_write(qp, 1, src.as_ptr().cast(), 0, 256, None, null_mut()),
            OK
        );
        while vfnvme_qpair_outstanding(qp) > 0 {
            assert!(vfnvme_qpair_process_completions(qp, 0) >= 0);
        }
        assert_eq!(vfnvme_dma_free(ctrl, src.as_ptr().cast()), OK);
    }
}

fn close(ctrl: *mut Ctrl, qp: *mut Qpair) {
    // SAFETY: live handles, nothing in flight.
    unsafe {
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

#[test]
fn reads_past_the_end_of_the_buffer_are_refused() {
    let (ctrl, qp) = open();
    fill_disk(ctrl, qp);
    let a = alloc(ctrl, 4096);
    let b = alloc(ctrl, 4096);
    // SAFETY: `a` and `b` are 4096-byte buffers from vfnvme_dma_alloc, freed at the end.
    unsafe {
        let neighbour = || std::slice::from_raw_parts(b.as_ptr(), 4096);
        assert_eq!(read(qp, a.as_ptr(), 8), OK, "{}", last_error());
        assert!(std::slice::from_raw_parts(a.as_ptr(), 4096)
            .iter()
            .all(|&x| x == 0x5a));
        // 9 x 512 bytes into 4096: refused, through the queue pair's cached region too.
        assert_eq!(read(qp, a.as_ptr(), 9), BAD_BUFFER);
        assert!(
            last_error().contains("runs past the end of its buffer (4096 bytes"),
            "{}",
            last_error()
        );
        // 64 KiB into 4 KiB.
        assert_eq!(read(qp, a.as_ptr(), 128), BAD_BUFFER);
        assert!(
            neighbour().iter().all(|&x| x == 0),
            "the neighbouring buffer is untouched"
        );
        // A range starting inside the buffer: up to its end, not a byte further.
        assert_eq!(read(qp, a.as_ptr().add(512), 7), OK, "{}", last_error());
        assert_eq!(read(qp, a.as_ptr().add(512), 8), BAD_BUFFER);
        // Writes are checked the same way.
        let rc = vfnvme_qpair_write(qp, 1, a.as_ptr().cast(), 0, 9, None, null_mut());
        assert_eq!(rc, BAD_BUFFER);
        assert_eq!(vfnvme_qpair_outstanding(qp), 0, "nothing was queued");
        assert_eq!(vfnvme_dma_free(ctrl, a.as_ptr().cast()), OK);
        assert_eq!(vfnvme_dma_free(ctrl, b.as_ptr().cast()), OK);
    }
    close(ctrl, qp);
}

#[test]
fn the_bound_is_the_length_asked_for_not_the_chunk() {
    let (ctrl, qp) = open();
    // 5000 bytes: the pool hands out an 8 KiB chunk, but the caller owns 5000 bytes.
    let a = alloc(ctrl, 5000);
    assert_eq!(read(qp, a.as_ptr(), 9), OK, "{}", last_error());
    assert_eq!(read(qp, a.as_ptr(), 10), BAD_BUFFER, "5120 > 5000");
    // SAFETY: from vfnvme_dma_alloc.
    assert_eq!(unsafe { vfnvme_dma_free(ctrl, a.as_ptr().cast()) }, OK);
    close(ctrl, qp);
}

#[test]
fn freed_buffers_are_refused() {
    let (ctrl, qp) = open();
    let a = alloc(ctrl, 4096);
    let b = alloc(ctrl, 4096);
    // SAFETY: buffers from vfnvme_dma_alloc; the freed one is only handed to calls that must
    // refuse it.
    unsafe {
        // The queue pair has `a`'s region cached from this read.
        assert_eq!(read(qp, a.as_ptr(), 8), OK, "{}", last_error());
        assert_eq!(vfnvme_dma_free(ctrl, a.as_ptr().cast()), OK);
        assert_eq!(read(qp, a.as_ptr(), 8), BAD_BUFFER);
        assert!(last_error().contains("freed"), "{}", last_error());
        assert_eq!(read(qp, a.as_ptr(), 1), BAD_BUFFER);
        let rc = vfnvme_qpair_write(qp, 1, a.as_ptr().cast(), 0, 1, None, null_mut());
        assert_eq!(rc, BAD_BUFFER);
        let mut iova = 0;
        assert_eq!(
            vfnvme_dma_translate(ctrl, a.as_ptr().cast(), &mut iova),
            BAD_BUFFER
        );
        assert_eq!(vfnvme_qpair_outstanding(qp), 0, "nothing was queued");
        // The live neighbour still works, and the freed chunk does once allocated again.
        assert_eq!(read(qp, b.as_ptr(), 8), OK, "{}", last_error());
        let again = alloc(ctrl, 4096);
        assert_eq!(again, a, "the pool hands the chunk out again");
        assert_eq!(read(qp, again.as_ptr(), 8), OK, "{}", last_error());
        assert_eq!(vfnvme_dma_free(ctrl, again.as_ptr().cast()), OK);
        assert_eq!(vfnvme_dma_free(ctrl, b.as_ptr().cast()), OK);
    }
    close(ctrl, qp);
}

#[test]
fn a_buffer_in_flight_cannot_be_freed() {
    let (ctrl, qp) = open();
    let a = alloc(ctrl, 8192);
    let b = alloc(ctrl, 4096);
    let mut qp2 = null_mut();
    // SAFETY: buffers from vfnvme_dma_alloc, freed only once nothing uses them; live handles.
    unsafe {
        assert_eq!(vfnvme_qpair_alloc(ctrl, 4, &mut qp2), OK);
        // A read into the second half of `a`, not yet reaped: `a` stays allocated.
        let rc = vfnvme_qpair_read(qp, 1, a.as_ptr().add(4096).cast(), 0, 8, None, null_mut());
        assert_eq!(rc, OK, "{}", last_error());
        assert_eq!(vfnvme_qpair_commit(qp), OK);
        assert_eq!(
            vfnvme_dma_free(ctrl, a.as_ptr().cast()),
            Status::VfnvmeErrBusy as i32
        );
        assert!(last_error().contains("in flight"), "{}", last_error());
        // Another buffer is free to go, and the refused one still works.
        let rc = vfnvme_qpair_write(qp2, 1, b.as_ptr().cast(), 8, 8, None, null_mut());
        assert_eq!(rc, OK, "{}", last_error());
        assert_eq!(
            vfnvme_dma_free(ctrl, b.as_ptr().cast()),
            Status::VfnvmeErrBusy as i32,
            "in flight on the other queue pair"
        );
        while vfnvme_qpair_outstanding(qp2) > 0 {
            let mut out = [crate::types::Completion::default(); 4];
            assert!(vfnvme_qpair_poll_completions(qp2, 4, out.as_mut_ptr()) >= 0);
        }
        assert_eq!(vfnvme_dma_free(ctrl, b.as_ptr().cast()), OK);
        while vfnvme_qpair_outstanding(qp) > 0 {
            assert!(vfnvme_qpair_process_completions(qp, 0) >= 0);
        }
        assert_eq!(vfnvme_dma_free(ctrl, a.as_ptr().cast()), OK);
        // A refused submit leaves no mark behind.
        let c = alloc(ctrl, 4096);
        assert_eq!(read(qp, c.as_ptr(), 9), BAD_BUFFER);
        assert_eq!(vfnvme_qpair_free(qp2), OK);
        assert_eq!(vfnvme_dma_free(ctrl, c.as_ptr().cast()), OK);
    }
    close(ctrl, qp);
}
