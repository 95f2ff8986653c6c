//! Scenario `pi`: what QEMU stored, byte for byte. After writes at known LBAs of every namespace
//! the test reads the namespace's image file (`$VFNVME_IMAGE_DIR`, shared read-only with the
//! guest), where QEMU keeps all data first and all metadata after it, whatever the host's
//! buffer layout (LBA n's data at `n * lba_size`, its metadata at `nsze * lba_size + n * ms`):
//! - PRACT=0: data and metadata exactly as the host sent them, extended buffers de-interleaved;
//! - PRACT=1: the data as sent, and PI the device made: the guard the CRC-16 T10-DIF of the data
//!   (and of the metadata before the PI when it is last), the application tag given, the
//!   reference tag the LBA for type 1 (the command's, counting up, for type 2).

use vfnvme::hal::pi::{self, Pi, PiExpected};
use vfnvme::queue::{Op, PiChecks, PiOptions};
use vfnvme::Namespace;
use vfnvme_tests::guest;
use vfnvme_tests::guest_io::{self, assert_same, Ctrl, Qpair};
use vfnvme_tests::guest_metadata::{
    all_checks, assert_no_new_dmar_faults, buffer, data_and_md, dmar_faults, expected_metadata,
    image_blocks, layout, md_io, pi_format,
};

const APP: u16 = 0x1e5a;

/// Writes `blocks` blocks at `lba` with `opts` (host PI generated when PRACT is off and the
/// format has PI): the data and metadata sent, de-interleaved.
fn write(
    ctrl: &Ctrl,
    qp: &mut Qpair,
    ns: &Namespace,
    lba: u64,
    blocks: u32,
    opts: PiOptions,
) -> (Vec<u8>, Vec<u8>) {
    let (len, md_off) = layout(ns, blocks, &opts);
    let mut buf = buffer(ctrl, len, 0);
    guest_io::Prng::new(0x1a6e_0000 ^ u64::from(ns.nsid()) << 32 ^ lba).fill(buf.as_mut_slice());
    let format = pi_format(ns);
    if !opts.act && format.pi.is_some() {
        let r = opts.ref_tag.unwrap_or(0);
        let s = buf.as_mut_slice();
        match md_off {
            Some(off) => {
                let (d, m) = s.split_at_mut(off);
                pi::generate_separate(&format, d, m, lba, APP, r)
            }
            None => pi::generate_extended(&format, s, lba, APP, r),
        }
        .expect("generating PI");
    }
    let sent = data_and_md(ns, buf.as_slice(), blocks, md_off);
    let (st, _) = md_io(qp, ns, Op::Write, lba, blocks, buf, md_off, opts);
    assert!(
        st.is_success(),
        "ns {} write at LBA {lba}: {st:?}",
        ns.nsid()
    );
    sent
}

#[test]
fn the_image_holds_data_then_metadata_with_correct_pi() {
    if !guest::in_guest("guest_pi_image::the_image_holds_data_then_metadata_with_correct_pi") {
        return;
    }
    let faults_before = dmar_faults();
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let mut qp = guest_io::qpair(&ctrl, 16);
    for (nsid, md) in expected_metadata() {
        let ns = guest_io::namespace(&ctrl, nsid);
        let ms = usize::from(md.size);
        let has_pi = md.protection_type != 0;
        let ref_for = |lba: u64| (md.protection_type == 2).then_some(0x00c0_ffee ^ lba as u32);
        // PRACT=0 at 3 blocks from LBA 11: exactly what was sent, at QEMU's offsets.
        let host = PiOptions {
            ref_tag: ref_for(11),
            ..PiOptions::default()
        };
        let (data, meta) = write(&ctrl, &mut qp, &ns, 11, 3, host);
        let (img_d, img_m) = image_blocks(&ns, 11, 3);
        let what = format!("ns {nsid} image, PRACT=0 at LBA 11");
        assert_same(&data, &img_d, ns.lba_size(), &format!("{what}: data"));
        assert_same(&meta, &img_m, md.size.into(), &format!("{what}: metadata"));
        if !has_pi {
            continue;
        }
        // PRACT=1 at 4 blocks from LBA 300: the data, and the device's PI.
        let lba = 300;
        let act = PiOptions {
            act: true,
            check: PiChecks::default(),
            app_tag: APP,
            app_mask: 0xffff,
            ref_tag: ref_for(lba),
        };
        let (data, meta) = write(&ctrl, &mut qp, &ns, lba, 4, act);
        let (img_d, img_m) = image_blocks(&ns, lba, 4);
        let what = format!("ns {nsid} image, PRACT=1 at LBA {lba}");
        assert_same(&data, &img_d, ns.lba_size(), &format!("{what}: data"));
        let format = pi::PiFormat {
            extended: false,
            ..pi_format(&ns)
        };
        let first_ref = ref_for(lba).unwrap_or(lba as u32);
        let expected = PiExpected {
            app_tag: APP,
            app_mask: 0xffff,
            ref_tag: first_ref,
        };
        pi::verify_separate(&format, &img_d, &img_m, lba, all_checks(&ns), expected)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let at = format.pi_offset();
        for b in 0..4usize {
            let m = &img_m[b * ms..(b + 1) * ms];
            let tuple = Pi::read_from(&m[at..]).expect("8 bytes");
            let before_pi = if md.protection_first {
                &[][..]
            } else {
                &m[..at]
            };
            let bs = ns.lba_size() as usize;
            let crc = pi::guard(&img_d[b * bs..(b + 1) * bs], before_pi);
            assert_eq!(tuple.guard, crc, "{what}: block {b}'s guard");
            assert_eq!(tuple.app, APP, "{what}: block {b}'s application tag");
            match md.protection_type {
                1 => assert_eq!(tuple.reference, lba as u32 + b as u32, "{what}: type 1 ref"),
                2 => assert_eq!(tuple.reference, first_ref + b as u32, "{what}: type 2 ref"),
                _ => {}
            }
            if ms > pi::PI_BYTES {
                // The host's other metadata bytes are kept.
                let sent = &meta[b * ms..(b + 1) * ms];
                let keep = |x: &[u8]| [&x[..at], &x[at + pi::PI_BYTES..]].concat();
                assert_eq!(keep(sent), keep(m), "{what}: block {b}'s other metadata");
            } else {
                assert!(
                    meta.is_empty(),
                    "{what}: PRACT with 8-byte metadata moves none"
                );
            }
        }
        eprintln!("ns {nsid} ({}): image OK", ns.identity().format_label());
    }
    drop(qp);
    drop(ctrl);
    assert_no_new_dmar_faults(&faults_before);
}
