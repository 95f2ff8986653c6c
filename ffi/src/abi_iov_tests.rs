//! Host tests of vfnvme_qpair_readv / vfnvme_qpair_writev on the model: iovecs of 2..256 pieces
//! at odd addresses and sizes round-trip byte for byte; `prefer_sgl` sends lists PRPs can
//! describe with SGLs; a list PRPs can't describe works with SGLs and is refused with
//! VFNVME_ERR_NOT_PRP_DESCRIBABLE without them; every piece's buffer is refused by
//! vfnvme_dma_free until the completion (the record's marks and the chunk pool alike); and
//! every malformed call (no pieces, too many, a NULL or empty piece, a piece outside a buffer
//! or past its end, too few bytes) is refused with its code, leaving nothing marked.

use crate::ctrl::*;
use crate::error::vfnvme_last_error;
use crate::model::{vfnvme_ctrl_open_model, ModelOpts};
use crate::qpair::*;
use crate::types::{Cpl, Iov, QpairOpts, VFNVME_MAX_IOV};
use crate::Status;
use std::cell::RefCell;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};
use vfnvme_model::ModelPlatform;

const LBA: usize = 512;

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

/// A model of one 512-byte namespace (with SGL support unless `no_sgl`) and a queue pair of
/// `depth` (with `prefer_sgl`).
fn open(no_sgl: bool, prefer_sgl: bool, depth: u32) -> (*mut Ctrl, *mut Qpair) {
    let opts = ModelOpts {
        namespaces: 1,
        lba_size: LBA as u32,
        blocks: 1 << 16,
        no_sgl,
        ..ModelOpts::default()
    };
    let qopts = QpairOpts {
        depth,
        prefer_sgl,
        ..QpairOpts::default()
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
        assert_eq!(
            vfnvme_qpair_alloc_opts(ctrl, &qopts, &mut qp),
            0,
            "{}",
            last_error()
        );
    }
    (ctrl, qp)
}

fn close(ctrl: *mut Ctrl, qp: *mut Qpair) {
    // SAFETY: live handles, nothing in flight.
    unsafe {
        assert_eq!(vfnvme_qpair_free(qp), 0, "{}", last_error());
        assert_eq!(vfnvme_ctrl_close(ctrl), 0, "{}", last_error());
    }
}

fn alloc(ctrl: *mut Ctrl, len: usize) -> *mut u8 {
    let (mut p, mut iova) = (null_mut(), 0);
    // SAFETY: valid out pointers.
    assert_eq!(unsafe { vfnvme_dma_alloc(ctrl, len, &mut p, &mut iova) }, 0);
    p.cast()
}

/// Commands the model ran with SGLs so far.
fn sgl_commands(ctrl: *mut Ctrl) -> u64 {
    // SAFETY: a live controller.
    let c = unsafe { &*ctrl };
    c.ops
        .platform_any()
        .downcast_ref::<ModelPlatform>()
        .expect("a model")
        .stats()
        .sgl_commands
}

/// Pieces at (offset, length) of `buf`.
fn pieces(buf: *mut u8, at: &[(usize, usize)]) -> Vec<Iov> {
    at.iter()
        .map(|&(off, len)| Iov {
            // SAFETY: the offsets lie inside `buf` (the library checks them anyway).
            base: unsafe { buf.add(off) }.cast(),
            len,
        })
        .collect()
}

/// `n` pieces of odd lengths covering `total` bytes, spread over `buf` with gaps, from byte 3.
fn odd_layout(n: usize, total: usize) -> Vec<(usize, usize)> {
    let mut at = Vec::new();
    let (mut off, mut left) = (3usize, total);
    for k in 0..n {
        let len = if k + 1 == n {
            left
        } else {
            (left / (n - k)) | 1
        };
        assert!(
            len > 0 && left >= len,
            "layout of {n} pieces over {total} bytes"
        );
        at.push((off, len));
        off += len + 5 + k;
        left -= len;
    }
    at
}

/// Submits a vectored read or write and waits for it; its status (sct, sc).
fn rw(qp: *mut Qpair, write: bool, iov: &[Iov], lba: u64, blocks: u32) -> (u8, u8) {
    // SAFETY: a live queue pair; the pieces lie in live buffers kept until the completion.
    let rc = unsafe {
        if write {
            vfnvme_qpair_writev(
                qp,
                1,
                iov.as_ptr(),
                iov.len() as u32,
                lba,
                blocks,
                Some(record),
                null_mut(),
            )
        } else {
            vfnvme_qpair_readv(
                qp,
                1,
                iov.as_ptr(),
                iov.len() as u32,
                lba,
                blocks,
                Some(record),
                null_mut(),
            )
        }
    };
    assert_eq!(rc, 0, "{}", last_error());
    let c = wait(qp);
    (c.sct, c.sc)
}

