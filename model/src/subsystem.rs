//! Several model controllers forming one NVM subsystem: the same SUBNQN, CMIC multi-controller
//! (and ANA reporting when groups are configured), shared namespaces (one backing store, the
//! same NGUID/EUI64/UUID on every controller), one virtual clock, and one IOMMU and DMA pool
//! (so that a buffer submitted on one controller can be resubmitted on another).

use super::ana::AnaState;
use super::config::{Backing, ModelConfig, ModelError};
use super::iommu::ModelIommu;
use super::platform::ModelPlatform;
use super::storage::SparseStore;
use std::collections::BTreeMap;
use std::sync::Arc;
use vfnvme_hal::{DmaPool, PageSize};

/// One ANA group of a subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelAnaGroup {
    /// The ANA group ID (1..=ANAGRPMAX).
    pub id: u32,
    /// The namespaces in it.
    pub nsids: Vec<u32>,
    /// Its state on every controller at start.
    pub state: AnaState,
}

/// How to build a [`ModelSubsystem`].
#[derive(Debug, Clone)]
pub struct ModelSubsystemConfig {
    /// The subsystem NQN every controller reports.
    pub nqn: String,
    /// How many controllers (1..=64); controller `i` gets CNTLID `i + 1` and serial
    /// `<base serial>-<i>`.
    pub controllers: u16,
    /// The configuration of every controller (namespaces included: they are shared).
    pub base: ModelConfig,
    /// ANA groups. Empty: the controllers report no ANA (CMIC bit 3 clear); otherwise every
    /// namespace must be in exactly one group.
    pub ana_groups: Vec<ModelAnaGroup>,
    /// ANA Transition Time in seconds (Identify Controller ANATT).
    pub anatt_secs: u8,
    /// The controllers (by index) that get the base's fault injection (`stalls`,
    /// `ignore_disable`, `faults`); empty: every controller. The others run without it.
    pub faulty: Vec<u16>,
}

impl Default for ModelSubsystemConfig {
    fn default() -> Self {
        ModelSubsystemConfig {
            nqn: "nqn.2024-01.io.vfnvme:model-subsystem".into(),
            controllers: 2,
            base: ModelConfig::default(),
            ana_groups: Vec::new(),
            anatt_secs: 10,
            faulty: Vec::new(),
        }
    }
}

/// What the controllers of a subsystem share.
#[derive(Debug)]
pub(crate) struct SubsystemLink {
    pub nqn: String,
    /// Namespace data by nsid (`None`: Null backing).
    pub stores: BTreeMap<u32, Option<Arc<SparseStore>>>,
    /// ANA group by nsid.
    pub groups: BTreeMap<u32, u32>,
    /// Initial state by group.
    pub initial: BTreeMap<u32, AnaState>,
    pub anatt: u8,
    /// The one virtual clock.
    pub clock: super::core::VirtualClock,
    /// One IOMMU and DMA pool for every controller: a buffer can be resubmitted on any path.
    pub iommu: Arc<ModelIommu>,
    pub pool: DmaPool,
    /// How many controllers the subsystem has (CNTLIDs 1..=controllers).
    pub controllers: u16,
}

impl SubsystemLink {
    /// The ANA group of `nsid` (0: none).
    pub fn group_of(&self, nsid: u32) -> u32 {
        self.groups.get(&nsid).copied().unwrap_or(0)
    }
    /// ANAGRPMAX / NANAGRPID.
    pub fn max_group(&self) -> u32 {
        self.initial.keys().copied().max().unwrap_or(0)
    }
}

/// Controllers of one NVM subsystem sharing namespaces and a virtual clock.
#[derive(Debug)]
pub struct ModelSubsystem {
    controllers: Vec<Arc<ModelPlatform>>,
    nqn: String,
}

/// The most controllers a model subsystem has.
pub const MAX_SUBSYSTEM_CONTROLLERS: u16 = 64;

