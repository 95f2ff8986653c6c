use super::*;

struct Xorshift(u64);
impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Random SQE bytes on the admin and an I/O queue, random doorbells, CC toggles: the model must
/// neither panic nor touch memory outside its mappings.
#[test]
fn random_commands_and_doorbells_never_panic() {
    let mut b = Bench::new(ModelConfig {
        mdts: 0,
        ..config()
    });
    let mut q = b.qpair(1, 64);
    let mut rng = Xorshift(0x9E37_79B9_7F4A_7C15);
    let mapped = q.sq.iova();
    for round in 0..3000 {
        let ring = if round % 3 == 0 { &mut b.admin } else { &mut q };
        let mut e = [0u8; 64];
        for chunk in e.chunks_exact_mut(8) {
            chunk.copy_from_slice(&rng.next().to_le_bytes());
        }
        // Keep some commands plausible: small opcodes, PRP1 inside live memory (the I/O SQ
        // ring: 4096 bytes, so a transfer up to PRP1's page end stays inside it; beyond its
        // length the model would rightly refuse and record the access).
        e[0] %= 0x20;
        e[1] = 0;
        if rng.next().is_multiple_of(2) {
            e[24..32].copy_from_slice(&(mapped + ((rng.next() % 4096) & !3)).to_le_bytes());
        }
        ring.put(e);
        ring.ring(&b.p);
        let _ = ring.reap(&b.p);
        if rng.next().is_multiple_of(7) {
            let off = 0x1000 + (rng.next() % 40) as usize * 4;
            poke32(b.p.regs(), off, rng.next() as u32 % 128);
        }
        b.p.relax();
    }
    // CC toggles with random fields and addresses.
    for _ in 0..200 {
        let r = b.p.regs();
        poke64(r, 0x28, rng.next());
        poke64(r, 0x30, rng.next() & !4095);
        poke32(r, 0x24, rng.next() as u32);
        poke32(r, 0x14, rng.next() as u32);
        poke32(r, 0x1000, rng.next() as u32 % 64);
        b.p.before_poll(0);
        b.p.relax();
    }
}

#[test]
fn queue_pairs_on_several_threads() {
    let mut b = Bench::new(config());
    let rings: Vec<Ring> = (1..=4).map(|qid| b.qpair(qid, 32)).collect();
    let p = b.p.clone();
    let handles: Vec<_> = rings
        .into_iter()
        .map(|mut q| {
            let p = p.clone();
            std::thread::spawn(move || {
                let lba0 = u64::from(q.qid) * 1000;
                for i in 0..50u64 {
                    let mut w = p.dma().alloc(4096).unwrap();
                    w.as_mut_slice().fill((q.qid as u8) ^ (i as u8));
                    let lba = lba0 + i * 8;
                    let c = q.run(
                        &p,
                        sqe(0x01, i as u16, 1, w.iova(), 0, [lba as u32, 0, 7, 0, 0, 0]),
                    );
                    assert_eq!(c.status, 0);
                    let r = p.dma().alloc(4096).unwrap();
                    let c = q.run(
                        &p,
                        sqe(0x02, i as u16, 1, r.iova(), 0, [lba as u32, 0, 7, 0, 0, 0]),
                    );
                    assert_eq!((c.status, c.sqid), (0, q.qid));
                    assert_eq!(r.as_slice(), w.as_slice());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = p.stats();
    assert_eq!((s.io(0x01), s.io(0x02)), (200, 200));
}

/// A device write into a page the host gave back is refused like an IOMMU fault and recorded,
/// and dropping the platform then fails the test that caused it.
#[test]
fn a_device_write_into_freed_memory_is_refused_recorded_and_fails_the_test() {
    let mut b = Bench::new(config());
    let page = b.p.dma().alloc(4096).unwrap();
    let iova = page.iova();
    drop(page);
    let c = b.admin(0x06, 0, iova, 0, [1, 0, 0, 0, 0, 0]); // Identify Controller
    assert_ne!(c.status, 0, "the transfer was refused");
    let v = b.p.dma_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].contains(&format!("write of 4096 bytes at IOVA {iova:#x}")),
        "{v:?}"
    );
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(b)));
    assert!(dropped.is_err(), "dropping the platform panics");
}

/// A device write past the length the host allocated is refused and recorded even where it
/// stays inside the pool chunk behind the allocation (the chunk's spare bytes are not the
/// caller's buffer): for admin data (Identify) and for an I/O read.
#[test]
fn a_device_write_past_the_allocated_length_inside_the_chunk_is_refused_and_recorded() {
    let mut b = Bench::new(config());
    let id = b.p.dma().alloc(2048).unwrap();
    assert_eq!(id.capacity(), 4096, "one 4 KiB chunk behind 2 KiB");
    let c = b.admin(0x06, 0, id.iova(), 0, [1, 0, 0, 0, 0, 0]); // Identify: 4096 bytes
    assert_ne!(c.status, 0, "the transfer was refused");
    assert!(id.as_slice().iter().all(|&x| x == 0), "nothing written");
    let mut q = b.qpair(1, 8);
    let data = b.p.dma().alloc(3000).unwrap();
    assert_eq!(data.capacity(), 4096);
    // Read 8 blocks of 512 bytes (4096) into the 3000-byte buffer.
    let c = q.run(&b.p, sqe(0x02, 7, 1, data.iova(), 0, [0, 0, 7, 0, 0, 0]));
    assert_ne!(c.status, 0, "the transfer was refused");
    let v = b.p.dma_violations();
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v[0].contains(&format!("write of 4096 bytes at IOVA {:#x}", id.iova())),
        "{v:?}"
    );
    assert!(
        v[1].contains(&format!("write of 4096 bytes at IOVA {:#x}", data.iova())),
        "{v:?}"
    );
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(b)));
    assert!(dropped.is_err(), "dropping the platform panics");
}
