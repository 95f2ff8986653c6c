//! Read-only PCI queries through sysfs: does a device exist, which driver has it, which IOMMU
//! group it is in, and which device of a group keeps the group from being usable by VFIO.

use crate::error::HalError;
use crate::pci::address::PciAddress;
use crate::pci::paths::{io_error, SysPaths};
use std::path::Path;

/// The name of the VFIO PCI driver.
pub const VFIO_PCI: &str = "vfio-pci";

/// The PCI class code of an NVMe controller (mass storage, non-volatile memory, NVMe).
pub const NVME_CLASS: u32 = 0x01_08_02;

/// Reads a sysfs attribute holding a hex number such as `0x010802`.
pub(crate) fn read_hex(path: &Path) -> Option<u32> {
    let t = std::fs::read_to_string(path).ok()?;
    u32::from_str_radix(t.trim().trim_start_matches("0x"), 16).ok()
}

/// What a PCI class code (base class, subclass, programming interface) names, in words, e.g.
/// "an Ethernet controller" for 0x020000. Covers the classes one meets on servers and in QEMU;
/// anything else is named by its base class.
pub fn class_name(class: u32) -> &'static str {
    let base = class >> 16;
    let sub = (class >> 8) & 0xff;
    match (base, sub) {
        (0x01, 0x08) if class & 0xff == 0x02 => "an NVMe controller",
        (0x01, 0x08) => "a non-volatile memory controller that is not NVMe",
        (0x01, 0x00) => "a SCSI controller",
        (0x01, 0x01) => "an IDE controller",
        (0x01, 0x04) => "a RAID controller",
        (0x01, 0x06) => "a SATA controller",
        (0x01, 0x07) => "a SAS controller",
        (0x01, _) => "a mass storage controller",
        (0x02, 0x00) => "an Ethernet controller",
        (0x02, _) => "a network controller",
        (0x03, _) => "a display controller",
        (0x04, _) => "a multimedia controller",
        (0x05, _) => "a memory controller",
        (0x06, 0x00) => "a host bridge",
        (0x06, 0x01) => "an ISA bridge",
        (0x06, 0x04) => "a PCI bridge",
        (0x06, _) => "a bridge",
        (0x07, _) => "a communication controller",
        (0x08, _) => "a system peripheral",
        (0x0c, 0x03) => "a USB controller",
        (0x0c, 0x05) => "an SMBus controller",
        (0x0c, _) => "a serial bus controller",
        (0x0d, _) => "a wireless controller",
        (0x12, _) => "a processing accelerator",
        _ => "a PCI device of another kind",
    }
}

/// A PCI device as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciDeviceInfo {
    /// Its address.
    pub address: PciAddress,
    /// PCI vendor ID.
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// PCI class code (base class, subclass, programming interface).
    pub class: u32,
    /// The bound driver, if any.
    pub driver: Option<String>,
}

/// Reads the device at `dir` (a sysfs device directory).
pub(crate) fn info_of_dir(address: PciAddress, dir: &Path) -> Result<PciDeviceInfo, HalError> {
    Ok(PciDeviceInfo {
        address,
        vendor: read_hex(&dir.join("vendor")).unwrap_or(0xffff) as u16,
        device: read_hex(&dir.join("device")).unwrap_or(0xffff) as u16,
        class: read_hex(&dir.join("class")).unwrap_or(0xff_ffff),
        driver: driver_of_dir(dir)?,
    })
}

/// The device's IDs, class and driver.
pub fn device_info(paths: &SysPaths, addr: &PciAddress) -> Result<PciDeviceInfo, HalError> {
    require_device(paths, addr)?;
    info_of_dir(*addr, &paths.pci_device(addr))
}

/// Fails with [`HalError::NotNvme`], naming what the device is, unless it is an NVMe
/// controller (class 0x010802).
pub fn require_nvme(paths: &SysPaths, addr: &PciAddress) -> Result<(), HalError> {
    not_nvme_error(&device_info(paths, addr)?).map_or(Ok(()), Err)
}

/// The [`HalError::NotNvme`] for `info`, or `None` when it is an NVMe controller.
pub fn not_nvme_error(info: &PciDeviceInfo) -> Option<HalError> {
    (info.class != NVME_CLASS).then(|| HalError::NotNvme {
        address: info.address.to_string(),
        class: info.class,
        what: class_name(info.class).to_string(),
        vendor: info.vendor,
        device: info.device,
        driver: info.driver.clone().unwrap_or_else(|| "none".to_string()),
    })
}

/// Fails with [`HalError::NoSuchDevice`] unless the device's sysfs directory exists.
pub fn require_device(paths: &SysPaths, addr: &PciAddress) -> Result<(), HalError> {
    if paths.pci_device(addr).exists() {
        Ok(())
    } else {
        Err(HalError::NoSuchDevice {
            address: addr.to_string(),
        })
    }
}

