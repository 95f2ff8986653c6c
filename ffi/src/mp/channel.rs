//! Channels through the C ABI: one thread's I/O handle on a multipath head. Submissions take
//! memory from vfnvme_subsys_dma_alloc (bounds checked on every submission, as on a queue
//! pair); completions are polled into a C array.

use super::backend::AnyChannel;
use super::registry;
use super::subsys::{no_head, sub, Subsys};
use super::types::{ChannelOpts, ChannelStats};
use crate::ctrl::out_ptr;
use crate::error::{guard, FfiError, FfiResult, Status};
use crate::qpair::no_record;
use crate::requests::Requests;
use crate::types::Completion;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use vfnvme::hal::DmaRegion;
use vfnvme::multipath::ChannelOptions;
use vfnvme::QpairOptions;

/// One thread's I/O handle on a multipath head (opaque): one queue pair per path, made on
/// first use; path choice by the head's policy; failover with the same buffer; requests wait
/// (bounded) while no path is usable and the head queues. Use it from one thread at a time
/// (it may move between threads).
///
/// Every call on a channel that is not open (closed, or not from vfnvme_channel_open) fails
/// with VFNVME_ERR_INVALID_ARGUMENT: vfnvme_channel_close checks the registry of live handles
/// (a lock), the I/O calls one load of a magic value set at open and poisoned at close (no
/// lock on the I/O path). That is best effort: the memory of a closed channel is freed and
/// may be reused, which nothing can tell apart from a live channel (a queue pair checks only
/// for NULL). Never use a channel after closing it.
pub struct Channel {
    /// [`OPEN`] while open; [`CLOSED`] is written at close (checked by every call).
    magic: u64,
    ch: AnyChannel,
    sub: *const Subsys,
    /// The DMA region of the last data buffer (regions stay mapped while the subsystem lives).
    region: DmaRegion,
    lba_shift: u8,
    /// One record per request the channel holds (its index is the driver's tag): the C
    /// `arg` and the buffer address vfnvme_subsys_dma_free checks; completions the driver
    /// delivered past the caller's `max` wait there, record kept, until handed out.
    requests: Requests,
}

impl Channel {
    fn sub<'a>(&self) -> &'a Subsys {
        // SAFETY: the subsystem outlives its channels: vfnvme_subsys_close refuses while any
        // exists (counted in `Subsys::channels`).
        unsafe { &*self.sub }
    }
}

/// `Channel::magic` of an open channel.
const OPEN: u64 = u64::from_be_bytes(*b"vfnvmech");
/// `Channel::magic` written at close.
const CLOSED: u64 = u64::from_be_bytes(*b"chclosed");

