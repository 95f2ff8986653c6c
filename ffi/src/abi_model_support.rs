//! Test support: model controllers and model subsystems opened with a full
//! [`ModelConfig`](vfnvme_model::ModelConfig) and [`ControllerOptions`], published as the C
//! ABI's handles (`*mut Ctrl`, `*mut Subsys`) so that every extern "C" function works on them,
//! with their [`ModelPlatform`]s at hand (held data, DMA violations, virtual time, faults).

use crate::ctrl::{publish, Ctrl};
use crate::mp::backend::Sub;
use crate::mp::subsys::Subsys;
use std::sync::Arc;
use vfnvme::multipath::{HeadOptions, Subsystem};
use vfnvme::{Controller, ControllerOptions};
use vfnvme_model::{ModelConfig, ModelPlatform, ModelSubsystem, ModelSubsystemConfig};

/// A controller model opened through test code: the C handle and the model behind it.
pub(crate) struct ModelCtrl {
    /// The handle every `vfnvme_*` function takes (close it with `vfnvme_ctrl_close`).
    pub ctrl: *mut Ctrl,
    /// The model (a second reference: see [`release`]).
    pub platform: Arc<ModelPlatform>,
}

/// Opens a model controller with `config` and the driver options `opts` (bring-up included)
/// and publishes it as a C handle.
pub(crate) fn open_ctrl(config: ModelConfig, opts: ControllerOptions) -> Result<ModelCtrl, String> {
    let platform = ModelPlatform::new(config).map_err(|e| format!("model: {e}"))?;
    let ctrl = Controller::new(platform.clone(), opts).map_err(|e| format!("bring-up: {e}"))?;
    let mut out = std::ptr::null_mut();
    publish(Arc::new(ctrl), &mut out);
    Ok(ModelCtrl {
        ctrl: out,
        platform,
    })
}

/// The model behind a controller handle (`None` for a VFIO controller).
pub(crate) fn model_of<'a>(ctrl: *const Ctrl) -> Option<&'a ModelPlatform> {
    // SAFETY: a live handle from `publish` (the caller's contract, as for every C function).
    let c = unsafe { ctrl.as_ref() }?;
    c.ops.platform_any().downcast_ref::<ModelPlatform>()
}

/// A model subsystem opened through test code: the C handle and its controllers' models.
pub(crate) struct ModelSubsys {
    /// The handle every `vfnvme_subsys_*` / `vfnvme_channel_*` function takes.
    pub sub: *mut Subsys,
    /// The models of its controllers, by index (second references: see [`release`]).
    pub platforms: Vec<Arc<ModelPlatform>>,
}

/// Opens the model subsystem `cfg`, brings every controller up with `opts`, forms the driver's
/// subsystem with head options `heads` and publishes it as a C handle.
pub(crate) fn open_subsys(
    cfg: ModelSubsystemConfig,
    opts: ControllerOptions,
    heads: HeadOptions,
) -> Result<ModelSubsys, String> {
    let model = ModelSubsystem::new(cfg).map_err(|e| format!("model subsystem: {e}"))?;
    let platforms = model.controllers().to_vec();
    let ctrls = platforms
        .iter()
        .map(|p| {
            Controller::new(p.clone(), opts.clone())
                .map(Arc::new)
                .map_err(|e| format!("bring-up: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let sub = Subsystem::from_controllers(ctrls, heads).map_err(|e| format!("subsystem: {e}"))?;
    let ops = Sub::new(sub).map_err(|e| format!("{e:?}"))?;
    let mut out = std::ptr::null_mut();
    crate::mp::subsys::publish(Box::new(ops), &mut out);
    Ok(ModelSubsys {
        sub: out,
        platforms,
    })
}

/// Drops the test's references to models whose C handles are closed. A model that saw DMA
/// violations panics when dropped (so that no test misses them); the caller has looked at them
/// already, so that panic is caught here and its message only printed.
pub(crate) fn release(platforms: Vec<Arc<ModelPlatform>>) {
    for p in platforms {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(p)));
    }
}
