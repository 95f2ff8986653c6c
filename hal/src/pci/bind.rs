//! Changing which driver a PCI device is bound to, through sysfs, one device at a time:
//! `driver_override` plus `drivers_probe`, never `new_id` (which would grab every device with
//! the same vendor/device ID).

use crate::error::HalError;
use crate::pci::address::PciAddress;
use crate::pci::paths::{io_error, SysPaths};
use crate::pci::sysfs::{self as pci_sysfs, VFIO_PCI};
pub use crate::pci::sysfs::{PciDeviceInfo, NVME_CLASS};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How [`PciBinder::bind_to_driver_nonblocking`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebind {
    /// The device is on the new driver.
    Done,
    /// The kernel is still waiting for the device's user to let go; the helper process with
    /// this pid finishes the rebind when it does.
    StillWaiting {
        /// The helper's pid.
        helper: u32,
    },
}

/// Binds devices to drivers through a sysfs tree.
#[derive(Debug, Clone)]
pub struct PciBinder {
    paths: SysPaths,
    modprobe: PathBuf,
    /// How many times to re-check (10 ms apart) that a bind took effect.
    settle_polls: u32,
}

impl Default for PciBinder {
    fn default() -> Self {
        PciBinder::new(SysPaths::default())
    }
}

fn write_sysfs(path: &Path, text: &str) -> Result<(), HalError> {
    use std::io::Write;
    // Like `echo text > path`: O_TRUNC is harmless on sysfs attributes.
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| io_error(path, e))
}

impl PciBinder {
    /// A binder over the sysfs tree in `paths`, loading modules with `modprobe` from `$PATH`.
    pub fn new(paths: SysPaths) -> Self {
        PciBinder {
            paths,
            modprobe: PathBuf::from("modprobe"),
            settle_polls: 50,
        }
    }

    /// Uses `program` instead of `modprobe` (for tests and unusual systems).
    pub fn with_modprobe(mut self, program: impl Into<PathBuf>) -> Self {
        self.modprobe = program.into();
        self
    }

    /// Sets how many 10 ms re-checks a bind gets to take effect (0 = check once).
    pub fn with_settle_polls(mut self, polls: u32) -> Self {
        self.settle_polls = polls;
        self
    }

    /// The device's current driver, or `None`.
    pub fn current_driver(&self, addr: &PciAddress) -> Result<Option<String>, HalError> {
        pci_sysfs::driver(&self.paths, addr)
    }

    /// Loads `driver`'s module unless sysfs already lists the driver.
    fn ensure_driver_loaded(&self, addr: &PciAddress, driver: &str) -> Result<(), HalError> {
        if self.paths.pci_driver(driver).exists() {
            return Ok(());
        }
        let bind_err = |detail: String| HalError::Bind {
            address: addr.to_string(),
            driver: driver.to_string(),
            detail,
        };
        let status = std::process::Command::new(&self.modprobe)
            .arg(driver)
            .status()
            .map_err(|e| bind_err(format!("could not run {}: {e}", self.modprobe.display())))?;
        if !status.success() || !self.paths.pci_driver(driver).exists() {
            return Err(bind_err(format!(
                "`{} {driver}` did not load the driver ({status})",
                self.modprobe.display()
            )));
        }
        Ok(())
    }

    fn unbind(&self, addr: &PciAddress) -> Result<(), HalError> {
        if let Some(old) = self.current_driver(addr)? {
            write_sysfs(
                &self.paths.pci_driver(&old).join("unbind"),
                &addr.to_string(),
            )?;
        }
        Ok(())
    }

