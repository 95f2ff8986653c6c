//! Shared helpers of the integration tests.

pub mod guest;
pub mod guest_checks;
pub mod guest_io;
pub mod vfnvme_cli;
