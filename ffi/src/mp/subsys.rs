//! Subsystems through the C ABI: the handle, closing it, what it holds (controllers, heads,
//! paths), head options, events and its DMA buffers.

use super::backend::SubsysOps;
use super::events::{diff, Snapshot};
use super::registry;
use super::types::{HeadInfo, MpEvent, MpPathState, MpPolicy, SubsysCtrlInfo, SubsysOpts};
use crate::ctrl::{deref, out_ptr};
use crate::dma::DmaDomain;
use crate::error::{guard, FfiError, FfiResult, Status};
use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use vfnvme::multipath::{Head, HeadOptions, MultipathError, PathPolicy};

/// An open NVM subsystem: controllers sharing namespaces, and a multipath head per namespace
/// (opaque). Thread-safe: share it between threads freely.
pub struct Subsys {
    pub(crate) ops: Box<dyn SubsysOps>,
    /// Its DMA buffers and the request marks of its channels (dropped after the
    /// controllers are shut down, `ops` being declared first).
    pub(crate) dma: DmaDomain,
    pub(crate) channels: AtomicUsize,
    events: Mutex<(Snapshot, VecDeque<MpEvent>)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The head options of `SubsysOpts` (NULL: defaults); `arg` names the argument in messages.
pub(crate) fn head_options(opts: *const SubsysOpts, arg: &str) -> FfiResult<HeadOptions> {
    // SAFETY: NULL or a valid SubsysOpts of `size` bytes (header contract).
    let opts = unsafe { crate::opts::read(opts, arg) }?;
    let policy = MpPolicy::from_raw(opts.policy).ok_or_else(|| bad_policy(opts.policy))?;
    Ok(HeadOptions {
        policy: policy.to_driver(),
        queue_if_no_path: !opts.fail_if_no_path,
        delayed_removal_ms: opts.delayed_removal_ms,
    })
}

fn bad_policy(v: u32) -> FfiError {
    FfiError::new(
        Status::VfnvmeErrInvalidArgument,
        format!("path policy {v} is unknown: use VFNVME_MP_POLICY_NUMA (0), _ROUND_ROBIN (1) or _QUEUE_DEPTH (2)"),
    )
}

/// The ABI error of a subsystem that could not be formed.
pub(crate) fn mp_error(e: &MultipathError) -> FfiError {
    let status = match e {
        MultipathError::NotMultiController { .. }
        | MultipathError::SubsystemMismatch { .. }
        | MultipathError::DmaPoolMismatch { .. }
        | MultipathError::AlreadyMember { .. } => Status::VfnvmeErrNotOneSubsystem,
        MultipathError::TooManyControllers { .. } | MultipathError::BadOption { .. } => {
            Status::VfnvmeErrInvalidArgument
        }
        _ => Status::VfnvmeErrDevice,
    };
    FfiError::new(status, e.to_string())
}

/// Publishes a subsystem in `*out`.
pub(crate) fn publish(ops: Box<dyn SubsysOps>, out: &mut *mut Subsys) -> i32 {
    let snapshot = Snapshot::of(&ops.heads());
    let sub = Box::into_raw(Box::new(Subsys {
        dma: DmaDomain::new(
            ops.dma().clone(),
            [
                "vfnvme_subsys_dma_alloc",
                "vfnvme_subsys_dma_free",
                "vfnvme_channel_poll",
            ],
        ),
        ops,
        channels: AtomicUsize::new(0),
        events: Mutex::new((snapshot, VecDeque::new())),
    }));
    registry::add(sub);
    *out = sub;
    Status::VfnvmeOk.code()
}

/// A live subsystem handle.
pub(crate) fn sub<'a>(p: *const Subsys) -> FfiResult<&'a Subsys> {
    registry::check(p, "subsys")?;
    deref(p, "subsys")
}

/// The heads `nsid` names (0: every head).
fn heads(s: &Subsys, nsid: u32) -> FfiResult<Vec<Arc<Head>>> {
    let all = s.ops.heads();
    if nsid == 0 {
        return Ok(all);
    }
    let some: Vec<_> = all.into_iter().filter(|h| h.nsid() == nsid).collect();
    if some.is_empty() {
        return Err(no_head(s, nsid));
    }
    Ok(some)
}

/// Applies `set` to head `nsid` (0: every head); the body of the vfnvme_subsys_set_* calls.
fn set_heads(s: &Subsys, nsid: u32, set: impl Fn(&Head)) -> FfiResult<i32> {
    for h in heads(s, nsid)? {
        set(&h);
    }
    Ok(0)
}

pub(crate) fn no_head(s: &Subsys, nsid: u32) -> FfiError {
    let have: Vec<String> = s.ops.heads().iter().map(|h| h.nsid().to_string()).collect();
    FfiError::new(
        Status::VfnvmeErrNotFound,
        format!(
            "subsystem {} has no head for namespace {nsid} (heads: {}); list them with vfnvme_subsys_head_info",
            s.ops.nqn(),
            if have.is_empty() { "none".into() } else { have.join(", ") }
        ),
    )
}

/// Closes the subsystem: every controller is shut down and every DMA buffer from
/// vfnvme_subsys_dma_alloc is freed. Fails with VFNVME_ERR_BUSY (and changes nothing) while
/// channels of it exist. NULL is a no-op; a handle already closed fails with
/// VFNVME_ERR_INVALID_ARGUMENT.
///
/// Thread safety: call it once, after every other thread is done with the subsystem.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_close(subsys: *mut Subsys) -> i32 {
    guard("vfnvme_subsys_close", || {
        if subsys.is_null() {
            return Ok(0);
        }
        let s = sub(subsys)?;
        let live = s.channels.load(Ordering::Acquire);
        if live != 0 {
            return Err(FfiError::new(
                Status::VfnvmeErrBusy,
                format!("subsystem still has {live} channel(s); close them with vfnvme_channel_close first"),
            ));
        }
        if !registry::remove(subsys) {
            return Err(FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                "subsys was closed concurrently",
            ));
        }
        // SAFETY: `subsys` came from Box::into_raw in `publish` and was live (just removed
        // from the registry, so no second close frees it again).
        drop(unsafe { Box::from_raw(subsys) });
        Ok(0)
    })
}

