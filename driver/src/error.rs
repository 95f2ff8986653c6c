//! The crate's errors. Every message says what to do about it.

use crate::namespace::NamespaceState;
use crate::spec::admin_command::AdminCommandError;
use crate::spec::identify::ParseError;
use crate::spec::Status;
use thiserror::Error;
use vfnvme_hal::{DmaBuffer, HalError};

/// An error of the driver's control path (bring-up, admin commands, queue creation, sync I/O).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A controller reset is running: try again once it is done.
    #[error("a controller reset is running; retry when it is done")]
    Resetting,
    /// The controller failed (fatal status, or a reset that did not bring it back); it stays
    /// disabled.
    #[error("the controller failed and could not be reset; close it, check the device (dmesg, `vfnvme setup --reset BDF`) and open it again")]
    ControllerFailed,
    /// The device is gone: removed, unplugged, or its registers read all ones.
    #[error("the controller is gone (removed, or its registers read all ones); close it")]
    ControllerRemoved,
    /// DMA memory could not be allocated or mapped.
    #[error(transparent)]
    Dma(#[from] HalError),
    /// CSTS reads as all ones: the device is gone or not reachable.
    #[error("the controller's registers read as all ones (CSTS {csts:#x}): the device was removed or is not powered; check `lspci` and the device binding")]
    DeviceGone {
        /// The CSTS value read.
        csts: u32,
    },
    /// The controller did not clear CSTS.RDY after CC.EN=0.
    #[error("the controller did not disable within {waited_ms} ms (CAP.TO), CSTS {csts:#x}: reset the device (`vfnvme setup` does a function-level reset) and retry")]
    DisableTimeout {
        /// Time waited.
        waited_ms: u64,
        /// The last CSTS value.
        csts: u32,
    },
    /// The controller did not set CSTS.RDY after CC.EN=1.
    #[error("the controller did not become ready within {waited_ms} ms (CAP.TO), CSTS {csts:#x}: reset the device and retry; if it persists the controller is faulty")]
    NotReady {
        /// Time waited.
        waited_ms: u64,
        /// The last CSTS value.
        csts: u32,
    },
    /// CSTS.CFS is set.
    #[error("the controller reports a fatal status (CSTS.CFS set, CSTS {csts:#x}): reset the device; check the device's logs if it persists")]
    ControllerFatal {
        /// The CSTS value.
        csts: u32,
    },
    /// The controller does not support the NVM command set or 4 KiB pages.
    #[error("the controller does not support {what}: vfnvme needs the NVM command set and 4 KiB memory pages")]
    Unsupported {
        /// What is missing.
        what: &'static str,
    },
    /// An admin command did not complete in time.
    #[error("admin command {opcode:#04x} did not complete within {waited_ms} ms: the controller is hung; reset it")]
    AdminTimeout {
        /// The opcode.
        opcode: u8,
        /// Time waited.
        waited_ms: u64,
    },
    /// An admin command completed with an error status.
    #[error("admin command {opcode:#04x} failed: {status}")]
    AdminFailed {
        /// The opcode.
        opcode: u8,
        /// The completion status.
        status: Status,
    },
    /// An admin command the safe API can't send as given.
    #[error(transparent)]
    AdminCommand(#[from] AdminCommandError),
    /// Identify data could not be parsed.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// The ANA log page could not be parsed.
    #[error(transparent)]
    AnaLog(#[from] crate::spec::ana::AnaLogError),
    /// A queue depth above what the controller supports.
    #[error("queue depth {requested} is larger than the controller's maximum {max} (CAP.MQES+1): ask for at most {max}")]
    QueueDepthTooLarge {
        /// The depth asked for.
        requested: u32,
        /// CAP.MQES + 1.
        max: u32,
    },
    /// A queue depth below 2.
    #[error("queue depth {requested} is too small: a queue needs at least 2 entries")]
    QueueDepthTooSmall {
        /// The depth asked for.
        requested: u32,
    },
    /// Every I/O queue the controller granted is in use.
    #[error("all {granted} I/O queue pairs the controller granted are in use: drop a QueuePair first, or ask for more with ControllerOptions::io_queues")]
    NoFreeQueue {
        /// Queue pairs granted.
        granted: u16,
    },
    /// The controller was shut down (the `Controller` was dropped).
    #[error(
        "the controller was shut down: keep the Controller alive while its queue pairs are used"
    )]
    ShutDown,
    /// An I/O passthrough command the safe API can't send as given.
    #[error("I/O command {opcode:#04x} can't go through the safe passthrough: {what}")]
    IoPassthru {
        /// The opcode.
        opcode: u8,
        /// Why, and what to do instead.
        what: String,
    },
    /// A controller reset was asked for while I/O queue pairs exist.
    #[error("{pairs} I/O queue pairs are still open: a controller reset deletes their queues; drop every QueuePair first")]
    ResetWithQueues {
        /// Queue pairs still open.
        pairs: usize,
    },
    /// No active namespace with this nsid.
    #[error("namespace {nsid} is not active on this controller: list namespaces with Controller::namespaces()")]
    NoSuchNamespace {
        /// The nsid.
        nsid: u32,
    },
    /// A synchronous I/O did not complete in time.
    #[error("I/O did not complete within {waited_ms} ms: the controller is hung or overloaded; the command stays outstanding on the queue pair")]
    IoTimeout {
        /// Time waited.
        waited_ms: u64,
    },
    /// A synchronous I/O completed with an error status.
    #[error("I/O failed: {status}")]
    IoFailed {
        /// The completion status.
        status: Status,
    },
    /// A synchronous helper was called while asynchronous I/O is outstanding.
    #[error("the queue pair has {outstanding} outstanding commands: poll them to completion before using a *_sync helper")]
    QueueBusy {
        /// Commands in flight.
        outstanding: usize,
    },
    /// An I/O could not be submitted.
    #[error(transparent)]
    Submit(#[from] SubmitErrorKind),
}

/// Why an I/O was not submitted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SubmitErrorKind {
    /// Zero blocks.
    #[error("an I/O of 0 blocks: transfer at least one block")]
    ZeroBlocks,
    /// The LBA range runs past the end of the namespace.
    #[error("LBAs {lba}..{end} are past the end of namespace {nsid} ({blocks} blocks): stay below LBA {blocks}")]
    LbaOutOfRange {
        /// The namespace.
        nsid: u32,
        /// First LBA.
        lba: u64,
        /// One past the last LBA (saturating).
        end: u64,
        /// The namespace size.
        blocks: u64,
    },
    /// The buffer is smaller than the transfer.
    #[error("the buffer holds {len} bytes but the transfer needs {needed}: allocate a larger DmaBuffer or transfer fewer blocks")]
    BufferTooSmall {
        /// Bytes needed.
        needed: u64,
        /// Buffer length.
        len: usize,
    },
    /// Not enough free slots in the queue.
    #[error("the queue pair has {free} free slots but this I/O needs {needed}: poll for completions, then resubmit")]
    QueueFull {
        /// Free command slots.
        free: usize,
        /// Commands this I/O needs.
        needed: usize,
    },
    /// The controller could not be disabled after a failure: the device may still use this
    /// queue pair's memory, so nothing more is sent on it.
    #[error("the controller could not be disabled after a failure and may still use this queue pair's memory, so nothing more is sent on it: free the queue pair and close the controller (its memory stays reserved until the process exits)")]
    ControllerStuck,
    /// The I/O needs more commands than the queue can ever hold.
    #[error("this I/O needs {needed} commands but the queue holds at most {capacity}: split it into smaller I/Os or use a deeper queue")]
    TooLarge {
        /// Commands this I/O needs.
        needed: usize,
        /// Commands the queue can hold.
        capacity: usize,
    },
    /// The namespace is being removed or is gone.
    #[error("namespace {nsid} is {state:?}, not active: stop I/O to it")]
    NamespaceNotActive {
        /// The namespace.
        nsid: u32,
        /// Its state.
        state: NamespaceState,
    },
    /// The multipath head of the namespace changed its paths or options after a channel chose
    /// this path for every request: only between a channel and its queue pair, which sends
    /// the request again on the route the head now gives; never returned by the channel.
    #[error("the paths of namespace {nsid}'s multipath head changed: send the request again through the head")]
    PathsChanged {
        /// The namespace.
        nsid: u32,
    },
    /// The namespace's LBA format has metadata or protection information, which a plain read
    /// or write does not move: the command would move the wrong number of bytes, or metadata to
    /// address 0.
    #[error("namespace {nsid} is formatted with {metadata}: a plain read or write moves no metadata, so it is refused (nothing was sent to the device); send it with its metadata and protection options (`Request::with_metadata`; C: vfnvme_qpair_read_md/vfnvme_qpair_write_md), or reformat the namespace to an LBA format without metadata (`vfnvme format BDF --nsid {nsid} --yes`, BDF being the controller's PCI address; this erases its data)")]
    MetadataUnsupported {
        /// The namespace.
        nsid: u32,
        /// The format's metadata.
        metadata: crate::namespace::MetadataFormat,
    },
    /// The controller does not support this optional command (or must not be sent it).
    #[error("the controller does not support {}: {}", .command.name(), .command.reason(*.quirk))]
    CommandUnsupported {
        /// The command.
        command: OptionalCommand,
        /// Refused for a known defect of the controller model (`crate::quirks`), not for ONCS.
        quirk: bool,
    },
    /// Too many (or zero) Dataset Management ranges.
    #[error("{count} deallocate ranges given: pass between 1 and 256")]
    BadRangeCount {
        /// Ranges given.
        count: usize,
    },
    /// A PRP could not be built.
    #[error(transparent)]
    Prp(#[from] PrpError),
    /// A request made from parts that do not go together (e.g. data for a flush).
    #[error("invalid request: {what}")]
    InvalidRequest {
        /// What is wrong with it.
        what: &'static str,
    },
    /// A vectored request ([`Request::borrowed_vectored`](crate::queue::Request::borrowed_vectored))
    /// with no spans, more than the driver takes, or an empty one.
    #[error("{count} spans given (or one of them empty): pass 1 to {max} non-empty spans; join adjacent pieces, or split the I/O into several requests")]
    BadSpanCount {
        /// Spans given.
        count: usize,
        /// Spans one request takes at most.
        max: usize,
    },
    /// A list of spans that PRPs can't describe, on a controller without SGL support
    /// (Identify Controller SGLS bits 1:0 are 0).
    #[error("span {index} at {iova:#x} {why}: this controller has no SGL support (Identify Controller SGLS), so PRPs must describe the list, and PRPs need the first span to start 4-byte aligned, every other span to start on a 4 KiB page boundary and every span but the last to end on one; align the pieces that way, or copy them into one buffer")]
    NotPrpDescribable {
        /// The span that breaks the rule (0-based).
        index: usize,
        /// Its device address.
        iova: u64,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A span that the controller's SGL support can't take: it reports SGLS bits 1:0 = 10b,
    /// Data Blocks with dword alignment and granularity.
    #[error("span {index} at {iova:#x} (a piece of {len} bytes) is not 4-byte aligned in address and length, which this controller's SGLs require (Identify Controller SGLS bits 1:0 = 10b): align the pieces to 4 bytes")]
    SglMisaligned {
        /// The span (0-based).
        index: usize,
        /// Device address of the piece.
        iova: u64,
        /// Length of the piece.
        len: usize,
    },
    /// The separate metadata of a request on a namespace formatted with it is missing, too
    /// short or misaligned.
    #[error("metadata buffer of {len} bytes for {needed} bytes of metadata: {why}")]
    MetadataBuffer {
        /// Bytes of metadata the request moves.
        needed: u64,
        /// Bytes given.
        len: usize,
        /// What is wrong.
        why: &'static str,
    },
}

/// An optional NVM command a controller may lack (Identify Controller ONCS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionalCommand {
    /// Write Zeroes (ONCS bit 3).
    WriteZeroes,
    /// Dataset Management, used for deallocate (ONCS bit 2).
    DatasetManagement,
}

impl OptionalCommand {
    /// The command's name.
    pub fn name(self) -> &'static str {
        match self {
            OptionalCommand::WriteZeroes => "Write Zeroes",
            OptionalCommand::DatasetManagement => "Dataset Management (deallocate)",
        }
    }
    /// Why it is refused and what to do instead.
    pub fn reason(self, quirk: bool) -> &'static str {
        match (self, quirk) {
            (OptionalCommand::WriteZeroes, true) => "a known defect of this controller model (quirk disable-write-zeroes); write a zero-filled buffer instead",
            (OptionalCommand::WriteZeroes, false) => "Identify Controller ONCS bit 3 is clear; write a zero-filled buffer instead",
            (OptionalCommand::DatasetManagement, _) => "Identify Controller ONCS bit 2 is clear; the blocks cannot be deallocated, overwrite them if needed",
        }
    }
}

