//! vfnvme: a userspace, polled-mode NVMe driver.
//!
//! Layers, bottom up. A module imports only from layers below its own; `tests/module_layers.rs`
//! checks this list against the sources (and that no import cycle appears):
//!
//! 1. [`spec`] [`quirks`] [`platform`] [`event_bus`]: NVMe base specification types; the table
//!    of known controller defects; how the driver reaches registers, DMA memory and the clock;
//!    fan-out of events to subscribers.
//! 2. [`namespace`] [`vfio_platform`]: one namespace as a value (identity, format, size,
//!    state); the platform over VFIO.
//! 3. [`error`]: the driver's error types.
//! 4. [`queue`]: rings, trackers, PRPs, doorbells and the raw I/O queue.
//! 5. [`admin`]: the admin queue and the state the controller shares with its queue pairs.
//! 6. [`namespaces`]: the lock-free namespace registry, the pipelined scan, change events.
//! 7. [`controller`]: bring-up, admin commands, [`QueuePair`] creation and deletion, shutdown.
//! 8. [`multipath`]: subsystems of several controllers, heads (one namespace through several
//!    paths), ANA-aware path selection, per-thread I/O channels with failover and
//!    queue-if-no-path.
//!
//! [`platform`] and [`vfio_platform`] live in `vfnvme-hal` and are re-exported here under
//! their old paths: the in-memory controller for tests and benchmarks (the `vfnvme-model`
//! crate) builds on the same seam without depending on the driver. The crates point one way:
//! the driver and the model both build on `vfnvme-hal`, and the driver uses the model only in
//! its tests; `tests/module_layers.rs` checks that too.

#![warn(missing_docs)]

pub mod admin;
pub mod controller;
pub mod error;
pub mod event_bus;
pub mod multipath;
pub mod namespace;
pub mod namespaces;
pub mod queue;
pub mod quirks;
pub mod spec;

// The seam below the driver lives in vfnvme-hal (so the model needs no driver); its old
// paths, `vfnvme::platform` and `vfnvme::vfio_platform`, stay.
pub use vfnvme_hal::platform;
pub use vfnvme_hal::vfio_platform;

pub use controller::{Controller, ControllerInfo, ControllerOptions, LogPageRequest};
pub use controller::{QpairOptions, QueuePair};
pub use error::{Error, SubmitError, SubmitErrorKind};
pub use namespace::Namespace;
pub use queue::{DoorbellStats, IoCompletion};
pub use vfnvme_hal as hal;
