//! Queue engine tests against a fake controller that reads SQEs and writes CQEs directly in
//! ring memory.

use super::io_queue::{IoCompletion, IoQueue};
use super::request::Request;
use super::ring::tests::{test_pool, Doorbells};
use crate::error::{SubmitError, SubmitErrorKind};
use crate::namespace::{Namespace, NamespaceIdentity, NamespaceState};
use crate::spec::command::DsmRange;
use crate::spec::{Command, Completion, Status};
use vfnvme_hal::DmaPool;

/// The queue pair's convenience calls, for the engine on its own: each makes a [`Request`]
/// and submits it.
trait Submit<T> {
    fn read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: vfnvme_hal::DmaBuffer,
        tag: T,
    ) -> Result<(), SubmitError>;
    fn write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: vfnvme_hal::DmaBuffer,
        tag: T,
    ) -> Result<(), SubmitError>;
    fn flush(&mut self, ns: &Namespace, tag: T) -> Result<(), SubmitError>;
    fn write_zeroes(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        tag: T,
    ) -> Result<(), SubmitError>;
    fn deallocate(
        &mut self,
        ns: &Namespace,
        ranges: &[DsmRange],
        tag: T,
    ) -> Result<(), SubmitError>;
}

impl<T: Copy + Default> Submit<T> for IoQueue<T> {
    fn read(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: vfnvme_hal::DmaBuffer,
        tag: T,
    ) -> Result<(), SubmitError> {
        self.submit(Request::read(ns, lba, blocks, buf, tag)?)
            .map(drop)
    }
    fn write(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: vfnvme_hal::DmaBuffer,
        tag: T,
    ) -> Result<(), SubmitError> {
        self.submit(Request::write(ns, lba, blocks, buf, tag)?)
            .map(drop)
    }
    fn flush(&mut self, ns: &Namespace, tag: T) -> Result<(), SubmitError> {
        self.submit(Request::flush(ns, tag)?).map(drop)
    }
    fn write_zeroes(
        &mut self,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        tag: T,
    ) -> Result<(), SubmitError> {
        self.submit(Request::write_zeroes(ns, lba, blocks, tag)?)
            .map(drop)
    }
    fn deallocate(
        &mut self,
        ns: &Namespace,
        ranges: &[DsmRange],
        tag: T,
    ) -> Result<(), SubmitError> {
        self.submit(Request::deallocate(ns, ranges, tag)?).map(drop)
    }
}

/// Plays the controller: consumes SQEs, posts CQEs with the right phase.
struct FakeDevice {
    sq_head: u32,
    cq_tail: u32,
    phase: bool,
    depth: u32,
}

impl FakeDevice {
    fn new(depth: u32) -> Self {
        FakeDevice {
            sq_head: 0,
            cq_tail: 0,
            phase: true,
            depth,
        }
    }
    /// Fetches every SQE up to the driver's tail.
    fn fetch<T: Copy + Default>(&mut self, q: &mut IoQueue<T>) -> Vec<Command> {
        let tail = q.rings_mut().sq_tail();
        let mut out = vec![];
        while self.sq_head != tail {
            let b = q.rings_mut().sqe_bytes(self.sq_head);
            let dw = |i: usize| u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
            let qw = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
            out.push(Command {
                cdw0: dw(0),
                nsid: dw(1),
                prp1: qw(24),
                prp2: qw(32),
                cdw10: dw(10),
                cdw11: dw(11),
                cdw12: dw(12),
                ..Default::default()
            });
            self.sq_head = (self.sq_head + 1) % self.depth;
        }
        out
    }
    fn complete(&mut self, q: &mut IoQueue, cid: u16, status: Status) {
        self.complete_dw0(q, cid, status, 0);
    }
    fn complete_dw0<T: Copy + Default>(
        &mut self,
        q: &mut IoQueue<T>,
        cid: u16,
        status: Status,
        dw0: u32,
    ) {
        let field = status.field();
        q.rings_mut().inject_cqe(
            self.cq_tail,
            Completion {
                cid,
                dw0,
                sq_head: self.sq_head as u16,
                sq_id: 1,
                status_phase: (field << 1) | self.phase as u16,
                ..Default::default()
            },
        );
        self.cq_tail += 1;
        if self.cq_tail == self.depth {
            self.cq_tail = 0;
            self.phase = !self.phase;
        }
    }
}

