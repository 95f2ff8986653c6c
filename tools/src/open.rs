//! Opening a controller for the CLI: checks the binding first so that a device on the kernel
//! driver gets a clear "run `vfnvme setup`" instead of a VFIO error.

use anyhow::{bail, Context, Result};
use std::sync::Arc;
use vfnvme::hal::pci::bind as pci_bind;
use vfnvme::hal::pci::sysfs::{self as pci_sysfs, VFIO_PCI};
use vfnvme::hal::{PciAddress, SysPaths};
use vfnvme::multipath::{HeadOptions, Subsystem};
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

/// Opens the controllers of `head` (addresses joined by `+`, e.g.
/// `0000:00:10.0+0000:00:11.0`) in one VFIO container with one DMA pool, brings each up and
/// forms their subsystem (they must share a SUBNQN and report CMIC multi-controller).
/// Returns it with a name for reports (the addresses).
pub fn open_head(
    head: &str,
    options: ControllerOptions,
) -> Result<(Arc<Subsystem<VfioPlatform>>, String)> {
    let addrs = head
        .split('+')
        .map(parse_bdf)
        .collect::<Result<Vec<_>>>()
        .with_context(|| format!("--head {head}: give controller addresses joined by +, e.g. 0000:00:10.0+0000:00:11.0"))?;
    for a in &addrs {
        require_vfio(a)?;
    }
    let names: Vec<String> = addrs.iter().map(PciAddress::to_string).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let platforms = VfioPlatform::open_shared(&refs, VfioOptions::default())
        .with_context(|| format!("opening {} in one VFIO container", names.join(", ")))?;
    let mut ctrls = Vec::new();
    for (p, name) in platforms.into_iter().zip(&names) {
        ctrls.push(Arc::new(open_platform(p, name, options.clone())?));
    }
    let mp = Subsystem::from_controllers(ctrls, HeadOptions::default()).with_context(|| {
        format!("--head {head}: these controllers are not the paths of one NVM subsystem (see `vfnvme list --subsystems`)")
    })?;
    Ok((mp, names.join("+")))
}

/// Brings up a controller over any platform.
pub fn open_platform<P: vfnvme::platform::Platform>(
    platform: Arc<P>,
    name: &str,
    options: ControllerOptions,
) -> Result<Controller<P>> {
    Controller::new(platform, options).with_context(|| format!("bringing up the controller {name}"))
}
