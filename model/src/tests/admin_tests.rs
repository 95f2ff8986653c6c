use super::*;

fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}
fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

#[test]
fn identify_controller_fields() {
    let mut b = Bench::new(ModelConfig {
        serial: "SN42".into(),
        model: "M".into(),
        firmware: "F9".into(),
        mdts: 6,
        nn: 77,
        ..config()
    });
    let (c, buf) = b.identify(1, 0);
    assert_eq!(c.status, 0);
    let d = buf.as_slice();
    assert_eq!(le16(d, 0), 0x1b36);
    assert_eq!(&d[4..24], b"SN42                ");
    assert_eq!(&d[24..26], b"M ");
    assert_eq!(&d[64..72], b"F9      ");
    assert_eq!(d[77], 6, "MDTS");
    assert_eq!(le16(d, 78), 1, "CNTLID");
    assert_eq!(le32(d, 80), 0x0002_0000, "VER");
    assert_eq!(
        le16(d, 256) & (1 << 8),
        1 << 8,
        "OACS doorbell buffer config"
    );
    assert_eq!(d[259], 3, "AERL");
    assert_eq!(d[512], 0x66);
    assert_eq!(d[513], 0x44);
    assert_eq!(le32(d, 516), 77, "NN");
    assert_eq!(le16(d, 520) & 0b1100, 0b1100, "ONCS DSM + write zeroes");

    let mut b = Bench::new(ModelConfig {
        shadow_doorbells: false,
        ..config()
    });
    let (_, buf) = b.identify(1, 0);
    assert_eq!(le16(buf.as_slice(), 256) & (1 << 8), 0);
    assert_eq!(
        le32(buf.as_slice(), 516),
        1,
        "NN defaults to the largest nsid"
    );
    let c = b.admin(0x7C, 0, 0, 0, [0; 6]);
    assert_eq!(c.status, sc::INVALID_OPCODE);
}

#[test]
fn identify_namespaces_list_and_descriptors() {
    let mut b = Bench::new(ModelConfig {
        namespaces: vec![
            ram_ns(2, 1000, 512),
            ram_ns(7, 5000, 4096),
            ram_ns(1500, 10, 512),
        ],
        ..config()
    });
    let (c, buf) = b.identify(0, 7);
    assert_eq!(c.status, 0);
    let d = buf.as_slice();
    assert_eq!(le64(d, 0), 5000, "NSZE");
    let flbas = usize::from(d[26] & 0xF);
    let lbaf = le32(d, 128 + 4 * flbas);
    assert_eq!((lbaf >> 16) & 0xFF, 12, "LBADS of the format in use");
    assert_ne!(&d[120..128], &[0u8; 8], "EUI64");

    let (c, buf) = b.identify(0, 3);
    assert_eq!(c.status, 0, "inactive nsid: zeroed data");
    assert!(buf.as_slice().iter().all(|&x| x == 0));
    let (c, _) = b.identify(0, 2000);
    assert_eq!(c.status, sc::INVALID_NAMESPACE, "above NN");

    let (_, buf) = b.identify(2, 0);
    let ids: Vec<u32> = (0..4).map(|i| le32(buf.as_slice(), 4 * i)).collect();
    assert_eq!(ids, [2, 7, 1500, 0]);
    let (_, buf) = b.identify(2, 7);
    assert_eq!(
        le32(buf.as_slice(), 0),
        1500,
        "only nsids above the given one"
    );

    let (c, buf) = b.identify(3, 7);
    assert_eq!(c.status, 0);
    let d = buf.as_slice();
    let mut at = 0;
    let mut kinds = vec![];
    while d[at] != 0 {
        kinds.push((d[at], d[at + 1]));
        if d[at] == 1 {
            let (_, ns) = b.identify(0, 7);
            assert_eq!(
                &d[at + 4..at + 12],
                &ns.as_slice()[120..128],
                "EUI64 matches"
            );
        }
        at += 4 + usize::from(d[at + 1]);
    }
    assert_eq!(kinds, [(1, 8), (2, 16), (3, 16), (4, 1)]);
    let (c, _) = b.identify(3, 3);
    assert_eq!(c.status, sc::INVALID_NAMESPACE);
}

