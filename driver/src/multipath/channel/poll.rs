//! Polling: completions delivered, path errors failed over with the same buffer, queued
//! requests resubmitted or failed all at once.

use super::receive::{reap_rest, ToUser, STOPPED};
use super::types::{ChannelCompletion, IoOp};
use super::{Dispatch, IoChannel, Pending, Tag, NO_PATH};
use crate::multipath::error::ChannelError;
use crate::multipath::paths::MAX_PATHS;
use crate::platform::Platform;
use crate::spec::status::{generic, sct};
use crate::spec::Status;
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
    ///
    /// `f` is only ever called from code inlined here: the out-of-line paths (failures,
    /// recovery, the queue) leave what they deliver in the channel's outbox, drained below.
    /// Lent to code that is not inlined, `f` (and what it borrows) would have to live in
    /// memory on every poll.
    ///
    /// In direct mode a poll looks at the head only every 256 polls (the queue pair makes its
    /// own periodic check inside its poll): nothing waits in the channel then, and every
    /// submission checks the head anyway. A change found there (a released controller's queue
    /// pair, for one) is settled by the general poll at once.
    #[inline]
    pub fn poll<F: FnMut(ChannelCompletion)>(&mut self, max: usize, mut f: F) -> usize {
        'direct: {
            let Some(d) = self.direct.as_mut() else {
                break 'direct;
            };
            d.polls = d.polls.wrapping_add(1);
            if d.polls == 0 && self.direct_periodic() {
                break 'direct;
            }
            let Some(d) = self.direct.as_mut() else {
                break 'direct;
            };
            let mut to = ToUser {
                f: &mut f,
                path: d.path,
                pending: &mut self.pending,
                trouble: 0,
            };
            let got = d.qp.poll_into(max, &mut to);
            // One test for both: a failure, or a stop before an error.
            let trouble = to.trouble;
            if trouble != 0 {
                let failed = trouble & !STOPPED;
                self.direct_rest(failed, max.saturating_sub(got), trouble & STOPPED != 0);
                return got - failed + self.drain_outbox(&mut f);
            }
            return got;
        }
        self.poll_general(max, &mut f)
    }

    /// [`poll`](Self::poll) outside direct mode.
    #[inline(always)]
    fn poll_general<F: FnMut(ChannelCompletion)>(&mut self, max: usize, f: &mut F) -> usize {
        let mut delivered = 0;
        // One branch for the rare cases at the start: a changed head, requests waiting, a
        // released controller's queue pair to drop.
        if (self.head.paths.generation() ^ self.generation)
            | self.pending.len()
            | self.dead as usize
            != 0
        {
            self.before_rare_poll();
            delivered += self.drain_outbox(f);
        }
        let excluded = self.excluded;
        delivered += self.poll_paths(max.saturating_sub(delivered), excluded, f);
        if (self.excluded ^ excluded) | self.dead | self.pending.len() as u32 != 0 {
            self.after_poll(excluded);
            delivered += self.drain_outbox(f);
        } else if usize::from(self.route) < MAX_PATHS && self.busy & !(1 << (self.route & 31)) == 0
        {
            // A fixed route whose other paths drained: direct mode again.
            self.redirect();
        }
        delivered
    }

    /// Delivers what the out-of-line paths left in the outbox.
    #[inline(always)]
    fn drain_outbox<F: FnMut(ChannelCompletion)>(&mut self, f: &mut F) -> usize {
        let n = self.outbox.len();
        while let Some(c) = self.outbox.pop_front() {
            f(c);
        }
        n
    }

    /// `n` requests failed during a direct-mode poll of path `i` (they are at the back of
    /// `pending`): back to the general arrays to triage them.
    #[cold]
    #[inline(never)]
    fn direct_failures(&mut self, i: usize, n: usize) {
        self.undirect();
        let excluded = self.excluded;
        self.triage(i, excluded, n);
        self.after_poll(excluded);
    }

    /// The rest of a direct-mode poll after a failure: the completions after the first error
    /// (if the poll `stopped` there; up to `left` of them) are reaped into the outbox and
    /// `pending`, and what failed (`failed` requests at the back of `pending` already) is
    /// triaged.
    #[cold]
    #[inline(never)]
    fn direct_rest(&mut self, failed: usize, left: usize, stopped: bool) {
        let Some(d) = self.direct.as_mut() else {
            return;
        };
        let i = d.path;
        let before = self.pending.len();
        if stopped {
            reap_rest(&mut d.qp, i, left, &mut self.pending, &mut self.outbox);
        }
        let failed = failed + (self.pending.len() - before);
        if failed != 0 {
            self.direct_failures(i, failed);
        }
    }

    /// Every 256th poll in direct mode: direct mode is left when the head changed, for the
    /// general poll (this one) to settle. True when it was left.
    #[cold]
    #[inline(never)]
    fn direct_periodic(&mut self) -> bool {
        if self.head.paths.generation() != self.generation {
            self.undirect();
            return true;
        }
        false
    }

    /// What a poll settles first when something is going on: a changed head, requests
    /// waiting, a released controller.
    #[cold]
    #[inline(never)]
    fn before_rare_poll(&mut self) {
        self.undirect();
        self.sync();
        if !self.pending.is_empty() {
            self.settle_pending();
        }
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
                qpairs,
                pending,
                outbox,
                ..
            } = self;
            let Some(qp) = qpairs[i].as_mut() else {
                continue;
            };
            let parked = pending.len();
            // The queue pair's poll commits what was queued on it first (and recovers when it
            // must: what that ends comes as failures). A failed request goes to the back of
            // `pending` (room is reserved for every slot) and is triaged below, off the fast
            // path.
            let mut to = ToUser {
                f: &mut *f,
                path: i,
                pending: &mut *pending,
                trouble: 0,
            };
            let got = qp.poll_into(max - delivered, &mut to);
            let stopped = to.trouble & STOPPED != 0;
            delivered += got - (pending.len() - parked);
            if stopped {
                reap_rest(qp, i, max.saturating_sub(delivered), pending, outbox);
            }
            if qp.outstanding() == 0 {
                self.busy &= !(1 << i);
            }
            let failed = self.pending.len() - parked;
            if failed != 0 {
                self.triage(i, excluded, failed);
            }
            if !self.outbox.is_empty() {
                delivered += self.drain_outbox(f);
            }
        }
        delivered
    }

    /// The rare end of a poll: a path was excluded, requests wait, or a released controller's
    /// queue pair can go.
    #[cold]
    #[inline(never)]
    fn after_poll(&mut self, excluded: u32) {
        if self.excluded != excluded {
            self.route();
        }
        if !self.pending.is_empty() {
            self.settle_pending();
            self.commit();
        }
        if self.dead != 0 {
            self.release_dead();
        }
        self.redirect();
    }

    /// The last `n` entries of `pending` failed on path `i` during its poll (in completion
    /// order). A path error with the buffer back stays queued, to be sent again (same buffer)
    /// on another path; anything else is delivered with its status. `excluded` is the
    /// exclusion mask as the poll began. What is delivered goes to the outbox.
    #[cold]
    #[inline(never)]
    fn triage(&mut self, i: usize, excluded: u32, n: usize) {
        let others = self.usable_besides(i, excluded);
        // A controller that could not be disabled may still carry out the commands it ended:
        // their borrowed memory is neither sent again nor given back for reuse (owned buffers
        // it kept come back as `None` and are not failed over either).
        let stuck = self.qpairs[i].as_ref().is_some_and(|q| q.is_stuck());
        // [waiting…, failed…] → [failed…, waiting…]; each failed one is then taken from the
        // front and either put back at the end (failover) or delivered: the waiting requests
        // keep their order and the failed-over ones follow them.
        self.pending.rotate_right(n);
        for _ in 0..n {
            let Some(mut p) = self.pending.pop_front() else {
                break;
            };
            let status = std::mem::replace(&mut p.failed, Status::SUCCESS);
            let borrowed = p.tag.span.is_some();
            let has_buffer = p.buffer.is_some() || (borrowed && !stuck) || p.tag.op == IoOp::Flush;
            if (status.sct() == sct::PATH || namespace_gone(&status, &p.tag, others)) && has_buffer
            {
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
                self.outbox.push_back(ChannelCompletion {
                    tag: p.tag.user,
                    result: Err(ChannelError::Device { status }),
                    buffer: p.buffer,
                    path: Some(i),
                    failovers: p.tag.failovers,
                    memory_held: stuck && p.tag.op != IoOp::Flush,
                });
            }
        }
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
    /// not wait any more (what fails goes to the outbox).
    #[cold]
    #[inline(never)]
    fn settle_pending(&mut self) {
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
                    return;
                }
                ChannelError::NoPathTimeout { nsid }
            };
            return self.fail_pending(error);
        }
        while let Some(p) = self.pending.pop_front() {
            match self.dispatch(p.tag, p.buffer) {
                Dispatch::Sent => {}
                Dispatch::NoPath(buffer) | Dispatch::Busy(buffer) => {
                    self.pending.push_front(Pending::waiting(p.tag, buffer));
                    break;
                }
                Dispatch::Refused(kind, buffer) => {
                    self.outbox.push_back(ChannelCompletion {
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
    }

    /// Fails every queued request with `error` (into the outbox).
    #[cold]
    fn fail_pending(&mut self, error: ChannelError) {
        self.switched_off = false;
        self.stats.failed_no_path += self.pending.len() as u64;
        for p in self.pending.drain(..) {
            self.outbox.push_back(ChannelCompletion {
                tag: p.tag.user,
                result: Err(error.clone()),
                buffer: p.buffer,
                path: None,
                failovers: p.tag.failovers,
                memory_held: false,
            });
        }
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
    status.sct() == sct::GENERIC
        && matches!(
            status.sc(),
            generic::INVALID_NAMESPACE | generic::INVALID_FIELD
        )
        && tag.failovers == 0
        && others != 0
}
