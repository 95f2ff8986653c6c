//! NVMe base specification 2.x types: registers, commands, completions, status codes,
//! identify structures, features and log pages.

pub mod admin_command;
pub mod ana;
pub mod command;
pub mod completion;
pub mod features;
pub mod identify;
pub mod log;
pub mod registers;
pub mod status;

pub use admin_command::{AdminCommand, AdminCommandError, DataTransfer, FormatSettings};
pub use command::Command;
pub use completion::Completion;
pub use status::Status;
