//! [`VfioPlatform`]: the driver's [`Platform`] over a real device bound to vfio-pci — BAR0
//! registers, the device's type1 IOMMU domain, and the monotonic clock — or, in the explicit
//! no-IOMMU mode ([`VfioOptions::no_iommu`]), over a device bound to uio_pci_generic: BAR0 and
//! config space through sysfs ([`SysfsDevice`]) and physical DMA addresses
//! ([`PhysicalMapper`]). The driver sees the same [`Platform`] either way. The driver
//! re-exports this module as `vfnvme::vfio_platform`.

use crate::iommu::physical::PhysicalMapper;
use crate::pci::noiommu::{self, DmaMode, NoIommuBinding};
use crate::pci::sysfs as pci_sysfs;
use crate::platform::{Doorbell, Platform, RegisterIo};
use crate::sysfs_device::SysfsDevice;
use crate::vfio::RemovalNotice;
use crate::{Bar, DmaPool, HalError, PageSize, PciAddress, SysPaths, VfioDevice};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl RegisterIo for Bar {
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        Bar::read32(self, offset)
    }
    #[inline(always)]
    unsafe fn write32(&self, offset: usize, value: u32) {
        // SAFETY: the caller's guarantee (`RegisterIo::write32`) is `Bar::write32`'s.
        unsafe { Bar::write32(self, offset, value) }
    }
    #[inline(always)]
    fn read64(&self, offset: usize) -> u64 {
        Bar::read64(self, offset)
    }
    #[inline(always)]
    unsafe fn write64(&self, offset: usize, value: u64) {
        // SAFETY: the caller's guarantee (`RegisterIo::write64`) is `Bar::write64`'s.
        unsafe { Bar::write64(self, offset, value) }
    }
    fn size(&self) -> usize {
        Bar::len(self)
    }
    fn mmio_doorbell(&self, offset: usize) -> Option<crate::MmioDoorbell> {
        Bar::doorbell(self, offset).ok()
    }
    #[inline(always)]
    unsafe fn ring(&self, db: &Doorbell, value: u32) {
        // SAFETY: the caller's guarantee (`RegisterIo::ring`) is `Doorbell::ring_mmio`'s.
        unsafe { db.ring_mmio(self, value) }
    }
}

/// How to open a device through VFIO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VfioOptions {
    /// The page size backing DMA memory (falls back to 4 KiB pages when none are reserved;
    /// in no-IOMMU mode there is no fallback, and 4 KiB means 2 MiB).
    pub page_size: PageSize,
    /// The explicit no-IOMMU mode, never a fallback: the device must be bound to
    /// uio_pci_generic (`vfnvme setup --no-iommu`), DMA addresses are physical, and any device
    /// bug or misuse can write anywhere in memory. One warning per process.
    pub no_iommu: bool,
}

impl Default for VfioOptions {
    fn default() -> Self {
        VfioOptions {
            page_size: PageSize::Huge2M,
            no_iommu: false,
        }
    }
}

/// How the platform reaches its device.
#[derive(Debug)]
enum Access {
    /// Through VFIO: with an IOMMU, or in VFIO's no-IOMMU mode.
    Vfio(VfioDevice),
    /// Through sysfs (no-IOMMU mode).
    Sysfs(SysfsDevice),
}

/// A controller reached through VFIO.
#[derive(Debug)]
pub struct VfioPlatform {
    // Fields drop in this order, which matters: the pool unmaps its regions (if no buffer
    // outlives it and no other platform shares it) while the BAR mapping and the device fd
    // still hold the device. Releasing the device first lets a pending device request (unplug,
    // unbind) finish, after which the kernel (6.2 and later) detaches the group from the
    // container, and once the container's last group is gone its IOMMU is torn down and every
    // unmap fails ("the IOMMU refused to unmap 2097152 bytes"; `Type1Iommu::unmap` takes that
    // for "already unmapped").
    //
    // Platforms opened together (`open_shared`) hold clones of one pool and one container:
    // the last of them to go unmaps. The others' devices may be released (and removed by the
    // kernel) by then; their groups stay in the container while the container lives, or, when
    // the kernel detached a removed device's group, the other groups' domains keep every
    // mapping (type1 keeps the mappings per container, not per group), so the unmaps still
    // succeed. See docs/multipath.md.
    dma: DmaPool,
    regs: Bar,
    /// The device request eventfd (`None` on kernels without it): the kernel asking for the
    /// device back marks the controller removed ([`Platform::removed`]).
    notice: Option<Arc<RemovalNotice>>,
    access: Access,
    base: Instant,
    name: String,
}

