//! Protection information on the device side, as QEMU 7.2 does it: PRACT insert/strip, PRCHK
//! checks on reads and writes, the statuses, types 1-3, PI first or last, extended and
//! separate metadata, unwritten blocks.

use super::*;
use crate::ModelMetadata;
use vfnvme_hal::pi::{crc16_t10dif, guard, Pi, PiLocation, PiType};

const PRACT: u32 = 1 << 29;
const CHK_GUARD: u32 = 1 << 28;
const CHK_APP: u32 = 1 << 27;
const CHK_REF: u32 = 1 << 26;

/// An I/O command with PRINFO bits `prinfo`, CDW14 `reftag`, CDW15 `app | mask << 16`.
#[allow(clippy::too_many_arguments)]
fn io(
    op: u8,
    lba: u64,
    nlb: u32,
    buf: &DmaBuffer,
    mptr: u64,
    prinfo: u32,
    reftag: u32,
    app: u16,
    mask: u16,
) -> [u8; 64] {
    let cdw = [
        lba as u32,
        (lba >> 32) as u32,
        (nlb - 1) | prinfo,
        0,
        reftag,
        u32::from(app) | u32::from(mask) << 16,
    ];
    let mut e = sqe(op, 0, 1, buf.iova(), buf.iova() + 4096, cdw);
    e[16..24].copy_from_slice(&mptr.to_le_bytes());
    e
}

/// A model whose namespace 1 has 512-byte blocks formatted with `md`, and an I/O queue.
fn bench(md: ModelMetadata) -> (Bench, Ring) {
    let mut cfg = config();
    cfg.namespace_metadata = vec![(1, md)];
    let mut b = Bench::new(cfg);
    let q = b.qpair(1, 16);
    (b, q)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed))
        .collect()
}

struct Dev {
    b: Bench,
    q: Ring,
}

impl Dev {
    fn new(md: ModelMetadata) -> Dev {
        let (b, q) = bench(md);
        Dev { b, q }
    }
    fn buf(&self, fill: &[u8]) -> DmaBuffer {
        let mut buf = self.b.p.dma().alloc(8192).unwrap();
        buf.as_mut_slice().fill(0xEE);
        buf.as_mut_slice()[..fill.len()].copy_from_slice(fill);
        buf
    }
    /// Runs `e` and returns its status (SC | SCT << 8) and DNR.
    fn run(&mut self, mut e: [u8; 64]) -> (u16, bool) {
        let cid = self.b.cid();
        e[2..4].copy_from_slice(&cid.to_le_bytes());
        let c = self.q.run(&self.b.p, e);
        (c.status, c.dnr)
    }
    /// Reads `nlb` blocks raw (PRACT=0, no checks), extended: data and metadata interleaved.
    fn raw_extended(&mut self, lba: u64, nlb: u32, ms: usize) -> Vec<u8> {
        let buf = self.buf(&[]);
        assert_eq!(self.run(io(2, lba, nlb, &buf, 0, 0, 0, 0, 0)).0, 0);
        buf.as_slice()[..nlb as usize * (512 + ms)].to_vec()
    }
    /// Reads `nlb` blocks raw from a separate-metadata namespace: (data, metadata).
    fn raw_separate(&mut self, lba: u64, nlb: u32, ms: usize) -> (Vec<u8>, Vec<u8>) {
        let (data, md) = (self.buf(&[]), self.buf(&[]));
        let e = io(2, lba, nlb, &data, md.iova(), 0, 0, 0, 0);
        assert_eq!(self.run(e).0, 0);
        let n = nlb as usize;
        (
            data.as_slice()[..n * 512].to_vec(),
            md.as_slice()[..n * ms].to_vec(),
        )
    }
}

fn ext8(ty: PiType) -> ModelMetadata {
    ModelMetadata::new(8, true).with_pi(ty, PiLocation::Last)
}

