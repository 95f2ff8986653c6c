//! Seeded fault injection on I/O queues: each I/O command the device fetches draws at most
//! one fault from [`FaultPlan`], with a generator seeded from `ModelConfig::seed`, so a
//! run replays exactly for the same seed and the same driver actions.
//!
//! What each fault does (the command's data moves when it executes, as for any command):
//! - [`Fault::Late`]: the command executes and completes `late_ns` after its fetch (a stall).
//! - [`Fault::Lost`]: the command executes; its completion is never posted.
//! - [`Fault::Duplicate`]: the command executes; its completion entry is posted twice, the copy
//!   up to `duplicate_within_ns` later (a buggy device).
//! - [`Fault::UnknownCid`]: the command executes and completes; an extra completion entry with
//!   a command identifier that no command of that queue has outstanding follows it.
//! - [`Fault::Retryable`]: the command does not execute (no data moves, a write changes
//!   nothing) and completes with Namespace Not Ready (generic 82h, DNR = 0).
//! - [`Fault::MediaError`]: the command does not execute and completes with a media error (SCT
//!   2h: Write Fault 80h or Unrecovered Read Error 81h, DNR = 1).
//! - [`Fault::Fatal`]: the command does not execute; CSTS.CFS is set and the controller stops
//!   (no doorbell is acted on, no completion posted) until it is disabled.
//! - [`Fault::Gone`]: the command does not execute; from now on every register reads all ones,
//!   writes are ignored and nothing completes (the device was pulled), for good.
//! - `no_ready` (drawn at each enable after the first): CSTS.RDY never becomes 1 after CC.EN=1,
//!   so a reset does not bring the controller back.
//!
//! Faults apply to I/O queues only; admin commands are never faulted.

use super::namespaces::splitmix;
use super::sqe::Status;
use std::sync::atomic::{AtomicU64, Ordering};

/// Per-mille rates of the faults injected into I/O commands, and their parameters. The default
/// injects nothing (and costs the I/O path one branch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Per mille of I/O commands that complete late (see `late_ns`).
    pub late: u16,
    /// Per mille of I/O commands whose completion is lost.
    pub lost: u16,
    /// Per mille of I/O commands whose completion is posted twice.
    pub duplicate: u16,
    /// Per mille of I/O commands followed by a completion with an unknown command identifier.
    pub unknown_cid: u16,
    /// Per mille of I/O commands that fail with a retryable status (Namespace Not Ready, DNR=0).
    pub retryable: u16,
    /// Per mille of I/O commands that fail with a media error (SCT 2h, DNR = 1).
    pub media_error: u16,
    /// Per mille of I/O commands at which the controller goes fatal (CSTS.CFS).
    pub fatal: u16,
    /// Per mille of I/O commands at which the device disappears (all-ones reads).
    pub gone: u16,
    /// Per mille of enables after the first (resets) after which CSTS.RDY never becomes 1.
    pub no_ready: u16,
    /// How long after its fetch a late command executes and completes (virtual ns).
    pub late_ns: u64,
    /// The longest virtual time between a completion and its duplicate.
    pub duplicate_within_ns: u64,
}

impl FaultPlan {
    /// Whether any fault is configured.
    pub fn is_on(&self) -> bool {
        self.per_command_total() != 0 || self.no_ready != 0
    }

    /// Checks that the rates are per mille (their sum at most 1000).
    pub(crate) fn validate(&self) -> Result<(), super::config::ModelError> {
        let total = self.per_command_total();
        if total > 1000 || self.no_ready > 1000 {
            return Err(super::config::ModelError::BadLimit {
                what: "faults (sum of the per-command rates, or no_ready)",
                value: u64::from(total.max(u32::from(self.no_ready))),
                hint: "rates are per mille: use at most 1000 in all",
            });
        }
        Ok(())
    }

    /// The sum of the per-command rates (at most 1000).
    pub(crate) fn per_command_total(&self) -> u32 {
        [
            self.late,
            self.lost,
            self.duplicate,
            self.unknown_cid,
            self.retryable,
            self.media_error,
            self.fatal,
            self.gone,
        ]
        .iter()
        .map(|&r| u32::from(r))
        .sum()
    }
}

/// A fault the model injected, as counted by [`FaultCounts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A late completion.
    Late,
    /// A lost completion.
    Lost,
    /// A completion posted twice.
    Duplicate,
    /// A completion with an unknown command identifier.
    UnknownCid,
    /// A retryable error status.
    Retryable,
    /// A media error status.
    MediaError,
    /// Controller Fatal Status.
    Fatal,
    /// The device disappeared.
    Gone,
    /// A controller that did not become ready after a reset.
    NoReady,
}

