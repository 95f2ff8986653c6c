//! Where a poll puts what a queue pair finishes: [`ToUser`] hands successes to the user's
//! closure (inlined, so that the closure stays in registers) and parks failures in `pending`;
//! the out-of-line path ([`reap_rest`]) puts successes in the outbox instead.

use super::types::ChannelCompletion;
use super::{Pending, Tag};
use crate::controller::QueuePair;
use crate::platform::Platform;
use crate::queue::deliver::Deliver;
use crate::queue::IoCompletion;
use crate::spec::Status;
use std::collections::VecDeque;
use vfnvme_hal::DmaBuffer;

/// What a poll of path `path` finishes: a success goes to the user's closure, a failure to
/// the back of `pending`, to be triaged after the queue pair's poll.
pub(super) struct ToUser<'a, F> {
    pub(super) f: &'a mut F,
    pub(super) path: usize,
    pub(super) pending: &'a mut VecDeque<Pending>,
    /// The failures, plus [`STOPPED`] if the reap stopped before an error.
    pub(super) trouble: usize,
}

/// [`ToUser::trouble`]'s flag: the reap stopped before an error.
pub(super) const STOPPED: usize = 1 << (usize::BITS - 1);

impl<F: FnMut(ChannelCompletion)> Deliver<Tag> for ToUser<'_, F> {
    const STOP_AT_ERROR: bool = true;

    #[inline(always)]
    fn finished(
        &mut self,
        tag: Tag,
        status: Status,
        _cdw0: u32,
        _slot: u16,
        buffer: &mut Option<DmaBuffer>,
    ) {
        if status.is_success() {
            (self.f)(ChannelCompletion {
                tag: tag.user,
                result: Ok(()),
                buffer: buffer.take(),
                path: Some(self.path),
                failovers: tag.failovers,
                memory_held: false,
            });
        } else {
            self.trouble += 1;
            self.pending.push_back(Pending {
                tag,
                buffer: buffer.take(),
                failed: status,
            });
        }
    }

    #[inline(always)]
    fn completion(&mut self, c: IoCompletion<Tag>) {
        if c.status.is_success() {
            (self.f)(succeeded(c, self.path));
        } else {
            self.trouble += 1;
            park(c, self.pending);
        }
    }

    #[inline(always)]
    fn stopped(&mut self) {
        self.trouble |= STOPPED;
    }
}

/// A request that succeeded on path `path`, as delivered.
#[inline(always)]
fn succeeded(c: IoCompletion<Tag>, path: usize) -> ChannelCompletion {
    ChannelCompletion {
        tag: c.tag.user,
        result: Ok(()),
        buffer: c.buffer,
        path: Some(path),
        failovers: c.tag.failovers,
        memory_held: false,
    }
}

/// Puts a failed request at the back of `pending`, to be triaged.
#[inline(always)]
fn park(c: IoCompletion<Tag>, pending: &mut VecDeque<Pending>) {
    pending.push_back(Pending {
        tag: c.tag,
        buffer: c.buffer,
        failed: c.status,
    });
}

/// Polls path `i`'s queue pair for up to `max` completions, errors included, into the outbox
/// and `pending` (out of line, away from the user's closure).
#[cold]
#[inline(never)]
pub(super) fn reap_rest<P: Platform>(
    qp: &mut QueuePair<P, Tag>,
    i: usize,
    max: usize,
    pending: &mut VecDeque<Pending>,
    outbox: &mut VecDeque<ChannelCompletion>,
) {
    // A success goes to the outbox, a failure to `pending`.
    qp.poll(max, |c: IoCompletion<Tag>| {
        if c.status.is_success() {
            outbox.push_back(succeeded(c, i));
        } else {
            park(c, pending);
        }
    });
}