#[test]
fn pract_write_generates_type1_pi_and_pract_read_strips_it() {
    let mut d = Dev::new(ext8(PiType::Type1));
    let data = pattern(4 * 512, 1);
    let w = d.buf(&data);
    // PRACT with 8-byte metadata: only the data moves.
    let e = io(1, 10, 4, &w, 0, PRACT | CHK_REF, 10, 0x1234, 0xFFFF);
    assert_eq!(d.run(e), (0, false));
    let raw = d.raw_extended(10, 4, 8);
    for (i, block) in raw.chunks(520).enumerate() {
        assert_eq!(&block[..512], &data[i * 512..][..512]);
        let pi = Pi::read_from(&block[512..]).unwrap();
        assert_eq!(pi.guard, crc16_t10dif(&block[..512]), "block {i}");
        assert_eq!((pi.app, pi.reference), (0x1234, 10 + i as u32));
    }
    let r = d.buf(&[]);
    let all = PRACT | CHK_GUARD | CHK_APP | CHK_REF;
    assert_eq!(
        d.run(io(2, 10, 4, &r, 0, all, 10, 0x1234, 0xFFFF)),
        (0, false)
    );
    assert_eq!(&r.as_slice()[..2048], &data[..]);
    assert!(
        r.as_slice()[2048..2100].iter().all(|&b| b == 0xEE),
        "PI stripped"
    );
}

#[test]
fn a_wrong_guard_fails_the_read_at_that_lba_only() {
    let mut d = Dev::new(ext8(PiType::Type1));
    // PRACT=0, no checks: the host's PI is stored as given, LBA 6's guard wrong.
    let mut ext = Vec::new();
    for lba in 4..8u32 {
        let data = pattern(512, lba as u8);
        let mut pi = Pi {
            guard: crc16_t10dif(&data),
            app: 0,
            reference: lba,
        };
        if lba == 6 {
            pi.guard ^= 1;
        }
        ext.extend_from_slice(&data);
        ext.extend_from_slice(&pi.encode());
    }
    let w = d.buf(&ext);
    assert_eq!(d.run(io(1, 4, 4, &w, 0, 0, 0, 0, 0)).0, 0);
    for lba in 4..8u64 {
        let r = d.buf(&[]);
        let status = d.run(io(2, lba, 1, &r, 0, CHK_GUARD, lba as u32, 0, 0));
        if lba == 6 {
            assert_eq!(status, (0x282, false));
            assert!(
                r.as_slice().iter().all(|&b| b == 0xEE),
                "nothing transferred"
            );
        } else {
            assert_eq!(status, (0, false), "lba {lba}");
        }
    }
    // The whole range fails; without the guard check it reads.
    let r = d.buf(&[]);
    assert_eq!(d.run(io(2, 4, 4, &r, 0, CHK_GUARD, 4, 0, 0)).0, 0x282);
    assert_eq!(
        d.run(io(2, 4, 4, &r, 0, CHK_APP | CHK_REF, 4, 0, 0xFFFF)).0,
        0
    );
    assert_eq!(&r.as_slice()[..ext.len()], &ext[..]);
}

#[test]
fn a_write_with_a_failing_check_stores_nothing() {
    let mut d = Dev::new(ext8(PiType::Type2));
    let mut ext = pattern(520, 3);
    Pi {
        guard: 0xBAD,
        app: 1,
        reference: 2,
    }
    .write_to(&mut ext[512..]);
    let w = d.buf(&ext);
    assert_eq!(
        d.run(io(1, 9, 1, &w, 0, CHK_GUARD, 2, 1, 0)),
        (0x282, false)
    );
    // LBA 9 is still unwritten: PI all FFh, data zero.
    let raw = d.raw_extended(9, 1, 8);
    assert!(raw[..512].iter().all(|&b| b == 0));
    assert_eq!(Pi::read_from(&raw[512..]).unwrap(), Pi::ALL_ONES);
    // The app and ref checks on write too.
    Pi {
        guard: crc16_t10dif(&ext[..512]),
        app: 1,
        reference: 2,
    }
    .write_to(&mut ext[512..]);
    let w = d.buf(&ext);
    assert_eq!(d.run(io(1, 9, 1, &w, 0, CHK_APP, 2, 3, 0xFFFF)).0, 0x283);
    assert_eq!(d.run(io(1, 9, 1, &w, 0, CHK_REF, 3, 1, 0xFFFF)).0, 0x284);
    assert_eq!(
        d.run(io(
            1,
            9,
            1,
            &w,
            0,
            CHK_GUARD | CHK_APP | CHK_REF,
            2,
            1,
            0xFFFF
        ))
        .0,
        0
    );
}