/// Writes the subsystem NQN (NUL-terminated, truncated to `len - 1` bytes) to `nqn` and
/// returns the number of controllers (live or not), or a negative status. `nqn` may be NULL
/// when `len` is 0.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_info(
    subsys: *const Subsys,
    nqn: *mut c_char,
    len: usize,
) -> i32 {
    guard("vfnvme_subsys_info", || {
        let s = sub(subsys)?;
        if len > 0 {
            if nqn.is_null() {
                return Err(FfiError::new(
                    Status::VfnvmeErrInvalidArgument,
                    "nqn is NULL but len > 0; pass a buffer of len bytes",
                ));
            }
            // SAFETY: `len` writable bytes at `nqn` (header contract).
            let dst = unsafe { std::slice::from_raw_parts_mut(nqn.cast::<u8>(), len) };
            crate::types::copy_cstr(dst, &s.ops.nqn());
        }
        Ok(i32::try_from(s.ops.controllers().len()).unwrap_or(i32::MAX))
    })
}

/// Fills `*out` with controller `index` of the subsystem (0-based, as in
/// vfnvme_subsys_info's count); VFNVME_ERR_NOT_FOUND past the end.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_controller(
    subsys: *const Subsys,
    index: u32,
    out: *mut SubsysCtrlInfo,
) -> i32 {
    guard("vfnvme_subsys_controller", || {
        let s = sub(subsys)?;
        let out = out_ptr(out, "out")?;
        let all = s.ops.controllers();
        let Some((_, name, alive)) = all.iter().find(|(i, _, _)| *i == index as usize) else {
            return Err(FfiError::new(
                Status::VfnvmeErrNotFound,
                format!(
                    "controller {index}: the subsystem has {} (0..{})",
                    all.len(),
                    all.len()
                ),
            ));
        };
        let mut info = SubsysCtrlInfo {
            name: [0; 32],
            alive: *alive,
        };
        crate::types::copy_cstr(&mut info.name, name);
        *out = info;
        Ok(0)
    })
}

