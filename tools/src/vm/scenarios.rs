//! The guest scenarios: which emulated NVMe controllers a guest gets and where they are bound.
//!
//! Scenarios are plain data. `devices.rs` turns one into QEMU arguments, `expect.rs` into the
//! `VFNVME_EXPECT_*` facts that guest tests check identify data against.

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// The driver a controller is bound to in the guest before the command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// Bound to vfio-pci (for vfnvme), one device at a time through `driver_override`.
    Vfio,
    /// Left to the kernel's nvme driver (a baseline, or a data cross-check).
    Kernel,
}

/// What stores a namespace's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A sparse raw image file, fresh for every run: keeps data, starts as zeroes.
    Raw,
    /// QEMU's `null-co` with `read-zeroes=on`: fast, keeps nothing, reads return zeroes.
    Null,
    /// QEMU's `null-co` with `read-zeroes=on` and `latency-ns`: every I/O takes `latency_ms`
    /// (to force I/O timeouts); keeps nothing, reads return zeroes.
    SlowNull {
        /// How long each I/O takes, in milliseconds.
        latency_ms: u32,
    },
    /// A sparse raw image behind QEMU's `blkdebug` driver, whose `[inject-error]` rules (a file
    /// the harness writes next to the image) fail with EIO every read covering the 512-byte
    /// sector `read_error_sector` and every write covering `write_error_sector`: QEMU's NVMe
    /// device completes those with media errors (SCT 2h, SC 81h Unrecovered Read Error for
    /// reads, SC 80h Write Fault for writes). Everything else keeps data like [`Backing::Raw`].
    FaultyRaw {
        /// The 512-byte sector whose reads fail.
        read_error_sector: u64,
        /// The 512-byte sector whose writes fail.
        write_error_sector: u64,
    },
}

/// One namespace.
#[derive(Clone, Copy, Debug)]
pub struct Namespace {
    /// Namespace ID.
    pub nsid: u32,
    /// Backing store.
    pub backing: Backing,
    /// Size in bytes (a multiple of `lba_size`).
    pub bytes: u64,
    /// Logical block size in bytes (512 or 4096).
    pub lba_size: u32,
    /// Metadata bytes per block (QEMU `ms`; 0 = none).
    pub ms: u16,
    /// Metadata at the end of each block (QEMU `mset=1`, extended LBA) rather than separate.
    pub mset: bool,
    /// Protection information type (QEMU `pi`; 0 = none, 1..=3; needs `ms` >= 8).
    pub pi: u8,
    /// Protection information in the first 8 bytes of the metadata (QEMU `pil=1`) rather than
    /// the last.
    pub pil: bool,
}

impl Namespace {
    const fn new(nsid: u32, backing: Backing, bytes: u64, lba_size: u32) -> Self {
        Self {
            nsid,
            backing,
            bytes,
            lba_size,
            ms: 0,
            mset: false,
            pi: 0,
            pil: false,
        }
    }

    /// The namespace formatted with `ms` bytes of metadata per block, extended (`mset`) or
    /// separate, with protection information type `pi` (0 = none).
    const fn with_metadata(mut self, ms: u16, mset: bool, pi: u8) -> Self {
        self.ms = ms;
        self.mset = mset;
        self.pi = pi;
        self
    }

    /// The namespace with its protection information in the first bytes of the metadata
    /// (QEMU `pil=1`).
    const fn pi_first(mut self) -> Self {
        self.pil = true;
        self
    }

    /// Number of logical blocks. QEMU keeps a namespace's metadata in its image after the data,
    /// so with metadata a block takes `lba_size + ms` bytes of the image.
    pub fn blocks(&self) -> u64 {
        self.bytes / (u64::from(self.lba_size) + u64::from(self.ms))
    }
}

