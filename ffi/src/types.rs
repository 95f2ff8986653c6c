//! Plain C structs and callback types of the ABI.

use crate::opts::growing_opts;
use std::ffi::c_void;

/// The completion of one command, passed to its callback.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cpl {
    /// Command-specific result (completion queue entry dword 0).
    pub cdw0: u32,
    /// NVMe status field (CQE dword 3 bits 31:17): bits 7:0 Status Code, 10:8 Status Code Type,
    /// 12:11 Command Retry Delay, 13 More, 14 Do Not Retry. 0 means success.
    ///
    /// Two path-related statuses (sct = 3) come from vfnvme itself, not the device, and hand the
    /// buffer back (the device stopped using it): sc = 0x71 (VFNVME_SC_ABORTED_BY_RESET) when
    /// the controller was reset with the command in flight (after an I/O timeout, a fatal
    /// status or vfnvme_ctrl_reset); the queue pair stays usable and the command may be
    /// submitted again. sc = 0x70 (VFNVME_SC_CONTROLLER_LOST) when the controller is gone
    /// (hot removal) or failed and could not be reset: free the queue pairs and close the
    /// controller. Exception: sc = 0x70 with `rc` = VFNVME_ERR_BUSY means the controller could
    /// not even be disabled, so the device may still read or write the buffer: it is not
    /// back, vfnvme_dma_free refuses it (VFNVME_ERR_BUSY) for the life of the process, and it
    /// must not be reused.
    pub status: u16,
    /// Status Code Type (status bits 10:8), for convenience.
    pub sct: u8,
    /// Status Code (status bits 7:0), for convenience.
    pub sc: u8,
    /// 0, or a negative `vfnvme_status` when the driver itself failed the command (e.g. the
    /// namespace was removed or the controller failed) without a device status.
    /// VFNVME_ERR_BUSY with sct 3 / sc 0x70: the device may still access the command's
    /// buffer, which stays held (see `status`).
    pub rc: i32,
}

impl Cpl {
    /// A completion from an NVMe status field (without the phase bit) and dword 0.
    pub fn from_status(status: u16, cdw0: u32) -> Self {
        Cpl {
            cdw0,
            status,
            sct: ((status >> 8) & 0x7) as u8,
            sc: (status & 0xff) as u8,
            rc: 0,
        }
    }
}

/// One finished request, as `vfnvme_qpair_poll_completions` and `vfnvme_channel_poll` return
/// it: the `arg` given at submission and how it completed.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    /// The pointer given at submission.
    pub arg: *mut c_void,
    /// How the request completed: all zero on success; a device status in
    /// `status`/`sct`/`sc`, or a driver failure in `rc` (with `reason` saying which, on a
    /// channel).
    pub cpl: Cpl,
    /// On a channel: the controller index of the path it completed on (-1: it never reached
    /// one). Always -1 on a queue pair.
    pub path: i32,
    /// On a channel: how many times it was failed over to another path (0 on a queue pair).
    pub failovers: u32,
    /// On a channel: why it failed without a device status (VFNVME_MP_FAIL_NONE on a queue
    /// pair).
    pub reason: MpFail,
}

impl Default for Completion {
    fn default() -> Self {
        Completion {
            arg: std::ptr::null_mut(),
            cpl: Cpl::default(),
            path: -1,
            failovers: 0,
            reason: MpFail::VfnvmeMpFailNone,
        }
    }
}

/// Why a request on a channel failed without a device status (`vfnvme_completion.reason`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpFail {
    /// Not failed, or failed with a device status (see `cpl`); always on a queue pair.
    VfnvmeMpFailNone = 0,
    /// No usable path and the head does not queue (rc VFNVME_ERR_NO_PATH).
    VfnvmeMpFailNoPath = 1,
    /// The request waited for a path and queueing was switched off (rc VFNVME_ERR_NO_PATH).
    VfnvmeMpFailQueueingOff = 2,
    /// The request waited for a path longer than the head's delayed removal time (rc
    /// VFNVME_ERR_NO_PATH).
    VfnvmeMpFailNoPathTimeout = 3,
    /// The head was removed (rc VFNVME_ERR_NOT_FOUND).
    VfnvmeMpFailHeadRemoved = 4,
    /// The request could not be sent on any path as given (rc says why, e.g.
    /// VFNVME_ERR_OUT_OF_RANGE).
    VfnvmeMpFailRefused = 5,
}

