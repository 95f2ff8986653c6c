//! Device data is untrusted input: property tests over the CLI's own decoders of device data
//! (the driver's are in `driver/tests/prop_device_data.rs`). None may panic on any bytes of any
//! length; bytes past the end read as zero, so a short transfer decodes like a zero-filled one;
//! no control character from the device reaches the output.
//!
//! The decoders (`grep -n 'b\[\|le(\|ascii(\|from_le_bytes' tools/src`): `identify::{le, field,
//! ascii, ctrl_json, ns_json}` (`id-ctrl`, `id-ns`), `logs::{smart_json, error_entry_json,
//! fw_slots_json, hex_dump}` (`smart-log`, `error-log`, `fw-log`, `get-log`, `get-feature`),
//! `nsmgmt::{id_list, ctrl_list}` (`list-ns`, `list-ctrl`), `crate::identify::hex_id`
//! (`vfnvme identify`).
//!
//! The number of cases per property is `PROPTEST_CASES` (default [`DEFAULT_CASES`]).

use super::identify::{ascii, ctrl_json, field, le, ns_json};
use super::logs::{error_entry_json, fw_slots_json, hex_dump, smart_json};
use super::nsmgmt::{ctrl_list, id_list};
use crate::identify::hex_id;
use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;
use vfnvme::spec::identify::{IdentifyController, IdentifyNamespace};

/// Cases per property when `PROPTEST_CASES` is not set (a few seconds in a debug build).
const DEFAULT_CASES: u32 = 128;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig::with_cases(cases)
}

/// Device data: random bytes of a length around `full` (short, exact, long), all zeroes or
/// all ones.
fn device_bytes(full: usize) -> impl Strategy<Value = Vec<u8>> {
    let len = prop_oneof![1 => 0..full, 3 => Just(full), 1 => full + 1..=2 * full];
    prop_oneof![
        3 => len.clone().prop_flat_map(|n| vec(any::<u8>(), n)),
        1 => len.clone().prop_map(|n| vec![0u8; n]),
        1 => len.prop_map(|n| vec![0xffu8; n]),
    ]
}

/// `b` zero-filled (or cut) to `n` bytes.
fn padded(b: &[u8], n: usize) -> Vec<u8> {
    let mut p = b.to_vec();
    p.resize(n, 0);
    p
}

