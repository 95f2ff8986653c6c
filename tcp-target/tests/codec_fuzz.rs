//! Seeded fuzzing of the PDU parser, bounded for CI: streams of valid host PDUs, mutated
//! (bit flips, byte overwrites, truncation, insertion, splices of other PDUs), fed to a
//! connection-like loop in random chunk sizes. The parser must never panic, never claim bytes
//! it was not given, make progress on every PDU it accepts, and stop at its first error.
//! `VFNVME_FUZZ_ITERS` runs longer (default 3000 streams); `VFNVME_FUZZ_SEED` picks the seed.

use vfnvme_target::codec::Codec;
use vfnvme_target::digest::crc32c;

/// xorshift64*: a small deterministic generator, so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn pdu(c: &Codec, t: u8, flags: u8, header: &[u8], data: &[u8]) -> Vec<u8> {
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

/// One valid host PDU of a random kind.
fn valid_pdu(r: &mut Rng, c: &Codec) -> Vec<u8> {
    match r.below(3) {
        0 => {
            let data_len = if r.below(2) == 0 { 0 } else { r.below(8193) };
            let sqe = r.bytes(64);
            let data = r.bytes(data_len);
            pdu(c, 4, 0, &sqe, &data)
        }
        1 => {
            let n = 1 + r.below(16 * 1024);
            let mut h = r.bytes(8);
            h.extend_from_slice(&(n as u32).to_le_bytes());
            h.extend_from_slice(&[0; 4]);
            let data = r.bytes(n);
            pdu(c, 6, 0x04, &h, &data)
        }
        _ => {
            let n = r.below(153);
            let h = r.bytes(16);
            let d = r.bytes(n);
            pdu(c, 2, 0, &h, &d)
        }
    }
}

fn mutate(r: &mut Rng, s: &mut Vec<u8>, pool: &[Vec<u8>]) {
    if s.is_empty() {
        return;
    }
    for _ in 0..1 + r.below(4) {
        let i = r.below(s.len());
        match r.below(6) {
            0 => s[i] ^= 1 << r.below(8),
            1 => s[i] = r.next() as u8,
            2 => s.truncate(i),
            3 => {
                let n = 1 + r.below(16);
                let b = r.bytes(n);
                s.splice(i..i, b);
            }
            4 => {
                let other = &pool[r.below(pool.len())];
                s.splice(i..i, other.iter().copied());
            }
            _ => {
                // A plausible header with a random PLEN.
                let plen = r.next() as u32;
                if i + 8 <= s.len() {
                    s[i + 4..i + 8].copy_from_slice(&plen.to_le_bytes());
                }
            }
        }
        if s.is_empty() {
            return;
        }
    }
}

/// Feeds `stream` in random chunks through a bounded receive buffer, as a connection does.
fn feed(r: &mut Rng, c: &Codec, stream: &[u8]) -> (usize, bool) {
    let cap = [0, 4, 6, 2]
        .map(|t| c.max_plen(t))
        .into_iter()
        .max()
        .unwrap() as usize
        + 4096;
    let mut buf = Vec::with_capacity(cap);
    let mut at = 0;
    let mut accepted = 0;
    while at < stream.len() {
        let n = (1 + r.below(9000))
            .min(stream.len() - at)
            .min(cap - buf.len());
        buf.extend_from_slice(&stream[at..at + n]);
        at += n;
        loop {
            match c.decode(&buf) {
                Ok(Some((_, used))) => {
                    assert!(
                        used >= 8 && used <= buf.len(),
                        "claimed {used} of {}",
                        buf.len()
                    );
                    buf.drain(..used);
                    accepted += 1;
                }
                Ok(None) => {
                    assert!(
                        buf.len() < cap,
                        "a full buffer must hold a whole PDU: {:?} cap {cap}",
                        &buf[..16]
                    );
                    break;
                }
                Err(e) => {
                    // A typed error with a FES the spec defines.
                    assert!((1..=6).contains(&(e.fes() as u16)), "{e}");
                    return (accepted, true);
                }
            }
        }
    }
    (accepted, false)
}

#[test]
fn mutated_pdu_streams_never_panic_the_parser() {
    let iters: usize = std::env::var("VFNVME_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let seed: u64 = std::env::var("VFNVME_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x005e_ed35);
    let mut r = Rng(seed | 1);
    let (mut errors, mut clean, mut pdus) = (0, 0, 0);
    for _ in 0..iters {
        let mut c = Codec::new(16 * 1024, 8192);
        c.ready = true;
        c.hdgst = r.below(2) == 0;
        c.ddgst = r.below(2) == 0;
        let pool: Vec<Vec<u8>> = (0..1 + r.below(6)).map(|_| valid_pdu(&mut r, &c)).collect();
        let mut stream: Vec<u8> = pool.concat();
        let valid_len = stream.len();
        let mutated = r.below(8) != 0;
        if mutated {
            mutate(&mut r, &mut stream, &pool);
        } else if r.below(2) == 0 {
            let n = r.below(64);
            stream.extend(r.bytes(n));
        }
        let (n, err) = feed(&mut r, &c, &stream);
        pdus += n;
        if err {
            errors += 1;
        } else {
            clean += 1;
        }
        if !mutated && stream.len() == valid_len {
            assert!(!err, "seed {seed:#x}: a valid stream was refused");
            assert_eq!(n, pool.len(), "seed {seed:#x}: every valid PDU parses");
        }
    }
    println!(
        "{iters} streams: {errors} ended in a typed error, {clean} clean, {pdus} PDUs accepted"
    );
    assert!(
        errors > iters / 4 && clean > 0,
        "the generator covers both outcomes"
    );
}

#[test]
fn random_bytes_before_icreq_fail_fast() {
    let mut r = Rng(0x0001_c4e9);
    for _ in 0..5000 {
        let c = Codec::new(16 * 1024, 8192);
        let n = 8 + r.below(200);
        let b = r.bytes(n);
        // Before ICReq only an ICReq header (type 0, HLEN 128) can wait for more bytes.
        if let Ok(None) = c.decode(&b) {
            assert!(b[0] == 0 && b[2] == 128);
        }
    }
}