/// Status Code Type 3h (path related): the type of the two statuses vfnvme gives commands it
/// ends itself (see `vfnvme_cpl.status`).
pub const VFNVME_SCT_PATH: u8 = 3;
/// Status Code 71h of type 3h (Command Aborted By Host): the controller was reset with the
/// command in flight; the buffer is back and the command may be submitted again.
pub const VFNVME_SC_ABORTED_BY_RESET: u8 = 0x71;
/// Status Code 70h of type 3h (Host Pathing Error): the controller is gone (removed) or failed
/// for good; the buffer is back (unless `rc` is VFNVME_ERR_BUSY: the controller could not be
/// disabled and the buffer stays held), nothing more will complete on this controller.
pub const VFNVME_SC_CONTROLLER_LOST: u8 = 0x70;

/// The completion callback: `arg` is the pointer given at submission; `cpl` is valid only during
/// the call. It runs on the thread calling `vfnvme_qpair_process_completions`. It may submit new
/// commands on the same queue pair, but must not poll or free it, and must not unwind (no C++
/// exception or longjmp may leave it).
pub type Callback = Option<unsafe extern "C" fn(arg: *mut c_void, cpl: *const Cpl)>;

/// Geometry of one namespace.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NsInfo {
    /// Namespace ID (1-based).
    pub nsid: u32,
    /// Logical block size in bytes.
    pub lba_size: u32,
    /// Size in logical blocks.
    pub blocks: u64,
    /// Metadata bytes per block of the namespace's LBA format (0: none).
    pub metadata_size: u16,
    /// End-to-end protection information type in use (0: none, 1..3: type 1..3).
    pub protection_type: u8,
    /// The metadata travels at the end of each block in the data buffer (extended LBA) rather
    /// than in a separate buffer.
    pub metadata_extended: bool,
    /// Whether plain reads and writes (vfnvme_qpair_read, ...) work on this namespace. False
    /// when its format has metadata or protection information: those fail with
    /// VFNVME_ERR_UNSUPPORTED before anything reaches the device; use vfnvme_qpair_read_md and
    /// vfnvme_qpair_write_md, which move the metadata and take the PI options.
    pub io_supported: bool,
    /// The protection information is in the first 8 bytes of the metadata (else the last).
    pub protection_first: bool,
}

/// What happened to a namespace.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsEventKind {
    /// No event (the value of an unfilled `vfnvme_ns_event`).
    VfnvmeNsEventNone = 0,
    /// A namespace appeared (attached, created, or found by a rescan).
    VfnvmeNsEventAdded = 1,
    /// A namespace went away: new I/O to it fails with VFNVME_ERR_NOT_FOUND.
    VfnvmeNsEventRemoved = 2,
    /// A namespace changed in place (its size); re-read its geometry.
    VfnvmeNsEventChanged = 3,
}

/// One namespace change, as `vfnvme_ctrl_next_event` reports it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NsEvent {
    /// What happened.
    pub kind: NsEventKind,
    /// The namespace it happened to.
    pub nsid: u32,
}

/// What happened to a controller (`vfnvme_ctrl_next_ctrl_event`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtrlEventKind {
    /// No event (the value of an unfilled `vfnvme_ctrl_event`).
    VfnvmeCtrlEventNone = 0,
    /// An I/O command (`qid`, `cid`) did not complete within the I/O timeout.
    VfnvmeCtrlEventTimedOut = 1,
    /// An Abort was sent for the timed-out command (`qid`, `cid`).
    VfnvmeCtrlEventAbortSent = 2,
    /// A controller reset began.
    VfnvmeCtrlEventResetStarted = 3,
    /// The reset finished: queue pairs recreate their queues at their next poll, and the
    /// commands they had in flight complete with sct 3 / sc 0x71.
    VfnvmeCtrlEventResetDone = 4,
    /// The controller failed (a reset did not bring it back): commands complete with sct 3 /
    /// sc 0x70 and calls fail with VFNVME_ERR_DEVICE.
    VfnvmeCtrlEventFailed = 5,
    /// The device is gone (hot removal, or its registers read all ones): commands complete with
    /// sct 3 / sc 0x70. Free the queue pairs and close the controller so that the kernel can
    /// finish removing it.
    VfnvmeCtrlEventRemoved = 6,
}

