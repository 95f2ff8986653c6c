//! Namespaces: what the driver knows of each one, and (in submodules) the lock-free registry,
//! the pipelined scan, change events and batched removal.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

mod epoch;
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

/// What identifies a namespace across rescans. If any of it changes, the namespace is treated as
/// removed and a new one added (a format or identity change is not a resize).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NamespaceIdentity {
    /// IEEE Extended Unique Identifier (0 when not reported).
    pub eui64: [u8; 8],
    /// Namespace Globally Unique Identifier (0 when not reported).
    pub nguid: [u8; 16],
    /// Namespace UUID (0 when not reported).
    pub uuid: [u8; 16],
    /// Command Set Identifier (0 = NVM).
    pub csi: u8,
    /// log2 of the LBA data size.
    pub lba_shift: u8,
    /// Metadata bytes per LBA.
    pub metadata_size: u16,
}

/// The lifecycle state of a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum NamespaceState {
    /// Usable for I/O.
    Active = 0,
    /// Being removed: new I/O is refused, in-flight I/O drains or fails.
    Removing = 1,
    /// Gone from the controller.
    Removed = 2,
}

/// One namespace of one controller.
///
/// Size and state are atomics so that a resize or a removal updates the namespace in place while
/// I/O paths read it without locks.
#[derive(Debug)]
pub struct Namespace {
    nsid: u32,
    identity: NamespaceIdentity,
    blocks: AtomicU64,
    state: AtomicU8,
}

impl Namespace {
    /// A namespace with `blocks` logical blocks of `1 << identity.lba_shift` bytes.
    pub fn new(nsid: u32, identity: NamespaceIdentity, blocks: u64) -> Self {
        Namespace {
            nsid,
            identity,
            blocks: AtomicU64::new(blocks),
            state: AtomicU8::new(NamespaceState::Active as u8),
        }
    }
    /// The namespace ID.
    #[inline]
    pub fn nsid(&self) -> u32 {
        self.nsid
    }
    /// Identity and format.
    #[inline]
    pub fn identity(&self) -> &NamespaceIdentity {
        &self.identity
    }
    /// The LBA data size in bytes.
    #[inline]
    pub fn lba_size(&self) -> u32 {
        1u32 << self.identity.lba_shift
    }
    /// log2 of the LBA data size.
    #[inline]
    pub fn lba_shift(&self) -> u8 {
        self.identity.lba_shift
    }
    /// The size in logical blocks (NSZE).
    #[inline]
    pub fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::Acquire)
    }
    /// The size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.blocks() << self.identity.lba_shift
    }
    /// Updates the size in place (a resize event).
    pub fn set_blocks(&self, blocks: u64) {
        self.blocks.store(blocks, Ordering::Release);
    }
    /// The current state.
    #[inline]
    pub fn state(&self) -> NamespaceState {
        match self.state.load(Ordering::Acquire) {
            0 => NamespaceState::Active,
            1 => NamespaceState::Removing,
            _ => NamespaceState::Removed,
        }
    }
    /// Moves the namespace to `state`.
    pub fn set_state(&self, state: NamespaceState) {
        self.state.store(state as u8, Ordering::Release);
    }
}