impl VfioPlatform {
    /// Opens the controller at `addr` (e.g. `0000:00:10.0`): opens it through VFIO, enables
    /// memory decoding and bus mastering, maps BAR0 and makes a DMA pool in its IOMMU domain.
    /// The same as [`VfioPlatform::open_shared`] of one address.
    pub fn open(addr: &str, opts: VfioOptions) -> Result<Arc<VfioPlatform>, HalError> {
        Self::open_shared(&[addr], opts)?
            .pop()
            .ok_or(HalError::NoDevices)
    }

    /// Opens the controllers at `addrs` in ONE VFIO container with ONE DMA pool: every
    /// platform's [`Platform::dma`] is a clone of the same pool ([`DmaPool::same_pool`] is
    /// true), and every buffer is mapped at the same IOVA for every controller. That is what
    /// the paths of a multipath subsystem need (the driver's
    /// `vfnvme::multipath::Subsystem::add_controller`). The platforms come back in the order of
    /// `addrs`. Typed errors: a malformed address, one given twice, a device not bound to
    /// vfio-pci, a group that is not viable.
    pub fn open_shared(
        addrs: &[&str],
        opts: VfioOptions,
    ) -> Result<Vec<Arc<VfioPlatform>>, HalError> {
        let addresses = addrs
            .iter()
            .map(|a| PciAddress::parse(a))
            .collect::<Result<Vec<_>, _>>()?;
        if opts.no_iommu {
            return Self::open_no_iommu(&SysPaths::default(), &addresses, opts);
        }
        let devices = VfioDevice::open_shared(&addresses)?;
        let Some(first) = devices.first() else {
            return Err(HalError::NoDevices);
        };
        let dma = DmaPool::new(first.iommu(), opts.page_size);
        devices
            .into_iter()
            .map(|device| Self::wrap(device, dma.clone()))
            .collect()
    }

    /// The no-IOMMU mode: every device must be an NVMe controller bound to uio_pci_generic
    /// (BAR0 and config space through sysfs) or to vfio-pci in VFIO's no-IOMMU mode (group node
    /// `/dev/vfio/noiommu-N`: the device through VFIO, its groups in one no-IOMMU container).
    /// One DMA pool of physical addresses for all (a physical address is the same for every
    /// device, so multipath paths share it). The platforms come back in the order of `addrs`.
    pub fn open_no_iommu(
        paths: &SysPaths,
        addrs: &[PciAddress],
        opts: VfioOptions,
    ) -> Result<Vec<Arc<VfioPlatform>>, HalError> {
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
        // Which way each device is reached, checked for all before anything is opened.
        let mut via_vfio = Vec::with_capacity(addrs.len());
        for addr in addrs {
            pci_sysfs::require_nvme(paths, addr)?;
            match noiommu::mode_of(paths, addr) {
                Some(DmaMode::NoIommu(NoIommuBinding::UioPciGeneric)) => via_vfio.push(false),
                Some(DmaMode::NoIommu(NoIommuBinding::VfioNoIommu)) => via_vfio.push(true),
                Some(DmaMode::Iommu) => {
                    return Err(HalError::NotNoIommuGroup {
                        address: addr.to_string(),
                        group: pci_sysfs::iommu_group(paths, addr)?,
                    })
                }
                None => {
                    return Err(HalError::NotBoundForNoIommu {
                        address: addr.to_string(),
                        driver: pci_sysfs::driver(paths, addr)?
                            .unwrap_or_else(|| "no driver".to_string()),
                    })
                }
            }
        }
        let mut sysfs = Vec::new();
        for (addr, vfio) in addrs.iter().zip(&via_vfio) {
            if !vfio {
                sysfs.push(SysfsDevice::open(paths, *addr)?);
            }
        }
        let mapper = Arc::new(PhysicalMapper::new()?);
        let vfio_addrs: Vec<PciAddress> = addrs
            .iter()
            .zip(&via_vfio)
            .filter(|(_, v)| **v)
            .map(|(a, _)| *a)
            .collect();
        let vfio = if vfio_addrs.is_empty() {
            Vec::new()
        } else {
            VfioDevice::open_noiommu_shared_with(&vfio_addrs, paths, mapper.clone())?
        };
        noiommu::warn_once();
        let dma = DmaPool::new(mapper, opts.page_size);
        let (mut sysfs, mut vfio) = (sysfs.into_iter(), vfio.into_iter());
        via_vfio
            .iter()
            .map(|&v| {
                if v {
                    let d = vfio.next().ok_or(HalError::NoDevices)?;
                    Self::wrap(d, dma.clone())
                } else {
                    let d = sysfs.next().ok_or(HalError::NoDevices)?;
                    Self::wrap_sysfs(d, dma.clone())
                }
            })
            .collect()
    }