/// The last path component a sysfs symlink points to (e.g. `nvme` for a `driver` link).
fn link_target_name(link: &Path) -> Result<Option<String>, HalError> {
    match std::fs::read_link(link) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(link, e)),
    }
}

/// The driver bound to the device at `dir` (a sysfs device directory), if any.
pub(crate) fn driver_of_dir(dir: &Path) -> Result<Option<String>, HalError> {
    link_target_name(&dir.join("driver"))
}

/// The driver the device is bound to, or `None` when it has none.
pub fn driver(paths: &SysPaths, addr: &PciAddress) -> Result<Option<String>, HalError> {
    require_device(paths, addr)?;
    driver_of_dir(&paths.pci_device(addr))
}

/// Fails with [`HalError::NotBoundToVfio`] unless the device is bound to vfio-pci; with
/// [`HalError::BoundForNoIommu`] when it is on uio_pci_generic, and with
/// [`HalError::NoIommuGroup`] when it has no IOMMU group (no IOMMU: vfio-pci could not take it),
/// both of which say how to opt in to the no-IOMMU mode.
pub fn require_vfio_driver(paths: &SysPaths, addr: &PciAddress) -> Result<(), HalError> {
    match driver(paths, addr)? {
        Some(d) if d == VFIO_PCI => Ok(()),
        Some(d) if d == crate::pci::noiommu::UIO_PCI_GENERIC => Err(HalError::BoundForNoIommu {
            address: addr.to_string(),
        }),
        _ if matches!(iommu_group(paths, addr), Err(HalError::NoIommuGroup { .. })) => {
            Err(HalError::NoIommuGroup {
                address: addr.to_string(),
            })
        }
        other => Err(HalError::NotBoundToVfio {
            address: addr.to_string(),
            driver: other.unwrap_or_else(|| "no driver".to_string()),
        }),
    }
}

/// The device's IOMMU group number.
pub fn iommu_group(paths: &SysPaths, addr: &PciAddress) -> Result<u32, HalError> {
    require_device(paths, addr)?;
    let no_group = || HalError::NoIommuGroup {
        address: addr.to_string(),
    };
    let name =
        link_target_name(&paths.pci_device(addr).join("iommu_group"))?.ok_or_else(no_group)?;
    name.parse().map_err(|_| no_group())
}

/// Whether a device bound to `driver` lets its IOMMU group be used through VFIO: VFIO's own
/// drivers, and drivers the kernel lets share a group with VFIO (pci-stub, PCIe port services).
pub fn driver_allows_vfio(driver: &str) -> bool {
    driver.contains("vfio") || driver == "pci-stub" || driver == "pcieport"
}

/// The first device of IOMMU group `group` (by name) whose driver keeps the group from being
/// viable for VFIO, with that driver.
pub fn group_blocker(paths: &SysPaths, group: u32) -> Result<Option<(String, String)>, HalError> {
    let dir = paths.iommu_group_devices(group);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(&dir, e)),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        if let Some(d) = driver_of_dir(&dir.join(&name))? {
            if !driver_allows_vfio(&d) {
                return Ok(Some((name, d)));
            }
        }
    }
    Ok(None)
}