/// Every string in `v` (recursively) is printable ASCII.
fn assert_printable(v: &Value) -> Result<(), TestCaseError> {
    match v {
        Value::String(s) => {
            prop_assert!(
                s.bytes().all(|c| c.is_ascii_graphic() || c == b' '),
                "{s:?}"
            );
        }
        Value::Array(a) => a.iter().try_for_each(assert_printable)?,
        Value::Object(m) => m.values().try_for_each(assert_printable)?,
        _ => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn field_readers_any_offset(
        b in vec(any::<u8>(), 0..64),
        off in prop_oneof![0usize..80, Just(usize::MAX - 3), Just(usize::MAX)],
        n in 0usize..=16,
    ) {
        let got = field(&b, off, n);
        prop_assert!(got.len() <= n);
        let v = le(&b, off, n);
        if n <= 8 && off.checked_add(n).is_some_and(|end| end <= b.len()) {
            prop_assert_eq!(got, &b[off..off + n]);
            let want = b[off..off + n].iter().rev().fold(0u64, |v, &x| v << 8 | u64::from(x));
            prop_assert_eq!(v, want);
        }
        let s = ascii(&b, off, n);
        prop_assert!(s.len() <= n);
        prop_assert!(s.bytes().all(|c| c.is_ascii_graphic() || c == b' '), "{s:?}");
        prop_assert!(!s.ends_with(' '));
    }

    #[test]
    fn id_ctrl_any_bytes(b in device_bytes(4096)) {
        let v = ctrl_json(&b);
        prop_assert_eq!(&v, &ctrl_json(&padded(&b, 4096)));
        assert_printable(&v)?;
        let psds = v["psds"].as_array().unwrap();
        prop_assert!((1..=32).contains(&psds.len()));
        // The same fields as the driver's parser reads.
        if let Ok(c) = IdentifyController::parse(&b) {
            prop_assert_eq!(v["vid"].as_u64(), Some(u64::from(c.vid)));
            prop_assert_eq!(v["nn"].as_u64(), Some(u64::from(c.nn)));
            prop_assert_eq!(v["mdts"].as_u64(), Some(u64::from(c.mdts)));
            prop_assert_eq!(v["ver"].as_u64(), Some(u64::from(c.ver)));
        }
    }

    #[test]
    fn id_ns_any_bytes(b in device_bytes(4096)) {
        let v = ns_json(&b);
        prop_assert_eq!(&v, &ns_json(&padded(&b, 4096)));
        assert_printable(&v)?;
        let lbafs = v["lbafs"].as_array().unwrap();
        prop_assert_eq!(lbafs.len(), (le(&b, 25, 1) as usize).min(63) + 1);
        prop_assert_eq!(v["nguid"].as_str().unwrap().len(), 32);
        prop_assert_eq!(v["eui64"].as_str().unwrap().len(), 16);
        if let Ok(n) = IdentifyNamespace::parse(&b) {
            prop_assert_eq!(v["nsze"].as_u64(), Some(n.nsze));
            prop_assert_eq!(lbafs.len(), n.lbaf.len());
            for (j, f) in lbafs.iter().zip(&n.lbaf) {
                prop_assert_eq!(j["ds"].as_u64(), Some(u64::from(f.lbads)));
                prop_assert_eq!(j["ms"].as_u64(), Some(u64::from(f.ms)));
            }
        }
    }

    #[test]
    fn logs_any_bytes(b in device_bytes(512)) {
        let smart = smart_json(&b);
        prop_assert_eq!(&smart, &smart_json(&padded(&b, 512)));
        prop_assert_eq!(smart["critical_warning"].as_u64(), Some(le(&b, 0, 1)));
        let fw = Value::Object(fw_slots_json(&b));
        prop_assert_eq!(&fw, &Value::Object(fw_slots_json(&padded(&b, 512))));
        assert_printable(&fw)?;
        for e in b.chunks(64) {
            let j = error_entry_json(e);
            prop_assert_eq!(&j, &error_entry_json(&padded(e, 64)));
            prop_assert!(j["status_field"].as_u64().unwrap() <= 0x7fff);
        }
        // One line per 16 bytes after the header line, and nothing unprintable.
        let dump = hex_dump(&b);
        prop_assert_eq!(dump.lines().count(), 1 + b.len().div_ceil(16));
        prop_assert!(dump.bytes().all(|c| c == b'\n' || c.is_ascii_graphic() || c == b' '));
    }

    #[test]
    fn namespace_and_controller_lists_any_bytes(b in device_bytes(4096), width in 0usize..=10) {
        for w in [width, 4, 8] {
            let ids = id_list(&b, w);
            let w = w.clamp(1, 8);
            prop_assert!(ids.len() <= b.len() / w);
            prop_assert!(ids.iter().all(|&n| n != 0));
            // Stops at the first zero: the next entry, if any, is zero.
            if let Some(next) = b.chunks_exact(w).nth(ids.len()) {
                prop_assert!(next.iter().all(|&x| x == 0));
            }
        }
        let (n, ids) = ctrl_list(&b);
        prop_assert!(n <= 2047);
        prop_assert_eq!(ids.len(), n.min(b.len().saturating_sub(2) / 2));
        prop_assert_eq!(hex_id(&b).is_none(), b.iter().all(|&x| x == 0));
    }
}

/// Short inputs, whose missing bytes the decoders read as zero: a short SMART log, an empty
/// Identify Controller and Namespace, a 1-byte controller list, a short error entry.
#[test]
fn short_device_data_decodes_without_panic() {
    assert_eq!(smart_json(&[7])["critical_warning"], 7);
    assert_eq!(ctrl_json(&[])["psds"].as_array().unwrap().len(), 1);
    assert_eq!(ns_json(&[])["lbafs"].as_array().unwrap().len(), 1);
    assert_eq!(fw_slots_json(&[0x11])["afi"], 0x11);
    assert_eq!(ctrl_list(&[3]), (3, vec![]));
    assert_eq!(ctrl_list(&[2, 0, 5, 0, 6, 0, 7, 0]), (2, vec![5, 6]));
    assert_eq!(error_entry_json(&[1, 0, 0])["error_count"], 1);
    // A control character from the device is not printed as such.
    let mut b = vec![0u8; 4096];
    b[4..8].copy_from_slice(b"A\x1b[2");
    assert_eq!(ctrl_json(&b)["sn"], "A.[2");
}