    /// Enables a device reached through sysfs (bus mastering on, INTx off) and maps BAR0.
    fn wrap_sysfs(device: SysfsDevice, dma: DmaPool) -> Result<Arc<VfioPlatform>, HalError> {
        device.enable_bus_master()?;
        let regs = device.bar0()?;
        Ok(Arc::new(VfioPlatform {
            regs,
            notice: None,
            dma,
            base: Instant::now(),
            name: device.address().to_string(),
            access: Access::Sysfs(device),
        }))
    }

    /// Enables the device, maps BAR0 and registers for the device request interrupt.
    fn wrap(device: VfioDevice, dma: DmaPool) -> Result<Arc<VfioPlatform>, HalError> {
        let address = device.address();
        device.enable_bus_master()?;
        let regs = device.bar0()?;
        let notice = match device.removal_notice() {
            Ok(n) => Some(n),
            Err(e) => {
                log::warn!(
                    "{address}: hot removal will only be noticed by all-ones registers: {e}"
                );
                None
            }
        };
        Ok(Arc::new(VfioPlatform {
            regs,
            notice,
            dma,
            base: Instant::now(),
            name: address.to_string(),
            access: Access::Vfio(device),
        }))
    }

    /// The VFIO device (config space, reset); `None` through uio_pci_generic (no VFIO device).
    pub fn device(&self) -> Option<&VfioDevice> {
        match &self.access {
            Access::Vfio(d) => Some(d),
            Access::Sysfs(_) => None,
        }
    }

    /// Whether this platform runs in the no-IOMMU mode (physical DMA addresses), through
    /// uio_pci_generic or VFIO's no-IOMMU mode.
    pub fn no_iommu(&self) -> bool {
        match &self.access {
            Access::Vfio(d) => d.no_iommu(),
            Access::Sysfs(_) => true,
        }
    }

    /// The device request eventfd registered at open (`None` if the kernel has none), e.g.
    /// to `poll(2)` on it.
    pub fn removal_notice(&self) -> Option<&Arc<RemovalNotice>> {
        self.notice.as_ref()
    }
}

impl Platform for VfioPlatform {
    type Regs = Bar;

    fn regs(&self) -> &Bar {
        &self.regs
    }