/// Fills `*out` with the head of namespace `nsid`: geometry, options, its unique identifier
/// and the state of each path. VFNVME_ERR_NOT_FOUND if there is none. Returns the number of
/// heads of `nsid` (>= 1): more than one when controllers report different identifiers for
/// it (never merged; `*out` is then the first).
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_head_info(
    subsys: *const Subsys,
    nsid: u32,
    out: *mut HeadInfo,
) -> i32 {
    guard("vfnvme_subsys_head_info", || {
        let s = sub(subsys)?;
        let out = out_ptr(out, "out")?;
        let head = s.ops.head(nsid).ok_or_else(|| no_head(s, nsid))?;
        *out = head_info(&head);
        let n = s.ops.heads().iter().filter(|h| h.nsid() == nsid).count();
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    })
}

pub(crate) fn head_info(head: &Head) -> HeadInfo {
    let list = head.paths();
    let mut info = HeadInfo {
        nsid: head.nsid(),
        lba_size: 0,
        blocks: 0,
        policy: MpPolicy::of(head.policy()),
        queue_if_no_path: head.queue_if_no_path(),
        delayed_removal_ms: head.delayed_removal_ms(),
        paths: 0,
        path_state: [MpPathState::VfnvmePathNone; super::types::VFNVME_MAX_PATHS],
        unique_id: [0; 64],
    };
    crate::types::copy_cstr(&mut info.unique_id, &head.unique_id().to_string());
    if let Some(p) = list.paths.first() {
        info.lba_size = p.namespace.lba_size();
        info.blocks = p.namespace.blocks();
    }
    for p in &list.paths {
        if let Some(slot) = info.path_state.get_mut(p.controller) {
            *slot = MpPathState::of(p.state);
            info.paths += 1;
        }
    }
    info
}

/// Sets the path policy of head `nsid` (0: every head) to `policy`, a `vfnvme_mp_policy`
/// value (VFNVME_ERR_INVALID_ARGUMENT for any other). Channels use it from their next
/// submission; safe while I/O runs.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_set_policy(
    subsys: *const Subsys,
    nsid: u32,
    policy: u32,
) -> i32 {
    let raw = policy;
    guard("vfnvme_subsys_set_policy", || {
        let s = sub(subsys)?;
        let policy = MpPolicy::from_raw(raw).ok_or_else(|| bad_policy(raw))?;
        set_heads(s, nsid, |h| h.set_policy(policy.to_driver()))
    })
}

/// Sets the path policy of head `nsid` (0: every head) by its Linux name: "numa",
/// "round-robin" or "queue-depth" (VFNVME_ERR_INVALID_ARGUMENT for anything else).
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_set_policy_name(
    subsys: *const Subsys,
    nsid: u32,
    name: *const c_char,
) -> i32 {
    guard("vfnvme_subsys_set_policy_name", || {
        let s = sub(subsys)?;
        let name = deref(name, "name")?;
        // SAFETY: a NUL-terminated C string (header contract), non-NULL here.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let policy: PathPolicy = name
            .parse()
            .map_err(|e: vfnvme::multipath::UnknownPolicy| {
                FfiError::new(Status::VfnvmeErrInvalidArgument, e.to_string())
            })?;
        set_heads(s, nsid, |h| h.set_policy(policy))
    })
}

/// Turns queue-if-no-path on or off for head `nsid` (0: every head). Off: every request
/// waiting for a path in a channel of the head fails at that channel's next poll, all at
/// once, with VFNVME_MP_FAIL_QUEUEING_OFF; new requests without a usable path fail at
/// submission with VFNVME_ERR_NO_PATH.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_set_queue_if_no_path(
    subsys: *const Subsys,
    nsid: u32,
    on: bool,
) -> i32 {
    guard("vfnvme_subsys_set_queue_if_no_path", || {
        set_heads(sub(subsys)?, nsid, |h| h.set_queue_if_no_path(on))
    })
}

/// Sets how long head `nsid` (0: every head) keeps queueing once it has no usable path, in
/// milliseconds (0: for ever); it applies from the next time the head loses its last path.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_set_delayed_removal(
    subsys: *const Subsys,
    nsid: u32,
    ms: u64,
) -> i32 {
    guard("vfnvme_subsys_set_delayed_removal", || {
        set_heads(sub(subsys)?, nsid, |h| h.set_delayed_removal_ms(ms))
    })
}