/// The bytes of the pieces, in order.
fn gather(iov: &[Iov]) -> Vec<u8> {
    iov.iter()
        // SAFETY: each piece lies inside a live buffer.
        .flat_map(|p| unsafe { std::slice::from_raw_parts(p.base.cast::<u8>(), p.len) }.to_vec())
        .collect()
}

#[test]
fn odd_iovecs_round_trip_with_sgls_and_prefer_sgl_sends_every_list_with_them() {
    for prefer in [false, true] {
        let (ctrl, qp) = open(false, prefer, 64);
        // SAFETY: a live queue pair.
        assert_eq!(unsafe { vfnvme_qpair_uses_sgl(qp) }, i32::from(prefer));
        let src = alloc(ctrl, 128 << 10);
        let dst = alloc(ctrl, 128 << 10);
        // SAFETY: 128 KiB each.
        unsafe {
            for (k, b) in std::slice::from_raw_parts_mut(src, 128 << 10)
                .iter_mut()
                .enumerate()
            {
                *b = (k * 7 % 253) as u8;
            }
        }
        for (n, blocks) in [(2usize, 1u32), (3, 5), (7, 16), (16, 33), (256, 64)] {
            let total = blocks as usize * LBA;
            let lba = 100 * n as u64;
            let out = pieces(src, &odd_layout(n, total));
            // Read back through another split (one piece fewer, or the same count).
            let back = pieces(dst, &odd_layout(n.max(3) - 1, total));
            let before = sgl_commands(ctrl);
            assert_eq!(rw(qp, true, &out, lba, blocks), (0, 0), "{n} pieces");
            assert_eq!(rw(qp, false, &back, lba, blocks), (0, 0), "{n} pieces");
            assert_eq!(
                gather(&out),
                gather(&back),
                "{n} pieces, prefer_sgl {prefer}"
            );
            assert!(sgl_commands(ctrl) > before, "odd pieces go with SGLs");
        }
        // A list PRPs can describe: page-aligned pieces of whole pages, the last shorter.
        let aligned = pieces(src, &[(0, 4096), (8192, 4096), (16384, 512)]);
        let before = sgl_commands(ctrl);
        assert_eq!(rw(qp, true, &aligned, 7, 17), (0, 0));
        assert_eq!(
            sgl_commands(ctrl) > before,
            prefer,
            "PRPs unless prefer_sgl"
        );
        close(ctrl, qp);
    }
}

#[test]
fn a_list_prps_cannot_describe_is_refused_without_sgls_and_prps_still_work() {
    let (ctrl, qp) = open(true, true, 64);
    // SAFETY: a live queue pair, and NULL.
    unsafe {
        assert_eq!(vfnvme_qpair_uses_sgl(qp), 0, "no SGLs on this controller");
        assert_eq!(
            vfnvme_qpair_uses_sgl(null()),
            Status::VfnvmeErrInvalidArgument.code()
        );
    }
    let buf = alloc(ctrl, 64 << 10);
    let back = alloc(ctrl, 64 << 10);
    // SAFETY: live handles and buffers.
    unsafe {
        std::slice::from_raw_parts_mut(buf, 64 << 10).fill(0x5c);
        // Two pieces, the first ending inside a page.
        let odd = pieces(buf, &[(0, 512), (4096 + 8, 512)]);
        let rc = vfnvme_qpair_writev(qp, 1, odd.as_ptr(), 2, 0, 2, Some(record), null_mut());
        assert_eq!(rc, Status::VfnvmeErrNotPrpDescribable.code());
        let msg = last_error();
        assert!(
            msg.contains("span 0") && msg.contains("SGL") && msg.contains("copy them"),
            "{msg}"
        );
        // Refused: nothing stays marked.
        assert_eq!(vfnvme_qpair_outstanding(qp), 0);
        // PRP-describable pieces work (prefer_sgl is ignored without SGLs).
        let ok = pieces(buf, &[(100, 3996), (8192, 4096), (16384, 100 + 8)]);
        assert_eq!(rw(qp, true, &ok, 0, 16), (0, 0));
        let rd = pieces(back, &[(0, 8192)]);
        assert_eq!(rw(qp, false, &rd, 0, 16), (0, 0));
        assert_eq!(gather(&ok)[..8192], gather(&rd)[..]);
        assert_eq!(sgl_commands(ctrl), 0, "no SGL reached the controller");
        assert_eq!(vfnvme_dma_free(ctrl, buf.cast()), 0, "{}", last_error());
    }
    close(ctrl, qp);
}

