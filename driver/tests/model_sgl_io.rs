//! Vectored reads and writes (`Request::borrowed_vectored`, `QueuePair::readv/writev`) on the
//! model: iovecs of 2..16 pieces at odd addresses and sizes round-trip byte for byte with SGLs;
//! lists PRPs can describe work without SGLs; a list PRPs can't describe works with SGLs and is
//! refused, saying why, without; MDTS splits walk the list per command; `prefer_sgl` sends
//! every request with SGLs; malformed lists are refused before anything reaches the device;
//! and the model's IOMMU never sees an access outside the spans.

use std::sync::Arc;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::hal::{DmaBuffer, DmaSpan};
use vfnvme::queue::{Op, Request, MAX_SPANS};
use vfnvme::{QpairOptions, QueuePair, SubmitErrorKind};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

type Qp = QueuePair<ModelPlatform, u64>;

/// One 512-byte namespace (nsid 1); MDTS 1 (8 KiB per command) so that requests split.
fn up(sgl: bool) -> (Arc<ModelPlatform>, Controller<ModelPlatform>) {
    let cfg = ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 1 << 16,
            lba_size: 512,
            backing: Backing::Ram,
        }],
        mdts: 1,
        sgl,
        io_latency_ns: 0,
        admin_latency_ns: 0,
        ..ModelConfig::default()
    };
    let platform = ModelPlatform::new(cfg).expect("model config");
    let ctrl = Controller::new(platform.clone(), ControllerOptions::default()).expect("bring-up");
    (platform, ctrl)
}

/// Polls until one request completes; whether it succeeded.
fn wait(qp: &mut Qp) -> bool {
    let mut ok = None;
    while ok.is_none() {
        qp.poll(usize::MAX, |c| ok = Some(c.is_ok()));
    }
    ok.unwrap_or(false)
}

/// Pieces of `buf` at (offset, length): spans of the controller's pool.
fn spans_of(
    ctrl: &Controller<ModelPlatform>,
    buf: &DmaBuffer,
    at: &[(usize, usize)],
) -> Vec<DmaSpan> {
    at.iter()
        .map(|&(off, len)| {
            // SAFETY: `off + len` lies inside `buf` (checked by the pool, which says no otherwise).
            let ptr = unsafe { buf.as_ptr().add(off) };
            ctrl.dma().span(ptr, len).expect("inside the buffer")
        })
        .collect()
}

/// `n` pieces, all but the last of odd sizes at odd offsets, `gap` bytes apart, totalling
/// `total` bytes.
fn odd_layout(n: usize, total: usize, gap: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let (mut at, mut left) = (3usize, total);
    for i in 0..n {
        let len = if i + 1 == n {
            left
        } else {
            (left / (n - i)).max(1) | 1
        };
        out.push((at, len));
        at += len + gap + (i % 3);
        left -= len;
    }
    out
}

fn fill(buf: &mut DmaBuffer, seed: u8) {
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(13).wrapping_add(seed);
    }
}

/// The bytes of `layout` in `buf`, in order.
fn gather(buf: &DmaBuffer, layout: &[(usize, usize)]) -> Vec<u8> {
    let s = buf.as_slice();
    layout
        .iter()
        .flat_map(|&(o, l)| s[o..o + l].to_vec())
        .collect()
}

/// Writes `blocks` at `lba` from `layout` in `src`, reads them back into `back_layout` in a
/// zeroed `dst`; both must succeed and the bytes match.
fn round_trip(
    ctrl: &Controller<ModelPlatform>,
    qp: &mut Qp,
    lba: u64,
    blocks: u32,
    layout: &[(usize, usize)],
    back_layout: &[(usize, usize)],
) {
    let ns = ctrl.namespace(1).unwrap();
    let mut src = ctrl.dma().alloc(256 << 10).unwrap();
    fill(&mut src, lba as u8);
    let mut dst = ctrl.dma().alloc(256 << 10).unwrap();
    dst.as_mut_slice().fill(0);
    let w = spans_of(ctrl, &src, layout);
    // SAFETY: the spans are of `src`, alive and untouched until the write completes.
    unsafe { qp.writev(&ns, lba, blocks, &w, 1) }.expect("writev submitted");
    assert!(wait(qp), "writev of {} pieces", layout.len());
    let r = spans_of(ctrl, &dst, back_layout);
    // SAFETY: as above, for `dst`.
    unsafe { qp.readv(&ns, lba, blocks, &r, 2) }.expect("readv submitted");
    assert!(wait(qp), "readv of {} pieces", back_layout.len());
    let bytes = blocks as usize * 512;
    assert_eq!(
        gather(&dst, back_layout)[..bytes],
        gather(&src, layout)[..bytes],
        "{} pieces written, {} read",
        layout.len(),
        back_layout.len()
    );
    // And a plain read of the same blocks sees the gathered bytes.
    let plain = qp
        .read_sync(&ns, lba, blocks, ctrl.dma().alloc(bytes).unwrap())
        .unwrap();
    assert_eq!(plain.as_slice()[..bytes], gather(&src, layout)[..bytes]);
}