/// The control-path poll of the subsystem: follows controller events (reset, failure,
/// removal), namespace and ANA changes, ANA transition and delayed-removal timers, and
/// publishes every changed head at once. vfnvme has no interrupts: call it periodically
/// (e.g. every millisecond, or when I/O waits for a path) from any one thread. The changes it
/// saw are queued as events for vfnvme_subsys_next_event. Returns the number of events queued
/// (>= 0) or a negative status.
///
/// Thread safety: thread-safe (takes the subsystem's writer lock: not for the I/O path).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_poll(subsys: *const Subsys) -> i32 {
    guard("vfnvme_subsys_poll", || {
        let s = sub(subsys)?;
        let mut ev = lock(&s.events);
        let report = s.ops.poll();
        let now = Snapshot::of(&s.ops.heads());
        let mut fresh = Vec::new();
        diff(&ev.0, &now, &report, &mut fresh);
        ev.0 = now;
        // Bounded: an application that never reads events loses the oldest.
        const MAX_QUEUED: usize = 65536;
        for e in fresh {
            if ev.1.len() >= MAX_QUEUED {
                ev.1.pop_front();
            }
            ev.1.push_back(e);
        }
        Ok(i32::try_from(ev.1.len()).unwrap_or(i32::MAX))
    })
}

/// Takes the oldest subsystem event found by vfnvme_subsys_poll into `*out`: returns 1 if
/// there was one, 0 if there was none (`out->kind` is then VFNVME_MP_EVENT_NONE), or a
/// negative status. At most 65536 events wait; older ones are dropped.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_next_event(subsys: *const Subsys, out: *mut MpEvent) -> i32 {
    guard("vfnvme_subsys_next_event", || {
        let s = sub(subsys)?;
        let out = out_ptr(out, "out")?;
        match lock(&s.events).1.pop_front() {
            Some(e) => {
                *out = e;
                Ok(1)
            }
            None => {
                *out = MpEvent::new(super::types::MpEventKind::VfnvmeMpEventNone);
                Ok(0)
            }
        }
    })
}

/// Sends Namespace Attachment to controller `controller` (0-based index) of the subsystem:
/// attaches (`attach` true) or detaches namespace `nsid` to or from that controller only. The
/// controllers report the change by an asynchronous event; vfnvme_subsys_poll then adds or
/// removes the path. I/O the device ends on the detached path before that (Invalid
/// Namespace or Invalid Field) is failed over once to another usable path.
///
/// Thread safety: thread-safe (an admin command: control path).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_namespace_attachment(
    subsys: *const Subsys,
    controller: u32,
    nsid: u32,
    attach: bool,
) -> i32 {
    guard("vfnvme_subsys_namespace_attachment", || {
        let s = sub(subsys)?;
        s.ops
            .namespace_attachment(controller as usize, nsid, attach)?;
        Ok(0)
    })
}

/// Allocates a zeroed DMA buffer of at least `len` bytes from the pool every controller of
/// the subsystem shares (so a request can move between paths), as vfnvme_dma_alloc does for
/// one controller: stores its address in `*ptr` and its device address in `*iova` (may be
/// NULL). Channels of this subsystem take only such memory, within the `len` bytes asked for.
///
/// Thread safety: thread-safe (takes a lock: a control-path call).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_dma_alloc(
    subsys: *const Subsys,
    len: usize,
    ptr: *mut *mut c_void,
    iova: *mut u64,
) -> i32 {
    guard("vfnvme_subsys_dma_alloc", || {
        crate::ctrl::dma_alloc(&sub(subsys)?.dma, len, ptr, iova)
    })
}

/// Frees a buffer from vfnvme_subsys_dma_alloc. NULL is a no-op; any other pointer not from
/// vfnvme_subsys_dma_alloc of this subsystem fails with VFNVME_ERR_BAD_BUFFER. As
/// vfnvme_dma_free does, it fails with VFNVME_ERR_BUSY (and frees nothing) while a request of
/// any channel of the subsystem uses the buffer: from the submission until
/// vfnvme_channel_poll has returned its completion, whether the request is on a path, waits
/// in the channel's queue for one, or failed and waits to be handed out. Poll first.
///
/// Thread safety: thread-safe (takes the subsystem's buffer lock; scans every channel's
/// request records).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_dma_free(subsys: *const Subsys, ptr: *mut c_void) -> i32 {
    guard("vfnvme_subsys_dma_free", || {
        sub(subsys)?.dma.free(ptr)?;
        Ok(0)
    })
}
