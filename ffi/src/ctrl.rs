//! Controllers: open (VFIO or model), namespaces, DMA buffers, close.

use crate::backend::CtrlOps;
use crate::dma::DmaDomain;
use crate::error::{guard, FfiError, FfiResult, Status};
use crate::types::{CtrlEvent, CtrlEventKind, CtrlInfo, CtrlOpts, NsEvent, NsEventKind, NsInfo};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use vfnvme::admin::ControllerEvent;
use vfnvme::namespaces::NamespaceEvent;

/// An open controller (opaque). Thread-safe: share it between threads freely.
pub struct Ctrl {
    pub(crate) ops: Arc<dyn CtrlOps>,
    /// Its DMA buffers and the request marks of its queue pairs (dropped after the controller
    /// is shut down, `ops` being declared first).
    pub(crate) dma: DmaDomain,
    pub(crate) qpairs: AtomicUsize,
    events: Mutex<std::sync::mpsc::Receiver<NamespaceEvent>>,
    ctrl_events: Mutex<std::sync::mpsc::Receiver<ControllerEvent>>,
}

impl Ctrl {
    fn new(ops: Arc<dyn CtrlOps>) -> Self {
        let events = Mutex::new(ops.subscribe());
        let ctrl_events = Mutex::new(ops.subscribe_controller());
        let dma = DmaDomain::new(
            ops.dma().clone(),
            [
                "vfnvme_dma_alloc",
                "vfnvme_dma_free",
                "vfnvme_qpair_poll_completions",
            ],
        );
        Ctrl {
            ctrl_events,
            ops,
            dma,
            qpairs: AtomicUsize::new(0),
            events,
        }
    }
}

/// Turns a C pointer into a reference, or fails with INVALID_ARGUMENT.
pub(crate) fn deref<'a, T>(p: *const T, what: &'static str) -> FfiResult<&'a T> {
    // SAFETY: the C caller passes a pointer returned by vfnvme (or NULL, rejected here) and keeps
    // it valid for the duration of the call, as the header documents.
    unsafe { p.as_ref() }.ok_or_else(|| {
        FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("{what} is NULL; pass a valid pointer"),
        )
    })
}

pub(crate) fn out_ptr<'a, T>(p: *mut T, what: &'static str) -> FfiResult<&'a mut T> {
    // SAFETY: as in `deref`; output pointers point to caller-owned storage of type T.
    unsafe { p.as_mut() }.ok_or_else(|| {
        FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("{what} is NULL; pass where to store the result"),
        )
    })
}

/// The body of vfnvme_dma_alloc and vfnvme_subsys_dma_alloc: a buffer of `len` bytes from
/// `dma`, its address stored in `*ptr` and its device address in `*iova` (NULL: not wanted).
pub(crate) fn dma_alloc(
    dma: &DmaDomain,
    len: usize,
    ptr: *mut *mut c_void,
    iova: *mut u64,
) -> FfiResult<i32> {
    let ptr = out_ptr(ptr, "ptr")?;
    let (p, i) = dma.alloc(len)?;
    *ptr = p;
    // SAFETY: NULL or a writable u64 (header contract).
    if let Some(iova) = unsafe { iova.as_mut() } {
        *iova = i;
    }
    Ok(0)
}

pub(crate) fn publish(ops: Arc<dyn CtrlOps>, out: &mut *mut Ctrl) -> i32 {
    *out = Box::into_raw(Box::new(Ctrl::new(ops)));
    Status::VfnvmeOk.code()
}

