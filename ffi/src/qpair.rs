//! Queue pairs: allocation, the submit functions, commit and completion polling.
//!
//! The I/O path allocates nothing and takes no lock: each request's callback, argument and
//! buffer mark sit in the queue pair's request table (`Requests`, shared with channels), the
//! record's index rides in the driver's command tracker (`QueuePair<P, u32>`), and completions
//! are gathered into a preallocated array before the callbacks run (so that a callback may
//! submit on the same queue pair).

use crate::backend::IoCmd;
use crate::ctrl::{deref, Ctrl};
use crate::dma::DmaDomain;
use crate::driver_ops::{each, refused, AnyQpair};
use crate::error::{guard, FfiError, FfiResult, Status};
use crate::requests::{Requests, CHUNK};
use crate::types::{
    Callback, Completion, Cpl, Iov, PiOpts, QpairOpts, Range, VFNVME_MAX_IOV, VFNVME_PI_CHECK_APP,
    VFNVME_PI_CHECK_GUARD, VFNVME_PI_CHECK_REF,
};
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vfnvme::hal::{DmaRegion, DmaSpan};
use vfnvme::namespace::Namespace;
use vfnvme::queue::{metadata_transfer, Op, PiChecks, PiOptions, Request, MAX_SPANS};

/// Largest queue depth accepted by vfnvme_qpair_alloc.
const MAX_DEPTH: u32 = 65536;

/// Most requests a driver queue pair holds (in flight, and ended but held for good), plus one:
/// the request table never runs out before the driver does, so the driver says why it is full.
const MAX_REQUESTS: u32 = 1025;

const _: () = assert!(VFNVME_MAX_IOV as usize == MAX_SPANS);

/// One request as a C submit function gave it.
#[derive(Clone, Copy)]
enum Req<'a> {
    /// A read (`write` false) or write of `blocks` blocks at `lba` on `buf`.
    Rw {
        write: bool,
        buf: *const c_void,
        lba: u64,
        blocks: u32,
    },
    /// A read or write with metadata: the data at `buf`, the separate metadata at `md` (NULL:
    /// none moves separately), and the protection information options.
    RwMd {
        write: bool,
        buf: *const c_void,
        md: *const c_void,
        lba: u64,
        blocks: u32,
        pi: PiOptions,
    },
    /// A read or write of `blocks` blocks at `lba` on the pieces `iov` (1..=VFNVME_MAX_IOV of
    /// them, checked by the caller), in order.
    Rwv {
        write: bool,
        iov: &'a [Iov],
        lba: u64,
        blocks: u32,
    },
    /// A command without data.
    Cmd(IoCmd<'a>),
}

struct Done {
    cb: Callback,
    arg: *mut c_void,
    cpl: Cpl,
}

/// An I/O queue pair (opaque). Use it from one thread at a time (it may move between threads).
pub struct Qpair {
    qp: AnyQpair,
    ctrl: *const Ctrl,
    /// One record per request from its submission until its completion is delivered; its
    /// marks are registered with the controller's DMA domain.
    requests: Requests,
    done: Vec<Done>,
    /// Namespaces by nsid, as the controller gave them (the driver checks their state).
    ns_cache: Vec<Option<Arc<Namespace>>>,
    /// The DMA region of the last data buffer (regions stay mapped while the controller lives).
    region: DmaRegion,
    /// The spans of an iovec being submitted (capacity VFNVME_MAX_IOV, kept: no allocation).
    spans: Vec<DmaSpan>,
    /// The addresses of its pieces, to mark (capacity VFNVME_MAX_IOV, kept).
    pieces: Vec<*const c_void>,
    in_callbacks: bool,
}

impl Qpair {
    fn ctrl<'a>(&self) -> &'a Ctrl {
        // SAFETY: the controller outlives its queue pairs: vfnvme_ctrl_close refuses while any
        // exists (counted in `Ctrl::qpairs`).
        unsafe { &*self.ctrl }
    }

