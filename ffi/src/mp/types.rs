//! The C types of the multipath ABI: options, policies, path states, events, completions and
//! counters.

use crate::opts::growing_opts;
pub use crate::types::MpFail;
use vfnvme::multipath::{PathPolicy, PathState};

/// The most controllers (paths) a subsystem has over its lifetime.
pub const VFNVME_MAX_PATHS: usize = 32;

// The arrays below are indexed by the driver's controller index.
const _: () = assert!(VFNVME_MAX_PATHS == vfnvme::multipath::MAX_PATHS);

/// How a head's I/O handles pick a path among the usable ones of the best ANA tier
/// (optimized paths if any, else non-optimized; never an inaccessible, changing or lost one).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpPolicy {
    /// The first path on the channel's NUMA node, else the first usable path (Linux `numa`).
    VfnvmeMpPolicyNuma = 0,
    /// Each request on the next usable path (Linux `round-robin`).
    VfnvmeMpPolicyRoundRobin = 1,
    /// The path with the fewest requests outstanding from this channel (Linux `queue-depth`).
    VfnvmeMpPolicyQueueDepth = 2,
}

impl MpPolicy {
    /// The driver's policy.
    pub fn to_driver(self) -> PathPolicy {
        match self {
            MpPolicy::VfnvmeMpPolicyNuma => PathPolicy::Numa,
            MpPolicy::VfnvmeMpPolicyRoundRobin => PathPolicy::RoundRobin,
            MpPolicy::VfnvmeMpPolicyQueueDepth => PathPolicy::QueueDepth,
        }
    }
    /// From the driver's policy.
    pub fn of(p: PathPolicy) -> Self {
        match p {
            PathPolicy::Numa => MpPolicy::VfnvmeMpPolicyNuma,
            PathPolicy::RoundRobin => MpPolicy::VfnvmeMpPolicyRoundRobin,
            PathPolicy::QueueDepth => MpPolicy::VfnvmeMpPolicyQueueDepth,
        }
    }
    /// From the raw value C passed (an enum from C may hold any integer).
    pub fn from_raw(v: u32) -> Option<Self> {
        match v {
            0 => Some(MpPolicy::VfnvmeMpPolicyNuma),
            1 => Some(MpPolicy::VfnvmeMpPolicyRoundRobin),
            2 => Some(MpPolicy::VfnvmeMpPolicyQueueDepth),
            _ => None,
        }
    }
}

/// The state of one path of a head.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpPathState {
    /// No path (the value of an unfilled field, or a path that did not exist).
    VfnvmePathNone = 0,
    /// ANA optimized (or the controller reports no ANA): preferred.
    VfnvmePathOptimized = 1,
    /// ANA non-optimized: used when no optimized path is usable.
    VfnvmePathNonOptimized = 2,
    /// ANA inaccessible: not used.
    VfnvmePathInaccessible = 3,
    /// ANA persistent loss: not used.
    VfnvmePathPersistentLoss = 4,
    /// ANA change (in transition): not used; requests wait for at most ANATT.
    VfnvmePathChange = 5,
    /// The controller failed or was removed, or the namespace is going away: not used.
    VfnvmePathGone = 6,
}

impl MpPathState {
    /// From the driver's path state.
    pub fn of(s: PathState) -> Self {
        match s {
            PathState::Optimized => MpPathState::VfnvmePathOptimized,
            PathState::NonOptimized => MpPathState::VfnvmePathNonOptimized,
            PathState::Inaccessible => MpPathState::VfnvmePathInaccessible,
            PathState::PersistentLoss => MpPathState::VfnvmePathPersistentLoss,
            PathState::Change => MpPathState::VfnvmePathChange,
            PathState::Gone => MpPathState::VfnvmePathGone,
        }
    }
}

/// Options for opening a subsystem. Zero-initialise, set
/// `size = sizeof(struct vfnvme_subsys_opts)`, then set what you need; NULL means defaults. They
/// become the options of every head; change them per head later with vfnvme_subsys_set_policy
/// and friends.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SubsysOpts {
    /// Set it to `sizeof(struct vfnvme_subsys_opts)`. The library reads only the fields inside
    /// `size` (defaults for the rest: a program built against an older header keeps working) and
    /// refuses 0 (VFNVME_ERR_INVALID_ARGUMENT).
    pub size: u32,
    /// Path policy of every head (0: numa).
    pub policy: u32,
    /// Fail requests at once while a head has no usable path, instead of queueing them in
    /// their channel (the default, false, queues: Linux `queue_if_no_path`).
    pub fail_if_no_path: bool,
    /// How long a head without a usable path keeps queueing, in milliseconds (Linux
    /// `delayed_removal_secs`): when it runs out every queued request fails at once with
    /// VFNVME_MP_FAIL_NO_PATH_TIMEOUT. 0: for ever.
    pub delayed_removal_ms: u64,
}

growing_opts!(SubsysOpts, "struct vfnvme_subsys_opts", first_last_field: delayed_removal_ms: u64);

