//! Property tests of the PDU codec: host PDUs built here (independently of the codec's
//! builders) parse back to what was sent, with and without digests; every prefix of a valid
//! PDU asks for more bytes; any single-bit error under a digest is caught; arbitrary bytes
//! never panic the parser in any negotiated state and never make it claim more bytes than it
//! was given.

use proptest::prelude::*;
use vfnvme_target::codec::Codec;
use vfnvme_target::digest::crc32c;
use vfnvme_target::pdu::{Pdu, CAPSULE_CMD, H2C_DATA};

/// A host PDU of type `t` with `header` after the common header and `data`.
fn host_pdu(c: &Codec, t: u8, flags: u8, header: &[u8], data: &[u8]) -> Vec<u8> {
    let hlen = 8 + header.len();
    let hd = if c.hdgst { 4 } else { 0 };
    let dd = if c.ddgst && !data.is_empty() { 4 } else { 0 };
    let f = flags | u8::from(c.hdgst) | if dd != 0 { 2 } else { 0 };
    let pdo = if data.is_empty() {
        0
    } else {
        (hlen + hd) as u8
    };
    let mut p = vec![t, f, hlen as u8, pdo];
    p.extend_from_slice(&((hlen + hd + data.len() + dd) as u32).to_le_bytes());
    p.extend_from_slice(header);
    if c.hdgst {
        let d = crc32c(&p);
        p.extend_from_slice(&d.to_le_bytes());
    }
    p.extend_from_slice(data);
    if dd != 0 {
        p.extend_from_slice(&crc32c(data).to_le_bytes());
    }
    p
}

/// Cases per property unless `PROPTEST_CASES` says otherwise: the file takes a few seconds
/// in a debug build.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    ProptestConfig::with_cases(cases)
}

fn ready(hdgst: bool, ddgst: bool) -> Codec {
    let mut c = Codec::new(16 * 1024, 8192);
    c.ready = true;
    c.hdgst = hdgst;
    c.ddgst = ddgst;
    c
}

fn capsule(c: &Codec, sqe: &[u8; 64], data: &[u8]) -> Vec<u8> {
    host_pdu(c, CAPSULE_CMD, 0, sqe, data)
}

fn h2c(c: &Codec, cid: u16, ttag: u16, off: u32, data: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&cid.to_le_bytes());
    h.extend_from_slice(&ttag.to_le_bytes());
    h.extend_from_slice(&off.to_le_bytes());
    h.extend_from_slice(&(data.len() as u32).to_le_bytes());
    h.extend_from_slice(&[0; 4]);
    host_pdu(c, H2C_DATA, 0x04, &h, data)
}

