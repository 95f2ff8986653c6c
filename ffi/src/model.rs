//! The in-memory controller model through the C ABI, for tests and benchmarks without hardware
//! (cargo feature `model`; a library built without it exports none of this).

use crate::backend::CtrlOps;
use crate::ctrl::{deref, out_ptr, publish, Ctrl};
use crate::driver_ops::ffi_error;
use crate::error::{guard, FfiError, FfiResult, Status};
use crate::opts::growing_opts;
use std::sync::Arc;
use vfnvme::{Controller, ControllerOptions};
use vfnvme_model::{
    Backing, ModelConfig, ModelMetadata, ModelNamespaceConfig, ModelPlatform, Stall,
};

/// Options of the in-memory controller model (testing and benchmarks). Zero-initialise, set
/// `size = sizeof(struct vfnvme_model_opts)`, then set what you need; NULL means defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModelOpts {
    /// Set it to `sizeof(struct vfnvme_model_opts)`. The library reads only the fields inside
    /// `size` (defaults for the rest: a program built against an older header keeps working) and
    /// refuses 0 (VFNVME_ERR_INVALID_ARGUMENT).
    pub size: u32,
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
    /// Fault injection for tests of timeouts: the model fetches reads (opcode 02h) on I/O
    /// queues but never executes or completes them, as a hung device would.
    pub hang_reads: bool,
    /// The I/O timeout in milliseconds of virtual time (0: the driver default, 30000), as
    /// `vfnvme_ctrl_opts.io_timeout_ms`.
    pub io_timeout_ms: u32,
    /// I/O command retries (at most 255), as `vfnvme_ctrl_opts.io_retries`.
    pub io_retries: u32,
    /// Must be 0 (keeps the fields below past the first version's struct).
    pub reserved0: u32,
    /// Metadata bytes per block of every namespace's format (0: none; with PI at least 8).
    pub metadata_size: u16,
    /// The metadata follows each block in the data buffer (extended LBA); else it has a buffer
    /// of its own.
    pub metadata_extended: bool,
    /// Protection information type of every namespace (0: none, 1..3).
    pub protection_type: u8,
    /// The PI is in the first 8 bytes of the metadata (else the last).
    pub protection_first: bool,
    /// Ignored (the previous version's tail padding, which an older caller may leave unset).
    pub reserved1: [u8; 3],
    /// The model reports no SGL support (Identify Controller SGLS 0), so iovecs must be
    /// describable by PRPs; default: SGLs supported, as QEMU's NVMe device.
    pub no_sgl: bool,
}

growing_opts!(ModelOpts, "struct vfnvme_model_opts", first_last_field: io_retries: u32);
// `no_sgl` lies past the end of the previous version (64 bytes), not in its tail padding.
const _: () = assert!(std::mem::offset_of!(ModelOpts, no_sgl) == 64);

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

/// Opens an in-memory NVMe controller model (for tests and benchmarks without hardware; data is
/// kept in memory, time is virtual). `opts` may be NULL. On success stores it in `*out`.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_open_model(
    opts: *const ModelOpts,
    out: *mut *mut Ctrl,
) -> i32 {
    guard("vfnvme_ctrl_open_model", || {
        let out = out_ptr(out, "out")?;
        // SAFETY: NULL or a valid ModelOpts of `size` bytes (header contract).
        let opts = unsafe { crate::opts::read(opts, "opts") }?;
        let ops = open_model(&opts)?;
        Ok(publish(ops, out))
    })
}

