//! `vfnvme setup`: bind controllers to vfio-pci (driver_override + drivers_probe, one device at a
//! time), reserve hugepages, and check the IOMMU and RLIMIT_MEMLOCK; `--reset` gives controllers
//! back to the kernel's nvme driver.

use crate::kernel_nvme;
use crate::output::say;
use anyhow::{bail, Context, Result};
use clap::Args;
use vfnvme::dma::{hugepages, memlock, pci_bind, pci_sysfs, PageSize, PciAddress, SysPaths};

/// Hugepages (2 MiB) reserved when none are and `--hugepages` is not given: 512 MiB.
pub const DEFAULT_HUGEPAGES: u64 = 256;

/// Arguments of `vfnvme setup`.
#[derive(Args, Debug)]
pub struct SetupArgs {
    /// Controllers to bind to vfio-pci. None: every NVMe controller not in use by the system.
    #[arg(value_name = "BDF")]
    pub bdfs: Vec<String>,
    /// Make sure at least this many 2 MiB hugepages are reserved (default: 256 if none are).
    #[arg(long, value_name = "N")]
    pub hugepages: Option<u64>,
    /// Give this controller back to the kernel's nvme driver (repeatable).
    #[arg(long, value_name = "BDF")]
    pub reset: Vec<String>,
    /// Bind a named controller even if its block devices are mounted or held.
    #[arg(long)]
    pub force: bool,
    /// Only show what would be done.
    #[arg(long)]
    pub dry_run: bool,
}

/// Whether the IOMMU is on: `/sys/kernel/iommu_groups` has entries.
pub fn iommu_enabled(paths: &SysPaths) -> bool {
    std::fs::read_dir(paths.sys.join("kernel/iommu_groups")).is_ok_and(|mut d| d.next().is_some())
}

/// The advice when the IOMMU is off.
pub const IOMMU_ADVICE: &str = "the IOMMU is off (/sys/kernel/iommu_groups is empty): enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on (Intel) or amd_iommu=on (AMD) on the kernel command line (e.g. GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot); vfio-pci cannot take a device without it";

/// One controller the plan covers and what to do with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Bind to vfio-pci (currently on this driver, or none).
    Bind(PciAddress, Option<String>),
    /// Already on vfio-pci.
    AlreadyBound(PciAddress),
    /// Skipped: in use by the system (reasons).
    InUse(PciAddress, Vec<String>),
    /// Give back to nvme.
    Reset(PciAddress),
}

/// Decides what to do for `args` on the system under `paths` with `mounts` (/proc/mounts).
pub fn plan(args: &SetupArgs, paths: &SysPaths, mounts: &str) -> Result<Vec<Action>> {
    let binder = pci_bind::PciBinder::new(paths.clone());
    let mut actions = Vec::new();
    for r in &args.reset {
        actions.push(Action::Reset(PciAddress::parse(r)?));
    }
    let named = !args.bdfs.is_empty();
    let targets: Vec<PciAddress> = if named {
        args.bdfs
            .iter()
            .map(|b| PciAddress::parse(b))
            .collect::<Result<_, _>>()?
    } else if args.reset.is_empty() {
        binder
            .list_nvme_devices()
            .context("listing NVMe controllers")?
            .into_iter()
            .map(|d| d.address)
            .collect()
    } else {
        Vec::new()
    };
    for addr in targets {
        let driver = binder.current_driver(&addr)?;
        if driver.as_deref() == Some(pci_sysfs::VFIO_PCI) {
            actions.push(Action::AlreadyBound(addr));
            continue;
        }
        let why = kernel_nvme::in_use(paths, &addr, mounts);
        let forced = named && args.force;
        if !why.is_empty() && !forced {
            actions.push(Action::InUse(addr, why));
        } else {
            actions.push(Action::Bind(addr, driver));
        }
    }
    Ok(actions)
}