    fn dma(&self) -> &DmaPool {
        &self.dma
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn now_coarse_ns(&self) -> u64 {
        crate::time::coarse_now_ns()
    }

    fn relax(&self) {
        // Control path only (bounded waits such as CSTS.RDY).
        std::thread::sleep(Duration::from_micros(10));
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn removed(&self) -> bool {
        let gone = match &self.access {
            Access::Vfio(_) => false,
            Access::Sysfs(d) => d.gone(),
        };
        gone || self.regs.removed() || self.notice.as_ref().is_some_and(|n| n.requested())
    }

    fn pci_id(&self) -> Option<(u16, u16)> {
        match &self.access {
            Access::Vfio(d) => Some((d.config_read16(0).ok()?, d.config_read16(2).ok()?)),
            Access::Sysfs(d) => d.pci_id(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_address_is_a_typed_error() {
        let err = VfioPlatform::open("not-a-bdf", VfioOptions::default()).unwrap_err();
        assert!(matches!(err, HalError::BadPciAddress { .. }), "{err}");
        assert!(err.to_string().contains("0000:00:10.0"), "{err}");
    }

    #[test]
    fn absent_device_is_a_typed_error() {
        // Domain ffff never exists on the host (nor in the guest).
        let err = VfioPlatform::open("ffff:ff:1f.7", VfioOptions::default()).unwrap_err();
        assert!(matches!(err, HalError::NoSuchDevice { .. }), "{err}");
    }

    #[test]
    fn shared_open_refuses_bad_lists_with_typed_errors() {
        let err = VfioPlatform::open_shared(&[], VfioOptions::default()).unwrap_err();
        assert!(matches!(err, HalError::NoDevices), "{err}");
        let err = VfioPlatform::open_shared(&["ffff:ff:1f.7", "nope"], VfioOptions::default())
            .unwrap_err();
        assert!(matches!(err, HalError::BadPciAddress { .. }), "{err}");
        // The same address twice, in two spellings (the domain may be left out).
        let err = VfioPlatform::open_shared(&["0000:00:10.0", "00:10.0"], VfioOptions::default())
            .unwrap_err();
        assert!(matches!(err, HalError::DuplicateDevice { .. }), "{err}");
    }

    #[test]
    fn no_iommu_opens_through_sysfs_on_uio_pci_generic() {
        use crate::pci::test_sysfs::FakeSys;
        let fake = FakeSys::new();
        let dir = fake.device("0000:00:10.0", Some("uio_pci_generic"), None);
        fake.resources(&dir, 0);
        let addr = PciAddress::parse("0000:00:10.0").unwrap();
        let opts = VfioOptions {
            no_iommu: true,
            ..VfioOptions::default()
        };
        let p = VfioPlatform::open_no_iommu(&fake.paths(), &[addr], opts)
            .unwrap()
            .pop()
            .unwrap();
        assert!(p.no_iommu());
        assert!(p.device().is_none(), "no VFIO device in this mode");
        assert_eq!(p.regs().read32(0), 0x0040_ff7f, "BAR0 is resource0");
        assert_eq!(p.pci_id(), Some((0x1b36, 0x0010)));
        assert_eq!(
            p.dma().iommu().addressing(),
            crate::iommu::Addressing::Physical
        );
        assert!(!p.removed());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(p.removed(), "sysfs gone: removed");
    }

    #[test]
    fn no_iommu_refuses_other_bindings_and_non_nvme() {
        use crate::pci::test_sysfs::FakeSys;
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("nvme"), None);
        let nic = fake.device("0000:00:11.0", Some("uio_pci_generic"), None);
        std::fs::write(nic.join("class"), "0x020000\n").unwrap();
        let opts = VfioOptions {
            no_iommu: true,
            ..VfioOptions::default()
        };
        let a = |s: &str| PciAddress::parse(s).unwrap();
        let err =
            VfioPlatform::open_no_iommu(&fake.paths(), &[a("0000:00:10.0")], opts).unwrap_err();
        assert!(matches!(err, HalError::NotBoundForNoIommu { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("vfnvme setup --no-iommu 0000:00:10.0"),
            "{err}"
        );
        let err =
            VfioPlatform::open_no_iommu(&fake.paths(), &[a("0000:00:11.0")], opts).unwrap_err();
        assert!(matches!(err, HalError::NotNvme { .. }), "{err}");
        let err = VfioPlatform::open_no_iommu(&fake.paths(), &[], opts).unwrap_err();
        assert!(matches!(err, HalError::NoDevices), "{err}");
    }

    #[test]
    fn no_iommu_takes_vfio_pci_in_vfio_noiommu_mode_through_vfio() {
        use crate::pci::test_sysfs::FakeSys;
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(5));
        fake.device("0000:00:11.0", Some("vfio-pci"), Some(6));
        let dev = fake.dev_vfio(&[6]);
        std::fs::write(dev.join("noiommu-5"), "").unwrap();
        let opts = VfioOptions {
            no_iommu: true,
            ..VfioOptions::default()
        };
        let a = |s: &str| PciAddress::parse(s).unwrap();
        // 10.0: group node noiommu-5, so VFIO's no-IOMMU container is opened (here a plain
        // file: its first ioctl fails cleanly).
        let err =
            VfioPlatform::open_no_iommu(&fake.paths(), &[a("0000:00:10.0")], opts).unwrap_err();
        assert!(
            matches!(
                err,
                HalError::Ioctl {
                    op: "GET_API_VERSION",
                    ..
                }
            ),
            "{err}"
        );
        // 11.0: an IOMMU group: refused before anything is opened, naming the way out.
        let err = VfioPlatform::open_no_iommu(
            &fake.paths(),
            &[a("0000:00:10.0"), a("0000:00:11.0")],
            opts,
        )
        .unwrap_err();
        assert!(
            matches!(err, HalError::NotNoIommuGroup { group: 6, .. }),
            "{err}"
        );
    }

    #[test]
    fn without_an_iommu_the_refusal_says_how_to_opt_in() {
        let err = HalError::NoIommuGroup {
            address: "0000:00:10.0".to_string(),
        };
        let msg = err.to_string();
        assert!(msg.contains("intel_iommu=on"), "{msg}");
        assert!(msg.contains("--no-iommu"), "{msg}");
        assert!(msg.contains("write anywhere in memory"), "{msg}");
    }

    #[test]
    fn is_a_platform() {
        fn check<P: Platform>() {}
        check::<VfioPlatform>();
    }
}
