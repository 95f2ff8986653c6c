//! One I/O request, the value every entry point makes (the Rust API, the multipath channel,
//! the C ABI) and the queue pair turns into commands. Everything about the request itself is
//! checked once, here, when it is made: the namespace takes I/O, the block count and range,
//! the data's length. The queue trusts a request: it only finds slots and builds descriptors.

use crate::error::{SubmitError, SubmitErrorKind};
use crate::namespace::{Namespace, NamespaceState};
use crate::spec::command::{io_opcode, DsmRange};
use vfnvme_hal::{DmaBuffer, DmaSpan};

pub use super::spans::MAX_SPANS;

/// Most blocks one NVM command carries (NLB is 16 bits, 0's based).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 1 << 16;
/// Most ranges in one Dataset Management command.
pub const MAX_DSM_RANGES: usize = 256;

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Op {
    /// Read blocks into the data.
    #[default]
    Read = 0,
    /// Write blocks from the data.
    Write = 1,
    /// Flush the namespace's volatile write cache (no data).
    Flush = 2,
    /// Write Zeroes (no data).
    WriteZeroes = 3,
    /// Dataset Management, deallocate ([`Data::Ranges`]).
    Deallocate = 4,
}

impl Op {
    /// The NVM command set opcode.
    #[inline(always)]
    pub(crate) const fn opcode(self) -> u8 {
        match self {
            Op::Read => io_opcode::READ,
            Op::Write => io_opcode::WRITE,
            Op::Flush => io_opcode::FLUSH,
            Op::WriteZeroes => io_opcode::WRITE_ZEROES,
            Op::Deallocate => io_opcode::DATASET_MANAGEMENT,
        }
    }
}

/// The data of a request.
#[derive(Debug)]
pub enum Data<'a> {
    /// None (flush, write zeroes).
    None,
    /// A buffer the request owns: it comes back in the completion, or in the error.
    Owned(DmaBuffer),
    /// Borrowed memory: a range of one live allocation, checked when the span was made
    /// ([`vfnvme_hal::DmaPool::span`]). The device never moves data past it.
    Span(DmaSpan),
    /// Borrowed memory in pieces, an iovec: 1..=[`MAX_SPANS`] non-empty spans, each checked
    /// when it was made, moved in order ([`Request::borrowed_vectored`]). The list itself is
    /// read at submission only; the memory it describes is borrowed as for [`Data::Span`].
    Spans(&'a [DmaSpan]),
    /// Deallocate's ranges, copied at submission into a page the queue keeps per slot.
    Ranges(&'a [DsmRange]),
}

/// What a read or write moves data to or from: an owned [`DmaBuffer`] or a borrowed
/// [`DmaSpan`].
pub trait RequestData {
    /// Its length in bytes.
    fn byte_len(&self) -> usize;
    /// The span, if the data is borrowed.
    fn span(&self) -> Option<DmaSpan>;
    /// As a request's data.
    fn into_data(self) -> Data<'static>;
    /// The owned buffer, if any (what a refused submission hands back).
    fn into_buffer(self) -> Option<DmaBuffer>;
}

impl RequestData for DmaBuffer {
    #[inline(always)]
    fn byte_len(&self) -> usize {
        DmaBuffer::len(self)
    }
    #[inline(always)]
    fn span(&self) -> Option<DmaSpan> {
        None
    }
    #[inline(always)]
    fn into_data(self) -> Data<'static> {
        Data::Owned(self)
    }
    #[inline(always)]
    fn into_buffer(self) -> Option<DmaBuffer> {
        Some(self)
    }
}

impl RequestData for DmaSpan {
    #[inline(always)]
    fn byte_len(&self) -> usize {
        DmaSpan::len(self)
    }
    #[inline(always)]
    fn span(&self) -> Option<DmaSpan> {
        Some(*self)
    }
    #[inline(always)]
    fn into_data(self) -> Data<'static> {
        Data::Span(self)
    }
    #[inline(always)]
    fn into_buffer(self) -> Option<DmaBuffer> {
        None
    }
}

pub use super::protection::Protection;

/// Where requests go: a namespace's identifier and geometry, read while it took I/O. A
/// multipath head has one for all its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The namespace identifier.
    pub nsid: u32,
    /// Its size in blocks.
    pub blocks: u64,
    /// log2 of its block size.
    pub lba_shift: u8,
}

