//! The admin queue and the state the controller shares with its queue pairs and the namespace
//! scan: below both `controller` and `namespaces`, so neither imports the other for it.

pub(crate) mod enable;
pub(crate) mod queue;
pub mod recovery;
pub(crate) mod shared;

pub use queue::AerResult;
pub(crate) use queue::{AdminQueue, AdminWork, DeviceUse};
pub use recovery::ControllerEvent;
pub(crate) use shared::Shared;
