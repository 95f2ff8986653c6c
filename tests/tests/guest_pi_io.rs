//! Scenario `pi`: reads and writes with metadata and protection information on QEMU's NVMe
//! device, through the driver (`Request::with_metadata`), on every namespace of the scenario
//! (metadata of 8, 16 and 64 bytes, extended and separate, PI types 1, 2 and 3 first and last,
//! metadata without PI):
//! - PRACT=0: the host generates the PI (`vfnvme::hal::pi`), the device checks it on the write
//!   and on the read, and data and metadata read back byte for byte; the host verifies the PI
//!   it reads;
//! - PRACT=1: the device inserts the PI (the host's other metadata bytes kept when the
//!   metadata is larger than 8 bytes), the data reads back through PRACT, and a raw read
//!   (PRACT=0) shows the PI the device made correct by the host's reckoning;
//! - requests large enough to be split at MDTS (MPTR and the reference tag advance per command);
//! - and no IOMMU fault in the guest's kernel log meanwhile.

use vfnvme::hal::pi::{self, PiExpected};
use vfnvme::queue::{Op, PiChecks, PiOptions};
use vfnvme::Namespace;
use vfnvme_tests::guest;
use vfnvme_tests::guest_io::{self, assert_same, Ctrl, Qpair};
use vfnvme_tests::guest_metadata::{
    all_checks, assert_no_new_dmar_faults, buffer, data_and_md, dmar_faults, expected_metadata,
    layout, md_io, pi_format,
};

/// The application tag of these tests' PI (not FFFFh, which disables the checks).
const APP: u16 = 0x5a17;

/// The reference tag a request at `lba` carries: the LBA for types 1 and 3 (the driver's
/// default), a value of the test's own for type 2.
fn ref_tag(ns: &Namespace, lba: u64) -> Option<u32> {
    (ns.identity().protection_type == 2).then_some(0x7000_0000 | lba as u32)
}

fn checked(ns: &Namespace, act: bool, lba: u64) -> PiOptions {
    let pi = ns.identity().protection_type != 0;
    PiOptions {
        act,
        check: if pi {
            all_checks(ns)
        } else {
            PiChecks::default()
        },
        app_tag: if pi { APP } else { 0 },
        app_mask: if pi { 0xffff } else { 0 },
        ref_tag: ref_tag(ns, lba),
    }
}

/// PRACT=0: host-made PI, checked by the device both ways; data and metadata read back exactly.
fn host_pi_round_trip(ctrl: &Ctrl, qp: &mut Qpair, ns: &Namespace, lba: u64, blocks: u32) {
    let what = format!("ns {} PRACT=0 LBA {lba} +{blocks}", ns.nsid());
    let opts = checked(ns, false, lba);
    let (len, md_off) = layout(ns, blocks, &opts);
    let mut buf = buffer(ctrl, len, 0);
    guest_io::Prng::new(u64::from(ns.nsid()) << 40 | lba).fill(buf.as_mut_slice());
    let format = pi_format(ns);
    if format.pi.is_some() {
        let first_ref = opts.ref_tag.unwrap_or(0);
        let s = buf.as_mut_slice();
        match md_off {
            Some(off) => {
                let (d, m) = s.split_at_mut(off);
                pi::generate_separate(&format, d, m, lba, APP, first_ref)
            }
            None => pi::generate_extended(&format, s, lba, APP, first_ref),
        }
        .unwrap_or_else(|e| panic!("{what}: generating PI: {e}"));
    }
    let sent = buf.as_slice().to_vec();
    let (st, _) = md_io(qp, ns, Op::Write, lba, blocks, buf, md_off, opts);
    assert!(st.is_success(), "{what}: write: {st:?}");
    let back = buffer(ctrl, len, 0xa5);
    let (st, back) = md_io(qp, ns, Op::Read, lba, blocks, back, md_off, opts);
    assert!(st.is_success(), "{what}: read: {st:?}");
    assert_same(&sent, back.as_slice(), ns.lba_size(), &what);
    if format.pi.is_some() {
        let (d, m) = data_and_md(ns, back.as_slice(), blocks, md_off);
        let expected = PiExpected {
            app_tag: APP,
            app_mask: 0xffff,
            ref_tag: opts.ref_tag.unwrap_or(0),
        };
        pi::verify_separate(&format_separate(ns), &d, &m, lba, all_checks(ns), expected)
            .unwrap_or_else(|e| panic!("{what}: host check of what was read: {e}"));
    }
}

/// The namespace's format with separate metadata (for checking data and metadata already
/// split apart).
fn format_separate(ns: &Namespace) -> pi::PiFormat {
    pi::PiFormat {
        extended: false,
        ..pi_format(ns)
    }
}