#[test]
fn every_piece_buffer_is_refused_by_free_until_the_completion() {
    let (ctrl, qp) = open(false, false, 4);
    // SAFETY: live handles and buffers; the pieces stay allocated while in flight (the frees
    // attempted meanwhile are refused).
    unsafe {
        // Three buffers, five pieces (chunk marks), and one two-piece request (record marks).
        let bufs: Vec<*mut u8> = (0..3).map(|_| alloc(ctrl, 8192)).collect();
        let five: Vec<Iov> = [
            (0, 0, 700),
            (1, 9, 300),
            (2, 1, 24),
            (0, 4000, 1000),
            (2, 99, 3096),
        ]
        .iter()
        .map(|&(b, off, len)| Iov {
            base: bufs[b].add(off).cast(),
            len,
        })
        .collect();
        let pair_buf = alloc(ctrl, 4096);
        let two = pieces(pair_buf, &[(1, 1000), (2001, 24)]);
        let rc = vfnvme_qpair_writev(qp, 1, five.as_ptr(), 5, 0, 10, Some(record), null_mut());
        assert_eq!(rc, 0, "{}", last_error());
        let rc = vfnvme_qpair_readv(qp, 1, two.as_ptr(), 2, 64, 2, Some(record), null_mut());
        assert_eq!(rc, 0, "{}", last_error());
        for &b in bufs.iter().chain([&pair_buf]) {
            assert_eq!(
                vfnvme_dma_free(ctrl, b.cast()),
                Status::VfnvmeErrBusy.code(),
                "a piece's buffer is in flight"
            );
            assert!(last_error().contains("in flight"), "{}", last_error());
        }
        assert_eq!(wait(qp).sct, 0);
        assert_eq!(wait(qp).sct, 0);
        for &b in bufs.iter().chain([&pair_buf]) {
            assert_eq!(vfnvme_dma_free(ctrl, b.cast()), 0, "{}", last_error());
        }
    }
    close(ctrl, qp);
}

#[test]
fn the_chunk_pool_runs_out_as_queue_full_and_comes_back() {
    // Depth 4: 4 records, 16 chunks of 16 marks: one request of 256 pieces takes them all.
    let (ctrl, qp) = open(false, false, 4);
    let buf = alloc(ctrl, 256 * LBA);
    let all = pieces(buf, &(0..256).map(|k| (k * LBA, LBA)).collect::<Vec<_>>());
    let three = pieces(buf, &[(0, 100), (200, 100), (400, 312)]);
    // SAFETY: live handles and buffers, kept until the completions.
    unsafe {
        let rc = vfnvme_qpair_writev(qp, 1, all.as_ptr(), 256, 0, 256, Some(record), null_mut());
        assert_eq!(rc, 0, "{}", last_error());
        let rc = vfnvme_qpair_writev(qp, 1, three.as_ptr(), 3, 0, 1, Some(record), null_mut());
        assert_eq!(rc, Status::VfnvmeErrQueueFull.code(), "no chunk left");
        // Two pieces need no chunk.
        let rc = vfnvme_qpair_writev(qp, 1, three.as_ptr(), 2, 0, 0, Some(record), null_mut());
        assert_eq!(
            rc,
            Status::VfnvmeErrOutOfRange.code(),
            "zero blocks: the driver's check"
        );
        assert_eq!(wait(qp).sct, 0);
        assert_eq!(rw(qp, true, &three, 9, 1), (0, 0), "the chunks came back");
        assert_eq!(vfnvme_dma_free(ctrl, buf.cast()), 0, "{}", last_error());
    }
    close(ctrl, qp);
}

