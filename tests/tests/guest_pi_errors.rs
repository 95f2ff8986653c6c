//! Scenario `pi`: injected protection information errors on QEMU's NVMe device. Four blocks
//! are written with host-made PI (PRACT=0, no checks), block 2's guard, application tag or
//! reference tag spoiled; a read of the four checking only that field fails with SCT 2h and
//! SC 82h, 83h or 84h; reads of blocks 0-1 and of block 3 succeed, and block 2 alone fails: the
//! error is at that LBA and only there. On each PI type, extended and separate, PI first and
//! last (type 3 has no reference tag to check).

use vfnvme::hal::pi;
use vfnvme::queue::{Op, PiChecks, PiOptions};
use vfnvme::Namespace;
use vfnvme_tests::guest;
use vfnvme_tests::guest_io::{self, Ctrl, Qpair};
use vfnvme_tests::guest_metadata::{
    assert_no_new_dmar_faults, buffer, dmar_faults, expected_metadata, layout, md_io, pi_format,
};

const APP: u16 = 0x0042;
const LBA: u64 = 1000;

/// Which field of block 2's PI is spoiled, the check that finds it, and its status code.
#[derive(Clone, Copy, Debug)]
enum Spoil {
    Guard,
    App,
    Ref,
}

impl Spoil {
    /// The byte of the 8-byte tuple flipped.
    fn byte(self) -> usize {
        match self {
            Spoil::Guard => 0,
            Spoil::App => 2,
            Spoil::Ref => 7,
        }
    }
    fn check(self) -> PiChecks {
        PiChecks {
            guard: matches!(self, Spoil::Guard),
            app: matches!(self, Spoil::App),
            reference: matches!(self, Spoil::Ref),
        }
    }
    fn sc(self) -> u8 {
        match self {
            Spoil::Guard => 0x82,
            Spoil::App => 0x83,
            Spoil::Ref => 0x84,
        }
    }
}

/// Type 2's reference tag of the test's first block (types 1 and 3: the LBA).
fn first_ref(ns: &Namespace) -> Option<u32> {
    (ns.identity().protection_type == 2).then_some(0x4000)
}

fn spoiled_block_fails_only_there(ctrl: &Ctrl, qp: &mut Qpair, ns: &Namespace, spoil: Spoil) {
    let what = format!("ns {} {spoil:?}", ns.nsid());
    let raw = PiOptions {
        ref_tag: first_ref(ns),
        ..PiOptions::default()
    };
    let (len, md_off) = layout(ns, 4, &raw);
    let mut buf = buffer(ctrl, len, 0);
    guest_io::Prng::new(0xe770 ^ u64::from(ns.nsid())).fill(buf.as_mut_slice());
    let format = pi_format(ns);
    let bs = ns.lba_size() as usize;
    let ms = usize::from(format.ms);
    let tuple_at = match md_off {
        Some(off) => off + 2 * ms + format.pi_offset(),
        None => 2 * (bs + ms) + bs + format.pi_offset(),
    };
    {
        let s = buf.as_mut_slice();
        let r = raw.ref_tag.unwrap_or(0);
        match md_off {
            Some(off) => {
                let (d, m) = s.split_at_mut(off);
                pi::generate_separate(&format, d, m, LBA, APP, r)
            }
            None => pi::generate_extended(&format, s, LBA, APP, r),
        }
        .expect("generating PI");
        s[tuple_at + spoil.byte()] ^= 0x01;
    }
    let (st, _) = md_io(qp, ns, Op::Write, LBA, 4, buf, md_off, raw);
    assert!(st.is_success(), "{what}: unchecked write: {st:?}");
    let read = |qp: &mut Qpair, at: u64, n: u32| {
        let opts = PiOptions {
            check: spoil.check(),
            app_tag: APP,
            app_mask: 0xffff,
            ref_tag: first_ref(ns).map(|r| r + (at - LBA) as u32),
            ..PiOptions::default()
        };
        let (len, off) = layout(ns, n, &opts);
        md_io(qp, ns, Op::Read, at, n, buffer(ctrl, len, 0), off, opts).0
    };
    let st = read(qp, LBA, 4);
    assert_eq!(
        (st.sct(), st.sc()),
        (2, spoil.sc()),
        "{what}: checked read of the 4 blocks: {st:?}"
    );
    assert!(!st.dnr(), "{what}: QEMU sets no DNR on check failures");
    let st = read(qp, LBA, 2);
    assert!(st.is_success(), "{what}: blocks 0 and 1: {st:?}");
    let st = read(qp, LBA + 3, 1);
    assert!(st.is_success(), "{what}: block 3: {st:?}");
    let st = read(qp, LBA + 2, 1);
    assert_eq!(
        (st.sct(), st.sc()),
        (2, spoil.sc()),
        "{what}: block 2 alone"
    );
    // The same blocks read without that check: fine (the error is in the PI, not the data).
    let opts = PiOptions {
        ref_tag: first_ref(ns),
        ..PiOptions::default()
    };
    let (len, off) = layout(ns, 4, &opts);
    let (st, _) = md_io(qp, ns, Op::Read, LBA, 4, buffer(ctrl, len, 0), off, opts);
    assert!(st.is_success(), "{what}: unchecked read: {st:?}");
}

#[test]
fn a_spoiled_field_fails_its_check_at_that_block_only() {
    if !guest::in_guest("guest_pi_errors::a_spoiled_field_fails_its_check_at_that_block_only") {
        return;
    }
    let faults_before = dmar_faults();
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let mut qp = guest_io::qpair(&ctrl, 16);
    let mut tried = 0;
    for (nsid, md) in expected_metadata() {
        if md.protection_type == 0 {
            continue;
        }
        let ns = guest_io::namespace(&ctrl, nsid);
        let mut kinds = vec![Spoil::Guard, Spoil::App];
        if md.protection_type != 3 {
            kinds.push(Spoil::Ref);
        }
        for spoil in kinds {
            spoiled_block_fails_only_there(&ctrl, &mut qp, &ns, spoil);
            tried += 1;
        }
        eprintln!(
            "ns {nsid} ({}): injected errors OK",
            ns.identity().format_label()
        );
    }
    assert_eq!(
        tried,
        4 * 3 + 2 * 2,
        "types 1 and 2 on 4 namespaces, type 3 on 2"
    );
    drop(qp);
    drop(ctrl);
    assert_no_new_dmar_faults(&faults_before);
}
