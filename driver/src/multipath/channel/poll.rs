//! Polling: completions delivered, path errors failed over with the same buffer, queued
//! requests resubmitted or failed all at once.

use super::types::{ChannelCompletion, IoOp};
use super::{Dispatch, IoChannel, Pending, Tag, NO_PATH};
use crate::multipath::error::ChannelError;
use crate::multipath::paths::MAX_PATHS;
use crate::platform::Platform;
use crate::queue::IoCompletion;
use crate::spec::status::{generic, sct};
use crate::spec::Status;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

impl<P: Platform> IoChannel<P> {
    /// Rings the doorbell of every path with new commands (one write per path).
    #[inline]
    pub fn commit(&mut self) {
        if let Some(d) = self.direct.as_mut() {
            d.qp.commit();
        }
        self.commit_paths(self.busy);
    }

    /// Commits the queue pairs of the paths in `dirty`.
    #[inline]
    fn commit_paths(&mut self, mut dirty: u32) {
        while dirty != 0 {
            let i = dirty.trailing_zeros() as usize;
            dirty &= dirty - 1;
            if let Some(qp) = self.qpairs[i & (MAX_PATHS - 1)].as_mut() {
                qp.commit();
            }
        }
    }

    /// Commits, delivers up to `max` finished requests to `f`, fails requests over or queues
    /// them on path errors, resubmits queued requests when a path is usable, and fails every
    /// queued request at once when the head is removed, queueing was switched off or the
    /// head's delayed removal ran out. Returns how many were delivered.
    #[inline]
    pub fn poll<F: FnMut(ChannelCompletion)>(&mut self, max: usize, mut f: F) -> usize {
        if let Some(d) = self.direct.as_mut() {
            if self.head.paths.generation() == self.generation {
                let (i, pending) = (d.path, &mut self.pending);
                let parked = pending.len();
                let fr = &mut f;
                let got = d.qp.poll(max, move |c: IoCompletion<Tag>| {
                    sort(c, i, fr, pending);
                });
                let failed = self.pending.len() - parked;
                if failed == 0 {
                    return got;
                }
                return got - failed + self.direct_failures(i, failed, &mut f);
            }
        }
        // One branch for the rare cases at the start: a changed head, requests waiting, a
        // released controller's queue pair to drop.
        if (self.head.paths.generation() ^ self.generation)
            | self.pending.len()
            | self.dead as usize
            != 0
        {
            return self.poll_rare(max, &mut f);
        }
        let excluded = self.excluded;
        let delivered = self.poll_paths(max, excluded, &mut f);
        if self.excluded != excluded || !self.pending.is_empty() {
            return delivered + self.after_poll(excluded, &mut f);
        }
        // A fixed route whose other paths drained: direct mode again.
        if usize::from(self.route) < MAX_PATHS && self.busy & !(1 << (self.route & 31)) == 0 {
            self.redirect();
        }
        delivered
    }

    /// `n` requests failed during a direct-mode poll of path `i` (they are at the back of
    /// `pending`): back to the general arrays to triage them.
    #[cold]
    #[inline(never)]
    fn direct_failures<F: FnMut(ChannelCompletion)>(
        &mut self,
        i: usize,
        n: usize,
        f: &mut F,
    ) -> usize {
        self.undirect();
        let excluded = self.excluded;
        let delivered = self.triage(i, excluded, n, f);
        delivered + self.after_poll(excluded, f)
    }

    /// [`poll`](Self::poll) with something to settle first.
    #[cold]
    #[inline(never)]
    fn poll_rare<F: FnMut(ChannelCompletion)>(&mut self, max: usize, f: &mut F) -> usize {
        self.undirect();
        self.sync();
        let mut delivered = 0;
        if !self.pending.is_empty() {
            delivered += self.settle_pending(f);
        }
        let excluded = self.excluded;
        delivered += self.poll_paths(max.saturating_sub(delivered), excluded, f);
        if (self.excluded ^ excluded) | self.dead | self.pending.len() as u32 != 0 {
            delivered += self.after_poll(excluded, f);
        } else {
            self.redirect();
        }
        delivered
    }

