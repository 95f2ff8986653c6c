//! Opening a controller for the CLI: checks the binding first so that a device on the kernel
//! driver gets a clear "run `vfnvme setup`" instead of a VFIO error. `--no-iommu` (a global
//! flag, [`set_no_iommu`]) opens controllers bound to uio_pci_generic in the explicit no-IOMMU
//! mode; it is never a fallback.

use anyhow::{bail, Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vfnvme::hal::pci::noiommu::{DmaMode, NoIommuBinding, OPT_IN, UIO_PCI_GENERIC};
use vfnvme::hal::pci::sysfs::{self as pci_sysfs, VFIO_PCI};
use vfnvme::hal::{PciAddress, SysPaths};
use vfnvme::multipath::{HeadOptions, Subsystem};
use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme::{Controller, ControllerOptions};

/// Parses a PCI address given on the command line.
pub fn parse_bdf(text: &str) -> Result<PciAddress> {
    Ok(PciAddress::parse(text)?)
}

/// Whether `--no-iommu` was given (set once by `main`).
static NO_IOMMU: AtomicBool = AtomicBool::new(false);

/// Records `--no-iommu`: every controller this process opens is then opened in the no-IOMMU
/// mode (and only such controllers).
pub fn set_no_iommu(on: bool) {
    NO_IOMMU.store(on, Ordering::Relaxed);
}

/// Whether this process opens controllers in the no-IOMMU mode.
pub fn no_iommu() -> bool {
    NO_IOMMU.load(Ordering::Relaxed)
}

/// The DMA mode controllers are opened in, for `list`/`identify`.
pub fn mode() -> DmaMode {
    if no_iommu() {
        DmaMode::NoIommu(vfnvme::hal::pci::noiommu::NoIommuBinding::UioPciGeneric)
    } else {
        DmaMode::Iommu
    }
}

/// The DMA mode the controller at `bdf` is opened in: [`mode`], with the binding the device
/// has (uio_pci_generic, or vfio-pci in VFIO's no-IOMMU mode) when `--no-iommu` is on.
pub fn mode_of(bdf: &str) -> DmaMode {
    let found = PciAddress::parse(bdf)
        .ok()
        .and_then(|a| vfnvme::hal::pci::noiommu::mode_of(&SysPaths::default(), &a));
    match found {
        Some(m @ DmaMode::NoIommu(_)) if no_iommu() => m,
        _ => mode(),
    }
}

/// The platform options of this process's mode.
fn vfio_options() -> VfioOptions {
    VfioOptions {
        no_iommu: no_iommu(),
        ..VfioOptions::default()
    }
}

/// Fails unless `addr` is an NVMe controller bound to vfio-pci, saying what the device is
/// when it is not NVMe, and how to bind it when it is on another driver.
pub fn require_vfio(addr: &PciAddress) -> Result<()> {
    require_binding(&SysPaths::default(), addr, no_iommu())
}

/// Fails unless `addr` (under `paths`) is an NVMe controller bound for the mode asked:
/// vfio-pci with an IOMMU, or uio_pci_generic with `no_iommu`. Says how to bind it, and,
/// without an IOMMU, how to opt in to the no-IOMMU mode and what it risks.
pub fn require_binding(paths: &SysPaths, addr: &PciAddress, no_iommu: bool) -> Result<()> {
    pci_sysfs::require_nvme(paths, addr)?;
    let driver = pci_sysfs::driver(paths, addr)?;
    if no_iommu {
        return match driver {
            Some(d) if d == UIO_PCI_GENERIC => Ok(()),
            Some(d)
                if d == VFIO_PCI
                    && vfnvme::hal::pci::noiommu::mode_of(paths, addr)
                        == Some(DmaMode::NoIommu(NoIommuBinding::VfioNoIommu)) =>
            {
                Ok(())
            }
            Some(d) => bail!(
                "{addr} is bound to the {d} driver, not uio_pci_generic (nor vfio-pci in VFIO's no-IOMMU mode): --no-iommu needs it bound with `sudo vfnvme setup --no-iommu {addr}`"
            ),
            None => bail!(
                "{addr} is not bound to any driver: bind it with `sudo vfnvme setup --no-iommu {addr}`"
            ),
        };
    }
    let iommu = crate::setup::iommu_enabled(paths);
    match driver {
        Some(d) if d == VFIO_PCI && iommu => Ok(()),
        Some(d) if d == VFIO_PCI => bail!("{addr}: {}\n{OPT_IN}", crate::setup::IOMMU_ADVICE),
        Some(d) if d == UIO_PCI_GENERIC => bail!(
            "{addr} is bound to uio_pci_generic, the no-IOMMU mode: add --no-iommu to open it ({})\n{OPT_IN}",
            vfnvme::hal::pci::noiommu::RISK
        ),
        // Without an IOMMU, `vfnvme setup` would refuse too: say so now, with the opt-in line.
        Some(d) if !iommu => bail!(
            "{addr} is bound to the {d} driver, and vfio-pci cannot take it: {}\n{OPT_IN}",
            crate::setup::IOMMU_ADVICE
        ),
        None if !iommu => bail!(
            "{addr} is not bound to any driver, and vfio-pci cannot take it: {}\n{OPT_IN}",
            crate::setup::IOMMU_ADVICE
        ),
        Some(d) => bail!(
            "{addr} is bound to the {d} driver, not vfio-pci: bind it with `sudo vfnvme setup {addr}` (it will no longer be usable by the kernel until `vfnvme setup --reset {addr}`)"
        ),
        None => bail!(
            "{addr} is not bound to any driver: bind it to vfio-pci with `sudo vfnvme setup {addr}`"
        ),
    }
}

/// Opens the controller at `bdf` through VFIO (or sysfs, with `--no-iommu`) and brings it up.
pub fn open_controller(bdf: &str, options: ControllerOptions) -> Result<Controller<VfioPlatform>> {
    let addr = parse_bdf(bdf)?;
    require_vfio(&addr)?;
    let how = if no_iommu() {
        "in no-IOMMU mode"
    } else {
        "through VFIO"
    };
    let platform = VfioPlatform::open(&addr.to_string(), vfio_options())
        .with_context(|| format!("opening {addr} {how}"))?;
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
    let platforms = VfioPlatform::open_shared(&refs, vfio_options())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// A fake sysfs with one NVMe controller at 0000:00:10.0 bound to `driver`.
    struct Fake(PathBuf);
    impl Fake {
        fn new(tag: &str, driver: Option<&str>, iommu: bool) -> Fake {
            let root =
                std::env::temp_dir().join(format!("vfnvme-open-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            let dev = root.join("sys/devices/0000:00:10.0");
            std::fs::create_dir_all(&dev).unwrap();
            std::fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
            for (f, v) in [
                ("class", "0x010802\n"),
                ("vendor", "0x1b36\n"),
                ("device", "0x0010\n"),
            ] {
                std::fs::write(dev.join(f), v).unwrap();
            }
            std::os::unix::fs::symlink(&dev, root.join("sys/bus/pci/devices/0000:00:10.0"))
                .unwrap();
            if let Some(d) = driver {
                let dd = root.join("sys/bus/pci/drivers").join(d);
                std::fs::create_dir_all(&dd).unwrap();
                std::os::unix::fs::symlink(&dd, dev.join("driver")).unwrap();
            }
            std::fs::create_dir_all(root.join("sys/kernel/iommu_groups")).unwrap();
            if iommu {
                std::fs::create_dir_all(root.join("sys/kernel/iommu_groups/0")).unwrap();
            }
            Fake(root)
        }
        fn paths(&self) -> SysPaths {
            SysPaths::new(self.0.join("sys"), self.0.join("dev/vfio"))
        }
        fn root(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Fake {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.root());
        }
    }

    fn a() -> PciAddress {
        PciAddress::parse("0000:00:10.0").unwrap()
    }

    #[test]
    fn without_an_iommu_vfio_pci_is_refused_with_the_opt_in_line() {
        let f = Fake::new("noiommu-refusal", Some("vfio-pci"), false);
        let e = format!(
            "{:#}",
            require_binding(&f.paths(), &a(), false).unwrap_err()
        );
        assert!(e.contains("the IOMMU is off"), "{e}");
        assert!(e.contains("opt in with --no-iommu"), "{e}");
        assert!(e.contains("write anywhere in memory"), "{e}");
        let f = Fake::new("iommu-ok", Some("vfio-pci"), true);
        require_binding(&f.paths(), &a(), false).unwrap();
    }

    #[test]
    fn no_iommu_needs_uio_pci_generic_and_is_never_a_fallback() {
        let f = Fake::new("uio", Some("uio_pci_generic"), false);
        require_binding(&f.paths(), &a(), true).unwrap();
        let e = format!(
            "{:#}",
            require_binding(&f.paths(), &a(), false).unwrap_err()
        );
        assert!(e.contains("add --no-iommu"), "{e}");
        assert!(e.contains("opt in with --no-iommu"), "{e}");
        for driver in [Some("nvme"), None] {
            let f = Fake::new("nvme-without-iommu", driver, false);
            let e = format!(
                "{:#}",
                require_binding(&f.paths(), &a(), false).unwrap_err()
            );
            assert!(e.contains("the IOMMU is off"), "{e}");
            assert!(e.contains("opt in with --no-iommu"), "{e}");
            let f = Fake::new("nvme-with-iommu", driver, true);
            let e = format!(
                "{:#}",
                require_binding(&f.paths(), &a(), false).unwrap_err()
            );
            assert!(!e.contains("opt in"), "{e}");
        }
        let f = Fake::new("nvme-no-iommu", Some("nvme"), false);
        let e = format!("{:#}", require_binding(&f.paths(), &a(), true).unwrap_err());
        assert!(e.contains("vfnvme setup --no-iommu 0000:00:10.0"), "{e}");
        let f = Fake::new("vfio-no-iommu", Some("vfio-pci"), true);
        let e = format!("{:#}", require_binding(&f.paths(), &a(), true).unwrap_err());
        assert!(e.contains("not uio_pci_generic"), "{e}");
        // vfio-pci in VFIO's no-IOMMU mode (group node /dev/vfio/noiommu-9) is taken.
        let f = Fake::new("vfio-noiommu-mode", Some("vfio-pci"), false);
        let g = f.root().join("sys/kernel/iommu_groups/9");
        std::fs::create_dir_all(&g).unwrap();
        std::os::unix::fs::symlink(&g, f.root().join("sys/devices/0000:00:10.0/iommu_group"))
            .unwrap();
        std::fs::create_dir_all(f.root().join("dev/vfio")).unwrap();
        std::fs::write(f.root().join("dev/vfio/noiommu-9"), "").unwrap();
        require_binding(&f.paths(), &a(), true).unwrap();
    }

    #[test]
    fn the_flag_selects_the_mode() {
        assert!(!vfio_options().no_iommu || no_iommu());
        assert_eq!(mode().to_string() == "iommu", !no_iommu());
    }
}
