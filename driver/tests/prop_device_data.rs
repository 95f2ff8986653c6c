//! Device data is untrusted input: property tests over every decoder of bytes or values that
//! come from the controller. Each must return a value or a typed error for any input (any
//! length, all zeroes, all ones, random, one field at an extreme) and never panic or overflow
//! (these run in debug and in release); where an invariant or a round trip exists, it is
//! asserted.
//!
//! The decoders (found with `grep -rn 'from_le_bytes\|parse\|from_dw0\|from_field'` over
//! `driver/src`; the tools' own decoders are tested in `tools/src/admin/prop_tests.rs`):
//! - `spec::identify`: `IdentifyController::parse` (with `max_transfer_bytes`, which bring-up
//!   turns into the transfer limit, and `supports_doorbell_buffer_config`),
//!   `IdentifyNamespace::parse` (with `format_index`, `metadata_extended`, `current_format`,
//!   which the namespace scan turns into a namespace's block size), `parse_active_ns_list`,
//!   `parse_ns_descriptors`;
//! - `spec::log`: `parse_changed_ns_list` (Changed Namespace List log page),
//!   `AsyncEvent::from_dw0` and `is_namespace_changed` (AER completions);
//! - `spec::completion`: `Completion::from_bytes`, `to_bytes`, `phase`, `status`;
//! - `spec::status`: `Status::from_field`, `is_success`, `name`, `Display`;
//! - `spec::registers`: `Cap` (MQES, CQR, TO, DSTRD, NSSRS, CSS, MPSMIN, MPSMAX, `timeout_ns`),
//!   `Version` (and `Display`), `Cc` (fields and builders), `Csts` (RDY, CFS, SHST, all ones),
//!   `doorbell_offset` with the device's DSTRD;
//! - `spec::features`: `NumberOfQueues::from_dw0` and `pairs` (Set Features result);
//! - `quirks::lookup` and `quirks::entry` (the PCI vendor and device IDs of config space);
//! - `Namespace::size_bytes` (NSZE times the block size);
//! - all of them together in bring-up and the namespace scan (`Controller::new`), on the model
//!   with register and Identify values at the edges of what the model can report.
//!
//! Not here, because they are crate-internal: `queue::ring::need_event` (the device's EventIdx,
//! wrapping arithmetic, unit-tested in `ring.rs`), and the completion reapers that look a CQE's
//! command identifier up (`Trackers::complete`, the admin queue's `reap`: an unknown or idle
//! identifier is logged and ignored); feeding them arbitrary completions needs the
//! fault-injecting model.
//!
//! The number of cases per property is `PROPTEST_CASES` (default [`DEFAULT_CASES`]).

use proptest::collection::vec;
use proptest::prelude::*;
use vfnvme::namespace::NamespaceIdentity;
use vfnvme::spec::ana::{AnaLog, AnaLogError, AnaState};
use vfnvme::spec::completion::Completion;
use vfnvme::spec::features::NumberOfQueues;
use vfnvme::spec::identify::{
    nidt, parse_active_ns_list, parse_ns_descriptors, IdentifyController, IdentifyNamespace,
    NsDescriptors, ParseError, IDENTIFY_SIZE,
};
use vfnvme::spec::log::{notice, parse_changed_ns_list, AsyncEvent, AsyncEventType};
use vfnvme::spec::registers::{doorbell_offset, Cap, Cc, Csts, Version, DOORBELL_BASE};
use vfnvme::spec::status::Status;
use vfnvme::{Controller, ControllerOptions, Namespace};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

/// Cases per property when `PROPTEST_CASES` is not set: the whole file takes a few seconds in
/// a debug build on two cores.
const DEFAULT_CASES: u32 = 256;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig::with_cases(cases)
}

/// Fewer cases for properties that bring a controller up on the model.
fn bring_up_config() -> ProptestConfig {
    let c = config();
    ProptestConfig::with_cases((c.cases / 4).max(1))
}

// ---------------------------------------------------------------- generators

/// Lengths around the 4 KiB of an Identify structure: short, exact (most often), long.
fn identify_len() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![
        1 => 0..IDENTIFY_SIZE,
        4 => Just(IDENTIFY_SIZE),
        1 => IDENTIFY_SIZE + 1..=2 * IDENTIFY_SIZE,
    ]
}

/// A value to write over a field: its extremes, or random bytes.
fn field_fill() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(vec![0x00; 8]),
        Just(vec![0xff; 8]),
        Just(vec![0x80, 0, 0, 0, 0, 0, 0, 0x80]),
        Just(vec![0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
        vec(any::<u8>(), 8),
    ]
}