    /// Polls the queue pair of every path with requests in flight, delivering successes and
    /// triaging failures (`excluded`: the exclusion mask as the poll began).
    #[inline(always)]
    fn poll_paths<F: FnMut(ChannelCompletion)>(
        &mut self,
        max: usize,
        excluded: u32,
        f: &mut F,
    ) -> usize {
        let mut delivered = 0;
        let mut busy = self.busy;
        while busy != 0 {
            if delivered >= max {
                // Paths not polled this time: ring what was queued on them.
                self.commit_paths(busy);
                break;
            }
            let i = busy.trailing_zeros() as usize & (MAX_PATHS - 1);
            busy &= busy - 1;
            let IoChannel {
                qpairs, pending, ..
            } = self;
            let Some(qp) = qpairs[i].as_mut() else {
                continue;
            };
            let mut failed = 0usize;
            // The queue pair's poll commits what was queued on it first. A failed request
            // goes to the back of `pending` (room is reserved for every slot) and is triaged
            // below, off the fast path.
            let got = qp.poll(max - delivered, |c: IoCompletion<Tag>| {
                failed += sort(c, i, f, pending);
            });
            if qp.outstanding() == 0 {
                self.busy &= !(1 << i);
            }
            delivered += got;
            if failed != 0 {
                delivered -= failed;
                delivered += self.triage(i, excluded, failed, f);
            }
        }
        delivered
    }

    /// The rare end of a poll: a path was excluded, requests wait, or a released controller's
    /// queue pair can go.
    #[cold]
    #[inline(never)]
    fn after_poll<F: FnMut(ChannelCompletion)>(&mut self, excluded: u32, f: &mut F) -> usize {
        let mut delivered = 0;
        if self.excluded != excluded {
            self.route();
        }
        if !self.pending.is_empty() {
            delivered += self.settle_pending(f);
            self.commit();
        }
        if self.dead != 0 {
            self.release_dead();
        }
        self.redirect();
        delivered
    }

    /// The last `n` entries of `pending` failed on path `i` during its poll (in completion
    /// order). A path error with the buffer back stays queued, to be sent again (same buffer)
    /// on another path; anything else is delivered with its status. `excluded` is the
    /// exclusion mask as the poll began. Returns how many were delivered.
    #[cold]
    #[inline(never)]
    fn triage<F: FnMut(ChannelCompletion)>(
        &mut self,
        i: usize,
        excluded: u32,
        n: usize,
        f: &mut F,
    ) -> usize {
        let others = self.usable_besides(i, excluded);
        // A controller that could not be disabled may still carry out the commands it ended:
        // their borrowed memory is neither sent again nor given back for reuse (owned buffers
        // it kept come back as `None` and are not failed over either).
        let stuck = self.qpairs[i].as_ref().is_some_and(|q| q.is_stuck());
        // [waiting…, failed…] → [failed…, waiting…]; each failed one is then taken from the
        // front and either put back at the end (failover) or delivered: the waiting requests
        // keep their order and the failed-over ones follow them.
        self.pending.rotate_right(n);
        let mut delivered = 0;
        for _ in 0..n {
            let Some(mut p) = self.pending.pop_front() else {
                break;
            };
            let status = std::mem::replace(&mut p.failed, Status::SUCCESS);
            let borrowed = p.tag.span.is_some();
            let has_buffer = p.buffer.is_some() || (borrowed && !stuck) || p.tag.op == IoOp::Flush;
            if (status.sct == sct::PATH || namespace_gone(&status, &p.tag, others)) && has_buffer {
                // The command ended on this path: send it again, same buffer, on another
                // path; after a finished reset this path is fine again (its queues were
                // recreated), so only other path errors exclude it until the head changes.
                if status != Status::ABORTED_BY_RESET {
                    self.excluded |= 1 << i;
                }
                p.tag.failovers = p.tag.failovers.saturating_add(1);
                self.stats.failovers += 1;
                self.pending.push_back(p);
            } else {
                delivered += 1;
                f(ChannelCompletion {
                    tag: p.tag.user,
                    result: Err(ChannelError::Device { status }),
                    buffer: p.buffer,
                    path: Some(i),
                    failovers: p.tag.failovers,
                    memory_held: stuck && p.tag.op != IoOp::Flush,
                });
            }
        }
        delivered
    }

    /// The usable paths other than `i` (under the exclusion mask `excluded`).
    fn usable_besides(&self, i: usize, excluded: u32) -> u32 {
        let opt = self.optimized & !excluded;
        let tier = if opt != 0 {
            opt
        } else {
            self.non_optimized & !excluded
        };
        tier & !(1 << i)
    }