/// Opens the NVMe controller at PCI address `pci_addr` ("0000:00:10.0"; "0000.00.10.0" also
/// works), which must be bound to vfio-pci, brings it up and scans its namespaces. `opts` may be
/// NULL. On success stores the controller in `*out`. A PCI device that is not an NVMe
/// controller (class 01:08:02) fails with VFNVME_ERR_UNSUPPORTED, its message saying "not an
/// NVMe controller" and what the device is.
///
/// Thread safety: thread-safe; each controller can be opened once per process.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_open(
    pci_addr: *const c_char,
    opts: *const CtrlOpts,
    out: *mut *mut Ctrl,
) -> i32 {
    guard("vfnvme_ctrl_open", || {
        let out = out_ptr(out, "out")?;
        let addr = deref(pci_addr, "pci_addr")?;
        // SAFETY: `pci_addr` is a NUL-terminated C string (header contract), non-NULL here.
        let addr = unsafe { CStr::from_ptr(addr) }.to_str().map_err(|_| {
            FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                "pci_addr is not UTF-8; pass e.g. \"0000:00:10.0\"",
            )
        })?;
        // SAFETY: NULL or a valid CtrlOpts of `size` bytes (header contract).
        let opts = unsafe { crate::opts::read(opts, "opts") }?;
        let addr = vfnvme::hal::PciAddress::parse(addr).map_err(|e| {
            FfiError::new(Status::VfnvmeErrInvalidArgument, format!("pci_addr: {e}"))
        })?;
        let ops = crate::open::open_vfio(addr, &opts)?;
        Ok(publish(ops, out))
    })
}

/// Shuts the controller down cleanly and frees it, with every DMA buffer still allocated from
/// it. Fails with VFNVME_ERR_BUSY (and changes nothing) while queue pairs of it exist. NULL is a
/// no-op.
///
/// Thread safety: not thread-safe with respect to other calls on the same controller; call it
/// once, after every other thread is done with the controller.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_close(ctrl: *mut Ctrl) -> i32 {
    guard("vfnvme_ctrl_close", || {
        if ctrl.is_null() {
            return Ok(0);
        }
        let live = deref(ctrl, "ctrl")?.qpairs.load(Ordering::Acquire);
        if live != 0 {
            return Err(FfiError::new(
                Status::VfnvmeErrBusy,
                format!("controller still has {live} queue pair(s); free them with vfnvme_qpair_free first"),
            ));
        }
        // SAFETY: `ctrl` came from Box::into_raw in vfnvme_ctrl_open*, and the caller gives up
        // every use of it with this call.
        drop(unsafe { Box::from_raw(ctrl) });
        Ok(0)
    })
}

/// Fills `*out` with what the controller reported at bring-up (transfer limit, queue limits,
/// identity). Size queue pairs for split I/O with `max_transfer`: an I/O of B bytes takes
/// ceil(B / max_transfer) entries.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_info(ctrl: *const Ctrl, out: *mut CtrlInfo) -> i32 {
    guard("vfnvme_ctrl_info", || {
        let ctrl = deref(ctrl, "ctrl")?;
        let out = out_ptr(out, "out")?;
        *out = ctrl.ops.info();
        Ok(0)
    })
}

fn info(ns: &vfnvme::namespace::Namespace) -> NsInfo {
    NsInfo {
        nsid: ns.nsid(),
        lba_size: ns.lba_size(),
        blocks: ns.blocks(),
        metadata_size: ns.identity().metadata_size,
        protection_type: ns.identity().protection_type,
        metadata_extended: ns.identity().metadata_extended,
        io_supported: !ns.io_refused(),
        protection_first: ns.identity().protection_first,
    }
}

/// Lists the active namespaces in nsid order: writes up to `cap` entries to `out` (which may be
/// NULL when `cap` is 0) and returns the total number of active namespaces (which may exceed
/// `cap`: call again with a larger array), or a negative status.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_namespaces(
    ctrl: *const Ctrl,
    out: *mut NsInfo,
    cap: usize,
) -> i32 {
    guard("vfnvme_ctrl_namespaces", || {
        let ctrl = deref(ctrl, "ctrl")?;
        let all = ctrl.ops.namespaces();
        if cap > 0 {
            if out.is_null() {
                return Err(FfiError::new(
                    Status::VfnvmeErrInvalidArgument,
                    "out is NULL but cap > 0; pass an array of cap entries",
                ));
            }
            // SAFETY: the caller provides `cap` writable entries at `out` (header contract).
            let dst = unsafe { std::slice::from_raw_parts_mut(out, cap) };
            for (d, ns) in dst.iter_mut().zip(all.iter()) {
                *d = info(ns);
            }
        }
        Ok(i32::try_from(all.len()).unwrap_or(i32::MAX))
    })
}

