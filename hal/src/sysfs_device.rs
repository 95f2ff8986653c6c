//! A PCI device reached through sysfs alone, for the no-IOMMU mode: BAR0 through the
//! `resource0` mapping, config space through the `config` file. The mapping is a [`Bar`], so
//! it is registered with the SIGBUS handler like a VFIO BAR ([`crate::vfio::sigbus`]): an
//! access after the device was removed reads all ones and marks it removed.

use crate::error::HalError;
use crate::pci::address::PciAddress;
use crate::pci::paths::{io_error, SysPaths};
use crate::vfio::Bar;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// The command register's offset in config space.
const PCI_COMMAND: u64 = 0x04;
/// Command register: memory space decoding.
pub const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: bus mastering (the device may start DMA).
pub const PCI_COMMAND_MASTER: u16 = 1 << 2;
/// Command register: legacy INTx interrupts disabled (a polled driver takes none).
pub const PCI_COMMAND_INTX_DISABLE: u16 = 1 << 10;

/// A device's sysfs files, open: `config` and `resource0`.
#[derive(Debug)]
pub struct SysfsDevice {
    address: PciAddress,
    dir: PathBuf,
    config: File,
    resource0: File,
}

impl SysfsDevice {
    /// Opens the `config` and `resource0` files of `addr` under `paths` (read-write: root).
    pub fn open(paths: &SysPaths, addr: PciAddress) -> Result<Self, HalError> {
        crate::pci::sysfs::require_device(paths, &addr)?;
        let dir = paths.pci_device(&addr);
        let open = |name: &str| {
            let path = dir.join(name);
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| io_error(&path, e))
        };
        Ok(SysfsDevice {
            address: addr,
            config: open("config")?,
            resource0: open("resource0")?,
            dir,
        })
    }

    /// The device's address.
    pub fn address(&self) -> PciAddress {
        self.address
    }

    /// Maps BAR0 (the whole `resource0` file, whose size is the BAR's).
    pub fn bar0(&self) -> Result<Bar, HalError> {
        let path = self.dir.join("resource0");
        let len = self
            .resource0
            .metadata()
            .map_err(|e| io_error(&path, e))?
            .len();
        let len = usize::try_from(len).unwrap_or(0);
        if len == 0 {
            return Err(HalError::BarOffset {
                bar: 0,
                offset: 0,
                size: 0,
            });
        }
        Bar::map(&self.resource0, 0, len, 0).map_err(|e| io_error(&path, e))
    }

    /// Whether the device's sysfs directory is gone (removed, unplugged).
    pub fn gone(&self) -> bool {
        !self.dir.exists()
    }

    fn config_error(&self, e: std::io::Error) -> HalError {
        if self.gone() {
            return HalError::DeviceGone {
                address: self.address.to_string(),
                path: self.dir.display().to_string(),
            };
        }
        io_error(&self.dir.join("config"), e)
    }

    /// Reads a config-space word (little-endian). A removed device reads all ones.
    pub fn config_read16(&self, offset: u64) -> Result<u16, HalError> {
        let mut b = [0u8; 2];
        self.config
            .read_exact_at(&mut b, offset)
            .map_err(|e| self.config_error(e))?;
        Ok(u16::from_le_bytes(b))
    }

    /// Writes a config-space word.
    pub fn config_write16(&self, offset: u64, value: u16) -> Result<(), HalError> {
        self.config
            .write_all_at(&value.to_le_bytes(), offset)
            .map_err(|e| self.config_error(e))
    }

    /// Turns on memory decoding and bus mastering and turns off INTx in the command register.
    /// A command register of all ones means the device is gone ([`HalError::DeviceGone`]).
    pub fn enable_bus_master(&self) -> Result<(), HalError> {
        let cmd = self.config_read16(PCI_COMMAND)?;
        if cmd == u16::MAX {
            return Err(HalError::DeviceGone {
                address: self.address.to_string(),
                path: self.dir.display().to_string(),
            });
        }
        let want = cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE;
        if want != cmd {
            self.config_write16(PCI_COMMAND, want)?;
        }
        Ok(())
    }

    /// The vendor and device ID from config space.
    pub fn pci_id(&self) -> Option<(u16, u16)> {
        Some((self.config_read16(0).ok()?, self.config_read16(2).ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::test_sysfs::FakeSys;

    /// A fake device on uio_pci_generic with regular files for `config` and `resource0`.
    fn device(fake: &FakeSys, bdf: &str, command: u16) -> PathBuf {
        let dir = fake.device(bdf, Some("uio_pci_generic"), None);
        fake.resources(&dir, command);
        dir
    }

    fn addr(s: &str) -> PciAddress {
        PciAddress::parse(s).unwrap()
    }

    #[test]
    fn bar0_maps_resource0_and_reads_registers() {
        let fake = FakeSys::new();
        device(&fake, "0000:00:10.0", 0);
        let dev = SysfsDevice::open(&fake.paths(), addr("0000:00:10.0")).unwrap();
        let bar = dev.bar0().unwrap();
        assert_eq!(bar.len(), 0x4000);
        assert_eq!(bar.read32(0), 0x0040_ff7f);
        assert_eq!(bar.read32(0x4000), u32::MAX, "outside reads all ones");
        assert!(!bar.removed());
        assert_eq!(dev.pci_id(), Some((0x1b36, 0x0010)));
    }

    #[test]
    fn bus_mastering_on_and_intx_off() {
        let fake = FakeSys::new();
        let dir = device(&fake, "0000:00:10.0", 0x0400 | 0x0001);
        let dev = SysfsDevice::open(&fake.paths(), addr("0000:00:10.0")).unwrap();
        dev.enable_bus_master().unwrap();
        let config = std::fs::read(dir.join("config")).unwrap();
        let cmd = u16::from_le_bytes([config[4], config[5]]);
        assert_eq!(cmd, 0x0001 | 0x0002 | 0x0004 | 0x0400, "{cmd:#x}");
        assert_eq!(config.len(), 256, "only the command register was written");
    }

    #[test]
    fn all_ones_and_vanished_sysfs_mean_gone() {
        let fake = FakeSys::new();
        let dir = device(&fake, "0000:00:10.0", 0xffff);
        let dev = SysfsDevice::open(&fake.paths(), addr("0000:00:10.0")).unwrap();
        let err = dev.enable_bus_master().unwrap_err();
        assert!(matches!(err, HalError::DeviceGone { .. }), "{err}");
        assert!(!dev.gone());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(dev.gone(), "the sysfs directory vanished");
    }

    #[test]
    fn an_absent_device_or_missing_resource_is_a_typed_error() {
        let fake = FakeSys::new();
        let err = SysfsDevice::open(&fake.paths(), addr("0000:00:11.0")).unwrap_err();
        assert!(matches!(err, HalError::NoSuchDevice { .. }), "{err}");
        fake.device("0000:00:12.0", Some("uio_pci_generic"), None);
        let err = SysfsDevice::open(&fake.paths(), addr("0000:00:12.0")).unwrap_err();
        assert!(matches!(err, HalError::Io { .. }), "{err}");
    }
}
