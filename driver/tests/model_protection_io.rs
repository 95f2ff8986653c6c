//! End-to-end protection information through the driver on the model, which checks PI like a
//! controller (QEMU 7.2's rules): PRACT inserts and strips it; the guard the device wrote is the
//! CRC-16 T10-DIF of the data and the reference tag the LBA (type 1), as the host-side
//! `vfnvme_hal::pi` verifies; a block written with a wrong guard, application or reference tag
//! fails a checked read with 2h/82h, 83h or 84h at that block only; type 2 takes the caller's
//! reference tag, counting up across an MDTS split.

use std::sync::Arc;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::hal::pi::{self, PiExpected, PiLocation, PiType};
use vfnvme::hal::DmaBuffer;
use vfnvme::namespace::Namespace;
use vfnvme::queue::{Op, PiChecks, PiOptions, Request};
use vfnvme::spec::Status;
use vfnvme::{QpairOptions, QueuePair};
use vfnvme_model::{Backing, ModelConfig, ModelMetadata, ModelNamespaceConfig, ModelPlatform};

type Qp = QueuePair<ModelPlatform, u64>;

fn ns(nsid: u32, lba_size: u32) -> ModelNamespaceConfig {
    ModelNamespaceConfig {
        nsid,
        blocks: 1 << 16,
        lba_size,
        backing: Backing::Ram,
    }
}

/// nsid 1: 512+8 extended, type 1, PI last; 2: 4096+16 separate, type 1, PI first; 3: 512+8
/// extended, type 2; 4: 512+8 extended, type 3. MDTS 1 (8 KiB per command).
fn up() -> (Arc<ModelPlatform>, Controller<ModelPlatform>) {
    let md = |ms, ext, ty, loc| ModelMetadata::new(ms, ext).with_pi(ty, loc);
    let cfg = ModelConfig {
        namespaces: vec![ns(1, 512), ns(2, 4096), ns(3, 512), ns(4, 512)],
        namespace_metadata: vec![
            (1, md(8, true, PiType::Type1, PiLocation::Last)),
            (2, md(16, false, PiType::Type1, PiLocation::First)),
            (3, md(8, true, PiType::Type2, PiLocation::Last)),
            (4, md(8, true, PiType::Type3, PiLocation::Last)),
        ],
        mdts: 1,
        io_latency_ns: 0,
        admin_latency_ns: 0,
        ..ModelConfig::default()
    };
    let platform = ModelPlatform::new(cfg).expect("model config");
    let ctrl = Controller::new(platform.clone(), ControllerOptions::default()).expect("bring-up");
    (platform, ctrl)
}

fn run(qp: &mut Qp, req: Request<'_, u64>) -> (Status, DmaBuffer) {
    qp.submit(req).expect("submitted");
    let mut out = None;
    while out.is_none() {
        qp.poll(usize::MAX, |c| out = Some((c.status, c.buffer)));
    }
    let (status, buf) = out.unwrap();
    (status, buf.expect("the buffer comes back"))
}

#[allow(clippy::too_many_arguments)]
fn io(
    qp: &mut Qp,
    ns: &Namespace,
    op: Op,
    lba: u64,
    blocks: u32,
    buf: DmaBuffer,
    md: Option<usize>,
    pi: PiOptions,
) -> (Status, DmaBuffer) {
    let req = Request::with_metadata(op, ns, lba, blocks, buf, md, pi, 0).expect("a valid request");
    run(qp, req)
}

fn format_of(ns: &Namespace) -> pi::PiFormat {
    let id = ns.identity();
    let ty = match id.protection_type {
        1 => PiType::Type1,
        2 => PiType::Type2,
        _ => PiType::Type3,
    };
    let loc = if id.protection_first {
        PiLocation::First
    } else {
        PiLocation::Last
    };
    pi::PiFormat::new(
        ns.lba_size(),
        id.metadata_size,
        id.metadata_extended,
        Some((ty, loc)),
    )
    .unwrap()
}

fn fill(buf: &mut DmaBuffer, seed: u8) {
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(13).wrapping_add(seed);
    }
}