/// Device data of `len()` bytes: random, all zeroes, all ones, or zeroes/random with some of
/// `fields` (offset, width) set to extreme values.
fn device_bytes(
    len: impl Strategy<Value = usize> + Clone + 'static,
    fields: &'static [(usize, usize)],
) -> BoxedStrategy<Vec<u8>> {
    let random = len.clone().prop_flat_map(|n| vec(any::<u8>(), n));
    let zeroes = len.clone().prop_map(|n| vec![0u8; n]);
    let ones = len.clone().prop_map(|n| vec![0xffu8; n]);
    let base = prop_oneof![zeroes.clone(), random.clone()];
    let picked = (
        base,
        vec(
            (0..fields.len().max(1), field_fill()),
            1..=fields.len().clamp(1, 6),
        ),
    )
        .prop_map(move |(mut b, sets)| {
            for (i, fill) in sets {
                if let Some(&(off, width)) = fields.get(i) {
                    for (k, v) in fill.iter().cycle().take(width).enumerate() {
                        if let Some(x) = b.get_mut(off + k) {
                            *x = *v;
                        }
                    }
                }
            }
            b
        });
    prop_oneof![3 => random, 1 => zeroes, 1 => ones, 4 => picked].boxed()
}

/// Fields of Identify Controller the driver decodes or derives limits from.
const CTRL_FIELDS: &[(usize, usize)] = &[
    (0, 2),
    (4, 20),
    (24, 40),
    (64, 8),
    (77, 1),
    (78, 2),
    (80, 4),
    (256, 2),
    (259, 1),
    (262, 1),
    (512, 1),
    (513, 1),
    (514, 2),
    (516, 4),
    (520, 2),
    (768, 256),
    (1020, 4),
    (4092, 4),
];

/// Fields of Identify Namespace: sizes, NLBAF, FLBAS, DPS, and LBA format entries (first,
/// 16th, 17th, 64th, and the one past the table).
const NS_FIELDS: &[(usize, usize)] = &[
    (0, 8),
    (8, 8),
    (16, 8),
    (25, 1),
    (25, 1),
    (26, 1),
    (26, 1),
    (29, 1),
    (128, 4),
    (130, 1),
    (128 + 4 * 15, 4),
    (128 + 4 * 16 + 2, 1),
    (128 + 4 * 63, 4),
    (128 + 4 * 64, 4),
];

/// Entries of a list of 4-byte ids: the first, second, one in the middle, the last two.
const LIST_FIELDS: &[(usize, usize)] = &[(0, 4), (4, 4), (2048, 4), (4088, 4), (4092, 4)];

/// Descriptor headers at the start of a Namespace Identification Descriptor list.
const DESC_FIELDS: &[(usize, usize)] = &[(0, 1), (1, 1), (12, 1), (13, 1), (4092, 4)];

/// A well-formed ANA log page of up to 6 groups, then maybe cut short or with one byte
/// changed, so that the parser meets mostly plausible pages with one defect.
fn ana_page() -> impl Strategy<Value = Vec<u8>> {
    let group = (
        any::<u32>(),
        prop_oneof![
            Just(1u8),
            Just(2),
            Just(3),
            Just(4),
            Just(0x0f),
            any::<u8>()
        ],
        vec(any::<u32>(), 0..5),
    );
    (
        vec(group, 0..6),
        any::<u64>(),
        any::<Option<(usize, u8)>>(),
        any::<Option<usize>>(),
    )
        .prop_map(|(groups, count, poke, cut)| {
            let mut b = vec![0u8; 16];
            b[..8].copy_from_slice(&count.to_le_bytes());
            b[8..10].copy_from_slice(&(groups.len() as u16).to_le_bytes());
            for (id, state, nsids) in groups {
                let mut d = [0u8; 32];
                d[..4].copy_from_slice(&id.to_le_bytes());
                d[4..8].copy_from_slice(&(nsids.len() as u32).to_le_bytes());
                d[16] = state;
                b.extend_from_slice(&d);
                for n in nsids {
                    b.extend_from_slice(&n.to_le_bytes());
                }
            }
            if let Some((at, v)) = poke {
                let i = at % b.len();
                b[i] = v;
            }
            if let Some(c) = cut {
                b.truncate(c % (b.len() + 1));
            }
            b
        })
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

/// The nsids of a list up to its first zero, at most `max` (the reference for the parsers).
fn ids_until_zero(b: &[u8], max: usize) -> Vec<u32> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 4 <= b.len() && out.len() < max {
        let id = le32(b, off);
        if id == 0 {
            break;
        }
        out.push(id);
        off += 4;
    }
    out
}

/// The text of an Identify string field as the driver must show it: printable ASCII only, no
/// surrounding blanks, at most `width` characters.
fn assert_clean_text(s: &str, width: usize) -> Result<(), TestCaseError> {
    prop_assert!(s.len() <= width, "{s:?} longer than {width}");
    prop_assert!(
        s.bytes().all(|c| c.is_ascii_graphic() || c == b' '),
        "{s:?}"
    );
    prop_assert_eq!(s.trim(), s);
    Ok(())
}

