//! Shared set-up of the multipath model tests: a model subsystem, its controllers brought up,
//! and the driver's `Subsystem` over them.
#![allow(dead_code)]

use std::sync::Arc;
use vfnvme::multipath::{ChannelCompletion, ChannelOptions, HeadOptions, IoChannel, Subsystem};
use vfnvme::platform::Platform;
use vfnvme::{Controller, ControllerOptions};
use vfnvme_model::{
    AnaState, Backing, ModelAnaGroup, ModelConfig, ModelNamespaceConfig, ModelPlatform,
    ModelSubsystem, ModelSubsystemConfig,
};

/// A model subsystem, its controllers and the driver's view of it.
pub struct Rig {
    pub model: ModelSubsystem,
    pub ctrls: Vec<Arc<Controller<ModelPlatform>>>,
    pub mp: Arc<Subsystem<ModelPlatform>>,
}

/// `controllers` controllers sharing `namespaces` namespaces (nsid 1..=n, 4096 blocks of 512
/// bytes). `groups`: (group id, nsids); empty = one group 1 with every namespace.
pub fn rig(controllers: u16, namespaces: u32, opts: HeadOptions) -> Rig {
    rig_with(controllers, namespaces, vec![], opts, |_| {})
}

pub fn rig_with(
    controllers: u16,
    namespaces: u32,
    groups: Vec<(u32, Vec<u32>)>,
    opts: HeadOptions,
    tweak: impl FnOnce(&mut ModelSubsystemConfig),
) -> Rig {
    let ctrl_opts = ControllerOptions {
        io_timeout_ms: 0,
        ..ControllerOptions::default()
    };
    rig_full(controllers, namespaces, groups, opts, tweak, ctrl_opts)
}

/// [`rig_with`] with the controllers' options given.
pub fn rig_full(
    controllers: u16,
    namespaces: u32,
    groups: Vec<(u32, Vec<u32>)>,
    opts: HeadOptions,
    tweak: impl FnOnce(&mut ModelSubsystemConfig),
    ctrl_opts: ControllerOptions,
) -> Rig {
    let groups = if groups.is_empty() {
        vec![(1, (1..=namespaces).collect())]
    } else {
        groups
    };
    let mut cfg = ModelSubsystemConfig {
        controllers,
        base: ModelConfig {
            namespaces: (1..=namespaces)
                .map(|nsid| ModelNamespaceConfig {
                    nsid,
                    blocks: 4096,
                    lba_size: 512,
                    backing: Backing::Ram,
                })
                .collect(),
            io_latency_ns: 2_000,
            admin_latency_ns: 2_000,
            ..ModelConfig::default()
        },
        ana_groups: groups
            .into_iter()
            .map(|(id, nsids)| ModelAnaGroup {
                id,
                nsids,
                state: AnaState::Optimized,
            })
            .collect(),
        anatt_secs: 2,
        ..ModelSubsystemConfig::default()
    };
    tweak(&mut cfg);
    let model = ModelSubsystem::new(cfg).expect("model subsystem");
    let ctrls: Vec<_> = model
        .controllers()
        .iter()
        .map(|p| Arc::new(Controller::new(p.clone(), ctrl_opts.clone()).expect("bring-up")))
        .collect();
    let mp = Subsystem::from_controllers(ctrls.clone(), opts).expect("subsystem");
    Rig { model, ctrls, mp }
}

impl Rig {
    /// Sets group `group` to `state` on controller `ctrl` and lets the driver see it.
    pub fn set(&self, ctrl: usize, group: u32, state: AnaState) {
        self.model
            .set_ana_state(ctrl, group, state)
            .expect("ANA group");
        self.mp.poll();
    }

    /// A channel on the head of `nsid`.
    pub fn channel(&self, nsid: u32, capacity: usize) -> IoChannel<ModelPlatform> {
        let head = self.mp.head(nsid).expect("head");
        IoChannel::open(
            self.mp.clone(),
            head,
            ChannelOptions {
                capacity,
                ..ChannelOptions::default()
            },
        )
        .expect("channel")
    }
}

/// Polls `ch` (and the subsystem every `every` polls) until `n` completions arrived or
/// `limit` polls passed; returns them.
pub fn drain(
    rig: &Rig,
    ch: &mut IoChannel<ModelPlatform>,
    n: usize,
    limit: usize,
) -> Vec<ChannelCompletion> {
    let mut out = Vec::new();
    for k in 0..limit {
        if out.len() >= n {
            break;
        }
        let got = ch.poll(usize::MAX, |c| out.push(c));
        if k % 8 == 0 {
            rig.mp.poll();
        }
        if got == 0 {
            // Nothing finished: let virtual time pass (to the next model event).
            rig.ctrls[0].platform().relax();
        }
    }
    out
}

/// A block of `len` bytes that names `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
