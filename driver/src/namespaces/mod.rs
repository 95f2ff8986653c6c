//! The controller's set of namespaces: the lock-free nsid registry, the pipelined scan, change
//! events and batched removal. One namespace's own data is [`crate::namespace::Namespace`].

pub(crate) mod epoch;
#[cfg(loom)]
mod epoch_loom;
pub mod events;
mod node;
pub mod registry;
#[cfg(all(test, loom))]
mod registry_loom_tests;
#[cfg(all(test, not(loom)))]
mod registry_tests;
pub mod scan;

pub use events::{EventBus, NamespaceEvent};
pub use registry::{NamespaceRegistry, RegistryError};
pub use scan::{ScanMode, ScanReport};
