//! Queue pairs: allocation, the submit functions, commit and completion polling.
//!
//! The I/O path allocates nothing and takes no lock: each request's callback and argument ride
//! in the driver's command tracker (`QueuePair<P, Slot>`), completions are gathered into a
//! preallocated array before the callbacks
//! run (so that a callback may submit on the same queue pair).

use crate::backend::{IoCmd, QpairOps, RawCompletion, RawIova, Slot};
use crate::ctrl::{deref, Ctrl};
use crate::error::{guard, FfiError, FfiResult, Status};
use crate::types::{Callback, Completion, Cpl, QpairOpts, Range};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use vfnvme::hal::{DmaPool, DmaRegion};
use vfnvme::namespace::{Namespace, NamespaceState};

/// Largest queue depth accepted by vfnvme_qpair_alloc.
const MAX_DEPTH: u32 = 65536;

/// A read or write as the C caller gave it.
#[derive(Clone, Copy)]
struct RwRequest {
    nsid: u32,
    write: bool,
    buf: *const c_void,
    lba: u64,
    blocks: u32,
}

struct Done {
    cb: Callback,
    arg: *mut c_void,
    cpl: Cpl,
}

/// An I/O queue pair (opaque). Use it from one thread at a time (it may move between threads).
pub struct Qpair {
    inner: Box<dyn QpairOps>,
    ctrl: *const Ctrl,
    /// Per driver request slot: the data pointer of the request in flight there (0: none or no
    /// data), shared with the controller so that vfnvme_dma_free can refuse a buffer in flight.
    in_flight: Arc<[AtomicUsize]>,
    done: Vec<Done>,
    ns_cache: Vec<Option<Arc<Namespace>>>,
    /// The DMA region of the last data buffer (regions stay mapped while the controller lives).
    region: DmaRegion,
    in_callbacks: bool,
}

impl Qpair {
    fn ctrl(&self) -> &Ctrl {
        // SAFETY: the controller outlives its queue pairs: vfnvme_ctrl_close refuses while any
        // exists (counted in `Ctrl::qpairs`).
        unsafe { &*self.ctrl }
    }

    fn namespace(&mut self, nsid: u32) -> FfiResult<Arc<Namespace>> {
        let idx = nsid as usize;
        if let Some(Some(ns)) = self.ns_cache.get(idx) {
            if ns.state() == NamespaceState::Active {
                return Ok(ns.clone());
            }
        }
        let ns = self
            .ctrl()
            .ops
            .namespace(nsid)
            .filter(|ns| ns.state() == NamespaceState::Active)
            .ok_or_else(|| {
                FfiError::new(
                    Status::VfnvmeErrNotFound,
                    format!(
                        "namespace {nsid} is not active; list them with vfnvme_ctrl_namespaces"
                    ),
                )
            })?;
        if idx < 4096 {
            if self.ns_cache.len() <= idx {
                self.ns_cache.resize(idx + 1, None);
            }
            self.ns_cache[idx] = Some(ns.clone());
        }
        Ok(ns)
    }

    #[inline(always)]
    fn buffer(&mut self, buf: *const c_void, len: u64) -> FfiResult<RawIova> {
        translate(&mut self.region, self.ctrl, buf, len)
    }