fn ns(lba_shift: u8, blocks: u64) -> Namespace {
    Namespace::new(
        1,
        NamespaceIdentity {
            lba_shift,
            ..Default::default()
        },
        blocks,
    )
}

fn setup(depth: u32, max_transfer: usize) -> (DmaPool, IoQueue, FakeDevice, Doorbells) {
    let pool = test_pool();
    let regs = Doorbells::default();
    let q = IoQueue::new(&pool, &regs, 1, depth, 0, 0, None, max_transfer).unwrap();
    (pool, q, FakeDevice::new(depth), regs)
}

fn drain(q: &mut IoQueue, regs: &Doorbells) -> Vec<IoCompletion> {
    let mut v = vec![];
    q.poll(regs, usize::MAX, |c| v.push(c));
    v
}

#[test]
fn submit_batch_rings_once_and_completes_with_buffer() {
    let (pool, mut q, mut dev, regs) = setup(16, 128 << 10);
    let n = ns(9, 1000);
    let mut iovas = vec![];
    for i in 0..3u64 {
        let buf = pool.alloc(4096).unwrap();
        iovas.push(buf.iova());
        q.read(&n, i * 8, 8, buf, 100 + i).unwrap();
    }
    assert!(
        regs.0.lock().unwrap().is_empty(),
        "nothing rung before commit"
    );
    q.commit(&regs);
    q.commit(&regs);
    assert_eq!(
        *regs.0.lock().unwrap(),
        vec![(0x1008, 3)],
        "one SQ doorbell for 3"
    );
    let cmds = dev.fetch(&mut q);
    assert_eq!(cmds.len(), 3);
    for (i, c) in cmds.iter().enumerate() {
        assert_eq!(c.opcode(), 0x02);
        assert_eq!(c.cid(), i as u16);
        assert_eq!(c.nsid, 1);
        assert_eq!(c.cdw10, i as u32 * 8);
        assert_eq!(c.cdw12, 7);
        assert_eq!(c.prp1, iovas[i]);
        assert_eq!(c.prp2, 0);
    }
    assert_eq!(q.outstanding(), 3);
    for c in &cmds {
        dev.complete(&mut q, c.cid(), Status::SUCCESS);
    }
    let done = drain(&mut q, &regs);
    assert_eq!(
        done.iter().map(|c| c.tag).collect::<Vec<_>>(),
        vec![100, 101, 102]
    );
    assert!(done.iter().all(|c| c.is_ok()));
    assert_eq!(done[1].buffer.as_ref().unwrap().iova(), iovas[1]);
    assert_eq!(q.outstanding(), 0);
    // The CQ head doorbell waits until the controller could run short of CQ slots: with 3
    // entries consumed and 14 of 15 trackers free it has room for everything in flight.
    assert_eq!(regs.0.lock().unwrap().len(), 1, "no CQ head write yet");
    q.read(&n, 0, 8, pool.alloc(4096).unwrap(), 200).unwrap();
    q.commit(&regs);
    q.commit(&regs);
    assert_eq!(
        *regs.0.lock().unwrap(),
        vec![(0x1008, 3), (0x1008, 4)],
        "SQ tail only: the CQ has room"
    );
    // 9 more in flight (10 of 15, 5 free): 2 x 3 consumed entries > 5 free slots, so the
    // commit writes the CQ head, once, after the SQ tail.
    for i in 0..9u64 {
        q.read(&n, i * 8, 8, pool.alloc(4096).unwrap(), 300 + i)
            .unwrap();
    }
    q.commit(&regs);
    q.commit(&regs);
    assert_eq!(
        *regs.0.lock().unwrap(),
        vec![(0x1008, 3), (0x1008, 4), (0x1008, 13), (0x100c, 3)],
        "SQ tail, then the CQ head, once it is needed"
    );
}

