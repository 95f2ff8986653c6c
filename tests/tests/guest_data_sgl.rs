//! Scenario `data`: vectored reads and writes (`QueuePair::readv/writev`, what
//! `vfnvme_qpair_readv/writev` submit) on QEMU's NVMe controller, which reports SGL support
//! (Identify Controller SGLS 1h):
//! - iovecs of 2 to 16 pieces at odd addresses and sizes, spread over three DMA buffers, written
//!   and read back through another split, byte for byte, and checked against a plain read of
//!   the same blocks (the device saw the pieces in order), with `prefer_sgl` off (SGLs only
//!   because PRPs can't describe these lists) and on (every command with SGLs);
//! - one such request larger than MDTS, split into several commands that each take their part
//!   of the list;
//! - a list PRPs can describe (page-aligned pieces) round-trips both ways too;
//! - and no IOMMU fault in the guest's kernel log meanwhile.
//!
//! The refusal of a list PRPs can't describe on a controller without SGLs is tested on the
//! model (QEMU 7.2 always reports SGLs): `driver/tests/model_sgl_io.rs`,
//! `ffi/src/abi_iov_tests.rs`.

use vfnvme::hal::{DmaBuffer, DmaSpan};
use vfnvme::{Namespace, QpairOptions};
use vfnvme_tests::guest;
use vfnvme_tests::guest_io::{self, assert_same, Ctrl, Qpair};
use vfnvme_tests::guest_metadata::{assert_no_new_dmar_faults, dmar_faults};

/// Where these tests write: past what the other tests of the shared boot use (the namespace
/// has 131072 blocks of 512 bytes).
const FIRST_LBA: u64 = 96 * 1024;

/// Three DMA buffers of `len` bytes each, filled with `fill`.
fn buffers(ctrl: &Ctrl, len: usize, fill: u8) -> Vec<DmaBuffer> {
    (0..3)
        .map(|_| {
            let mut b = ctrl.dma().alloc(len).expect("DMA buffer");
            b.as_mut_slice().fill(fill);
            b
        })
        .collect()
}

/// `n` pieces of odd lengths holding `total` bytes, dealt round-robin over `bufs`, each at an
/// odd offset (from `skew`); as (buffer, offset, length).
fn odd_layout(n: usize, total: usize, skew: usize, buf_len: usize) -> Vec<(usize, usize, usize)> {
    let mut at = Vec::with_capacity(n);
    let mut next = [skew | 1; 3];
    let mut left = total;
    for k in 0..n {
        let len = if k + 1 == n {
            left
        } else {
            (left / (n - k)) | 1
        };
        let b = k % 3;
        assert!(len > 0 && next[b] + len <= buf_len, "layout fits");
        at.push((b, next[b], len));
        next[b] += len + 3 + 2 * k;
        left -= len;
    }
    at
}

/// The spans of `layout` over `bufs`.
fn spans(ctrl: &Ctrl, bufs: &[DmaBuffer], layout: &[(usize, usize, usize)]) -> Vec<DmaSpan> {
    layout
        .iter()
        .map(|&(b, off, len)| {
            // SAFETY: `off` lies inside the buffer (the layout was checked to fit).
            let p = unsafe { bufs[b].as_ptr().add(off) };
            ctrl.dma().span(p, len).expect("inside its buffer")
        })
        .collect()
}

/// The bytes of `layout` over `bufs`, in order.
fn gather(bufs: &[DmaBuffer], layout: &[(usize, usize, usize)]) -> Vec<u8> {
    layout
        .iter()
        .flat_map(|&(b, off, len)| bufs[b].as_slice()[off..off + len].to_vec())
        .collect()
}