#[test]
fn iovecs_of_2_to_16_odd_pieces_round_trip_with_sgls() {
    let (p, ctrl) = up(true);
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    assert!(qp.sgl_supported() && !qp.prefers_sgl());
    for n in 2..=16usize {
        let blocks = 1 + n as u32; // up to 8.5 KiB: some split at MDTS (8 KiB)
        let total = blocks as usize * 512;
        let layout = odd_layout(n, total, 5);
        let back = odd_layout(18 - n, total, 1);
        round_trip(&ctrl, &mut qp, 100 * n as u64, blocks, &layout, &back);
    }
    assert!(p.stats().sgl_commands >= 2 * 15);
    assert_eq!(p.iommu().fault_count(), 0);
}

#[test]
fn prp_describable_lists_work_without_sgls() {
    let (p, ctrl) = up(false);
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    assert!(!qp.sgl_supported());
    // First piece from 0x200 to its page's end, two whole pages elsewhere, a partial last page.
    let layout = [(0x200, 0xE00), (0x4000, 0x2000), (0x9000, 0x200)];
    let back = [
        (0x1204, 0xDFC),
        (0x3000, 0x1000),
        (0x6000, 0x1000),
        (0x8000, 0x204),
    ];
    round_trip(&ctrl, &mut qp, 7, 24, &layout, &back); // 12 KiB: split at 8 KiB
    let two = [(0x10, 0xFF0), (0x2000, 0x10)];
    round_trip(&ctrl, &mut qp, 64, 8, &two, &[(0, 0x1000)]);
    assert_eq!(p.stats().sgl_commands, 0);
    assert_eq!(p.iommu().fault_count(), 0);
}

#[test]
fn a_list_prps_cant_describe_works_with_sgls_and_is_refused_clearly_without() {
    let layout = [(0x100, 0x300), (0x1000, 0x100)]; // the first ends inside its page
    for sgl in [true, false] {
        let (p, ctrl) = up(sgl);
        let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
        let ns = ctrl.namespace(1).unwrap();
        let buf = ctrl.dma().alloc(8192).unwrap();
        let spans = spans_of(&ctrl, &buf, &layout);
        let before = p.stats().io(0x01);
        // SAFETY: spans of `buf`, alive until the write completes.
        let r = unsafe { qp.writev(&ns, 0, 2, &spans, 0) };
        if sgl {
            r.expect("SGLs describe it");
            assert!(wait(&mut qp));
            assert_eq!(p.stats().sgl_commands, 1);
        } else {
            let e = r.expect_err("refused without SGLs");
            assert_eq!(
                e.kind,
                SubmitErrorKind::NotPrpDescribable {
                    index: 0,
                    iova: spans[0].iova(),
                    why: "ends inside a page (another span follows it)",
                }
            );
            let msg = e.to_string();
            assert!(msg.contains("no SGL support") && msg.contains("copy them into one buffer"));
            assert_eq!(p.stats().io(0x01), before, "nothing reached the device");
            assert_eq!(qp.outstanding(), 0);
        }
        // A later span starting inside a page.
        let late = spans_of(&ctrl, &buf, &[(0, 0x1000), (0x1008, 0x200)]);
        // SAFETY: as above.
        let r = unsafe { qp.readv(&ns, 0, 9, &late, 0) };
        if sgl {
            r.expect("SGLs describe it");
            assert!(wait(&mut qp));
        } else {
            let kind = r.expect_err("refused").kind;
            assert!(
                matches!(kind, SubmitErrorKind::NotPrpDescribable { index: 1, .. }),
                "{kind:?}"
            );
        }
        assert_eq!(p.iommu().fault_count(), 0);
    }
}

#[test]
fn a_split_at_mdts_walks_the_spans_per_command() {
    for sgl in [true, false] {
        let (p, ctrl) = up(sgl);
        let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
        let writes = p.stats().io(0x01);
        // 40 KiB over 5 pieces, 8 KiB per command: 5 commands, pieces crossing command edges.
        let layout = if sgl {
            vec![
                (1, 5000),
                (8000, 777),
                (12001, 20000),
                (40000, 3),
                (50000, 15180),
            ]
        } else {
            vec![
                (0x804, 0x7FC),
                (0x2000, 0x3000),
                (0x6000, 0x5000),
                (0xC000, 0x1000),
                (0xE000, 0x804),
            ]
        };
        assert_eq!(layout.iter().map(|l| l.1).sum::<usize>(), 40960);
        round_trip(&ctrl, &mut qp, 1000, 80, &layout, &[(64, 40960)]);
        assert_eq!(p.stats().io(0x01) - writes, 5, "split into 5 writes");
        assert_eq!(p.iommu().fault_count(), 0);
    }
}

