//! `IoChannel`: one thread's handle on a head. It owns one queue pair per path (created on
//! first use), picks a path per request by the head's policy, fails requests over to another
//! path on path errors with the same buffer, and queues them (bounded, no allocation) while
//! no path is usable.
//!
//! Exactly once: a request the channel accepted (submit returned `Ok`) is delivered by
//! [`IoChannel::poll`] exactly once, with success or a typed error. A request is resubmitted
//! only after its previous command ended (the device reported a path error, or the driver
//! ended it after the controller was reset, failed or removed: the device no longer uses the
//! buffer), so a write already acknowledged is never written again by a late retry.

use super::error::MultipathError;
use super::head::Head;
use super::paths::{PathState, MAX_PATHS};
use super::policy::{pick, PathPolicy};
use super::subsystem::Subsystem;
use crate::controller::QueuePair;
use crate::error::SubmitErrorKind;
use crate::namespace::Namespace;
use crate::namespaces::epoch::pin;
use crate::platform::Platform;
use std::collections::VecDeque;
use std::sync::Arc;
use vfnvme_hal::DmaBuffer;

mod direct;
mod poll;
mod receive;
mod submit;
mod types;

use direct::Direct;

pub use types::{ChannelCompletion, ChannelOptions, ChannelStats, ChannelSubmitError, IoOp};
use types::{Pending, Tag};

enum Dispatch {
    Sent,
    /// No usable path (or every one refused).
    NoPath(Option<DmaBuffer>),
    /// The chosen path's queue pair is full.
    Busy(Option<DmaBuffer>),
    /// The request can't be sent anywhere as given.
    Refused(SubmitErrorKind, Option<DmaBuffer>),
}

/// No fixed route: pick per request.
const DYNAMIC: u8 = u8::MAX;
/// No usable path.
const NO_PATH: u8 = u8::MAX - 1;

/// One thread's I/O handle on a multipath head (`Send`, not `Sync`).
pub struct IoChannel<P: Platform> {
    subsystem: Arc<Subsystem<P>>,
    head: Arc<Head>,
    /// Direct mode (see `direct.rs`): the one path every request takes, its queue pair taken
    /// out of `qpairs`.
    direct: Option<Direct<P>>,
    /// Per path: its queue pair, whose trackers keep each request's [`Tag`].
    qpairs: [Option<QueuePair<P, Tag>>; MAX_PATHS],
    namespaces: [Option<Arc<Namespace>>; MAX_PATHS],
    /// The head generation the fields below were computed for.
    generation: usize,
    policy: PathPolicy,
    optimized: u32,
    non_optimized: u32,
    local: u32,
    changing: bool,
    /// Paths that returned a path error (or could not get a queue pair) since the last
    /// refresh: skipped until the head changes.
    excluded: u32,
    /// The usable tier without the excluded paths.
    tier: u32,
    /// The path every request takes (numa policy), [`DYNAMIC`] or [`NO_PATH`].
    route: u8,
    /// The head's queueing option as last seen, and whether the user switched it off while
    /// requests were queued (they then fail with `QueueingOff`, not `NoPath`).
    queueing_seen: bool,
    switched_off: bool,
    /// Paths with requests in flight (or waiting for their doorbell).
    busy: u32,
    /// Paths whose controller the subsystem released (the device was removed): their queue
    /// pairs are dropped once nothing is outstanding on them, so that the process lets go of
    /// the device.
    dead: u32,
    cursor: u32,
    /// Requests waiting for a path or to be sent again; never reallocated: it has room for
    /// `capacity` queued requests plus every slot of every open queue pair.
    pending: VecDeque<Pending>,
    /// Requests finished by the out-of-line paths of a poll, delivered to the user's closure
    /// at its end (see `poll.rs`); reserved like `pending`, never reallocated.
    outbox: VecDeque<ChannelCompletion>,
    /// The refusal of the last submission, left by its out-of-line path for the inlined
    /// caller to hand back (see `submit.rs`).
    refusal: Option<ChannelSubmitError>,
    /// What `pending` and `outbox` have room for: `capacity` plus the depth of every queue
    /// pair opened.
    room: usize,
    capacity: usize,
    options: ChannelOptions,
    stats: ChannelStats,
    /// Commands sent per path.
    sent: [u64; MAX_PATHS],
}

impl<P: Platform> std::fmt::Debug for IoChannel<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoChannel")
            .field("nsid", &self.head.nsid())
            .field("outstanding", &self.outstanding())
            .field("queued", &self.pending.len())
            .finish()
    }
}

impl<P: Platform> IoChannel<P> {
    /// A channel on `head` of `subsystem`. Queue pairs are created on first use of each path.
    pub fn open(
        subsystem: Arc<Subsystem<P>>,
        head: Arc<Head>,
        options: ChannelOptions,
    ) -> Result<Self, MultipathError> {
        if !(1..=1 << 20).contains(&options.capacity) {
            return Err(MultipathError::BadOption {
                what: "capacity",
                value: options.capacity as u64,
                hint: "use 1..=1048576 requests",
            });
        }
        let mut ch = IoChannel {
            subsystem,
            head,
            direct: None,
            qpairs: std::array::from_fn(|_| None),
            namespaces: std::array::from_fn(|_| None),
            generation: 0,
            policy: PathPolicy::Numa,
            optimized: 0,
            non_optimized: 0,
            local: 0,
            changing: false,
            excluded: 0,
            tier: 0,
            route: NO_PATH,
            queueing_seen: true,
            switched_off: false,
            busy: 0,
            dead: 0,
            cursor: 31,
            pending: VecDeque::with_capacity(options.capacity),
            outbox: VecDeque::new(),
            refusal: None,
            room: options.capacity,
            capacity: options.capacity,
            stats: ChannelStats::default(),
            sent: [0; MAX_PATHS],
            options,
        };
        ch.reserve_room();
        ch.refresh(ch.head.paths.generation());
        Ok(ch)
    }

