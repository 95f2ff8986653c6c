//! The model's configuration and its validation.

use super::faults::FaultPlan;
use thiserror::Error;
use vfnvme_hal::pi::{PiFormat, PiLocation, PiType};

/// Where a namespace's data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// Sparse RAM: 4 KiB pages allocated on first write, so a huge namespace costs nothing
    /// until written. Reads of unwritten or deallocated blocks return zeroes.
    Ram,
    /// Writes are discarded; reads complete without touching the host buffer at all (no copy,
    /// no PRP walk), so they measure the driver's overhead only.
    Null,
}

/// One namespace of the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelNamespaceConfig {
    /// The namespace ID (1..=nn).
    pub nsid: u32,
    /// The size in logical blocks.
    pub blocks: u64,
    /// The logical block size: 512 or 4096.
    pub lba_size: u32,
    /// Where the data lives.
    pub backing: Backing,
}

/// Fault injection: a command the device executes late, as a slow or hung device does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// The submission queue the command arrives on (0 = admin).
    pub qid: u16,
    /// Its opcode.
    pub opcode: u8,
    /// Virtual time after submission at which the device executes it (moves its data).
    pub after_ns: u64,
    /// Whether its completion is posted then (`false`: it never completes).
    pub completes: bool,
    /// How many matching commands it holds back (0: every one).
    pub count: u32,
}

/// The metadata of a namespace's LBA format (the model's formats 2 and 3: 512 and 4096 bytes of
/// data plus `ms` bytes of metadata per block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelMetadata {
    /// Metadata bytes per block (LBAF.MS), 1..=128.
    pub ms: u16,
    /// Metadata at the end of each block in the data buffer (FLBAS bit 4, extended LBA);
    /// otherwise in a separate buffer at the command's Metadata Pointer (MPTR).
    pub extended: bool,
    /// Protection information as Identify Namespace reports it in DPS: bits 2:0 the type
    /// (0 = none, 1..=3 = type 1..3), bit 3 set when the PI is in the first 8 bytes of the
    /// metadata (clear: the last 8, QEMU's default). Build it with [`ModelMetadata::with_pi`]
    /// or read it with [`ModelMetadata::pi_type`] and [`ModelMetadata::pi_location`].
    pub pi: u8,
}

/// DPS bit 3: PI in the first 8 bytes of the metadata.
const DPS_FIRST: u8 = 1 << 3;

impl ModelMetadata {
    /// `ms` bytes of metadata per block, extended or separate, without protection information.
    pub const fn new(ms: u16, extended: bool) -> Self {
        ModelMetadata {
            ms,
            extended,
            pi: 0,
        }
    }

    /// The format with protection information of type `ty` at `location` (builder).
    pub const fn with_pi(mut self, ty: PiType, location: PiLocation) -> Self {
        self.pi = ty.code()
            | match location {
                PiLocation::First => DPS_FIRST,
                PiLocation::Last => 0,
            };
        self
    }

    /// The protection information type (`None`: no PI).
    pub const fn pi_type(&self) -> Option<PiType> {
        PiType::from_code(self.pi & 7)
    }

    /// Where the PI sits in each block's metadata (meaningful only with a type).
    pub const fn pi_location(&self) -> PiLocation {
        if self.pi & DPS_FIRST != 0 {
            PiLocation::First
        } else {
            PiLocation::Last
        }
    }

    /// The format of `block_size`-byte blocks with this metadata, for [`vfnvme_hal::pi`].
    pub const fn pi_format(&self, block_size: u32) -> PiFormat {
        PiFormat {
            block_size,
            ms: self.ms,
            extended: self.extended,
            pi: match self.pi_type() {
                Some(t) => Some((t, self.pi_location())),
                None => None,
            },
        }
    }
}

