//! Opening a controller for the CLI: checks the binding first so that a device on the kernel
//! driver gets a clear "run `vfnvme setup`" instead of a VFIO error.

use anyhow::{bail, Context, Result};
use std::sync::Arc;
use vfnvme::dma::{pci_bind, pci_sysfs, pci_sysfs::VFIO_PCI, PciAddress, SysPaths};
use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme::{Controller, ControllerOptions};

/// Parses a PCI address given on the command line.
pub fn parse_bdf(text: &str) -> Result<PciAddress> {
    Ok(PciAddress::parse(text)?)
}

/// Fails unless `addr` is an NVMe controller bound to vfio-pci, saying what the device is
/// when it is not NVMe, and how to bind it when it is on another driver.
pub fn require_vfio(addr: &PciAddress) -> Result<()> {
    pci_sysfs::require_nvme(&SysPaths::default(), addr)?;
    match pci_bind::current_driver(addr)? {
        Some(d) if d == VFIO_PCI => Ok(()),
        Some(d) => bail!(
            "{addr} is bound to the {d} driver, not vfio-pci: bind it with `sudo vfnvme setup {addr}` (it will no longer be usable by the kernel until `vfnvme setup --reset {addr}`)"
        ),
        None => bail!(
            "{addr} is not bound to any driver: bind it to vfio-pci with `sudo vfnvme setup {addr}`"
        ),
    }
}

/// Opens the controller at `bdf` through VFIO and brings it up.
pub fn open_controller(bdf: &str, options: ControllerOptions) -> Result<Controller<VfioPlatform>> {
    let addr = parse_bdf(bdf)?;
    require_vfio(&addr)?;
    let platform = VfioPlatform::open(&addr.to_string(), VfioOptions::default())
        .with_context(|| format!("opening {addr} through VFIO"))?;
    open_platform(platform, &addr.to_string(), options)
}

/// Brings up a controller over any platform.
pub fn open_platform<P: vfnvme::platform::Platform>(
    platform: Arc<P>,
    name: &str,
    options: ControllerOptions,
) -> Result<Controller<P>> {
    Controller::new(platform, options).with_context(|| format!("bringing up the controller {name}"))
}
