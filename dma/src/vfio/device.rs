//! A PCI device opened through VFIO type1: the whole open flow, region info, BAR0 mapping,
//! config space, bus mastering and reset.

use super::bar::Bar;
use super::caps::{parse_sparse_mmap, u32_at, u64_at};
use super::container::{ioctl_error, Container};
use super::group::Group;
use super::info_query::query_with_caps;
use super::ioctls;
use super::type1::Type1Iommu;
use crate::error::DmaError;
use crate::iommu::Iommu;
use crate::pci_address::PciAddress;
use crate::pci_sysfs;
use crate::sys_paths::SysPaths;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_region_info, VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET,
    VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
};

/// The PCI command register's offset in config space.
const PCI_COMMAND: u64 = 0x04;
/// Command register: respond to memory space accesses.
const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: the device may master the bus (do DMA).
const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// One VFIO region of a device (a BAR, config space, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// The region index (`VFIO_PCI_*_REGION_INDEX`).
    pub index: u32,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
    /// Size in bytes.
    pub size: u64,
    /// Offset of the region in the device fd (for pread/pwrite/mmap).
    pub offset: u64,
    /// The mmappable parts (offset, size) when only parts are; `None` when all of it is.
    pub mmap_areas: Option<Vec<(u64, u64)>>,
}

impl Region {
    /// Whether the region can be mmapped at all.
    pub fn mappable(&self) -> bool {
        self.flags & VFIO_REGION_INFO_FLAG_MMAP != 0
    }
}

/// A PCI device bound to vfio-pci, opened through a type1 container of its own.
#[derive(Debug)]
pub struct VfioDevice {
    address: PciAddress,
    file: File,
    flags: u32,
    iommu: Arc<Type1Iommu>,
    bar0: Region,
    config: Region,
}

impl VfioDevice {
    /// Opens `addr` through VFIO: checks it is bound to vfio-pci and its IOMMU group is viable,
    /// creates a container with the type1v2 IOMMU, and gets the device.
    pub fn open(addr: PciAddress) -> Result<Self, DmaError> {
        Self::open_with(addr, &SysPaths::default())
    }

