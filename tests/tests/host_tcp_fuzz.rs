//! Host test (model), seeded and bounded for CI: hostile hosts against one `vfnvme-target`.
//! Each round opens a connection, brings it up (or not), then sends well-framed capsules with
//! random opcodes, fields, SGLs and in-capsule data, stray H2CData, and finally raw mutated
//! bytes. After every round a clean host must still write and read back through its own
//! queues: the target survives everything and other hosts never notice.
//! `VFNVME_FUZZ_ITERS` (rounds, default 100) and `VFNVME_FUZZ_SEED` run it longer.

use std::io::Write;
use vfnvme_tests::tcp_client::{crc32c, Client};
use vfnvme_tests::tcp_target::{bring_up, start};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A capsule with random content around a chosen opcode (admin, fabrics or NVM).
fn random_sqe(r: &mut Rng) -> [u8; 64] {
    let mut sqe = [0u8; 64];
    for b in sqe.iter_mut() {
        *b = r.next() as u8;
    }
    const OPS: [u8; 12] = [
        0x00, 0x01, 0x02, 0x06, 0x02, 0x09, 0x0A, 0x0C, 0x18, 0x7F, 0x7F, 0xFF,
    ];
    sqe[0] = OPS[r.below(OPS.len() as u64) as usize];
    if r.below(2) == 0 {
        sqe[4] = [0u8, 1, 4, 8, 0x55][r.below(5) as usize]; // fctype, or the nsid's low byte
        sqe[5..8].fill(0);
    }
    if r.below(2) == 0 {
        sqe[39] = [0x01, 0x5A, 0x00, 0xFF][r.below(4) as usize];
        let len = [0u32, 512, 4096, 1024, 1 << 20, u32::MAX][r.below(6) as usize];
        sqe[32..36].copy_from_slice(&len.to_le_bytes());
    }
    if r.below(2) == 0 {
        sqe[48..52].copy_from_slice(&(r.below(300) as u32).to_le_bytes()); // NLB
        sqe[40..48].copy_from_slice(&r.below(1 << 17).to_le_bytes()); // SLBA
    }
    sqe
}

fn capsule(sqe: &[u8; 64], data: &[u8]) -> Vec<u8> {
    let pdo = if data.is_empty() { 0 } else { 72 };
    let mut p = vec![4u8, 0, 72, pdo];
    p.extend_from_slice(&((72 + data.len()) as u32).to_le_bytes());
    p.extend_from_slice(sqe);
    p.extend_from_slice(data);
    p
}

#[test]
fn hostile_hosts_never_hurt_the_target_or_other_hosts() {
    let rounds: u64 = std::env::var("VFNVME_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let seed: u64 = std::env::var("VFNVME_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0007_c935);
    let t = start();
    let (_admin, mut good, _) = bring_up(t.addr, true);
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    assert_eq!(good.write(1, 100, &data, 512).status, 0);
    let mut r = Rng(seed | 1);
    for round in 0..rounds {
        let mut bad = Client::open(t.addr).expect("connect");
        let stage = r.below(3);
        if stage >= 1 {
            bad.icreq(false, false);
        }
        if stage == 2 {
            // Its own controller with an I/O queue, then garbage on the I/O queue.
            let (_a, io, _) = bring_up(t.addr, false);
            bad = io;
        }
        let mut stream = Vec::new();
        for _ in 0..1 + r.below(40) {
            let sqe = random_sqe(&mut r);
            let n = [0usize, 0, 16, 512, 1024, 4096][r.below(6) as usize];
            let d: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
            stream.extend(capsule(&sqe, &d));
            if r.below(5) == 0 {
                // Stray H2CData.
                let len = 1 + r.below(600) as u32;
                let mut h = vec![6u8, 4, 24, 24];
                h.extend_from_slice(&(24 + len).to_le_bytes());
                h.extend_from_slice(&(r.next() as u32).to_le_bytes());
                h.extend_from_slice(&(r.below(4096) as u32).to_le_bytes());
                h.extend_from_slice(&len.to_le_bytes());
                h.extend_from_slice(&[0; 4]);
                h.extend((0..len).map(|i| i as u8));
                stream.extend(h);
            }
        }
        // Mutate a few bytes, sometimes, and end with raw noise, sometimes.
        for _ in 0..r.below(3) {
            let i = r.below(stream.len() as u64) as usize;
            stream[i] ^= 1 << r.below(8);
        }
        if r.below(2) == 0 {
            stream.extend((0..r.below(100)).map(|_| r.next() as u8));
        }
        // The target may close the socket mid-stream: a send error is an expected outcome.
        let _ = bad.stream.write_all(&stream);
        drop(bad);
        // A well-behaved host is unaffected.
        let (c, back) = good.read(1, 100, 8, 512);
        assert_eq!(c.status, 0, "round {round} (seed {seed:#x}): {c:?}");
        assert!(back == data, "round {round} (seed {seed:#x}): data changed");
    }
    // And the target still takes new hosts.
    let (_a, mut io, _) = bring_up(t.addr, false);
    let (c, back) = io.read(1, 100, 8, 512);
    assert_eq!(c.status, 0);
    assert!(back == data);
    assert_ne!(crc32c(&back), 0);
    let report = t.stop();
    assert_eq!(report.abandoned, 0, "{report:?}");
}