#[test]
fn application_tag_compared_under_the_mask() {
    let mut d = Dev::new(ext8(PiType::Type1));
    let w = d.buf(&pattern(512, 9));
    assert_eq!(d.run(io(1, 3, 1, &w, 0, PRACT, 3, 0x1234, 0)).0, 0);
    let r = d.buf(&[]);
    assert_eq!(d.run(io(2, 3, 1, &r, 0, CHK_APP, 3, 0x12FF, 0xFF00)).0, 0);
    assert_eq!(
        d.run(io(2, 3, 1, &r, 0, CHK_APP, 3, 0x1235, 0xFFFF)),
        (0x283, false)
    );
}

#[test]
fn reference_tags_by_type() {
    // Type 1: CDW14 must be the LBA when the reference check is on (1h/81h, DNR).
    let mut d = Dev::new(ext8(PiType::Type1));
    let w = d.buf(&pattern(1024, 5));
    assert_eq!(
        d.run(io(1, 7, 2, &w, 0, PRACT | CHK_REF, 8, 0, 0)),
        (0x181, true)
    );
    assert_eq!(d.run(io(1, 7, 2, &w, 0, PRACT, 7, 0, 0)).0, 0);
    let r = d.buf(&[]);
    assert_eq!(d.run(io(2, 7, 2, &r, 0, CHK_REF, 8, 0, 0)), (0x181, true));
    assert_eq!(d.run(io(2, 8, 1, &r, 0, CHK_REF, 8, 0, 0)).0, 0);

    // Type 2: the caller's tag, incremented per block.
    let mut d = Dev::new(ext8(PiType::Type2));
    let w = d.buf(&pattern(1024, 5));
    assert_eq!(d.run(io(1, 3, 2, &w, 0, PRACT | CHK_REF, 0x500, 0, 0)).0, 0);
    let raw = d.raw_extended(3, 2, 8);
    assert_eq!(Pi::read_from(&raw[512..]).unwrap().reference, 0x500);
    assert_eq!(Pi::read_from(&raw[1032..]).unwrap().reference, 0x501);
    let r = d.buf(&[]);
    assert_eq!(d.run(io(2, 3, 2, &r, 0, CHK_REF, 0x500, 0, 0)).0, 0);
    assert_eq!(
        d.run(io(2, 3, 2, &r, 0, CHK_REF, 0x501, 0, 0)),
        (0x284, false)
    );
    assert_eq!(d.run(io(2, 4, 1, &r, 0, CHK_REF, 0x501, 0, 0)).0, 0);

    // Type 3: the caller's tag on every block, checked as given.
    let mut d = Dev::new(ext8(PiType::Type3));
    let w = d.buf(&pattern(1024, 5));
    assert_eq!(d.run(io(1, 3, 2, &w, 0, PRACT, 0x77, 0xA, 0)).0, 0);
    let raw = d.raw_extended(3, 2, 8);
    assert_eq!(Pi::read_from(&raw[512..]).unwrap().reference, 0x77);
    assert_eq!(Pi::read_from(&raw[1032..]).unwrap().reference, 0x77);
    let all = CHK_GUARD | CHK_APP | CHK_REF;
    let r = d.buf(&[]);
    assert_eq!(d.run(io(2, 3, 2, &r, 0, all, 0x77, 0xA, 0xFFFF)).0, 0);
    assert_eq!(d.run(io(2, 3, 2, &r, 0, all, 0x78, 0xA, 0xFFFF)).0, 0x284);
}