/// A set of namespaces, listed or generated.
#[derive(Clone, Copy, Debug)]
pub enum Namespaces {
    /// Exactly these.
    List(&'static [Namespace]),
    /// `count` identical namespaces with nsids 1..=count.
    Uniform {
        /// How many (at most 256 per QEMU controller).
        count: u32,
        /// Backing of each.
        backing: Backing,
        /// Size of each in bytes.
        bytes: u64,
        /// LBA size of each.
        lba_size: u32,
    },
}

impl Namespaces {
    /// The namespaces, in nsid order.
    pub fn expand(&self) -> Vec<Namespace> {
        match *self {
            Namespaces::List(list) => list.to_vec(),
            Namespaces::Uniform {
                count,
                backing,
                bytes,
                lba_size,
            } => (1..=count)
                .map(|nsid| Namespace::new(nsid, backing, bytes, lba_size))
                .collect(),
        }
    }
}

/// One NVMe controller (QEMU `nvme` device).
#[derive(Clone, Copy, Debug)]
pub struct Controller {
    /// PCI slot on bus 0 (`addr=`); the guest sees it at `0000:00:<slot>.0`.
    pub slot: u8,
    /// Serial number reported by Identify Controller.
    pub serial: &'static str,
    /// Driver in the guest.
    pub binding: Binding,
    /// Private namespaces of this controller (the subsystem's shared ones come on top).
    pub namespaces: Namespaces,
    /// QEMU `mdts` (a power of two of 4 KiB pages; 0 = no limit); `None` = QEMU's default (7).
    pub mdts: Option<u8>,
    /// QEMU `max_ioqpairs`; `None` = QEMU's default (64).
    pub max_ioqpairs: Option<u16>,
    /// 0: the controller sits on the root bus (pcie.0) at `slot`. N > 0: it sits alone behind a
    /// `pcie-root-port` at `slot` (so that QMP `device_del` can hot-remove it), and the guest
    /// finds it at `0000:<N>:00.0`; the firmware numbers root ports' buses from 1 in slot order.
    pub bus: u8,
}

impl Controller {
    /// PCI address in the guest, e.g. `0000:00:10.0` (or `0000:01:00.0` behind a root port).
    pub fn bdf(&self) -> String {
        if self.bus == 0 {
            format!("0000:00:{:02x}.0", self.slot)
        } else {
            format!("0000:{:02x}:00.0", self.bus)
        }
    }
}

/// An NVMe subsystem whose namespaces every controller in the scenario shares.
#[derive(Clone, Copy, Debug)]
pub struct Subsystem {
    /// The NQN suffix given to QEMU (`nqn=`).
    pub nqn: &'static str,
    /// Namespaces attached to all controllers (`shared=on`).
    pub namespaces: Namespaces,
}

/// A named set of controllers for one guest.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    /// Name used with `--scenario` and in guest test file names (`guest_<name>_*.rs`).
    pub name: &'static str,
    /// One line for `--list-scenarios`.
    pub description: &'static str,
    /// Subsystem joining all controllers, if any.
    pub subsystem: Option<Subsystem>,
    /// The controllers, each with a fixed slot.
    pub controllers: &'static [Controller],
}

impl Scenario {
    /// Namespaces the controller `c` shows: its own plus the subsystem's shared ones.
    pub fn namespaces_of(&self, c: &Controller) -> Vec<Namespace> {
        let mut all = c.namespaces.expand();
        if let Some(s) = &self.subsystem {
            all.extend(s.namespaces.expand());
        }
        all.sort_by_key(|n| n.nsid);
        all
    }

    /// Controllers bound to `binding`.
    pub fn controllers_on(&self, binding: Binding) -> impl Iterator<Item = &Controller> {
        self.controllers
            .iter()
            .filter(move |c| c.binding == binding)
    }
}

/// The model string QEMU's NVMe controller reports.
pub const QEMU_MODEL: &str = "QEMU NVMe Ctrl";

/// QEMU's default MDTS (as a power of two of the 4 KiB minimum page size).
pub const QEMU_DEFAULT_MDTS: u32 = 7;

/// The scenario used when `--scenario` is not given.
pub const DEFAULT_SCENARIO: &str = "data";

const fn one(serial: &'static str, binding: Binding, ns: &'static [Namespace]) -> Controller {
    Controller {
        slot: 0x10,
        serial,
        binding,
        namespaces: Namespaces::List(ns),
        mdts: None,
        max_ioqpairs: None,
        bus: 0,
    }
}

const NONE: Namespaces = Namespaces::List(&[]);

