//! A model subsystem (several controllers sharing namespaces, one ANA group) brought up on
//! the marked platform, with the driver's multipath subsystem over it.

use super::marked::Marked;
use std::sync::Arc;
use vfnvme::multipath::{HeadOptions, Subsystem};
use vfnvme::{Controller, ControllerOptions};
use vfnvme_model::{
    AnaState, Backing, ModelAnaGroup, ModelConfig, ModelNamespaceConfig, ModelSubsystem,
    ModelSubsystemConfig,
};

/// A model subsystem of `controllers` controllers and `namespaces` namespaces in ANA group 1
/// (all `state`), brought up, with the driver's subsystem over it.
pub struct Bench {
    pub model: ModelSubsystem,
    pub ctrls: Vec<Arc<Controller<Marked>>>,
    pub mp: Arc<Subsystem<Marked>>,
}

pub fn bench_subsystem(
    controllers: u16,
    namespaces: u32,
    backing: Backing,
    state: AnaState,
    queue_entries: u32,
) -> Bench {
    let model = ModelSubsystem::new(ModelSubsystemConfig {
        controllers,
        base: ModelConfig {
            namespaces: (1..=namespaces)
                .map(|nsid| ModelNamespaceConfig {
                    nsid,
                    blocks: 1 << 28,
                    lba_size: 4096,
                    backing,
                })
                .collect(),
            max_queue_entries: queue_entries,
            ..ModelConfig::default()
        },
        ana_groups: vec![ModelAnaGroup {
            id: 1,
            nsids: (1..=namespaces).collect(),
            state,
        }],
        ..ModelSubsystemConfig::default()
    })
    .expect("model subsystem");
    let ctrls: Vec<_> = model
        .controllers()
        .iter()
        .map(|p| {
            let marked = Marked::new(p.clone());
            Arc::new(Controller::new(marked, ControllerOptions::default()).expect("bring-up"))
        })
        .collect();
    let mp = Subsystem::from_controllers(ctrls.clone(), HeadOptions::default()).expect("subsystem");
    Bench { model, ctrls, mp }
}
