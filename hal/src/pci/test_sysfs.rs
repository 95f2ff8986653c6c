//! A fake sysfs tree in a temporary directory, for tests.

use crate::pci::paths::SysPaths;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A temporary directory laid out like `/sys` and `/dev/vfio`, removed on drop.
pub(crate) struct FakeSys {
    root: PathBuf,
}

impl FakeSys {
    pub(crate) fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "vfnvme-fake-sys-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        for d in [
            "sys/bus/pci/devices",
            "sys/bus/pci/drivers",
            "sys/kernel/iommu_groups",
            "sys/devices/pci0000:00",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("sys/bus/pci/drivers_probe"), "").unwrap();
        FakeSys { root }
    }

    pub(crate) fn paths(&self) -> SysPaths {
        SysPaths::new(self.root.join("sys"), self.root.join("dev/vfio"))
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Adds a driver directory with its `unbind`/`bind` files.
    pub(crate) fn driver(&self, name: &str) -> PathBuf {
        let d = self.root.join("sys/bus/pci/drivers").join(name);
        std::fs::create_dir_all(&d).unwrap();
        for f in ["bind", "unbind"] {
            if !d.join(f).exists() {
                std::fs::write(d.join(f), "").unwrap();
            }
        }
        d
    }

    /// Adds (or rebinds) a PCI device, optionally bound to `driver` and in IOMMU group `group`.
    pub(crate) fn device(&self, bdf: &str, driver: Option<&str>, group: Option<u32>) -> PathBuf {
        let real = self.root.join("sys/devices/pci0000:00").join(bdf);
        std::fs::create_dir_all(&real).unwrap();
        for (f, v) in [
            ("driver_override", "(null)\n"),
            ("class", "0x010802\n"),
            ("vendor", "0x1b36\n"),
            ("device", "0x0010\n"),
        ] {
            if !real.join(f).exists() {
                std::fs::write(real.join(f), v).unwrap();
            }
        }
        let link = self.root.join("sys/bus/pci/devices").join(bdf);
        if !link.exists() {
            std::os::unix::fs::symlink(&real, &link).unwrap();
        }
        let _ = std::fs::remove_file(real.join("driver"));
        if let Some(d) = driver {
            let dd = self.driver(d);
            std::os::unix::fs::symlink(&dd, real.join("driver")).unwrap();
        }
        if let Some(g) = group {
            let gd = self
                .root
                .join("sys/kernel/iommu_groups")
                .join(g.to_string());
            std::fs::create_dir_all(gd.join("devices")).unwrap();
            let _ = std::fs::remove_file(real.join("iommu_group"));
            std::os::unix::fs::symlink(&gd, real.join("iommu_group")).unwrap();
            let member = gd.join("devices").join(bdf);
            if !member.exists() {
                std::os::unix::fs::symlink(&real, member).unwrap();
            }
        }
        real
    }

    /// Creates `/dev/vfio` with regular files standing in for the nodes.
    pub(crate) fn dev_vfio(&self, groups: &[u32]) -> PathBuf {
        let d = self.root.join("dev/vfio");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("vfio"), "").unwrap();
        for g in groups {
            std::fs::write(d.join(g.to_string()), "").unwrap();
        }
        d
    }

    /// Gives the device at `dir` regular files standing in for `config` (256 bytes, NVMe
    /// vendor/device 1b36:0010, command register `command`) and `resource0` (16 KiB, CAP's low
    /// dword 0x0040ff7f at offset 0).
    pub(crate) fn resources(&self, dir: &Path, command: u16) {
        let mut config = vec![0u8; 256];
        config[0..2].copy_from_slice(&0x1b36u16.to_le_bytes());
        config[2..4].copy_from_slice(&0x0010u16.to_le_bytes());
        config[4..6].copy_from_slice(&command.to_le_bytes());
        std::fs::write(dir.join("config"), config).unwrap();
        let mut bar = vec![0u8; 0x4000];
        bar[0..4].copy_from_slice(&0x0040_ff7fu32.to_le_bytes());
        std::fs::write(dir.join("resource0"), bar).unwrap();
    }

    pub(crate) fn read(&self, rel: &Path) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap()
    }
}

impl Drop for FakeSys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