/// Scenario `pi`: metadata sizes 8, 16 and 64, extended and separate, PI types 1, 2 and 3 each
/// in the first and the last bytes of the metadata, and metadata without PI.
const PI_NAMESPACES: &[Namespace] = &[
    Namespace::new(1, Backing::Raw, 8 * MIB, 512).with_metadata(8, true, 1),
    Namespace::new(2, Backing::Raw, 8 * MIB, 512)
        .with_metadata(8, false, 1)
        .pi_first(),
    Namespace::new(3, Backing::Raw, 8 * MIB, 4096)
        .with_metadata(16, true, 2)
        .pi_first(),
    Namespace::new(4, Backing::Raw, 8 * MIB, 4096).with_metadata(16, false, 2),
    Namespace::new(5, Backing::Raw, 8 * MIB, 512).with_metadata(64, true, 3),
    Namespace::new(6, Backing::Raw, 8 * MIB, 4096)
        .with_metadata(64, false, 3)
        .pi_first(),
    Namespace::new(7, Backing::Raw, 8 * MIB, 512).with_metadata(16, false, 0),
];

/// Every scenario.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "data",
        description: "one controller on vfio-pci, 1 namespace: 64 MiB raw image, 512 B LBAs",
        subsystem: None,
        controllers: &[one(
            "VFNVME-DATA",
            Binding::Vfio,
            &[Namespace::new(1, Backing::Raw, 64 * MIB, 512)],
        )],
    },
    Scenario {
        name: "data4k",
        description: "one controller on vfio-pci, 1 namespace: 64 MiB raw image, 4096 B LBAs",
        subsystem: None,
        controllers: &[one(
            "VFNVME-DATA4K",
            Binding::Vfio,
            &[Namespace::new(1, Backing::Raw, 64 * MIB, 4096)],
        )],
    },
    Scenario {
        name: "multins",
        description: "one controller on vfio-pci, 4 raw namespaces of different sizes and LBA sizes, in an nvme-subsys (so Namespace Attachment works)",
        // QEMU implements Namespace Attachment only for namespaces that belong to a subsystem.
        subsystem: Some(Subsystem {
            nqn: "vfnvme-multins",
            namespaces: NONE,
        }),
        controllers: &[one(
            "VFNVME-MULTINS",
            Binding::Vfio,
            &[
                Namespace::new(1, Backing::Raw, 16 * MIB, 512),
                Namespace::new(2, Backing::Raw, 32 * MIB, 4096),
                Namespace::new(3, Backing::Raw, 8 * MIB, 512),
                Namespace::new(4, Backing::Raw, 4 * MIB, 4096),
            ],
        )],
    },
    Scenario {
        name: "null",
        description: "one null-co controller (1 GiB, 4 KiB LBAs, reads zeroes) on vfio-pci: for speed",
        subsystem: None,
        controllers: &[one(
            "VFNVME-NULL",
            Binding::Vfio,
            &[Namespace::new(1, Backing::Null, GIB, 4096)],
        )],
    },
    Scenario {
        name: "slowns",
        description: "one controller on vfio-pci: ns 1 = 16 MiB raw image, 512 B LBAs (fast); ns 2 = 64 MiB null-co, 4096 B LBAs, every I/O takes 3 s (latency-ns: forces I/O timeouts)",
        subsystem: None,
        controllers: &[one(
            "VFNVME-SLOWNS",
            Binding::Vfio,
            &[
                Namespace::new(1, Backing::Raw, 16 * MIB, 512),
                Namespace::new(2, Backing::SlowNull { latency_ms: 3000 }, 64 * MIB, 4096),
            ],
        )],
    },
    Scenario {
        name: "sidebyside",
        description: "two identical null-co 4 KiB controllers: 00:10.0 on vfio-pci, 00:11.0 on the kernel nvme driver",
        subsystem: None,
        controllers: &[
            Controller {
                slot: 0x10,
                serial: "VFNVME-SBS-VFIO",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Null, GIB, 4096)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
            Controller {
                slot: 0x11,
                serial: "VFNVME-SBS-KERNEL",
                binding: Binding::Kernel,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Null, GIB, 4096)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
        ],
    },
    Scenario {
        name: "peers",
        description: "five identical null-co 4 KiB controllers on vfio-pci, 00:10.0-00:14.0, one per tool of scripts/peers/side-by-side.sh",
        subsystem: None,
        controllers: &[
            Controller {
                slot: 0x10,
                serial: "VFNVME-PEER-0",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Null, GIB, 4096)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
            Controller {
                slot: 0x11,
                serial: "VFNVME-PEER-1",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Null, GIB, 4096)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
            Controller {
                slot: 0x12,
                serial: "VFNVME-PEER-2",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Null, GIB, 4096)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
            Controller {
                slot: 0x13,
                serial: "VFNVME-PEER-3",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Null, GIB, 4096)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
            Controller {
                slot: 0x14,
                serial: "VFNVME-PEER-4",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Null, GIB, 4096)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
        ],
    },
    Scenario {
        name: "pair",
        description: "two raw-image controllers (64 MiB, 512 B LBAs), both on vfio-pci",
        subsystem: None,
        controllers: &[
            Controller {
                slot: 0x10,
                serial: "VFNVME-PAIR-A",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Raw, 64 * MIB, 512)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
            Controller {
                slot: 0x11,
                serial: "VFNVME-PAIR-B",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Raw, 64 * MIB, 512)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
        ],
    },
    Scenario {
        name: "hotplug",
        description: "two raw-image controllers (64 MiB, 512 B LBAs) on vfio-pci: 0000:01:00.0 alone behind a pcie-root-port at 00:10.0 (QEMU id c0: QMP device_del hot-removes it) and 00:11.0 on the root bus",
        subsystem: None,
        controllers: &[
            Controller {
                slot: 0x10,
                serial: "VFNVME-HOTPLUG",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Raw, 64 * MIB, 512)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 1,
            },
            Controller {
                slot: 0x11,
                serial: "VFNVME-STAYS",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Raw, 64 * MIB, 512)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
        ],
    },
    Scenario {
        name: "media",
        description: "one controller on vfio-pci: ns 1 = 16 MiB raw image behind blkdebug, 512 B LBAs, where reads covering sector 2048 and writes covering sector 4096 fail (media errors); ns 2 = 16 MiB raw, 4096 B, no faults",
        subsystem: None,
        controllers: &[one(
            "VFNVME-MEDIA",
            Binding::Vfio,
            &[
                Namespace::new(
                    1,
                    Backing::FaultyRaw {
                        read_error_sector: 2048,
                        write_error_sector: 4096,
                    },
                    16 * MIB,
                    512,
                ),
                Namespace::new(2, Backing::Raw, 16 * MIB, 4096),
            ],
        )],
    },
    Scenario {
        name: "crosscheck",
        description: "one raw-image controller (64 MiB, 512 B) on vfio-pci that the test rebinds to nvme",
        subsystem: None,
        controllers: &[one(
            "VFNVME-XCHECK",
            Binding::Vfio,
            &[Namespace::new(1, Backing::Raw, 64 * MIB, 512)],
        )],
    },
    Scenario {
        name: "multipath",
        description: "nvme-subsys with two controllers (00:10.0, 00:11.0, both vfio-pci) sharing 2 raw namespaces",
        subsystem: Some(Subsystem {
            nqn: "vfnvme-mp",
            namespaces: Namespaces::List(&[
                Namespace::new(1, Backing::Raw, 16 * MIB, 512),
                Namespace::new(2, Backing::Raw, 8 * MIB, 4096),
            ]),
        }),
        controllers: &[
            Controller {
                slot: 0x10,
                serial: "VFNVME-MP",
                binding: Binding::Vfio,
                namespaces: NONE,
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
            Controller {
                slot: 0x11,
                serial: "VFNVME-MP",
                binding: Binding::Vfio,
                namespaces: NONE,
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
        ],
    },
    Scenario {
        name: "mphotplug",
        description: "nvme-subsys with two controllers sharing 2 raw namespaces, both on vfio-pci: 0000:01:00.0 alone behind a pcie-root-port at 00:10.0 (QEMU id c0: QMP device_del hot-removes it) and 00:11.0 on the root bus",
        subsystem: Some(Subsystem {
            nqn: "vfnvme-mphp",
            namespaces: Namespaces::List(&[
                Namespace::new(1, Backing::Raw, 16 * MIB, 512),
                Namespace::new(2, Backing::Raw, 8 * MIB, 4096),
            ]),
        }),
        controllers: &[
            Controller {
                slot: 0x10,
                serial: "VFNVME-MPHP",
                binding: Binding::Vfio,
                namespaces: NONE,
                mdts: None,
                max_ioqpairs: None,
                bus: 1,
            },
            Controller {
                slot: 0x11,
                serial: "VFNVME-MPHP",
                binding: Binding::Vfio,
                namespaces: NONE,
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
        ],
    },
    Scenario {
        name: "meta",
        description: "one controller on vfio-pci with metadata formats next to plain ones: ns 1 512 B, ns 2 512+8 extended (mset=1), ns 3 4096+16 separate (mset=0), ns 4 512+8 extended with PI type 1, ns 5 4096 B (16 MiB raw images)",
        subsystem: None,
        controllers: &[one(
            "VFNVME-META",
            Binding::Vfio,
            &[
                Namespace::new(1, Backing::Raw, 16 * MIB, 512),
                Namespace::new(2, Backing::Raw, 16 * MIB, 512).with_metadata(8, true, 0),
                Namespace::new(3, Backing::Raw, 16 * MIB, 4096).with_metadata(16, false, 0),
                Namespace::new(4, Backing::Raw, 16 * MIB, 512).with_metadata(8, true, 1),
                Namespace::new(5, Backing::Raw, 16 * MIB, 4096),
            ],
        )],
    },
    Scenario {
        name: "pi",
        description: "one controller on vfio-pci, 7 namespaces with metadata and protection information (8 MiB raw images): ns 1 512+8 extended PI 1 last, 2 512+8 separate PI 1 first, 3 4096+16 extended PI 2 first, 4 4096+16 separate PI 2 last, 5 512+64 extended PI 3 last, 6 4096+64 separate PI 3 first, 7 512+16 separate without PI",
        subsystem: None,
        controllers: &[one("VFNVME-PI", Binding::Vfio, PI_NAMESPACES)],
    },
    Scenario {
        name: "shapes",
        description: "one controller on vfio-pci unlike QEMU's defaults: mdts=2 (16 KiB), max_ioqpairs=1, namespaces 1 (512 B), 2 (4096 B), 9 (512 B, after a gap) and 200 (4096+8 extended metadata) (raw images)",
        subsystem: None,
        controllers: &[Controller {
            slot: 0x10,
            serial: "VFNVME-SHAPES",
            binding: Binding::Vfio,
            namespaces: Namespaces::List(&[
                Namespace::new(1, Backing::Raw, 16 * MIB, 512),
                Namespace::new(2, Backing::Raw, 16 * MIB, 4096),
                Namespace::new(9, Backing::Raw, 8 * MIB, 512),
                Namespace::new(200, Backing::Raw, 8 * MIB, 4096).with_metadata(8, true, 0),
            ]),
            mdts: Some(2),
            max_ioqpairs: Some(1),
            bus: 0,
        }],
    },
    Scenario {
        name: "ns256",
        description: "one controller on vfio-pci with 256 namespaces (1 MiB raw images, 512 B LBAs)",
        subsystem: None,
        controllers: &[Controller {
            slot: 0x10,
            serial: "VFNVME-NS256",
            binding: Binding::Vfio,
            namespaces: Namespaces::Uniform {
                count: 256,
                backing: Backing::Raw,
                bytes: MIB,
                lba_size: 512,
            },
            mdts: None,
            max_ioqpairs: None,
            bus: 0,
        }],
    },
    Scenario {
        name: "safety",
        description: "setup's refusals: 00:10.0 on vfio-pci, 00:11.0 on the kernel nvme driver (a block device to hold open), 00:12.0 an e1000 network card",
        subsystem: None,
        controllers: &[
            Controller {
                slot: 0x10,
                serial: "VFNVME-SAFE-VFIO",
                binding: Binding::Vfio,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Raw, 16 * MIB, 512)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
            Controller {
                slot: 0x11,
                serial: "VFNVME-SAFE-KERNEL",
                binding: Binding::Kernel,
                namespaces: Namespaces::List(&[Namespace::new(1, Backing::Raw, 16 * MIB, 512)]),
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
        ],
    },
    Scenario {
        name: "nullnoiommu",
        description: "no IOMMU (no intel-iommu device, intel_iommu=off): scenario null's controller (null-co, 1 GiB, 4 KiB LBAs) on the kernel nvme driver, for `vfnvme setup --no-iommu` (scripts/perf-noiommu.sh sets it beside scenario null)",
        subsystem: None,
        controllers: &[one(
            "VFNVME-NULL-NOIOMMU",
            Binding::Kernel,
            &[Namespace::new(1, Backing::Null, GIB, 4096)],
        )],
    },
    Scenario {
        name: "noiommu",
        description: "no IOMMU (no intel-iommu device, intel_iommu=off): nvme-subsys with two controllers on the kernel nvme driver sharing 2 raw namespaces, for `vfnvme setup --no-iommu` (uio_pci_generic): 0000:01:00.0 alone behind a pcie-root-port at 00:10.0 (QEMU id c0: QMP device_del hot-removes it) and 00:11.0 on the root bus",
        subsystem: Some(Subsystem {
            nqn: "vfnvme-noiommu",
            namespaces: Namespaces::List(&[
                Namespace::new(1, Backing::Raw, 16 * MIB, 512),
                Namespace::new(2, Backing::Raw, 8 * MIB, 4096),
            ]),
        }),
        controllers: &[
            Controller {
                slot: 0x10,
                serial: "VFNVME-NOIOMMU",
                binding: Binding::Kernel,
                namespaces: NONE,
                mdts: None,
                max_ioqpairs: None,
                bus: 1,
            },
            Controller {
                slot: 0x11,
                serial: "VFNVME-NOIOMMU",
                binding: Binding::Kernel,
                namespaces: NONE,
                mdts: None,
                max_ioqpairs: None,
                bus: 0,
            },
        ],
    },
];

/// Devices other than NVMe controllers that a scenario adds (QEMU `-device` values), by
/// scenario name: kept apart from [`Scenario`] so that scenarios without any stay as they are.
const OTHER_DEVICES: &[(&str, &[OtherDevice])] = &[(
    "safety",
    &[OtherDevice {
        slot: 0x12,
        qemu: "e1000",
        what: "an Ethernet controller (Intel 82540EM, 8086:100e), for setup's refusals",
    }],
)];

/// The scenarios whose guest has no IOMMU: no `-device intel-iommu`, `intel_iommu=off`; QEMU's
/// defaults otherwise. Their controllers start on the kernel's nvme driver, and the tests bind
/// them with `vfnvme setup --no-iommu` (uio_pci_generic: Debian's kernels lack VFIO's no-IOMMU
/// mode). Kept apart from [`Scenario`] like [`OTHER_DEVICES`].
const WITHOUT_IOMMU: &[&str] = &["noiommu", "nullnoiommu"];

/// A PCI device that is not an NVMe controller (a scenario's bystander).
#[derive(Clone, Copy, Debug)]
pub struct OtherDevice {
    /// PCI slot on bus 0; the guest sees it at `0000:00:<slot>.0`.
    pub slot: u8,
    /// The QEMU device model (`-device <qemu>,addr=<slot>`).
    pub qemu: &'static str,
    /// What it is, for `--list-scenarios`.
    pub what: &'static str,
}

impl OtherDevice {
    /// PCI address in the guest.
    pub fn bdf(&self) -> String {
        format!("0000:00:{:02x}.0", self.slot)
    }
}

impl Scenario {
    /// Whether the guest has the emulated Intel IOMMU (every scenario but those in
    /// [`WITHOUT_IOMMU`]).
    pub fn iommu(&self) -> bool {
        !WITHOUT_IOMMU.contains(&self.name)
    }

    /// The scenario's devices that are not NVMe controllers.
    pub fn other_devices(&self) -> &'static [OtherDevice] {
        OTHER_DEVICES
            .iter()
            .find(|(n, _)| *n == self.name)
            .map_or(&[], |(_, d)| d)
    }
}

/// Finds a scenario by name.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// The table printed by `--list-scenarios`.
pub fn listing() -> String {
    let mut out = String::new();
    for s in SCENARIOS {
        out.push_str(&format!("{:<11} {}\n", s.name, s.description));
        if !s.iommu() {
            out.push_str(&format!("{:<11}   no IOMMU in this guest\n", ""));
        }
        for c in s.controllers {
            let ns = s.namespaces_of(c);
            let on = match c.binding {
                Binding::Vfio => "vfio-pci",
                Binding::Kernel => "nvme",
            };
            out.push_str(&format!(
                "{:<11}   {} serial {} on {}, {} namespace(s)\n",
                "",
                c.bdf(),
                c.serial,
                on,
                ns.len()
            ));
        }
        for d in s.other_devices() {
            out.push_str(&format!("{:<11}   {} {}\n", "", d.bdf(), d.what));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_default_exists() {
        for (i, a) in SCENARIOS.iter().enumerate() {
            for b in &SCENARIOS[i + 1..] {
                assert_ne!(a.name, b.name);
            }
        }
        assert!(find(DEFAULT_SCENARIO).is_some());
    }

    #[test]
    fn slots_unique_sizes_whole_blocks_nsids_unique() {
        for s in SCENARIOS {
            for (i, a) in s.controllers.iter().enumerate() {
                for b in &s.controllers[i + 1..] {
                    assert_ne!(a.slot, b.slot, "{}", s.name);
                }
                let ns = s.namespaces_of(a);
                assert!(
                    !ns.is_empty(),
                    "{}: a controller without namespaces",
                    s.name
                );
                assert!(ns.len() <= 256, "{}", s.name);
                for (j, n) in ns.iter().enumerate() {
                    assert_eq!(n.bytes % u64::from(n.lba_size), 0, "{}", s.name);
                    // QEMU 7.2 refuses protection information with less than 8 bytes.
                    assert!(n.pi <= 3 && (n.pi == 0 || n.ms >= 8), "{}", s.name);
                    assert!(n.ms != 0 || (!n.mset && n.pi == 0), "{}", s.name);
                    assert!(!n.pil || n.pi != 0, "{}", s.name);
                    assert!(n.nsid >= 1);
                    if let Some(next) = ns.get(j + 1) {
                        assert_ne!(n.nsid, next.nsid, "{}", s.name);
                    }
                }
            }
        }
    }

    #[test]
    fn metadata_namespaces_count_their_metadata_in_the_image() {
        let s = find("meta").unwrap();
        let ns = s.namespaces_of(&s.controllers[0]);
        assert_eq!(ns[0].blocks(), 32768);
        assert_eq!(ns[1].blocks(), 16 * MIB / 520);
        assert_eq!(ns[2].blocks(), 16 * MIB / 4112);
    }

    #[test]
    fn pi_scenario_covers_every_size_layout_type_and_position() {
        let s = find("pi").unwrap();
        assert!(!s.name.contains('_'), "test-all splits file names at '_'");
        let ns = s.namespaces_of(&s.controllers[0]);
        for ms in [8, 16, 64] {
            for mset in [false, true] {
                assert!(
                    ns.iter().any(|n| n.ms == ms && n.mset == mset),
                    "ms {ms} mset {mset}"
                );
            }
        }
        for pi in 1..=3 {
            for pil in [false, true] {
                assert!(
                    ns.iter().any(|n| n.pi == pi && n.pil == pil),
                    "pi {pi} pil {pil}"
                );
            }
        }
        assert!(ns.iter().any(|n| n.ms != 0 && n.pi == 0));
        // 8 MiB per image: data and metadata of whole blocks.
        assert_eq!(ns[0].blocks(), 8 * MIB / 520);
        assert_eq!(ns[5].blocks(), 8 * MIB / 4160);
    }

    #[test]
    fn other_devices_belong_to_a_scenario_and_take_free_slots() {
        for (name, devs) in OTHER_DEVICES {
            let s = find(name).unwrap_or_else(|| panic!("no scenario {name}"));
            for d in *devs {
                assert!(s.controllers.iter().all(|c| c.slot != d.slot), "{name}");
            }
        }
        assert_eq!(
            find("safety").unwrap().other_devices()[0].bdf(),
            "0000:00:12.0"
        );
        assert!(find("data").unwrap().other_devices().is_empty());
        assert!(listing().contains("0000:00:12.0 an Ethernet controller"));
    }

    #[test]
    fn peers_controllers_are_identical_and_on_vfio() {
        let s = find("peers").unwrap();
        assert_eq!(s.controllers.len(), 5);
        let first = s.namespaces_of(&s.controllers[0]);
        for c in s.controllers {
            assert_eq!(c.binding, Binding::Vfio);
            let ns = s.namespaces_of(c);
            assert_eq!(ns.len(), 1);
            assert_eq!(ns[0].backing, Backing::Null);
            assert_eq!(ns[0].lba_size, 4096);
            assert_eq!(ns[0].blocks(), first[0].blocks());
        }
    }

    #[test]
    fn root_port_buses_follow_slot_order_and_sectors_fit() {
        for s in SCENARIOS {
            let mut behind: Vec<&Controller> =
                s.controllers.iter().filter(|c| c.bus != 0).collect();
            behind.sort_by_key(|c| c.slot);
            for (i, c) in behind.iter().enumerate() {
                assert_eq!(usize::from(c.bus), i + 1, "{}", s.name);
            }
            for c in s.controllers {
                for n in s.namespaces_of(c) {
                    if let Backing::FaultyRaw {
                        read_error_sector,
                        write_error_sector,
                    } = n.backing
                    {
                        assert!(read_error_sector * 512 < n.bytes, "{}", s.name);
                        assert!(write_error_sector * 512 < n.bytes, "{}", s.name);
                        assert_eq!(n.ms, 0, "{}", s.name);
                    }
                }
            }
        }
        let hp = find("hotplug").unwrap();
        assert_eq!(hp.controllers[0].bdf(), "0000:01:00.0");
        assert_eq!(hp.controllers[1].bdf(), "0000:00:11.0");
    }

    #[test]
    fn mphotplug_is_multipath_with_controller_0_behind_a_root_port() {
        let mp = find("mphotplug").unwrap();
        let plain = find("multipath").unwrap();
        assert!(!mp.name.contains('_'), "test-all splits file names at '_'");
        assert_eq!(mp.controllers[0].bdf(), "0000:01:00.0");
        assert_eq!(mp.controllers[1].bdf(), "0000:00:11.0");
        assert!(mp.controllers.iter().all(|c| c.binding == Binding::Vfio));
        let sub = mp.subsystem.expect("a subsystem");
        assert_ne!(sub.nqn, plain.subsystem.unwrap().nqn);
        // Both controllers show exactly the shared namespaces, the same as `multipath`'s.
        for c in mp.controllers {
            assert!(c.namespaces.expand().is_empty());
            let got: Vec<(u32, u64, u32)> = mp
                .namespaces_of(c)
                .iter()
                .map(|n| (n.nsid, n.blocks(), n.lba_size))
                .collect();
            let want: Vec<(u32, u64, u32)> = plain
                .namespaces_of(&plain.controllers[0])
                .iter()
                .map(|n| (n.nsid, n.blocks(), n.lba_size))
                .collect();
            assert_eq!(got, want);
        }
        assert!(listing().contains("0000:01:00.0 serial VFNVME-MPHP on vfio-pci, 2 namespace(s)"));
    }

    #[test]
    fn ns256_expands_to_256() {
        let s = find("ns256").unwrap();
        let ns = s.namespaces_of(&s.controllers[0]);
        assert_eq!(ns.len(), 256);
        assert_eq!(ns[255].nsid, 256);
        assert_eq!(ns[0].blocks(), 2048);
    }

    #[test]
    fn noiommu_has_no_iommu_two_kernel_controllers_of_one_subsystem_one_removable() {
        let s = find("noiommu").unwrap();
        assert!(!s.iommu());
        assert!(SCENARIOS.iter().filter(|x| !x.iommu()).count() == WITHOUT_IOMMU.len());
        assert!(find("data").unwrap().iommu() && find("mphotplug").unwrap().iommu());
        assert!(!s.name.contains('_'), "test-all splits file names at '_'");
        assert!(s.controllers.iter().all(|c| c.binding == Binding::Kernel));
        assert!(s.subsystem.is_some());
        assert_eq!(s.controllers[0].bdf(), "0000:01:00.0");
        assert_eq!(s.controllers[1].bdf(), "0000:00:11.0");
        assert_eq!(s.controllers[0].serial, s.controllers[1].serial);
        assert!(listing().contains("no IOMMU in this guest"));
        // The perf pair: the same controller as `null`, without the IOMMU.
        let (null, bare) = (find("null").unwrap(), find("nullnoiommu").unwrap());
        assert!(!bare.iommu() && null.iommu());
        let (a, b) = (null.controllers[0], bare.controllers[0]);
        assert_eq!((a.slot, a.bus, a.mdts), (b.slot, b.bus, b.mdts));
        assert_eq!(b.binding, Binding::Kernel);
        let (na, nb) = (null.namespaces_of(&a), bare.namespaces_of(&b));
        assert_eq!(na.len(), 1);
        assert_eq!(
            (na[0].backing, na[0].bytes, na[0].lba_size),
            (nb[0].backing, nb[0].bytes, nb[0].lba_size)
        );
    }
}