    /// [`VfioDevice::open`] with sysfs and `/dev/vfio` under `paths`.
    pub fn open_with(addr: PciAddress, paths: &SysPaths) -> Result<Self, DmaError> {
        // vfnvme drives NVMe controllers only: say so before advising `vfnvme setup`.
        pci_sysfs::require_nvme(paths, &addr)?;
        pci_sysfs::require_vfio_driver(paths, &addr)?;
        let group_no = pci_sysfs::iommu_group(paths, &addr)?;
        if let Some((blocker, driver)) = pci_sysfs::group_blocker(paths, group_no)? {
            return Err(DmaError::GroupNotViable {
                group: group_no,
                blocker,
                driver,
            });
        }
        let container = Container::open(paths)?;
        container.check_api()?;
        let group = Group::open(paths, group_no)?;
        group.check_viable(paths)?;
        group.set_container(&container)?;
        container.set_iommu_type1v2()?;
        let file = group.device_file(&addr)?;
        let iommu = Arc::new(Type1Iommu::new(container, group)?);

        let mut info = vfio_device_info {
            argsz: std::mem::size_of::<vfio_device_info>() as u32,
            ..Default::default()
        };
        // SAFETY: `info` is a valid vfio_device_info with argsz set; the kernel fills it in.
        unsafe { ioctls::vfio_device_get_info(file.as_raw_fd(), &mut info) }
            .map_err(|e| ioctl_error("DEVICE_GET_INFO", e))?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(DmaError::Unsupported {
                what: format!("device {addr} is not a PCI device"),
            });
        }
        let bar0 = region_info(&file, VFIO_PCI_BAR0_REGION_INDEX)?;
        let config = region_info(&file, VFIO_PCI_CONFIG_REGION_INDEX)?;
        log::debug!(
            "{addr}: flags {:#x}, BAR0 {bar0:x?}, config {config:x?}",
            info.flags
        );
        Ok(VfioDevice {
            address: addr,
            file,
            flags: info.flags,
            iommu,
            bar0,
            config,
        })
    }

    /// The device's address.
    pub fn address(&self) -> PciAddress {
        self.address
    }

    /// Information about region `index` (`VFIO_PCI_*_REGION_INDEX`).
    pub fn region(&self, index: u32) -> Result<Region, DmaError> {
        region_info(&self.file, index)
    }

    /// BAR0's region information.
    pub fn bar0_region(&self) -> &Region {
        &self.bar0
    }

    /// Maps BAR0. If the kernel refuses the whole BAR (an MSI-X table inside it that may not be
    /// mapped), maps the mappable area that starts at offset 0, which holds the registers.
    pub fn bar0(&self) -> Result<Bar, DmaError> {
        let r = &self.bar0;
        let unusable = |why: String| DmaError::Unsupported {
            what: format!("BAR0 of {} can't be mapped: {why}", self.address),
        };
        if !r.mappable() || r.size == 0 {
            return Err(unusable(format!(
                "region flags {:#x}, size {:#x}",
                r.flags, r.size
            )));
        }
        let len = usize::try_from(r.size).map_err(|_| unusable("too large".to_string()))?;
        match Bar::map(&self.file, r.offset, len, 0) {
            Ok(bar) => Ok(bar),
            Err(full_err) => {
                let first = r
                    .mmap_areas
                    .iter()
                    .flatten()
                    .find(|(off, size)| *off == 0 && *size > 0);
                let Some(&(_, size)) = first else {
                    return Err(unusable(full_err.to_string()));
                };
                let size = usize::try_from(size).unwrap_or(len).min(len);
                log::info!(
                    "{}: mapping the first {size:#x} bytes of BAR0 ({full_err} on the whole BAR)",
                    self.address
                );
                Bar::map(&self.file, r.offset, size, 0).map_err(|e| unusable(e.to_string()))
            }
        }
    }

    fn config_at(&self, offset: u64, width: u64) -> Result<u64, DmaError> {
        let inside = offset
            .checked_add(width)
            .is_some_and(|end| end <= self.config.size);
        if !inside {
            return Err(DmaError::ConfigOffset {
                offset,
                size: self.config.size,
            });
        }
        Ok(self.config.offset + offset)
    }

    fn config_read<const N: usize>(&self, offset: u64) -> Result<[u8; N], DmaError> {
        let at = self.config_at(offset, N as u64)?;
        let mut b = [0u8; N];
        self.file
            .read_exact_at(&mut b, at)
            .map_err(|source| DmaError::Io {
                path: format!("{} config space", self.address),
                source,
            })?;
        Ok(b)
    }

    fn config_write(&self, offset: u64, bytes: &[u8]) -> Result<(), DmaError> {
        let at = self.config_at(offset, bytes.len() as u64)?;
        self.file
            .write_all_at(bytes, at)
            .map_err(|source| DmaError::Io {
                path: format!("{} config space", self.address),
                source,
            })
    }

    /// Reads a config-space byte.
    pub fn config_read8(&self, offset: u64) -> Result<u8, DmaError> {
        Ok(u8::from_le_bytes(self.config_read(offset)?))
    }

    /// Reads a config-space word (PCI config space is little-endian).
    pub fn config_read16(&self, offset: u64) -> Result<u16, DmaError> {
        Ok(u16::from_le_bytes(self.config_read(offset)?))
    }

    /// Reads a config-space dword.
    pub fn config_read32(&self, offset: u64) -> Result<u32, DmaError> {
        Ok(u32::from_le_bytes(self.config_read(offset)?))
    }

    /// Writes a config-space word.
    pub fn config_write16(&self, offset: u64, value: u16) -> Result<(), DmaError> {
        self.config_write(offset, &value.to_le_bytes())
    }

    /// Writes a config-space dword.
    pub fn config_write32(&self, offset: u64, value: u32) -> Result<(), DmaError> {
        self.config_write(offset, &value.to_le_bytes())
    }

    /// Turns on memory-space decoding and bus mastering (DMA) in the command register.
    pub fn enable_bus_master(&self) -> Result<(), DmaError> {
        let cmd = self.config_read16(PCI_COMMAND)?;
        let want = cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER;
        if want != cmd {
            self.config_write16(PCI_COMMAND, want)?;
        }
        Ok(())
    }

    /// Whether VFIO can reset this device.
    pub fn can_reset(&self) -> bool {
        self.flags & VFIO_DEVICE_FLAGS_RESET != 0
    }

    /// Resets the device through VFIO (function-level or similar reset) if it supports it.
    /// Returns whether it did. Bus mastering must be enabled again afterwards.
    pub fn reset(&self) -> Result<bool, DmaError> {
        if !self.can_reset() {
            return Ok(false);
        }
        // SAFETY: VFIO_DEVICE_RESET takes no argument; the fd is an open VFIO device.
        unsafe { ioctls::vfio_device_reset(self.file.as_raw_fd()) }
            .map_err(|e| ioctl_error("DEVICE_RESET", e))?;
        Ok(true)
    }

    /// The device's IOMMU domain (its type1 container).
    pub fn iommu(&self) -> Arc<dyn Iommu> {
        self.iommu.clone()
    }

    /// The type1 container itself.
    pub fn type1(&self) -> &Arc<Type1Iommu> {
        &self.iommu
    }
}

