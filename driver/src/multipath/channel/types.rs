//! The channel's public value types (options, operations, completions, errors, counters)
//! and the records it keeps of requests.

use super::super::error::ChannelError;
use crate::controller::QpairOptions;
use crate::spec::Status;
use thiserror::Error;
use vfnvme_hal::{DmaBuffer, DmaSpan};

/// How to open an [`IoChannel`](super::IoChannel).
#[derive(Debug, Clone)]
pub struct ChannelOptions {
    /// Options of each path's queue pair (its depth capped at what each controller allows).
    pub qpair: QpairOptions,
    /// Requests the channel holds at most (in flight on any path plus queued): 1..=1 << 20.
    /// The queue for no-path and failover is preallocated to this size.
    pub capacity: usize,
    /// The NUMA node of the thread using the channel (for [`super::PathPolicy::Numa`]).
    pub numa_node: Option<u32>,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        ChannelOptions {
            qpair: QpairOptions::default(),
            capacity: 1024,
            numa_node: None,
        }
    }
}

/// The operation of a channel's request (the queue's [`Op`](crate::queue::Op); a channel sends reads, writes
/// and flushes).
pub use crate::queue::Op as IoOp;

/// A request as the channel keeps it to send it again. It is the payload of the path's queue
/// pair (kept in the request's tracker), so a completion brings back everything a failover
/// needs: no side table to write on submission or to look up on completion.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tag {
    pub(super) user: u64,
    pub(super) lba: u64,
    pub(super) blocks: u32,
    pub(super) op: crate::queue::Op,
    pub(super) failovers: u8,
    /// Always 0: with it, `blocks`, `op` and `failovers` fill a whole word, which a
    /// submission writes with one store rather than three.
    pub(super) _reserved: u16,
    /// The borrowed memory of a raw request ([`super::IoChannel::submit_raw`]); `None` for a
    /// request that owns its buffer.
    pub(super) span: Option<DmaSpan>,
}

impl Tag {
    /// The record of a request the user submitted (not failed over yet).
    #[inline(always)]
    pub(super) fn new(
        user: u64,
        lba: u64,
        blocks: u32,
        op: crate::queue::Op,
        span: Option<DmaSpan>,
    ) -> Tag {
        Tag {
            user,
            lba,
            blocks,
            op,
            failovers: 0,
            _reserved: 0,
            span,
        }
    }
}

/// A request waiting for a path (or for a free slot on its path), or, for a moment during a
/// poll, one that just failed on a path and waits to be triaged (failed over or delivered).
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) tag: Tag,
    pub(super) buffer: Option<DmaBuffer>,
    /// The status it failed with on its last path (success for a request that only waits).
    pub(super) failed: Status,
}

impl Pending {
    /// A request that waits to be sent.
    #[inline]
    pub(super) fn waiting(tag: Tag, buffer: Option<DmaBuffer>) -> Self {
        Pending {
            tag,
            buffer,
            failed: Status::SUCCESS,
        }
    }
}

/// A request the channel finished.
#[derive(Debug)]
pub struct ChannelCompletion {
    /// The tag given at submission.
    pub tag: u64,
    /// Success, or why it failed.
    pub result: Result<(), ChannelError>,
    /// The buffer given at submission (`None` for flushes, and if a controller that could not
    /// be disabled kept it).
    pub buffer: Option<DmaBuffer>,
    /// The path (controller index) it completed on (`None` if it never reached one).
    pub path: Option<usize>,
    /// How many times it was failed over to another path.
    pub failovers: u8,
    /// The device may still use the request's memory: the controller of its last path could
    /// not be disabled after a failure. An owned buffer was kept (`buffer` is `None`); borrowed
    /// memory ([`super::IoChannel::submit_raw`]) must not be reused or freed, and the request
    /// was not failed over (the old controller could still carry it out).
    pub memory_held: bool,
}

impl ChannelCompletion {
    /// Whether it succeeded.
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }
}

/// A submission the channel refused; the buffer comes back.
#[derive(Debug, Error)]
#[error("{error}")]
pub struct ChannelSubmitError {
    /// Why.
    pub error: ChannelError,
    /// The buffer given.
    pub buffer: Option<DmaBuffer>,
}

/// Counters of a channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// Commands sent per path (controller index), failovers included.
    pub per_path: Vec<u64>,
    /// Requests resubmitted on another path after a path error.
    pub failovers: u64,
    /// Requests that waited in the queue for a path.
    pub queued: u64,
    /// Requests failed because no path came back (queueing off, timeout, head removed).
    pub failed_no_path: u64,
}