/// Fills `*out` with the geometry of namespace `nsid`; VFNVME_ERR_NOT_FOUND if it is not active.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_namespace(
    ctrl: *const Ctrl,
    nsid: u32,
    out: *mut NsInfo,
) -> i32 {
    guard("vfnvme_ctrl_namespace", || {
        let ctrl = deref(ctrl, "ctrl")?;
        let out = out_ptr(out, "out")?;
        let ns = ctrl.ops.namespace(nsid).ok_or_else(|| {
            FfiError::new(
                Status::VfnvmeErrNotFound,
                format!(
                    "namespace {nsid} is not active on {}; list them with vfnvme_ctrl_namespaces",
                    ctrl.ops.name()
                ),
            )
        })?;
        *out = info(&ns);
        Ok(0)
    })
}

/// Allocates a zeroed DMA buffer of at least `len` bytes (4 KiB aligned, physically contiguous
/// for the device) and stores its address in `*ptr` and its device address in `*iova` (`iova`
/// may be NULL). Only memory from this function may be passed to the submit functions, and only
/// within the `len` bytes asked for here (the rest of the allocator's chunk does not count): a
/// data range that runs past them fails with VFNVME_ERR_BAD_BUFFER.
///
/// Thread safety: thread-safe (takes a lock: a control-path call, not for the I/O path).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_dma_alloc(
    ctrl: *const Ctrl,
    len: usize,
    ptr: *mut *mut c_void,
    iova: *mut u64,
) -> i32 {
    guard("vfnvme_dma_alloc", || {
        let ctrl = deref(ctrl, "ctrl")?;
        dma_alloc(&ctrl.dma, len, ptr, iova)
    })
}

/// Frees a buffer from vfnvme_dma_alloc. Fails with VFNVME_ERR_BUSY while a command submitted
/// on one of this controller's queue pairs with a data pointer inside the buffer has not been
/// reaped (poll it first; a free racing a submit of the same buffer on another thread, without
/// synchronisation between the two, is not detected), and for good once such a command
/// completed with `rc` VFNVME_ERR_BUSY (the controller could not be disabled: the device may
/// still access the buffer, which is kept until the process exits). NULL is a no-op; any other
/// pointer not from vfnvme_dma_alloc of this controller fails with VFNVME_ERR_BAD_BUFFER. From
/// here on the submit functions refuse the buffer with VFNVME_ERR_BAD_BUFFER (until
/// vfnvme_dma_alloc hands the memory out again).
///
/// Thread safety: thread-safe (takes a lock).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_dma_free(ctrl: *const Ctrl, ptr: *mut c_void) -> i32 {
    guard("vfnvme_dma_free", || {
        deref(ctrl, "ctrl")?.dma.free(ptr)?;
        Ok(0)
    })
}

/// Translates an address inside a live buffer from vfnvme_dma_alloc of this controller (within
/// the length asked for) to its device address; stores it in `*iova`. VFNVME_ERR_BAD_BUFFER for
/// any other address, a freed buffer's included.
///
/// Thread safety: thread-safe, lock-free.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_dma_translate(
    ctrl: *const Ctrl,
    ptr: *const c_void,
    iova: *mut u64,
) -> i32 {
    guard("vfnvme_dma_translate", || {
        let ctrl = deref(ctrl, "ctrl")?;
        let iova = out_ptr(iova, "iova")?;
        *iova = ctrl.dma.translate(ptr)?;
        Ok(0)
    })
}

/// Reaps the controller's asynchronous events (namespace attached, detached, resized, ...) and
/// runs the rescans they call for; the resulting namespace changes are then returned by
/// [`vfnvme_ctrl_next_event`]. Call it now and then (e.g. once a second, or when I/O fails with
/// VFNVME_ERR_NOT_FOUND): vfnvme has no interrupts, so nothing else notices such events.
/// Returns the number of asynchronous events that arrived (>= 0) or a negative status.
///
/// Thread safety: thread-safe (takes the admin queue's lock: a control-path call, not for the
/// I/O path).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_process_admin(ctrl: *const Ctrl) -> i32 {
    guard("vfnvme_ctrl_process_admin", || {
        let ctrl = deref(ctrl, "ctrl")?;
        let n = ctrl.ops.process_admin()?;
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    })
}

