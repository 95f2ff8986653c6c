//! The I/O machinery: rings in DMA memory, trackers, PRPs, MDTS splitting, doorbells, and the
//! raw I/O queue under [`crate::QueuePair`].

pub mod deliver;
pub(crate) mod io_queue;
pub mod protection;
pub mod prp;
pub mod request;
pub(crate) mod retry;
pub(crate) mod ring;
pub(crate) mod sgl;
pub(crate) mod spans;
pub(crate) mod tracker;

#[cfg(test)]
mod io_queue_tests;

pub use deliver::Deliver;
pub use io_queue::IoCompletion;
pub(crate) use io_queue::IoQueue;
pub use protection::{metadata_transfer, PiChecks, PiOptions, Protection};
pub use request::{Data, Op, Request, RequestData, Target, MAX_SPANS};
pub use ring::DoorbellStats;
pub use tracker::MAX_TRACKERS as MAX_IN_FLIGHT;