#[test]
fn cq_head_rung_at_once_when_the_queue_is_too_shallow_to_defer() {
    let (pool, mut q, mut dev, regs) = setup(4, 4096);
    let n = ns(9, 1000);
    for tag in 0..3u64 {
        q.read(&n, tag, 1, pool.alloc(4096).unwrap(), tag).unwrap();
    }
    q.commit(&regs);
    for c in dev.fetch(&mut q) {
        dev.complete(&mut q, c.cid(), Status::SUCCESS);
    }
    assert_eq!(drain(&mut q, &regs).len(), 3);
    // Deferring would leave 3 CQ slots occupied with 3 commands resubmittable into a 4-entry CQ.
    assert_eq!(*regs.0.lock().unwrap(), vec![(0x1008, 3), (0x100c, 3)]);
}

/// A ring deeper than its trackers (`slots`): the trackers cap the commands in flight, and the
/// CQ head doorbell waits for the extra CQ room as well. At QD 1 on 1024 entries with 63
/// trackers, one head write per 512 completions (one per 32 on a 64-entry ring).
#[test]
fn a_ring_deeper_than_its_trackers_caps_in_flight_and_defers_the_cq_head_longer() {
    for (depth, slots, every) in [(1024u32, 63u32, 512usize), (64, 0, 32), (64, 7, 32)] {
        let pool = test_pool();
        let regs = Doorbells::default();
        let mut q = IoQueue::new(&pool, &regs, 1, depth, slots, 0, None, 4096).unwrap();
        let mut dev = FakeDevice::new(depth);
        let cap = if slots == 0 {
            depth as usize - 1
        } else {
            slots as usize
        };
        assert_eq!((q.depth(), q.capacity()), (depth, cap));
        let n = ns(9, 1 << 20);
        let ios = 2000usize;
        for i in 0..ios as u64 {
            q.read(&n, i, 1, pool.alloc(4096).unwrap(), i).unwrap();
            q.commit(&regs);
            for c in dev.fetch(&mut q) {
                dev.complete(&mut q, c.cid(), Status::SUCCESS);
            }
            assert_eq!(drain(&mut q, &regs).len(), 1);
        }
        let log = regs.0.lock().unwrap().clone();
        let heads = log.iter().filter(|(off, _)| *off == 0x100c).count();
        let tails = log.iter().filter(|(off, _)| *off == 0x1008).count();
        assert_eq!(tails, ios, "depth {depth}: one SQ doorbell per I/O");
        assert_eq!(
            heads,
            ios / every,
            "depth {depth}, {cap} trackers: CQ head writes"
        );
        // The trackers, not the ring, bound what is in flight.
        for t in 0..cap as u64 {
            q.read(&n, t, 1, pool.alloc(512).unwrap(), t).unwrap();
        }
        let e = q.read(&n, 0, 1, pool.alloc(512).unwrap(), 99).unwrap_err();
        assert_eq!(e.kind, SubmitErrorKind::QueueFull { free: 0, needed: 1 });
    }
}

#[test]
fn completions_in_any_order() {
    let (pool, mut q, mut dev, regs) = setup(8, 4096);
    let n = ns(12, 100);
    for tag in 0..5 {
        q.write(&n, tag, 1, pool.alloc(4096).unwrap(), tag).unwrap();
    }
    q.commit(&regs);
    let cmds = dev.fetch(&mut q);
    for &i in &[3usize, 0, 4, 2, 1] {
        dev.complete(&mut q, cmds[i].cid(), Status::SUCCESS);
    }
    let tags: Vec<u64> = drain(&mut q, &regs).iter().map(|c| c.tag).collect();
    assert_eq!(tags, vec![3, 0, 4, 2, 1]);
}

#[test]
fn poll_respects_max() {
    let (pool, mut q, mut dev, regs) = setup(8, 4096);
    let n = ns(9, 100);
    for tag in 0..4 {
        q.read(&n, 0, 1, pool.alloc(512).unwrap(), tag).unwrap();
    }
    q.commit(&regs);
    for c in dev.fetch(&mut q) {
        dev.complete(&mut q, c.cid(), Status::SUCCESS);
    }
    let mut got = vec![];
    assert_eq!(q.poll(&regs, 3, |c| got.push(c.tag)), 3);
    assert_eq!(q.poll(&regs, 3, |c| got.push(c.tag)), 1);
    assert_eq!(got, vec![0, 1, 2, 3]);
    assert_eq!(q.poll(&regs, 3, |_| ()), 0);
}