    /// Gives `pending` and the outbox room for `room` requests, and writes the outbox's new
    /// memory once: it is filled only when many requests end at once (a queue failed with
    /// queueing switched off), which should not then page-fault its way through fresh memory.
    fn reserve_room(&mut self) {
        let room = self.room;
        self.pending
            .reserve(room.saturating_sub(self.pending.len()));
        if self.outbox.is_empty() && self.outbox.capacity() < room {
            self.outbox.reserve(room);
            while self.outbox.len() < self.outbox.capacity() {
                self.outbox.push_back(ChannelCompletion {
                    tag: 0,
                    result: Ok(()),
                    buffer: None,
                    path: None,
                    failovers: 0,
                    memory_held: false,
                });
            }
            self.outbox.clear();
        }
    }

    /// The head.
    pub fn head(&self) -> &Arc<Head> {
        &self.head
    }

    /// Requests accepted and not yet delivered.
    pub fn outstanding(&self) -> usize {
        let inflight: usize = self.qpairs.iter().flatten().map(|q| q.outstanding()).sum();
        let direct = self.direct.as_ref().map_or(0, |d| d.qp.outstanding());
        inflight + direct + self.pending.len()
    }

    /// The paths this channel has a queue pair on (bit `i` for controller index `i`).
    pub fn open_paths(&self) -> u32 {
        self.qpairs
            .iter()
            .enumerate()
            .filter(|(_, q)| q.is_some())
            .fold(0, |m, (i, _)| m | 1 << i)
            | self.direct.as_ref().map_or(0, |d| 1 << d.path)
    }

    /// Requests waiting for a path.
    pub fn queued(&self) -> usize {
        self.pending.len()
    }

    /// The counters.
    pub fn stats(&self) -> ChannelStats {
        let mut per_path = self.sent.to_vec();
        if let Some(d) = &self.direct {
            per_path[d.path] += d.sent;
        }
        ChannelStats {
            per_path,
            ..self.stats.clone()
        }
    }

    /// Re-reads the head's path list and policy (the head changed).
    #[cold]
    #[inline(never)]
    fn refresh(&mut self, generation: usize) {
        let guard = pin();
        let numa = self.options.numa_node;
        let (mut opt, mut non, mut local, mut changing) = (0u32, 0u32, 0u32, false);
        let namespaces = &mut self.namespaces;
        self.head.paths.read(&guard, |list| {
            let mut seen = 0u32;
            for p in list.paths.iter().filter(|p| p.controller < MAX_PATHS) {
                let bit = 1u32 << p.controller;
                seen |= bit;
                match p.state {
                    PathState::Optimized => opt |= bit,
                    PathState::NonOptimized => non |= bit,
                    PathState::Change => changing = true,
                    _ => {}
                }
                if numa.is_some() && p.numa_node == numa {
                    local |= bit;
                }
                let slot = &mut namespaces[p.controller];
                if !slot.as_ref().is_some_and(|n| Arc::ptr_eq(n, &p.namespace)) {
                    *slot = Some(p.namespace.clone());
                }
            }
            for (i, slot) in namespaces.iter_mut().enumerate() {
                if seen & 1 << i == 0 {
                    *slot = None;
                }
            }
        });
        self.dead = 0;
        for (i, qp) in self.qpairs.iter().enumerate() {
            if qp.is_some() && self.subsystem.released(i) {
                self.dead |= 1 << i;
            }
        }
        self.optimized = opt;
        self.non_optimized = non;
        self.local = local;
        self.changing = changing;
        self.excluded = 0;
        self.policy = self.head.policy();
        let queueing = self.head.queue_if_no_path();
        if self.queueing_seen && !queueing && !self.pending.is_empty() {
            self.switched_off = true;
        }
        self.queueing_seen = queueing;
        self.generation = generation;
        self.route();
    }

    /// Recomputes the usable tier and, for the numa policy, the one path every request takes.
    fn route(&mut self) {
        let opt = self.optimized & !self.excluded;
        self.tier = if opt != 0 {
            opt
        } else {
            self.non_optimized & !self.excluded
        };
        self.route = if self.tier == 0 {
            NO_PATH
        } else if self.policy == PathPolicy::Numa {
            pick(self.policy, self.tier, self.local, &mut self.cursor, |_| 0) as u8
        } else {
            DYNAMIC
        };
    }

    /// Excludes path `i` until the head changes.
    fn exclude(&mut self, i: usize) {
        self.excluded |= 1 << i;
        self.route();
    }

    /// Brings the cached path view up to date: one atomic load when nothing changed.
    #[inline(always)]
    fn sync(&mut self) {
        let g = self.head.paths.generation();
        if g != self.generation {
            self.refresh(g);
        }
    }

    /// The path for the next request (`None`: no usable path).
    #[inline(always)]
    fn choose(&mut self) -> Option<usize> {
        let route = usize::from(self.route);
        // One compare for the fixed route of the numa policy.
        if route < MAX_PATHS {
            return Some(route);
        }
        if self.route == NO_PATH {
            return None;
        }
        let qpairs = &self.qpairs;
        Some(pick(
            self.policy,
            self.tier,
            self.local,
            &mut self.cursor,
            |i| {
                qpairs[i & (MAX_PATHS - 1)]
                    .as_ref()
                    .map_or(0, |q| q.outstanding() as u32)
            },
        ))
    }
}