    /// A read (`write` false) or write: the hot path. The cached namespace is borrowed in place
    /// and the buffer translated through the cached region; anything else (a namespace not yet
    /// cached or no longer active) goes through [`Qpair::submit`].
    #[inline(always)]
    fn submit_rw(&mut self, rw: RwRequest, tag: Slot) -> FfiResult<i32> {
        let RwRequest {
            nsid,
            write,
            buf,
            lba,
            blocks,
        } = rw;
        let Slot { cb, arg } = tag;
        let idx = nsid as usize;
        let cached = matches!(
            self.ns_cache.get(idx),
            Some(Some(ns)) if ns.state() == NamespaceState::Active
        );
        if !cached {
            return self.submit_rw_slow(rw, tag);
        }
        let Qpair {
            inner,
            ctrl,
            in_flight,
            ns_cache,
            region,
            ..
        } = self;
        let Some(Some(ns)) = ns_cache.get(idx) else {
            return Err(FfiError::new(
                Status::VfnvmeErrInternal,
                "namespace cache changed during a submit; please report this bug",
            ));
        };
        // The LBA range is the driver's check (once); the buffer is checked here, where the
        // C pointer is translated (an empty range has no buffer to check).
        if blocks == 0 {
            return Err(empty_range(ns, lba));
        }
        let data = buf;
        let buf = translate(region, *ctrl, buf, u64::from(blocks) << ns.lba_shift())?;
        let Some(slot) = inner.next_slot() else {
            return Err(inner.no_slot());
        };
        // Marked before the submission, so that vfnvme_dma_free on another thread sees it.
        let mark = in_flight.get(usize::from(slot));
        if let Some(m) = mark {
            m.store(data as usize, Ordering::Relaxed);
        }
        match inner.submit_rw(ns, write, lba, blocks, buf, Slot { cb, arg }) {
            Ok(()) => Ok(0),
            Err(e) => {
                if let Some(m) = mark {
                    m.store(0, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }

    /// [`Qpair::submit_rw`] when the namespace is not in the cache (fills it).
    #[cold]
    #[inline(never)]
    fn submit_rw_slow(&mut self, rw: RwRequest, tag: Slot) -> FfiResult<i32> {
        let RwRequest {
            nsid,
            write,
            buf,
            lba,
            blocks,
        } = rw;
        let Slot { cb, arg } = tag;
        self.submit(
            nsid,
            |q, ns| {
                if blocks == 0 {
                    return Err(empty_range(ns, lba));
                }
                let span = q.buffer(buf, u64::from(blocks) << ns.lba_shift())?;
                Ok(if write {
                    IoCmd::Write {
                        lba,
                        blocks,
                        buf: span,
                    }
                } else {
                    IoCmd::Read {
                        lba,
                        blocks,
                        buf: span,
                    }
                })
            },
            buf,
            cb,
            arg,
        )
    }

    /// Submits the command `cmd` builds on namespace `nsid`; `data` is its data pointer (NULL
    /// for none), marked in flight until the completion.
    #[inline(always)]
    fn submit(
        &mut self,
        nsid: u32,
        cmd: impl FnOnce(&mut Self, &Namespace) -> FfiResult<IoCmd<'static>>,
        data: *const c_void,
        cb: Callback,
        arg: *mut c_void,
    ) -> FfiResult<i32> {
        // Borrow the cached namespace by moving it out and back (no reference-count traffic
        // per command); `namespace` refills the cache on a miss.
        let idx = nsid as usize;
        let ns = match self.ns_cache.get_mut(idx).and_then(Option::take) {
            Some(ns) if ns.state() == NamespaceState::Active => ns,
            _ => self.namespace(nsid)?,
        };
        let r = cmd(self, &ns).and_then(|c| self.submit_cmd(&ns, c, data, cb, arg));
        if let Some(slot) = self.ns_cache.get_mut(idx) {
            *slot = Some(ns);
        }
        r
    }

    #[inline(always)]
    fn submit_cmd(
        &mut self,
        ns: &Namespace,
        cmd: IoCmd<'_>,
        data: *const c_void,
        cb: Callback,
        arg: *mut c_void,
    ) -> FfiResult<i32> {
        let Some(slot) = self.inner.next_slot() else {
            return Err(self.inner.no_slot());
        };
        let mark = self.in_flight.get(usize::from(slot));
        if let Some(m) = mark {
            m.store(data as usize, Ordering::Relaxed);
        }
        match self.inner.submit(ns, cmd, Slot { cb, arg }) {
            Ok(()) => Ok(0),
            Err(e) => {
                if let Some(m) = mark {
                    m.store(0, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }
}

/// `len` bytes at `buf` as a device address, if they lie inside one live allocation of the
/// controller's pool (within the length given to vfnvme_dma_alloc): one atomic load through
/// `region` (the region of the last buffer), else one lookup in the pool, remembered in
/// `region` for the next.
#[inline(always)]
fn translate(
    region: &mut DmaRegion,
    ctrl: *const Ctrl,
    buf: *const c_void,
    len: u64,
) -> FfiResult<RawIova> {
    let Ok(len) = usize::try_from(len) else {
        return Err(FfiError::new(
            Status::VfnvmeErrBadBuffer,
            format!("a transfer of {len} bytes does not fit this machine's address space"),
        ));
    };
    match region.span(buf.cast(), len) {
        Some(span) => Ok(span),
        None => translate_new_region(region, ctrl, buf, len),
    }
}

#[cold]
#[inline(never)]
fn translate_new_region(
    region: &mut DmaRegion,
    ctrl: *const Ctrl,
    buf: *const c_void,
    len: usize,
) -> FfiResult<RawIova> {
    // SAFETY: the controller outlives its queue pairs (see Qpair::ctrl).
    let ctrl = unsafe { &*ctrl };
    let pool = ctrl.ops.dma();
    if !region.contains(buf.cast()) {
        if let Some(r) = pool.region_of(buf.cast()) {
            *region = r;
            if let Some(span) = region.span(buf.cast(), len) {
                return Ok(span);
            }
        }
    }
    Err(bad_buffer_ctrl(pool, buf, len))
}

/// Why `len` bytes at `buf` are not a range of one live allocation of `pool`.
#[cold]
fn bad_buffer_ctrl(pool: &DmaPool, buf: *const c_void, len: usize) -> FfiError {
    bad_buffer(pool, buf, len, "vfnvme_dma_alloc")
}

/// Why `len` bytes at `buf` are not a range of one live allocation of `pool`, whose buffers
/// come from the function `alloc`.
#[cold]
pub(crate) fn bad_buffer(pool: &DmaPool, buf: *const c_void, len: usize, alloc: &str) -> FfiError {
    let msg = match pool.allocation_of(buf.cast()) {
        Some(a) => format!(
            "data buffer {buf:p} + {len} bytes runs past the end of its buffer ({} bytes at {:#x} from {alloc}); pass a buffer of at least blocks * lba_size bytes",
            a.len, a.va
        ),
        None if pool.region_of(buf.cast()).is_some() => format!(
            "data buffer {buf:p} was freed (or never allocated); allocate it with {alloc} and keep it until the completion"
        ),
        None => format!(
            "data buffer {buf:p} is not inside DMA memory of this controller or subsystem; allocate it with {alloc}"
        ),
    };
    FfiError::new(Status::VfnvmeErrBadBuffer, msg)
}

/// A read or write of 0 blocks.
#[cold]
fn empty_range(ns: &Namespace, lba: u64) -> FfiError {
    FfiError::new(
        Status::VfnvmeErrOutOfRange,
        format!(
            "a transfer of 0 blocks at LBA {lba} of namespace {}: transfer at least one block",
            ns.nsid()
        ),
    )
}

fn check_range(ns: &Namespace, lba: u64, blocks: u32) -> FfiResult<()> {
    let end = lba.checked_add(u64::from(blocks));
    if blocks == 0 || end.is_none_or(|e| e > ns.blocks()) {
        return Err(FfiError::new(
            Status::VfnvmeErrOutOfRange,
            format!(
                "LBA range {lba}+{blocks} is empty or outside namespace {} ({} blocks)",
                ns.nsid(),
                ns.blocks()
            ),
        ));
    }
    Ok(())
}

fn qp_mut<'a>(qp: *mut Qpair) -> FfiResult<&'a mut Qpair> {
    // SAFETY: a pointer from vfnvme_qpair_alloc, used by one thread at a time (header contract);
    // no other reference to it is live during this call (callbacks run without one).
    unsafe { qp.as_mut() }.ok_or_else(|| {
        FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            "qpair is NULL; pass one from vfnvme_qpair_alloc",
        )
    })
}

/// Allocates an I/O queue pair with `depth` entries (commands in flight at most: `depth - 1`,
/// and at most 1024, so that every command identifier keeps a generation; the driver may round
/// it to what the controller supports) and stores it in `*out`.
///
/// Thread safety: thread-safe (takes the controller's admin lock). The queue pair itself must
/// then be used by one thread at a time.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_alloc(
    ctrl: *const Ctrl,
    depth: u32,
    out: *mut *mut Qpair,
) -> i32 {
    let opts = QpairOpts {
        depth,
        defer_sq_doorbell: false,
    };
    // SAFETY: the caller's pointers, valid as the header requires.
    guard("vfnvme_qpair_alloc", || unsafe { alloc(ctrl, opts, out) })
}

/// Allocates an I/O queue pair as vfnvme_qpair_alloc does, with the options in `*opts` (NULL:
/// the defaults: depth 256, doorbell written at every commit).
///
/// Thread safety: thread-safe (takes the controller's admin lock). The queue pair itself must
/// then be used by one thread at a time.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_alloc_opts(
    ctrl: *const Ctrl,
    opts: *const QpairOpts,
    out: *mut *mut Qpair,
) -> i32 {
    guard("vfnvme_qpair_alloc_opts", || {
        // SAFETY: NULL or a valid QpairOpts (header contract).
        let mut opts = unsafe { opts.as_ref() }.copied().unwrap_or_default();
        if opts.depth == 0 {
            opts.depth = 256;
        }
        // SAFETY: the caller's pointers, valid as the header requires.
        unsafe { alloc(ctrl, opts, out) }
    })
}

/// The body of vfnvme_qpair_alloc and vfnvme_qpair_alloc_opts.
///
/// # Safety
/// `ctrl` and `out` are NULL or valid, as the header requires of those functions.
unsafe fn alloc(ctrl: *const Ctrl, opts: QpairOpts, out: *mut *mut Qpair) -> FfiResult<i32> {
    let depth = opts.depth;
    let c = deref(ctrl, "ctrl")?;
    // SAFETY: NULL (rejected) or a writable pointer slot (header contract).
    let out = unsafe { out.as_mut() }
        .ok_or_else(|| FfiError::new(Status::VfnvmeErrInvalidArgument, "out is NULL"))?;
    if !(2..=MAX_DEPTH).contains(&depth) {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("queue depth {depth} is out of range; use 2..={MAX_DEPTH}"),
        ));
    }
    let inner = c.ops.alloc_qpair(depth, opts.defer_sq_doorbell)?;
    let in_flight: Arc<[AtomicUsize]> = (0..depth).map(|_| AtomicUsize::new(0)).collect();
    c.in_flight
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(in_flight.clone());
    let qp = Qpair {
        inner,
        ctrl,
        in_flight,
        done: Vec::with_capacity(depth as usize),
        ns_cache: Vec::with_capacity(64),
        region: DmaRegion::default(),
        in_callbacks: false,
    };
    c.qpairs.fetch_add(1, Ordering::AcqRel);
    *out = Box::into_raw(Box::new(qp));
    Ok(0)
}

/// Frees a queue pair (deleting its queues on the controller). Fails with VFNVME_ERR_BUSY while
/// commands are in flight: poll them to completion first. NULL is a no-op. Never call it from
/// a completion callback.
///
/// Thread safety: the thread using the queue pair calls it.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_free(qp: *mut Qpair) -> i32 {
    guard("vfnvme_qpair_free", || {
        if qp.is_null() {
            return Ok(0);
        }
        let q = qp_mut(qp)?;
        let outstanding = q.inner.outstanding();
        if outstanding != 0 || q.in_callbacks {
            return Err(FfiError::new(
                Status::VfnvmeErrBusy,
                format!("{outstanding} command(s) in flight; poll them to completion, then free (never from a callback)"),
            ));
        }
        // SAFETY: `qp` came from Box::into_raw in vfnvme_qpair_alloc; the caller gives it up.
        let q = unsafe { Box::from_raw(qp) };
        let ctrl = q.ctrl;
        let in_flight = q.in_flight.clone();
        drop(q);
        // SAFETY: the controller outlives its queue pairs (see Qpair::ctrl).
        let c = unsafe { &*ctrl };
        // Marks still set belong to requests whose memory the device may still access (a
        // controller that could not be disabled): they stay, and vfnvme_dma_free keeps
        // refusing those buffers.
        let held = in_flight.iter().any(|m| m.load(Ordering::Relaxed) != 0);
        c.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|t| held || !Arc::ptr_eq(t, &in_flight));
        c.qpairs.fetch_sub(1, Ordering::AcqRel);
        Ok(0)
    })
}

/// Queues a read of `blocks` blocks at `lba` of namespace `nsid` into `buf` (which must lie in
/// DMA memory from vfnvme_dma_alloc and hold blocks * lba_size bytes). The command reaches the
/// device at the next vfnvme_qpair_commit or vfnvme_qpair_process_completions; `cb(arg, cpl)`
/// runs when it completes. `cb` may be NULL. VFNVME_ERR_QUEUE_FULL: poll, then retry.
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_read(
    qp: *mut Qpair,
    nsid: u32,
    buf: *mut c_void,
    lba: u64,
    blocks: u32,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    guard("vfnvme_qpair_read", || {
        qp_mut(qp)?.submit_rw(
            RwRequest {
                nsid,
                write: false,
                buf,
                lba,
                blocks,
            },
            Slot { cb, arg },
        )
    })
}

/// Queues a write of `blocks` blocks at `lba` of namespace `nsid` from `buf`; otherwise as
/// vfnvme_qpair_read. Don't modify `buf` until the completion.
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_write(
    qp: *mut Qpair,
    nsid: u32,
    buf: *const c_void,
    lba: u64,
    blocks: u32,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    guard("vfnvme_qpair_write", || {
        qp_mut(qp)?.submit_rw(
            RwRequest {
                nsid,
                write: true,
                buf,
                lba,
                blocks,
            },
            Slot { cb, arg },
        )
    })
}

/// Queues a flush of namespace `nsid` (the volatile write cache); otherwise as vfnvme_qpair_read.
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_flush(
    qp: *mut Qpair,
    nsid: u32,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    guard("vfnvme_qpair_flush", || {
        qp_mut(qp)?.submit(nsid, |_, _| Ok(IoCmd::Flush), std::ptr::null(), cb, arg)
    })
}

/// Queues a Write Zeroes of `blocks` blocks at `lba`; otherwise as vfnvme_qpair_read.
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_write_zeroes(
    qp: *mut Qpair,
    nsid: u32,
    lba: u64,
    blocks: u32,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    guard("vfnvme_qpair_write_zeroes", || {
        qp_mut(qp)?.submit(
            nsid,
            |_, ns| {
                check_range(ns, lba, blocks)?;
                Ok(IoCmd::WriteZeroes { lba, blocks })
            },
            std::ptr::null(),
            cb,
            arg,
        )
    })
}

/// Queues a Dataset Management deallocate (TRIM) of `count` ranges (1..=256) read from
/// `ranges` during this call; otherwise as vfnvme_qpair_read.
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_deallocate(
    qp: *mut Qpair,
    nsid: u32,
    ranges: *const Range,
    count: u32,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    guard("vfnvme_qpair_deallocate", || {
        let q = qp_mut(qp)?;
        if ranges.is_null() || count == 0 || count > 256 {
            return Err(FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                format!("deallocate needs 1..=256 ranges, got {count} (ranges {ranges:p})"),
            ));
        }
        // SAFETY: the caller provides `count` readable ranges (header contract), read only
        // during this call.
        let ranges = unsafe { std::slice::from_raw_parts(ranges, count as usize) };
        let ns = q.namespace(nsid)?;
        for r in ranges {
            check_range(&ns, r.lba, r.blocks)?;
        }
        q.submit_cmd(&ns, IoCmd::Deallocate { ranges }, std::ptr::null(), cb, arg)
    })
}

