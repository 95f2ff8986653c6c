//! Multipath: one namespace of an NVM subsystem seen through several controllers.
//!
//! - [`Subsystem`]: controllers with one SUBNQN reporting CMIC multi-controller; its
//!   [`poll`](Subsystem::poll) follows controller events (reset, failure, removal), namespace
//!   changes and ANA changes (log page 0Ch), and publishes every changed head in one batch.
//! - [`Head`]: a namespace keyed by nsid and unique identifier (NGUID, else EUI64, else UUID;
//!   a mismatch under one nsid gives separate heads). Heads are found lock-free and
//!   wait-free; each holds an epoch-protected [`PathList`] swapped as a whole, a
//!   [`PathPolicy`] switchable while I/O runs, and queueing options ([`HeadOptions`]).
//! - [`IoChannel`]: one thread's handle on a head, one queue pair per path, failover with the
//!   same buffer, queue-if-no-path.

mod channel;
mod error;
mod head;
mod heads;
mod paths;
#[cfg(all(test, loom))]
mod paths_loom;
mod policy;
mod subsystem;

pub use channel::{
    ChannelCompletion, ChannelOptions, ChannelStats, ChannelSubmitError, IoChannel, IoOp,
};
pub use error::{ChannelError, MultipathError};
pub use head::{Head, HeadOptions, UniqueId};
pub use paths::{Path, PathList, PathState, MAX_PATHS};
pub use policy::{PathPolicy, UnknownPolicy};
pub use subsystem::{Subsystem, SubsystemReport};