/// VFIO_DEVICE_GET_REGION_INFO for region `index`, with its sparse-mmap capability.
fn region_info(file: &File, index: u32) -> Result<Region, DmaError> {
    let head = vfio_region_info {
        index,
        ..Default::default()
    };
    let fd = file.as_raw_fd();
    // SAFETY: `query_with_caps` hands the ioctl a buffer of `argsz` bytes starting with a
    // vfio_region_info; the kernel writes at most `argsz` bytes.
    let buf = query_with_caps(head, |p| unsafe {
        ioctls::vfio_device_get_region_info(fd, p)
    })
    .map_err(|e| ioctl_error("DEVICE_GET_REGION_INFO", e))?;
    let field32 = |at| u32_at(&buf, at).unwrap_or(0);
    let field64 = |at| u64_at(&buf, at).unwrap_or(0);
    Ok(Region {
        index,
        flags: field32(std::mem::offset_of!(vfio_region_info, flags)),
        size: field64(std::mem::offset_of!(vfio_region_info, size)),
        offset: field64(std::mem::offset_of!(vfio_region_info, offset)),
        mmap_areas: parse_sparse_mmap(&buf)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_sysfs::FakeSys;

    fn open(fake: &FakeSys, bdf: &str) -> DmaError {
        VfioDevice::open_with(PciAddress::parse(bdf).unwrap(), &fake.paths()).unwrap_err()
    }

    #[test]
    fn no_such_device() {
        let fake = FakeSys::new();
        assert!(matches!(
            open(&fake, "0000:00:10.0"),
            DmaError::NoSuchDevice { .. }
        ));
    }

    #[test]
    fn a_device_that_is_not_nvme_is_refused_before_the_driver_check() {
        let fake = FakeSys::new();
        let nic = fake.device("0000:00:02.0", Some("e1000"), Some(4));
        std::fs::write(nic.join("class"), "0x020000\n").unwrap();
        let err = open(&fake, "0000:00:02.0");
        assert!(matches!(&err, DmaError::NotNvme { .. }), "{err}");
        assert!(!err.to_string().contains("vfnvme setup"), "{err}");
    }

    #[test]
    fn not_bound_to_vfio_names_the_driver() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("nvme"), Some(4));
        let err = open(&fake, "0000:00:10.0");
        assert!(
            matches!(&err, DmaError::NotBoundToVfio { driver, .. } if driver == "nvme"),
            "{err}"
        );
    }

    #[test]
    fn group_with_a_host_driver_is_not_viable() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(4));
        fake.device("0000:00:10.1", Some("ahci"), Some(4));
        fake.dev_vfio(&[4]);
        let err = open(&fake, "0000:00:10.0");
        assert!(
            matches!(&err, DmaError::GroupNotViable { group: 4, blocker, driver }
                if blocker == "0000:00:10.1" && driver == "ahci"),
            "{err}"
        );
    }

    #[test]
    fn no_dev_vfio() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(4));
        let err = open(&fake, "0000:00:10.0");
        assert!(matches!(err, DmaError::NoVfio { .. }), "{err}");
        assert!(err.to_string().contains("modprobe vfio-pci"));
    }

    #[test]
    fn a_container_node_that_is_not_vfio_fails_cleanly() {
        // A regular file stands in for /dev/vfio/vfio: the first ioctl fails with a typed
        // error, never a panic.
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(4));
        fake.dev_vfio(&[]);
        let err = open(&fake, "0000:00:10.0");
        assert!(matches!(err, DmaError::Ioctl { .. }), "{err}");
    }

    #[test]
    fn no_iommu_group() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), None);
        assert!(matches!(
            open(&fake, "0000:00:10.0"),
            DmaError::NoIommuGroup { .. }
        ));
    }
}