impl Target {
    /// The checks of a read or write of `blocks` blocks at `lba` on data of `len` bytes: at
    /// least one block, all inside the namespace, data long enough (what [`Request::rw`]
    /// checks, for callers that then make the request with [`Request::checked`]).
    #[inline(always)]
    pub(crate) fn check_rw(
        &self,
        lba: u64,
        blocks: u32,
        len: usize,
    ) -> Result<(), SubmitErrorKind> {
        self.check_range(lba, u64::from(blocks))?;
        let needed = u64::from(blocks) << self.lba_shift;
        if (len as u64) < needed {
            return Err(SubmitErrorKind::BufferTooSmall { needed, len });
        }
        Ok(())
    }

    /// `ns` as a target, if it takes I/O now (active, a format without metadata); else why not.
    #[inline(always)]
    pub fn of(ns: &Namespace) -> Result<Target, SubmitErrorKind> {
        if !ns.io_ready() {
            return Err(refused(ns));
        }
        Ok(Target {
            nsid: ns.nsid(),
            blocks: ns.blocks(),
            lba_shift: ns.lba_shift(),
        })
    }

    /// Checks `blocks` blocks at `lba`: at least one, all inside the namespace.
    #[inline(always)]
    pub fn check_range(&self, lba: u64, blocks: u64) -> Result<(), SubmitErrorKind> {
        if blocks == 0 {
            return Err(SubmitErrorKind::ZeroBlocks);
        }
        match lba.checked_add(blocks) {
            Some(end) if end <= self.blocks => Ok(()),
            end => Err(SubmitErrorKind::LbaOutOfRange {
                nsid: self.nsid,
                lba,
                end: end.unwrap_or(u64::MAX),
                blocks: self.blocks,
            }),
        }
    }
}

/// Why a namespace takes no I/O: not active, or formatted with metadata. Built inline: an
/// out-of-line error path here cost the submit path instructions even though it never runs.
#[inline(always)]
pub(crate) fn refused(ns: &Namespace) -> SubmitErrorKind {
    let state = ns.state();
    if state != NamespaceState::Active {
        return SubmitErrorKind::NamespaceNotActive {
            nsid: ns.nsid(),
            state,
        };
    }
    SubmitErrorKind::MetadataUnsupported {
        nsid: ns.nsid(),
        metadata: ns.identity().metadata_format(),
    }
}

/// One I/O request: operation, namespace, blocks, data, protection fields and the caller's
/// tag (`T`, kept by the queue and given back in the completion). Made by the constructors
/// below, which check it; a queue pair submits it as it is
/// ([`QueuePair::submit`](crate::QueuePair::submit)).
#[derive(Debug)]
pub struct Request<'a, T> {
    pub(crate) op: Op,
    pub(crate) lba_shift: u8,
    pub(crate) nsid: u32,
    pub(crate) lba: u64,
    pub(crate) blocks: u32,
    pub(crate) data: Data<'a>,
    pub(crate) protection: Protection,
    pub(crate) tag: T,
}

impl<'a, T> Request<'a, T> {
    /// A read of `blocks` blocks at `lba` of `ns` into `buf` (which comes back in the
    /// completion, or in the error).
    #[inline]
    pub fn read(
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: T,
    ) -> Result<Self, SubmitError> {
        Self::owned(Op::Read, ns, lba, blocks, buf, tag)
    }

    /// A write of `blocks` blocks at `lba` of `ns` from `buf`.
    #[inline]
    pub fn write(
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: T,
    ) -> Result<Self, SubmitError> {
        Self::owned(Op::Write, ns, lba, blocks, buf, tag)
    }

    #[inline(always)]
    fn owned(
        op: Op,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: T,
    ) -> Result<Self, SubmitError> {
        match Target::of(ns) {
            // SAFETY: owned data: the request keeps the buffer until it completes.
            Ok(target) => unsafe { Self::rw(op, target, lba, blocks, Data::Owned(buf), tag) },
            Err(kind) => Err(SubmitError::new(kind, Some(buf))),
        }
    }