#[test]
fn prefer_sgl_sends_every_read_and_write_with_sgls() {
    let (p, ctrl) = up(true);
    let options = QpairOptions {
        prefer_sgl: true,
        ..QpairOptions::default()
    };
    let mut qp = ctrl.alloc_qpair(options).unwrap();
    assert!(qp.prefers_sgl());
    let ns = ctrl.namespace(1).unwrap();
    for (blocks, lba) in [(1u32, 5u64), (16, 9), (40, 100)] {
        let bytes = blocks as usize * 512;
        let mut src = ctrl.dma().alloc(bytes).unwrap();
        fill(&mut src, blocks as u8);
        let want = src.as_slice().to_vec();
        qp.write_sync(&ns, lba, blocks, src).unwrap();
        let got = qp
            .read_sync(&ns, lba, blocks, ctrl.dma().alloc(bytes).unwrap())
            .unwrap();
        assert_eq!(got.as_slice(), &want[..]);
    }
    // 1 + 1, 1 + 1, 3 + 3 commands (8 KiB each), all with SGLs.
    assert_eq!(p.stats().sgl_commands, 10);
    // A PRP-describable list too.
    round_trip(&ctrl, &mut qp, 300, 8, &[(0, 4096)], &[(0, 4096)]);
    assert_eq!(
        p.stats().sgl_commands,
        10 + 3,
        "a write, a read and round_trip's plain read"
    );
    // Without SGL support the option is ignored.
    let (p, ctrl) = up(false);
    let mut qp = ctrl.alloc_qpair(options).unwrap();
    assert!(!qp.prefers_sgl());
    let ns = ctrl.namespace(1).unwrap();
    qp.read_sync(&ns, 0, 20, ctrl.dma().alloc(10240).unwrap())
        .unwrap();
    assert_eq!(p.stats().sgl_commands, 0);
}

#[test]
fn malformed_lists_are_refused_before_the_device() {
    let (p, ctrl) = up(true);
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let ns = ctrl.namespace(1).unwrap();
    let buf = ctrl.dma().alloc(64 << 10).unwrap();
    let kind = |spans: &[DmaSpan], blocks: u32| {
        // SAFETY: spans of `buf`; nothing is submitted when the request is refused.
        match unsafe { Request::borrowed_vectored(Op::Read, &ns, 0, blocks, spans, 0u64) } {
            Ok(_) => None,
            Err(e) => Some(e.kind),
        }
    };
    assert_eq!(
        kind(&[], 1),
        Some(SubmitErrorKind::BadSpanCount {
            count: 0,
            max: MAX_SPANS
        })
    );
    let many = spans_of(&ctrl, &buf, &vec![(0, 16); MAX_SPANS + 1]);
    assert_eq!(
        kind(&many, 1),
        Some(SubmitErrorKind::BadSpanCount {
            count: MAX_SPANS + 1,
            max: MAX_SPANS
        })
    );
    assert_eq!(
        kind(&many[..MAX_SPANS], 8),
        None,
        "256 spans of 16 bytes hold 8 blocks"
    );
    let empty = spans_of(&ctrl, &buf, &[(0, 512), (512, 0)]);
    assert!(matches!(
        kind(&empty, 1),
        Some(SubmitErrorKind::BadSpanCount { count: 2, .. })
    ));
    let short = spans_of(&ctrl, &buf, &[(0, 700), (1000, 300)]);
    assert_eq!(
        kind(&short, 2),
        Some(SubmitErrorKind::BufferTooSmall {
            needed: 1024,
            len: 1000
        })
    );
    // SAFETY: as above.
    let e = unsafe { qp.readv(&ns, 1 << 16, 1, &short, 0) }.unwrap_err();
    assert!(matches!(e.kind, SubmitErrorKind::LbaOutOfRange { .. }));
    // 256 spans of 16 bytes through the device, SGL segment full.
    let full = spans_of(
        &ctrl,
        &buf,
        &(0..MAX_SPANS).map(|i| (i * 17, 16)).collect::<Vec<_>>(),
    );
    // SAFETY: as above.
    unsafe { qp.readv(&ns, 0, 8, &full, 0) }.expect("submitted");
    assert!(wait(&mut qp));
    assert_eq!(p.stats().io(0x02), 1);
    assert_eq!(p.iommu().fault_count(), 0);
}