#[test]
fn pi_first_or_last_in_separate_16_byte_metadata() {
    for loc in [PiLocation::First, PiLocation::Last] {
        let md = ModelMetadata::new(16, false).with_pi(PiType::Type1, loc);
        let mut d = Dev::new(md);
        let data = pattern(2 * 512, 11);
        let host_md = pattern(32, 200);
        let (w, m) = (d.buf(&data), d.buf(&host_md));
        // PRACT with 16-byte metadata: the host's metadata moves, its PI part replaced.
        let e = io(1, 20, 2, &w, m.iova(), PRACT, 20, 0xAB, 0);
        assert_eq!(d.run(e).0, 0);
        let (back, back_md) = d.raw_separate(20, 2, 16);
        assert_eq!(back, data);
        let at = if loc == PiLocation::First { 0 } else { 8 };
        let other = if loc == PiLocation::First { 8 } else { 0 };
        for i in 0..2 {
            let blk = &back_md[i * 16..][..16];
            assert_eq!(
                blk[other..other + 8],
                host_md[i * 16 + other..][..8],
                "kept"
            );
            let pi = Pi::read_from(&blk[at..]).unwrap();
            let covered = if at == 8 { &blk[..8] } else { &[][..] };
            assert_eq!(pi.guard, guard(&data[i * 512..][..512], covered), "{loc:?}");
            assert_eq!((pi.app, pi.reference), (0xAB, 20 + i as u32));
        }
        // A metadata byte the guard covers (PI last) breaks the guard; one it doesn't, not.
        let mut bad_md = back_md.clone();
        bad_md[if at == 8 { 0 } else { 15 }] ^= 1;
        let m2 = d.buf(&bad_md);
        assert_eq!(d.run(io(1, 20, 2, &w, m2.iova(), 0, 0, 0, 0)).0, 0);
        let (r, rm) = (d.buf(&[]), d.buf(&[]));
        let status = d.run(io(2, 20, 2, &r, rm.iova(), CHK_GUARD, 20, 0, 0)).0;
        assert_eq!(status, if at == 8 { 0x282 } else { 0 }, "{loc:?}");
    }
}

#[test]
fn separate_8_byte_metadata_with_pract_moves_no_metadata() {
    let md = ModelMetadata::new(8, false).with_pi(PiType::Type1, PiLocation::First);
    let mut d = Dev::new(md);
    let data = pattern(1024, 2);
    let w = d.buf(&data);
    // MPTR 0 is never touched: PRACT strips and inserts the whole metadata.
    assert_eq!(d.run(io(1, 0, 2, &w, 0, PRACT, 0, 5, 0)).0, 0);
    let r = d.buf(&[]);
    let e = io(
        2,
        0,
        2,
        &r,
        0,
        PRACT | CHK_GUARD | CHK_REF | CHK_APP,
        0,
        5,
        0xFFFF,
    );
    assert_eq!(d.run(e).0, 0);
    assert_eq!(&r.as_slice()[..1024], &data[..]);
    let (_, md) = d.raw_separate(0, 2, 8);
    assert_eq!(Pi::read_from(&md[8..]).unwrap().reference, 1);
    assert_eq!(
        read_status_with_mptr_0(&mut d),
        0x04,
        "PRACT=0 moves metadata: MPTR 0 faults"
    );
}

/// A PRACT=0 read of a separate-metadata namespace with MPTR 0.
fn read_status_with_mptr_0(d: &mut Dev) -> u16 {
    let r = d.buf(&[]);
    d.run(io(2, 0, 1, &r, 0, 0, 0, 0, 0)).0
}