/// Collects what a reap hands over, and whether it stopped before an error.
#[derive(Default)]
struct Collect {
    finished: Vec<(u64, Status)>,
    others: Vec<(u64, Status)>,
    stopped: bool,
}

impl super::deliver::Deliver<u64> for Collect {
    const STOP_AT_ERROR: bool = true;
    fn finished(
        &mut self,
        tag: u64,
        status: Status,
        _cdw0: u32,
        _slot: u16,
        buffer: &mut Option<vfnvme_hal::DmaBuffer>,
    ) {
        assert!(buffer.take().is_some(), "the buffer comes with the request");
        self.finished.push((tag, status));
    }
    fn completion(&mut self, c: IoCompletion) {
        self.others.push((c.tag, c.status));
    }
    fn stopped(&mut self) {
        self.stopped = true;
    }
}

#[test]
fn reap_until_error_stops_before_an_error_and_leaves_it_for_the_next_reap() {
    let (pool, mut q, mut dev, regs) = setup(8, 4096);
    let n = ns(9, 100);
    for tag in 0..3 {
        q.read(&n, 0, 1, pool.alloc(512).unwrap(), tag).unwrap();
    }
    q.commit(&regs);
    let cmds = dev.fetch(&mut q);
    dev.complete(&mut q, cmds[0].cid(), Status::SUCCESS);
    dev.complete(&mut q, cmds[1].cid(), Status::generic(0x80));
    dev.complete(&mut q, cmds[2].cid(), Status::SUCCESS);
    let mut to = Collect::default();
    assert_eq!(q.reap_into(&regs, usize::MAX, &mut to), 1);
    assert_eq!(to.finished, vec![(0, Status::SUCCESS)]);
    assert!(to.others.is_empty(), "the error is not taken");
    assert!(to.stopped);
    // Again: it stops at the same entry, taking nothing.
    let mut again = Collect::default();
    assert_eq!(q.reap_into(&regs, usize::MAX, &mut again), 0);
    assert!(again.stopped && again.finished.is_empty());
    // A plain reap takes the error, then the rest.
    let rest = drain(&mut q, &regs);
    let got: Vec<(u64, u8)> = rest.iter().map(|c| (c.tag, c.status.sc())).collect();
    assert_eq!(got, vec![(1, 0x80), (2, 0)]);
    assert_eq!(q.outstanding(), 0);
    // Nothing left: no stop.
    let mut idle = Collect::default();
    assert_eq!(q.reap_into(&regs, usize::MAX, &mut idle), 0);
    assert!(!idle.stopped);
}

#[test]
fn mdts_split_completes_parent_once_with_first_error() {
    // 8 KiB per command, 512-byte blocks: 40 blocks = 16 + 16 + 8.
    let (pool, mut q, mut dev, regs) = setup(16, 8192);
    let n = ns(9, 1 << 20);
    let buf = pool.alloc(40 * 512).unwrap();
    let base = buf.iova();
    q.read(&n, 1000, 40, buf, 7).unwrap();
    assert_eq!(q.outstanding(), 3);
    q.commit(&regs);
    let cmds = dev.fetch(&mut q);
    assert_eq!(cmds.len(), 3);
    let lbas: Vec<u32> = cmds.iter().map(|c| c.cdw10).collect();
    let nlbs: Vec<u32> = cmds.iter().map(|c| c.cdw12 + 1).collect();
    let prps: Vec<u64> = cmds.iter().map(|c| c.prp1 - base).collect();
    assert_eq!(lbas, vec![1000, 1016, 1032]);
    assert_eq!(nlbs, vec![16, 16, 8]);
    assert_eq!(prps, vec![0, 8192, 16384]);
    assert_eq!(
        cmds[0].prp2,
        base + 4096,
        "two pages: PRP2 is the second page"
    );
    let err = Status::generic(0x80);
    dev.complete(&mut q, cmds[2].cid(), Status::SUCCESS);
    dev.complete(&mut q, cmds[1].cid(), err);
    assert!(drain(&mut q, &regs).is_empty(), "not before the last child");
    dev.complete(&mut q, cmds[0].cid(), Status::generic(0x04));
    let done = drain(&mut q, &regs);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].tag, 7);
    assert_eq!(done[0].status.sc(), 0x80, "first error wins");
    assert_eq!(done[0].buffer.as_ref().unwrap().iova(), base);
    assert_eq!(q.outstanding(), 0);
    assert_eq!(q.free_slots(), 15);
}