    /// Drops the queue pairs of released controllers once nothing is outstanding on them (their
    /// requests ended with "controller lost" and were failed over): the last references to a
    /// removed device go, so the kernel's removal can finish.
    #[cold]
    #[inline(never)]
    fn release_dead(&mut self) {
        let mut dead = self.dead;
        while dead != 0 {
            let i = dead.trailing_zeros() as usize & (MAX_PATHS - 1);
            dead &= dead - 1;
            if self.qpairs[i].as_ref().is_none_or(|q| q.outstanding() == 0) {
                self.qpairs[i] = None;
                self.namespaces[i] = None;
                self.busy &= !(1 << i);
                self.dead &= !(1 << i);
            }
        }
    }

    /// Resubmits queued requests while a path is usable; fails them all at once if they may
    /// not wait any more.
    #[cold]
    #[inline(never)]
    fn settle_pending<F: FnMut(ChannelCompletion)>(&mut self, f: &mut F) -> usize {
        let nsid = self.head.nsid();
        if self.route == NO_PATH {
            let error = if self.head.is_removed() {
                ChannelError::HeadRemoved { nsid }
            } else if !self.may_queue() {
                if self.switched_off {
                    ChannelError::QueueingOff { nsid }
                } else {
                    ChannelError::NoPath { nsid }
                }
            } else {
                let deadline = self.head.deadline_ns.load(Ordering::Acquire);
                if deadline >= u64::MAX - 1 || self.subsystem.now_ns() < deadline {
                    return 0;
                }
                ChannelError::NoPathTimeout { nsid }
            };
            return self.fail_pending(f, error);
        }
        let mut delivered = 0;
        while let Some(p) = self.pending.pop_front() {
            match self.dispatch(p.tag, p.buffer) {
                Dispatch::Sent => {}
                Dispatch::NoPath(buffer) | Dispatch::Busy(buffer) => {
                    self.pending.push_front(Pending::waiting(p.tag, buffer));
                    break;
                }
                Dispatch::Refused(kind, buffer) => {
                    delivered += 1;
                    f(ChannelCompletion {
                        tag: p.tag.user,
                        result: Err(ChannelError::Refused(kind)),
                        buffer,
                        path: None,
                        failovers: p.tag.failovers,
                        memory_held: false,
                    });
                }
            }
        }
        delivered
    }

    /// Fails every queued request with `error`.
    #[cold]
    fn fail_pending<F: FnMut(ChannelCompletion)>(
        &mut self,
        f: &mut F,
        error: ChannelError,
    ) -> usize {
        let n = self.pending.len();
        self.switched_off = false;
        self.stats.failed_no_path += n as u64;
        for p in self.pending.drain(..) {
            f(ChannelCompletion {
                tag: p.tag.user,
                result: Err(error.clone()),
                buffer: p.buffer,
                path: None,
                failovers: p.tag.failovers,
                memory_held: false,
            });
        }
        n
    }
}

/// Delivers a request that succeeded on path `path` to `f`; puts one that failed at the back
/// of `pending`, to be triaged after the queue pair's poll. Returns 1 for a failed one.
#[inline(always)]
fn sort<F: FnMut(ChannelCompletion)>(
    c: IoCompletion<Tag>,
    path: usize,
    f: &mut F,
    pending: &mut VecDeque<Pending>,
) -> usize {
    if c.status.is_success() {
        f(ChannelCompletion {
            tag: c.tag.user,
            result: Ok(()),
            buffer: c.buffer,
            path: Some(path),
            failovers: c.tag.failovers,
            memory_held: false,
        });
        0
    } else {
        pending.push_back(Pending {
            tag: c.tag,
            buffer: c.buffer,
            failed: c.status,
        });
        1
    }
}

/// Whether a failure looks like the namespace having been detached from this path's
/// controller before the driver heard of it (the device then ends I/O to it with Invalid
/// Namespace or, as QEMU does, Invalid Field): the first such failure of a request is failed
/// over when another path is usable (the command did not execute, so a write is not
/// repeated); a request that fails so again is delivered with the status (a genuinely invalid
/// command fails on every path). The Linux driver fails over any error of a path whose
/// namespace queue is dying, which it knows already when the detach was its own.
#[inline]
fn namespace_gone(status: &Status, tag: &Tag, others: u32) -> bool {
    status.sct == sct::GENERIC
        && matches!(
            status.sc,
            generic::INVALID_NAMESPACE | generic::INVALID_FIELD
        )
        && tag.failovers == 0
        && others != 0
}