/// What one head looks like now (`vfnvme_subsys_head_info`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HeadInfo {
    /// Namespace ID.
    pub nsid: u32,
    /// Logical block size in bytes (of its first path's namespace).
    pub lba_size: u32,
    /// Size in logical blocks.
    pub blocks: u64,
    /// The path policy.
    pub policy: MpPolicy,
    /// Whether requests queue while no path is usable.
    pub queue_if_no_path: bool,
    /// The delayed removal time in milliseconds (0: for ever).
    pub delayed_removal_ms: u64,
    /// Number of paths (entries of `path_state` that are not VFNVME_PATH_NONE).
    pub paths: u32,
    /// The state of the path through each controller, by controller index
    /// (`vfnvme_subsys_controller`); VFNVME_PATH_NONE where that controller has no path.
    pub path_state: [MpPathState; VFNVME_MAX_PATHS],
    /// The namespace's unique identifier that keys the head, NUL-terminated: "nguid:HEX",
    /// "eui64:HEX" or "uuid:HEX"; "shared nsid (no identifier)" for a shared namespace that
    /// reports none (keyed by its nsid, as Linux does); "unidentified (controller N)" for a
    /// private one that reports none (never merged across controllers).
    pub unique_id: [u8; 64],
}

/// One controller of a subsystem (`vfnvme_subsys_controller`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SubsysCtrlInfo {
    /// The controller's name (PCI address, or "model-N"), NUL-terminated.
    pub name: [u8; 32],
    /// Whether it is still a live path (false once it failed or was removed).
    pub alive: bool,
}

/// What happened in a subsystem (`vfnvme_subsys_next_event`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpEventKind {
    /// No event (the value of an unfilled `vfnvme_mp_event`).
    VfnvmeMpEventNone = 0,
    /// Head `nsid` got a path through `controller` (state `new_state`).
    VfnvmeMpEventPathAdded = 1,
    /// Head `nsid` lost its path through `controller` (last state `old_state`).
    VfnvmeMpEventPathRemoved = 2,
    /// The path of head `nsid` through `controller` went from `old_state` to `new_state`
    /// (an ANA state change, or VFNVME_PATH_GONE).
    VfnvmeMpEventPathState = 3,
    /// `count` ANA change notices were handled (the ANA log page was read again); the
    /// resulting path changes follow as VFNVME_MP_EVENT_PATH_STATE events.
    VfnvmeMpEventAnaChange = 4,
    /// A head appeared (`nsid`).
    VfnvmeMpEventHeadAdded = 5,
    /// Head `nsid` was removed: its channels fail every request with
    /// VFNVME_MP_FAIL_HEAD_REMOVED; close them.
    VfnvmeMpEventHeadRemoved = 6,
    /// `controller` failed or was removed: its paths are gone.
    VfnvmeMpEventControllerLost = 7,
    /// `controller` finished a reset: its paths are usable again.
    VfnvmeMpEventControllerReset = 8,
}

/// One subsystem event. Fields that do not apply to the kind are 0 (`controller`: -1).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpEvent {
    /// What happened.
    pub kind: MpEventKind,
    /// The head's namespace ID (0 if none).
    pub nsid: u32,
    /// The controller's index in the subsystem (-1 if none).
    pub controller: i32,
    /// The path's state before.
    pub old_state: MpPathState,
    /// The path's state after.
    pub new_state: MpPathState,
    /// For VFNVME_MP_EVENT_ANA_CHANGE: how many notices.
    pub count: u32,
}

impl MpEvent {
    /// An event of `kind` with every other field empty.
    pub fn new(kind: MpEventKind) -> Self {
        MpEvent {
            kind,
            nsid: 0,
            controller: -1,
            old_state: MpPathState::VfnvmePathNone,
            new_state: MpPathState::VfnvmePathNone,
            count: 0,
        }
    }
}

/// Options for `vfnvme_channel_open`. Zero-initialise, set
/// `size = sizeof(struct vfnvme_channel_opts)`, then set what you need; NULL means defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ChannelOpts {
    /// Set it to `sizeof(struct vfnvme_channel_opts)`. The library reads only the fields inside
    /// `size` (defaults for the rest: a program built against an older header keeps working) and
    /// refuses 0 (VFNVME_ERR_INVALID_ARGUMENT).
    pub size: u32,
    /// Entries of each path's queue pair (0: 256).
    pub qpair_depth: u32,
    /// Requests the channel holds at most, in flight and queued (0: 1024; at most 1048576).
    pub capacity: u32,
    /// The NUMA node of the thread using the channel, for the numa policy (-1 or 0 with
    /// `numa_known` false: unknown).
    pub numa_node: i32,
    /// Whether `numa_node` is set.
    pub numa_known: bool,
}

growing_opts!(ChannelOpts, "struct vfnvme_channel_opts", first_last_field: numa_known: bool);

/// Counters of a channel (`vfnvme_channel_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ChannelStats {
    /// Commands sent per path (by controller index), failovers included.
    pub per_path: [u64; VFNVME_MAX_PATHS],
    /// Requests resubmitted on another path after a path error.
    pub failovers: u64,
    /// Requests that waited in the queue for a path.
    pub queued: u64,
    /// Requests failed because no path came back (queueing off, timeout, head removed).
    pub failed_no_path: u64,
    /// Requests accepted and not yet delivered by vfnvme_channel_poll.
    pub outstanding: u64,
}

impl Default for ChannelStats {
    fn default() -> Self {
        ChannelStats {
            per_path: [0; VFNVME_MAX_PATHS],
            failovers: 0,
            queued: 0,
            failed_no_path: 0,
            outstanding: 0,
        }
    }
}