#[test]
fn large_transfer_uses_prp_list() {
    let (pool, mut q, mut dev, regs) = setup(8, 1 << 20);
    let n = ns(12, 1 << 20);
    let buf = pool.alloc(64 << 10).unwrap();
    let base = buf.iova();
    q.write(&n, 0, 16, buf, 1).unwrap();
    q.commit(&regs);
    let c = dev.fetch(&mut q).remove(0);
    assert_eq!(c.prp1, base);
    assert_ne!(c.prp2, base + 4096, "PRP2 points to a list");
    assert_eq!(c.prp2 % 4096, 0);
}

#[test]
fn queue_full_returns_the_buffer_and_frees_up() {
    // Depth 4: 3 commands in flight at most (the CQ can always hold them).
    let (pool, mut q, mut dev, regs) = setup(4, 4096);
    let n = ns(9, 100);
    for t in 0..3 {
        q.read(&n, 0, 1, pool.alloc(512).unwrap(), t).unwrap();
    }
    let buf = pool.alloc(512).unwrap();
    let iova = buf.iova();
    let e = q.read(&n, 0, 1, buf, 9).unwrap_err();
    assert_eq!(e.kind, SubmitErrorKind::QueueFull { free: 0, needed: 1 });
    let back = e.buffer.expect("buffer handed back");
    assert_eq!(back.iova(), iova);
    q.commit(&regs);
    let cmds = dev.fetch(&mut q);
    dev.complete(&mut q, cmds[1].cid(), Status::SUCCESS);
    assert_eq!(drain(&mut q, &regs).len(), 1);
    q.read(&n, 0, 1, back, 9).unwrap();
    // A split request needing more slots than free is refused as a whole.
    let (pool2, mut q2, _, _) = setup(4, 4096);
    let e = q2
        .read(&n, 0, 40, pool2.alloc(40 * 512).unwrap(), 0)
        .unwrap_err();
    assert_eq!(
        e.kind,
        SubmitErrorKind::TooLarge {
            needed: 5,
            capacity: 3
        }
    );
    assert!(e.buffer.is_some());
    assert_eq!(q2.outstanding(), 0);
    // Two of three slots taken: a 3-command request is refused whole, nothing is queued.
    q2.read(&n, 0, 1, pool2.alloc(512).unwrap(), 0).unwrap();
    q2.read(&n, 0, 1, pool2.alloc(512).unwrap(), 0).unwrap();
    let e = q2
        .read(&n, 0, 24, pool2.alloc(24 * 512).unwrap(), 0)
        .unwrap_err();
    assert_eq!(e.kind, SubmitErrorKind::QueueFull { free: 1, needed: 3 });
    assert_eq!(q2.outstanding(), 2);
}

#[test]
fn ring_wraps_many_times() {
    let (pool, mut q, mut dev, regs) = setup(4, 4096);
    let n = ns(9, 100);
    let mut buf = Some(pool.alloc(512).unwrap());
    for round in 0..50u64 {
        q.read(&n, round % 100, 1, buf.take().unwrap(), round)
            .unwrap();
        q.commit(&regs);
        let cmds = dev.fetch(&mut q);
        assert_eq!(cmds.len(), 1);
        dev.complete(&mut q, cmds[0].cid(), Status::SUCCESS);
        let mut done = drain(&mut q, &regs);
        assert_eq!(done.len(), 1, "round {round}");
        assert_eq!(done[0].tag, round);
        buf = done.remove(0).buffer;
    }
    // The SQ tail wrapped: the last doorbell value is 50 mod 4.
    let sq_writes: Vec<u32> = regs
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|w| w.0 == 0x1008)
        .map(|w| w.1)
        .collect();
    assert_eq!(sq_writes.last(), Some(&(50 % 4)));
}