/// The error for a group the kernel reports as not viable, naming the blocking device when
/// sysfs shows one.
pub fn not_viable_error(paths: &SysPaths, group: u32) -> HalError {
    let (blocker, driver) = match group_blocker(paths, group) {
        Ok(Some(b)) => b,
        _ => (
            "an unidentified device".to_string(),
            "a host driver".to_string(),
        ),
    };
    HalError::GroupNotViable {
        group,
        blocker,
        driver,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::test_sysfs::FakeSys;

    fn addr(s: &str) -> PciAddress {
        PciAddress::parse(s).unwrap()
    }

    #[test]
    fn names_what_a_device_that_is_not_nvme_is() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(3));
        assert!(require_nvme(&fake.paths(), &addr("0000:00:10.0")).is_ok());
        let nic = fake.device("0000:00:02.0", Some("e1000"), Some(1));
        std::fs::write(nic.join("class"), "0x020000\n").unwrap();
        std::fs::write(nic.join("vendor"), "0x8086\n").unwrap();
        std::fs::write(nic.join("device"), "0x100e\n").unwrap();
        let err = require_nvme(&fake.paths(), &addr("0000:00:02.0")).unwrap_err();
        assert!(
            matches!(&err, HalError::NotNvme { class: 0x020000, vendor: 0x8086, device: 0x100e, driver, .. } if driver == "e1000"),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("not an NVMe controller")
                && text.contains("an Ethernet controller")
                && text.contains("0x020000")
                && text.contains("8086:100e")
                && text.contains("driver e1000"),
            "{text}"
        );
        let smbus = fake.device("0000:00:1f.3", None, None);
        std::fs::write(smbus.join("class"), "0x0c0500\n").unwrap();
        let text = require_nvme(&fake.paths(), &addr("0000:00:1f.3"))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("an SMBus controller") && text.contains("driver none"),
            "{text}"
        );
        assert!(matches!(
            require_nvme(&fake.paths(), &addr("0000:00:1f.0")),
            Err(HalError::NoSuchDevice { .. })
        ));
    }

    #[test]
    fn class_names() {
        assert_eq!(class_name(NVME_CLASS), "an NVMe controller");
        assert_eq!(
            class_name(0x010803),
            "a non-volatile memory controller that is not NVMe"
        );
        assert_eq!(class_name(0x010601), "a SATA controller");
        assert_eq!(class_name(0x060000), "a host bridge");
        assert_eq!(class_name(0xff0000), "a PCI device of another kind");
    }

    #[test]
    fn missing_device_is_no_such_device() {
        let fake = FakeSys::new();
        let err = require_vfio_driver(&fake.paths(), &addr("0000:00:11.0")).unwrap_err();
        assert!(matches!(err, HalError::NoSuchDevice { .. }), "{err}");
        assert!(err.to_string().contains("lspci -D"), "{err}");
    }

    #[test]
    fn names_the_current_driver() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("nvme"), Some(3));
        let err = require_vfio_driver(&fake.paths(), &addr("0000:00:10.0")).unwrap_err();
        match &err {
            HalError::NotBoundToVfio { address, driver } => {
                assert_eq!(address, "0000:00:10.0");
                assert_eq!(driver, "nvme");
            }
            other => panic!("wrong error {other:?}"),
        }
        assert!(
            err.to_string().contains("vfnvme setup 0000:00:10.0"),
            "{err}"
        );

        fake.device("0000:00:12.0", None, Some(4));
        let err = require_vfio_driver(&fake.paths(), &addr("0000:00:12.0")).unwrap_err();
        assert!(err.to_string().contains("no driver"), "{err}");

        fake.device("0000:00:13.0", Some("vfio-pci"), Some(5));
        assert!(require_vfio_driver(&fake.paths(), &addr("0000:00:13.0")).is_ok());
    }

    #[test]
    fn without_an_iommu_the_refusal_says_how_to_opt_in() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("uio_pci_generic"), None);
        fake.device("0000:00:11.0", Some("nvme"), None);
        fake.device("0000:00:12.0", None, None);
        let e = require_vfio_driver(&fake.paths(), &addr("0000:00:10.0")).unwrap_err();
        assert!(matches!(e, HalError::BoundForNoIommu { .. }), "{e}");
        for bdf in ["0000:00:10.0", "0000:00:11.0", "0000:00:12.0"] {
            let e = require_vfio_driver(&fake.paths(), &addr(bdf)).unwrap_err();
            let text = e.to_string();
            assert!(text.contains("opt in with --no-iommu"), "{bdf}: {text}");
            assert!(text.contains("write anywhere in memory"), "{bdf}: {text}");
        }
        let e = require_vfio_driver(&fake.paths(), &addr("0000:00:11.0")).unwrap_err();
        assert!(matches!(e, HalError::NoIommuGroup { .. }), "{e}");
    }

    #[test]
    fn reads_the_group_or_says_the_iommu_is_off() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(17));
        fake.device("0000:00:11.0", Some("vfio-pci"), None);
        assert_eq!(
            iommu_group(&fake.paths(), &addr("0000:00:10.0")).unwrap(),
            17
        );
        let err = iommu_group(&fake.paths(), &addr("0000:00:11.0")).unwrap_err();
        assert!(matches!(err, HalError::NoIommuGroup { .. }), "{err}");
        assert!(err.to_string().contains("intel_iommu=on"), "{err}");
    }

    #[test]
    fn names_the_device_that_blocks_the_group() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(9));
        fake.device("0000:00:10.1", None, Some(9));
        fake.device("0000:00:10.2", Some("pcieport"), Some(9));
        assert_eq!(group_blocker(&fake.paths(), 9).unwrap(), None);
        fake.device("0000:00:10.3", Some("e1000e"), Some(9));
        let err = not_viable_error(&fake.paths(), 9);
        match &err {
            HalError::GroupNotViable {
                group,
                blocker,
                driver,
            } => {
                assert_eq!(*group, 9);
                assert_eq!(blocker, "0000:00:10.3");
                assert_eq!(driver, "e1000e");
            }
            other => panic!("wrong error {other:?}"),
        }
        assert!(err.to_string().contains("bind every device"), "{err}");
    }
}