    /// Namespace `nsid` from the controller (the cache missed, or holds one the driver no
    /// longer takes).
    #[cold]
    #[inline(never)]
    fn namespace(&self, nsid: u32) -> FfiResult<Arc<Namespace>> {
        self.ctrl().ops.namespace(nsid).ok_or_else(|| {
            FfiError::new(
                Status::VfnvmeErrNotFound,
                format!("namespace {nsid} is not active; list them with vfnvme_ctrl_namespaces"),
            )
        })
    }

    /// Submits `req` on namespace `nsid`: the one path of every C submit function. The cached
    /// namespace is borrowed by moving it out and back (no reference-count traffic per
    /// command). The buffer is translated once, a request record taken (marking the buffer),
    /// and the request handed to the driver's queue pair, which checks the namespace, the range
    /// and the buffer's length. A namespace the driver refuses as not active is looked up
    /// again (once): the controller may have attached another object under `nsid`.
    #[inline(always)]
    fn submit(
        &mut self,
        nsid: u32,
        req: Req<'_>,
        cb: Callback,
        arg: *mut c_void,
    ) -> FfiResult<i32> {
        let idx = nsid as usize;
        let mut ns = match self.ns_cache.get_mut(idx).and_then(Option::take) {
            Some(ns) => ns,
            None => self.namespace(nsid)?,
        };
        let mut looked_again = false;
        let r = loop {
            let dma: &DmaDomain = &self.ctrl().dma;
            let Qpair {
                qp,
                requests,
                region,
                spans,
                pieces,
                ..
            } = &mut *self;
            let r: FfiResult<()> = 'hand_over: {
                let (r, rec) = match req {
                    Req::Rw {
                        write,
                        buf,
                        lba,
                        blocks,
                    } => {
                        let span = match dma.span(region, buf, u64::from(blocks) << ns.lba_shift())
                        {
                            Ok(s) => s,
                            Err(e) => break 'hand_over Err(e),
                        };
                        let Some(rec) = requests.take(cb, arg, buf) else {
                            break 'hand_over Err(no_record());
                        };
                        let op = if write { Op::Write } else { Op::Read };
                        // SAFETY: `span` lies inside a live allocation of this controller's
                        // pool (checked just now); the C caller keeps it allocated and
                        // untouched until the completion (header contract), and
                        // vfnvme_dma_free refuses it while the record's mark is set.
                        let r = each!(qp, q => unsafe {
                            q.submit_data(op, &ns, lba, blocks, span, rec)
                        });
                        (r.map_err(|e| refused(&ns, &e.kind)), rec)
                    }
                    Req::RwMd {
                        write,
                        buf,
                        md,
                        lba,
                        blocks,
                        pi,
                    } => {
                        let (data_len, md_len) = metadata_transfer(&ns, blocks, &pi);
                        let span = match dma.span(region, buf, data_len.max(1)) {
                            Ok(s) => s,
                            Err(e) => break 'hand_over Err(e),
                        };
                        let md_span = match md.is_null() {
                            true => None,
                            false => match dma.span(region, md, md_len.max(1)) {
                                Ok(s) => Some(s),
                                Err(e) => break 'hand_over Err(e),
                            },
                        };
                        let Some(rec) = requests.take_with_metadata(cb, arg, buf, md) else {
                            break 'hand_over Err(no_record());
                        };
                        let op = if write { Op::Write } else { Op::Read };
                        // SAFETY: both spans lie inside live allocations of this controller's
                        // pool (checked just now), which the C caller keeps allocated and
                        // untouched until the completion (header contract); vfnvme_dma_free
                        // refuses them while the record's marks are set.
                        let made = unsafe {
                            Request::borrowed_with_metadata(
                                op, &ns, lba, blocks, span, md_span, pi, rec,
                            )
                        };
                        let r = made.and_then(|req| each!(qp, q => q.submit(req)).map(drop));
                        (r.map_err(|e| refused(&ns, &e.kind)), rec)
                    }
                    Req::Rwv {
                        write,
                        iov,
                        lba,
                        blocks,
                    } => {
                        spans.clear();
                        pieces.clear();
                        for (i, piece) in iov.iter().enumerate() {
                            if piece.base.is_null() || piece.len == 0 {
                                break 'hand_over Err(empty_piece(i, piece));
                            }
                            match dma.span(region, piece.base, piece.len as u64) {
                                Ok(s) => spans.push(s),
                                Err(e) => break 'hand_over Err(bad_piece(i, piece, e)),
                            }
                            pieces.push(piece.base.cast_const());
                        }
                        let Some(rec) = requests.take_vectored(cb, arg, pieces) else {
                            break 'hand_over Err(no_record());
                        };
                        let op = if write { Op::Write } else { Op::Read };
                        // SAFETY: every span lies inside a live allocation of this
                        // controller's pool (checked just now); the C caller keeps them
                        // allocated and untouched until the completion (header contract), and
                        // vfnvme_dma_free refuses each while the record's marks are set.
                        let made =
                            unsafe { Request::borrowed_vectored(op, &ns, lba, blocks, spans, rec) };
                        let r = made.and_then(|req| each!(qp, q => q.submit(req)).map(drop));
                        (r.map_err(|e| refused(&ns, &e.kind)), rec)
                    }
                    Req::Cmd(cmd) => {
                        let Some(rec) = requests.take(cb, arg, std::ptr::null()) else {
                            break 'hand_over Err(no_record());
                        };
                        (qp.submit(&ns, cmd, rec), rec)
                    }
                };
                if r.is_err() {
                    requests.end(rec, false);
                }
                r
            };
            match r {
                Err(e) if e.status == Status::VfnvmeErrNotFound && !looked_again => {
                    looked_again = true;
                    match self.replacement(nsid, &ns) {
                        Some(now) => ns = now,
                        None => break Err(e),
                    }
                }
                r => break r,
            }
        };
        if idx < 4096 {
            if self.ns_cache.len() <= idx {
                self.ns_cache.resize(idx + 1, None);
            }
            self.ns_cache[idx] = Some(ns);
        }
        r.map(|()| 0)
    }

    /// The controller's current namespace `nsid` if it is another object than `ns` (detached
    /// and attached again), after the driver refused `ns` as not active.
    #[cold]
    #[inline(never)]
    fn replacement(&self, nsid: u32, ns: &Arc<Namespace>) -> Option<Arc<Namespace>> {
        self.ctrl()
            .ops
            .namespace(nsid)
            .filter(|now| !Arc::ptr_eq(now, ns))
    }
}

