//! Plain C structs and callback types of the ABI.

use std::ffi::c_void;

/// The completion of one command, passed to its callback.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cpl {
    /// Command-specific result (completion queue entry dword 0).
    pub cdw0: u32,
    /// NVMe status field (CQE dword 3 bits 31:17): bits 7:0 Status Code, 10:8 Status Code Type,
    /// 12:11 Command Retry Delay, 13 More, 14 Do Not Retry. 0 means success.
    pub status: u16,
    /// Status Code Type (status bits 10:8), for convenience.
    pub sct: u8,
    /// Status Code (status bits 7:0), for convenience.
    pub sc: u8,
    /// 0, or a negative `vfnvme_status` when the driver itself failed the command (e.g. the
    /// namespace was removed or the controller failed) without a device status.
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

/// One completion returned by `vfnvme_qpair_poll_completions`: the `arg` given at submission and
/// the completion.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    /// The pointer given at submission.
    pub arg: *mut c_void,
    /// How the command completed.
    pub cpl: Cpl,
}

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
    /// Whether vfnvme does I/O on this namespace. False when its format has metadata or
    /// protection information (not supported yet): every submission then fails with
    /// VFNVME_ERR_UNSUPPORTED before anything reaches the device; reformat the namespace to an
    /// LBA format without metadata to use it.
    pub io_supported: bool,
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

/// One range of a deallocate (TRIM) command.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Range {
    /// First logical block.
    pub lba: u64,
    /// Number of logical blocks (at least 1).
    pub blocks: u32,
}

/// Options for `vfnvme_ctrl_open`. Zero-initialise, then set what you need; NULL means defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CtrlOpts {
    /// Number of I/O queue pairs to request from the controller (0: the driver default).
    pub io_queues: u32,
    /// Back DMA memory with 4 KiB pages instead of 2 MiB hugepages (slower; for machines without
    /// reserved hugepages).
    pub small_pages: bool,
    /// Use shadow doorbells (Doorbell Buffer Config) if the controller offers them; emulated
    /// controllers do, SSDs don't. Off by default: under QEMU it measured no faster.
    pub shadow_doorbells: bool,
}

/// Options of the in-memory controller model (testing and benchmarks). NULL means defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelOpts {
    /// Number of namespaces (0: 1).
    pub namespaces: u32,
    /// Logical block size of every namespace in bytes: 512 or 4096 (0: 4096).
    pub lba_size: u32,
    /// Blocks per namespace (0: 65536, i.e. 256 MiB at 4 KiB).
    pub blocks: u64,
    /// Virtual time a command takes in nanoseconds (0: the model's default).
    pub latency_ns: u32,
    /// Seed of the model's pseudo-random choices (0: a fixed default).
    pub seed: u64,
    /// Discard writes and leave read buffers untouched (measures the driver alone); default:
    /// data is kept in sparse memory.
    pub null_data: bool,
    /// Use the model's shadow doorbells (Doorbell Buffer Config); default off, so every doorbell
    /// is an MMIO write the model counts (`vfnvme_ctrl_model_stats`).
    pub shadow_doorbells: bool,
}

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
        }
    }
}

/// Copies `s` into a NUL-terminated fixed buffer, truncating.
pub fn copy_cstr(dst: &mut [u8], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    dst.fill(0);
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Counters of an in-memory controller model (`vfnvme_ctrl_model_stats`): what the driver made the
/// model do, to check doorbell batching and the like in tests and benchmarks.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelStats {
    /// I/O commands completed (every opcode).
    pub io_commands: u64,
    /// MMIO writes to submission queue tail doorbells (the admin queue's included).
    pub sq_doorbell_writes: u64,
    /// MMIO writes to completion queue head doorbells (the admin queue's included).
    pub cq_doorbell_writes: u64,
    /// The model's virtual time in nanoseconds.
    pub virtual_ns: u64,
}
