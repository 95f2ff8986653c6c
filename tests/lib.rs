//! Shared helpers of the integration tests.

pub mod guest;
pub mod guest_checks;
pub mod guest_fio;
pub mod guest_io;
pub mod guest_metadata;
pub mod guest_multipath;
pub mod guest_noiommu;
pub mod host_qmp;
pub mod mp_workload;
pub mod tcp_client;
pub mod tcp_target;
pub mod vfnvme_cli;