/// Rings the submission doorbell once for every command queued since the last commit. (Polling
/// also commits, so a submit-then-poll loop needs no explicit commit.)
///
/// Thread safety: the queue pair's thread only; one MMIO write, no syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_commit(qp: *mut Qpair) -> i32 {
    guard("vfnvme_qpair_commit", || {
        qp_mut(qp)?.inner.commit();
        Ok(0)
    })
}

/// Commits queued commands, reaps up to `max` completions (0: as many as are ready) and calls
/// their callbacks; returns how many completed (>= 0) or a negative status. Never blocks.
/// VFNVME_ERR_BUSY if called from a completion callback.
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_process_completions(qp: *mut Qpair, max: u32) -> i32 {
    guard("vfnvme_qpair_process_completions", || {
        let mut done = {
            let q = qp_mut(qp)?;
            if q.in_callbacks {
                return Err(FfiError::new(
                    Status::VfnvmeErrBusy,
                    "vfnvme_qpair_process_completions called from a completion callback; return from the callback instead",
                ));
            }
            let cap = q.in_flight.len() as u32;
            let max = if max == 0 || max > cap { cap } else { max };
            let mut done = std::mem::take(&mut q.done);
            let Qpair {
                inner, in_flight, ..
            } = q;
            inner.poll(max, &mut |c: RawCompletion| {
                // The device may still access a held request's buffer: its mark stays.
                if !c.memory_held {
                    if let Some(m) = in_flight.get(usize::from(c.slot)) {
                        m.store(0, Ordering::Relaxed);
                    }
                }
                let mut cpl = Cpl::from_status(c.status, c.cdw0);
                cpl.rc = c.rc;
                // `done` has room for `depth` entries; a poll delivers at most that many.
                done.push(Done {
                    cb: c.tag.cb,
                    arg: c.tag.arg,
                    cpl,
                });
            });
            q.in_callbacks = true;
            done
        };
        // No reference into the queue pair is live while callbacks run: they may submit on it.
        for d in &done {
            if let Some(cb) = d.cb {
                // SAFETY: a C function pointer given at submission with its argument; the
                // completion lives for the duration of the call.
                unsafe { cb(d.arg, &d.cpl) };
            }
        }
        let n = done.len();
        done.clear();
        let q = qp_mut(qp)?;
        q.done = done;
        q.in_callbacks = false;
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    })
}