#[test]
fn validation_errors_return_the_buffer() {
    let (pool, mut q, _, _) = setup(8, 4096);
    let n = ns(9, 100);
    let e = q.read(&n, 99, 2, pool.alloc(1024).unwrap(), 0).unwrap_err();
    assert!(matches!(
        e.kind,
        SubmitErrorKind::LbaOutOfRange {
            lba: 99,
            end: 101,
            blocks: 100,
            ..
        }
    ));
    assert!(e.buffer.is_some());
    let e = q
        .read(&n, u64::MAX, 2, pool.alloc(1024).unwrap(), 0)
        .unwrap_err();
    assert!(matches!(e.kind, SubmitErrorKind::LbaOutOfRange { .. }));
    let e = q.write(&n, 0, 4, pool.alloc(1024).unwrap(), 0).unwrap_err();
    assert_eq!(
        e.kind,
        SubmitErrorKind::BufferTooSmall {
            needed: 2048,
            len: 1024
        }
    );
    assert!(e.buffer.is_some());
    let e = q.read(&n, 0, 0, pool.alloc(512).unwrap(), 0).unwrap_err();
    assert_eq!(e.kind, SubmitErrorKind::ZeroBlocks);
    n.set_state(NamespaceState::Removing);
    let e = q.read(&n, 0, 1, pool.alloc(512).unwrap(), 0).unwrap_err();
    assert!(matches!(
        e.kind,
        SubmitErrorKind::NamespaceNotActive { nsid: 1, .. }
    ));
    assert!(e.buffer.is_some());
    assert!(q.flush(&n, 0).is_err());
    assert_eq!(q.outstanding(), 0);
    // Messages say what to do.
    assert!(e.to_string().contains("stop I/O"));
}

#[test]
fn flush_write_zeroes_and_deallocate_encoding() {
    let (_pool, mut q, mut dev, regs) = setup(8, 4096);
    let n = ns(9, 1 << 20);
    q.flush(&n, 1).unwrap();
    q.write_zeroes(&n, 10, 70000, 2).unwrap(); // 65536 + 4464
    let ranges = [
        DsmRange {
            attributes: 0,
            blocks: 8,
            slba: 0,
        },
        DsmRange {
            attributes: 0,
            blocks: 16,
            slba: 100,
        },
    ];
    q.deallocate(&n, &ranges, 3).unwrap();
    assert!(q.deallocate(&n, &[], 4).is_err());
    q.commit(&regs);
    let cmds = dev.fetch(&mut q);
    assert_eq!(cmds.len(), 4);
    assert_eq!(cmds[0].opcode(), 0x00);
    assert_eq!(cmds[1].opcode(), 0x08);
    assert_eq!(cmds[1].cdw12 & 0xffff, 0xffff);
    assert_eq!(cmds[2].cdw10, 10 + 65536);
    assert_eq!(cmds[2].cdw12 & 0xffff, 4464 - 1);
    assert_eq!(cmds[3].opcode(), 0x09);
    assert_eq!(cmds[3].cdw10, 1);
    assert_eq!(cmds[3].cdw11, 4);
    for c in &cmds {
        dev.complete(&mut q, c.cid(), Status::SUCCESS);
    }
    let done = drain(&mut q, &regs);
    assert_eq!(
        done.iter().map(|c| c.tag).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(done.iter().all(|c| c.buffer.is_none()));
}

#[test]
fn unknown_cid_is_ignored() {
    let (_pool, mut q, mut dev, regs) = setup(4, 4096);
    dev.complete(&mut q, 2, Status::SUCCESS); // nothing outstanding on cid 2
    dev.complete(&mut q, 999, Status::SUCCESS);
    assert!(drain(&mut q, &regs).is_empty());
    assert_eq!(q.free_slots(), 3);
}

mod no_alloc {
    //! The I/O path must not allocate: a counting allocator watches this thread.
    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    struct Counting;
    thread_local! {
        static WATCH: Cell<bool> = const { Cell::new(false) };
        static COUNT: Cell<u64> = const { Cell::new(0) };
    }
    // SAFETY: forwards to the system allocator; only counts.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            if WATCH.with(|w| w.get()) {
                COUNT.with(|c| c.set(c.get() + 1));
            }
            // SAFETY: same contract as the caller's.
            unsafe { System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: same contract as the caller's.
            unsafe { System.dealloc(p, l) }
        }
    }
    #[global_allocator]
    static GLOBAL: Counting = Counting;

    #[test]
    fn submit_commit_poll_allocate_nothing() {
        let (pool, mut q, mut dev, regs) = setup(64, 8192);
        let n = ns(9, 1 << 20);
        let mut bufs: Vec<_> = (0..16).map(|_| pool.alloc(64 << 10).unwrap()).collect();
        let mut done = Vec::with_capacity(16);
        let ranges = [DsmRange {
            attributes: 0,
            blocks: 1,
            slba: 0,
        }];
        regs.0.lock().unwrap().reserve(10_000);
        WATCH.with(|w| w.set(true));
        for round in 0..20u64 {
            while let Some(b) = bufs.pop() {
                // 64 KiB at 8 KiB per command: 8 commands each, PRP pairs.
                q.write(&n, round * 128, 128, b, round).unwrap();
                if q.free_slots() < 8 {
                    break;
                }
            }
            q.flush(&n, 0).unwrap();
            q.deallocate(&n, &ranges, 0).unwrap();
            q.commit(&regs);
            // The fake device is test code; keep it out of the count.
            WATCH.with(|w| w.set(false));
            let cmds = dev.fetch(&mut q);
            for c in cmds.iter().rev() {
                dev.complete(&mut q, c.cid(), Status::SUCCESS);
            }
            drop(cmds);
            WATCH.with(|w| w.set(true));
            q.poll(&regs, usize::MAX, |c| {
                if let Some(b) = c.buffer {
                    done.push(b)
                }
            });
            bufs.append(&mut done);
        }
        WATCH.with(|w| w.set(false));
        assert_eq!(COUNT.with(|c| c.get()), 0, "the I/O path allocated");
        assert_eq!(q.outstanding(), 0);
    }
}

