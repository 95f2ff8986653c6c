//! Known CRC values, round trips for every type, position and layout, and every error.

use super::*;

/// CRC-16 T10-DIF bit by bit, independent of the `crc` crate.
fn reference_crc(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                crc << 1 ^ 0x8BB7
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

const TYPES: [PiType; 3] = [PiType::Type1, PiType::Type2, PiType::Type3];
const PLACES: [PiLocation; 2] = [PiLocation::First, PiLocation::Last];

fn fmt(bs: u32, ms: u16, extended: bool, t: PiType, l: PiLocation) -> PiFormat {
    PiFormat::new(bs, ms, extended, Some((t, l))).unwrap()
}

#[test]
fn known_crc_values() {
    assert_eq!(crc16_t10dif(b"123456789"), 0xD0DB);
    assert_eq!(reference_crc(b"123456789"), 0xD0DB);
    let zero = vec![0u8; 4096];
    assert_eq!(crc16_t10dif(&zero), reference_crc(&zero));
    let data = pattern(4096, 7);
    assert_eq!(crc16_t10dif(&data), reference_crc(&data));
    // The guard of split input is the CRC of the concatenation.
    assert_eq!(guard(b"12345", b"6789"), 0xD0DB);
}

#[test]
fn tuple_is_big_endian_and_round_trips() {
    let pi = Pi {
        guard: 0x1234,
        app: 0x5678,
        reference: 0x9ABC_DEF0,
    };
    assert_eq!(
        pi.encode(),
        [0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC, 0xDE, 0xF0]
    );
    assert_eq!(Pi::decode(&pi.encode()), pi);
    assert_eq!(Pi::read_from(&[0; 7]), None);
    let mut short = [0u8; 7];
    assert!(!pi.write_to(&mut short));
    assert_eq!(short, [0; 7]);
}

#[test]
fn format_checks_and_dps() {
    assert_eq!(
        PiFormat::new(512, 7, true, Some((PiType::Type1, PiLocation::Last))),
        Err(PiFormatError::MetadataTooSmall { ms: 7 })
    );
    assert_eq!(
        PiFormat::new(0, 8, true, None),
        Err(PiFormatError::ZeroBlockSize)
    );
    assert!(PiFormat::new(512, 0, false, None).is_ok());
    let f = fmt(4096, 64, false, PiType::Type3, PiLocation::First);
    assert_eq!((f.dps(), f.pi_offset()), (3 | 8, 0));
    let f = fmt(4096, 64, false, PiType::Type2, PiLocation::Last);
    assert_eq!((f.dps(), f.pi_offset()), (2, 56));
    assert_eq!(PiType::from_code(4), None);
    for t in TYPES {
        assert_eq!(PiType::from_code(t.code()), Some(t));
    }
}

/// Expected PI of block `i` of a command at `lba` with tags (app 0x1234, ref 0x100).
fn expected_ref(t: PiType, lba: u64, i: u32) -> u32 {
    match t {
        PiType::Type1 => lba as u32 + i,
        PiType::Type2 => 0x100 + i,
        PiType::Type3 => 0x100,
    }
}

#[test]
fn round_trips_every_type_location_and_layout() {
    let lba = 0x1_0000_0005; // the reference tag keeps the low 32 bits
    for t in TYPES {
        for l in PLACES {
            for ms in [8u16, 16, 64] {
                for bs in [512u32, 4096] {
                    let blocks = 3;
                    let data = pattern(bs as usize * blocks, ms.into());
                    let before = pattern(usize::from(ms) * blocks, 99);
                    let sep = fmt(bs, ms, false, t, l);
                    let mut md = before.clone();
                    generate_separate(&sep, &data, &mut md, lba, 0x1234, 0x100).unwrap();
                    let ext = fmt(bs, ms, true, t, l);
                    let mut buf = Vec::new();
                    for (d, m) in data.chunks(bs as usize).zip(before.chunks(ms.into())) {
                        buf.extend_from_slice(d);
                        buf.extend_from_slice(m);
                    }
                    generate_extended(&ext, &mut buf, lba, 0x1234, 0x100).unwrap();
                    let at = sep.pi_offset();
                    for i in 0..blocks {
                        let d = &data[i * bs as usize..][..bs as usize];
                        let m = &md[i * usize::from(ms)..][..ms.into()];
                        // The metadata around the PI is kept.
                        let o = &before[i * usize::from(ms)..][..ms.into()];
                        assert_eq!(m[..at], o[..at]);
                        assert_eq!(m[at + 8..], o[at + 8..]);
                        let mut covered = d.to_vec();
                        covered.extend_from_slice(&m[..at]);
                        let pi = Pi::read_from(&m[at..]).unwrap();
                        assert_eq!(pi.guard, reference_crc(&covered), "{t:?} {l:?} {ms}");
                        assert_eq!(pi.app, 0x1234);
                        assert_eq!(pi.reference, expected_ref(t, lba, i as u32));
                        let e = &buf[i * (bs as usize + usize::from(ms))..]
                            [..bs as usize + usize::from(ms)];
                        assert_eq!(&e[..bs as usize], d);
                        assert_eq!(&e[bs as usize..], m, "extended and separate agree");
                    }
                    let want = PiExpected {
                        app_tag: 0x1234,
                        app_mask: 0xFFFF,
                        ref_tag: 0x100,
                    };
                    verify_separate(&sep, &data, &md, lba, PiChecks::ALL, want).unwrap();
                    verify_extended(&ext, &buf, lba, PiChecks::ALL, want).unwrap();
                }
            }
        }
    }
}

#[test]
fn insert_uses_the_given_reference_tag_for_every_type() {
    for t in TYPES {
        let f = fmt(512, 8, true, t, PiLocation::Last);
        let mut buf = vec![0u8; 2 * 520];
        insert_extended(&f, &mut buf, 7, 0xAA).unwrap();
        let second = Pi::read_from(&buf[520 + 512..]).unwrap();
        let want = if t == PiType::Type3 { 0xAA } else { 0xAB };
        assert_eq!((second.app, second.reference), (7, want));
        let (d, m) = (vec![1u8; 1024], &mut [0u8; 16]);
        insert_separate(&fmt(512, 8, false, t, PiLocation::First), &d, m, 7, 0xAA).unwrap();
        assert_eq!(Pi::read_from(&m[8..]).unwrap().reference, want);
    }
}

/// A separate 512+16 type 1 format with PI last and 4 good blocks at LBA 40.
fn good_blocks() -> (PiFormat, Vec<u8>, Vec<u8>) {
    let f = fmt(512, 16, false, PiType::Type1, PiLocation::Last);
    let data = pattern(4 * 512, 3);
    let mut md = pattern(4 * 16, 4);
    generate_separate(&f, &data, &mut md, 40, 0xBEEF, 0).unwrap();
    (f, data, md)
}

const WANT: PiExpected = PiExpected {
    app_tag: 0xBEEF,
    app_mask: 0xFFFF,
    ref_tag: 0,
};

#[test]
fn each_check_names_the_block_and_the_values() {
    let (f, mut data, md) = good_blocks();
    let stored = Pi::read_from(&md[16 + 8..]).unwrap();
    data[512 + 3] ^= 1; // LBA 41's data
    let err = verify_separate(&f, &data, &md, 40, PiChecks::ALL, WANT).unwrap_err();
    let crc = guard(&data[512..1024], &md[16..24]);
    assert_eq!(
        err,
        PiError::Guard {
            lba: 41,
            expected: crc,
            found: stored.guard
        }
    );
    assert_eq!(err.status(), Some(0x0282));
    assert_eq!(err.lba(), Some(41));
    // The guard also covers the metadata before the PI.
    let (f, data, mut md) = good_blocks();
    md[2 * 16] ^= 0x80;
    let err = verify_separate(&f, &data, &md, 40, PiChecks::ALL, WANT).unwrap_err();
    assert!(matches!(err, PiError::Guard { lba: 42, .. }));
    // Without the guard check it passes.
    let only_tags = PiChecks {
        guard: false,
        ..PiChecks::ALL
    };
    verify_separate(&f, &data, &md, 40, only_tags, WANT).unwrap();

    let (f, data, md) = good_blocks();
    let other_app = PiExpected {
        app_tag: 0xB0EF,
        ..WANT
    };
    let err = verify_separate(&f, &data, &md, 40, PiChecks::ALL, other_app).unwrap_err();
    assert_eq!(
        err,
        PiError::AppTag {
            lba: 40,
            expected: 0xB0EF,
            mask: 0xFFFF,
            found: 0xBEEF
        }
    );
    assert_eq!(err.status(), Some(0x0283));
    // Under a mask that hides the differing bits it passes.
    let masked = PiExpected {
        app_mask: 0xF0FF,
        ..other_app
    };
    verify_separate(&f, &data, &md, 40, PiChecks::ALL, masked).unwrap();

    let err = verify_separate(&f, &data, &md, 39, PiChecks::ALL, WANT).unwrap_err();
    assert_eq!(
        err,
        PiError::RefTag {
            lba: 39,
            expected: 39,
            found: 40
        }
    );
    assert_eq!(err.status(), Some(0x0284));
    // With no check asked for, nothing fails.
    verify_separate(&f, &data, &md, 39, PiChecks::default(), other_app).unwrap();
}

#[test]
fn app_tag_ffff_skips_types_1_and_2_and_type_3_needs_ref_ffffffff_too() {
    for t in TYPES {
        let f = fmt(512, 8, true, t, PiLocation::First);
        let mut buf = pattern(520, 1);
        let bad = Pi {
            guard: 0xDEAD,
            app: 0xFFFF,
            reference: 5,
        };
        bad.write_to(&mut buf[512..]);
        let r = verify_extended(&f, &buf, 9, PiChecks::ALL, WANT);
        if t == PiType::Type3 {
            assert!(matches!(r, Err(PiError::Guard { lba: 9, .. })));
            Pi {
                reference: u32::MAX,
                ..bad
            }
            .write_to(&mut buf[512..]);
            verify_extended(&f, &buf, 9, PiChecks::ALL, WANT).unwrap();
        } else {
            r.unwrap();
        }
    }
}

#[test]
fn type_2_and_3_reference_tags_follow_the_caller() {
    let f = fmt(512, 8, false, PiType::Type2, PiLocation::Last);
    let data = pattern(1024, 0);
    let mut md = [0u8; 16];
    generate_separate(&f, &data, &mut md, 0, 1, u32::MAX).unwrap();
    assert_eq!(Pi::read_from(&md[8..]).unwrap().reference, 0, "wraps");
    let want = PiExpected {
        app_tag: 1,
        app_mask: 0xFFFF,
        ref_tag: u32::MAX,
    };
    verify_separate(&f, &data, &md, 1234, PiChecks::ALL, want).unwrap();
    let err = verify_separate(
        &f,
        &data,
        &md,
        0,
        PiChecks::ALL,
        PiExpected { ref_tag: 0, ..want },
    );
    assert_eq!(
        err,
        Err(PiError::RefTag {
            lba: 0,
            expected: 0,
            found: u32::MAX
        })
    );
}

#[test]
fn bad_lengths_layouts_and_formats_are_errors_not_panics() {
    let ext = fmt(512, 8, true, PiType::Type1, PiLocation::Last);
    let sep = fmt(512, 8, false, PiType::Type1, PiLocation::Last);
    let mut buf = vec![0u8; 1000];
    assert_eq!(
        generate_extended(&ext, &mut buf, 0, 0, 0),
        Err(PiError::DataLength {
            len: 1000,
            element: 520
        })
    );
    assert_eq!(
        verify_extended(&ext, &buf, 0, PiChecks::ALL, WANT),
        Err(PiError::DataLength {
            len: 1000,
            element: 520
        })
    );
    let mut md = [0u8; 9];
    assert_eq!(
        generate_separate(&sep, &[0; 1024], &mut md, 0, 0, 0),
        Err(PiError::MetadataLength {
            len: 9,
            blocks: 2,
            expected: 16
        })
    );
    assert!(matches!(
        generate_separate(&sep, &[0; 100], &mut md, 0, 0, 0),
        Err(PiError::DataLength { len: 100, .. })
    ));
    assert!(matches!(
        generate_extended(&sep, &mut [0; 520], 0, 0, 0),
        Err(PiError::Layout { .. })
    ));
    assert!(matches!(
        verify_separate(&ext, &[0; 512], &[0; 8], 0, PiChecks::ALL, WANT),
        Err(PiError::Layout { .. })
    ));
    let no_pi = PiFormat::new(512, 8, true, None).unwrap();
    assert_eq!(
        insert_extended(&no_pi, &mut [0; 520], 0, 0),
        Err(PiError::NoPi)
    );
    // Formats built by hand are checked too.
    let tiny = PiFormat { ms: 4, ..ext };
    let err = insert_extended(&tiny, &mut [0; 516], 0, 0).unwrap_err();
    assert_eq!(
        err,
        PiError::Format(PiFormatError::MetadataTooSmall { ms: 4 })
    );
    assert_eq!(err.status(), None);
    assert_eq!(err.lba(), None);
    let zero = PiFormat {
        block_size: 0,
        ..sep
    };
    assert_eq!(
        verify_separate(&zero, &[], &[], 0, PiChecks::ALL, WANT),
        Err(PiError::Format(PiFormatError::ZeroBlockSize))
    );
    // Empty buffers are zero blocks: nothing to do.
    generate_extended(&ext, &mut [], 0, 0, 0).unwrap();
    verify_separate(&sep, &[], &[], 0, PiChecks::ALL, WANT).unwrap();
}

#[test]
fn odd_lengths_never_panic() {
    for t in TYPES {
        for l in PLACES {
            for ms in [8u16, 9, 13, 64] {
                let e = fmt(512, ms, true, t, l);
                let s = fmt(512, ms, false, t, l);
                for len in [0usize, 1, 7, 511, 512, 513, 520, 1040, 1041] {
                    let mut buf = vec![0u8; len];
                    let _ = generate_extended(&e, &mut buf, u64::MAX, 0, u32::MAX);
                    let _ = verify_extended(&e, &buf, u64::MAX, PiChecks::ALL, WANT);
                    for mlen in [0usize, 7, 8, 9, 16, 26] {
                        let mut md = vec![0u8; mlen];
                        let _ = generate_separate(&s, &buf, &mut md, u64::MAX, 0, 0);
                        let _ = verify_separate(&s, &buf, &md, u64::MAX, PiChecks::ALL, WANT);
                    }
                }
            }
        }
    }
}

#[test]
fn errors_say_what_failed() {
    let e = PiError::Guard {
        lba: 7,
        expected: 0x1234,
        found: 0,
    };
    assert_eq!(
        e.to_string(),
        "end-to-end guard check failed at LBA 7: the data's CRC is 0x1234, the stored guard 0x0000"
    );
    assert_eq!(
        PiChecks::from_prchk(0b101),
        PiChecks {
            guard: true,
            app: false,
            reference: true
        }
    );
}