    /// Probes the device and checks that `driver` took it.
    fn probe_and_check(&self, addr: &PciAddress, driver: &str) -> Result<(), HalError> {
        write_sysfs(&self.paths.drivers_probe(), &addr.to_string())?;
        let mut polls = self.settle_polls;
        loop {
            let now = self.current_driver(addr)?;
            if now.as_deref() == Some(driver) {
                return Ok(());
            }
            if polls == 0 {
                return Err(HalError::Bind {
                    address: addr.to_string(),
                    driver: driver.to_string(),
                    detail: format!(
                        "after probing it is bound to {}",
                        now.as_deref().unwrap_or("no driver")
                    ),
                });
            }
            polls -= 1;
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Binds the device to vfio-pci (loading it if needed): sets `driver_override`, unbinds the
    /// current driver, reprobes. Does nothing if it is already bound to vfio-pci.
    pub fn bind_to_vfio(&self, addr: &PciAddress) -> Result<(), HalError> {
        self.bind_overridden(addr, VFIO_PCI)
    }

    /// Binds the device for the no-IOMMU mode: uio_pci_generic, or vfio-pci after turning on
    /// VFIO's `enable_unsafe_noiommu_mode` (kernels with CONFIG_VFIO_NOIOMMU). Through
    /// `driver_override`, like [`PciBinder::bind_to_vfio`].
    pub fn bind_for_no_iommu(
        &self,
        addr: &PciAddress,
        binding: crate::pci::noiommu::NoIommuBinding,
    ) -> Result<(), HalError> {
        if binding == crate::pci::noiommu::NoIommuBinding::VfioNoIommu {
            write_sysfs(&crate::pci::noiommu::vfio_noiommu_param(&self.paths), "Y")?;
        }
        self.bind_overridden(addr, binding.driver())
    }

    /// Sets `driver_override` to `driver` (loading it if needed), unbinds the current driver,
    /// reprobes. Does nothing if the device is bound to `driver` already.
    fn bind_overridden(&self, addr: &PciAddress, driver: &str) -> Result<(), HalError> {
        if self.current_driver(addr)?.as_deref() == Some(driver) {
            return Ok(());
        }
        self.ensure_driver_loaded(addr, driver)?;
        write_sysfs(&self.paths.pci_device(addr).join("driver_override"), driver)?;
        self.unbind(addr)?;
        self.probe_and_check(addr, driver)
    }

    /// Binds the device to `driver` (e.g. `nvme`): clears `driver_override`, unbinds the
    /// current driver, reprobes.
    pub fn bind_to_driver(&self, addr: &PciAddress, driver: &str) -> Result<(), HalError> {
        if driver == VFIO_PCI {
            return self.bind_to_vfio(addr);
        }
        if self.current_driver(addr)?.as_deref() == Some(driver) {
            return Ok(());
        }
        self.ensure_driver_loaded(addr, driver)?;
        write_sysfs(&self.paths.pci_device(addr).join("driver_override"), "\n")?;
        self.unbind(addr)?;
        self.probe_and_check(addr, driver)
    }

    /// Binds the device to `driver` like [`PciBinder::bind_to_driver`], but never blocks on a
    /// process that holds the device: the kernel's unbind of vfio-pci waits, uninterruptibly
    /// once signalled, until the device's user lets go. The unbind and reprobe run in a helper
    /// process (`sh`); if it has not finished within `wait`, this returns
    /// [`Rebind::StillWaiting`] and the helper finishes the rebind when the holder lets go.
    pub fn bind_to_driver_nonblocking(
        &self,
        addr: &PciAddress,
        driver: &str,
        wait: Duration,
    ) -> Result<Rebind, HalError> {
        if self.current_driver(addr)?.as_deref() == Some(driver) {
            return Ok(Rebind::Done);
        }
        self.ensure_driver_loaded(addr, driver)?;
        let override_text = if driver == VFIO_PCI { VFIO_PCI } else { "\n" };
        write_sysfs(
            &self.paths.pci_device(addr).join("driver_override"),
            override_text,
        )?;
        let bind_err = |detail: String| HalError::Bind {
            address: addr.to_string(),
            driver: driver.to_string(),
            detail,
        };
        let probe = self.paths.drivers_probe();
        let script = match self.current_driver(addr)? {
            Some(old) => format!(
                "echo \"$1\" > '{}' && echo \"$1\" > '{}'",
                self.paths.pci_driver(&old).join("unbind").display(),
                probe.display()
            ),
            None => format!("echo \"$1\" > '{}'", probe.display()),
        };
        let mut child = std::process::Command::new("sh")
            .args(["-c", &script, "sh", &addr.to_string()])
            // No inherited pipes: a caller capturing vfnvme's output must not wait for the
            // helper, which may outlive vfnvme.
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| bind_err(format!("could not run sh for the unbind: {e}")))?;
        let start = std::time::Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => break,
                Ok(Some(status)) => {
                    return Err(bind_err(format!(
                        "the unbind or reprobe through sysfs failed ({status})"
                    )))
                }
                Ok(None) if start.elapsed() >= wait => {
                    return Ok(Rebind::StillWaiting { helper: child.id() })
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(bind_err(format!("waiting for the unbind: {e}"))),
            }
        }
        let mut polls = self.settle_polls;
        loop {
            let now = self.current_driver(addr)?;
            if now.as_deref() == Some(driver) {
                return Ok(Rebind::Done);
            }
            if polls == 0 {
                return Err(bind_err(format!(
                    "after probing it is bound to {}",
                    now.as_deref().unwrap_or("no driver")
                )));
            }
            polls -= 1;
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every NVMe controller (class 0x010802) on the system, sorted by address.
    pub fn list_nvme_devices(&self) -> Result<Vec<PciDeviceInfo>, HalError> {
        let dir = self.paths.pci_devices();
        let entries = std::fs::read_dir(&dir).map_err(|e| io_error(&dir, e))?;
        let mut out = Vec::new();
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(address) = PciAddress::parse(&name) else {
                continue;
            };
            let info = pci_sysfs::info_of_dir(address, &entry.path())?;
            if info.class == NVME_CLASS {
                out.push(info);
            }
        }
        out.sort_by_key(|d| d.address);
        Ok(out)
    }
}

/// The device's current driver, or `None`.
pub fn current_driver(addr: &PciAddress) -> Result<Option<String>, HalError> {
    PciBinder::default().current_driver(addr)
}

/// Binds the device to vfio-pci; see [`PciBinder::bind_to_vfio`].
pub fn bind_to_vfio(addr: &PciAddress) -> Result<(), HalError> {
    PciBinder::default().bind_to_vfio(addr)
}

/// Binds the device to `driver`; see [`PciBinder::bind_to_driver`].
pub fn bind_to_driver(addr: &PciAddress, driver: &str) -> Result<(), HalError> {
    PciBinder::default().bind_to_driver(addr, driver)
}

/// Every NVMe controller on the system; see [`PciBinder::list_nvme_devices`].
pub fn list_nvme_devices() -> Result<Vec<PciDeviceInfo>, HalError> {
    PciBinder::default().list_nvme_devices()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::test_sysfs::FakeSys;

    fn addr(s: &str) -> PciAddress {
        PciAddress::parse(s).unwrap()
    }

    fn binder(fake: &FakeSys) -> PciBinder {
        PciBinder::new(fake.paths())
            .with_settle_polls(0)
            .with_modprobe("/nonexistent/modprobe")
    }

    #[test]
    fn bind_to_vfio_writes_override_unbinds_and_probes() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("nvme"), Some(3));
        fake.driver("vfio-pci");
        // The fake kernel does not rebind, so the final check fails and says so.
        let err = binder(&fake)
            .bind_to_vfio(&addr("0000:00:10.0"))
            .unwrap_err();
        assert!(
            matches!(&err, HalError::Bind { driver, detail, .. }
                if driver == "vfio-pci" && detail.contains("nvme")),
            "{err}"
        );
        let real = Path::new("sys/devices/pci0000:00/0000:00:10.0");
        assert_eq!(fake.read(&real.join("driver_override")), "vfio-pci");
        assert_eq!(
            fake.read(Path::new("sys/bus/pci/drivers/nvme/unbind")),
            "0000:00:10.0"
        );
        assert_eq!(
            fake.read(Path::new("sys/bus/pci/drivers_probe")),
            "0000:00:10.0"
        );
    }

    #[test]
    fn bind_succeeds_when_the_driver_took_it() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(3));
        binder(&fake).bind_to_vfio(&addr("0000:00:10.0")).unwrap();
        // Already on nvme: nothing to do.
        fake.device("0000:00:11.0", Some("nvme"), Some(4));
        binder(&fake)
            .bind_to_driver(&addr("0000:00:11.0"), "nvme")
            .unwrap();
    }

    #[test]
    fn bind_to_driver_clears_the_override() {
        let fake = FakeSys::new();
        let real = fake.device("0000:00:10.0", Some("vfio-pci"), Some(3));
        std::fs::write(real.join("driver_override"), "vfio-pci").unwrap();
        fake.driver("nvme");
        let err = binder(&fake)
            .bind_to_driver(&addr("0000:00:10.0"), "nvme")
            .unwrap_err();
        assert!(matches!(err, HalError::Bind { .. }), "{err}");
        assert_eq!(
            std::fs::read_to_string(real.join("driver_override")).unwrap(),
            "\n"
        );
        assert_eq!(
            fake.read(Path::new("sys/bus/pci/drivers/vfio-pci/unbind")),
            "0000:00:10.0"
        );
    }

    #[test]
    fn nonblocking_rebind_writes_through_a_helper() {
        let fake = FakeSys::new();
        let real = fake.device("0000:00:10.0", Some("vfio-pci"), Some(3));
        fake.driver("nvme");
        // The fake kernel does not rebind: the helper's writes land, the final check fails.
        let err = binder(&fake)
            .bind_to_driver_nonblocking(&addr("0000:00:10.0"), "nvme", Duration::from_secs(60))
            .unwrap_err();
        assert!(
            matches!(&err, HalError::Bind { detail, .. } if detail.contains("vfio-pci")),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(real.join("driver_override")).unwrap(),
            "\n"
        );
        assert_eq!(
            fake.read(Path::new("sys/bus/pci/drivers/vfio-pci/unbind")),
            "0000:00:10.0\n"
        );
        assert_eq!(
            fake.read(Path::new("sys/bus/pci/drivers_probe")),
            "0000:00:10.0\n"
        );
        // Already there: nothing to do.
        fake.device("0000:00:11.0", Some("nvme"), Some(4));
        assert_eq!(
            binder(&fake)
                .bind_to_driver_nonblocking(&addr("0000:00:11.0"), "nvme", Duration::ZERO)
                .unwrap(),
            Rebind::Done
        );
    }

    #[test]
    fn nonblocking_rebind_returns_while_the_kernel_waits() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("vfio-pci"), Some(3));
        fake.driver("nvme");
        // A FIFO as `unbind`: the helper's write blocks until someone reads it, as the
        // kernel's unbind blocks until the device's user lets go.
        let unbind = fake.path("sys/bus/pci/drivers/vfio-pci/unbind");
        std::fs::remove_file(&unbind).unwrap();
        nix::unistd::mkfifo(&unbind, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let r = binder(&fake)
            .bind_to_driver_nonblocking(&addr("0000:00:10.0"), "nvme", Duration::from_millis(100))
            .unwrap();
        let Rebind::StillWaiting { helper } = r else {
            panic!("{r:?}")
        };
        // Let the helper go: read the FIFO (the "holder lets go").
        let got = std::fs::read_to_string(&unbind).unwrap();
        assert_eq!(got, "0000:00:10.0\n");
        assert!(helper > 0);
    }

    #[test]
    fn missing_module_and_missing_device_are_typed() {
        let fake = FakeSys::new();
        fake.device("0000:00:10.0", Some("nvme"), Some(3));
        let err = binder(&fake)
            .bind_to_vfio(&addr("0000:00:10.0"))
            .unwrap_err();
        assert!(
            matches!(&err, HalError::Bind { detail, .. } if detail.contains("could not run")),
            "{err}"
        );
        assert!(err.to_string().contains("dmesg"), "{err}");
        let err = binder(&fake)
            .bind_to_vfio(&addr("0000:00:1f.0"))
            .unwrap_err();
        assert!(matches!(err, HalError::NoSuchDevice { .. }), "{err}");
    }

    #[test]
    fn lists_only_nvme_controllers() {
        let fake = FakeSys::new();
        fake.device("0000:00:11.0", None, Some(3));
        fake.device("0000:00:10.0", Some("nvme"), Some(2));
        let nic = fake.device("0000:00:02.0", Some("e1000e"), Some(1));
        std::fs::write(nic.join("class"), "0x020000\n").unwrap();
        let list = binder(&fake).list_nvme_devices().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].address, addr("0000:00:10.0"));
        assert_eq!(list[0].driver.as_deref(), Some("nvme"));
        assert_eq!((list[0].vendor, list[0].device), (0x1b36, 0x0010));
        assert_eq!(list[1].driver, None);
    }
}
