//! A PCI device opened through VFIO, type1 or VFIO's no-IOMMU mode: the whole open flow, region
//! info, BAR0 mapping, config space, bus mastering and reset.

use super::bar::Bar;
use super::caps::{parse_sparse_mmap, u32_at, u64_at};
use super::container::{ioctl_error, Container};
use super::group::Group;
use super::info_query::query_with_caps;
use super::ioctls;
use super::noiommu::NoIommuContainer;
use super::removal::RemovalNotice;
use super::type1::Type1Iommu;
use crate::error::HalError;
use crate::iommu::physical::PhysicalMapper;
use crate::iommu::Iommu;
use crate::pci::address::PciAddress;
use crate::pci::paths::SysPaths;
use crate::pci::sysfs as pci_sysfs;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, Weak};
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

/// The container a device was opened through.
#[derive(Debug, Clone)]
enum Domain {
    /// A type1 container (an IOMMU).
    Type1(Arc<Type1Iommu>),
    /// A container in VFIO's no-IOMMU model (physical addresses).
    NoIommu(Arc<NoIommuContainer>),
}

/// A PCI device bound to vfio-pci, opened through a type1 container of its own or shared with
/// other devices ([`VfioDevice::open_shared`]), or through a no-IOMMU container
/// ([`VfioDevice::open_noiommu_shared_with`]).
#[derive(Debug)]
pub struct VfioDevice {
    address: PciAddress,
    file: File,
    flags: u32,
    domain: Domain,
    bar0: Region,
    config: Region,
    /// The live request notifier, if any (the kernel keeps one per device).
    notice: Mutex<Weak<RemovalNotice>>,
}

impl VfioDevice {
    /// Opens `addr` through VFIO: checks it is bound to vfio-pci and its IOMMU group is viable,
    /// creates a container with the type1v2 IOMMU, and gets the device.
    pub fn open(addr: PciAddress) -> Result<Self, HalError> {
        Self::open_with(addr, &SysPaths::default())
    }

    /// [`VfioDevice::open`] with sysfs and `/dev/vfio` under `paths`.
    pub fn open_with(addr: PciAddress, paths: &SysPaths) -> Result<Self, HalError> {
        let mut devices = Self::open_shared_with(&[addr], paths)?;
        devices.pop().ok_or(HalError::NoDevices)
    }

    /// Opens every device of `addrs` through VFIO in ONE type1 container: their IOMMU groups
    /// all join it before anything is mapped, so a mapping made through any of them (one
    /// [`DmaPool`](crate::DmaPool) over [`VfioDevice::iommu`]) is visible to every device at the
    /// same IOVA. Two devices of one IOMMU group share the group. Every device must be an NVMe
    /// controller bound to vfio-pci whose group is viable; an address given twice is refused
    /// ([`HalError::DuplicateDevice`]). The devices come back in the order of `addrs`.
    pub fn open_shared(addrs: &[PciAddress]) -> Result<Vec<Self>, HalError> {
        Self::open_shared_with(addrs, &SysPaths::default())
    }

    /// [`VfioDevice::open_shared`] with sysfs and `/dev/vfio` under `paths`.
    pub fn open_shared_with(addrs: &[PciAddress], paths: &SysPaths) -> Result<Vec<Self>, HalError> {
        if addrs.is_empty() {
            return Err(HalError::NoDevices);
        }
        // Every check that needs no ioctl first, for every device: nothing is opened for a
        // list that can't work.
        if let Some(twice) = addrs
            .iter()
            .enumerate()
            .find_map(|(i, a)| addrs[..i].contains(a).then_some(a))
        {
            return Err(HalError::DuplicateDevice {
                address: twice.to_string(),
            });
        }
        let mut group_of = Vec::with_capacity(addrs.len());
        for addr in addrs {
            // vfnvme drives NVMe controllers only: say so before advising `vfnvme setup`.
            pci_sysfs::require_nvme(paths, addr)?;
            pci_sysfs::require_vfio_driver(paths, addr)?;
            let group_no = pci_sysfs::iommu_group(paths, addr)?;
            if let Some((blocker, driver)) = pci_sysfs::group_blocker(paths, group_no)? {
                return Err(HalError::GroupNotViable {
                    group: group_no,
                    blocker,
                    driver,
                });
            }
            group_of.push(group_no);
        }
        let container = Container::open(paths)?;
        container.check_api()?;
        let mut groups: Vec<Group> = Vec::new();
        for &no in &group_of {
            if groups.iter().any(|g| g.number() == no) {
                continue;
            }
            let group = Group::open(paths, no)?;
            group.check_viable(paths)?;
            groups.push(group);
        }
        let iommu = Arc::new(Type1Iommu::attach(container, groups)?);
        addrs
            .iter()
            .zip(group_of)
            .map(|(addr, group)| {
                let file = iommu.device_file(group, addr)?;
                Self::from_file(*addr, file, Domain::Type1(iommu.clone()))
            })
            .collect()
    }

