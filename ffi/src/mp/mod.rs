//! Multipath through the C ABI: NVM subsystems (`vfnvme_subsys`), their heads (one per
//! namespace, options and events) and per-thread I/O handles on a head (`vfnvme_channel`).
//!
//! Buffers come from vfnvme_subsys_dma_alloc (the DMA pool every controller of the subsystem
//! shares, so that a request can fail over to another path with the same buffer).

pub use crate::driver_ops::channel as backend;
pub mod channel;
pub mod events;
#[cfg(feature = "model")]
pub mod model;
pub mod open;
pub mod registry;
pub mod subsys;
pub mod types;