/// Takes the oldest namespace event of this controller (since it was opened) into `*out`:
/// returns 1 if there was one, 0 if there was none (`out->kind` is then
/// VFNVME_NS_EVENT_NONE), or a negative status.
///
/// Thread safety: thread-safe (takes a lock; each event goes to one caller).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_next_event(ctrl: *const Ctrl, out: *mut NsEvent) -> i32 {
    guard("vfnvme_ctrl_next_event", || {
        let ctrl = deref(ctrl, "ctrl")?;
        let out = out_ptr(out, "out")?;
        let next = ctrl
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_recv()
            .ok();
        *out = match next {
            Some(NamespaceEvent::Added(nsid)) => NsEvent {
                kind: NsEventKind::VfnvmeNsEventAdded,
                nsid,
            },
            Some(NamespaceEvent::Removed(nsid)) => NsEvent {
                kind: NsEventKind::VfnvmeNsEventRemoved,
                nsid,
            },
            Some(NamespaceEvent::Changed(nsid)) => NsEvent {
                kind: NsEventKind::VfnvmeNsEventChanged,
                nsid,
            },
            None => NsEvent {
                kind: NsEventKind::VfnvmeNsEventNone,
                nsid: 0,
            },
        };
        Ok(i32::from(next.is_some()))
    })
}

/// Takes the oldest controller event of this controller (since it was opened) into `*out`:
/// I/O timeouts, Aborts sent, resets started and done, failure, removal. Returns 1 if there
/// was one, 0 if there was none (`out->kind` is then VFNVME_CTRL_EVENT_NONE), or a negative
/// status. Events come from the polls that notice them (queue pair polls,
/// vfnvme_ctrl_process_admin) and from vfnvme_ctrl_reset.
///
/// Thread safety: thread-safe (takes a lock; each event goes to one caller).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_next_ctrl_event(
    ctrl: *const Ctrl,
    out: *mut CtrlEvent,
) -> i32 {
    guard("vfnvme_ctrl_next_ctrl_event", || {
        let ctrl = deref(ctrl, "ctrl")?;
        let out = out_ptr(out, "out")?;
        let next = ctrl
            .ctrl_events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_recv()
            .ok();
        let (kind, qid, cid) = match next {
            Some(ControllerEvent::TimedOut { qid, cid }) => {
                (CtrlEventKind::VfnvmeCtrlEventTimedOut, qid, cid)
            }
            Some(ControllerEvent::AbortSent { qid, cid }) => {
                (CtrlEventKind::VfnvmeCtrlEventAbortSent, qid, cid)
            }
            Some(ControllerEvent::ResetStarted) => {
                (CtrlEventKind::VfnvmeCtrlEventResetStarted, 0, 0)
            }
            Some(ControllerEvent::ResetDone) => (CtrlEventKind::VfnvmeCtrlEventResetDone, 0, 0),
            Some(ControllerEvent::Failed) => (CtrlEventKind::VfnvmeCtrlEventFailed, 0, 0),
            Some(ControllerEvent::Removed) => (CtrlEventKind::VfnvmeCtrlEventRemoved, 0, 0),
            // A kind added to the driver later: reported as nothing rather than mislabelled.
            Some(_) | None => (CtrlEventKind::VfnvmeCtrlEventNone, 0, 0),
        };
        *out = CtrlEvent { kind, qid, cid };
        Ok(i32::from(next.is_some()))
    })
}

/// Resets the controller with its queue pairs open: CC.EN = 0 (within CAP.TO), a fresh admin
/// queue, CC.EN = 1, the number of queues, shadow doorbells, asynchronous events and features
/// restored, and a namespace rescan. Queue pairs stay valid: at their next poll each completes
/// the commands it had in flight with sct 3 / sc 0x71 (VFNVME_SC_ABORTED_BY_RESET, buffers
/// handed back) and creates its queues again; new commands may be submitted right after.
/// Returns 0, or a negative status (VFNVME_ERR_DEVICE when the reset failed: the controller is
/// then failed, its commands complete with sct 3 / sc 0x70, and it can only be closed).
///
/// Thread safety: thread-safe (takes the admin queue's lock; other threads may keep polling
/// their queue pairs).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_reset(ctrl: *const Ctrl) -> i32 {
    guard("vfnvme_ctrl_reset", || {
        let ctrl = deref(ctrl, "ctrl")?;
        ctrl.ops.reset()?;
        Ok(0)
    })
}
