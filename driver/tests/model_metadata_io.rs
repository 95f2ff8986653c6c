//! Reads and writes with metadata on the model (`Request::with_metadata`,
//! `Request::borrowed_with_metadata`): extended LBAs and separate metadata round-trip data and
//! metadata byte for byte, also when MDTS splits the request (MPTR and the reference tag
//! advance per command); every malformed request is refused with a typed error before a
//! command reaches the controller.

use std::sync::Arc;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::hal::DmaBuffer;
use vfnvme::queue::{Op, PiChecks, PiOptions, Request};
use vfnvme::{QpairOptions, QueuePair, SubmitErrorKind};
use vfnvme_model::{Backing, ModelConfig, ModelMetadata, ModelNamespaceConfig, ModelPlatform};

const EXTENDED: ModelMetadata = ModelMetadata {
    ms: 8,
    extended: true,
    pi: 0,
};
const SEPARATE: ModelMetadata = ModelMetadata {
    ms: 16,
    extended: false,
    pi: 0,
};
const PI1: ModelMetadata = ModelMetadata {
    ms: 8,
    extended: true,
    pi: 1,
};

fn ns(nsid: u32, lba_size: u32) -> ModelNamespaceConfig {
    ModelNamespaceConfig {
        nsid,
        blocks: 1 << 16,
        lba_size,
        backing: Backing::Ram,
    }
}

/// nsid 1: plain 512; 2: 512+8 extended; 3: 4096+16 separate; 4: 512+8 extended, PI type 1.
/// MDTS 1: 8 KiB per command, so that requests of a few blocks split.
fn up() -> (Arc<ModelPlatform>, Controller<ModelPlatform>) {
    let cfg = ModelConfig {
        namespaces: vec![ns(1, 512), ns(2, 512), ns(3, 4096), ns(4, 512)],
        namespace_metadata: vec![(2, EXTENDED), (3, SEPARATE), (4, PI1)],
        mdts: 1,
        io_latency_ns: 0,
        admin_latency_ns: 0,
        ..ModelConfig::default()
    };
    let platform = ModelPlatform::new(cfg).expect("model config");
    let ctrl = Controller::new(platform.clone(), ControllerOptions::default()).expect("bring-up");
    (platform, ctrl)
}

fn io_commands(p: &ModelPlatform) -> u64 {
    p.stats().io_completed.values().sum()
}

/// Submits `req` and polls until it completes: its status and buffer.
fn run(qp: &mut QueuePair<ModelPlatform, u64>, req: Request<'_, u64>) -> (bool, DmaBuffer) {
    qp.submit(req).expect("submitted");
    let mut out = None;
    while out.is_none() {
        qp.poll(usize::MAX, |c| out = Some((c.is_ok(), c.buffer)));
    }
    let (ok, buf) = out.unwrap();
    (ok, buf.expect("the buffer comes back"))
}