/// A submission error that hands the I/O's buffer back.
#[derive(Debug, Error)]
#[error("{kind}")]
pub struct SubmitError {
    /// What went wrong.
    pub kind: SubmitErrorKind,
    /// The buffer given to the submit call, if any.
    pub buffer: Option<DmaBuffer>,
}

impl SubmitError {
    /// An error with the buffer handed back.
    pub fn new(kind: SubmitErrorKind, buffer: Option<DmaBuffer>) -> Self {
        SubmitError { kind, buffer }
    }
}

impl From<SubmitError> for Error {
    fn from(e: SubmitError) -> Self {
        Error::Submit(e.kind)
    }
}

/// Why PRPs could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PrpError {
    /// The start address is not dword aligned.
    #[error(
        "data address {iova:#x} is not 4-byte aligned: DMA buffers must start on a dword boundary"
    )]
    Misaligned {
        /// The address.
        iova: u64,
    },
    /// A zero-length transfer.
    #[error("a transfer of 0 bytes has no data pointer: transfer at least one block")]
    Empty,
    /// Longer than one PRP list can describe.
    #[error(
        "a transfer of {len} bytes exceeds the per-command limit of {max} bytes: split the I/O"
    )]
    TooLarge {
        /// The length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The list page is too small.
    #[error("the PRP list page holds {have} entries but {need} are needed: use a 4 KiB list page")]
    ListTooSmall {
        /// Entries the page holds.
        have: usize,
        /// Entries needed.
        need: usize,
    },
}
