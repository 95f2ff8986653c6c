//! vfnvme: a userspace, polled-mode NVMe driver.
//!
//! Layers, bottom up:
//! - [`platform`]: how the driver reaches registers, DMA memory and the clock (VFIO or the model);
//! - [`spec`]: NVMe base specification types;
//! - [`queue`]: rings, trackers, PRPs, doorbells and the [`QueuePair`] I/O API;
//! - [`controller`]: bring-up, admin commands, queue pair creation, shutdown;
//! - [`namespace`]: namespaces and their state;
//! - [`quirks`]: the table of known controller defects, keyed by PCI ID;
//! - [`model`]: an in-memory NVMe controller for tests and benchmarks.

#![warn(missing_docs)]

pub mod controller;
pub mod error;
pub mod model;
pub mod namespace;
pub mod platform;
pub mod queue;
pub mod quirks;
pub mod spec;
pub mod vfio_platform;

pub use controller::{Controller, ControllerInfo, ControllerOptions};
pub use error::{Error, SubmitError, SubmitErrorKind};
pub use namespace::Namespace;
pub use queue::{DoorbellStats, IoCompletion, QpairOptions, QueuePair};
pub use vfnvme_dma as dma;