/// PRACT=1: the device inserts the PI; the data reads back through PRACT; the metadata the
/// host sent (beyond the PI) is kept; a raw read shows correct PI.
fn device_pi_round_trip(ctrl: &Ctrl, qp: &mut Qpair, ns: &Namespace, lba: u64, blocks: u32) {
    let what = format!("ns {} PRACT=1 LBA {lba} +{blocks}", ns.nsid());
    let opts = checked(ns, true, lba);
    let (len, md_off) = layout(ns, blocks, &opts);
    let mut buf = buffer(ctrl, len, 0);
    guest_io::Prng::new(u64::from(ns.nsid()) << 44 | lba).fill(buf.as_mut_slice());
    let sent = buf.as_slice().to_vec();
    let (st, _) = md_io(qp, ns, Op::Write, lba, blocks, buf, md_off, opts);
    assert!(st.is_success(), "{what}: write: {st:?}");
    let back = buffer(ctrl, len, 0xa5);
    let (st, back) = md_io(qp, ns, Op::Read, lba, blocks, back, md_off, opts);
    assert!(st.is_success(), "{what}: read: {st:?}");
    let (sent_d, sent_m) = data_and_md(ns, &sent, blocks, md_off);
    let (got_d, got_m) = data_and_md(ns, back.as_slice(), blocks, md_off);
    assert_same(&sent_d, &got_d, ns.lba_size(), &format!("{what}: data"));
    // Raw read (PRACT=0, no checks): data and whole metadata.
    let raw_opts = PiOptions {
        ref_tag: opts.ref_tag,
        ..PiOptions::default()
    };
    let (len, raw_off) = layout(ns, blocks, &raw_opts);
    let raw = buffer(ctrl, len, 0xa5);
    let (st, raw) = md_io(qp, ns, Op::Read, lba, blocks, raw, raw_off, raw_opts);
    assert!(st.is_success(), "{what}: raw read: {st:?}");
    let (raw_d, raw_m) = data_and_md(ns, raw.as_slice(), blocks, raw_off);
    assert_same(&sent_d, &raw_d, ns.lba_size(), &format!("{what}: raw data"));
    let format = format_separate(ns);
    let expected = PiExpected {
        app_tag: APP,
        app_mask: 0xffff,
        ref_tag: opts.ref_tag.unwrap_or(lba as u32),
    };
    pi::verify_separate(&format, &raw_d, &raw_m, lba, all_checks(ns), expected)
        .unwrap_or_else(|e| panic!("{what}: the PI the device inserted: {e}"));
    let ms = usize::from(ns.identity().metadata_size);
    if ms > pi::PI_BYTES {
        // The host's metadata moved; the device overwrote only the PI part of it.
        let at = format.pi_offset();
        for b in 0..blocks as usize {
            let (s, r) = (&sent_m[b * ms..(b + 1) * ms], &raw_m[b * ms..(b + 1) * ms]);
            let keep = |m: &[u8]| [&m[..at], &m[at + pi::PI_BYTES..]].concat();
            assert_eq!(
                keep(s),
                keep(r),
                "{what}: block {b}'s metadata besides the PI"
            );
            // The metadata read through PRACT is the stored one (checked, not stripped).
            assert_eq!(&got_m[b * ms..(b + 1) * ms], r, "{what}: block {b}");
        }
    }
}

/// Metadata without PI: data and metadata round-trip exactly.
fn plain_metadata_round_trip(ctrl: &Ctrl, qp: &mut Qpair, ns: &Namespace, lba: u64, blocks: u32) {
    host_pi_round_trip(ctrl, qp, ns, lba, blocks);
}

#[test]
fn every_format_round_trips_with_pract_on_and_off() {
    if !guest::in_guest("guest_pi_io::every_format_round_trips_with_pract_on_and_off") {
        return;
    }
    let faults_before = dmar_faults();
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let mut qp = guest_io::qpair(&ctrl, 64);
    let expected = expected_metadata();
    assert_eq!(expected.len(), 7, "the scenario's metadata namespaces");
    for (nsid, md) in expected {
        let ns = guest_io::namespace(&ctrl, nsid);
        assert_eq!(ns.identity().metadata_format(), md, "ns {nsid}'s format");
        // One block, a few, and one request large enough for several commands (MDTS 512 KiB).
        let big = (640u64 << 10) / u64::from(ns.lba_size());
        let last = ns.blocks() - 9;
        for (lba, blocks) in [(1u64, 1u32), (37, 5), (last, 9), (200, big as u32)] {
            if md.protection_type == 0 {
                plain_metadata_round_trip(&ctrl, &mut qp, &ns, lba, blocks);
                continue;
            }
            host_pi_round_trip(&ctrl, &mut qp, &ns, lba, blocks);
            device_pi_round_trip(&ctrl, &mut qp, &ns, lba, blocks);
        }
        eprintln!(
            "ns {nsid} ({}): round trips OK",
            ns.identity().format_label()
        );
    }
    drop(qp);
    drop(ctrl);
    assert_no_new_dmar_faults(&faults_before);
}