/// Piece `i` of an iovec has a NULL base or no bytes.
#[cold]
#[inline(never)]
fn empty_piece(i: usize, piece: &Iov) -> FfiError {
    FfiError::new(
        Status::VfnvmeErrInvalidArgument,
        format!(
            "iov[{i}] is {:p} + {} bytes: every piece needs a base inside a buffer from vfnvme_dma_alloc and at least 1 byte; leave empty pieces out",
            piece.base, piece.len
        ),
    )
}

/// Piece `i` of an iovec is not inside one live buffer (`e` says why).
#[cold]
#[inline(never)]
fn bad_piece(i: usize, piece: &Iov, e: FfiError) -> FfiError {
    FfiError::new(
        e.status,
        format!(
            "iov[{i}] ({:p} + {} bytes): {}; every piece must lie inside one buffer from vfnvme_dma_alloc, within the length asked for",
            piece.base, piece.len, e.message
        ),
    )
}

/// The pieces of an iovec given to vfnvme_qpair_readv or vfnvme_qpair_writev, checked for
/// count.
///
/// # Safety
/// `iov` is NULL or points to `iovcnt` readable `struct vfnvme_iov` (header contract).
unsafe fn iov_slice<'a>(iov: *const Iov, iovcnt: u32) -> FfiResult<&'a [Iov]> {
    if iovcnt > VFNVME_MAX_IOV {
        return Err(FfiError::new(
            Status::VfnvmeErrTooManyPieces,
            format!(
                "iovcnt is {iovcnt}: one request takes at most VFNVME_MAX_IOV ({VFNVME_MAX_IOV}) pieces; join adjacent pieces, or split the I/O into several requests"
            ),
        ));
    }
    if iov.is_null() || iovcnt == 0 {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!(
                "iov is {iov:p} with iovcnt {iovcnt}: pass an array of 1..={VFNVME_MAX_IOV} pieces"
            ),
        ));
    }
    // SAFETY: non-NULL, `iovcnt` readable entries (the caller's contract), read during the
    // call only.
    Ok(unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) })
}