    /// Opens every device of `addrs` through VFIO's no-IOMMU mode in ONE container: each must be
    /// an NVMe controller bound to vfio-pci whose group node is `/dev/vfio/noiommu-N` (VFIO made
    /// it so: `enable_unsafe_noiommu_mode` was on when vfio-pci took the device). Nothing is
    /// mapped: DMA addresses are physical, from `mapper` ([`VfioDevice::iommu`] returns it).
    /// The devices come back in the order of `addrs`.
    pub fn open_noiommu_shared_with(
        addrs: &[PciAddress],
        paths: &SysPaths,
        mapper: Arc<PhysicalMapper>,
    ) -> Result<Vec<Self>, HalError> {
        if addrs.is_empty() {
            return Err(HalError::NoDevices);
        }
        if let Some(twice) = addrs
            .iter()
            .enumerate()
            .find_map(|(i, a)| addrs[..i].contains(a).then_some(a))
        {
            return Err(HalError::DuplicateDevice {
                address: twice.to_string(),
            });
        }
        let mut group_of = Vec::with_capacity(addrs.len());
        for addr in addrs {
            pci_sysfs::require_nvme(paths, addr)?;
            match pci_sysfs::driver(paths, addr)? {
                Some(d) if d == pci_sysfs::VFIO_PCI => {}
                other => {
                    return Err(HalError::NotBoundForNoIommu {
                        address: addr.to_string(),
                        driver: other.unwrap_or_else(|| "no driver".to_string()),
                    })
                }
            }
            let group_no = pci_sysfs::iommu_group(paths, addr)?;
            if !crate::pci::noiommu::noiommu_group_node(paths, group_no).exists() {
                return Err(HalError::NotNoIommuGroup {
                    address: addr.to_string(),
                    group: group_no,
                });
            }
            group_of.push(group_no);
        }
        let container = Container::open(paths)?;
        let mut groups: Vec<Group> = Vec::new();
        for &no in &group_of {
            if groups.iter().any(|g| g.number() == no) {
                continue;
            }
            groups.push(Group::open_noiommu(paths, no)?);
        }
        let domain = Arc::new(NoIommuContainer::attach(container, groups, mapper)?);
        addrs
            .iter()
            .zip(group_of)
            .map(|(addr, group)| {
                let file = domain.device_file(group, addr)?;
                Self::from_file(*addr, file, Domain::NoIommu(domain.clone()))
            })
            .collect()
    }

    /// Wraps the device fd `file` of `addr`, whose group is in `domain`'s container.
    fn from_file(addr: PciAddress, file: File, domain: Domain) -> Result<Self, HalError> {
        let mut info = vfio_device_info {
            argsz: std::mem::size_of::<vfio_device_info>() as u32,
            ..Default::default()
        };
        // SAFETY: `info` is a valid vfio_device_info with argsz set; the kernel fills it in.
        unsafe { ioctls::vfio_device_get_info(file.as_raw_fd(), &mut info) }
            .map_err(|e| ioctl_error("DEVICE_GET_INFO", e))?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(HalError::Unsupported {
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
            domain,
            bar0,
            config,
            notice: Mutex::new(Weak::new()),
        })
    }