/// Opens an in-memory controller model and brings it up.
fn open_model(opts: &ModelOpts) -> FfiResult<Arc<dyn CtrlOps>> {
    let count = if opts.namespaces == 0 {
        1
    } else {
        opts.namespaces
    };
    if count > 1024 {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("model with {count} namespaces: use at most 1024"),
        ));
    }
    let lba_size = if opts.lba_size == 0 {
        4096
    } else {
        opts.lba_size
    };
    let blocks = if opts.blocks == 0 { 65536 } else { opts.blocks };
    let backing = if opts.null_data {
        Backing::Null
    } else {
        Backing::Ram
    };
    let mut config = ModelConfig {
        namespaces: (1..=count)
            .map(|nsid| ModelNamespaceConfig {
                nsid,
                blocks,
                lba_size,
                backing,
            })
            .collect(),
        max_io_queue_pairs: 64,
        max_queue_entries: 4096,
        ..ModelConfig::default()
    };
    if opts.latency_ns > 0 {
        config.io_latency_ns = u64::from(opts.latency_ns);
    }
    config.sgl = !opts.no_sgl;
    if opts.reserved0 != 0 {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            "opts->reserved0 must be 0",
        ));
    }
    if opts.metadata_size != 0 || opts.protection_type != 0 {
        let md = ModelMetadata {
            ms: opts.metadata_size,
            extended: opts.metadata_extended,
            // Identify Namespace DPS: the type, bit 3 for PI first (checked by the model).
            pi: opts.protection_type | if opts.protection_first { 8 } else { 0 },
        };
        config.namespace_metadata = (1..=count).map(|nsid| (nsid, md)).collect();
    }
    if opts.seed != 0 {
        config.seed = opts.seed;
    }
    if opts.hang_reads {
        config.stalls = (1..=config.max_io_queue_pairs)
            .map(|qid| Stall {
                qid,
                opcode: 0x02,
                after_ns: u64::MAX,
                completes: false,
                count: 0,
            })
            .collect();
    }
    let platform = ModelPlatform::new(config)
        .map_err(|e| FfiError::new(Status::VfnvmeErrInvalidArgument, format!("model: {e}")))?;
    let mut copts = ControllerOptions {
        shadow_doorbells: opts.shadow_doorbells,
        ..ControllerOptions::default()
    };
    if opts.io_timeout_ms > 0 {
        copts.io_timeout_ms = u64::from(opts.io_timeout_ms);
    }
    copts.io_retries = crate::types::io_retries(opts.io_retries)?;
    let ctrl = Controller::new(platform, copts).map_err(|e| ffi_error("model: bring-up", &e))?;
    Ok(Arc::new(ctrl))
}

/// Plays the kernel asking for the device back (hot removal) on a controller opened with
/// `vfnvme_ctrl_open_model`: the next admin poll (vfnvme_ctrl_process_admin) or queue pair
/// poll notices it; commands in flight then complete with sct 3 / sc 0x70
/// (VFNVME_SC_CONTROLLER_LOST) and a VFNVME_CTRL_EVENT_REMOVED event is queued. Fails with
/// VFNVME_ERR_UNSUPPORTED for a real (VFIO) controller.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_model_request_removal(ctrl: *const Ctrl) -> i32 {
    guard("vfnvme_ctrl_model_request_removal", || {
        let ctrl = deref(ctrl, "ctrl")?;
        let Some(p) = ctrl.ops.platform_any().downcast_ref::<ModelPlatform>() else {
            return Err(FfiError::new(
                Status::VfnvmeErrUnsupported,
                format!(
                    "{} is not a controller model: remove a real device through sysfs",
                    ctrl.ops.name()
                ),
            ));
        };
        p.request_removal();
        Ok(0)
    })
}

/// Reads the counters of a controller opened with `vfnvme_ctrl_open_model`. Fails with
/// VFNVME_ERR_UNSUPPORTED for a real (VFIO) controller, which keeps no such counters.
///
/// Thread safety: thread-safe (the counters are read while other threads may run I/O; each is
/// exact, but they are not one atomic snapshot).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_model_stats(ctrl: *const Ctrl, out: *mut ModelStats) -> i32 {
    guard("vfnvme_ctrl_model_stats", || {
        let ctrl = deref(ctrl, "ctrl")?;
        let out = out_ptr(out, "out")?;
        let Some(s) = ctrl
            .ops
            .platform_any()
            .downcast_ref::<ModelPlatform>()
            .map(ModelPlatform::stats)
        else {
            return Err(FfiError::new(
                Status::VfnvmeErrUnsupported,
                format!(
                    "{} is not a controller model: only controllers opened with vfnvme_ctrl_open_model keep counters",
                    ctrl.ops.name()
                ),
            ));
        };
        *out = ModelStats {
            io_commands: s.io_completed.values().sum(),
            sq_doorbell_writes: s.sq_doorbell_writes,
            cq_doorbell_writes: s.cq_doorbell_writes,
            virtual_ns: s.now_ns,
        };
        Ok(0)
    })
}