/// Runs `vfnvme setup`.
pub fn run(args: &SetupArgs) -> Result<()> {
    let paths = SysPaths::default();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let actions = plan(args, &paths, &mounts)?;
    let iommu = iommu_enabled(&paths);
    let binder = pci_bind::PciBinder::default();
    let mut bound = Vec::new();
    let mut refused = Vec::new();
    if actions.is_empty() {
        say!("no NVMe controllers (PCI class 0x010802) found");
    }
    for a in &actions {
        match a {
            Action::Reset(addr) => {
                say!(
                    "{addr}: {} the kernel's nvme driver",
                    if args.dry_run {
                        "would give it back to"
                    } else {
                        "giving it back to"
                    }
                );
                if !args.dry_run {
                    binder
                        .bind_to_driver(addr, "nvme")
                        .with_context(|| format!("binding {addr} to nvme"))?;
                }
            }
            Action::AlreadyBound(addr) => {
                say!("{addr}: already on vfio-pci");
                bound.push(*addr);
            }
            Action::InUse(addr, why) => {
                say!(
                    "{addr}: NOT binding it, the system uses it: {}",
                    why.join("; ")
                );
                refused.push(*addr);
            }
            Action::Bind(addr, from) => {
                if !iommu {
                    bail!("cannot bind {addr} to vfio-pci: {IOMMU_ADVICE}");
                }
                say!(
                    "{addr}: {} vfio-pci (was {})",
                    if args.dry_run {
                        "would bind it to"
                    } else {
                        "binding to"
                    },
                    from.as_deref().unwrap_or("unbound")
                );
                if !args.dry_run {
                    binder
                        .bind_to_vfio(addr)
                        .with_context(|| format!("binding {addr} to vfio-pci"))?;
                }
                bound.push(*addr);
            }
        }
    }
    for addr in &bound {
        match pci_sysfs::iommu_group(&paths, addr) {
            Ok(g) => say!("{addr}: IOMMU group {g}, {}", paths.vfio_group(g).display()),
            Err(e) => say!("{addr}: {e}"),
        }
    }
    if !iommu {
        say!("warning: {IOMMU_ADVICE}");
    }
    check_hugepages(args)?;
    check_memlock()?;
    if !refused.is_empty() && args.bdfs.is_empty() {
        say!(
            "skipped {} controller(s) in use; to take one anyway (its data stays, the kernel loses it): vfnvme setup --force BDF",
            refused.len()
        );
    } else if !refused.is_empty() {
        bail!("refused to bind controllers the system uses; unmount them first or add --force");
    }
    if let Some(addr) = bound.first() {
        say!("next: vfnvme identify {addr}; vfnvme perf --device {addr} --qd 32 --time 5");
        say!("undo: vfnvme setup --reset {addr}");
    }
    Ok(())
}

fn check_hugepages(args: &SetupArgs) -> Result<()> {
    let status = hugepages::status(PageSize::Huge2M)?;
    let total = status.map(|s| s.total).unwrap_or(0);
    let wanted = match args.hugepages {
        Some(n) => n,
        None if total == 0 => DEFAULT_HUGEPAGES,
        None => total,
    };
    if wanted > total {
        if args.dry_run {
            say!("hugepages: would reserve {wanted} x 2 MiB (now {total})");
        } else {
            let got = hugepages::reserve_hugepages(wanted)?;
            say!("hugepages: reserved {got} x 2 MiB (was {total})");
        }
    } else {
        let free = status.map(|s| s.free).unwrap_or(0);
        say!("hugepages: {total} x 2 MiB reserved, {free} free");
    }
    Ok(())
}