    /// Registers for the device request interrupt (`VFIO_PCI_REQ_IRQ_INDEX`): the returned
    /// notice says when the kernel wants the device back (unbind, sysfs `remove`, hot-unplug).
    /// The kernel holds one such eventfd per device, so while a notice lives this returns it
    /// again. Fails with [`HalError::NoRequestIrq`] on kernels without the interrupt.
    pub fn removal_notice(&self) -> Result<Arc<RemovalNotice>, HalError> {
        let mut slot = self.notice.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(live) = slot.upgrade() {
            return Ok(live);
        }
        let notice = Arc::new(RemovalNotice::register(&self.file, self.address)?);
        *slot = Arc::downgrade(&notice);
        Ok(notice)
    }

    /// The device's address.
    pub fn address(&self) -> PciAddress {
        self.address
    }

    /// Information about region `index` (`VFIO_PCI_*_REGION_INDEX`).
    pub fn region(&self, index: u32) -> Result<Region, HalError> {
        region_info(&self.file, index)
    }

    /// BAR0's region information.
    pub fn bar0_region(&self) -> &Region {
        &self.bar0
    }

    /// Maps BAR0. If the kernel refuses the whole BAR (an MSI-X table inside it that may not be
    /// mapped), maps the mappable area that starts at offset 0, which holds the registers.
    pub fn bar0(&self) -> Result<Bar, HalError> {
        let r = &self.bar0;
        let unusable = |why: String| HalError::Unsupported {
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

    fn config_at(&self, offset: u64, width: u64) -> Result<u64, HalError> {
        let inside = offset
            .checked_add(width)
            .is_some_and(|end| end <= self.config.size);
        if !inside {
            return Err(HalError::ConfigOffset {
                offset,
                size: self.config.size,
            });
        }
        Ok(self.config.offset + offset)
    }

    fn config_read<const N: usize>(&self, offset: u64) -> Result<[u8; N], HalError> {
        let at = self.config_at(offset, N as u64)?;
        let mut b = [0u8; N];
        self.file
            .read_exact_at(&mut b, at)
            .map_err(|source| HalError::Io {
                path: format!("{} config space", self.address),
                source,
            })?;
        Ok(b)
    }

    fn config_write(&self, offset: u64, bytes: &[u8]) -> Result<(), HalError> {
        let at = self.config_at(offset, bytes.len() as u64)?;
        self.file
            .write_all_at(bytes, at)
            .map_err(|source| HalError::Io {
                path: format!("{} config space", self.address),
                source,
            })
    }

    /// Reads a config-space byte.
    pub fn config_read8(&self, offset: u64) -> Result<u8, HalError> {
        Ok(u8::from_le_bytes(self.config_read(offset)?))
    }

    /// Reads a config-space word (PCI config space is little-endian).
    pub fn config_read16(&self, offset: u64) -> Result<u16, HalError> {
        Ok(u16::from_le_bytes(self.config_read(offset)?))
    }

    /// Reads a config-space dword.
    pub fn config_read32(&self, offset: u64) -> Result<u32, HalError> {
        Ok(u32::from_le_bytes(self.config_read(offset)?))
    }

    /// Writes a config-space word.
    pub fn config_write16(&self, offset: u64, value: u16) -> Result<(), HalError> {
        self.config_write(offset, &value.to_le_bytes())
    }

    /// Writes a config-space dword.
    pub fn config_write32(&self, offset: u64, value: u32) -> Result<(), HalError> {
        self.config_write(offset, &value.to_le_bytes())
    }

    /// Turns on memory-space decoding and bus mastering (DMA) in the command register.
    pub fn enable_bus_master(&self) -> Result<(), HalError> {
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
    pub fn reset(&self) -> Result<bool, HalError> {
        if !self.can_reset() {
            return Ok(false);
        }
        // SAFETY: VFIO_DEVICE_RESET takes no argument; the fd is an open VFIO device.
        unsafe { ioctls::vfio_device_reset(self.file.as_raw_fd()) }
            .map_err(|e| ioctl_error("DEVICE_RESET", e))?;
        Ok(true)
    }

    /// The device's IOMMU domain (its type1 container, shared by every device opened with it),
    /// or in VFIO's no-IOMMU mode the physical mapper of its container.
    pub fn iommu(&self) -> Arc<dyn Iommu> {
        match &self.domain {
            Domain::Type1(t) => t.clone(),
            Domain::NoIommu(c) => c.mapper().clone(),
        }
    }

    /// The type1 container itself; `None` in VFIO's no-IOMMU mode.
    pub fn type1(&self) -> Option<&Arc<Type1Iommu>> {
        match &self.domain {
            Domain::Type1(t) => Some(t),
            Domain::NoIommu(_) => None,
        }
    }

    /// Whether the device was opened through VFIO's no-IOMMU mode (physical DMA addresses).
    pub fn no_iommu(&self) -> bool {
        matches!(self.domain, Domain::NoIommu(_))
    }
}

/// VFIO_DEVICE_GET_REGION_INFO for region `index`, with its sparse-mmap capability.
fn region_info(file: &File, index: u32) -> Result<Region, HalError> {
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
    use crate::pci::test_sysfs::FakeSys;

    fn open(fake: &FakeSys, bdf: &str) -> HalError {
        VfioDevice::open_with(PciAddress::parse(bdf).unwrap(), &fake.paths()).unwrap_err()
    }

    #[test]
    fn no_such_device() {
        let fake = FakeSys::new();
        assert!(matches!(
            open(&fake, "0000:00:10.0"),
            HalError::NoSuchDevice { .. }
        ));
    }

    #[test]
    fn a_device_that_is_not_nvme_is_refused_before_the_driver_check() {
        let fake = FakeSys::new();
        let nic = fake.device("0000:00:02.0", Some("e1000"), Some(4));
        std::fs::write(nic.join("class"), "0x020000\n").unwrap();
        let err = open(&fake, "0000:00:02.0");
        assert!(matches!(&err, HalError::NotNvme { .. }), "{err}");
        assert!(!err.to_string().contains("vfnvme setup"), "{err}");
    }

    #[test]
    fn not_bound_to_vfio_names_the_driver() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("nvme"), Some(4));
        let err = open(&fake, "0000:00:10.0");
        assert!(
            matches!(&err, HalError::NotBoundToVfio { driver, .. } if driver == "nvme"),
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
            matches!(&err, HalError::GroupNotViable { group: 4, blocker, driver }
                if blocker == "0000:00:10.1" && driver == "ahci"),
            "{err}"
        );
    }

    #[test]
    fn no_dev_vfio() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(4));
        let err = open(&fake, "0000:00:10.0");
        assert!(matches!(err, HalError::NoVfio { .. }), "{err}");
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
        assert!(matches!(err, HalError::Ioctl { .. }), "{err}");
    }

    fn open_many(fake: &FakeSys, bdfs: &[&str]) -> HalError {
        let addrs: Vec<_> = bdfs.iter().map(|b| PciAddress::parse(b).unwrap()).collect();
        VfioDevice::open_shared_with(&addrs, &fake.paths()).unwrap_err()
    }

    #[test]
    fn shared_open_refuses_an_empty_list_and_an_address_given_twice() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(4));
        fake.device("0000:00:11.0", Some("vfio-pci"), Some(5));
        fake.dev_vfio(&[4, 5]);
        assert!(matches!(open_many(&fake, &[]), HalError::NoDevices));
        let err = open_many(&fake, &["0000:00:10.0", "0000:00:11.0", "0000:00:10.0"]);
        assert!(
            matches!(&err, HalError::DuplicateDevice { address } if address == "0000:00:10.0"),
            "{err}"
        );
        assert!(err.to_string().contains("given twice"), "{err}");
    }

    #[test]
    fn shared_open_checks_every_device_before_opening_anything() {
        // The second device is on the kernel driver: refused by name, before /dev/vfio is
        // touched (there is none here, which would be the error otherwise).
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(4));
        fake.device("0000:00:11.0", Some("nvme"), Some(5));
        let err = open_many(&fake, &["0000:00:10.0", "0000:00:11.0"]);
        assert!(
            matches!(&err, HalError::NotBoundToVfio { address, driver }
                if address == "0000:00:11.0" && driver == "nvme"),
            "{err}"
        );
        // The second device's group holds a device on a host driver.
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(4));
        fake.device("0000:00:11.0", Some("vfio-pci"), Some(5));
        fake.device("0000:00:11.1", Some("ahci"), Some(5));
        let err = open_many(&fake, &["0000:00:10.0", "0000:00:11.0"]);
        assert!(
            matches!(&err, HalError::GroupNotViable { group: 5, blocker, .. } if blocker == "0000:00:11.1"),
            "{err}"
        );
    }

    #[test]
    fn shared_open_of_two_devices_in_one_group_opens_the_group_once() {
        // Both devices in group 4; the fake /dev/vfio/4 is a plain file, so the first ioctl
        // (the container's API check) fails cleanly: the point is that the list is accepted
        // up to the kernel, with no duplicate-group error.
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(4));
        fake.device("0000:00:10.1", Some("vfio-pci"), Some(4));
        fake.dev_vfio(&[4]);
        let err = open_many(&fake, &["0000:00:10.0", "0000:00:10.1"]);
        assert!(matches!(err, HalError::Ioctl { .. }), "{err}");
    }

    #[test]
    fn no_iommu_group() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), None);
        assert!(matches!(
            open(&fake, "0000:00:10.0"),
            HalError::NoIommuGroup { .. }
        ));
    }

    fn noiommu_open(fake: &FakeSys, bdf: &str) -> HalError {
        let mapper = Arc::new(PhysicalMapper::with_reader(Box::new(NoFrames)));
        VfioDevice::open_noiommu_shared_with(
            &[PciAddress::parse(bdf).unwrap()],
            &fake.paths(),
            mapper,
        )
        .unwrap_err()
    }

    /// A pagemap stand-in (nothing is translated in these tests).
    struct NoFrames;
    impl crate::iommu::pagemap::FrameReader for NoFrames {
        fn entry(&self, _vaddr: usize) -> std::io::Result<u64> {
            Ok(0)
        }
    }

    #[test]
    fn vfio_noiommu_needs_vfio_pci_and_a_noiommu_group_node() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("uio_pci_generic"), None);
        fake.device("0000:00:11.0", Some("vfio-pci"), Some(3));
        fake.device("0000:00:12.0", Some("vfio-pci"), None);
        fake.dev_vfio(&[3]);
        let e = noiommu_open(&fake, "0000:00:10.0");
        assert!(
            matches!(&e, HalError::NotBoundForNoIommu { driver, .. } if driver == "uio_pci_generic"),
            "{e}"
        );
        // Group 3 is an IOMMU group (/dev/vfio/3): not for the no-IOMMU mode.
        let e = noiommu_open(&fake, "0000:00:11.0");
        assert!(
            matches!(e, HalError::NotNoIommuGroup { group: 3, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("without --no-iommu"), "{e}");
        let e = noiommu_open(&fake, "0000:00:12.0");
        assert!(matches!(e, HalError::NoIommuGroup { .. }), "{e}");
    }

    #[test]
    fn vfio_noiommu_opens_the_noiommu_node_and_fails_cleanly_on_a_node_that_is_not_vfio() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(7));
        // /dev/vfio/vfio and /dev/vfio/noiommu-7 as plain files: the path is taken, and the
        // first ioctl fails with a typed error instead of anything worse.
        let dev = fake.dev_vfio(&[]);
        std::fs::write(dev.join("noiommu-7"), "").unwrap();
        let e = noiommu_open(&fake, "0000:00:10.0");
        assert!(
            matches!(
                e,
                HalError::Ioctl {
                    op: "GET_API_VERSION",
                    ..
                }
            ),
            "{e}"
        );
        // Without the node VFIO never made the group: refused before any ioctl.
        std::fs::remove_file(dev.join("noiommu-7")).unwrap();
        fake.device("0000:00:11.0", Some("vfio-pci"), Some(8));
        let e = noiommu_open(&fake, "0000:00:11.0");
        assert!(
            matches!(e, HalError::NotNoIommuGroup { group: 8, .. }),
            "{e}"
        );
        let mapper = Arc::new(PhysicalMapper::with_reader(Box::new(NoFrames)));
        let a = PciAddress::parse("0000:00:10.0").unwrap();
        let e = VfioDevice::open_noiommu_shared_with(&[a, a], &fake.paths(), mapper.clone())
            .unwrap_err();
        assert!(matches!(e, HalError::DuplicateDevice { .. }), "{e}");
        let e = VfioDevice::open_noiommu_shared_with(&[], &fake.paths(), mapper).unwrap_err();
        assert!(matches!(e, HalError::NoDevices), "{e}");
    }
}
