//! vfnvme: a userspace, polled-mode NVMe driver.
//!
//! Layers, bottom up. A module imports only from layers below its own; `tests/module_layers.rs`
//! checks this list against the sources (and that no import cycle appears):
//!
//! 1. [`spec`] [`quirks`] [`platform`] [`event_bus`]: NVMe base specification types; the table
//!    of known controller defects; how the driver reaches registers, DMA memory and the clock;
//!    fan-out of events to subscribers.
//! 2. [`namespace`] [`vfio_platform`]: one namespace as a value (identity, format, size,
//!    state); the platform over VFIO. (The in-memory controller for tests and benchmarks is the
//!    `vfnvme-model` crate, built on [`platform`].)
//! 3. [`error`]: the driver's error types.
//! 4. [`queue`]: rings, trackers, PRPs, doorbells and the raw I/O queue.
//! 5. [`admin`]: the admin queue and the state the controller shares with its queue pairs.
//! 6. [`namespaces`]: the lock-free namespace registry, the pipelined scan, change events.
//! 7. [`controller`]: bring-up, admin commands, [`QueuePair`] creation and deletion, shutdown.
//! 8. [`multipath`]: subsystems of several controllers, heads (one namespace through several
//!    paths), ANA-aware path selection, per-thread I/O channels with failover and
//!    queue-if-no-path.

#![warn(missing_docs)]

pub mod admin;
pub mod controller;
pub mod error;
pub mod event_bus;
pub mod multipath;
pub mod namespace;
pub mod namespaces;
pub mod platform;
pub mod queue;
pub mod quirks;
pub mod spec;
pub mod vfio_platform;

pub use controller::{Controller, ControllerInfo, ControllerOptions};
pub use controller::{QpairOptions, QueuePair};
pub use error::{Error, SubmitError, SubmitErrorKind};
pub use namespace::Namespace;
pub use queue::{DoorbellStats, IoCompletion};
pub use vfnvme_hal as hal;