/// Fails unless `ch` looks like an open channel: not NULL, aligned, its magic [`OPEN`] (one
/// load, no lock: the I/O path's check).
#[inline(always)]
fn check_open(ch: *const Channel) -> FfiResult<()> {
    if ch.is_null() {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            "channel is NULL; pass one from vfnvme_channel_open",
        ));
    }
    if !ch.is_aligned() {
        return Err(not_open(ch));
    }
    // SAFETY: non-NULL and aligned; the header requires a channel from vfnvme_channel_open
    // (readable memory of a Channel). Only the magic is read, through the raw pointer, before
    // anything else of the object is trusted or a reference to it formed.
    let magic = unsafe { std::ptr::addr_of!((*ch).magic).read() };
    if magic != OPEN {
        return Err(not_open(ch));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn not_open(ch: *const Channel) -> FfiError {
    FfiError::new(
        Status::VfnvmeErrInvalidArgument,
        format!("channel {ch:p} is not open (already closed, or not from vfnvme_channel_open)"),
    )
}

/// An open channel (see [`check_open`]), for the calls that change it.
#[inline(always)]
fn ch_mut<'a>(ch: *mut Channel) -> FfiResult<&'a mut Channel> {
    check_open(ch)?;
    // SAFETY: an open channel (checked just now, best effort), used by one thread at a time
    // (header contract).
    Ok(unsafe { &mut *ch })
}

/// An open channel (see [`check_open`]), for the calls that read it.
#[inline(always)]
fn ch_ref<'a>(ch: *const Channel) -> FfiResult<&'a Channel> {
    check_open(ch)?;
    // SAFETY: as in `ch_mut`.
    Ok(unsafe { &*ch })
}

/// Opens a channel on the head of namespace `nsid` of the subsystem and stores it in `*out`
/// (`opts` may be NULL). VFNVME_ERR_NOT_FOUND if the subsystem has no head for `nsid`. Open
/// one per thread that does I/O.
///
/// Thread safety: thread-safe. The channel itself must then be used by one thread at a time.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_channel_open(
    subsys: *const Subsys,
    nsid: u32,
    opts: *const ChannelOpts,
    out: *mut *mut Channel,
) -> i32 {
    guard("vfnvme_channel_open", || {
        let s = sub(subsys)?;
        let out = out_ptr(out, "out")?;
        // SAFETY: NULL or a valid ChannelOpts of `size` bytes (header contract).
        let o = unsafe { crate::opts::read(opts, "opts") }?;
        let head = s.ops.head(nsid).ok_or_else(|| no_head(s, nsid))?;
        let lba_shift = head
            .paths()
            .paths
            .first()
            .map(|p| p.namespace.lba_shift())
            .ok_or_else(|| {
                FfiError::new(
                    Status::VfnvmeErrNoPath,
                    format!("namespace {nsid} has no path now; poll the subsystem and retry"),
                )
            })?;
        let depth = if o.qpair_depth == 0 {
            256
        } else {
            o.qpair_depth
        };
        if !(2..=65536).contains(&depth) {
            return Err(FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                format!("qpair_depth {depth} is out of range; use 2..=65536"),
            ));
        }
        let copts = ChannelOptions {
            qpair: QpairOptions {
                depth,
                ..QpairOptions::default()
            },
            capacity: if o.capacity == 0 {
                1024
            } else {
                o.capacity as usize
            },
            numa_node: (o.numa_known && o.numa_node >= 0).then_some(o.numa_node as u32),
        };
        let paths = s.ops.controllers().len().max(1);
        let capacity = copts.capacity;
        // Validates the capacity (1..=1048576) before anything is sized by it.
        let inner = s.ops.open_channel(head, copts)?;
        let requests = Requests::new(capacity + depth as usize * paths, 0);
        s.dma.track(requests.marks().clone());
        let ch = Box::into_raw(Box::new(Channel {
            magic: OPEN,
            ch: inner,
            sub: subsys,
            region: DmaRegion::default(),
            lba_shift,
            requests,
        }));
        s.channels.fetch_add(1, Ordering::AcqRel);
        registry::add(ch);
        *out = ch;
        Ok(0)
    })
}

/// Closes a channel (deleting its queue pairs). Fails with VFNVME_ERR_BUSY while requests
/// are outstanding: poll them to completion first. NULL is a no-op; a channel already closed
/// fails with VFNVME_ERR_INVALID_ARGUMENT.
///
/// Thread safety: the thread using the channel calls it.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_channel_close(channel: *mut Channel) -> i32 {
    guard("vfnvme_channel_close", || {
        if channel.is_null() {
            return Ok(0);
        }
        registry::check(channel, "channel")?;
        let ch = ch_mut(channel)?;
        let n = ch.ch.outstanding() + ch.requests.waiting();
        if n != 0 {
            return Err(FfiError::new(
                Status::VfnvmeErrBusy,
                format!("channel has {n} request(s) outstanding; poll them with vfnvme_channel_poll first"),
            ));
        }
        if !registry::remove(channel) {
            return Err(FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                "channel was closed concurrently",
            ));
        }
        // Buffers that a controller which could not be disabled may still use stay refused
        // by vfnvme_subsys_dma_free for the subsystem's life: their marks stay tracked.
        ch.sub()
            .dma
            .untrack(ch.requests.marks(), ch.requests.held());
        ch.sub().channels.fetch_sub(1, Ordering::AcqRel);
        // Poisoned so that the I/O calls refuse the handle while its memory is not reused
        // (volatile: the store must not be dropped as dead before the deallocation).
        // SAFETY: `magic` is a field of the live channel `ch` refers to.
        unsafe { std::ptr::write_volatile(&mut ch.magic, CLOSED) };
        // SAFETY: from Box::into_raw in vfnvme_channel_open, live until now (just removed
        // from the registry, so no second close frees it again).
        drop(unsafe { Box::from_raw(channel) });
        Ok(0)
    })
}

