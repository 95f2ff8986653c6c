//! vfnvme: a userspace, polled-mode NVMe driver.
//!
//! Layers, bottom up:
//! - [`platform`]: how the driver reaches registers, DMA memory and the clock (VFIO or the model);
//! - [`spec`]: NVMe base specification types;
//! - queue pairs, controller bring-up and admin, namespaces and the I/O API above them;
//! - [`model`]: an in-memory NVMe controller for tests and benchmarks.

pub mod model;
pub mod namespace;
pub mod platform;

pub use vfnvme_dma as dma;