/// One Namespace Identification Descriptor: a known type with its length, or an unknown type
/// with any body.
fn descriptor() -> impl Strategy<Value = (u8, Vec<u8>)> {
    prop_oneof![
        vec(any::<u8>(), 8).prop_map(|b| (nidt::EUI64, b)),
        vec(any::<u8>(), 16).prop_map(|b| (nidt::NGUID, b)),
        vec(any::<u8>(), 16).prop_map(|b| (nidt::UUID, b)),
        any::<u8>().prop_map(|c| (nidt::CSI, vec![c])),
        (5u8..=255, vec(any::<u8>(), 0..=255)),
    ]
}

proptest! {
    #![proptest_config(config())]

    // ------------------------------------------------------------ Identify Controller

    #[test]
    fn identify_controller_any_bytes(b in device_bytes(identify_len(), CTRL_FIELDS), mpsmin in any::<u8>()) {
        match IdentifyController::parse(&b) {
            Err(e) => {
                prop_assert!(b.len() < IDENTIFY_SIZE, "refused {} bytes: {e}", b.len());
                let is_too_short = matches!(e, ParseError::TooShort { .. });
                prop_assert!(is_too_short);
                prop_assert!(!e.to_string().is_empty());
            }
            Ok(c) => {
                prop_assert!(b.len() >= IDENTIFY_SIZE);
                // Fixed fields are the bytes the controller wrote, and nothing past 4 KiB counts.
                prop_assert_eq!(c.vid, u16::from_le_bytes([b[0], b[1]]));
                prop_assert_eq!(c.mdts, b[77]);
                prop_assert_eq!(c.ver, le32(&b, 80));
                prop_assert_eq!(c.nn, le32(&b, 516));
                prop_assert_eq!(c.oacs, u16::from_le_bytes([b[256], b[257]]));
                prop_assert_eq!(&c, &IdentifyController::parse(&b[..IDENTIFY_SIZE]).unwrap());
                assert_clean_text(&c.sn, 20)?;
                assert_clean_text(&c.mn, 40)?;
                assert_clean_text(&c.fr, 8)?;
                assert_clean_text(&c.subnqn, 256)?;
                prop_assert_eq!(
                    c.supports_doorbell_buffer_config(),
                    b[257] & 1 != 0
                );
                // MDTS: no limit, or a power of two of at least one page (saturating).
                match c.max_transfer_bytes(mpsmin) {
                    None => prop_assert_eq!(c.mdts, 0),
                    Some(m) => {
                        prop_assert!(c.mdts != 0);
                        let shift = 12 + u32::from(mpsmin) + u32::from(c.mdts);
                        if shift < 64 {
                            prop_assert_eq!(m, 1u64 << shift);
                        } else {
                            prop_assert_eq!(m, u64::MAX);
                        }
                    }
                }
            }
        }
    }

    // ------------------------------------------------------------ ANA log page (0Ch)

    #[test]
    fn ana_log_any_bytes(b in prop_oneof![vec(any::<u8>(), 0..600), ana_page()]) {
        match AnaLog::parse(&b) {
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                if let AnaLogError::Truncated { len, needed, .. } = e {
                    prop_assert_eq!(len, b.len());
                    prop_assert!(needed > len);
                }
            }
            Ok(log) => {
                prop_assert_eq!(log.change_count, u64::from_le_bytes(b[..8].try_into().unwrap()));
                prop_assert_eq!(log.groups.len(), usize::from(u16::from_le_bytes([b[8], b[9]])));
                // Every descriptor and list lies inside the page, in order.
                let mut at = 16usize;
                for g in &log.groups {
                    prop_assert!(g.id != 0);
                    prop_assert_eq!(g.id, le32(&b, at));
                    prop_assert_eq!(g.nsids.len(), le32(&b, at + 4) as usize);
                    prop_assert_eq!(Some(g.state), AnaState::from_code(b[at + 16]));
                    prop_assert!(g.nsids.iter().all(|&n| n != 0 && n != u32::MAX));
                    at += 32 + 4 * g.nsids.len();
                    prop_assert!(at <= b.len());
                }
            }
        }
    }

    // ------------------------------------------------------------ Identify Namespace

    #[test]
    fn identify_namespace_any_bytes(b in device_bytes(identify_len(), NS_FIELDS)) {
        let parsed = IdentifyNamespace::parse(&b);
        if b.len() < IDENTIFY_SIZE {
            let is_too_short = matches!(parsed, Err(ParseError::TooShort { .. }));
            prop_assert!(is_too_short, "{parsed:?}");
            return Ok(());
        }
        let nlbaf = b[25];
        if nlbaf > 63 {
            prop_assert_eq!(
                parsed,
                Err(ParseError::BadField { field: "NLBAF", value: u64::from(nlbaf) })
            );
            return Ok(());
        }
        let n = parsed.unwrap();
        prop_assert_eq!(&n, &IdentifyNamespace::parse(&b[..IDENTIFY_SIZE]).unwrap());
        prop_assert_eq!(n.nsze, u64::from_le_bytes(b[0..8].try_into().unwrap()));
        prop_assert_eq!(n.nlbaf, nlbaf);
        prop_assert_eq!(n.flbas, b[26]);
        prop_assert_eq!(n.metadata_extended(), b[26] & 0x10 != 0);
        // The table has NLBAF + 1 entries, each the dword the controller wrote.
        prop_assert_eq!(n.lbaf.len(), usize::from(nlbaf) + 1);
        for (i, f) in n.lbaf.iter().enumerate() {
            let v = le32(&b, 128 + 4 * i);
            prop_assert_eq!(f.ms, v as u16);
            prop_assert_eq!(f.lbads, (v >> 16) as u8);
            prop_assert!(f.rp <= 3);
        }
        // The format index reaches at most format 63 (FLBAS bits 3:0 and 6:5).
        let idx = n.format_index();
        prop_assert!(idx < 64);
        if nlbaf < 16 {
            prop_assert_eq!(idx, usize::from(b[26] & 0xf));
        }
        // The block size the driver uses is a power of two in 512 B..=64 KiB taken from the
        // table, or the format is refused with a typed error naming the field.
        match n.current_format() {
            Ok(f) => {
                prop_assert_eq!(Some(&f), n.lbaf.get(idx));
                prop_assert!((9..=16).contains(&f.lbads));
                let size = 1u32 << f.lbads;
                prop_assert!(size.is_power_of_two() && (512..=65536).contains(&size));
            }
            Err(ParseError::BadField { field: "FLBAS", value }) => {
                prop_assert!(idx >= n.lbaf.len());
                prop_assert_eq!(value, u64::from(n.flbas));
            }
            Err(ParseError::BadField { field: "LBADS", value }) => {
                let f = n.lbaf[idx];
                prop_assert!(!(9..=16).contains(&f.lbads));
                prop_assert_eq!(value, u64::from(f.lbads));
            }
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
        }
    }

    /// A plausible Identify Namespace (NLBAF within the table) whose formats are at the edges.
    #[test]
    fn identify_namespace_formats_at_the_edges(
        nlbaf in prop_oneof![0u8..16, 16u8..=63],
        flbas in any::<u8>(),
        lbads in vec(prop_oneof![Just(0u8), Just(8), 9u8..=16, Just(17), Just(63), Just(64), Just(255), any::<u8>()], 64),
        ms in vec(prop_oneof![Just(0u16), Just(u16::MAX), any::<u16>()], 64),
        nsze in prop_oneof![Just(0u64), Just(1), Just(u64::MAX), any::<u64>()],
    ) {
        let mut b = vec![0u8; IDENTIFY_SIZE];
        b[0..8].copy_from_slice(&nsze.to_le_bytes());
        b[25] = nlbaf;
        b[26] = flbas;
        for i in 0..64 {
            let v = u32::from(ms[i]) | (u32::from(lbads[i]) << 16);
            b[128 + 4 * i..132 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        let n = IdentifyNamespace::parse(&b).unwrap();
        prop_assert_eq!(n.nsze, nsze);
        let idx = n.format_index();
        match n.current_format() {
            Ok(f) => {
                prop_assert!(idx <= usize::from(nlbaf));
                prop_assert_eq!(f.lbads, lbads[idx]);
                prop_assert_eq!(f.ms, ms[idx]);
                prop_assert!((1u32 << f.lbads).is_power_of_two());
                prop_assert!((9..=16).contains(&f.lbads));
            }
            Err(ParseError::BadField { .. }) => {
                prop_assert!(idx > usize::from(nlbaf) || !(9..=16).contains(&lbads[idx]));
            }
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
        }
    }

    // ------------------------------------------------------------ namespace lists

    #[test]
    fn active_namespace_list_any_bytes(b in device_bytes(identify_len(), LIST_FIELDS)) {
        match parse_active_ns_list(&b) {
            Err(e) => {
                prop_assert!(b.len() < IDENTIFY_SIZE);
                let is_too_short = matches!(e, ParseError::TooShort { .. });
                prop_assert!(is_too_short);
            }
            Ok(list) => {
                prop_assert!(b.len() >= IDENTIFY_SIZE);
                // Stops at the first zero, never past the 1024 entries of the page.
                prop_assert_eq!(&list, &ids_until_zero(&b[..IDENTIFY_SIZE], 1024));
                prop_assert!(list.len() <= 1024);
                prop_assert!(list.iter().all(|&n| n != 0));
            }
        }
    }

    #[test]
    fn changed_namespace_list_any_bytes(b in device_bytes(0..=2 * IDENTIFY_SIZE, LIST_FIELDS)) {
        let parsed = parse_changed_ns_list(&b);
        let expected = ids_until_zero(&b, 1024);
        if expected.first() == Some(&u32::MAX) {
            // More than 1024 changed: the caller rescans everything.
            prop_assert_eq!(parsed, None);
        } else {
            let list = parsed.unwrap();
            prop_assert!(list.len() <= 1024 && list.len() <= b.len() / 4);
            prop_assert!(list.iter().all(|&n| n != 0));
            prop_assert_eq!(list, expected);
        }
    }

    // ------------------------------------------------------------ descriptor lists

    #[test]
    fn ns_descriptors_any_bytes(b in device_bytes(identify_len(), DESC_FIELDS)) {
        match parse_ns_descriptors(&b) {
            Err(ParseError::TooShort { .. }) => prop_assert!(b.len() < IDENTIFY_SIZE),
            Err(ParseError::BadField { field, .. }) => prop_assert_eq!(field, "NIDL"),
            Ok(_) => prop_assert!(b.len() >= IDENTIFY_SIZE),
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
        }
        // The list is the 4 KiB structure: bytes past it change nothing.
        if b.len() >= IDENTIFY_SIZE {
            prop_assert_eq!(parse_ns_descriptors(&b), parse_ns_descriptors(&b[..IDENTIFY_SIZE]));
        }
    }

    /// A well-formed list parses back to what was written (the last of each known type wins,
    /// unknown types are skipped); one that runs past the structure is refused.
    #[test]
    fn ns_descriptors_round_trip(
        descs in vec(descriptor(), 0..160),
        trailing in vec(any::<u8>(), 0..=2 * IDENTIFY_SIZE),
    ) {
        let mut b = Vec::new();
        let mut want = NsDescriptors::default();
        let mut overflows = false;
        for (t, body) in &descs {
            b.extend_from_slice(&[*t, body.len() as u8, 0, 0]);
            b.extend_from_slice(body);
            if b.len() > IDENTIFY_SIZE {
                overflows = true;
                break;
            }
            match *t {
                nidt::EUI64 => want.eui64 = Some(body[..].try_into().unwrap()),
                nidt::NGUID => want.nguid = Some(body[..].try_into().unwrap()),
                nidt::UUID => want.uuid = Some(body[..].try_into().unwrap()),
                nidt::CSI => want.csi = Some(body[0]),
                _ => {}
            }
            if b.len() + 4 > IDENTIFY_SIZE {
                break; // no room for another header: the list ends here
            }
        }
        let ended = b.len();
        if b.len() < IDENTIFY_SIZE {
            b.resize(IDENTIFY_SIZE, 0);
        }
        // Bytes after the 4 KiB structure (a longer buffer) are not part of the list.
        b.extend_from_slice(&trailing);
        let parsed = parse_ns_descriptors(&b);
        if overflows {
            prop_assert!(parsed.is_err(), "a descriptor ending at {ended} > 4096 was accepted: {parsed:?}");
        } else {
            prop_assert_eq!(parsed, Ok(want));
        }
    }

    // ------------------------------------------------------------ completions and status

    #[test]
    fn completion_entries_any_bytes(b in prop_oneof![
        any::<[u8; 16]>(),
        Just([0u8; 16]),
        Just([0xffu8; 16]),
    ]) {
        let c = Completion::from_bytes(&b);
        prop_assert_eq!(c.to_bytes(), b);
        prop_assert_eq!(c.cid, u16::from_le_bytes([b[12], b[13]]));
        prop_assert_eq!(c.sq_head, u16::from_le_bytes([b[8], b[9]]));
        prop_assert_eq!(c.phase(), b[14] & 1 != 0);
        let field = u16::from_le_bytes([b[14], b[15]]) >> 1;
        prop_assert_eq!(c.status(), Status::from_field(field));
    }

    #[test]
    fn status_any_field(field in prop_oneof![any::<u16>(), Just(0u16), Just(0x7fff), Just(u16::MAX)]) {
        let s = Status::from_field(field);
        prop_assert_eq!(s.sc(), field as u8);
        prop_assert_eq!(s.sct(), ((field >> 8) & 7) as u8);
        prop_assert!(s.sct() <= 7);
        prop_assert_eq!(s.crd(), ((field >> 11) & 3) as u8);
        prop_assert_eq!(s.more(), field & (1 << 13) != 0);
        prop_assert_eq!(s.dnr(), field & (1 << 14) != 0);
        prop_assert_eq!(s.is_success(), field & 0x7ff == 0);
        // The status keeps the whole field (SC, SCT, CRD, More, DNR), without the phase bit.
        prop_assert_eq!(s.field(), field & 0x7fff);
        let back = u16::from(s.sc())
            | u16::from(s.sct()) << 8
            | u16::from(s.crd()) << 11
            | u16::from(s.more()) << 13
            | u16::from(s.dnr()) << 14;
        prop_assert_eq!(back, field & 0x7fff);
        let text = s.to_string();
        prop_assert!(text.contains(&format!("sc {:#04x}", s.sc())), "{text}");
        if let Some(name) = s.name() {
            prop_assert!(text.starts_with(name));
        }
    }

    // ------------------------------------------------------------ asynchronous events

    #[test]
    fn async_events_any_dw0(dw0 in prop_oneof![any::<u32>(), Just(0u32), Just(u32::MAX)]) {
        let e = AsyncEvent::from_dw0(dw0);
        prop_assert_eq!(e.info, (dw0 >> 8) as u8);
        prop_assert_eq!(e.log_page, (dw0 >> 16) as u8);
        let t = (dw0 & 7) as u8;
        let kind_ok = match e.kind {
            AsyncEventType::Error => t == 0,
            AsyncEventType::Smart => t == 1,
            AsyncEventType::Notice => t == 2,
            AsyncEventType::Immediate => t == 3,
            AsyncEventType::IoCommandSpecific => t == 6,
            AsyncEventType::Vendor => t == 7,
            AsyncEventType::Reserved(r) => r == t && (r == 4 || r == 5),
        };
        prop_assert!(kind_ok, "{:?} for type {}", e.kind, t);
        prop_assert_eq!(
            e.is_namespace_changed(),
            t == 2 && e.info == notice::NS_ATTRIBUTE_CHANGED
        );
    }

    // ------------------------------------------------------------ registers

    #[test]
    fn cap_any_value(v in prop_oneof![any::<u64>(), Just(0u64), Just(u64::MAX)], qid in any::<u16>(), is_cq in any::<bool>()) {
        let cap = Cap(v);
        prop_assert_eq!(u64::from(cap.mqes()), v & 0xffff);
        prop_assert!((1..=65536).contains(&cap.max_queue_entries()));
        prop_assert_eq!(cap.cqr(), v & (1 << 16) != 0);
        prop_assert!(cap.dstrd() <= 15);
        prop_assert!(cap.mpsmin() <= 15 && cap.mpsmax() <= 15);
        prop_assert_eq!(u64::from(cap.css()), (v >> 37) & 0xff);
        prop_assert_eq!(cap.nssrs(), v & (1 << 36) != 0);
        // At least 500 ms, at most 255 × 500 ms, whatever CAP.TO says.
        let t = cap.timeout_ns();
        prop_assert!((500_000_000..=255 * 500_000_000).contains(&t));
        prop_assert_eq!(t, u64::from(cap.to().max(1)) * 500_000_000);
        // Any queue's doorbell at any stride the device reports is computed without overflow.
        let off = doorbell_offset(qid, is_cq, cap.dstrd());
        let want = DOORBELL_BASE as u128
            + (2 * u128::from(qid) + u128::from(is_cq)) * (4u128 << cap.dstrd());
        prop_assert_eq!(off as u128, want);
    }

    #[test]
    fn version_any_value(v in any::<u32>()) {
        let vs = Version(v);
        let back = u32::from(vs.major()) << 16 | u32::from(vs.minor()) << 8 | u32::from(vs.tertiary());
        prop_assert_eq!(back, v);
        prop_assert_eq!(
            vs.to_string(),
            format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
        );
    }

    #[test]
    fn cc_fields_and_builders(v in any::<u32>(), en in any::<bool>(), css in any::<u8>(), mps in any::<u8>(), shn in any::<u8>(), sqes in any::<u8>(), cqes in any::<u8>()) {
        let cc = Cc(v);
        prop_assert_eq!(cc.en(), v & 1 != 0);
        prop_assert!(cc.css() <= 7 && cc.mps() <= 15 && cc.shn() <= 3);
        prop_assert!(cc.iosqes() <= 15 && cc.iocqes() <= 15);
        // Each builder sets its field (masked to its width) and keeps every other bit.
        let b = cc.with_en(en);
        prop_assert_eq!(b.en(), en);
        prop_assert_eq!(b.0 & !1, v & !1);
        let b = cc.with_css(css);
        prop_assert_eq!(b.css(), css & 7);
        prop_assert_eq!(b.0 & !(7 << 4), v & !(7 << 4));
        let b = cc.with_mps(mps);
        prop_assert_eq!(b.mps(), mps & 0xf);
        prop_assert_eq!(b.0 & !(0xf << 7), v & !(0xf << 7));
        let b = cc.with_shn(shn);
        prop_assert_eq!(b.shn(), shn & 3);
        prop_assert_eq!(b.0 & !(3 << 14), v & !(3 << 14));
        let b = cc.with_iosqes(sqes);
        prop_assert_eq!(b.iosqes(), sqes & 0xf);
        prop_assert_eq!(b.0 & !(0xf << 16), v & !(0xf << 16));
        let b = cc.with_iocqes(cqes);
        prop_assert_eq!(b.iocqes(), cqes & 0xf);
        prop_assert_eq!(b.0 & !(0xf << 20), v & !(0xf << 20));
    }

    #[test]
    fn csts_any_value(v in prop_oneof![any::<u32>(), Just(0u32), Just(u32::MAX)]) {
        let c = Csts(v);
        prop_assert_eq!(c.rdy(), v & 1 != 0);
        prop_assert_eq!(c.cfs(), v & 2 != 0);
        prop_assert!(c.shst() <= 3);
        prop_assert_eq!(c.is_all_ones(), v == u32::MAX);
        if c.is_all_ones() {
            // A vanished device reads as ready *and* fatal: callers must check all-ones first.
            prop_assert!(c.rdy() && c.cfs());
        }
    }

    // ------------------------------------------------------------ features, PCI IDs

    #[test]
    fn number_of_queues_any_dw0(dw0 in prop_oneof![any::<u32>(), Just(0u32), Just(u32::MAX)]) {
        let n = NumberOfQueues::from_dw0(dw0);
        prop_assert_eq!(n.sq, (dw0 & 0xffff) + 1);
        prop_assert_eq!(n.cq, (dw0 >> 16) + 1);
        prop_assert!((1..=65536).contains(&n.sq) && (1..=65536).contains(&n.cq));
        prop_assert_eq!(n.pairs(), n.sq.min(n.cq));
    }

    #[test]
    fn quirks_of_any_pci_id((vendor, device) in prop_oneof![
        any::<(u16, u16)>(),
        prop::sample::select(vfnvme::quirks::QUIRK_TABLE).prop_map(|e| (e.vendor, e.device)),
    ]) {
        let q = vfnvme::quirks::lookup(vendor, device);
        match vfnvme::quirks::entry(vendor, device) {
            Some(e) => {
                prop_assert_eq!((e.vendor, e.device), (vendor, device));
                prop_assert!(q.contains(e.quirks));
            }
            None => prop_assert!(q.is_empty()),
        }
    }
}

/// A model configuration with register and Identify values anywhere in what the model can
/// report (it refuses the rest with a typed error before bring-up starts).
fn model_config() -> impl Strategy<Value = ModelConfig> {
    let ns = (
        1u32..=8,
        prop_oneof![Just(512u32), Just(4096)],
        prop_oneof![3 => 1u64..1 << 40, 1 => Just(u64::MAX >> 12), 1 => Just(u64::MAX), 1 => any::<u64>()],
    );
    (
        (
            vec(ns, 0..4),
            prop_oneof![3 => Just(0u32), 1 => 1u32..16, 1 => Just(u32::MAX - 1), 1 => Just(u32::MAX)],
            prop_oneof![4 => 0u8..=20, 1 => any::<u8>()],
            prop_oneof![Just(1u16), Just(u16::MAX - 1), any::<u16>()],
            prop_oneof![4 => prop_oneof![Just(2u32), Just(3), Just(65536), 2u32..=65536], 1 => 0u32..=70000],
            prop_oneof![4 => 0u8..=8, 1 => Just(9u8)],
        ),
        (
            prop_oneof![4 => Just(0u8), 1 => 1u8..=16],
            0u8..=16,
            prop_oneof![Just(1u8), Just(255), any::<u8>()],
            prop_oneof![Just(0u32), Just(0x0001_0000), Just(u32::MAX), any::<u32>()],
            any::<u8>(),
            any::<u16>(),
            any::<bool>(),
            any::<bool>(),
            "[ -~]{0,24}",
            "[ -~]{0,44}",
        ),
    )
        .prop_map(
            |(
                (namespaces, nn, mdts, pairs, entries, stride),
                (mpsmin, mpsmax, to, version, aerl, oncs, legacy, shadow, serial, model),
            )| ModelConfig {
                namespaces: namespaces
                    .into_iter()
                    .map(|(nsid, lba_size, blocks)| ModelNamespaceConfig {
                        nsid,
                        blocks,
                        lba_size,
                        backing: Backing::Null,
                    })
                    .collect(),
                nn,
                mdts,
                max_io_queue_pairs: pairs,
                max_queue_entries: entries,
                doorbell_stride: stride,
                mpsmin,
                mpsmax,
                timeout_units: to,
                version,
                aerl,
                oncs,
                legacy_identify: legacy,
                shadow_doorbells: shadow,
                serial,
                model,
                io_latency_ns: 0,
                admin_latency_ns: 1_000,
                ..ModelConfig::default()
            },
        )
}

proptest! {
    #![proptest_config(bring_up_config())]

    /// Bring-up and the namespace scan on a controller whose registers and Identify data are
    /// at the edges: a controller, or a typed error; never a panic. What it reports is
    /// within the limits the driver promises.
    #[test]
    fn bring_up_on_edge_values(cfg in model_config(), io_queues in any::<u16>(), admin_depth in any::<u16>()) {
        let Ok(platform) = ModelPlatform::new(cfg.clone()) else {
            return Ok(()); // the model refused the configuration
        };
        let options = ControllerOptions {
            io_queues,
            admin_depth,
            ..ControllerOptions::default()
        };
        let ctrl = match Controller::new(platform, options) {
            Ok(c) => c,
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                return Ok(());
            }
        };
        let info = ctrl.identify();
        prop_assert_eq!(info.cap.mpsmin(), 0, "bring-up must refuse MPSMIN > 0");
        prop_assert!((4096..=2 << 20).contains(&info.max_transfer_bytes));
        prop_assert!(info.io_queue_pairs <= cfg.max_io_queue_pairs);
        prop_assert!(u32::from(info.io_queue_pairs) <= u32::from(io_queues).max(1));
        prop_assert_eq!(info.max_queue_depth, cfg.max_queue_entries);
        assert_clean_text(info.serial(), 20)?;
        assert_clean_text(info.model(), 40)?;
        for ns in ctrl.namespaces() {
            let want = cfg.namespaces.iter().find(|n| n.nsid == ns.nsid()).unwrap();
            prop_assert_eq!(ns.blocks(), want.blocks);
            prop_assert_eq!(ns.lba_size(), want.lba_size);
            prop_assert_eq!(ns.size_bytes(), want.blocks * u64::from(want.lba_size));
        }
    }

    /// The size in bytes of a namespace of any NSZE and block size the parser accepts: the
    /// product, or `u64::MAX` when it doesn't fit.
    #[test]
    fn namespace_size_any_nsze(blocks in prop_oneof![any::<u64>(), Just(u64::MAX)], lba_shift in 9u8..=16) {
        let ns = Namespace::new(1, NamespaceIdentity { lba_shift, ..Default::default() }, blocks);
        prop_assert_eq!(ns.lba_size(), 1u32 << lba_shift);
        let want = u64::try_from(u128::from(blocks) << lba_shift).unwrap_or(u64::MAX);
        prop_assert_eq!(ns.size_bytes(), want);
    }
}

