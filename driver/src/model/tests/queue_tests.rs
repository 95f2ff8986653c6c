use super::*;

fn read_cmd(cid: u16, lba: u64, buf: &DmaBuffer) -> [u8; 64] {
    sqe(
        0x02,
        cid,
        1,
        buf.iova(),
        0,
        [lba as u32, (lba >> 32) as u32, 0, 0, 0, 0],
    )
}

#[test]
fn create_and_delete_queue_errors() {
    let mut b = Bench::new(config());
    let r = Ring::new(&b.p, 1, 64);
    let cq = |q: u32, size: u32, pc: u32| [q | (size - 1) << 16, pc, 0, 0, 0, 0];
    assert_eq!(
        b.admin(0x05, 0, r.cq.iova(), 0, cq(0, 64, 1)).status,
        sc::INVALID_QID
    );
    assert_eq!(
        b.admin(0x05, 0, r.cq.iova(), 0, cq(9, 64, 1)).status,
        sc::INVALID_QID
    );
    assert_eq!(
        b.admin(0x05, 0, r.cq.iova(), 0, cq(1, 2048, 1)).status,
        sc::INVALID_QUEUE_SIZE
    );
    assert_eq!(
        b.admin(0x05, 0, r.cq.iova(), 0, cq(1, 1, 1)).status,
        sc::INVALID_QUEUE_SIZE
    );
    assert_eq!(
        b.admin(0x05, 0, r.cq.iova(), 0, cq(1, 64, 0)).status,
        sc::INVALID_FIELD
    );
    assert_eq!(
        b.admin(0x05, 0, r.cq.iova() + 64, 0, cq(1, 64, 1)).status,
        0x13
    );
    assert_eq!(
        b.admin(0x05, 0, 1 << 20, 0, cq(1, 64, 1)).status,
        sc::INVALID_FIELD,
        "unmapped"
    );
    assert_eq!(
        b.admin(
            0x01,
            0,
            r.sq.iova(),
            0,
            [1 | 63 << 16, 1 | 1 << 16, 0, 0, 0, 0]
        )
        .status,
        sc::CQ_INVALID
    );
    assert_eq!(b.admin(0x05, 0, r.cq.iova(), 0, cq(1, 64, 1)).status, 0);
    assert_eq!(
        b.admin(0x05, 0, r.cq.iova(), 0, cq(1, 64, 1)).status,
        sc::INVALID_QID,
        "exists"
    );
    assert_eq!(
        b.admin(
            0x01,
            0,
            r.sq.iova(),
            0,
            [1 | 63 << 16, 1 | 1 << 16, 0, 0, 0, 0]
        )
        .status,
        0
    );
    assert_eq!(
        b.admin(0x04, 0, 0, 0, [1, 0, 0, 0, 0, 0]).status,
        sc::INVALID_QUEUE_DELETION
    );
    assert_eq!(
        b.admin(0x00, 0, 0, 0, [2, 0, 0, 0, 0, 0]).status,
        sc::INVALID_QID
    );
    assert_eq!(b.admin(0x00, 0, 0, 0, [1, 0, 0, 0, 0, 0]).status, 0);
    assert_eq!(b.admin(0x04, 0, 0, 0, [1, 0, 0, 0, 0, 0]).status, 0);
    assert_eq!(
        b.admin(0x04, 0, 0, 0, [1, 0, 0, 0, 0, 0]).status,
        sc::INVALID_QID
    );
    // Number of Queues after I/O queues exist: Command Sequence Error.
    let _ring = b.qpair(2, 16);
    assert_eq!(b.admin(0x09, 0, 0, 0, [0x07, 0, 0, 0, 0, 0]).status, 0x0C);
}

#[test]
fn completions_wait_for_free_cq_slots() {
    let mut b = Bench::new(config());
    let mut q = b.qpair(1, 4); // at most 3 entries posted at once
    q.ack = false;
    let buf = b.p.dma().alloc(512).unwrap();
    for cid in 0..3 {
        q.put(read_cmd(cid, 0, &buf));
    }
    q.ring(&b.p);
    let mut got = vec![];
    while let Some(c) = q.reap(&b.p) {
        got.push(c.cid);
    }
    assert_eq!(got, [0, 1, 2]);
    // Three more: the CQ is full until the host moves its head.
    for cid in 3..6 {
        q.put(read_cmd(cid, 0, &buf));
    }
    q.ring(&b.p);
    for _ in 0..5 {
        assert!(q.reap(&b.p).is_none(), "held: the CQ is full");
        b.p.relax();
    }
    q.ack_head(&b.p);
    while let Some(c) = q.reap(&b.p) {
        got.push(c.cid);
        assert!(c.sqhd < 4);
    }
    assert_eq!(got, [0, 1, 2, 3, 4, 5]);
    assert_eq!(b.p.stats().io(0x02), 6);
}