/// Everything the model can be configured with.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// The namespaces attached at start.
    pub namespaces: Vec<ModelNamespaceConfig>,
    /// Highest namespace ID (NN); 0 = the largest configured nsid (at least 1).
    pub nn: u32,
    /// Maximum data transfer size as a power of two of 4 KiB pages; 0 = unlimited.
    pub mdts: u8,
    /// The number of I/O queue pairs the controller grants at most.
    pub max_io_queue_pairs: u16,
    /// The largest queue size in entries (CAP.MQES + 1), 2..=65536.
    pub max_queue_entries: u32,
    /// Virtual time from I/O submission to completion.
    pub io_latency_ns: u64,
    /// Virtual time from admin submission to completion.
    pub admin_latency_ns: u64,
    /// Seed of every random choice (completion order, identifiers).
    pub seed: u64,
    /// Post due completions in a seeded random order instead of submission order.
    pub reorder_completions: bool,
    /// Offer Doorbell Buffer Config (OACS bit 8): shadow doorbells and EventIdx for I/O queues.
    pub shadow_doorbells: bool,
    /// CSTS.RDY never becomes 1 (to test the driver's enable timeout).
    pub never_ready: bool,
    /// Virtual time from CC.EN=1 to CSTS.RDY=1.
    pub ready_delay_ns: u64,
    /// Virtual time from CC.SHN to CSTS.SHST = complete.
    pub shutdown_delay_ns: u64,
    /// Measure the host time the model itself spends (reported as `ModelStats::busy_ns`), so
    /// that benchmarks can report the model's work separately. Costs two clock reads per call.
    pub measure_busy_time: bool,
    /// Asynchronous Event Request Limit, 0-based (AERL).
    pub aerl: u8,
    /// The controller ID (CNTLID).
    pub cntlid: u16,
    /// Behave like an NVMe 1.0 controller for namespace discovery: Identify CNS 02h (Active
    /// Namespace ID list) and CNS 03h (descriptors) are rejected with Invalid Field.
    pub legacy_identify: bool,
    /// (nsid, CSI) pairs: namespaces whose descriptor list reports this Command Set Identifier
    /// instead of NVM (0). Identify CNS 05h with that CSI answers for them (a zeroed page); the
    /// NVM Identify Namespace and I/O work as for any namespace.
    pub namespace_csi: Vec<(u32, u8)>,
    /// (nsid, metadata) pairs: namespaces formatted with an LBA format that has metadata (and
    /// maybe protection information). Reads and writes then move `ms` bytes per block more, in
    /// the data buffer (extended) or at MPTR (separate), as a real controller does.
    pub namespace_metadata: Vec<(u32, ModelMetadata)>,
    /// PCI vendor ID (config space offset 0); with [`ModelConfig::pci_device_id`] it selects the
    /// driver's quirks (`vfnvme::quirks`). Default: QEMU's 1b36.
    pub pci_vendor_id: u16,
    /// PCI device ID (config space offset 2). Default: QEMU's 0010.
    pub pci_device_id: u16,
    /// Reads of CSTS within this much virtual time after a CC.EN change return CFS = 1 (a
    /// controller that must not be polled too early; see `Quirks::DELAY_BEFORE_CHK_RDY`).
    pub early_csts_read_fatal_ns: u64,
    /// CAP.DSTRD: doorbells (and shadow doorbell entries) are `4 << dstrd` bytes apart (0..=8).
    pub doorbell_stride: u8,
    /// CAP.CQR: queues must be physically contiguous (vfnvme's always are).
    pub contiguous_queues_required: bool,
    /// CAP.MPSMIN: the smallest memory page size is `4096 << mpsmin`.
    pub mpsmin: u8,
    /// CAP.MPSMAX: the largest memory page size is `4096 << mpsmax` (≥ mpsmin, ≤ 15).
    pub mpsmax: u8,
    /// CAP.TO in 500 ms units (1..=255): how long the host waits for CSTS.RDY.
    pub timeout_units: u8,
    /// The NVMe version (VS register and Identify VER), e.g. `0x0001_0300` for 1.3. Older
    /// versions lack commands: below 1.1 no Active Namespace ID list (CNS 02h); below 1.2 no
    /// Namespace Attribute Notices; below 1.3 no descriptor list (CNS 03h) and no Doorbell
    /// Buffer Config.
    pub version: u32,
    /// Optional NVM Command Support (ONCS): bit 2 Dataset Management, bit 3 Write Zeroes.
    pub oncs: u16,
    /// Identify Controller SGLS = 0x1 (SGLs for NVM I/O commands, PSDT 01b, no alignment
    /// requirement), as QEMU 7.2 reports; off: SGLS = 0, PRPs only (PSDT 01b is then Invalid
    /// Field). Default on, like QEMU.
    pub sgl: bool,
    /// Identify VWC bit 0: a volatile write cache is present.
    pub volatile_write_cache: bool,
    /// Virtual time from CC.EN=0 until CSTS.RDY reads 0.
    pub disable_delay_ns: u64,
    /// Serial number (at most 20 ASCII characters).
    pub serial: String,
    /// Model number (at most 40 ASCII characters).
    pub model: String,
    /// Firmware revision (at most 8 ASCII characters).
    pub firmware: String,
    /// Fault injection: commands executed late. A disable (CC.EN = 0) drops them, and so does
    /// a successful Delete I/O SQ of their queue.
    pub stalls: Vec<Stall>,
    /// Fault injection: Delete I/O Submission Queue fails (Internal Error); the queue stays.
    pub fail_delete_sq: bool,
    /// Fault injection: CC.EN = 0 is ignored (CSTS.RDY stays 1): the controller can't be
    /// disabled.
    pub ignore_disable: bool,
    /// Fault injection: seeded faults of I/O commands (late, lost, duplicate and unknown
    /// completions, error statuses, fatal status, a vanished device, no ready after reset);
    /// see [`FaultPlan`]. Default: none.
    pub faults: FaultPlan,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            namespaces: vec![ModelNamespaceConfig {
                nsid: 1,
                blocks: 1 << 21,
                lba_size: 512,
                backing: Backing::Ram,
            }],
            nn: 0,
            mdts: 5,
            max_io_queue_pairs: 8,
            max_queue_entries: 1024,
            io_latency_ns: 10_000,
            admin_latency_ns: 20_000,
            seed: 1,
            reorder_completions: false,
            shadow_doorbells: true,
            never_ready: false,
            ready_delay_ns: 1_000_000,
            shutdown_delay_ns: 100_000,
            measure_busy_time: false,
            aerl: 3,
            cntlid: 1,
            legacy_identify: false,
            namespace_csi: Vec::new(),
            namespace_metadata: Vec::new(),
            pci_vendor_id: 0x1b36,
            pci_device_id: 0x0010,
            early_csts_read_fatal_ns: 0,
            doorbell_stride: 0,
            contiguous_queues_required: true,
            mpsmin: 0,
            mpsmax: 4,
            timeout_units: 20,
            version: 0x0002_0000,
            oncs: 1 << 2 | 1 << 3,
            sgl: true,
            volatile_write_cache: false,
            disable_delay_ns: 0,
            serial: "MODEL0001".into(),
            model: "vfnvme model".into(),
            firmware: "1.0".into(),
            stalls: Vec::new(),
            fail_delete_sq: false,
            ignore_disable: false,
            faults: FaultPlan::default(),
        }
    }
}