fn pattern(buf: &mut DmaBuffer, seed: u8) {
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

#[test]
fn extended_lbas_round_trip_data_and_metadata_across_a_split() {
    let (p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let ns = ctrl.namespace(2).unwrap();
    // 40 blocks of 520 bytes: 15 per 8 KiB command, so three commands.
    let blocks = 40u32;
    let mut buf = ctrl.dma().alloc(blocks as usize * 520).unwrap();
    pattern(&mut buf, 7);
    let sent = buf.as_slice().to_vec();
    let before = io_commands(&p);
    let req = Request::with_metadata(
        Op::Write,
        &ns,
        100,
        blocks,
        buf,
        None,
        PiOptions::default(),
        1,
    )
    .unwrap();
    let (ok, buf) = run(&mut qp, req);
    assert!(ok);
    assert_eq!(
        io_commands(&p) - before,
        3,
        "split at MDTS counting metadata"
    );
    let mut back = buf;
    back.as_mut_slice().fill(0);
    let req = Request::with_metadata(
        Op::Read,
        &ns,
        100,
        blocks,
        back,
        None,
        PiOptions::default(),
        2,
    )
    .unwrap();
    let (ok, back) = run(&mut qp, req);
    assert!(ok);
    assert_eq!(
        back.as_slice(),
        &sent[..],
        "data and metadata, byte for byte"
    );
    assert_eq!(p.iommu().fault_count(), 0);
}

#[test]
fn separate_metadata_in_the_same_buffer_round_trips_and_mptr_advances_per_command() {
    let (p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let ns = ctrl.namespace(3).unwrap();
    // 7 blocks of 4096 + 16: two blocks per 8 KiB command, four commands.
    let blocks = 7u32;
    let data = blocks as usize * 4096;
    let md = blocks as usize * 16;
    let mut buf = ctrl.dma().alloc(data + md).unwrap();
    pattern(&mut buf, 3);
    let sent = buf.as_slice().to_vec();
    let before = io_commands(&p);
    let write = Request::with_metadata(
        Op::Write,
        &ns,
        9,
        blocks,
        buf,
        Some(data),
        PiOptions::default(),
        1,
    )
    .unwrap();
    assert_ne!(write.protection().mptr(), 0);
    let (ok, mut buf) = run(&mut qp, write);
    assert!(ok);
    assert_eq!(io_commands(&p) - before, 4);
    buf.as_mut_slice().fill(0);
    let read = Request::with_metadata(
        Op::Read,
        &ns,
        9,
        blocks,
        buf,
        Some(data),
        PiOptions::default(),
        2,
    )
    .unwrap();
    let (ok, back) = run(&mut qp, read);
    assert!(ok);
    assert_eq!(&back.as_slice()[..data], &sent[..data], "data");
    assert_eq!(&back.as_slice()[data..], &sent[data..], "metadata");
    // The metadata of block 11 alone, read back by a one-block request: it was written by the
    // second command of the split, so MPTR advanced by 2 * 16 bytes per command.
    let mut one = ctrl.dma().alloc(4096 + 16).unwrap();
    one.as_mut_slice().fill(0);
    let req = Request::with_metadata(
        Op::Read,
        &ns,
        11,
        1,
        one,
        Some(4096),
        PiOptions::default(),
        3,
    )
    .unwrap();
    let (ok, one) = run(&mut qp, req);
    assert!(ok);
    assert_eq!(&one.as_slice()[4096..], &sent[data + 2 * 16..data + 3 * 16]);
    assert_eq!(&one.as_slice()[..4096], &sent[2 * 4096..3 * 4096]);
    assert_eq!(p.iommu().fault_count(), 0);
}

#[test]
fn borrowed_spans_carry_data_and_metadata() {
    let (_p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let ns = ctrl.namespace(3).unwrap();
    let mut data = ctrl.dma().alloc(2 * 4096).unwrap();
    let mut md = ctrl.dma().alloc(32).unwrap();
    pattern(&mut data, 1);
    pattern(&mut md, 2);
    let (sent_data, sent_md) = (data.as_slice().to_vec(), md.as_slice().to_vec());
    let submit = |qp: &mut QueuePair<ModelPlatform, u64>, op, d: &DmaBuffer, m: &DmaBuffer| {
        // SAFETY: both buffers are this controller's DMA memory, kept alive and untouched
        // until the completion is polled below.
        let req = unsafe {
            Request::borrowed_with_metadata(
                op,
                &ns,
                0,
                2,
                d.span(),
                Some(m.span()),
                PiOptions::default(),
                0,
            )
        }
        .unwrap();
        qp.submit(req).unwrap();
        let mut ok = None;
        while ok.is_none() {
            qp.poll(usize::MAX, |c| ok = Some(c.is_ok()));
        }
        assert_eq!(ok, Some(true));
    };
    submit(&mut qp, Op::Write, &data, &md);
    data.as_mut_slice().fill(0);
    md.as_mut_slice().fill(0);
    submit(&mut qp, Op::Read, &data, &md);
    assert_eq!(data.as_slice(), &sent_data[..]);
    assert_eq!(md.as_slice(), &sent_md[..]);
}

#[test]
fn malformed_requests_are_refused_before_the_device_sees_them() {
    let (p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let before = io_commands(&p);
    let (plain, ext, sep, pi) = (
        ctrl.namespace(1).unwrap(),
        ctrl.namespace(2).unwrap(),
        ctrl.namespace(3).unwrap(),
        ctrl.namespace(4).unwrap(),
    );
    let refuse = |ns: &vfnvme::namespace::Namespace,
                  op: Op,
                  blocks: u32,
                  len: usize,
                  md_off: Option<usize>,
                  pi: PiOptions|
     -> SubmitErrorKind {
        let buf = ctrl.dma().alloc(len).unwrap();
        let e = Request::<u64>::with_metadata(op, ns, 0, blocks, buf, md_off, pi, 0).unwrap_err();
        assert!(e.buffer.is_some(), "the buffer comes back");
        e.kind
    };
    let none = PiOptions::default();
    let invalid = |k: SubmitErrorKind| matches!(k, SubmitErrorKind::InvalidRequest { .. });
    let md_buf = |k: SubmitErrorKind| matches!(k, SubmitErrorKind::MetadataBuffer { .. });
    // A plain format takes plain requests.
    assert!(invalid(refuse(&plain, Op::Read, 1, 512, None, none)));
    // Extended: the data holds blocks * (512 + 8).
    assert!(matches!(
        refuse(&ext, Op::Read, 2, 1024, None, none),
        SubmitErrorKind::BufferTooSmall { needed: 1040, .. }
    ));
    assert!(invalid(refuse(&ext, Op::Read, 1, 4096, Some(1024), none)));
    // Separate: metadata needed, long enough, after the data, 4-byte aligned.
    assert!(md_buf(refuse(&sep, Op::Read, 1, 8192, None, none)));
    assert!(md_buf(refuse(
        &sep,
        Op::Read,
        1,
        4096 + 8,
        Some(4096),
        none
    )));
    assert!(md_buf(refuse(&sep, Op::Read, 1, 8192, Some(100), none)));
    assert!(md_buf(refuse(&sep, Op::Read, 1, 8192, Some(4098), none)));
    assert!(md_buf(refuse(&sep, Op::Read, 1, 8192, Some(9000), none)));
    // Range, zero blocks, operations without data.
    assert!(matches!(
        refuse(&sep, Op::Read, 0, 8192, Some(4096), none),
        SubmitErrorKind::ZeroBlocks
    ));
    let buf = ctrl.dma().alloc(8192).unwrap();
    let e = Request::<u64>::with_metadata(Op::Read, &sep, 1 << 16, 1, buf, Some(4096), none, 0)
        .unwrap_err();
    assert!(matches!(e.kind, SubmitErrorKind::LbaOutOfRange { .. }));
    assert!(invalid(refuse(&sep, Op::Flush, 1, 8192, Some(4096), none)));
    // PI options need a PI format; type 1's reference tag is the LBA.
    let act = PiOptions {
        act: true,
        ..PiOptions::default()
    };
    assert!(invalid(refuse(&ext, Op::Write, 1, 520, None, act)));
    let wrong_ref = PiOptions {
        check: PiChecks::ALL,
        ref_tag: Some(5),
        ..PiOptions::default()
    };
    assert!(invalid(refuse(&pi, Op::Read, 1, 520, None, wrong_ref)));
    // PRACT with 8 bytes of PI: no metadata moves, so the data is 512 bytes a block and a
    // metadata buffer is refused.
    let ok = Request::<u64>::with_metadata(
        Op::Write,
        &pi,
        0,
        1,
        ctrl.dma().alloc(512).unwrap(),
        None,
        act,
        0,
    )
    .unwrap();
    assert_eq!(ok.protection().prinfo(), 0b1000);
    assert!(invalid(refuse(&pi, Op::Write, 1, 4096, Some(512), act)));
    // Plain requests on a metadata format say what to use instead.
    let e = qp
        .read(&sep, 0, 1, ctrl.dma().alloc(4096).unwrap(), 0)
        .unwrap_err();
    let msg = e.kind.to_string();
    assert!(
        msg.contains("with_metadata") && msg.contains("vfnvme format"),
        "{msg}"
    );
    qp.commit();
    assert_eq!(qp.poll(usize::MAX, |_| {}), 0);
    assert_eq!(io_commands(&p), before, "no command reached the model");
}
