//! The no-IOMMU mode's bindings and its one warning: which driver holds a device for it
//! (VFIO's no-IOMMU mode where the kernel has it, else uio_pci_generic), how to tell which
//! mode a device is in, and the risk the user opts into.

use crate::pci::address::PciAddress;
use crate::pci::paths::SysPaths;
use crate::pci::sysfs::{self, VFIO_PCI};
use std::path::PathBuf;
use std::sync::Once;

/// The generic UIO PCI driver: binds any device and gives user space its sysfs resources.
pub const UIO_PCI_GENERIC: &str = "uio_pci_generic";

/// What the user risks in no-IOMMU mode, said wherever the mode is offered.
pub const RISK: &str = "without an IOMMU nothing checks the device's DMA: any device bug or misuse can then write anywhere in memory";

/// The line added to every refusal for want of an IOMMU: how to opt in, and what it risks.
pub const OPT_IN: &str = crate::error::NO_IOMMU_OPT_IN;

/// How a device is held for the no-IOMMU mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoIommuBinding {
    /// vfio-pci with `enable_unsafe_noiommu_mode` (group node `/dev/vfio/noiommu-N`).
    VfioNoIommu,
    /// uio_pci_generic (BAR0 and config space through sysfs).
    UioPciGeneric,
}

impl NoIommuBinding {
    /// The kernel driver the device is bound to.
    pub fn driver(self) -> &'static str {
        match self {
            NoIommuBinding::VfioNoIommu => VFIO_PCI,
            NoIommuBinding::UioPciGeneric => UIO_PCI_GENERIC,
        }
    }
}

/// The DMA mode a controller is in, as `vfnvme list`/`identify` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaMode {
    /// Through an IOMMU (vfio-pci, type1).
    Iommu,
    /// Physical addresses, no IOMMU, through this binding.
    NoIommu(NoIommuBinding),
}

impl std::fmt::Display for DmaMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DmaMode::Iommu => f.write_str("iommu"),
            DmaMode::NoIommu(NoIommuBinding::VfioNoIommu) => f.write_str("no-iommu (vfio-pci)"),
            DmaMode::NoIommu(NoIommuBinding::UioPciGeneric) => {
                f.write_str("no-iommu (uio_pci_generic)")
            }
        }
    }
}

/// `/sys/module/vfio/parameters/enable_unsafe_noiommu_mode`: present when the kernel's VFIO
/// has the no-IOMMU mode (CONFIG_VFIO_NOIOMMU) and is loaded.
pub fn vfio_noiommu_param(paths: &SysPaths) -> PathBuf {
    paths
        .sys
        .join("module/vfio/parameters/enable_unsafe_noiommu_mode")
}

/// `/dev/vfio/noiommu-N`, the group node of a no-IOMMU VFIO group.
pub fn noiommu_group_node(paths: &SysPaths, group: u32) -> PathBuf {
    paths.dev_vfio.join(format!("noiommu-{group}"))
}

/// The binding `vfnvme setup --no-iommu` uses: VFIO's no-IOMMU mode when the kernel has it,
/// otherwise uio_pci_generic (Debian's kernels: no CONFIG_VFIO_NOIOMMU).
pub fn choose_binding(paths: &SysPaths) -> NoIommuBinding {
    if vfio_noiommu_param(paths).exists() {
        NoIommuBinding::VfioNoIommu
    } else {
        NoIommuBinding::UioPciGeneric
    }
}

/// The DMA mode of the device at `addr` from its binding, `None` when it is bound to neither
/// vfio-pci nor uio_pci_generic (e.g. still on the kernel's nvme driver).
pub fn mode_of(paths: &SysPaths, addr: &PciAddress) -> Option<DmaMode> {
    match sysfs::driver(paths, addr).ok()??.as_str() {
        UIO_PCI_GENERIC => Some(DmaMode::NoIommu(NoIommuBinding::UioPciGeneric)),
        VFIO_PCI => {
            let group = sysfs::iommu_group(paths, addr).ok();
            let noiommu = group.is_some_and(|g| noiommu_group_node(paths, g).exists());
            Some(if noiommu {
                DmaMode::NoIommu(NoIommuBinding::VfioNoIommu)
            } else {
                DmaMode::Iommu
            })
        }
        _ => None,
    }
}

/// Warns once per process that DMA is unchecked (no-IOMMU mode was asked for). On stderr, so
/// that the C ABI and the fio engine show it without a logger.
pub fn warn_once() {
    static WARNED: Once = Once::new();
    WARNED.call_once(|| {
        eprintln!("vfnvme: WARNING: no-IOMMU mode: DMA addresses are physical and {RISK}");
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::test_sysfs::FakeSys;

    fn a(s: &str) -> PciAddress {
        PciAddress::parse(s).unwrap()
    }

    #[test]
    fn binding_is_vfio_noiommu_only_where_the_kernel_has_it() {
        let fake = FakeSys::new();
        assert_eq!(choose_binding(&fake.paths()), NoIommuBinding::UioPciGeneric);
        let param = vfio_noiommu_param(&fake.paths());
        std::fs::create_dir_all(param.parent().unwrap()).unwrap();
        std::fs::write(&param, "N\n").unwrap();
        assert_eq!(choose_binding(&fake.paths()), NoIommuBinding::VfioNoIommu);
    }

    #[test]
    fn mode_follows_the_binding_and_the_group_node() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("uio_pci_generic"), None);
        fake.device("0000:00:11.0", Some("vfio-pci"), Some(3));
        fake.device("0000:00:12.0", Some("vfio-pci"), Some(4));
        fake.device("0000:00:13.0", Some("nvme"), None);
        let dev = fake.dev_vfio(&[3]);
        std::fs::write(dev.join("noiommu-4"), "").unwrap();
        let p = fake.paths();
        assert_eq!(
            mode_of(&p, &a("0000:00:10.0")),
            Some(DmaMode::NoIommu(NoIommuBinding::UioPciGeneric))
        );
        assert_eq!(mode_of(&p, &a("0000:00:11.0")), Some(DmaMode::Iommu));
        assert_eq!(
            mode_of(&p, &a("0000:00:12.0")),
            Some(DmaMode::NoIommu(NoIommuBinding::VfioNoIommu))
        );
        assert_eq!(mode_of(&p, &a("0000:00:13.0")), None);
        assert_eq!(
            DmaMode::NoIommu(NoIommuBinding::UioPciGeneric).to_string(),
            "no-iommu (uio_pci_generic)"
        );
    }

    #[test]
    fn the_opt_in_line_says_how_and_what_it_risks() {
        assert!(OPT_IN.contains("--no-iommu"));
        assert!(OPT_IN.contains("write anywhere in memory"));
    }
}