/// The most namespaces a model can hold.
pub const MAX_NAMESPACES: usize = 4096;

/// A configuration or runtime request the model refuses.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelError {
    /// The LBA size is not supported.
    #[error("namespace {nsid}: LBA size {lba_size} is not supported: use 512 or 4096")]
    BadLbaSize {
        /// The namespace.
        nsid: u32,
        /// The size given.
        lba_size: u32,
    },
    /// A namespace ID is 0, broadcast, or above NN.
    #[error("namespace ID {nsid} is invalid: use 1..={nn} (raise ModelConfig::nn for more)")]
    BadNsid {
        /// The nsid given.
        nsid: u32,
        /// The highest allowed.
        nn: u32,
    },
    /// Two namespaces share an ID.
    #[error("namespace ID {nsid} is configured twice: give each namespace its own ID")]
    DuplicateNsid {
        /// The nsid given twice.
        nsid: u32,
    },
    /// A namespace has no blocks.
    #[error("namespace {nsid} has 0 blocks: give it at least 1")]
    EmptyNamespace {
        /// The namespace.
        nsid: u32,
    },
    /// Too many namespaces.
    #[error(
        "{count} namespaces configured, at most {MAX_NAMESPACES} are supported: configure fewer"
    )]
    TooManyNamespaces {
        /// How many were asked for.
        count: usize,
    },
    /// A queue limit is out of range.
    #[error("{what} = {value} is out of range: {hint}")]
    BadLimit {
        /// Which field.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The allowed range.
        hint: &'static str,
    },
    /// A runtime change names a namespace the model doesn't have.
    #[error("namespace {nsid} does not exist in the model: attach it first")]
    NoSuchNamespace {
        /// The namespace.
        nsid: u32,
    },
    /// An ANA group of a subsystem configuration is unusable.
    #[error("ANA group {group}: {hint}")]
    BadAnaGroup {
        /// The group.
        group: u32,
        /// What to change.
        hint: &'static str,
    },
    /// A subsystem with ANA groups has a namespace in none of them.
    #[error(
        "namespace {nsid} is in no ANA group: list it in one of ModelSubsystemConfig::ana_groups"
    )]
    NoAnaGroup {
        /// The namespace.
        nsid: u32,
    },
    /// A subsystem has no controller with this index.
    #[error("the subsystem has no controller {index}: use an index below the controller count")]
    NoSuchController {
        /// The index given.
        index: usize,
    },
    /// ANA requests to a controller that reports no ANA.
    #[error("ANA group {group} does not exist on this controller (is it in a subsystem with ANA groups?)")]
    NoSuchAnaGroup {
        /// The group.
        group: u32,
    },
    /// Attaching a namespace that is already attached.
    #[error("namespace {nsid} is already attached: detach it first")]
    AlreadyAttached {
        /// The namespace.
        nsid: u32,
    },
}