fn check_memlock() -> Result<()> {
    let l = memlock::current_limits()?;
    let fmt = |v: u64| {
        if v == u64::MAX || v == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            format!("{} MiB", v >> 20)
        }
    };
    let root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| memlock::status_has_ipc_lock(&s));
    say!(
        "RLIMIT_MEMLOCK: soft {}, hard {}{}",
        fmt(l.soft),
        fmt(l.hard),
        if root {
            " (this user has CAP_IPC_LOCK, so the limit does not apply)"
        } else if l.hard < (1 << 30) {
            " — too low for DMA memory: `ulimit -l unlimited` or LimitMEMLOCK=infinity / memlock in /etc/security/limits.conf"
        } else {
            ""
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    struct Fake(PathBuf);
    impl Fake {
        fn new(tag: &str) -> Fake {
            let d = std::env::temp_dir().join(format!("vfnvme-setup-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(d.join("sys/bus/pci/devices")).unwrap();
            std::fs::create_dir_all(d.join("sys/bus/pci/drivers/nvme")).unwrap();
            std::fs::create_dir_all(d.join("sys/bus/pci/drivers/vfio-pci")).unwrap();
            Fake(d)
        }
        fn paths(&self) -> SysPaths {
            SysPaths::new(self.0.join("sys"), self.0.join("dev/vfio"))
        }
        fn device(&self, bdf: &str, driver: &str, blockdev: Option<&str>) {
            let real = self.0.join("sys/devices").join(bdf);
            std::fs::create_dir_all(&real).unwrap();
            std::fs::write(real.join("class"), "0x010802\n").unwrap();
            std::fs::write(real.join("vendor"), "0x1b36\n").unwrap();
            std::fs::write(real.join("device"), "0x0010\n").unwrap();
            std::os::unix::fs::symlink(
                self.0.join("sys/bus/pci/drivers").join(driver),
                real.join("driver"),
            )
            .unwrap();
            std::os::unix::fs::symlink(&real, self.0.join("sys/bus/pci/devices").join(bdf))
                .unwrap();
            if let Some(b) = blockdev {
                let ns = real.join("nvme/nvme0").join(b);
                std::fs::create_dir_all(&ns).unwrap();
                std::fs::write(ns.join("dev"), "259:0\n").unwrap();
            }
        }
    }
    impl Drop for Fake {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn args(bdfs: &[&str], force: bool) -> SetupArgs {
        SetupArgs {
            bdfs: bdfs.iter().map(|s| s.to_string()).collect(),
            hugepages: None,
            reset: vec![],
            force,
            dry_run: true,
        }
    }

    fn a(s: &str) -> PciAddress {
        PciAddress::parse(s).unwrap()
    }

    #[test]
    fn without_names_binds_only_what_is_free() {
        let f = Fake::new("free");
        f.device("0000:00:10.0", "nvme", Some("nvme0n1"));
        f.device("0000:00:11.0", "vfio-pci", None);
        f.device("0000:00:12.0", "nvme", None);
        let mounts = "/dev/nvme0n1 / ext4 rw 0 0\n";
        let p = plan(&args(&[], false), &f.paths(), mounts).unwrap();
        assert!(
            matches!(&p[0], Action::InUse(x, why) if *x == a("0000:00:10.0") && why[0].contains("mounted on /")),
            "{p:?}"
        );
        assert_eq!(p[1], Action::AlreadyBound(a("0000:00:11.0")));
        assert_eq!(p[2], Action::Bind(a("0000:00:12.0"), Some("nvme".into())));
        // --force does not apply without names.
        let p = plan(&args(&[], true), &f.paths(), mounts).unwrap();
        assert!(matches!(&p[0], Action::InUse(..)), "{p:?}");
    }

    #[test]
    fn a_named_mounted_device_needs_force() {
        let f = Fake::new("force");
        f.device("0000:00:10.0", "nvme", Some("nvme0n1"));
        let mounts = "/dev/nvme0n1 /data xfs rw 0 0\n";
        let p = plan(&args(&["0000:00:10.0"], false), &f.paths(), mounts).unwrap();
        assert!(matches!(&p[0], Action::InUse(..)), "{p:?}");
        let p = plan(&args(&["0000:00:10.0"], true), &f.paths(), mounts).unwrap();
        assert_eq!(p[0], Action::Bind(a("0000:00:10.0"), Some("nvme".into())));
    }

    #[test]
    fn bad_and_absent_addresses_are_errors() {
        let f = Fake::new("bad");
        let e = plan(&args(&["nonsense"], false), &f.paths(), "").unwrap_err();
        assert!(e.to_string().contains("DDDD:BB:DD.F"), "{e}");
        let e = plan(&args(&["0000:00:1f.0"], false), &f.paths(), "").unwrap_err();
        assert!(e.to_string().contains("no PCI device"), "{e}");
    }

    #[test]
    fn iommu_detection() {
        let f = Fake::new("iommu");
        assert!(!iommu_enabled(&f.paths()));
        std::fs::create_dir_all(f.0.join("sys/kernel/iommu_groups/0")).unwrap();
        assert!(iommu_enabled(&f.paths()));
        let _ = Path::new("/");
    }
}