/// A read or write: the buffer translated (once), a request record taken (marking the
/// buffer), then the request handed to the channel, which checks the rest.
#[inline(always)]
fn submit(
    ch: *mut Channel,
    write: bool,
    buf: *const c_void,
    lba: u64,
    blocks: u32,
    arg: *mut c_void,
) -> FfiResult<i32> {
    let ch = ch_mut(ch)?;
    let dma = &ch.sub().dma;
    let Channel {
        ch,
        region,
        lba_shift,
        requests,
        ..
    } = ch;
    let span = dma.span(region, buf, u64::from(blocks) << *lba_shift)?;
    let rec = requests.take(None, arg, buf).ok_or_else(no_record)?;
    // SAFETY: `span` lies inside a live allocation of the pool every path shares (checked
    // just now); the C caller keeps it allocated and untouched until the completion (header
    // contract), and vfnvme_subsys_dma_free refuses it while the record's mark is set.
    let r = unsafe { ch.submit_rw(write, lba, blocks, span, rec) };
    if r.is_err() {
        requests.end(rec, false);
    }
    r.map(|()| 0)
}

/// Queues a read of `blocks` logical blocks at `lba` into `buf` on the head's best path (or
/// in the channel's queue while no path is usable and the head queues); `arg` comes back in
/// the completion. `buf` must lie inside a buffer from vfnvme_subsys_dma_alloc of this
/// channel's subsystem, `blocks * lba_size` bytes long (VFNVME_ERR_BAD_BUFFER otherwise), and
/// stay allocated and untouched until the completion (vfnvme_subsys_dma_free refuses it with
/// VFNVME_ERR_BUSY until vfnvme_channel_poll has returned the completion). Nothing reaches
/// the device before vfnvme_channel_commit or vfnvme_channel_poll. Errors:
/// VFNVME_ERR_QUEUE_FULL (the channel holds its capacity, or every one of its request records
/// is in use: poll), VFNVME_ERR_NO_PATH (no usable path and the head does not queue),
/// VFNVME_ERR_NOT_FOUND (the head was removed), VFNVME_ERR_OUT_OF_RANGE.
///
/// A channel has `capacity + qpair_depth * controllers` request records (the options and
/// the subsystem's controllers at vfnvme_channel_open): one per request from its submission
/// until its completion is returned by vfnvme_channel_poll. That is all the channel's queue
/// and queue pairs hold, so VFNVME_ERR_QUEUE_FULL comes from the records only if the
/// subsystem gained controllers since, or the driver gave a queue pair more entries.
///
/// Thread safety: the channel's thread. Lock-free and allocation-free. A channel that is not
/// open fails with VFNVME_ERR_INVALID_ARGUMENT (best effort: see vfnvme_channel).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_channel_read(
    channel: *mut Channel,
    buf: *mut c_void,
    lba: u64,
    blocks: u32,
    arg: *mut c_void,
) -> i32 {
    guard("vfnvme_channel_read", || {
        submit(channel, false, buf, lba, blocks, arg)
    })
}

/// Queues a write of `blocks` logical blocks at `lba` from `buf`, as vfnvme_channel_read
/// does. A write acknowledged once is never written again by a late failover.
///
/// Thread safety: the channel's thread. Lock-free and allocation-free.
/// A channel that is not open fails with VFNVME_ERR_INVALID_ARGUMENT (best effort: see
/// vfnvme_channel).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_channel_write(
    channel: *mut Channel,
    buf: *const c_void,
    lba: u64,
    blocks: u32,
    arg: *mut c_void,
) -> i32 {
    guard("vfnvme_channel_write", || {
        submit(channel, true, buf, lba, blocks, arg)
    })
}

