//! The multipath layer's errors.

use crate::error::{Error, SubmitErrorKind};
use crate::spec::Status;
use thiserror::Error;

/// Why a subsystem, head or channel refused something, or why a request failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MultipathError {
    /// A controller that can't share namespaces with others joined a subsystem.
    #[error("controller {name} does not report CMIC multi-controller (bit 1): it can't be a path of a multipath head; open it as a single controller")]
    NotMultiController {
        /// The controller's platform name.
        name: String,
    },
    /// A controller of another subsystem.
    #[error("controller {name} belongs to subsystem {got:?}, not {want:?}: put controllers with the same SUBNQN in one Subsystem")]
    SubsystemMismatch {
        /// The controller's platform name.
        name: String,
        /// The subsystem's NQN.
        want: String,
        /// The controller's SUBNQN.
        got: String,
    },
    /// A controller whose DMA memory is not shared with the others.
    #[error("controller {name} uses another DMA pool than the subsystem's first controller: paths must share one DMA address space (one VFIO container) so that a request can move between them; open the controllers together with VfioPlatform::open_shared")]
    DmaPoolMismatch {
        /// The controller's platform name.
        name: String,
    },
    /// More controllers than a subsystem holds.
    #[error("a subsystem holds at most {max} controllers over its lifetime: open a new Subsystem")]
    TooManyControllers {
        /// The limit.
        max: usize,
    },
    /// The same controller twice.
    #[error("controller {name} is already a path of this subsystem")]
    AlreadyMember {
        /// The controller's platform name.
        name: String,
    },
    /// An I/O error of a channel.
    #[error(transparent)]
    Channel(ChannelError),
    /// A request can't be sent as given.
    #[error(transparent)]
    Submit(#[from] SubmitErrorKind),
    /// A control-path error of a controller (queue pair creation, admin command).
    #[error(transparent)]
    Controller(#[from] Error),
    /// A channel option is out of range.
    #[error("{what} = {value} is out of range: {hint}")]
    BadOption {
        /// The option.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The allowed range.
        hint: &'static str,
    },
}

/// Why a request on an [`super::IoChannel`] was refused or failed (small and cheap to move: it
/// travels in every completion).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// No usable path, and the head does not queue.
    #[error("namespace {nsid} has no usable path (every path is inaccessible, gone or failed) and queueing is off: retry when a path returns, or turn queue_if_no_path on")]
    NoPath {
        /// The head's nsid.
        nsid: u32,
    },
    /// A queued request failed because the user switched queueing off.
    #[error("namespace {nsid}: the request waited for a path and was failed because queueing was switched off")]
    QueueingOff {
        /// The head's nsid.
        nsid: u32,
    },
    /// A queued request failed because no path came back in time.
    #[error("namespace {nsid}: no path came back within the head's delayed_removal time; the request was failed (raise HeadOptions::delayed_removal_ms to wait longer)")]
    NoPathTimeout {
        /// The head's nsid.
        nsid: u32,
    },
    /// The head was removed (its namespace is gone from every controller).
    #[error("namespace {nsid}: the multipath head was removed (the namespace is gone from every controller); stop I/O to it")]
    HeadRemoved {
        /// The head's nsid.
        nsid: u32,
    },
    /// The channel holds as many requests as it may.
    #[error("the I/O channel holds {capacity} requests (in flight and queued): poll for completions, then resubmit")]
    ChannelFull {
        /// ChannelOptions::capacity.
        capacity: usize,
    },
    /// The device completed the request with an error that is not a path error.
    #[error("the request failed: {status}")]
    Device {
        /// The completion status.
        status: Status,
    },
    /// The request can't be sent on any path as given (e.g. LBA past the end).
    #[error(transparent)]
    Refused(#[from] SubmitErrorKind),
}

impl From<ChannelError> for MultipathError {
    fn from(e: ChannelError) -> Self {
        MultipathError::Channel(e)
    }
}