fn sqe_strategy() -> impl Strategy<Value = [u8; 64]> {
    proptest::collection::vec(any::<u8>(), 64).prop_map(|v| {
        let mut a = [0u8; 64];
        a.copy_from_slice(&v);
        a
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn capsules_parse_back(hd: bool, dd: bool, sqe in sqe_strategy(), data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let c = ready(hd, dd);
        let p = capsule(&c, &sqe, &data);
        let (pdu, used) = c.decode(&p).expect("valid").expect("whole");
        prop_assert_eq!(used, p.len());
        prop_assert_eq!(pdu, Pdu::CapsuleCmd { sqe: &sqe, data: &data });
        // Every strict prefix asks for more.
        for cut in [0, 1, 7, 8, 9, p.len() / 2, p.len() - 1] {
            prop_assert_eq!(c.decode(&p[..cut]), Ok(None), "prefix {}", cut);
        }
    }

    #[test]
    fn h2c_data_parses_back(hd: bool, dd: bool, cid: u16, ttag: u16, off: u32, data in proptest::collection::vec(any::<u8>(), 1..4096)) {
        let c = ready(hd, dd);
        let p = h2c(&c, cid, ttag, off, &data);
        let (pdu, used) = c.decode(&p).expect("valid").expect("whole");
        prop_assert_eq!(used, p.len());
        match pdu {
            Pdu::H2cData { header, data: d } => {
                prop_assert_eq!((header.cccid, header.ttag, header.datao, header.datal), (cid, ttag, off, data.len() as u32));
                prop_assert!(header.last);
                prop_assert_eq!(d, &data[..]);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn a_flipped_bit_under_a_digest_is_caught(sqe in sqe_strategy(), data in proptest::collection::vec(any::<u8>(), 1..512), bit in any::<prop::sample::Index>()) {
        let c = ready(true, true);
        let mut p = capsule(&c, &sqe, &data);
        // Any bit of the SQE, its digest, the data or the data digest (not the common header,
        // whose fields are checked on their own).
        let i = 64 + bit.index((p.len() - 8) * 8);
        p[i / 8] ^= 1 << (i % 8);
        prop_assert!(c.decode(&p).is_err(), "flip of bit {} accepted", i);
    }

    #[test]
    fn arbitrary_bytes_never_panic(ready_: bool, hd: bool, dd: bool, bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut c = ready(hd, dd);
        c.ready = ready_;
        if let Ok(Some((_, used))) = c.decode(&bytes) {
            prop_assert!(used <= bytes.len() && used >= 8);
        }
    }

    #[test]
    fn headers_with_any_fields_never_panic(t in 0u8..12, flags: u8, hlen: u8, pdo: u8, plen in 0u32..4096, rest in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let c = ready(flags & 0x80 != 0, flags & 0x40 != 0);
        let mut p = vec![t, flags, hlen, pdo];
        p.extend_from_slice(&plen.to_le_bytes());
        p.extend_from_slice(&rest);
        match c.decode(&p) {
            Ok(Some((_, used))) => prop_assert_eq!(used, plen as usize),
            Ok(None) => prop_assert!((plen as usize) > p.len()),
            Err(_) => {}
        }
    }
}

#[test]
fn target_pdus_have_the_layout_linux_reads() {
    for (hd, dd) in [(false, false), (true, false), (false, true), (true, true)] {
        let c = ready(hd, dd);
        let mut out = Vec::new();
        c.c2h_data(&mut out, 0x1234, 0, &[7u8; 100], true);
        // Linux reads a fixed 24-byte header (+4 with HDGST) and ignores PDO: data follows.
        let h = 24 + if hd { 4 } else { 0 };
        assert_eq!(out[0], 7);
        assert_eq!(out[1] & 0x04, 0x04, "LAST_PDU");
        assert_eq!(usize::from(out[3]), h, "PDO");
        assert_eq!(
            u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize,
            out.len(),
            "PLEN"
        );
        assert_eq!(&out[h..h + 100], &[7u8; 100]);
        if hd {
            assert_eq!(
                u32::from_le_bytes(out[24..28].try_into().unwrap()),
                crc32c(&out[..24])
            );
        }
        if dd {
            assert_eq!(
                u32::from_le_bytes(out[h + 100..].try_into().unwrap()),
                crc32c(&[7u8; 100])
            );
        }
        let mut r = Vec::new();
        c.r2t(&mut r, 5, 6, 4096, 8192);
        assert_eq!((r[0], r[2], r.len()), (9, 24, h));
        let mut ic = Vec::new();
        c.icresp(&mut ic);
        assert_eq!(
            (ic[0], ic[2], ic.len(), ic[10], ic[11]),
            (1, 128, 128, 0, u8::from(hd) | u8::from(dd) << 1)
        );
        assert_eq!(
            u32::from_le_bytes(ic[12..16].try_into().unwrap()),
            16 * 1024
        );
    }
}

#[test]
fn oversized_pdus_fail_at_the_common_header() {
    let c = ready(false, false);
    // A capsule announcing 1 MiB of in-capsule data fails before the bytes arrive.
    let mut p = vec![CAPSULE_CMD, 0, 72, 72];
    p.extend_from_slice(&(72u32 + (1 << 20)).to_le_bytes());
    assert!(matches!(
        c.decode(&p),
        Err(vfnvme_target::PduError::TooLong { .. })
    ));
    // ICReq on a ready connection, and a capsule before ICReq.
    let mut ic = vec![0u8; 128];
    ic[2] = 128;
    ic[4] = 128;
    assert!(c.decode(&ic).is_err());
    let fresh = Codec::new(16 * 1024, 8192);
    assert!(matches!(fresh.decode(&ic), Ok(Some((Pdu::IcReq(_), 128)))));
    assert!(fresh.decode(&capsule(&fresh, &[0; 64], &[])).is_err());
}