impl ModelConfig {
    /// The configured metadata format of namespace `nsid`, if any.
    pub(crate) fn metadata_of(&self, nsid: u32) -> Option<ModelMetadata> {
        self.namespace_metadata
            .iter()
            .find(|(n, _)| *n == nsid)
            .map(|&(_, md)| md)
    }

    /// The effective NN.
    pub(crate) fn effective_nn(&self) -> u32 {
        if self.nn != 0 {
            self.nn
        } else {
            self.namespaces
                .iter()
                .map(|n| n.nsid)
                .max()
                .unwrap_or(1)
                .max(1)
        }
    }

    /// Checks everything [`crate::ModelPlatform::new`] relies on.
    pub(crate) fn validate(&self) -> Result<(), ModelError> {
        self.faults.validate()?;
        if self.namespaces.len() > MAX_NAMESPACES {
            return Err(ModelError::TooManyNamespaces {
                count: self.namespaces.len(),
            });
        }
        if self.max_io_queue_pairs == 0 || self.max_io_queue_pairs == u16::MAX {
            return Err(ModelError::BadLimit {
                what: "max_io_queue_pairs",
                value: self.max_io_queue_pairs.into(),
                hint: "use 1..=65534",
            });
        }
        if !(2..=65536).contains(&self.max_queue_entries) {
            return Err(ModelError::BadLimit {
                what: "max_queue_entries",
                value: self.max_queue_entries.into(),
                hint: "use 2..=65536",
            });
        }
        if self.mdts > 20 {
            return Err(ModelError::BadLimit {
                what: "mdts",
                value: self.mdts.into(),
                hint: "use 0 (unlimited) ..= 20",
            });
        }
        if self.doorbell_stride > 8 {
            return Err(ModelError::BadLimit {
                what: "doorbell_stride",
                value: self.doorbell_stride.into(),
                hint: "use 0..=8",
            });
        }
        if self.mpsmin > self.mpsmax || self.mpsmax > 15 {
            return Err(ModelError::BadLimit {
                what: "mpsmin/mpsmax",
                value: self.mpsmin.into(),
                hint: "use mpsmin <= mpsmax <= 15",
            });
        }
        if self.timeout_units == 0 {
            return Err(ModelError::BadLimit {
                what: "timeout_units",
                value: 0,
                hint: "use 1..=255 (units of 500 ms)",
            });
        }
        let nn = self.effective_nn();
        if nn == u32::MAX {
            return Err(ModelError::BadNsid {
                nsid: nn,
                nn: u32::MAX - 1,
            });
        }
        for &(_, md) in &self.namespace_metadata {
            validate_metadata(md)?;
        }
        let mut seen = std::collections::HashSet::new();
        for ns in &self.namespaces {
            validate_namespace(ns, nn)?;
            if !seen.insert(ns.nsid) {
                return Err(ModelError::DuplicateNsid { nsid: ns.nsid });
            }
        }
        Ok(())
    }
}

/// Checks a metadata format.
pub(crate) fn validate_metadata(md: ModelMetadata) -> Result<(), ModelError> {
    if !(1..=128).contains(&md.ms) {
        return Err(ModelError::BadLimit {
            what: "namespace_metadata ms",
            value: md.ms.into(),
            hint: "use 1..=128 metadata bytes per block",
        });
    }
    // A type 1..=3, maybe with bit 3 (first); or 0 (no PI, no position).
    let pi_bad = match md.pi_type() {
        Some(_) => md.pi & !(DPS_FIRST | 7) != 0 || md.ms < 8,
        None => md.pi != 0,
    };
    if pi_bad {
        return Err(ModelError::BadLimit {
            what: "namespace_metadata pi",
            value: md.pi.into(),
            hint: "use 0 or a type 1..=3 (| 8 for PI first), and at least 8 metadata bytes with protection information",
        });
    }
    Ok(())
}

/// Checks one namespace's configuration against NN.
pub(crate) fn validate_namespace(ns: &ModelNamespaceConfig, nn: u32) -> Result<(), ModelError> {
    if ns.nsid == 0 || ns.nsid > nn {
        return Err(ModelError::BadNsid { nsid: ns.nsid, nn });
    }
    if ns.lba_size != 512 && ns.lba_size != 4096 {
        return Err(ModelError::BadLbaSize {
            nsid: ns.nsid,
            lba_size: ns.lba_size,
        });
    }
    if ns.blocks == 0 {
        return Err(ModelError::EmptyNamespace { nsid: ns.nsid });
    }
    if ns.blocks.checked_mul(u64::from(ns.lba_size)).is_none() {
        return Err(ModelError::BadLimit {
            what: "blocks",
            value: ns.blocks,
            hint: "the namespace must be smaller than 2^64 bytes",
        });
    }
    Ok(())
}