impl Fault {
    /// Every fault, in [`FaultCounts`] order.
    pub const ALL: [Fault; 9] = [
        Fault::Late,
        Fault::Lost,
        Fault::Duplicate,
        Fault::UnknownCid,
        Fault::Retryable,
        Fault::MediaError,
        Fault::Fatal,
        Fault::Gone,
        Fault::NoReady,
    ];
}

/// How many faults of each kind the model injected, indexed like [`Fault::ALL`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts(pub [u64; 9]);

impl FaultCounts {
    /// The count of `fault`.
    pub fn of(&self, fault: Fault) -> u64 {
        let i = Fault::ALL.iter().position(|&f| f == fault).unwrap_or(0);
        self.0[i]
    }
    /// All faults injected.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Namespace Not Ready: generic status 82h, DNR = 0 (retryable).
pub(crate) const NAMESPACE_NOT_READY: Status = Status(0x82);
/// Write Fault: media error (SCT 2h) 80h, DNR = 1.
pub(crate) const WRITE_FAULT: Status = Status(0x280 | 1 << 14);
/// Unrecovered Read Error: media error (SCT 2h) 81h, DNR = 1.
pub(crate) const UNRECOVERED_READ: Status = Status(0x281 | 1 << 14);

/// The model's fault state: the plan (changeable at run time), the generator, the counts.
#[derive(Debug)]
pub(crate) struct Faults {
    plan: std::sync::Mutex<FaultPlan>,
    /// Fast check: a plan with any fault is set.
    pub on: std::sync::atomic::AtomicBool,
    rng: AtomicU64,
    counts: [AtomicU64; 9],
    /// The device is gone (sticky).
    pub gone: std::sync::atomic::AtomicBool,
    /// A plan with faults was set at some point (sticky: late commands may still be held).
    pub armed: std::sync::atomic::AtomicBool,
}

impl Faults {
    pub fn new(plan: FaultPlan, seed: u64) -> Self {
        Faults {
            on: std::sync::atomic::AtomicBool::new(plan.is_on()),
            plan: std::sync::Mutex::new(plan),
            rng: AtomicU64::new(splitmix(seed ^ 0x6661_756c_7473)),
            counts: Default::default(),
            gone: std::sync::atomic::AtomicBool::new(false),
            armed: std::sync::atomic::AtomicBool::new(plan.is_on()),
        }
    }

    pub fn plan(&self) -> FaultPlan {
        *self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_plan(&self, plan: FaultPlan) {
        *self.plan.lock().unwrap_or_else(|e| e.into_inner()) = plan;
        self.on.store(plan.is_on(), Ordering::Release);
        if plan.is_on() {
            self.armed.store(true, Ordering::Release);
        }
    }

    /// The next pseudo-random number of the fault generator.
    pub fn next(&self) -> u64 {
        // One generator for the whole device: deterministic for a deterministic driver.
        let mut x = self.rng.load(Ordering::Relaxed);
        loop {
            let n = splitmix(x);
            match self
                .rng
                .compare_exchange_weak(x, n, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return n,
                Err(cur) => x = cur,
            }
        }
    }

    pub fn count(&self, fault: Fault) {
        if let Some(i) = Fault::ALL.iter().position(|&f| f == fault) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn counts(&self) -> FaultCounts {
        let mut c = FaultCounts::default();
        for (out, n) in c.0.iter_mut().zip(self.counts.iter()) {
            *out = n.load(Ordering::Relaxed);
        }
        c
    }

    /// The fault for the next I/O command, if any (counted).
    pub fn draw(&self) -> Option<Fault> {
        if !self.on.load(Ordering::Acquire) {
            return None;
        }
        let plan = self.plan();
        let mut r = (self.next() % 1000) as u32;
        let rates = [
            (plan.late, Fault::Late),
            (plan.lost, Fault::Lost),
            (plan.duplicate, Fault::Duplicate),
            (plan.unknown_cid, Fault::UnknownCid),
            (plan.retryable, Fault::Retryable),
            (plan.media_error, Fault::MediaError),
            (plan.fatal, Fault::Fatal),
            (plan.gone, Fault::Gone),
        ];
        for (rate, fault) in rates {
            let rate = u32::from(rate);
            if r < rate {
                self.count(fault);
                return Some(fault);
            }
            r -= rate;
        }
        None
    }

    /// Whether this enable (a reset: not the first) leaves the controller never ready.
    pub fn draw_no_ready(&self) -> bool {
        if !self.on.load(Ordering::Acquire) {
            return false;
        }
        let rate = u64::from(self.plan().no_ready);
        if rate != 0 && self.next() % 1000 < rate {
            self.count(Fault::NoReady);
            return true;
        }
        false
    }
}