    /// A read (`op` [`Op::Read`]) or write ([`Op::Write`]) of `blocks` blocks at `lba` of `ns`
    /// on borrowed memory, `span` (the C ABI's requests). A span shorter than the transfer is
    /// refused ([`SubmitErrorKind::BufferTooSmall`]).
    ///
    /// # Safety
    /// `span` must come from the DMA pool of the controller (or subsystem) the request is
    /// submitted to, and its allocation must stay allocated and untouched by the caller until
    /// the request completes (or its queue pair or channel is dropped): the device reads or
    /// writes it at any time in between.
    #[inline(always)]
    pub unsafe fn borrowed(
        op: Op,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        span: DmaSpan,
        tag: T,
    ) -> Result<Self, SubmitError> {
        let target = Target::of(ns).map_err(|k| SubmitError::new(k, None))?;
        // SAFETY: the caller's contract, passed on.
        unsafe { Self::rw(op, target, lba, blocks, Data::Span(span), tag) }
    }

    /// A read or write (`op`) of `blocks` blocks at `lba` of `ns` on borrowed memory in
    /// pieces, `spans` (an iovec, moved in order): 1..=[`MAX_SPANS`] non-empty spans
    /// ([`SubmitErrorKind::BadSpanCount`] otherwise) that together hold the transfer
    /// ([`SubmitErrorKind::BufferTooSmall`] otherwise). The queue pair describes them with PRPs
    /// when PRPs can (each span but the first starting on a 4 KiB page boundary, each but the
    /// last ending on one), else with SGLs if the controller has them; a list neither can
    /// describe is refused at submission ([`SubmitErrorKind::NotPrpDescribable`]). A request
    /// larger than the controller's MDTS is split, each command taking its part of the list.
    ///
    /// # Safety
    /// Every span under the contract of [`borrowed`](Self::borrowed): from the DMA pool of the
    /// controller (or subsystem) the request goes to, its allocation allocated and untouched
    /// by the caller until the request completes (or its queue pair is dropped).
    #[inline]
    pub unsafe fn borrowed_vectored(
        op: Op,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        spans: &'a [DmaSpan],
        tag: T,
    ) -> Result<Self, SubmitError> {
        let target = Target::of(ns).map_err(|k| SubmitError::new(k, None))?;
        // SAFETY: the caller's contract, passed on.
        unsafe { Self::rw(op, target, lba, blocks, Data::Spans(spans), tag) }
    }

    /// A read or write (`op`) of `blocks` blocks at `lba` of `target` on `data`: checks the
    /// range and that the data holds the transfer (and, for [`Data::Spans`], the list: see
    /// [`borrowed_vectored`](Self::borrowed_vectored)). `op` other than a read or write is
    /// refused.
    ///
    /// # Safety
    /// With [`Data::Span`] or [`Data::Spans`], the contract of [`borrowed`](Self::borrowed)
    /// for every span.
    #[inline(always)]
    pub unsafe fn rw(
        op: Op,
        target: Target,
        lba: u64,
        blocks: u32,
        data: Data<'a>,
        tag: T,
    ) -> Result<Self, SubmitError> {
        let len = match &data {
            Data::Owned(b) if matches!(op, Op::Read | Op::Write) => b.len(),
            Data::Span(s) if matches!(op, Op::Read | Op::Write) => s.len(),
            Data::Spans(spans) if matches!(op, Op::Read | Op::Write) => {
                match super::spans::check(spans) {
                    Ok(total) => usize::try_from(total).unwrap_or(usize::MAX),
                    Err(kind) => return Err(SubmitError::new(kind, None)),
                }
            }
            _ => return Err(SubmitError::new(not_rw(op), data.into_buffer())),
        };
        match target.check_rw(lba, blocks, len) {
            // SAFETY: checked; the caller's contract for a span, passed on.
            Ok(()) => Ok(unsafe { Self::checked(op, target, lba, blocks, data, tag) }),
            Err(kind) => Err(SubmitError::new(kind, data.into_buffer())),
        }
    }

