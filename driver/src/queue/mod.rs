//! The I/O machinery: rings in DMA memory, trackers, PRPs, MDTS splitting, doorbells, and the
//! raw I/O queue under [`crate::QueuePair`].

pub(crate) mod deliver;
pub mod io_queue;
pub mod prp;
pub(crate) mod retry;
pub(crate) mod ring;
pub(crate) mod tracker;

#[cfg(test)]
mod io_queue_tests;

pub use io_queue::{Direction, IoCompletion, IoQueue};
pub use ring::DoorbellStats;
pub use tracker::MAX_TRACKERS as MAX_IN_FLIGHT;