/// Writes `out` (pieces of `src`) at `lba`, reads it back into `back` (pieces of `dst`) and
/// with one plain read, and compares all three.
#[allow(clippy::too_many_arguments)]
fn round_trip(
    ctrl: &Ctrl,
    qp: &mut Qpair,
    ns: &Namespace,
    lba: u64,
    blocks: u32,
    src: &[DmaBuffer],
    out: &[(usize, usize, usize)],
    dst: &[DmaBuffer],
    back: &[(usize, usize, usize)],
    what: &str,
) {
    let w = spans(ctrl, src, out);
    // SAFETY: the spans lie in `src`, this controller's memory, alive and untouched until the
    // completion, which is waited for below.
    unsafe { qp.writev(ns, lba, blocks, &w, 1) }.unwrap_or_else(|e| panic!("{what}: writev: {e}"));
    let c = guest_io::wait_completions(qp, 1);
    assert!(c[0].is_ok(), "{what}: writev: {:?}", c[0].status);
    let r = spans(ctrl, dst, back);
    // SAFETY: as above, for `dst`.
    unsafe { qp.readv(ns, lba, blocks, &r, 2) }.unwrap_or_else(|e| panic!("{what}: readv: {e}"));
    let c = guest_io::wait_completions(qp, 1);
    assert!(c[0].is_ok(), "{what}: readv: {:?}", c[0].status);
    let len = blocks as usize * ns.lba_size() as usize;
    let sent = gather(src, out);
    let got = gather(dst, back);
    assert_same(&sent[..len], &got[..len], ns.lba_size(), what);
    let plain = guest_io::read(ctrl, qp, ns, lba, len);
    assert_same(
        &sent[..len],
        &plain,
        ns.lba_size(),
        &format!("{what}: plain read"),
    );
}

#[test]
fn iovecs_of_odd_pieces_round_trip_with_sgls_prefer_sgl_on_and_off() {
    if !guest::in_guest(
        "guest_data_sgl::iovecs_of_odd_pieces_round_trip_with_sgls_prefer_sgl_on_and_off",
    ) {
        return;
    }
    let faults_before = dmar_faults();
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let ns = guest_io::namespace(&ctrl, 1);
    let lba_size = ns.lba_size() as usize;
    let mdts = ctrl.identify().max_transfer_bytes;
    const BUF: usize = 1 << 20;
    for prefer_sgl in [false, true] {
        let mut qp = ctrl
            .alloc_qpair(QpairOptions {
                depth: 16,
                prefer_sgl,
                ..QpairOptions::default()
            })
            .expect("queue pair");
        assert!(qp.sgl_supported(), "QEMU's controller reports SGLs");
        assert_eq!(qp.prefers_sgl(), prefer_sgl);
        let mut src = buffers(&ctrl, BUF, 0);
        for (k, b) in src.iter_mut().enumerate() {
            guest_io::Prng::new(0x5691 + k as u64 + u64::from(prefer_sgl) * 8)
                .fill(b.as_mut_slice());
        }
        let dst = buffers(&ctrl, BUF, 0xa5);
        let mut lba = FIRST_LBA;
        for (n, blocks) in [(2usize, 1u32), (3, 3), (5, 8), (8, 17), (13, 40), (16, 64)] {
            let total = blocks as usize * lba_size;
            let out = odd_layout(n, total, 7 * n, BUF);
            let back = odd_layout(n.max(3) - 1, total, 5 + n, BUF);
            let what = format!("{n} pieces, {blocks} blocks, prefer_sgl {prefer_sgl}");
            round_trip(
                &ctrl, &mut qp, &ns, lba, blocks, &src, &out, &dst, &back, &what,
            );
            lba += u64::from(blocks);
        }
        // Larger than MDTS: several commands, each with its part of the 16 pieces.
        let blocks = ((mdts + mdts / 2) / lba_size) as u32;
        let out = odd_layout(16, blocks as usize * lba_size, 11, BUF);
        let back = odd_layout(9, blocks as usize * lba_size, 1, BUF);
        let what = format!("16 pieces over MDTS ({blocks} blocks), prefer_sgl {prefer_sgl}");
        round_trip(
            &ctrl, &mut qp, &ns, lba, blocks, &src, &out, &dst, &back, &what,
        );
        // PRP-describable: page-aligned pieces of whole pages, the last shorter.
        let aligned = [(0, 0, 4096), (1, 8192, 4096), (2, 0, 3 * 512)];
        let what = format!("page-aligned pieces, prefer_sgl {prefer_sgl}");
        round_trip(
            &ctrl,
            &mut qp,
            &ns,
            FIRST_LBA + 4096,
            19,
            &src,
            &aligned,
            &dst,
            &aligned,
            &what,
        );
        eprintln!("prefer_sgl {prefer_sgl}: every iovec read back exactly");
    }
    drop(ctrl);
    assert_no_new_dmar_faults(&faults_before);
}