#[test]
fn unwritten_and_zeroed_blocks_read_back_with_pi_all_ones() {
    let mut d = Dev::new(ext8(PiType::Type1));
    let r = d.buf(&[]);
    let all = CHK_GUARD | CHK_APP | CHK_REF;
    assert_eq!(d.run(io(2, 100, 2, &r, 0, all, 100, 0x55, 0xFFFF)).0, 0);
    let raw = d.raw_extended(100, 2, 8);
    assert_eq!(Pi::read_from(&raw[512..]).unwrap(), Pi::ALL_ONES);
    // Write, then Write Zeroes: deallocated, PI all FFh again.
    let w = d.buf(&pattern(1024, 1));
    assert_eq!(d.run(io(1, 100, 2, &w, 0, PRACT, 100, 0x55, 0)).0, 0);
    assert_eq!(d.run(io(8, 100, 2, &w, 0, 0, 0, 0, 0)).0, 0);
    let raw = d.raw_extended(100, 2, 8);
    assert!(raw[..512].iter().all(|&b| b == 0));
    assert_eq!(Pi::read_from(&raw[1032..]).unwrap(), Pi::ALL_ONES);
    // Write Zeroes refuses check bits, and with PRACT writes PI for the zeroes.
    assert_eq!(
        d.run(io(8, 100, 2, &w, 0, CHK_GUARD, 0, 0, 0)),
        (0x181, true)
    );
    assert_eq!(d.run(io(8, 100, 2, &w, 0, PRACT, 100, 0x66, 0)).0, 0);
    let raw = d.raw_extended(100, 2, 8);
    let pi = Pi::read_from(&raw[1032..]).unwrap();
    assert_eq!((pi.guard, pi.app, pi.reference), (0, 0x66, 101));
    assert_eq!(d.run(io(2, 100, 2, &r, 0, all, 100, 0x66, 0xFFFF)).0, 0);
}

#[test]
fn a_zeroed_first_block_at_lba_0_passes_a_guard_error_as_qemu_does() {
    let mut d = Dev::new(ext8(PiType::Type1));
    let mut ext = vec![0u8; 520];
    Pi {
        guard: 0x1111,
        app: 0,
        reference: 0,
    }
    .write_to(&mut ext[512..]);
    let w = d.buf(&ext);
    assert_eq!(d.run(io(1, 0, 1, &w, 0, 0, 0, 0, 0)).0, 0);
    let r = d.buf(&[]);
    assert_eq!(d.run(io(2, 0, 1, &r, 0, CHK_GUARD, 0, 0, 0)).0, 0);
    assert_eq!(Pi::read_from(&r.as_slice()[512..]).unwrap(), Pi::ALL_ONES);
}

#[test]
fn identify_namespace_reports_dps_dpc_and_mc() {
    let md = ModelMetadata::new(8, true).with_pi(PiType::Type3, PiLocation::First);
    let (mut b, _q) = bench(md);
    let (c, buf) = b.identify(0, 1);
    assert_eq!(c.status, 0);
    let id = buf.as_slice();
    assert_eq!((id[27], id[28], id[29]), (3, 0x1F, 3 | 8));
    assert_eq!(id[26], 2 | 1 << 4, "FLBAS: format 2, extended");
    // Format NVM with PI type 2, PIL (bit 8): DPS 2 | 8.
    let c = b.admin(0x80, 1, 0, 0, [2 | 2 << 5 | 1 << 8, 0, 0, 0, 0, 0]);
    assert_eq!(c.status, 0);
    let (_, buf) = b.identify(0, 1);
    assert_eq!(buf.as_slice()[29], 2 | 8);
}

#[test]
fn metadata_config_with_a_bad_pi_byte_is_refused() {
    for pi in [4u8, 8, 0x13] {
        let mut cfg = config();
        cfg.namespace_metadata = vec![(
            1,
            ModelMetadata {
                ms: 8,
                extended: true,
                pi,
            },
        )];
        assert!(ModelPlatform::new(cfg).is_err(), "pi {pi:#x}");
    }
    let md = ModelMetadata::new(8, false).with_pi(PiType::Type2, PiLocation::First);
    assert_eq!(md.pi, 2 | 8);
    assert_eq!(md.pi_type(), Some(PiType::Type2));
    assert_eq!(md.pi_location(), PiLocation::First);
    assert_eq!(md.pi_format(512).dps(), 2 | 8);
}