/// Commits queued commands and reaps up to `max` completions (`max` >= 1) into `out[0..n]`
/// without calling callbacks: each entry holds the `arg` given at submission and the completion
/// (the callback given at submission is not called for them). Returns `n` (>= 0) or a negative
/// status. Never blocks. The batch alternative to vfnvme_qpair_process_completions (one call,
/// no callback per completion); VFNVME_ERR_BUSY if called from a completion callback.
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above; `out` has room
/// for `max` entries.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_poll_completions(
    qp: *mut Qpair,
    max: u32,
    out: *mut Completion,
) -> i32 {
    guard("vfnvme_qpair_poll_completions", || {
        let q = qp_mut(qp)?;
        if out.is_null() || max == 0 {
            return Err(FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                format!(
                    "poll_completions needs an array of max >= 1 entries (out {out:p}, max {max})"
                ),
            ));
        }
        if q.in_callbacks {
            return Err(FfiError::new(
                Status::VfnvmeErrBusy,
                "vfnvme_qpair_poll_completions called from a completion callback; return from the callback instead",
            ));
        }
        let max = max.min(q.in_flight.len() as u32);
        // SAFETY: the caller provides room for `max` (or more) entries (header contract), which
        // only this call writes while it runs.
        let out = unsafe { std::slice::from_raw_parts_mut(out, max as usize) };
        let n = q.inner.poll_into(&q.in_flight, out);
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    })
}

/// Commands submitted on this queue pair and not yet completed (0 for NULL).
///
/// Thread safety: the queue pair's thread only.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_outstanding(qp: *const Qpair) -> u32 {
    let n = guard("vfnvme_qpair_outstanding", || {
        // SAFETY: NULL or a live queue pair used by this thread (header contract).
        let n = unsafe { qp.as_ref() }.map_or(0, |q| q.inner.outstanding());
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    });
    u32::try_from(n).unwrap_or(0)
}