/// Every request record is in use (poll, then submit again).
#[cold]
#[inline(never)]
pub(crate) fn no_record() -> FfiError {
    // Hot under load: no formatting.
    FfiError::new(Status::VfnvmeErrQueueFull, "")
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
        ..QpairOpts::default()
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
        // SAFETY: NULL or a valid QpairOpts of `size` bytes (header contract).
        let mut opts = unsafe { crate::opts::read(opts, "opts") }?;
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
    let qp = c
        .ops
        .alloc_qpair(depth, opts.defer_sq_doorbell, opts.prefer_sgl)?;
    let records = depth.min(MAX_REQUESTS) as usize;
    // On average CHUNK marks per record for the pieces of vectored requests, and room for one
    // request of VFNVME_MAX_IOV pieces however shallow the queue pair.
    let chunks = records.max(MAX_SPANS.div_ceil(CHUNK));
    let requests = Requests::new(records, chunks);
    c.dma.track(requests.marks().clone());
    let qp = Qpair {
        qp,
        ctrl,
        done: Vec::with_capacity(requests.len()),
        requests,
        ns_cache: Vec::with_capacity(64),
        region: DmaRegion::default(),
        spans: Vec::with_capacity(MAX_SPANS),
        pieces: Vec::with_capacity(MAX_SPANS),
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
        let outstanding = q.qp.outstanding();
        if outstanding != 0 || q.in_callbacks {
            return Err(FfiError::new(
                Status::VfnvmeErrBusy,
                format!("{outstanding} command(s) in flight; poll them to completion, then free (never from a callback)"),
            ));
        }
        // SAFETY: `qp` came from Box::into_raw in vfnvme_qpair_alloc; the caller gives it up.
        let q = unsafe { Box::from_raw(qp) };
        let c = q.ctrl();
        // Records held for good belong to requests whose memory the device may still access
        // (a controller that could not be disabled): their marks stay, and vfnvme_dma_free
        // keeps refusing those buffers.
        c.dma.untrack(q.requests.marks(), q.requests.held());
        drop(q);
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
        let req = Req::Rw {
            write: false,
            buf,
            lba,
            blocks,
        };
        qp_mut(qp)?.submit(nsid, req, cb, arg)
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
        let req = Req::Rw {
            write: true,
            buf,
            lba,
            blocks,
        };
        qp_mut(qp)?.submit(nsid, req, cb, arg)
    })
}

/// The PI options at `pi` (NULL: none).
///
/// # Safety
/// `pi` is NULL or a valid `struct vfnvme_pi_opts` (header contract).
unsafe fn pi_options(pi: *const PiOpts) -> FfiResult<PiOptions> {
    // SAFETY: the caller's contract, passed on.
    let o = unsafe { crate::opts::read(pi, "pi") }?;
    let all = VFNVME_PI_CHECK_GUARD | VFNVME_PI_CHECK_APP | VFNVME_PI_CHECK_REF;
    if o.check & !all != 0 {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!(
                "pi->check is {:#x}: combine VFNVME_PI_CHECK_GUARD, VFNVME_PI_CHECK_APP and VFNVME_PI_CHECK_REF",
                o.check
            ),
        ));
    }
    Ok(PiOptions {
        act: o.act,
        check: PiChecks::from_prchk(o.check),
        app_tag: o.app_tag,
        app_mask: o.app_mask,
        ref_tag: o.has_ref_tag.then_some(o.ref_tag),
    })
}

