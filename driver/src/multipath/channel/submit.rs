//! Submission: the fast path (head unchanged, a usable path with its queue pair open) and
//! everything else (a changed head, a path to open, no usable path: queue or refuse). The
//! channel makes one [`Request`] per send, against the chosen path's namespace (its checks
//! run there, once), and submits it through the queue pair's public
//! [`submit`](crate::QueuePair::submit).

use super::types::ChannelSubmitError;
use super::{Dispatch, IoChannel, Pending, Tag};
use crate::error::{SubmitError, SubmitErrorKind};
use crate::multipath::error::ChannelError;
use crate::multipath::paths::MAX_PATHS;
use crate::namespace::Namespace;
use crate::platform::Platform;
use crate::queue::{Data, Op, Request, RequestData, Target};
use vfnvme_hal::{DmaBuffer, DmaSpan};

impl<P: Platform> IoChannel<P> {
    /// Queues a read of `blocks` blocks at `lba` into `buf`.
    #[inline(always)]
    pub fn read(
        &mut self,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: u64,
    ) -> Result<(), ChannelSubmitError> {
        self.submit_io(Op::Read, lba, blocks, buf, tag)
    }

    /// Queues a write of `blocks` blocks at `lba` from `buf`.
    #[inline(always)]
    pub fn write(
        &mut self,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: u64,
    ) -> Result<(), ChannelSubmitError> {
        self.submit_io(Op::Write, lba, blocks, buf, tag)
    }

    /// Queues a read (`write` false) or write of `blocks` blocks at `lba` on borrowed memory
    /// (the C ABI's entry point), like [`read`](Self::read) / [`write`](Self::write): same
    /// path choice, failover (the same span is sent again on another path) and queueing. The
    /// completion carries no buffer; a refused submission hands none back.
    ///
    /// # Safety
    /// `span` must come from the DMA pool the subsystem's controllers share (every
    /// controller's [`crate::Controller::dma`]), and its allocation must stay allocated and
    /// untouched until [`poll`](Self::poll) delivers this request (or the channel is dropped).
    #[inline(always)]
    pub unsafe fn submit_raw(
        &mut self,
        write: bool,
        lba: u64,
        blocks: u32,
        span: DmaSpan,
        tag: u64,
    ) -> Result<(), ChannelSubmitError> {
        let op = if write { Op::Write } else { Op::Read };
        self.submit_io(op, lba, blocks, span, tag)
    }

    /// Queues a flush.
    pub fn flush(&mut self, tag: u64) -> Result<(), ChannelSubmitError> {
        self.submit_slow(
            Tag {
                user: tag,
                op: Op::Flush,
                ..Tag::default()
            },
            None,
        )
    }