    /// A read or write (`op`) that [`Target::check_rw`] accepted, as a value (the hot paths
    /// check, then make it, with no `Result` holding a whole request in between).
    ///
    /// # Safety
    /// `op` is a read or write, `target.check_rw(lba, blocks, len)` returned `Ok` for the
    /// length of `data` (owned or a span), and with [`Data::Span`], the
    /// contract of [`borrowed`](Self::borrowed).
    #[inline(always)]
    pub(crate) unsafe fn checked(
        op: Op,
        target: Target,
        lba: u64,
        blocks: u32,
        data: Data<'a>,
        tag: T,
    ) -> Self {
        Request {
            op,
            lba_shift: target.lba_shift,
            nsid: target.nsid,
            lba,
            blocks,
            data,
            protection: Protection::default(),
            tag,
        }
    }

    /// A flush of `ns`.
    #[inline]
    pub fn flush(ns: &Namespace, tag: T) -> Result<Self, SubmitError> {
        let target = Target::of(ns).map_err(|k| SubmitError::new(k, None))?;
        Ok(Self::flush_of(target, tag))
    }

    /// A flush of `target` (a multipath head's, sent on one of its paths).
    #[inline]
    pub fn flush_of(target: Target, tag: T) -> Self {
        Request {
            op: Op::Flush,
            lba_shift: target.lba_shift,
            nsid: target.nsid,
            lba: 0,
            blocks: 0,
            data: Data::None,
            protection: Protection::default(),
            tag,
        }
    }

    /// Write Zeroes of `blocks` blocks at `lba` of `ns` (split at 65536 blocks per command).
    #[inline]
    pub fn write_zeroes(
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        tag: T,
    ) -> Result<Self, SubmitError> {
        let err = |k| SubmitError::new(k, None);
        let target = Target::of(ns).map_err(err)?;
        target.check_range(lba, u64::from(blocks)).map_err(err)?;
        Ok(Request {
            op: Op::WriteZeroes,
            lba_shift: target.lba_shift,
            nsid: target.nsid,
            lba,
            blocks,
            data: Data::None,
            protection: Protection::default(),
            tag,
        })
    }

    /// A Dataset Management deallocate of `ranges` (1..=256, each inside `ns`).
    #[inline]
    pub fn deallocate(ns: &Namespace, ranges: &'a [DsmRange], tag: T) -> Result<Self, SubmitError> {
        let err = |k| SubmitError::new(k, None);
        if ranges.is_empty() || ranges.len() > MAX_DSM_RANGES {
            return Err(err(SubmitErrorKind::BadRangeCount {
                count: ranges.len(),
            }));
        }
        let target = Target::of(ns).map_err(err)?;
        for r in ranges {
            target
                .check_range(r.slba, u64::from(r.blocks))
                .map_err(err)?;
        }
        Ok(Request {
            op: Op::Deallocate,
            lba_shift: target.lba_shift,
            nsid: target.nsid,
            lba: 0,
            blocks: 0,
            data: Data::Ranges(ranges),
            protection: Protection::default(),
            tag,
        })
    }

    /// The operation.
    pub fn op(&self) -> Op {
        self.op
    }
    /// The namespace identifier.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }
    /// The first block.
    pub fn lba(&self) -> u64 {
        self.lba
    }
    /// The number of blocks (0 for flushes and deallocates).
    pub fn blocks(&self) -> u32 {
        self.blocks
    }
    /// The protection fields.
    pub fn protection(&self) -> Protection {
        self.protection
    }
    /// Bytes the request moves to or from its data (0 without data).
    #[inline(always)]
    pub(crate) fn bytes(&self) -> u64 {
        u64::from(self.blocks) << self.lba_shift
    }
}

impl Data<'_> {
    /// The owned buffer, if any.
    #[inline(always)]
    pub(crate) fn into_buffer(self) -> Option<DmaBuffer> {
        match self {
            Data::Owned(b) => Some(b),
            _ => None,
        }
    }
}

/// A read or write without data, or data given to an operation that takes none (the
/// read-and-write entry points: `Request::rw`, `QueuePair::submit_data`).
#[cold]
#[inline(never)]
pub(crate) fn not_rw(op: Op) -> SubmitErrorKind {
    match op {
        Op::Read | Op::Write => SubmitErrorKind::BufferTooSmall { needed: 1, len: 0 },
        _ => SubmitErrorKind::InvalidRequest {
            what: "only reads and writes take data here; make other requests with `Request`",
        },
    }
}