/// The body of vfnvme_qpair_read_md (`write` false) and vfnvme_qpair_write_md.
#[allow(clippy::too_many_arguments)]
fn submit_md(
    name: &'static str,
    write: bool,
    qp: *mut Qpair,
    nsid: u32,
    buf: *const c_void,
    md: *const c_void,
    lba: u64,
    blocks: u32,
    pi: *const PiOpts,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    guard(name, || {
        // SAFETY: NULL or a valid options struct (the header contract of both callers).
        let pi = unsafe { pi_options(pi) }?;
        let req = Req::RwMd {
            write,
            buf,
            md,
            lba,
            blocks,
            pi,
        };
        qp_mut(qp)?.submit(nsid, req, cb, arg)
    })
}

/// Queues a read of `blocks` blocks at `lba` of namespace `nsid`, a namespace formatted with
/// metadata: into `buf` the blocks (each followed by its metadata for extended LBAs; only the
/// data with PRACT and 8 bytes of metadata), and into `md` the separate metadata (`blocks * ms`
/// bytes; NULL when none moves separately). `pi` (NULL: none) sets PRACT, the checks and the
/// expected tags; a check failure completes with SCT 2h and SC 82h (guard), 83h (application
/// tag) or 84h (reference tag). Both buffers from vfnvme_dma_alloc; otherwise as
/// vfnvme_qpair_read.
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vfnvme_qpair_read_md(
    qp: *mut Qpair,
    nsid: u32,
    buf: *mut c_void,
    md: *mut c_void,
    lba: u64,
    blocks: u32,
    pi: *const PiOpts,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    submit_md(
        "vfnvme_qpair_read_md",
        false,
        qp,
        nsid,
        buf,
        md,
        lba,
        blocks,
        pi,
        cb,
        arg,
    )
}

/// Queues a write of `blocks` blocks at `lba` with their metadata; otherwise as
/// vfnvme_qpair_read_md. Don't modify `buf` or `md` until the completion.
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vfnvme_qpair_write_md(
    qp: *mut Qpair,
    nsid: u32,
    buf: *const c_void,
    md: *const c_void,
    lba: u64,
    blocks: u32,
    pi: *const PiOpts,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    submit_md(
        "vfnvme_qpair_write_md",
        true,
        qp,
        nsid,
        buf,
        md,
        lba,
        blocks,
        pi,
        cb,
        arg,
    )
}

/// Queues a read of `blocks` blocks at `lba` of namespace `nsid` into the `iovcnt` pieces at
/// `iov` (read during this call only), filled in order. Each piece lies inside one buffer
/// from vfnvme_dma_alloc (VFNVME_ERR_BAD_BUFFER otherwise, naming the piece) and stays marked
/// in flight until the completion: vfnvme_dma_free refuses its buffer meanwhile (don't touch
/// the pieces until then). The pieces together hold at least blocks * lba_size bytes.
/// `iovcnt` is 1..=VFNVME_MAX_IOV (more: VFNVME_ERR_TOO_MANY_PIECES). The queue pair
/// describes the pieces with PRPs when PRPs can (every piece but the first starting on a
/// 4 KiB page boundary, every piece but the last ending on one; the first 4-byte aligned),
/// else with SGLs if the controller has them (vfnvme_qpair_opts.prefer_sgl: always SGLs);
/// otherwise VFNVME_ERR_NOT_PRP_DESCRIBABLE. Not for namespaces formatted with metadata.
/// Otherwise as vfnvme_qpair_read (VFNVME_ERR_QUEUE_FULL also when the queue pair's marks for
/// pieces are all in use: poll, then retry).
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above; `iov` points to
/// `iovcnt` entries.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vfnvme_qpair_readv(
    qp: *mut Qpair,
    nsid: u32,
    iov: *const Iov,
    iovcnt: u32,
    lba: u64,
    blocks: u32,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        submit_vectored(
            "vfnvme_qpair_readv",
            false,
            qp,
            nsid,
            iov,
            iovcnt,
            lba,
            blocks,
            cb,
            arg,
        )
    }
}