#[test]
fn identify_with_prp1_offset_splits_over_prp2() {
    let mut b = Bench::new(config());
    let buf = b.p.dma().alloc(3 * 4096).unwrap();
    let second = buf.iova() + 4096 * 2;
    let c = b.admin(
        0x06,
        0,
        buf.iova() + 4096 + 2048,
        second,
        [1, 0, 0, 0, 0, 0],
    );
    assert_eq!(c.status, 0);
    let d = buf.as_slice();
    assert_eq!(le16(d, 4096 + 2048), 0x1b36, "first half at the offset");
    assert_eq!(d[4096 + 2048 + 512], 0x66, "SQES in the first part");
    assert_eq!(
        le16(d, 2 * 4096),
        2500,
        "PSD0 (byte 2048) at the start of PRP2's page"
    );
}

#[test]
fn number_of_queues_and_features() {
    let mut b = Bench::new(config());
    let c = b.admin(0x09, 0, 0, 0, [0x07, 99 << 16 | 2, 0, 0, 0, 0]);
    assert_eq!(c.status, 0);
    assert_eq!(c.dw0, 7 << 16 | 2, "capped at 8 pairs (0-based 7)");
    let c = b.admin(0x0A, 0, 0, 0, [0x07, 0, 0, 0, 0, 0]);
    assert_eq!(c.dw0, 7 << 16 | 2);
    let c = b.admin(0x09, 0, 0, 0, [0x0B, 1 << 8, 0, 0, 0, 0]);
    assert_eq!(c.status, 0);
    assert_eq!(b.admin(0x0A, 0, 0, 0, [0x0B, 0, 0, 0, 0, 0]).dw0, 1 << 8);
    assert_eq!(
        b.admin(0x0A, 0, 0, 0, [0x77, 0, 0, 0, 0, 0]).status,
        sc::INVALID_FIELD
    );
    // Only 3 SQs granted: qid 4 is refused.
    let ring = Ring::new(&b.p, 4, 16);
    let c = b.admin(0x05, 0, ring.cq.iova(), 0, [4 | 15 << 16, 1, 0, 0, 0, 0]);
    assert_eq!(c.status, 0, "CQ 4 is within the 8 granted CQs");
    let c = b.admin(
        0x01,
        0,
        ring.sq.iova(),
        0,
        [4 | 15 << 16, 1 | 4 << 16, 0, 0, 0, 0],
    );
    assert_eq!(c.status, sc::INVALID_QID);
    assert!(c.dnr);
}

#[test]
fn log_pages_and_unknown_opcode() {
    let mut b = Bench::new(config());
    let buf = b.p.dma().alloc(4096).unwrap();
    let c = b.admin(
        0x02,
        0xFFFF_FFFF,
        buf.iova(),
        0,
        [0x02 | 127 << 16, 0, 0, 0, 0, 0],
    );
    assert_eq!(c.status, 0);
    assert_eq!(buf.as_slice()[3], 100, "available spare");
    let c = b.admin(0x02, 0, buf.iova(), 0, [0x01 | 15 << 16, 0, 0, 0, 0, 0]);
    assert_eq!(c.status, 0, "error log");
    let c = b.admin(0x02, 0, buf.iova(), 0, [0x42 | 15 << 16, 0, 0, 0, 0, 0]);
    assert_eq!(c.status, sc::INVALID_LOG_PAGE);
    let c = b.admin(0xEE, 0, 0, 0, [0; 6]);
    assert_eq!(c.status, sc::INVALID_OPCODE);
    assert!(c.dnr);
    let c = b.admin(0x08, 0, 0, 0, [0; 6]);
    assert_eq!((c.status, c.dw0 & 1), (0, 1), "abort: not aborted");
}

#[test]
fn pipelined_admin_commands_complete_in_parallel() {
    let mut b = Bench::new(config()); // admin latency 5 us
    let bufs: Vec<_> = (0..8).map(|_| b.p.dma().alloc(4096).unwrap()).collect();
    let t0 = b.p.now_ns();
    for (i, buf) in bufs.iter().enumerate() {
        b.admin.put(sqe(
            0x06,
            100 + i as u16,
            0,
            buf.iova(),
            0,
            [1, 0, 0, 0, 0, 0],
        ));
    }
    b.admin.ring(&b.p);
    let mut cids = vec![];
    for _ in 0..8 {
        let c = b.admin.wait(&b.p);
        assert_eq!(c.status, 0);
        cids.push(c.cid);
    }
    assert_eq!(cids, (100..108).collect::<Vec<_>>(), "in submission order");
    assert_eq!(b.p.now_ns() - t0, 5_000, "one latency for all eight");
    assert_eq!(b.p.stats().admin(0x06), 8);
}
