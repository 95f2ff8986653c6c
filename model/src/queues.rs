//! Submission and completion queues as the device keeps them: ring positions, phase, and the
//! completions waiting for their virtual due time.

use super::dma_engine::{self, DmaFault};
use super::iommu::ModelIommu;
use super::namespaces::splitmix;
use super::sqe::{Status, CQE_BYTES, SQE_BYTES};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// A submission queue.
#[derive(Debug)]
pub(crate) struct Sq {
    pub qid: u16,
    pub cqid: u16,
    pub base: u64,
    pub size: u32,
    pub head: u32,
    pub tail: u32,
    /// With shadow doorbells: the model polls this queue's shadow tail (no MMIO needed).
    pub awake: bool,
}

impl Sq {
    pub fn new(qid: u16, cqid: u16, base: u64, size: u32) -> Self {
        Sq {
            qid,
            cqid,
            base,
            size,
            head: 0,
            tail: 0,
            awake: false,
        }
    }
    /// Whether `tail` is a legal new tail: inside the ring and not past the free slots.
    pub fn tail_ok(&self, tail: u32) -> bool {
        tail < self.size
    }
    /// Fetches the entry at the head and advances the head.
    pub fn fetch(&mut self, iommu: &ModelIommu) -> Result<[u8; SQE_BYTES], DmaFault> {
        let mut raw = [0u8; SQE_BYTES];
        dma_engine::read(
            iommu,
            self.base
                .wrapping_add(u64::from(self.head) * SQE_BYTES as u64),
            &mut raw,
        )?;
        self.head = (self.head + 1) % self.size;
        Ok(raw)
    }
}

/// What a pending completion entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The completion of a command.
    Genuine,
    /// A second copy of a completion (fault injection).
    Duplicate,
    /// An entry whose command identifier is chosen when it is posted among those no command
    /// of its SQ has outstanding (fault injection).
    UnknownCid,
}

/// A completion that is executed and waits for its due time (and a free CQ slot).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub due: u64,
    pub seq: u64,
    pub cid: u16,
    pub sqid: u16,
    pub sqhd: u16,
    pub opcode: u8,
    pub status: Status,
    pub dw0: u32,
    pub kind: Kind,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    /// Reversed, so that the max-heap pops the earliest (due, seq) first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.due, o.seq).cmp(&(self.due, self.seq))
    }
}

/// A completion queue.
#[derive(Debug)]
pub(crate) struct Cq {
    pub base: u64,
    pub size: u32,
    pub head: u32,
    pub tail: u32,
    pub phase: bool,
    pub pending: BinaryHeap<Pending>,
    seq: u64,
    rng: u64,
    scratch: Vec<Pending>,
    /// The submission queues that complete here.
    pub sqs: Vec<u16>,
    /// With shadow doorbells: the host keeps the shadow head current (see `Core::set_cq_head`).
    pub shadow_ok: bool,
    /// Fault injection only: (sqid, cid) of the commands fetched whose completion is not yet
    /// posted, with their count (a host may reuse an identifier only after its completion).
    pub open: HashMap<(u16, u16), u32>,
}

impl Cq {
    pub fn new(qid: u16, base: u64, size: u32, seed: u64) -> Self {
        Cq {
            base,
            size,
            head: 0,
            tail: 0,
            phase: true,
            pending: BinaryHeap::with_capacity(size as usize),
            seq: 0,
            rng: splitmix(seed ^ u64::from(qid).wrapping_mul(0x1000_0001)),
            scratch: Vec::new(),
            sqs: Vec::new(),
            shadow_ok: true,
            open: HashMap::new(),
        }
    }

    /// Entries posted and not yet consumed by the host.
    pub fn used(&self) -> u32 {
        (self.tail + self.size - self.head) % self.size
    }

    /// Slots the controller may still post into (one slot always stays empty).
    pub fn free(&self) -> u32 {
        self.size - 1 - self.used()
    }

    /// Whether `head` is a legal new head: it may only move over posted entries.
    pub fn head_ok(&self, head: u32) -> bool {
        head < self.size && (head + self.size - self.head) % self.size <= self.used()
    }

