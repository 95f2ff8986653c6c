//! What the target needs from the storage behind it: the namespaces it exports
//! ([`Backend::namespaces`]) and one polled I/O queue per target I/O queue
//! ([`BackendQueue`]). Implementations: [`crate::backend_driver::ControllerBackend`] (a vfnvme
//! controller's namespaces through its `QueuePair`s, on VFIO or on the in-memory model) and
//! [`crate::backend_head::HeadBackend`] (multipath heads through `IoChannel`s).

use crate::error::BackendError;
pub use vfnvme::spec::command::DsmRange;

/// One namespace as the target exports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedNamespace {
    /// The namespace identifier the host sees.
    pub nsid: u32,
    /// log2 of the block size.
    pub lba_shift: u8,
    /// Size in blocks.
    pub blocks: u64,
    /// NGUID the host sees (never all zero: the target makes one up if the device has none).
    pub nguid: [u8; 16],
}

impl ExportedNamespace {
    /// The block size in bytes.
    pub fn lba_size(&self) -> u32 {
        1 << self.lba_shift
    }
}

/// The ANA state an exported namespace's group reports (ANA log page, 0Ch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AnaState {
    /// Optimized.
    Optimized = 1,
    /// Non-optimized.
    NonOptimized = 2,
    /// Inaccessible.
    Inaccessible = 3,
    /// Persistent loss.
    PersistentLoss = 4,
    /// Change (a transition under way).
    Change = 0x0F,
}

/// The I/O operations the target forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Read into the buffer.
    Read,
    /// Write from the buffer.
    Write,
    /// Flush the volatile write cache.
    Flush,
    /// Write Zeroes over `blocks` blocks at `lba` (no data).
    WriteZeroes,
    /// Dataset Management with its ranges in the buffer (`blocks`: the number of ranges,
    /// `lba`: CDW11, the attributes); the backend sees it through
    /// [`BackendQueue::deallocate`].
    Deallocate,
}

/// One I/O for a [`BackendQueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoRequest {
    /// The operation.
    pub op: IoOp,
    /// The exported namespace identifier.
    pub nsid: u32,
    /// First block.
    pub lba: u64,
    /// Blocks (0 for a flush).
    pub blocks: u32,
    /// The target's tag, given back in [`IoDone::tag`].
    pub tag: u16,
}

/// A finished I/O.
#[derive(Debug)]
pub struct IoDone<B> {
    /// The tag of the request.
    pub tag: u16,
    /// NVMe status field (0: success).
    pub status: u16,
    /// The buffer given at submission, back (None if the device may still hold it).
    pub buffer: Option<B>,
}

/// A buffer I/O data moves through.
pub trait IoBuffer {
    /// The bytes of the transfer.
    fn bytes(&self) -> &[u8];
    /// The bytes of the transfer, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Sets the transfer length; false if the buffer can't hold `len` bytes.
    fn set_len(&mut self, len: usize) -> bool;
}

/// The storage behind one exported subsystem.
pub trait Backend {
    /// The queue a target I/O queue submits to.
    type Queue: BackendQueue;
    /// The namespaces to export, sorted by nsid.
    fn namespaces(&self) -> &[ExportedNamespace];
    /// Opens a queue for a new target I/O queue of `depth` commands.
    fn open_queue(&self, depth: u32) -> Result<Self::Queue, BackendError>;
    /// The most bytes one I/O may move (the target reports MDTS from it).
    fn max_transfer(&self) -> usize;
    /// The most commands one queue from [`open_queue`](Self::open_queue) holds at once: the
    /// target offers hosts no larger queues (CAP.MQES, MAXCMD), so a full host queue never
    /// finds the backend queue full.
    fn max_queue_size(&self) -> u16 {
        u16::MAX
    }
    /// The optional NVM commands the backend takes, as Identify Controller ONCS bits: 2
    /// (Dataset Management) and 3 (Write Zeroes). None unless the backend says so.
    fn oncs(&self) -> u16 {
        0
    }
    /// Housekeeping from the target's poll loop (admin completions, events); cheap when idle.
    fn poll_admin(&self) {}
    /// The ANA state of exported namespace `nsid` (each namespace is its own ANA group): what
    /// its paths allow. Optimized unless the backend knows better.
    fn ana_state(&self, _nsid: u32) -> AnaState {
        AnaState::Optimized
    }
}

/// One polled I/O queue of a [`Backend`]: submit, commit, poll. Used by one thread.
pub trait BackendQueue {
    /// The buffer type of this backend.
    type Buf: IoBuffer;
    /// A buffer of at least `len` bytes, transfer length `len`.
    fn alloc(&mut self, len: usize) -> Result<Self::Buf, BackendError>;
    /// Queues `req` with `buf` (reads and writes). On refusal returns the NVMe status to
    /// report and the buffer back.
    fn submit(
        &mut self,
        req: IoRequest,
        buf: Option<Self::Buf>,
    ) -> Result<(), (u16, Option<Self::Buf>)>;
    /// Queues a deallocate of `ranges` (Dataset Management, attribute AD) tagged `tag`; it
    /// completes through [`poll`](Self::poll) without a buffer. Refused with a status by
    /// backends without it (the default).
    fn deallocate(&mut self, _nsid: u32, _ranges: &[DsmRange], _tag: u16) -> Result<(), u16> {
        Err(crate::command::SC_INVALID_OPCODE)
    }
    /// Sends everything queued to the device.
    fn commit(&mut self);
    /// Delivers up to `max` finished I/Os to `f`; returns how many.
    fn poll(&mut self, max: usize, f: &mut dyn FnMut(IoDone<Self::Buf>)) -> usize;
    /// Requests submitted and not yet delivered.
    fn outstanding(&self) -> usize;
}
