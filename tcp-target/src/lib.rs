//! An NVMe/TCP target: exports a vfnvme controller's namespaces to NVMe-oF hosts (Linux's
//! `nvme-tcp` initiator, `nvme connect -t tcp`).
//!
//! Layers, bottom up, one job per file:
//! - the wire: [`pdu`] (PDU types and layouts), [`digest`] (CRC32C), [`codec`] (strict
//!   parsing and building of PDUs per connection), [`command`] (SQE fields, CQE, statuses);
//! - the subsystem: [`config`], [`export`] (what hosts see), [`ctrl`] (a controller's
//!   properties, keep-alive, AERs), [`ana`] (ANA groups and their states), [`identify`], [`logs`], [`features`], [`admin`] (admin
//!   commands), [`connect`] (Fabrics Connect and access control);
//! - the data path: [`backend`] (the storage seam), [`backend_driver`] (a vfnvme controller
//!   through its queue pairs), [`backend_head`] (multipath heads through I/O channels),
//!   [`io`] (Read/Write/Flush, R2T), [`tx`] (the sending side);
//! - serving: [`conn`] (one connection), `session` (its PDUs: ICReq, Connect, commands,
//!   data), [`server`] ([`Target`]: accept, poll, keep-alive, ANA notices, shutdown).
//!
//! One thread polls the listener and every non-blocking socket; there is no thread per
//! connection or per I/O. Bad input from a host ends that host's connection with a
//! C2HTermReq and never the process.

pub mod admin;
pub mod ana;
pub mod backend;
pub mod backend_driver;
pub mod backend_head;
pub mod codec;
pub mod command;
pub mod config;
pub mod conn;
pub mod connect;
pub mod ctrl;
pub mod digest;
pub mod error;
pub mod export;
pub mod features;
pub mod identify;
pub mod io;
pub mod logs;
pub mod pdu;
pub mod server;
mod session;
pub mod tx;

pub use backend::{Backend, BackendQueue, ExportedNamespace};
pub use backend_driver::ControllerBackend;
pub use backend_head::HeadBackend;
pub use config::{SubsystemConfig, TargetConfig, DISCOVERY_NQN};
pub use error::{BackendError, PduError, TargetError};
pub use server::{ShutdownReport, Target};