    /// Queues a read or write on the path the head's policy picks, or in the channel's queue
    /// if no path is usable and the head queues. Nothing reaches the device before
    /// [`commit`](Self::commit) or [`poll`](Self::poll). The fast path (head unchanged, a path
    /// usable, its queue pair open) costs a generation check (in direct mode, with the
    /// namespace's state, see `direct.rs`), the route, the request's checks and the queue pair's
    /// submission.
    ///
    /// With [`Data::Span`], the caller upholds [`submit_raw`](Self::submit_raw)'s contract.
    #[inline(always)]
    fn submit_io<D: RequestData>(
        &mut self,
        op: Op,
        lba: u64,
        blocks: u32,
        data: D,
        tag: u64,
    ) -> Result<(), ChannelSubmitError> {
        let len = data.byte_len();
        let span = data.span();
        // The request's record is made where it goes (into the tracker, or a refusal's path):
        // made here and kept, it would cost the fast path a copy.
        let refused = 'refused: {
            if let Some(d) = self.direct.as_mut() {
                // The namespace still takes I/O, and the head is as direct mode began (see
                // `direct.rs`).
                if !d.ns.io_ready() || self.head.paths.generation() != self.generation {
                    let e = SubmitError::new(
                        SubmitErrorKind::PathsChanged {
                            nsid: d.target.nsid,
                        },
                        data.into_buffer(),
                    );
                    break 'refused self
                        .after_direct_refusal(Tag::new(tag, lba, blocks, op, span), e);
                }
                if let Err(kind) = d.target.check_rw(lba, blocks, len) {
                    let e = SubmitError::new(kind, data.into_buffer());
                    break 'refused self.stash(|_| Err(invalid(e)));
                }
                // SAFETY: checked above; owned data, or the caller's contract of `submit_raw`.
                let req = unsafe {
                    Request::checked(
                        op,
                        d.target,
                        lba,
                        blocks,
                        data.into_data(),
                        Tag::new(tag, lba, blocks, op, span),
                    )
                };
                match d.qp.submit(req) {
                    Ok(_) => {
                        d.sent += 1;
                        return Ok(());
                    }
                    Err(e) => {
                        break 'refused self
                            .after_direct_refusal(Tag::new(tag, lba, blocks, op, span), e)
                    }
                }
            }
            if self.head.paths.generation() == self.generation {
                if let Some(i) = self.choose() {
                    let i = i & (MAX_PATHS - 1);
                    let (Some(qp), Some(ns)) =
                        (self.qpairs[i].as_mut(), self.namespaces[i].as_deref())
                    else {
                        let buf = data.into_buffer();
                        break 'refused self.stash(move |ch| {
                            ch.open_and_send(i, Tag::new(tag, lba, blocks, op, span), buf)
                        });
                    };
                    // SAFETY: owned data, or the caller's contract of `submit_raw`.
                    let sent = unsafe {
                        qp.submit_data(
                            op,
                            ns,
                            lba,
                            blocks,
                            data,
                            Tag::new(tag, lba, blocks, op, span),
                        )
                    };
                    match sent {
                        Ok(_) => {
                            self.sent[i] += 1;
                            self.busy |= 1 << i;
                            return Ok(());
                        }
                        Err(e) => {
                            break 'refused self.stash(move |ch| {
                                ch.after_refusal(i, Tag::new(tag, lba, blocks, op, span), e)
                            });
                        }
                    }
                }
            }
            let buf = data.into_buffer();
            self.stash(move |ch| ch.submit_slow(Tag::new(tag, lba, blocks, op, span), buf))
        };
        match refused {
            false => Ok(()),
            true => self.refusal.take().map_or(Ok(()), Err),
        }
    }

    /// Runs an out-of-line submission path; its refusal, if any, is left in `refusal` and
    /// the answer is whether there is one (a flag in a register, for the inlined caller).
    #[inline(always)]
    fn stash(&mut self, f: impl FnOnce(&mut Self) -> Result<(), ChannelSubmitError>) -> bool {
        match f(self) {
            Ok(()) => false,
            Err(e) => {
                self.refusal = Some(e);
                true
            }
        }
    }

    /// The path the fast path chose has no queue pair yet: open it and send there (or
    /// elsewhere if it can't be opened).
    #[cold]
    #[inline(never)]
    fn open_and_send(
        &mut self,
        i: usize,
        tag: Tag,
        buf: Option<DmaBuffer>,
    ) -> Result<(), ChannelSubmitError> {
        self.in_general_mode(|ch| ch.open_and_send_general(i, tag, buf))
    }

    fn open_and_send_general(
        &mut self,
        i: usize,
        tag: Tag,
        buf: Option<DmaBuffer>,
    ) -> Result<(), ChannelSubmitError> {
        if self.qpairs[i].is_none() && !self.open_path(i) {
            self.exclude(i);
            return self.submit_general(tag, buf);
        }
        match self.send(i, tag, buf) {
            Ok(()) => Ok(()),
            Err(e) => self.after_refusal(i, tag, e),
        }
    }

    /// The direct path's queue pair refused the request: retry through the slow path (the
    /// error, if any, comes back as an `Option` so that the caller's `Ok` needs no store).
    #[cold]
    #[inline(never)]
    fn after_direct_refusal(&mut self, tag: Tag, e: SubmitError) -> bool {
        let i = self.direct.as_ref().map_or(0, |d| d.path);
        self.stash(|ch| ch.after_refusal(i, tag, e))
    }

    /// The fast path's queue pair refused the request: retry through the slow path.
    #[cold]
    #[inline(never)]
    fn after_refusal(
        &mut self,
        i: usize,
        tag: Tag,
        e: SubmitError,
    ) -> Result<(), ChannelSubmitError> {
        self.in_general_mode(|ch| ch.after_refusal_general(i, tag, e))
    }

    fn after_refusal_general(
        &mut self,
        i: usize,
        tag: Tag,
        e: SubmitError,
    ) -> Result<(), ChannelSubmitError> {
        match e.kind {
            SubmitErrorKind::QueueFull { .. } => {
                if self.pending.len() >= self.capacity {
                    let capacity = self.capacity;
                    return Err(refuse(ChannelError::ChannelFull { capacity }, e.buffer));
                }
                self.pending.push_back(Pending::waiting(tag, e.buffer));
                Ok(())
            }
            // A controller that could not be disabled takes nothing more: another path.
            SubmitErrorKind::NamespaceNotActive { .. } | SubmitErrorKind::ControllerStuck => {
                self.exclude(i);
                self.submit_general(tag, e.buffer)
            }
            // Direct mode's namespace word moved: the head changed (`submit_general` syncs).
            SubmitErrorKind::PathsChanged { .. } => self.submit_general(tag, e.buffer),
            kind => Err(ChannelSubmitError {
                error: ChannelError::Refused(kind),
                buffer: e.buffer,
            }),
        }
    }

    /// Everything but the fast path: a changed head, a path without a queue pair yet, no
    /// usable path (queue or refuse), a full channel.
    #[cold]
    #[inline(never)]
    fn submit_slow(
        &mut self,
        tag: Tag,
        buffer: Option<DmaBuffer>,
    ) -> Result<(), ChannelSubmitError> {
        self.in_general_mode(|ch| ch.submit_general(tag, buffer))
    }

    fn submit_general(
        &mut self,
        tag: Tag,
        buffer: Option<DmaBuffer>,
    ) -> Result<(), ChannelSubmitError> {
        if self.pending.len() >= self.capacity {
            let capacity = self.capacity;
            return Err(refuse(ChannelError::ChannelFull { capacity }, buffer));
        }
        self.sync();
        let nsid = self.head.nsid();
        match self.dispatch(tag, buffer) {
            Dispatch::Sent => {}
            Dispatch::Busy(buffer) => self.pending.push_back(Pending::waiting(tag, buffer)),
            Dispatch::NoPath(buffer) => {
                if self.head.is_removed() {
                    return Err(refuse(ChannelError::HeadRemoved { nsid }, buffer));
                }
                if !self.may_queue() {
                    return Err(refuse(ChannelError::NoPath { nsid }, buffer));
                }
                self.stats.queued += 1;
                self.pending.push_back(Pending::waiting(tag, buffer));
            }
            Dispatch::Refused(kind, buffer) => {
                return Err(refuse(ChannelError::Refused(kind), buffer))
            }
        }
        Ok(())
    }

    /// Whether requests without a path wait: the head queues, or a path is in ANA transition.
    pub(super) fn may_queue(&self) -> bool {
        !self.head.is_removed() && (self.head.queue_if_no_path() || self.changing)
    }

    /// Sends `tag` on the best path, skipping paths that refuse it for path reasons.
    pub(super) fn dispatch(&mut self, tag: Tag, mut buffer: Option<DmaBuffer>) -> Dispatch {
        loop {
            let Some(i) = self.choose() else {
                return Dispatch::NoPath(buffer);
            };
            if self.qpairs[i].is_none() && !self.open_path(i) {
                self.exclude(i);
                continue;
            }
            match self.send(i, tag, buffer) {
                Ok(()) => return Dispatch::Sent,
                Err(e) => match e.kind {
                    SubmitErrorKind::QueueFull { .. } => return Dispatch::Busy(e.buffer),
                    SubmitErrorKind::NamespaceNotActive { .. }
                    | SubmitErrorKind::ControllerStuck => {
                        self.exclude(i);
                        buffer = e.buffer;
                    }
                    kind => return Dispatch::Refused(kind, e.buffer),
                },
            }
        }
    }

    /// Creates path `i`'s queue pair.
    #[cold]
    fn open_path(&mut self, i: usize) -> bool {
        let Some(ctrl) = self.subsystem.controller(i) else {
            return false;
        };
        // Controllers of one subsystem may hold queues of different sizes: each path's queue
        // pair is as deep as asked, or as its controller allows.
        let mut options = self.options.qpair;
        options.depth = options.depth.min(ctrl.identify().max_queue_depth);
        match ctrl.alloc_qpair_with_payload::<Tag>(options) {
            Ok(qp) => {
                // Room for every request of this queue pair to be failed over (or delivered
                // by an out-of-line path) at once, besides the queued ones.
                self.room += qp.depth() as usize;
                self.reserve_room();
                self.qpairs[i] = Some(qp);
                true
            }
            Err(e) => {
                log::warn!(
                    "namespace {}: no queue pair on path {i} ({e}); trying other paths",
                    self.head.nsid()
                );
                false
            }
        }
    }

    /// Sends `tag` (with `buffer`, or its span) on path `i`: a request made against that
    /// path's namespace, submitted to its queue pair.
    fn send(&mut self, i: usize, tag: Tag, buffer: Option<DmaBuffer>) -> Result<(), SubmitError> {
        let (Some(qp), Some(ns)) = (self.qpairs[i].as_mut(), self.namespaces[i].as_deref()) else {
            return Err(SubmitError::new(
                SubmitErrorKind::NamespaceNotActive {
                    nsid: self.head.nsid(),
                    state: crate::namespace::NamespaceState::Removed,
                },
                buffer,
            ));
        };
        qp.submit(request_of(ns, tag, buffer)?)?;
        self.busy |= 1 << i;
        self.sent[i & (MAX_PATHS - 1)] += 1;
        Ok(())
    }
}