/// Queues a flush on the head's best path; `arg` comes back in the completion. It takes a
/// request record as vfnvme_channel_read does (VFNVME_ERR_QUEUE_FULL when none is free).
///
/// Thread safety: the channel's thread.
/// A channel that is not open fails with VFNVME_ERR_INVALID_ARGUMENT (best effort: see
/// vfnvme_channel).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_channel_flush(channel: *mut Channel, arg: *mut c_void) -> i32 {
    guard("vfnvme_channel_flush", || {
        let ch = ch_mut(channel)?;
        let rec = ch
            .requests
            .take(None, arg, std::ptr::null())
            .ok_or_else(no_record)?;
        let r = ch.ch.flush(rec);
        if r.is_err() {
            ch.requests.end(rec, false);
        }
        r.map(|()| 0)
    })
}

/// Rings the doorbell of every path with new requests (one write per path).
///
/// Thread safety: the channel's thread.
/// A channel that is not open fails with VFNVME_ERR_INVALID_ARGUMENT (best effort: see
/// vfnvme_channel).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_channel_commit(channel: *mut Channel) -> i32 {
    guard("vfnvme_channel_commit", || {
        ch_mut(channel)?.ch.commit();
        Ok(0)
    })
}

/// Commits, then writes up to `max` finished requests to `out[0..n]` and returns `n` (or a
/// negative status). Path errors are failed over here (the request is sent again, same
/// buffer, on another path) and do not come out; requests waiting for a path are sent when
/// one is usable, or all fail at once (`reason` says why) when the head is removed, queueing
/// was switched off or the head's delayed removal ran out. The subsystem must be polled
/// (vfnvme_subsys_poll) for path changes to be seen.
///
/// Thread safety: the channel's thread. Lock-free and allocation-free.
/// A channel that is not open fails with VFNVME_ERR_INVALID_ARGUMENT (best effort: see
/// vfnvme_channel).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_channel_poll(
    channel: *mut Channel,
    out: *mut Completion,
    max: u32,
) -> i32 {
    guard("vfnvme_channel_poll", || {
        let ch = ch_mut(channel)?;
        if max == 0 {
            return Ok(0);
        }
        if out.is_null() {
            return Err(FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                "out is NULL but max > 0; pass an array of max entries",
            ));
        }
        // SAFETY: `max` writable entries at `out` (header contract).
        let dst = unsafe { std::slice::from_raw_parts_mut(out, max as usize) };
        let Channel { ch, requests, .. } = ch;
        // The driver may deliver more than asked (every queued request failing at once):
        // what does not fit waits in the request table, its record (and buffer mark) kept.
        let mut n = requests.drain(dst);
        if n < dst.len() {
            ch.poll(dst.len() - n, |rec, c, held| {
                requests.deliver(dst, &mut n, rec, c, held)
            });
        }
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    })
}

/// Fills `*out` with the channel's counters: commands sent per path (the I/O per path),
/// failovers, requests queued and failed for want of a path, requests outstanding.
///
/// Thread safety: the channel's thread.
/// A channel that is not open fails with VFNVME_ERR_INVALID_ARGUMENT (best effort: see
/// vfnvme_channel).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_channel_stats(
    channel: *const Channel,
    out: *mut ChannelStats,
) -> i32 {
    guard("vfnvme_channel_stats", || {
        let ch = ch_ref(channel)?;
        let out = out_ptr(out, "out")?;
        let s = ch.ch.stats();
        let mut c = ChannelStats {
            failovers: s.failovers,
            queued: s.queued,
            failed_no_path: s.failed_no_path,
            outstanding: (ch.ch.outstanding() + ch.requests.waiting()) as u64,
            ..ChannelStats::default()
        };
        for (d, v) in c.per_path.iter_mut().zip(s.per_path.iter()) {
            *d = *v;
        }
        *out = c;
        Ok(0)
    })
}
