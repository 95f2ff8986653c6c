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
    // The host frees one slot: exactly one more completion is posted.
    poke32(b.p.regs(), 0x1000 + 8 + 4, 1);
    got.extend(q.reap(&b.p).map(|c| c.cid));
    assert!(q.reap(&b.p).is_none(), "only one slot was free");
    assert_eq!(got, [0, 1, 2, 3]);
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

fn need_event(event_idx: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event_idx).wrapping_sub(1) < new.wrapping_sub(old)
}

fn le32_at(b: &DmaBuffer, off: usize) -> u32 {
    u32::from_le_bytes(b.as_slice()[off..off + 4].try_into().unwrap())
}

/// A host that writes shadow doorbells and rings MMIO only when EventIdx asks for it.
struct ShadowHost {
    shadow: DmaBuffer,
    eventidx: DmaBuffer,
    old_tail: u32,
}

impl ShadowHost {
    fn commit(&mut self, p: &ModelPlatform, q: &Ring) {
        let at = 8 * usize::from(q.qid);
        self.shadow.as_mut_slice()[at..at + 4].copy_from_slice(&q.tail.to_le_bytes());
        let ei = le32_at(&self.eventidx, at) as u16;
        if need_event(ei, q.tail as u16, self.old_tail as u16) {
            q.ring(p);
        }
        self.old_tail = q.tail;
    }
    fn cq_head(&mut self, q: &Ring) {
        let at = 8 * usize::from(q.qid) + 4;
        self.shadow.as_mut_slice()[at..at + 4].copy_from_slice(&q.head.to_le_bytes());
    }
}

#[test]
fn shadow_doorbells_save_mmio_while_the_model_polls() {
    let mut b = Bench::new(config());
    let shadow = b.p.dma().alloc(4096).unwrap();
    let eventidx = b.p.dma().alloc(4096).unwrap();
    let (s, e) = (shadow.iova(), eventidx.iova());
    assert_eq!(b.admin(0x7C, 0, s + 8, e, [0; 6]).status, sc::INVALID_FIELD);
    assert_eq!(b.admin(0x7C, 0, s, e, [0; 6]).status, 0);
    let mut q = b.qpair(1, 16);
    q.ack = false;
    let mut host = ShadowHost {
        shadow,
        eventidx,
        old_tail: 0,
    };
    let buf = b.p.dma().alloc(512).unwrap();
    let mmio = |p: &ModelPlatform| p.stats().sq_doorbell_writes;
    let base = mmio(&b.p);

    // Idle queue: the first batch needs the MMIO doorbell.
    q.put(read_cmd(1, 0, &buf));
    q.put(read_cmd(2, 0, &buf));
    host.commit(&b.p, &q);
    assert_eq!(mmio(&b.p), base + 1);
    assert_eq!(
        le32_at(&host.eventidx, 8),
        1,
        "awake: EventIdx one behind the tail"
    );
    // While completions are in flight the model polls the shadow: no MMIO for batch two.
    q.put(read_cmd(3, 0, &buf));
    host.commit(&b.p, &q);
    assert_eq!(mmio(&b.p), base + 1);
    let mut cids = vec![];
    for _ in 0..3 {
        cids.push(q.wait(&b.p).cid);
        host.cq_head(&q);
    }
    assert_eq!(cids, [1, 2, 3]);
    // Idle again: a poll that finds nothing puts the model to sleep; the next batch rings.
    assert!(q.reap(&b.p).is_none());
    assert_eq!(le32_at(&host.eventidx, 8), 3, "asleep: EventIdx = tail");
    q.put(read_cmd(4, 0, &buf));
    host.commit(&b.p, &q);
    assert_eq!(mmio(&b.p), base + 2);
    assert_eq!(q.wait(&b.p).cid, 4);
    host.cq_head(&q);
    // The CQ head only ever goes through the shadow; the model keeps reading it.
    let s = b.p.stats();
    let admin_commands: u64 = s.admin_completed.values().sum();
    assert_eq!(s.cq_doorbell_writes, admin_commands, "admin CQ only");
    b.p.before_poll(1);
    assert_eq!(
        le32_at(&host.eventidx, 12),
        3,
        "CQ EventIdx one behind the head"
    );
    let s = b.p.stats();
    assert!(s.shadow_doorbell_reads > 0 && s.shadow_doorbell_updates >= 4);
}

#[test]
fn shadow_doorbells_fill_a_queue_without_mmio() {
    // Many batches while work is in flight: one MMIO write in total.
    let mut b = Bench::new(ModelConfig {
        io_latency_ns: 100_000,
        ..config()
    });
    let shadow = b.p.dma().alloc(4096).unwrap();
    let eventidx = b.p.dma().alloc(4096).unwrap();
    assert_eq!(
        b.admin(0x7C, 0, shadow.iova(), eventidx.iova(), [0; 6])
            .status,
        0
    );
    let mut q = b.qpair(1, 64);
    q.ack = false;
    let mut host = ShadowHost {
        shadow,
        eventidx,
        old_tail: 0,
    };
    let buf = b.p.dma().alloc(512).unwrap();
    let base = b.p.stats().sq_doorbell_writes;
    let mut done = 0;
    for i in 0..200u16 {
        q.put(read_cmd(i, 0, &buf));
        host.commit(&b.p, &q);
        // Keep up to 8 in flight.
        if i >= 8 {
            assert_eq!(q.wait(&b.p).cid, done);
            host.cq_head(&q);
            done += 1;
        }
    }
    while done < 200 {
        assert_eq!(q.wait(&b.p).cid, done);
        host.cq_head(&q);
        done += 1;
    }
    assert_eq!(b.p.stats().sq_doorbell_writes - base, 1);
    assert_eq!(b.p.stats().io(0x02), 200);
}

#[test]
fn busy_time_is_measured_only_on_request() {
    for measure in [false, true] {
        let mut b = Bench::new(ModelConfig {
            measure_busy_time: measure,
            ..config()
        });
        let mut q = b.qpair(1, 16);
        let buf = b.p.dma().alloc(512).unwrap();
        for cid in 0..20 {
            q.run(&b.p, read_cmd(cid, 0, &buf));
        }
        assert_eq!(b.p.stats().busy_ns > 0, measure);
    }
}

#[test]
fn a_host_that_ignores_the_shadow_buffer_still_works() {
    // Doorbell Buffer Config sent, but the host only ever rings MMIO doorbells.
    let mut b = Bench::new(config());
    let shadow = b.p.dma().alloc(4096).unwrap();
    let eventidx = b.p.dma().alloc(4096).unwrap();
    assert_eq!(
        b.admin(0x7C, 0, shadow.iova(), eventidx.iova(), [0; 6])
            .status,
        0
    );
    let mut q = b.qpair(1, 8);
    let buf = b.p.dma().alloc(512).unwrap();
    for cid in 0..40 {
        let c = q.run(&b.p, read_cmd(cid, 0, &buf));
        assert_eq!((c.cid, c.status), (cid, 0));
    }
    assert_eq!(
        b.p.stats().io(0x02),
        40,
        "no stale shadow value replayed old entries"
    );
    assert_eq!(b.p.stats().invalid_doorbell_writes, 0);
}