/// The request `tag` stands for (with `buffer`, or its span), made against `ns`.
fn request_of(
    ns: &Namespace,
    tag: Tag,
    buffer: Option<DmaBuffer>,
) -> Result<Request<'static, Tag>, SubmitError> {
    let target = match Target::of(ns) {
        Ok(t) => t,
        Err(kind) => return Err(SubmitError::new(kind, buffer)),
    };
    if tag.op == Op::Flush {
        return Ok(Request::flush_of(target, tag));
    }
    let data = match (buffer, tag.span) {
        (Some(b), _) => Data::Owned(b),
        (None, Some(span)) => Data::Span(span),
        (None, None) => Data::None,
    };
    // SAFETY: a raw request: `submit_raw`'s caller guaranteed that the span is from the pool
    // every path shares and stays allocated until the request is delivered; its previous
    // command on another path has ended.
    unsafe { Request::rw(tag.op, target, tag.lba, tag.blocks, data, tag) }
}

/// A request the channel refuses as given (its range or data), on any path.
#[cold]
fn invalid(e: SubmitError) -> ChannelSubmitError {
    ChannelSubmitError {
        error: ChannelError::Refused(e.kind),
        buffer: e.buffer,
    }
}

#[cold]
fn refuse(error: ChannelError, buffer: Option<DmaBuffer>) -> ChannelSubmitError {
    ChannelSubmitError { error, buffer }
}