/// One controller state change, as `vfnvme_ctrl_next_ctrl_event` reports it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtrlEvent {
    /// What happened.
    pub kind: CtrlEventKind,
    /// For TIMED_OUT and ABORT_SENT: the command's queue id (0 otherwise).
    pub qid: u16,
    /// For TIMED_OUT and ABORT_SENT: the command identifier (0 otherwise).
    pub cid: u16,
}

/// One range of a deallocate (TRIM) command.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Range {
    /// First logical block.
    pub lba: u64,
    /// Number of logical blocks (at least 1).
    pub blocks: u32,
}

/// Options for `vfnvme_ctrl_open`. Zero-initialise, set `size = sizeof(struct vfnvme_ctrl_opts)`,
/// then set what you need; NULL means defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CtrlOpts {
    /// Set it to `sizeof(struct vfnvme_ctrl_opts)`. The library reads only the fields inside `size`
    /// (defaults for the rest: a program built against an older header keeps working) and refuses 0
    /// (VFNVME_ERR_INVALID_ARGUMENT).
    pub size: u32,
    /// Number of I/O queue pairs to request from the controller (0: the driver default).
    pub io_queues: u32,
    /// Back DMA memory with 4 KiB pages instead of 2 MiB hugepages (slower; for machines without
    /// reserved hugepages).
    pub small_pages: bool,
    /// Use shadow doorbells (Doorbell Buffer Config) if the controller offers them; emulated
    /// controllers do, SSDs don't. Off by default: under QEMU it measured no faster.
    pub shadow_doorbells: bool,
    /// How long an admin command (bring-up, queue creation, namespace scans) may take before
    /// it fails as timed out, in milliseconds (0: the driver default, 30000).
    pub admin_timeout_ms: u32,
    /// How long an I/O command may take, in milliseconds, before vfnvme sends an Abort for it
    /// and, if it still has not completed after as long again, resets the controller (0: the
    /// driver default, 30000). Checked while the queue pair is polled.
    pub io_timeout_ms: u32,
    /// How often an I/O command is sent again, with the same buffer, when it fails with a
    /// status the controller allows to be retried (DNR = 0) or was in flight when the controller
    /// was reset (0, the default: never; the caller sees the status). At most 255. Commands
    /// that timed out are not retried. `vfnvme_ctrl_info` counts the retries.
    pub io_retries: u32,
    /// The explicit no-IOMMU mode (never a fallback), for machines without an IOMMU: the
    /// controller must be bound to uio_pci_generic (`vfnvme setup --no-iommu`), DMA memory is
    /// hugepages only and its addresses are physical (the process needs CAP_SYS_ADMIN). Nothing
    /// then checks the device's DMA: any device bug or misuse can write anywhere in memory. One
    /// warning on stderr per process. Appended after `io_retries`: a caller built against an
    /// older header gets false.
    pub no_iommu: bool,
}

growing_opts!(CtrlOpts, "struct vfnvme_ctrl_opts", first_last_field: io_retries: u32);

/// PRCHK bit of `vfnvme_pi_opts.check`: the controller checks the guard (CRC-16 T10-DIF).
pub const VFNVME_PI_CHECK_GUARD: u8 = 4;
/// PRCHK bit: the controller checks the application tag under `app_mask`.
pub const VFNVME_PI_CHECK_APP: u8 = 2;
/// PRCHK bit: the controller checks the reference tag (types 1 and 2).
pub const VFNVME_PI_CHECK_REF: u8 = 1;

/// Protection information options of one request (vfnvme_qpair_read_md, vfnvme_qpair_write_md).
/// Zero-initialise, set `size = sizeof(struct vfnvme_pi_opts)`, then set what you need; NULL
/// means none (no PRACT, no checks).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PiOpts {
    /// Set it to `sizeof(struct vfnvme_pi_opts)` (as for vfnvme_qpair_opts).
    pub size: u32,
    /// PRACT: the controller inserts the PI on writes and checks and strips it on reads (with
    /// 8 bytes of metadata no metadata moves: pass md NULL).
    pub act: bool,
    /// What the controller checks: VFNVME_PI_CHECK_GUARD | VFNVME_PI_CHECK_APP |
    /// VFNVME_PI_CHECK_REF (the reference tag is refused for PI type 3).
    pub check: u8,
    /// The application tag written (with `act`) or expected.
    pub app_tag: u16,
    /// Which bits of the application tag are compared.
    pub app_mask: u16,
    /// Use `ref_tag`; otherwise the reference tag of the first block is the LBA's low 32 bits
    /// (what PI type 1 requires).
    pub has_ref_tag: bool,
    /// The reference tag of the first block (type 2: counts up per block).
    pub ref_tag: u32,
}