impl ModelSubsystem {
    /// Builds the controllers, each disabled (CC.EN = 0) at virtual time 0.
    pub fn new(cfg: ModelSubsystemConfig) -> Result<Self, ModelError> {
        if !(1..=MAX_SUBSYSTEM_CONTROLLERS).contains(&cfg.controllers) {
            return Err(ModelError::BadLimit {
                what: "controllers",
                value: cfg.controllers.into(),
                hint: "use 1..=64 controllers per subsystem",
            });
        }
        if cfg.nqn.is_empty() || cfg.nqn.len() > 223 || !cfg.nqn.is_ascii() {
            return Err(ModelError::BadLimit {
                what: "nqn length",
                value: cfg.nqn.len() as u64,
                hint: "use 1..=223 ASCII characters",
            });
        }
        cfg.base.validate()?;
        let mut groups = BTreeMap::new();
        let mut initial = BTreeMap::new();
        for g in &cfg.ana_groups {
            if g.id == 0 || g.id > 1024 || initial.insert(g.id, g.state).is_some() {
                return Err(ModelError::BadAnaGroup {
                    group: g.id,
                    hint: "give each group its own ID in 1..=1024",
                });
            }
            for &nsid in &g.nsids {
                if !cfg.base.namespaces.iter().any(|n| n.nsid == nsid) {
                    return Err(ModelError::NoSuchNamespace { nsid });
                }
                if groups.insert(nsid, g.id).is_some() {
                    return Err(ModelError::BadAnaGroup {
                        group: g.id,
                        hint: "a namespace belongs to one group only",
                    });
                }
            }
        }
        if !initial.is_empty() {
            if let Some(ns) = cfg
                .base
                .namespaces
                .iter()
                .find(|n| !groups.contains_key(&n.nsid))
            {
                return Err(ModelError::NoAnaGroup { nsid: ns.nsid });
            }
        }
        let stores = cfg
            .base
            .namespaces
            .iter()
            .map(|n| {
                let store = match n.backing {
                    Backing::Ram => Some(Arc::new(SparseStore::new())),
                    Backing::Null => None,
                };
                (n.nsid, store)
            })
            .collect();
        let iommu = Arc::new(ModelIommu::new());
        let pool = DmaPool::new(iommu.clone(), PageSize::Small4K);
        iommu.watch(&pool);
        let link = Arc::new(SubsystemLink {
            nqn: cfg.nqn.clone(),
            stores,
            groups,
            initial,
            anatt: cfg.anatt_secs,
            clock: super::core::VirtualClock::default(),
            iommu,
            pool,
            controllers: cfg.controllers,
        });
        let controllers = (0..cfg.controllers)
            .map(|i| {
                let mut c = cfg.base.clone();
                c.cntlid = i + 1;
                c.serial = format!("{}-{i}", cfg.base.serial);
                if !cfg.faulty.is_empty() && !cfg.faulty.contains(&i) {
                    c.stalls.clear();
                    c.ignore_disable = false;
                    c.faults = Default::default();
                }
                ModelPlatform::with_link(c, Some(link.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ModelSubsystem {
            controllers,
            nqn: cfg.nqn,
        })
    }

    /// The subsystem NQN.
    pub fn nqn(&self) -> &str {
        &self.nqn
    }

    /// Every controller, by index (CNTLID - 1).
    pub fn controllers(&self) -> &[Arc<ModelPlatform>] {
        &self.controllers
    }

    /// Controller `index`.
    pub fn controller(&self, index: usize) -> Result<&Arc<ModelPlatform>, ModelError> {
        self.controllers
            .get(index)
            .ok_or(ModelError::NoSuchController { index })
    }

    /// Sets ANA group `group` to `state` on controller `index` now (raises its ANA change
    /// event).
    pub fn set_ana_state(
        &self,
        index: usize,
        group: u32,
        state: AnaState,
    ) -> Result<(), ModelError> {
        self.controller(index)?.set_ana_state(group, state)
    }

    /// Sets ANA group `group` to `state` on every controller now.
    pub fn set_ana_state_all(&self, group: u32, state: AnaState) -> Result<(), ModelError> {
        self.controllers
            .iter()
            .try_for_each(|c| c.set_ana_state(group, state))
    }

    /// The shared virtual time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.controllers.first().map_or(0, |c| c.now_ns())
    }
}
