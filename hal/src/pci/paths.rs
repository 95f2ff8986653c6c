//! Where the kernel's interfaces live: `/sys` and `/dev/vfio`, injectable so that tests can
//! point them at a fake tree in a temporary directory.

use crate::error::HalError;
use crate::pci::address::PciAddress;
use std::path::{Path, PathBuf};

/// The roots of sysfs and of the VFIO device nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysPaths {
    /// The sysfs mount, normally `/sys`.
    pub sys: PathBuf,
    /// The VFIO device directory, normally `/dev/vfio`.
    pub dev_vfio: PathBuf,
}

impl Default for SysPaths {
    fn default() -> Self {
        SysPaths {
            sys: PathBuf::from("/sys"),
            dev_vfio: PathBuf::from("/dev/vfio"),
        }
    }
}

impl SysPaths {
    /// Paths under other roots (for tests, or a chroot).
    pub fn new(sys: impl Into<PathBuf>, dev_vfio: impl Into<PathBuf>) -> Self {
        SysPaths {
            sys: sys.into(),
            dev_vfio: dev_vfio.into(),
        }
    }

    /// `/sys/bus/pci/devices/$BDF`.
    pub fn pci_device(&self, addr: &PciAddress) -> PathBuf {
        self.sys.join("bus/pci/devices").join(addr.to_string())
    }

    /// `/sys/bus/pci/devices`.
    pub fn pci_devices(&self) -> PathBuf {
        self.sys.join("bus/pci/devices")
    }

    /// `/sys/bus/pci/drivers/$name`.
    pub fn pci_driver(&self, name: &str) -> PathBuf {
        self.sys.join("bus/pci/drivers").join(name)
    }

    /// `/sys/bus/pci/drivers_probe`.
    pub fn drivers_probe(&self) -> PathBuf {
        self.sys.join("bus/pci/drivers_probe")
    }

    /// `/sys/kernel/iommu_groups/$N/devices`.
    pub fn iommu_group_devices(&self, group: u32) -> PathBuf {
        self.sys
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices")
    }

    /// `/sys/kernel/mm/hugepages/hugepages-${size_kb}kB`.
    pub fn hugepages(&self, size_kb: u64) -> PathBuf {
        self.sys
            .join("kernel/mm/hugepages")
            .join(format!("hugepages-{size_kb}kB"))
    }

    /// `/dev/vfio/vfio`, the container node.
    pub fn vfio_container(&self) -> PathBuf {
        self.dev_vfio.join("vfio")
    }

    /// `/dev/vfio/$N`, a group node.
    pub fn vfio_group(&self, group: u32) -> PathBuf {
        self.dev_vfio.join(group.to_string())
    }
}

/// Turns an I/O error on `path` into a [`HalError`], with permission problems called out.
pub(crate) fn io_error(path: &Path, source: std::io::Error) -> HalError {
    if source.kind() == std::io::ErrorKind::PermissionDenied {
        HalError::Permission {
            path: path.display().to_string(),
        }
    } else {
        HalError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
