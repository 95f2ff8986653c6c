//! Counters of what the driver made the model do.

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
}

/// The live counters.
#[derive(Debug)]
pub(crate) struct Counters {
    pub sq_doorbells: AtomicU64,
    pub cq_doorbells: AtomicU64,
    pub invalid_doorbells: AtomicU64,
    pub shadow_reads: AtomicU64,
    pub shadow_updates: AtomicU64,
    admin: Box<[AtomicU64]>,
    io: Box<[AtomicU64]>,
}

impl Counters {
    pub fn new() -> Self {
        Counters {
            sq_doorbells: AtomicU64::new(0),
            cq_doorbells: AtomicU64::new(0),
            invalid_doorbells: AtomicU64::new(0),
            shadow_reads: AtomicU64::new(0),
            shadow_updates: AtomicU64::new(0),
            admin: (0..256).map(|_| AtomicU64::new(0)).collect(),
            io: (0..256).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn completed(&self, admin: bool, opcode: u8) {
        let table = if admin { &self.admin } else { &self.io };
        if let Some(c) = table.get(usize::from(opcode)) {
            Self::bump(c);
        }
    }

    pub fn snapshot(&self, now_ns: u64) -> ModelStats {
        let map = |t: &[AtomicU64]| {
            t.iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let v = c.load(Ordering::Relaxed);
                    (v > 0).then_some((i as u8, v))
                })
                .collect()
        };
        ModelStats {
            sq_doorbell_writes: self.sq_doorbells.load(Ordering::Relaxed),
            cq_doorbell_writes: self.cq_doorbells.load(Ordering::Relaxed),
            invalid_doorbell_writes: self.invalid_doorbells.load(Ordering::Relaxed),
            shadow_doorbell_reads: self.shadow_reads.load(Ordering::Relaxed),
            shadow_doorbell_updates: self.shadow_updates.load(Ordering::Relaxed),
            admin_completed: map(&self.admin),
            io_completed: map(&self.io),
            now_ns,
        }
    }
}
