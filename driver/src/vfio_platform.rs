//! [`VfioPlatform`]: the driver's [`Platform`] over a real device bound to vfio-pci — BAR0
//! registers, the device's type1 IOMMU domain, and the monotonic clock.

use crate::platform::{Doorbell, Platform, RegisterIo};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vfnvme_dma::{Bar, DmaError, DmaPool, PageSize, PciAddress, VfioDevice};

impl RegisterIo for Bar {
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        Bar::read32(self, offset)
    }
    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        Bar::write32(self, offset, value)
    }
    #[inline(always)]
    fn read64(&self, offset: usize) -> u64 {
        Bar::read64(self, offset)
    }
    #[inline(always)]
    fn write64(&self, offset: usize, value: u64) {
        Bar::write64(self, offset, value)
    }
    fn size(&self) -> usize {
        Bar::len(self)
    }
    fn mmio_doorbell(&self, offset: usize) -> Option<vfnvme_dma::MmioDoorbell> {
        Bar::doorbell(self, offset).ok()
    }
    #[inline(always)]
    fn ring(&self, db: &Doorbell, value: u32) {
        db.ring_mmio(self, value)
    }
}

/// How to open a device through VFIO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VfioOptions {
    /// The page size backing DMA memory (falls back to 4 KiB pages when none are reserved).
    pub page_size: PageSize,
}

impl Default for VfioOptions {
    fn default() -> Self {
        VfioOptions {
            page_size: PageSize::Huge2M,
        }
    }
}

/// A controller reached through VFIO.
#[derive(Debug)]
pub struct VfioPlatform {
    // Fields drop in this order, which matters: the pool unmaps its regions (if no buffer
    // outlives it) while the BAR mapping and the device fd still hold the device. Releasing the
    // device first lets a pending device request (unplug, unbind) finish, after which the
    // kernel detaches the group from the container and tears its IOMMU down, and every unmap
    // then fails ("the IOMMU refused to unmap 2097152 bytes").
    dma: DmaPool,
    regs: Bar,
    device: VfioDevice,
    base: Instant,
    name: String,
}

impl VfioPlatform {
    /// Opens the controller at `addr` (e.g. `0000:00:10.0`): opens it through VFIO, enables
    /// memory decoding and bus mastering, maps BAR0 and makes a DMA pool in its IOMMU domain.
    pub fn open(addr: &str, opts: VfioOptions) -> Result<Arc<VfioPlatform>, DmaError> {
        let address = PciAddress::parse(addr)?;
        let device = VfioDevice::open(address)?;
        device.enable_bus_master()?;
        let regs = device.bar0()?;
        let dma = DmaPool::new(device.iommu(), opts.page_size);
        Ok(Arc::new(VfioPlatform {
            regs,
            dma,
            base: Instant::now(),
            name: address.to_string(),
            device,
        }))
    }

    /// The VFIO device (config space, reset).
    pub fn device(&self) -> &VfioDevice {
        &self.device
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

    fn relax(&self) {
        // Control path only (bounded waits such as CSTS.RDY).
        std::thread::sleep(Duration::from_micros(10));
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn pci_id(&self) -> Option<(u16, u16)> {
        let vendor = self.device.config_read16(0).ok()?;
        let device = self.device.config_read16(2).ok()?;
        Some((vendor, device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_address_is_a_typed_error() {
        let err = VfioPlatform::open("not-a-bdf", VfioOptions::default()).unwrap_err();
        assert!(matches!(err, DmaError::BadPciAddress { .. }), "{err}");
        assert!(err.to_string().contains("0000:00:10.0"), "{err}");
    }

    #[test]
    fn absent_device_is_a_typed_error() {
        // Domain ffff never exists on the host (nor in the guest).
        let err = VfioPlatform::open("ffff:ff:1f.7", VfioOptions::default()).unwrap_err();
        assert!(matches!(err, DmaError::NoSuchDevice { .. }), "{err}");
    }

    #[test]
    fn is_a_platform() {
        fn check<P: Platform>() {}
        check::<VfioPlatform>();
    }
}
