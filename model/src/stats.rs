//! Counters of what the driver made the model do.

use crossbeam_utils::CachePadded;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the model's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelStats {
    /// MMIO writes to submission queue tail doorbells (admin included).
    pub sq_doorbell_writes: u64,
    /// MMIO writes to completion queue head doorbells (admin included).
    pub cq_doorbell_writes: u64,
    /// Doorbell writes the model ignored: no such queue, or a value out of range.
    pub invalid_doorbell_writes: u64,
    /// Reads of shadow doorbell values (SQ tails and CQ heads) from host memory.
    pub shadow_doorbell_reads: u64,
    /// Shadow doorbell reads that found new work (or freed CQ slots).
    pub shadow_doorbell_updates: u64,
    /// Admin commands completed (CQE posted), by opcode.
    pub admin_completed: BTreeMap<u8, u64>,
    /// I/O commands completed (CQE posted), by opcode.
    pub io_completed: BTreeMap<u8, u64>,
    /// Identify commands received, by CNS (answered or rejected).
    pub identify_cns: BTreeMap<u8, u64>,
    /// I/O commands received with an SGL data pointer (PSDT 01b).
    pub sgl_commands: u64,
    /// Host (wall-clock) nanoseconds spent inside the model's doorbell, `before_poll` and
    /// `relax` handling; 0 unless [`crate::ModelConfig::measure_busy_time`] is set.
    pub busy_ns: u64,
    /// Virtual time in nanoseconds.
    pub now_ns: u64,
}

impl ModelStats {
    /// I/O commands of `opcode` completed.
    pub fn io(&self, opcode: u8) -> u64 {
        self.io_completed.get(&opcode).copied().unwrap_or(0)
    }
    /// Admin commands of `opcode` completed.
    pub fn admin(&self, opcode: u8) -> u64 {
        self.admin_completed.get(&opcode).copied().unwrap_or(0)
    }
    /// Identify commands with this CNS received.
    pub fn identify(&self, cns: u8) -> u64 {
        self.identify_cns.get(&cns).copied().unwrap_or(0)
    }
}

/// I/O opcodes below this are counted per queue (no shared cache line); the rest globally.
const PER_QUEUE_OPCODES: usize = 16;

/// Counters of one queue pair, on their own cache line.
#[derive(Debug, Default)]
struct QueueCounters {
    sq_doorbells: AtomicU64,
    cq_doorbells: AtomicU64,
    shadow_reads: AtomicU64,
    shadow_updates: AtomicU64,
    busy_ns: AtomicU64,
    io: [AtomicU64; PER_QUEUE_OPCODES],
}

/// The live counters.
#[derive(Debug)]
pub(crate) struct Counters {
    queues: Box<[CachePadded<QueueCounters>]>,
    invalid_doorbells: AtomicU64,
    admin: Box<[AtomicU64]>,
    io_other: Box<[AtomicU64]>,
    identify_cns: Box<[AtomicU64]>,
    sgl_commands: AtomicU64,
}

/// What to count on a queue.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    SqDoorbell,
    CqDoorbell,
    ShadowRead,
    ShadowUpdate,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub fn new(queues: usize) -> Self {
        Counters {
            queues: (0..queues).map(|_| CachePadded::default()).collect(),
            invalid_doorbells: AtomicU64::new(0),
            admin: (0..256).map(|_| AtomicU64::new(0)).collect(),
            io_other: (0..256).map(|_| AtomicU64::new(0)).collect(),
            identify_cns: (0..256).map(|_| AtomicU64::new(0)).collect(),
            sgl_commands: AtomicU64::new(0),
        }
    }

    /// Counts `event` on queue `qid`.
    pub fn queue(&self, qid: usize, event: Event) {
        if let Some(q) = self.queues.get(qid) {
            bump(match event {
                Event::SqDoorbell => &q.sq_doorbells,
                Event::CqDoorbell => &q.cq_doorbells,
                Event::ShadowRead => &q.shadow_reads,
                Event::ShadowUpdate => &q.shadow_updates,
            });
        }
    }

    /// Adds host time spent in the model for queue `qid` (0 for the admin queue and `relax`).
    pub fn add_busy(&self, qid: usize, ns: u64) {
        if let Some(q) = self.queues.get(qid).or_else(|| self.queues.first()) {
            q.busy_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Counts an Identify command with `cns`.
    pub fn identify(&self, cns: u8) {
        if let Some(c) = self.identify_cns.get(usize::from(cns)) {
            bump(c);
        }
    }

    /// Counts an I/O command with an SGL data pointer.
    pub fn sgl_command(&self) {
        bump(&self.sgl_commands);
    }

    pub fn invalid_doorbell(&self) {
        bump(&self.invalid_doorbells);
    }

    /// Counts a completion posted on CQ `cqid` (0 = admin).
    pub fn completed(&self, cqid: usize, opcode: u8) {
        let op = usize::from(opcode);
        let c = if cqid == 0 {
            self.admin.get(op)
        } else {
            match self.queues.get(cqid).and_then(|q| q.io.get(op)) {
                Some(c) => Some(c),
                None => self.io_other.get(op),
            }
        };
        if let Some(c) = c {
            bump(c);
        }
    }

    pub fn snapshot(&self, now_ns: u64) -> ModelStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let sum =
            |f: fn(&QueueCounters) -> &AtomicU64| self.queues.iter().map(|q| load(f(q))).sum();
        let mut io: BTreeMap<u8, u64> = BTreeMap::new();
        let mut add = |op: usize, v: u64| {
            if v > 0 {
                *io.entry(op as u8).or_default() += v;
            }
        };
        for q in self.queues.iter() {
            for (op, c) in q.io.iter().enumerate() {
                add(op, load(c));
            }
        }
        for (op, c) in self.io_other.iter().enumerate() {
            add(op, load(c));
        }
        ModelStats {
            sq_doorbell_writes: sum(|q| &q.sq_doorbells),
            cq_doorbell_writes: sum(|q| &q.cq_doorbells),
            invalid_doorbell_writes: load(&self.invalid_doorbells),
            shadow_doorbell_reads: sum(|q| &q.shadow_reads),
            shadow_doorbell_updates: sum(|q| &q.shadow_updates),
            busy_ns: sum(|q| &q.busy_ns),
            sgl_commands: load(&self.sgl_commands),
            admin_completed: self
                .admin
                .iter()
                .enumerate()
                .filter_map(|(op, c)| Some((op as u8, load(c))).filter(|e| e.1 > 0))
                .collect(),
            io_completed: io,
            identify_cns: self
                .identify_cns
                .iter()
                .enumerate()
                .filter_map(|(cns, c)| Some((cns as u8, load(c))).filter(|e| e.1 > 0))
                .collect(),
            now_ns,
        }
    }
}