    /// Queues a completion due at `due`.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        due: u64,
        cid: u16,
        sqid: u16,
        sqhd: u16,
        opcode: u8,
        status: Status,
        dw0: u32,
        kind: Kind,
    ) {
        self.seq += 1;
        self.pending.push(Pending {
            due,
            seq: self.seq,
            cid,
            sqid,
            sqhd,
            opcode,
            status,
            dw0,
            kind,
        });
    }

    /// Fault injection: command `cid` of SQ `sqid` was fetched; its identifier is in use until
    /// its completion is posted.
    pub fn open(&mut self, sqid: u16, cid: u16) {
        *self.open.entry((sqid, cid)).or_insert(0) += 1;
    }

    /// The command identifier of an entry posted now: an unknown one is drawn among those no
    /// command of its SQ has outstanding; a genuine completion ends its command's use of its
    /// identifier.
    fn posted_cid(&mut self, p: &Pending) -> u16 {
        match p.kind {
            Kind::Genuine => {
                if !self.open.is_empty() {
                    if let Some(n) = self.open.get_mut(&(p.sqid, p.cid)) {
                        *n -= 1;
                        if *n == 0 {
                            self.open.remove(&(p.sqid, p.cid));
                        }
                    }
                }
                p.cid
            }
            Kind::Duplicate => p.cid,
            Kind::UnknownCid => loop {
                self.rng = splitmix(self.rng);
                let cid = self.rng as u16;
                if !self.open.contains_key(&(p.sqid, cid)) {
                    break cid;
                }
            },
        }
    }

    /// The earliest due time of a pending completion.
    pub fn next_due(&self) -> Option<u64> {
        self.pending.peek().map(|p| p.due)
    }

    fn write_one(&mut self, iommu: &ModelIommu, p: &Pending) -> Result<(), DmaFault> {
        let cid = self.posted_cid(p);
        let dw3 = u32::from(cid) | u32::from(self.phase) << 16 | u32::from(p.status.0) << 17;
        let dw2 = u32::from(p.sqhd) | u32::from(p.sqid) << 16;
        dma_engine::write_cqe(
            iommu,
            self.base.wrapping_add(u64::from(self.tail) * CQE_BYTES),
            [p.dw0, 0, dw2, dw3],
        )?;
        self.tail += 1;
        if self.tail == self.size {
            self.tail = 0;
            self.phase = !self.phase;
        }
        Ok(())
    }

    /// Posts the completions due at `now` into free slots, in due order or (with `reorder`) in
    /// a seeded random order. Calls `posted(opcode)` for each. Returns how many were posted.
    pub fn post_due(
        &mut self,
        iommu: &ModelIommu,
        now: u64,
        reorder: bool,
        mut posted: impl FnMut(u8),
    ) -> Result<usize, DmaFault> {
        let mut n = 0;
        if !reorder {
            while self.free() > 0 {
                match self.pending.peek() {
                    Some(p) if p.due <= now => {
                        let p = *p;
                        self.write_one(iommu, &p)?;
                        self.pending.pop();
                        posted(p.opcode);
                        n += 1;
                    }
                    _ => break,
                }
            }
            return Ok(n);
        }
        let mut batch = std::mem::take(&mut self.scratch);
        while self.pending.peek().is_some_and(|p| p.due <= now) {
            if let Some(p) = self.pending.pop() {
                batch.push(p);
            }
        }
        // Fisher-Yates with the queue's own seeded generator.
        for i in (1..batch.len()).rev() {
            self.rng = splitmix(self.rng);
            batch.swap(i, (self.rng % (i as u64 + 1)) as usize);
        }
        let mut result = Ok(());
        for p in batch.drain(..) {
            if result.is_ok() && self.free() > 0 {
                match self.write_one(iommu, &p) {
                    Ok(()) => {
                        posted(p.opcode);
                        n += 1;
                        continue;
                    }
                    Err(e) => result = Err(e),
                }
            }
            self.pending.push(p);
        }
        self.scratch = batch;
        result.map(|()| n)
    }
}
