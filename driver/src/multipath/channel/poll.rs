//! Polling: completions delivered, path errors failed over with the same buffer, queued
//! requests resubmitted or failed all at once.

use super::types::{ChannelCompletion, ChannelStats, IoOp};
use super::{Dispatch, IoChannel, Pending, Req, Tag, NO_PATH};
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
        self.sync();
        let mut delivered = 0;
        if !self.pending.is_empty() {
            delivered += self.settle_pending(&mut f);
        }
        let excluded = self.excluded;
        let tier = self.tier;
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
                side,
                pending,
                excluded,
                stats,
                ..
            } = self;
            let Some(qp) = qpairs[i].as_mut() else {
                continue;
            };
            // One pointer for the closure to carry: what the (cold) failure path needs.
            let mut ctx = FailCtx {
                i,
                others: tier & !(1 << i),
                side: &side[i],
                pending,
                excluded,
                stats,
            };
            // The queue pair's poll commits what was queued on it first.
            let got = qp.poll(max - delivered, |c: IoCompletion| {
                if c.status.is_success() {
                    let failovers = ctx.side.get(usize::from(c.slot)).map_or(0, |r| r.failovers);
                    f(ChannelCompletion {
                        tag: c.tag,
                        result: Ok(()),
                        buffer: c.buffer,
                        path: Some(ctx.i),
                        failovers,
                    });
                } else if let Some(failed) = path_failure(&mut ctx, c) {
                    f(failed);
                }
            });
            delivered += got;
            if qp.outstanding() == 0 {
                self.busy &= !(1 << i);
            }
        }
        if self.excluded != excluded {
            self.route();
        }
        if !self.pending.is_empty() {
            delivered += self.settle_pending(&mut f);
            self.commit();
        }
        if self.dead != 0 {
            self.release_dead();
        }
        delivered
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
                self.side[i] = Box::default();
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
                    self.pending.push_front(Pending { tag: p.tag, buffer });
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
            });
        }
        n
    }
}

/// What a failed completion on path `i` needs: the path's side table, the queue to resend
/// from, the exclusion mask and the counters.
struct FailCtx<'a> {
    i: usize,
    /// The usable paths other than `i` when the poll began.
    others: u32,
    side: &'a [Req],
    pending: &'a mut VecDeque<Pending>,
    excluded: &'a mut u32,
    stats: &'a mut ChannelStats,
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

/// A request that failed on path `i`: on a path error with its buffer back, queued to be sent
/// again (same buffer) on another path and `None` returned; otherwise the completion to
/// deliver.
#[cold]
#[inline(never)]
fn path_failure(ctx: &mut FailCtx<'_>, c: IoCompletion) -> Option<ChannelCompletion> {
    let FailCtx {
        i,
        others,
        side,
        pending,
        excluded,
        stats,
    } = ctx;
    let i = *i;
    let req = side.get(usize::from(c.slot)).copied().unwrap_or_default();
    let mut tag = Tag {
        user: c.tag,
        lba: req.lba,
        blocks: req.blocks,
        op: req.op,
        failovers: req.failovers,
        span: req.span,
    };
    let has_buffer = c.buffer.is_some() || tag.span.is_some() || tag.op == IoOp::Flush;
    if (c.status.sct == sct::PATH || namespace_gone(&c.status, &tag, *others)) && has_buffer {
        // The command ended on this path: send it again, same buffer, on another path; after
        // a finished reset this path is fine again (its queues were recreated), so only other
        // path errors exclude it until the head changes.
        if c.status != Status::ABORTED_BY_RESET {
            **excluded |= 1 << i;
        }
        tag.failovers = tag.failovers.saturating_add(1);
        stats.failovers += 1;
        pending.push_back(Pending {
            tag,
            buffer: c.buffer,
        });
        return None;
    }
    Some(ChannelCompletion {
        tag: tag.user,
        result: Err(ChannelError::Device { status: c.status }),
        buffer: c.buffer,
        path: Some(i),
        failovers: tag.failovers,
    })
}