const ACT: PiOptions = PiOptions {
    act: true,
    check: PiChecks::ALL,
    app_tag: 0x1234,
    app_mask: 0xffff,
    ref_tag: None,
};
const RAW: PiOptions = PiOptions {
    act: false,
    check: PiChecks {
        guard: false,
        app: false,
        reference: false,
    },
    app_tag: 0,
    app_mask: 0,
    ref_tag: None,
};

#[test]
fn pract_inserts_the_pi_the_host_verifies_and_strips_it_on_read() {
    let (p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let ns = ctrl.namespace(1).unwrap();
    assert_eq!(ns.identity().format_label(), "512+8, PI type 1, last");
    // 20 blocks: with PRACT and 8 bytes of metadata only the data moves, 16 blocks per 8 KiB
    // command, so two commands, the second one's reference tag starting at LBA 316.
    let mut data = ctrl.dma().alloc(20 * 512).unwrap();
    fill(&mut data, 5);
    let sent = data.as_slice().to_vec();
    let before: u64 = p.stats().io_completed.values().sum();
    let (st, _) = io(&mut qp, &ns, Op::Write, 300, 20, data, None, ACT);
    assert!(st.is_success(), "{st:?}");
    let after: u64 = p.stats().io_completed.values().sum();
    assert_eq!(after - before, 2);
    // Read with the metadata: the device's PI is right by the host's reckoning.
    let (st, raw) = io(
        &mut qp,
        &ns,
        Op::Read,
        300,
        20,
        ctrl.dma().alloc(20 * 520).unwrap(),
        None,
        RAW,
    );
    assert!(st.is_success(), "{st:?}");
    let expected = PiExpected {
        app_tag: 0x1234,
        app_mask: 0xffff,
        ref_tag: 0,
    };
    pi::verify_extended(
        &format_of(&ns),
        raw.as_slice(),
        300,
        PiChecks::ALL,
        expected,
    )
    .expect("guard = CRC of the data, reference tag = LBA");
    for (b, chunk) in raw.as_slice().chunks(520).enumerate() {
        assert_eq!(&chunk[..512], &sent[b * 512..(b + 1) * 512]);
    }
    // PRACT on read: checked and stripped.
    let (st, back) = io(
        &mut qp,
        &ns,
        Op::Read,
        300,
        20,
        ctrl.dma().alloc(20 * 512).unwrap(),
        None,
        ACT,
    );
    assert!(st.is_success(), "{st:?}");
    assert_eq!(back.as_slice(), &sent[..]);
    assert_eq!(p.iommu().fault_count(), 0);
}

/// Writes 4 blocks at `lba` of extended namespace `ns` with host-made PI, block 2's tuple then
/// spoiled by `spoil`; a read checking `check` fails with `sc` (SCT 2); the other blocks read.
fn spoiled_block_fails_its_check(nsid: u32, spoil: fn(&mut [u8]), check: PiChecks, sc: u8) {
    let (_p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let ns = ctrl.namespace(nsid).unwrap();
    let lba = 1000;
    let mut buf = ctrl.dma().alloc(4 * 520).unwrap();
    fill(&mut buf, 9);
    pi::generate_extended(&format_of(&ns), buf.as_mut_slice(), lba, 0x0042, 7).unwrap();
    spoil(&mut buf.as_mut_slice()[2 * 520 + 512..3 * 520]);
    let (st, _) = io(&mut qp, &ns, Op::Write, lba, 4, buf, None, RAW);
    assert!(st.is_success(), "unchecked write: {st:?}");
    let checked = PiOptions {
        check,
        app_tag: 0x0042,
        app_mask: 0xffff,
        ref_tag: (ns.identity().protection_type == 2).then_some(7),
        ..RAW
    };
    let read = |qp: &mut Qp, at: u64, n: u32| {
        let buf = ctrl.dma().alloc(n as usize * 520).unwrap();
        let mut pi = checked;
        if pi.ref_tag.is_some() {
            pi.ref_tag = Some(7 + (at - lba) as u32);
        }
        io(qp, &ns, Op::Read, at, n, buf, None, pi).0
    };
    let st = read(&mut qp, lba, 4);
    assert_eq!((st.sct(), st.sc()), (2, sc), "{st:?}");
    assert!(read(&mut qp, lba, 2).is_success(), "blocks 0 and 1");
    assert!(read(&mut qp, lba + 3, 1).is_success(), "block 3");
    let st = read(&mut qp, lba + 2, 1);
    assert_eq!((st.sct(), st.sc()), (2, sc), "block 2 alone");
}

#[test]
fn a_wrong_guard_fails_a_guard_checked_read_with_82h_at_that_block() {
    let only_guard = PiChecks {
        guard: true,
        app: false,
        reference: false,
    };
    spoiled_block_fails_its_check(1, |t| t[0] ^= 0x01, only_guard, 0x82);
}

#[test]
fn a_wrong_application_tag_fails_with_83h() {
    let only_app = PiChecks {
        guard: false,
        app: true,
        reference: false,
    };
    spoiled_block_fails_its_check(1, |t| t[2] ^= 0x10, only_app, 0x83);
}

#[test]
fn a_wrong_reference_tag_fails_with_84h_for_types_1_and_2() {
    let only_ref = PiChecks {
        guard: false,
        app: false,
        reference: true,
    };
    spoiled_block_fails_its_check(1, |t| t[7] ^= 0x01, only_ref, 0x84);
    spoiled_block_fails_its_check(3, |t| t[7] ^= 0x01, only_ref, 0x84);
}

#[test]
fn separate_metadata_with_pi_first_round_trips_across_a_split() {
    let (_p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let ns = ctrl.namespace(2).unwrap();
    assert_eq!(
        ns.identity().format_label(),
        "4096+16 separate, PI type 1, first"
    );
    let blocks = 5u32;
    let data = blocks as usize * 4096;
    let mut buf = ctrl.dma().alloc(data + blocks as usize * 16).unwrap();
    fill(&mut buf, 1);
    // Host-made PI (PRACT 0), checked by the device on the write.
    {
        let (d, m) = buf.as_mut_slice().split_at_mut(data);
        pi::generate_separate(&format_of(&ns), d, m, 40, 0x7, 0).unwrap();
    }
    let sent = buf.as_slice().to_vec();
    let checked = PiOptions {
        check: PiChecks::ALL,
        app_tag: 0x7,
        app_mask: 0xffff,
        ..RAW
    };
    let (st, mut buf) = io(
        &mut qp,
        &ns,
        Op::Write,
        40,
        blocks,
        buf,
        Some(data),
        checked,
    );
    assert!(st.is_success(), "{st:?}");
    buf.as_mut_slice().fill(0);
    let (st, back) = io(&mut qp, &ns, Op::Read, 40, blocks, buf, Some(data), checked);
    assert!(st.is_success(), "{st:?}");
    assert_eq!(back.as_slice(), &sent[..]);
}

#[test]
fn type_3_reads_without_a_reference_check_and_refuses_one() {
    let (_p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let ns = ctrl.namespace(4).unwrap();
    let buf = ctrl.dma().alloc(520).unwrap();
    let e = Request::<u64>::with_metadata(Op::Read, &ns, 0, 1, buf, None, ACT, 0).unwrap_err();
    assert!(
        e.kind.to_string().contains("type 3"),
        "the reference check is refused for type 3: {}",
        e.kind
    );
    let act = PiOptions {
        check: PiChecks {
            reference: false,
            ..PiChecks::ALL
        },
        ..ACT
    };
    let mut data = ctrl.dma().alloc(3 * 512).unwrap();
    fill(&mut data, 2);
    let sent = data.as_slice().to_vec();
    let (st, data) = io(&mut qp, &ns, Op::Write, 8, 3, data, None, act);
    assert!(st.is_success(), "{st:?}");
    let (st, back) = io(&mut qp, &ns, Op::Read, 8, 3, data, None, act);
    assert!(st.is_success(), "{st:?}");
    assert_eq!(back.as_slice(), &sent[..]);
}