/// The bytes of the round-trip property's first failure, kept as a plain test: a descriptor
/// chain that runs past the 4 KiB structure into a longer buffer was parsed from the bytes
/// after it instead of being refused.
#[test]
fn descriptor_running_past_the_structure_is_refused() {
    let mut b = vec![0u8; IDENTIFY_SIZE + 64];
    // Unknown descriptors of 4 + 252 bytes chain up to offset 3840, then an NGUID header at
    // 4080 whose 16-byte body would end at 4100, past the structure.
    let mut off = 0;
    while off + 256 <= 4080 {
        b[off..off + 4].copy_from_slice(&[9, 252, 0, 0]);
        off += 256;
    }
    b[off..off + 4].copy_from_slice(&[9, (4080 - off - 4) as u8, 0, 0]);
    b[4080..4084].copy_from_slice(&[nidt::NGUID, 16, 0, 0]);
    b[4084..4100].copy_from_slice(&[0xab; 16]);
    assert!(
        parse_ns_descriptors(&b).is_err(),
        "{:?}",
        parse_ns_descriptors(&b)
    );
    assert!(parse_ns_descriptors(&b[..IDENTIFY_SIZE]).is_err());
}

/// NSZE near 2^64 with 4 KiB blocks: the size in bytes wrapped around to a small number (here
/// 0), which the C ABI and the fio engine report as the namespace size.
#[test]
fn namespace_size_does_not_wrap() {
    let identity = NamespaceIdentity {
        lba_shift: 12,
        ..Default::default()
    };
    assert_eq!(
        Namespace::new(1, identity, 1 << 52).size_bytes(),
        u64::MAX,
        "2^52 blocks of 4 KiB is 2^64 bytes"
    );
    assert_eq!(
        Namespace::new(1, identity, (1 << 52) - 1).size_bytes(),
        ((1u64 << 52) - 1) << 12
    );
}