growing_opts!(PiOpts, "struct vfnvme_pi_opts", first_last_field: ref_tag: u32);

/// Most pieces one vfnvme_qpair_readv or vfnvme_qpair_writev takes (more:
/// VFNVME_ERR_TOO_MANY_PIECES).
pub const VFNVME_MAX_IOV: u32 = 256;

/// One piece of an iovec (vfnvme_qpair_readv, vfnvme_qpair_writev): `len` bytes at `base`,
/// inside one buffer from vfnvme_dma_alloc (within the length asked for).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Iov {
    /// First byte of the piece.
    pub base: *mut std::ffi::c_void,
    /// Length of the piece in bytes (at least 1).
    pub len: usize,
}

/// Options for `vfnvme_qpair_alloc_opts`. Zero-initialise, set
/// `size = sizeof(struct vfnvme_qpair_opts)`, then set what you need; NULL means defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct QpairOpts {
    /// Set it to `sizeof(struct vfnvme_qpair_opts)`. The library reads only the fields inside
    /// `size` (defaults for the rest: a program built against an older header keeps working) and
    /// refuses 0 (VFNVME_ERR_INVALID_ARGUMENT).
    pub size: u32,
    /// Entries per ring, 2..=65536 (commands in flight at most: `depth - 1` and 1024, as for
    /// vfnvme_qpair_alloc; 0: 256).
    pub depth: u32,
    /// Doorbell batching for callers that commit after every submission (SPDK's
    /// `delay_cmd_submit`): vfnvme_qpair_commit then writes the submission doorbell only once at
    /// least half of the commands in flight wait for it (always when the controller would
    /// otherwise sit idle), and leaves it to a later commit or the next poll otherwise. Polling
    /// always rings. Off: vfnvme_qpair_commit always rings.
    pub defer_sq_doorbell: bool,
    /// Ignored (the first version's tail padding, which an older caller may leave unset).
    pub reserved0: [u8; 3],
    /// Send every read and write with SGLs (SPDK's `enable_sgl`) when the controller has them
    /// (Identify Controller SGLS); ignored without. Off (the default): PRPs, and SGLs only for
    /// an iovec PRPs can't describe (vfnvme_qpair_readv). Appended after `defer_sq_doorbell`:
    /// a caller built against an older header gets false.
    pub prefer_sgl: bool,
}

growing_opts!(QpairOpts, "struct vfnvme_qpair_opts", first_last_field: defer_sq_doorbell: bool);
// `prefer_sgl` lies past the end of the first version (12 bytes), not in its tail padding.
const _: () = assert!(std::mem::offset_of!(QpairOpts, prefer_sgl) == 12);

/// What a controller reported at bring-up.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CtrlInfo {
    /// Largest data transfer of one command in bytes (larger I/O is split into several commands,
    /// each taking a queue entry).
    pub max_transfer: u32,
    /// Largest queue pair depth (CAP.MQES + 1).
    pub max_queue_depth: u32,
    /// I/O queue pairs the controller granted.
    pub io_queues: u32,
    /// Highest namespace ID (NN).
    pub nn: u32,
    /// Serial number, NUL-terminated.
    pub serial: [u8; 21],
    /// Model number, NUL-terminated.
    pub model: [u8; 41],
    /// Firmware revision, NUL-terminated.
    pub firmware: [u8; 9],
    /// I/O commands sent again so far (see `vfnvme_ctrl_opts.io_retries`).
    pub io_retries: u64,
}

impl Default for CtrlInfo {
    fn default() -> Self {
        CtrlInfo {
            max_transfer: 0,
            max_queue_depth: 0,
            io_queues: 0,
            nn: 0,
            serial: [0; 21],
            model: [0; 41],
            firmware: [0; 9],
            io_retries: 0,
        }
    }
}

/// Copies `s` into a NUL-terminated fixed buffer, truncating.
pub fn copy_cstr(dst: &mut [u8], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    dst.fill(0);
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// `vfnvme_ctrl_opts.io_retries` checked: at most 255.
pub fn io_retries(n: u32) -> crate::error::FfiResult<u8> {
    u8::try_from(n).map_err(|_| {
        crate::error::FfiError::new(
            crate::error::Status::VfnvmeErrInvalidArgument,
            format!("io_retries {n} is too large: at most 255 retries per command (0: none)"),
        )
    })
}
