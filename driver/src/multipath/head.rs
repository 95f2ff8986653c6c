//! A multipath head: one namespace of a subsystem, seen through every controller that has it
//! attached. Its path list, policy and queueing options change while channels do I/O on it;
//! every change bumps one generation counter that channels check on each submission.

use super::paths::{PathCell, PathList};
use super::policy::PathPolicy;
use crate::namespace::NamespaceIdentity;
use crate::namespaces::epoch::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// What identifies a namespace across controllers: NGUID, else EUI64, else UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UniqueId {
    /// Namespace Globally Unique Identifier.
    Nguid([u8; 16]),
    /// IEEE Extended Unique Identifier.
    Eui64([u8; 8]),
    /// Namespace UUID.
    Uuid([u8; 16]),
    /// None reported by a shared namespace (NMIC bit 0): within one subsystem its nsid names
    /// it on every controller, so such paths are merged, as Linux merges shared namespaces
    /// whose identifiers are all zero (QEMU 7.2 reports none unless given `uuid=`/`eui64=`).
    SharedNsid,
    /// None reported by a private namespace: never merged with another controller's (its head
    /// has this one controller, by index).
    Unidentified(usize),
}

impl UniqueId {
    /// The identifier of a namespace reported by controller `controller`.
    pub fn of(identity: &NamespaceIdentity, controller: usize) -> Self {
        if identity.nguid != [0; 16] {
            UniqueId::Nguid(identity.nguid)
        } else if identity.eui64 != [0; 8] {
            UniqueId::Eui64(identity.eui64)
        } else if identity.uuid != [0; 16] {
            UniqueId::Uuid(identity.uuid)
        } else if identity.shared {
            UniqueId::SharedNsid
        } else {
            UniqueId::Unidentified(controller)
        }
    }
}

impl std::fmt::Display for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex = |f: &mut std::fmt::Formatter<'_>, b: &[u8]| {
            b.iter().try_for_each(|x| write!(f, "{x:02x}"))
        };
        match self {
            UniqueId::Nguid(b) => {
                f.write_str("nguid:")?;
                hex(f, b)
            }
            UniqueId::Eui64(b) => {
                f.write_str("eui64:")?;
                hex(f, b)
            }
            UniqueId::Uuid(b) => {
                f.write_str("uuid:")?;
                hex(f, b)
            }
            UniqueId::SharedNsid => f.write_str("shared nsid (no identifier)"),
            UniqueId::Unidentified(c) => write!(f, "unidentified (controller {c})"),
        }
    }
}

/// Options of a head (set for new heads with [`crate::multipath::Subsystem::new`], changed per
/// head while I/O runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadOptions {
    /// Path selection policy.
    pub policy: PathPolicy,
    /// With no usable path, keep requests queued in their channel (bounded) instead of
    /// failing them.
    pub queue_if_no_path: bool,
    /// How long a head without a usable path keeps queueing (the kernel's
    /// `delayed_removal_secs`): when it runs out, every queued request fails at once, and a
    /// head left with no path at all is removed. 0 = wait for ever.
    pub delayed_removal_ms: u64,
}

impl Default for HeadOptions {
    fn default() -> Self {
        HeadOptions {
            policy: PathPolicy::Numa,
            queue_if_no_path: true,
            delayed_removal_ms: 0,
        }
    }
}

/// One namespace of a subsystem with its paths.
#[derive(Debug)]
pub struct Head {
    nsid: u32,
    uid: UniqueId,
    pub(crate) paths: PathCell,
    policy: AtomicU8,
    queue_if_no_path: AtomicBool,
    delayed_removal_ns: AtomicU64,
    /// Platform time at which queued requests fail (u64::MAX: none; set by the subsystem
    /// when the head loses its last usable path).
    pub(crate) deadline_ns: AtomicU64,
    removed: AtomicBool,
}

impl Head {
    pub(crate) fn new(nsid: u32, uid: UniqueId, options: HeadOptions) -> Self {
        Head {
            nsid,
            uid,
            paths: PathCell::new(PathList::default()),
            policy: AtomicU8::new(options.policy as u8),
            queue_if_no_path: AtomicBool::new(options.queue_if_no_path),
            delayed_removal_ns: AtomicU64::new(
                options.delayed_removal_ms.saturating_mul(1_000_000),
            ),
            deadline_ns: AtomicU64::new(u64::MAX),
            removed: AtomicBool::new(false),
        }
    }

    /// The namespace ID.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// The namespace's unique identifier.
    pub fn unique_id(&self) -> UniqueId {
        self.uid
    }

    /// The current path list (a copy).
    pub fn paths(&self) -> PathList {
        let guard = pin();
        self.paths.read(&guard, PathList::clone)
    }

    /// Whether some path is usable now.
    pub fn has_usable_path(&self) -> bool {
        let guard = pin();
        self.paths.read(&guard, PathList::any_usable)
    }

    /// The path policy.
    pub fn policy(&self) -> PathPolicy {
        PathPolicy::from_u8(self.policy.load(Ordering::Relaxed))
    }

    /// Switches the path policy; channels use it from their next submission (it bumps the
    /// head's generation, which each submission checks anyway).
    pub fn set_policy(&self, policy: PathPolicy) {
        self.policy.store(policy as u8, Ordering::Relaxed);
        self.paths.bump();
    }

    /// Whether requests queue while no path is usable.
    pub fn queue_if_no_path(&self) -> bool {
        self.queue_if_no_path.load(Ordering::Acquire)
    }

    /// Turns queueing on or off. Off: every request queued in a channel of this head fails at
    /// that channel's next poll with [`super::ChannelError::QueueingOff`], all at once.
    pub fn set_queue_if_no_path(&self, on: bool) {
        self.queue_if_no_path.store(on, Ordering::Release);
        self.paths.bump();
    }

    /// How long the head queues without a usable path (ms; 0 = for ever).
    pub fn delayed_removal_ms(&self) -> u64 {
        self.delayed_removal_ns.load(Ordering::Relaxed) / 1_000_000
    }

    /// Sets [`HeadOptions::delayed_removal_ms`]; it applies from the next time the head
    /// loses its last usable path.
    pub fn set_delayed_removal_ms(&self, ms: u64) {
        self.delayed_removal_ns
            .store(ms.saturating_mul(1_000_000), Ordering::Relaxed);
    }

    pub(crate) fn delayed_removal_ns(&self) -> u64 {
        self.delayed_removal_ns.load(Ordering::Relaxed)
    }

    /// Whether the head was removed (its channels fail everything).
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
        self.paths.bump();
    }
}

#[cfg(test)]
mod unique_id_tests {
    use super::*;

    #[test]
    fn a_shared_namespace_without_identifiers_is_one_head_a_private_one_is_not() {
        let shared = NamespaceIdentity {
            shared: true,
            ..NamespaceIdentity::default()
        };
        assert_eq!(UniqueId::of(&shared, 0), UniqueId::of(&shared, 1));
        assert_eq!(UniqueId::of(&shared, 3), UniqueId::SharedNsid);
        let private = NamespaceIdentity::default();
        assert_ne!(UniqueId::of(&private, 0), UniqueId::of(&private, 1));
        // Identifiers come first, shared or not.
        let eui = NamespaceIdentity {
            eui64: [1; 8],
            shared: true,
            ..NamespaceIdentity::default()
        };
        assert_eq!(UniqueId::of(&eui, 0), UniqueId::Eui64([1; 8]));
    }
}
