//! A write + read-verify workload on a multipath [`IoChannel`] that detects lost, duplicated
//! and corrupt I/O: every write carries (slot, sequence number, block) in each block and seeded
//! random data; once acknowledged, the slot is read back and must hold exactly the last
//! acknowledged write. One request per slot at a time, many slots in flight.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use vfnvme::hal::{DmaBuffer, DmaPool};
use vfnvme::multipath::{ChannelCompletion, IoChannel, Subsystem};
use vfnvme::platform::Platform;

use crate::guest_io::Prng;

/// A block's header: magic, slot, sequence number, block index (little-endian u64s).
const MAGIC: u64 = 0x5046_4d45_564e_4656; // "VFNVMEMP"
const HEADER: usize = 32;
/// Subsystem::poll every this many loop turns.
const SUBSYSTEM_POLL_EVERY: u32 = 16;

/// What happened to the requests of a [`Workload`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Requests the channel accepted.
    pub issued: u64,
    /// Delivered with success (reads also verified).
    pub ok: u64,
    /// Delivered with an error, or refused at submission.
    pub errors: u64,
    /// Delivered for a tag not in flight (a second delivery).
    pub duplicated: u64,
    /// Reads whose data was not the last acknowledged write.
    pub corrupt: u64,
    /// Completions per path (controller index), as the channel reported them.
    pub per_path: [u64; 2],
}

impl Tally {
    /// Requests delivered (once each).
    pub fn delivered(&self) -> u64 {
        self.ok + self.errors
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Read,
}

/// The workload's state over the slots of a region of one namespace.
pub struct Workload {
    dma: DmaPool,
    lba_size: usize,
    blocks: u32,
    first_lba: u64,
    depth: usize,
    /// Per slot: the sequence number of the last acknowledged write.
    expected: Vec<Option<u64>>,
    /// Per slot: whether a request on it is in flight.
    busy: Vec<bool>,
    reads: VecDeque<usize>,
    inflight: HashMap<u64, (usize, Op, u64)>,
    free: Vec<DmaBuffer>,
    next_tag: u64,
    next_seq: u64,
    cursor: usize,
    /// The counts so far.
    pub tally: Tally,
    first_error: Option<String>,
}

impl Workload {
    /// `slots` slots of `blocks` blocks of `lba_size` bytes from `first_lba`, at most `depth`
    /// requests in flight, buffers from `dma`.
    pub fn new(
        dma: DmaPool,
        lba_size: u32,
        blocks: u32,
        first_lba: u64,
        slots: usize,
        depth: usize,
    ) -> Self {
        Workload {
            dma,
            lba_size: lba_size as usize,
            blocks,
            first_lba,
            depth,
            expected: vec![None; slots],
            busy: vec![false; slots],
            reads: VecDeque::new(),
            inflight: HashMap::new(),
            free: Vec::new(),
            next_tag: 1,
            next_seq: 1,
            cursor: 0,
            tally: Tally::default(),
            first_error: None,
        }
    }

    /// Requests in flight.
    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    /// The first error or corruption seen, if any.
    pub fn first_error(&self) -> Option<&str> {
        self.first_error.as_deref()
    }

    fn len(&self) -> usize {
        self.lba_size * self.blocks as usize
    }

    fn fill(&self, buf: &mut [u8], slot: usize, seq: u64) {
        for (b, block) in buf.chunks_mut(self.lba_size).enumerate() {
            block[0..8].copy_from_slice(&MAGIC.to_le_bytes());
            block[8..16].copy_from_slice(&(slot as u64).to_le_bytes());
            block[16..24].copy_from_slice(&seq.to_le_bytes());
            block[24..32].copy_from_slice(&(b as u64).to_le_bytes());
            Prng::new((slot as u64) << 40 ^ seq << 8 ^ b as u64).fill(&mut block[HEADER..]);
        }
    }

    fn buffer(&mut self) -> DmaBuffer {
        let len = self.len();
        self.free.pop().unwrap_or_else(|| {
            self.dma
                .alloc(len)
                .unwrap_or_else(|e| panic!("allocating a {len}-byte DMA buffer: {e}"))
        })
    }

    fn note_error(&mut self, what: String) {
        eprintln!("workload: {what}");
        self.first_error.get_or_insert(what);
    }

    /// Submits until `depth` requests are in flight: reads of freshly written slots first,
    /// then writes of idle slots.
    fn fill_queue<P: Platform>(&mut self, ch: &mut IoChannel<P>) {
        while self.inflight.len() < self.depth {
            let (slot, op) = match self.reads.pop_front() {
                Some(s) => (s, Op::Read),
                None => {
                    let n = self.busy.len();
                    let Some(s) = (0..n)
                        .map(|i| (self.cursor + i) % n)
                        .find(|&s| !self.busy[s])
                    else {
                        return;
                    };
                    self.cursor = (s + 1) % n;
                    (s, Op::Write)
                }
            };
            let mut buf = self.buffer();
            let seq = match op {
                Op::Write => {
                    let seq = self.next_seq;
                    self.next_seq += 1;
                    self.fill(buf.as_mut_slice(), slot, seq);
                    seq
                }
                Op::Read => {
                    buf.as_mut_slice().fill(0xa5);
                    self.expected[slot].unwrap_or(0)
                }
            };
            let tag = self.next_tag;
            self.next_tag += 1;
            let lba = self.first_lba + slot as u64 * u64::from(self.blocks);
            let r = match op {
                Op::Write => ch.write(lba, self.blocks, buf, tag),
                Op::Read => ch.read(lba, self.blocks, buf, tag),
            };
            self.busy[slot] = true;
            match r {
                Ok(()) => {
                    self.tally.issued += 1;
                    self.inflight.insert(tag, (slot, op, seq));
                }
                Err(e) => {
                    self.tally.errors += 1;
                    self.busy[slot] = false;
                    if let Some(b) = e.buffer {
                        self.free.push(b);
                    }
                    self.note_error(format!("submission of {op:?} on slot {slot}: {}", e.error));
                    return;
                }
            }
        }
    }

