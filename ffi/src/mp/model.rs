//! Model subsystems through the C ABI (cargo feature `model`): N in-memory controllers
//! sharing namespaces, one ANA group per namespace, and the faults tests play on them.

use super::backend::Sub;
use super::subsys::{head_options, mp_error, publish, sub, Subsys};
use super::types::{MpPathState, SubsysOpts};
use crate::ctrl::out_ptr;
use crate::driver_ops::ffi_error;
use crate::error::{guard, FfiError, FfiResult, Status};
use crate::opts::growing_opts;
use std::sync::Arc;
use vfnvme::multipath::{HeadOptions, Subsystem};
use vfnvme::{Controller, ControllerOptions};
use vfnvme_model::{
    AnaState, Backing, ModelAnaGroup, ModelConfig, ModelNamespaceConfig, ModelPlatform,
    ModelSubsystem, ModelSubsystemConfig,
};

/// Options of a model subsystem (`vfnvme_subsys_open_model`). Zero-initialise, set
/// `size = sizeof(struct vfnvme_model_subsys_opts)`, then set what you need; NULL means defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModelSubsysOpts {
    /// Set it to `sizeof(struct vfnvme_model_subsys_opts)`. The library reads only the fields
    /// inside `size` (defaults for the rest: a program built against an older header keeps working)
    /// and refuses 0 (VFNVME_ERR_INVALID_ARGUMENT).
    pub size: u32,
    /// Controllers (0: 2; at most 32).
    pub controllers: u32,
    /// Namespaces shared by every controller, nsid 1..=n, namespace n in ANA group n
    /// (0: 1; at most 1024).
    pub namespaces: u32,
    /// Logical block size: 512 or 4096 (0: 512).
    pub lba_size: u32,
    /// Blocks per namespace (0: 65536).
    pub blocks: u64,
    /// Virtual time a command takes in nanoseconds (0: 2000).
    pub latency_ns: u32,
    /// ANA Transition Time in seconds (0: 10).
    pub anatt_secs: u8,
}

growing_opts!(ModelSubsysOpts, "struct vfnvme_model_subsys_opts", first_last_field: anatt_secs: u8);

/// Opens a model NVM subsystem (in-memory controllers on one virtual clock and one DMA pool,
/// with ANA, every group optimized at start) and its heads; `opts` and `sopts` may be NULL.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_open_model(
    opts: *const ModelSubsysOpts,
    sopts: *const SubsysOpts,
    out: *mut *mut Subsys,
) -> i32 {
    guard("vfnvme_subsys_open_model", || {
        let out = out_ptr(out, "out")?;
        // SAFETY: NULL or a valid ModelSubsysOpts of `size` bytes (header contract).
        let opts = unsafe { crate::opts::read(opts, "opts") }?;
        let heads = head_options(sopts, "sopts")?;
        let model = model_subsystem(&opts, "nqn.2024-01.io.vfnvme:model-subsystem")?;
        let sub = open_controllers(&model, heads)?;
        Ok(publish(Box::new(Sub::new(sub)?), out))
    })
}

/// The model subsystem `opts` describes, with SUBNQN `nqn`.
pub(crate) fn model_subsystem(opts: &ModelSubsysOpts, nqn: &str) -> FfiResult<ModelSubsystem> {
    let or = |v: u32, d: u32| if v == 0 { d } else { v };
    let controllers = or(opts.controllers, 2);
    let namespaces = or(opts.namespaces, 1);
    if controllers > 32 || namespaces > 1024 {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("model subsystem of {controllers} controllers and {namespaces} namespaces: use at most 32 and 1024"),
        ));
    }
    let blocks = if opts.blocks == 0 { 65536 } else { opts.blocks };
    let cfg = ModelSubsystemConfig {
        nqn: nqn.into(),
        controllers: controllers as u16,
        base: ModelConfig {
            namespaces: (1..=namespaces)
                .map(|nsid| ModelNamespaceConfig {
                    nsid,
                    blocks,
                    lba_size: or(opts.lba_size, 512),
                    backing: Backing::Ram,
                })
                .collect(),
            io_latency_ns: u64::from(or(opts.latency_ns, 2000)),
            admin_latency_ns: 2_000,
            max_io_queue_pairs: 64,
            ..ModelConfig::default()
        },
        ana_groups: (1..=namespaces)
            .map(|n| ModelAnaGroup {
                id: n,
                nsids: vec![n],
                state: AnaState::Optimized,
            })
            .collect(),
        anatt_secs: if opts.anatt_secs == 0 {
            10
        } else {
            opts.anatt_secs
        },
        faulty: Vec::new(),
    };
    ModelSubsystem::new(cfg).map_err(|e| {
        FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("model subsystem: {e}"),
        )
    })
}