/// Queues a write of `blocks` blocks at `lba` of namespace `nsid` from the `iovcnt` pieces at
/// `iov`, taken in order; otherwise as vfnvme_qpair_readv. Don't modify the pieces until the
/// completion.
///
/// Thread safety: the queue pair's thread only; no allocation, lock or syscall.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above; `iov` points to
/// `iovcnt` entries.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vfnvme_qpair_writev(
    qp: *mut Qpair,
    nsid: u32,
    iov: *const Iov,
    iovcnt: u32,
    lba: u64,
    blocks: u32,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        submit_vectored(
            "vfnvme_qpair_writev",
            true,
            qp,
            nsid,
            iov,
            iovcnt,
            lba,
            blocks,
            cb,
            arg,
        )
    }
}

/// The one body of vfnvme_qpair_readv and vfnvme_qpair_writev (`write`).
///
/// # Safety
/// Their contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn submit_vectored(
    name: &'static str,
    write: bool,
    qp: *mut Qpair,
    nsid: u32,
    iov: *const Iov,
    iovcnt: u32,
    lba: u64,
    blocks: u32,
    cb: Callback,
    arg: *mut c_void,
) -> i32 {
    guard(name, || {
        let q = qp_mut(qp)?;
        // SAFETY: the caller's array (header contract).
        let iov = unsafe { iov_slice(iov, iovcnt) }?;
        let req = Req::Rwv {
            write,
            iov,
            lba,
            blocks,
        };
        q.submit(nsid, req, cb, arg)
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
        qp_mut(qp)?.submit(nsid, Req::Cmd(IoCmd::Flush), cb, arg)
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
        let req = Req::Cmd(IoCmd::WriteZeroes { lba, blocks });
        qp_mut(qp)?.submit(nsid, req, cb, arg)
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
        q.submit(nsid, Req::Cmd(IoCmd::Deallocate { ranges }), cb, arg)
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
        qp_mut(qp)?.qp.commit();
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
            let cap = q.requests.len() as u32;
            let max = if max == 0 || max > cap { cap } else { max };
            let mut done = std::mem::take(&mut q.done);
            let Qpair { qp, requests, .. } = q;
            qp.poll(max, |rec, c, held| {
                let (cb, arg) = requests.end(rec, held);
                // `done` has room for every record; a poll delivers at most that many.
                done.push(Done {
                    cb,
                    arg,
                    cpl: c.cpl,
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
        let max = max.min(q.requests.len() as u32);
        // SAFETY: the caller provides room for `max` (or more) entries (header contract), which
        // only this call writes while it runs.
        let out = unsafe { std::slice::from_raw_parts_mut(out, max as usize) };
        let Qpair { qp, requests, .. } = q;
        let mut n = requests.drain(out);
        let room = max - n as u32;
        qp.poll(room, |rec, c, held| {
            requests.deliver(out, &mut n, rec, c, held)
        });
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    })
}

/// Whether this queue pair sends every read and write with SGLs: 1 when
/// `vfnvme_qpair_opts.prefer_sgl` was set and the controller has SGLs (Identify Controller
/// SGLS), 0 otherwise (PRPs, and SGLs only for iovecs PRPs can't describe, where the
/// controller has them); VFNVME_ERR_INVALID_ARGUMENT for NULL.
///
/// Thread safety: the queue pair's thread only.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_qpair_uses_sgl(qp: *const Qpair) -> i32 {
    guard("vfnvme_qpair_uses_sgl", || {
        // SAFETY: NULL or a live queue pair used by this thread (header contract).
        let q = unsafe { qp.as_ref() }.ok_or_else(|| {
            FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                "qpair is NULL; pass one from vfnvme_qpair_alloc",
            )
        })?;
        Ok(i32::from(each!(&q.qp, p => p.prefers_sgl())))
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
        let n = unsafe { qp.as_ref() }.map_or(0, |q| q.qp.outstanding());
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    });
    u32::try_from(n).unwrap_or(0)
}
