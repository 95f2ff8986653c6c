//! Read-only PCI queries through sysfs: does a device exist, which driver has it, which IOMMU
//! group it is in, and which device of a group keeps the group from being usable by VFIO.

use crate::error::DmaError;
use crate::pci_address::PciAddress;
use crate::sys_paths::{io_error, SysPaths};
use std::path::Path;

/// The name of the VFIO PCI driver.
pub const VFIO_PCI: &str = "vfio-pci";

/// Fails with [`DmaError::NoSuchDevice`] unless the device's sysfs directory exists.
pub fn require_device(paths: &SysPaths, addr: &PciAddress) -> Result<(), DmaError> {
    if paths.pci_device(addr).exists() {
        Ok(())
    } else {
        Err(DmaError::NoSuchDevice {
            address: addr.to_string(),
        })
    }
}

/// The last path component a sysfs symlink points to (e.g. `nvme` for a `driver` link).
fn link_target_name(link: &Path) -> Result<Option<String>, DmaError> {
    match std::fs::read_link(link) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(link, e)),
    }
}

/// The driver bound to the device at `dir` (a sysfs device directory), if any.
pub(crate) fn driver_of_dir(dir: &Path) -> Result<Option<String>, DmaError> {
    link_target_name(&dir.join("driver"))
}

/// The driver the device is bound to, or `None` when it has none.
pub fn driver(paths: &SysPaths, addr: &PciAddress) -> Result<Option<String>, DmaError> {
    require_device(paths, addr)?;
    driver_of_dir(&paths.pci_device(addr))
}

/// Fails with [`DmaError::NotBoundToVfio`] unless the device is bound to vfio-pci.
pub fn require_vfio_driver(paths: &SysPaths, addr: &PciAddress) -> Result<(), DmaError> {
    match driver(paths, addr)? {
        Some(d) if d == VFIO_PCI => Ok(()),
        other => Err(DmaError::NotBoundToVfio {
            address: addr.to_string(),
            driver: other.unwrap_or_else(|| "no driver".to_string()),
        }),
    }
}

/// The device's IOMMU group number.
pub fn iommu_group(paths: &SysPaths, addr: &PciAddress) -> Result<u32, DmaError> {
    require_device(paths, addr)?;
    let no_group = || DmaError::NoIommuGroup {
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
pub fn group_blocker(paths: &SysPaths, group: u32) -> Result<Option<(String, String)>, DmaError> {
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
pub fn not_viable_error(paths: &SysPaths, group: u32) -> DmaError {
    let (blocker, driver) = match group_blocker(paths, group) {
        Ok(Some(b)) => b,
        _ => (
            "an unidentified device".to_string(),
            "a host driver".to_string(),
        ),
    };
    DmaError::GroupNotViable {
        group,
        blocker,
        driver,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_sysfs::FakeSys;

    fn addr(s: &str) -> PciAddress {
        PciAddress::parse(s).unwrap()
    }

    #[test]
    fn missing_device_is_no_such_device() {
        let fake = FakeSys::new();
        let err = require_vfio_driver(&fake.paths(), &addr("0000:00:11.0")).unwrap_err();
        assert!(matches!(err, DmaError::NoSuchDevice { .. }), "{err}");
        assert!(err.to_string().contains("lspci -D"), "{err}");
    }

    #[test]
    fn names_the_current_driver() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("nvme"), Some(3));
        let err = require_vfio_driver(&fake.paths(), &addr("0000:00:10.0")).unwrap_err();
        match &err {
            DmaError::NotBoundToVfio { address, driver } => {
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
    fn reads_the_group_or_says_the_iommu_is_off() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(17));
        fake.device("0000:00:11.0", Some("vfio-pci"), None);
        assert_eq!(
            iommu_group(&fake.paths(), &addr("0000:00:10.0")).unwrap(),
            17
        );
        let err = iommu_group(&fake.paths(), &addr("0000:00:11.0")).unwrap_err();
        assert!(matches!(err, DmaError::NoIommuGroup { .. }), "{err}");
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
            DmaError::GroupNotViable {
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