/// The per-request payload (any `Copy` type, here not a `u64`) and the completion's dword 0
/// come back with the request; `next_slot` named, before each submission, the slot its
/// completion reports (the head of a request split at MDTS).
#[test]
fn payload_cdw0_and_slot_come_back_with_the_completion() {
    #[derive(Debug, Clone, Copy, Default, PartialEq)]
    struct Payload {
        cookie: u64,
        index: u32,
    }
    let pool = test_pool();
    let regs = Doorbells::default();
    let mut q: IoQueue<Payload> = IoQueue::new(&pool, &regs, 1, 16, 0, 0, None, 4096).unwrap();
    let mut dev = FakeDevice::new(16);
    let n = ns(9, 1000);
    let mut slots = vec![];
    for i in 0..3u32 {
        let slot = q.next_slot().expect("a free slot");
        // The last request is 3 commands (12 KiB at 4 KiB MDTS).
        let blocks = if i == 2 { 24 } else { 1 };
        let payload = Payload {
            cookie: 0xabc0 + u64::from(i),
            index: i,
        };
        q.read(
            &n,
            8 * u64::from(i),
            blocks,
            pool.alloc(12288).unwrap(),
            payload,
        )
        .unwrap();
        slots.push(slot);
    }
    q.commit(&regs);
    let cmds = dev.fetch(&mut q);
    assert_eq!(cmds.len(), 5);
    for c in cmds.iter().rev() {
        let cid = (c.cdw0 >> 16) as u16;
        dev.complete_dw0(&mut q, cid, Status::SUCCESS, 0x5000 + u32::from(cid));
    }
    let mut got = vec![];
    q.reap(&regs, usize::MAX, |c| got.push((c.tag, c.cdw0, c.slot)));
    assert_eq!(got.len(), 3);
    for (tag, cdw0, slot) in got {
        assert_eq!(
            slot, slots[tag.index as usize],
            "slot of request {}",
            tag.index
        );
        assert_eq!(tag.cookie, 0xabc0 + u64::from(tag.index));
        // Completed last-to-first, so each request's last entry is its head's (cid = slot).
        assert_eq!(cdw0, 0x5000 + u32::from(slot), "the last entry's dword 0");
    }
    assert_eq!(q.outstanding(), 0);
}

