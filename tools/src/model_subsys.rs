//! The model NVM subsystem of `vfnvme list --model` and `vfnvme perf --model --paths N`:
//! controllers sharing the two null namespaces of `perf --model` (4 KiB LBAs), namespace 1 in
//! ANA group 1 and namespace 2 in ANA group 2, one DMA pool and one virtual clock.

use anyhow::{Context, Result};
use std::sync::Arc;
use vfnvme::{Controller, ControllerOptions};
use vfnvme_model::{AnaState, ModelAnaGroup, ModelPlatform, ModelSubsystem, ModelSubsystemConfig};

/// The subsystem NQN of the model subsystem.
pub const MODEL_NQN: &str = "nqn.2024-01.io.vfnvme:model-subsystem";

/// The most controllers (paths) `--paths` takes.
pub const MAX_MODEL_PATHS: u16 = 8;

/// A model subsystem of `controllers` controllers with every ANA group optimized, then
/// `states` applied: (controller index, ANA group, state).
pub fn build(controllers: u16, states: &[(usize, u32, AnaState)]) -> Result<ModelSubsystem> {
    if !(1..=MAX_MODEL_PATHS).contains(&controllers) {
        anyhow::bail!(
            "--paths {controllers}: the model subsystem has 1 to {MAX_MODEL_PATHS} controllers; give --paths 2 for two paths"
        );
    }
    let cfg = ModelSubsystemConfig {
        nqn: MODEL_NQN.into(),
        controllers,
        base: crate::perf::model_config(),
        ana_groups: (1..=2)
            .map(|id| ModelAnaGroup {
                id,
                nsids: vec![id],
                state: AnaState::Optimized,
            })
            .collect(),
        anatt_secs: 10,
        faulty: Vec::new(),
    };
    let model = ModelSubsystem::new(cfg).context("creating the model subsystem")?;
    for &(index, group, state) in states {
        model
            .set_ana_state(index, group, state)
            .context("setting an ANA state of the model subsystem")?;
    }
    Ok(model)
}

/// Brings up every controller of `model` (each reads its ANA log page at bring-up).
pub fn bring_up(
    model: &ModelSubsystem,
    options: &ControllerOptions,
) -> Result<Vec<Arc<Controller<ModelPlatform>>>> {
    model
        .controllers()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            crate::open::open_platform(p.clone(), &format!("model controller {i}"), options.clone())
                .map(Arc::new)
        })
        .collect()
}