    fn complete(&mut self, c: ChannelCompletion) {
        if let Some(p) = c.path.filter(|&p| p < 2) {
            self.tally.per_path[p] += 1;
        }
        let Some((slot, op, seq)) = self.inflight.remove(&c.tag) else {
            self.tally.duplicated += 1;
            self.note_error(format!("tag {} delivered twice (or never issued)", c.tag));
            return;
        };
        self.busy[slot] = false;
        if let Err(e) = &c.result {
            self.tally.errors += 1;
            self.note_error(format!("{op:?} of slot {slot} (seq {seq}) failed: {e}"));
        } else {
            self.tally.ok += 1;
            match op {
                Op::Write => {
                    self.expected[slot] = Some(seq);
                    self.busy[slot] = true;
                    self.reads.push_back(slot);
                }
                Op::Read => match &c.buffer {
                    Some(b) => {
                        let mut want = vec![0u8; self.len()];
                        self.fill(&mut want, slot, seq);
                        if let Some(i) = want.iter().zip(b.as_slice()).position(|(a, b)| a != b) {
                            self.tally.corrupt += 1;
                            self.note_error(format!(
                                "slot {slot}: read differs from write seq {seq} at byte {i}"
                            ));
                        }
                    }
                    None => {
                        self.tally.corrupt += 1;
                        self.note_error(format!(
                            "slot {slot}: a read came back without its buffer"
                        ));
                    }
                },
            }
        }
        if let Some(b) = c.buffer {
            self.free.push(b);
        }
    }

    /// Runs I/O (and `Subsystem::poll` every few turns) until `until(self)` holds; panics
    /// after `deadline`, saying `what`.
    pub fn run<P: Platform>(
        &mut self,
        ch: &mut IoChannel<P>,
        sub: &Subsystem<P>,
        deadline: Duration,
        what: &str,
        mut until: impl FnMut(&Workload) -> bool,
    ) {
        let start = Instant::now();
        let mut done = Vec::with_capacity(self.depth);
        let mut turn = 0u32;
        while !until(self) {
            self.fill_queue(ch);
            ch.poll(self.depth, |c| done.push(c));
            for c in done.drain(..) {
                self.complete(c);
            }
            turn = turn.wrapping_add(1);
            if turn.is_multiple_of(SUBSYSTEM_POLL_EVERY) {
                sub.poll();
            }
            assert!(
                start.elapsed() < deadline,
                "{what}: not done within {deadline:?} ({:?}, {} in flight)",
                self.tally,
                self.inflight.len()
            );
        }
    }

    /// Runs until `count` more requests were delivered.
    pub fn run_count<P: Platform>(
        &mut self,
        ch: &mut IoChannel<P>,
        sub: &Subsystem<P>,
        count: u64,
        what: &str,
    ) {
        let target = self.tally.delivered() + count;
        self.run(ch, sub, Duration::from_secs(300), what, |w| {
            w.tally.delivered() >= target
        });
    }

    /// Submits nothing more and delivers what is in flight (up to `deadline`); returns how many
    /// requests were never delivered (lost).
    pub fn drain<P: Platform>(
        &mut self,
        ch: &mut IoChannel<P>,
        sub: &Subsystem<P>,
        deadline: Duration,
    ) -> u64 {
        let start = Instant::now();
        let mut done = Vec::new();
        let mut turn = 0u32;
        while !self.inflight.is_empty() && start.elapsed() < deadline {
            ch.poll(self.depth, |c| done.push(c));
            for c in done.drain(..) {
                self.complete(c);
            }
            turn = turn.wrapping_add(1);
            if turn.is_multiple_of(SUBSYSTEM_POLL_EVERY) {
                sub.poll();
            }
        }
        // Reads queued by writes that completed during the drain are not sent.
        for s in self.reads.drain(..) {
            self.busy[s] = false;
        }
        self.inflight.len() as u64
    }

    /// Queues a read of every slot written so far (run and drain to do them).
    pub fn reread_all(&mut self) {
        for (s, e) in self.expected.iter().enumerate() {
            if e.is_some() && !self.busy[s] {
                self.busy[s] = true;
                self.reads.push_back(s);
            }
        }
    }

    /// Slots still to be read back.
    pub fn reads_queued(&self) -> usize {
        self.reads.len()
    }

    /// Slots written (acknowledged) at least once.
    pub fn slots_written(&self) -> usize {
        self.expected.iter().filter(|e| e.is_some()).count()
    }

    /// Gives the buffers back to the pool.
    pub fn release_buffers(&mut self) {
        self.free.clear();
    }
}