/// `commit_when_due` (the queue pair's `defer_sq_doorbell`): a commit after every submission
/// rings when the controller would otherwise idle, then only once half of what is in flight
/// waits for the doorbell; a poll rings whatever is left.
#[test]
fn deferred_commit_rings_once_half_in_flight_waits() {
    let (pool, mut q, mut dev, regs) = setup(16, 4096);
    let n = ns(9, 1000);
    let rung = |regs: &Doorbells| regs.0.lock().unwrap().clone();
    // Idle controller: the first submission is rung at once.
    q.read(&n, 0, 1, pool.alloc(512).unwrap(), 0).unwrap();
    q.commit_when_due(&regs);
    assert_eq!(rung(&regs), vec![(0x1008, 1)]);
    for tag in 1..4 {
        q.read(&n, 0, 1, pool.alloc(512).unwrap(), tag).unwrap();
        q.commit_when_due(&regs);
    }
    // 4 in flight: 3 unrung >= half, so rung at the 2nd (1 of 2) and the 4th (2 of 4).
    assert_eq!(
        rung(&regs),
        vec![(0x1008, 1), (0x1008, 2), (0x1008, 4)],
        "rung when half of what is in flight waits"
    );
    dev.fetch(&mut q);
    dev.complete(&mut q, 0, Status::SUCCESS);
    let mut got = vec![];
    q.reap(&regs, usize::MAX, |c| got.push(c.tag));
    assert_eq!(got, vec![0]);
    // 3 in flight and rung: one more waits (1 of 4), a second (2 of 5) still waits, a third
    // (3 of 6) is rung; the CQ head (1 consumed entry, 9 free slots) is not needed yet.
    for tag in 4..7 {
        q.read(&n, 0, 1, pool.alloc(512).unwrap(), tag).unwrap();
        q.commit_when_due(&regs);
        if tag < 6 {
            assert_eq!(rung(&regs).len(), 3, "deferred at tag {tag}");
        }
    }
    assert_eq!(rung(&regs)[3..], [(0x1008, 7)]);
    // A poll rings what a deferred commit left.
    q.read(&n, 0, 1, pool.alloc(512).unwrap(), 7).unwrap();
    q.commit_when_due(&regs);
    assert_eq!(rung(&regs).len(), 4, "1 of 7 waits: deferred");
    q.poll(&regs, usize::MAX, |_| ());
    assert_eq!(rung(&regs)[4..], [(0x1008, 8)]);
}

#[test]
fn retries_resend_the_command_as_queued_even_if_the_reset_came_before_its_doorbell() {
    let (pool, mut q, mut dev, regs) = setup(8, 4096);
    q.enable_retries(2, std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)));
    let n = ns(9, 1000);
    // First commands on trackers 0..3: rung (copied), completed.
    for i in 0..3u64 {
        q.read(&n, i, 1, pool.alloc(4096).unwrap(), i).unwrap();
    }
    q.commit(&regs);
    for c in dev.fetch(&mut q) {
        dev.complete(&mut q, c.cid(), Status::SUCCESS);
    }
    assert_eq!(drain(&mut q, &regs).len(), 3);
    // The same trackers again, other LBAs, queued but not rung; then the controller resets.
    for i in 0..3u64 {
        q.write(&n, 500 + i, 1, pool.alloc(4096).unwrap(), 10 + i)
            .unwrap();
    }
    let ended = q.requeue_after_reset(Status::ABORTED_BY_RESET);
    assert_eq!(ended, 0);
    assert_eq!(q.ended_pending(), 0, "nothing ends");
    let mut dev = FakeDevice::new(8);
    let sent = dev.fetch(&mut q);
    assert_eq!(sent.len(), 3);
    let mut lbas: Vec<u32> = sent.iter().map(|c| c.cdw10).collect();
    lbas.sort_unstable();
    assert_eq!(
        lbas,
        [500, 501, 502],
        "the queued writes, not the earlier reads"
    );
    assert!(sent.iter().all(|c| c.cdw0 & 0xff == 0x01), "writes");
    assert_eq!(q.retries(), 3);
}