fn completion_order(seed: u64, reorder: bool) -> Vec<u16> {
    let mut b = Bench::new(ModelConfig {
        seed,
        reorder_completions: reorder,
        ..config()
    });
    let mut q = b.qpair(1, 64);
    let buf = b.p.dma().alloc(512).unwrap();
    for cid in 0..32 {
        q.put(read_cmd(cid, cid.into(), &buf));
    }
    q.ring(&b.p);
    (0..32).map(|_| q.wait(&b.p).cid).collect()
}

#[test]
fn reordering_is_seeded_and_deterministic() {
    let plain = completion_order(1, false);
    assert_eq!(plain, (0..32).collect::<Vec<_>>());
    let a = completion_order(7, true);
    let b = completion_order(7, true);
    let c = completion_order(8, true);
    assert_eq!(a, b, "same seed, same order");
    assert_ne!(a, plain, "reordered");
    assert_ne!(a, c, "another seed, another order");
    let mut sorted = a.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, plain, "every command completes once");
}

#[test]
fn io_latency_is_virtual_and_parallel() {
    let mut b = Bench::new(ModelConfig {
        io_latency_ns: 40_000,
        ..config()
    });
    let mut q = b.qpair(1, 64);
    let buf = b.p.dma().alloc(512).unwrap();
    let t0 = b.p.now_ns();
    for cid in 0..16 {
        q.put(read_cmd(cid, 0, &buf));
    }
    q.ring(&b.p);
    assert!(
        q.reap(&b.p).is_some(),
        "before_poll jumps to the next due completion"
    );
    assert_eq!(b.p.now_ns(), t0 + 40_000);
    for _ in 1..16 {
        assert!(q.reap(&b.p).is_some(), "the rest is due at the same time");
    }
    assert_eq!(b.p.now_ns(), t0 + 40_000);
}

#[test]
fn shadow_doorbells_replace_mmio_for_io_queues() {
    let mut b = Bench::new(config());
    let shadow = b.p.dma().alloc(4096).unwrap();
    let eventidx = b.p.dma().alloc(4096).unwrap();
    assert_eq!(
        b.admin(0x7C, 0, shadow.iova() + 8, eventidx.iova(), [0; 6])
            .status,
        sc::INVALID_FIELD
    );
    assert_eq!(
        b.admin(0x7C, 0, shadow.iova(), eventidx.iova(), [0; 6])
            .status,
        0
    );
    let mut q = b.qpair(1, 64);
    let buf = b.p.dma().alloc(512).unwrap();
    let mmio_before = b.p.stats().sq_doorbell_writes;
    // The host updates the shadow SQ tail only (no MMIO) ...
    q.put(read_cmd(9, 0, &buf));
    q.put(read_cmd(10, 0, &buf));
    let mut shadow = shadow;
    shadow.as_mut_slice()[8..12].copy_from_slice(&q.tail.to_le_bytes());
    q.ack = false;
    // ... and the model picks it up when the host polls.
    let c1 = q.wait(&b.p);
    let c2 = q.wait(&b.p);
    assert_eq!((c1.cid, c2.cid), (9, 10));
    let s = b.p.stats();
    assert_eq!(s.sq_doorbell_writes, mmio_before, "no MMIO doorbell");
    assert!(s.shadow_doorbell_reads > 0 && s.shadow_doorbell_updates >= 1);
    let ei = eventidx.as_slice();
    assert_eq!(
        u32::from_le_bytes(ei[8..12].try_into().unwrap()),
        2,
        "SQ1 EventIdx = consumed tail"
    );
    // The CQ head goes through the shadow too.
    shadow.as_mut_slice()[12..16].copy_from_slice(&q.head.to_le_bytes());
    b.p.before_poll(1);
    assert_eq!(
        u32::from_le_bytes(eventidx.as_slice()[12..16].try_into().unwrap()),
        2
    );
}