#[test]
fn malformed_iovecs_are_refused_with_their_codes_and_leave_nothing_marked() {
    let (ctrl, qp) = open(false, false, 8);
    let buf = alloc(ctrl, 8192);
    let mut outside = vec![0u8; 4096];
    let ok = pieces(buf, &[(0, 512), (1024, 512)]);
    // SAFETY: live handles; every pointer given is valid to read as the header requires
    // (the library refuses what does not lie in its buffers).
    unsafe {
        let call = |iov: *const Iov, n: u32, blocks: u32| {
            vfnvme_qpair_writev(qp, 1, iov, n, 0, blocks, Some(record), null_mut())
        };
        assert_eq!(
            call(ok.as_ptr(), 0, 2),
            Status::VfnvmeErrInvalidArgument.code()
        );
        assert!(last_error().contains("iovcnt 0"), "{}", last_error());
        assert_eq!(call(null(), 2, 2), Status::VfnvmeErrInvalidArgument.code());
        let many = vec![ok[0]; VFNVME_MAX_IOV as usize + 1];
        assert_eq!(
            call(many.as_ptr(), many.len() as u32, 1),
            Status::VfnvmeErrTooManyPieces.code()
        );
        assert!(last_error().contains("VFNVME_MAX_IOV"), "{}", last_error());
        let mut v = ok.clone();
        v[1].base = null_mut();
        assert_eq!(
            call(v.as_ptr(), 2, 2),
            Status::VfnvmeErrInvalidArgument.code()
        );
        assert!(last_error().contains("iov[1]"), "{}", last_error());
        let mut v = ok.clone();
        v[0].len = 0;
        assert_eq!(
            call(v.as_ptr(), 2, 2),
            Status::VfnvmeErrInvalidArgument.code()
        );
        assert!(last_error().contains("iov[0]"), "{}", last_error());
        let mut v = ok.clone();
        v[1].base = outside.as_mut_ptr().cast();
        assert_eq!(call(v.as_ptr(), 2, 2), Status::VfnvmeErrBadBuffer.code());
        assert!(
            last_error().contains("iov[1]") && last_error().contains("not inside DMA memory"),
            "{}",
            last_error()
        );
        // Past the end of its buffer (8192 bytes).
        let v = pieces(buf, &[(0, 512), (7900, 512)]);
        assert_eq!(call(v.as_ptr(), 2, 2), Status::VfnvmeErrBadBuffer.code());
        assert!(
            last_error().contains("runs past the end"),
            "{}",
            last_error()
        );
        // The pieces hold fewer bytes than the blocks need.
        let v = pieces(buf, &[(0, 511), (1024, 511), (2048, 1)]);
        assert_eq!(call(v.as_ptr(), 3, 3), Status::VfnvmeErrBadBuffer.code());
        // A freed buffer.
        let gone = alloc(ctrl, 4096);
        assert_eq!(vfnvme_dma_free(ctrl, gone.cast()), 0);
        let v = pieces(gone, &[(0, 512)]);
        assert_eq!(call(v.as_ptr(), 1, 1), Status::VfnvmeErrBadBuffer.code());
        // Nothing was queued or left marked: the buffer frees, and the queue pair is idle.
        assert_eq!(vfnvme_qpair_outstanding(qp), 0);
        assert_eq!(vfnvme_dma_free(ctrl, buf.cast()), 0, "{}", last_error());
        // A NULL queue pair.
        let rc = vfnvme_qpair_readv(null_mut(), 1, ok.as_ptr(), 2, 0, 2, None, null_mut());
        assert_eq!(rc, Status::VfnvmeErrInvalidArgument.code());
    }
    close(ctrl, qp);
}

#[test]
fn an_older_callers_qpair_opts_get_prefer_sgl_off_whatever_its_padding_holds() {
    let (ctrl, qp) = open(false, false, 8);
    // SAFETY: live handles.
    unsafe { assert_eq!(vfnvme_qpair_free(qp), 0) };
    // The first version of struct vfnvme_qpair_opts: 12 bytes, its tail padding unset.
    let mut old = [0u8; 12];
    old[..4].copy_from_slice(&12u32.to_ne_bytes());
    old[4..8].copy_from_slice(&8u32.to_ne_bytes());
    old[9..].fill(0xff);
    let mut qp = null_mut();
    // SAFETY: [u8; 12] and [u32; 3] have one size, and every bit pattern is a valid u32; the
    // words give the bytes u32 alignment.
    let words: [u32; 3] = unsafe { std::mem::transmute(old) };
    // SAFETY: `words` holds the caller's 12-byte struct.
    let rc = unsafe { vfnvme_qpair_alloc_opts(ctrl, words.as_ptr().cast(), &mut qp) };
    assert_eq!(rc, 0, "{}", last_error());
    let buf = alloc(ctrl, 8192);
    let before = sgl_commands(ctrl);
    assert_eq!(
        rw(qp, true, &pieces(buf, &[(0, 4096), (4096, 512)]), 0, 9),
        (0, 0)
    );
    assert_eq!(sgl_commands(ctrl), before, "PRPs: prefer_sgl is off");
    close(ctrl, qp);
}