/// Brings up `model`'s controllers and forms the driver's subsystem of them.
pub(crate) fn open_controllers(
    model: &ModelSubsystem,
    heads: HeadOptions,
) -> FfiResult<Arc<Subsystem<ModelPlatform>>> {
    let ctrls = bring_up(model.controllers())?;
    Subsystem::from_controllers(ctrls, heads).map_err(|e| mp_error(&e))
}

/// Brings up each platform as a controller.
pub(crate) fn bring_up(
    platforms: &[Arc<ModelPlatform>],
) -> FfiResult<Vec<Arc<Controller<ModelPlatform>>>> {
    platforms
        .iter()
        .map(|p| {
            let c = Controller::new(
                p.clone(),
                ControllerOptions {
                    io_timeout_ms: 0,
                    ..ControllerOptions::default()
                },
            )
            .map_err(|e| ffi_error("model: bring-up", &e))?;
            Ok(Arc::new(c))
        })
        .collect()
}

fn model_ctrl(s: &Subsys, controller: u32) -> FfiResult<Arc<ModelPlatform>> {
    s.ops
        .platform_any(controller as usize)
        .and_then(|p| p.downcast::<ModelPlatform>().ok())
        .ok_or_else(|| {
            FfiError::new(
                Status::VfnvmeErrUnsupported,
                format!("controller {controller} is not a controller model of this subsystem (open one with vfnvme_subsys_open_model)"),
            )
        })
}

/// Sets the ANA state of namespace `nsid`'s group (group `nsid` in a model subsystem) on
/// controller `controller` of a model subsystem, as the device would; the driver hears of it
/// through the ANA change event at the next vfnvme_subsys_poll (commands already sent there
/// complete with the path status and fail over). `state`: a `vfnvme_path_state` from
/// VFNVME_PATH_OPTIMIZED to VFNVME_PATH_CHANGE. VFNVME_ERR_UNSUPPORTED for a real subsystem.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_model_set_ana(
    subsys: *const Subsys,
    controller: u32,
    nsid: u32,
    state: u32,
) -> i32 {
    guard("vfnvme_subsys_model_set_ana", || {
        let s = sub(subsys)?;
        let p = model_ctrl(s, controller)?;
        let ana = match state {
            x if x == MpPathState::VfnvmePathOptimized as u32 => AnaState::Optimized,
            x if x == MpPathState::VfnvmePathNonOptimized as u32 => AnaState::NonOptimized,
            x if x == MpPathState::VfnvmePathInaccessible as u32 => AnaState::Inaccessible,
            x if x == MpPathState::VfnvmePathPersistentLoss as u32 => AnaState::PersistentLoss,
            x if x == MpPathState::VfnvmePathChange as u32 => AnaState::Change,
            x => {
                return Err(FfiError::new(
                    Status::VfnvmeErrInvalidArgument,
                    format!(
                        "ANA state {x}: use VFNVME_PATH_OPTIMIZED (1) .. VFNVME_PATH_CHANGE (5)"
                    ),
                ))
            }
        };
        p.set_ana_state(nsid, ana).map_err(|e| {
            FfiError::new(
                Status::VfnvmeErrNotFound,
                format!("controller {controller}: {e}"),
            )
        })?;
        Ok(0)
    })
}

/// Plays hot removal of controller `controller` of a model subsystem: its commands in flight
/// end with "controller lost" and fail over; the next vfnvme_subsys_poll takes its paths away
/// (VFNVME_MP_EVENT_CONTROLLER_LOST). VFNVME_ERR_UNSUPPORTED for a real subsystem.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_model_remove(subsys: *const Subsys, controller: u32) -> i32 {
    guard("vfnvme_subsys_model_remove", || {
        let s = sub(subsys)?;
        model_ctrl(s, controller)?.request_removal();
        Ok(0)
    })
}

/// Lets the model subsystem's virtual time run to its next event (a test or benchmark loop
/// that polls without finding anything calls it, so that commands finish). Returns 0 or a
/// negative status; VFNVME_ERR_UNSUPPORTED for a real subsystem.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_model_relax(subsys: *const Subsys) -> i32 {
    use vfnvme::platform::Platform;
    guard("vfnvme_subsys_model_relax", || {
        let s = sub(subsys)?;
        model_ctrl(s, 0)?;
        for (i, _, _) in s.ops.controllers() {
            if let Ok(p) = model_ctrl(s, i as u32) {
                p.relax();
            }
        }
        Ok(0)
    })
}
