//! The channel's public value types (options, operations, completions, errors, counters)
//! and the records it keeps of requests.

use super::super::error::ChannelError;
use crate::controller::QpairOptions;
use thiserror::Error;
use vfnvme_hal::{DmaBuffer, DmaSpan};

/// How to open an [`IoChannel`](super::IoChannel).
#[derive(Debug, Clone)]
pub struct ChannelOptions {
    /// Options of each path's queue pair.
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

/// The operation of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum IoOp {
    /// Read into the buffer.
    #[default]
    Read = 0,
    /// Write from the buffer.
    Write = 1,
    /// Flush (no buffer).
    Flush = 2,
}

/// A request as the channel keeps it to send it again: the user's tag travels in the queue
/// pair's tracker, the rest in the path's side table (indexed by the request's slot), so the
/// tracker carries no more than a plain queue pair's.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tag {
    pub(super) user: u64,
    pub(super) lba: u64,
    pub(super) blocks: u32,
    pub(super) op: IoOp,
    pub(super) failovers: u8,
    /// The borrowed memory of a raw request ([`super::IoChannel::submit_raw`]); `None` for a
    /// request that owns its buffer.
    pub(super) span: Option<DmaSpan>,
}

/// What the side table keeps of a request in flight (the user's tag is in the tracker).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Req {
    pub(super) lba: u64,
    pub(super) blocks: u32,
    pub(super) op: IoOp,
    pub(super) failovers: u8,
    pub(super) span: Option<DmaSpan>,
}

impl Req {
    #[inline(always)]
    pub(super) fn of(tag: &Tag) -> Self {
        Req {
            lba: tag.lba,
            blocks: tag.blocks,
            op: tag.op,
            failovers: tag.failovers,
            span: tag.span,
        }
    }
}

/// A request waiting for a path (or for a free slot on its path).
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) tag: Tag,
    pub(super) buffer: Option<DmaBuffer>,
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
