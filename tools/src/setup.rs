//! `vfnvme setup`: bind controllers to vfio-pci (driver_override + drivers_probe, one device at a
//! time), reserve hugepages, and check the IOMMU and RLIMIT_MEMLOCK; `--reset` gives controllers
//! back to the kernel's nvme driver.

use crate::output::say;
use crate::{holders, kernel_nvme};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::Path;
use std::time::Duration;
use vfnvme::hal::iommu::memlock;
use vfnvme::hal::mem::hugepages;
use vfnvme::hal::pci::bind::Rebind;
use vfnvme::hal::pci::noiommu::{self, NoIommuBinding};
use vfnvme::hal::pci::{bind as pci_bind, sysfs as pci_sysfs};
use vfnvme::hal::{PageSize, PciAddress, SysPaths};

/// Hugepages (2 MiB) reserved when none are and `--hugepages` is not given: 512 MiB.
pub const DEFAULT_HUGEPAGES: u64 = 256;

/// Arguments of `vfnvme setup`.
#[derive(Args, Debug, Clone)]
pub struct SetupArgs {
    /// Controllers to bind to vfio-pci. None: every NVMe controller not in use by the system.
    /// Or one of setup.sh's words: `status` (controllers, drivers, NUMA nodes, block devices,
    /// hugepages per node), `reset` (give every controller on vfio-pci or uio_pci_generic back
    /// to the kernel), `cleanup` (what a crashed process left), `config` (the default).
    /// setup.sh's environment is read too: HUGEMEM (MiB) or NRHUGE (pages), HUGENODE (NUMA
    /// nodes to reserve on, e.g. 0,1), PCI_ALLOWED and PCI_BLOCKED (addresses).
    #[arg(value_name = "BDF")]
    pub bdfs: Vec<String>,
    /// Make sure at least this many 2 MiB hugepages are reserved (default: 256 if none are).
    #[arg(long, value_name = "N")]
    pub hugepages: Option<u64>,
    /// Give this controller back to the kernel's nvme driver (repeatable).
    #[arg(long, value_name = "BDF")]
    pub reset: Vec<String>,
    /// Bind a named device even if it is not an NVMe controller or its block devices are
    /// mounted, open or held; reset a controller even if a process holds it.
    #[arg(long)]
    pub force: bool,
    /// Also make the hugepage count survive a reboot: write it to
    /// /etc/sysctl.d/60-vfnvme-hugepages.conf (applied at boot by systemd-sysctl/procps).
    #[arg(long)]
    pub persist: bool,
    /// Only show what would be done.
    #[arg(long)]
    pub dry_run: bool,
    /// Let this user (name or uid) run vfnvme on the controllers bound: their VFIO group
    /// files, and an unlimited locked-memory limit (setup.sh's TARGET_USER, also read).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// The global `--no-iommu`: bind for the explicit no-IOMMU mode (uio_pci_generic) instead
    /// of vfio-pci; set by `main`.
    #[arg(skip)]
    pub no_iommu: bool,
}

/// The driver `setup` binds controllers to: vfio-pci, or with `--no-iommu` the no-IOMMU
/// binding ([`no_iommu_binding`]: vfio-pci where the kernel has VFIO's no-IOMMU mode, else
/// uio_pci_generic).
pub fn target_driver(paths: &SysPaths, no_iommu: bool) -> &'static str {
    if no_iommu {
        no_iommu_binding(paths).0.driver()
    } else {
        pci_sysfs::VFIO_PCI
    }
}

/// The no-IOMMU binding `setup --no-iommu` uses: VFIO's no-IOMMU mode where the kernel has it
/// (`enable_unsafe_noiommu_mode` exists; setup turns it on), else uio_pci_generic (Debian's
/// kernels), with a note saying which and why.
pub fn no_iommu_binding(paths: &SysPaths) -> (NoIommuBinding, Option<&'static str>) {
    match noiommu::choose_binding(paths) {
        NoIommuBinding::VfioNoIommu => (
            NoIommuBinding::VfioNoIommu,
            Some("this kernel has VFIO's no-IOMMU mode: turning on enable_unsafe_noiommu_mode and binding vfio-pci (groups /dev/vfio/noiommu-N)"),
        ),
        b => (b, None),
    }
}

/// The `name` VFIO gives the fake IOMMU groups of its no-IOMMU mode.
const VFIO_NOIOMMU_GROUP_NAME: &str = "vfio-noiommu";

/// Whether the IOMMU is on: `/sys/kernel/iommu_groups` has entries other than the groups VFIO's
/// no-IOMMU mode makes (their `name` is `vfio-noiommu`: they stand for no IOMMU).
pub fn iommu_enabled(paths: &SysPaths) -> bool {
    std::fs::read_dir(paths.sys.join("kernel/iommu_groups")).is_ok_and(|d| {
        d.flatten().any(|g| {
            std::fs::read_to_string(g.path().join("name"))
                .map_or(true, |n| n.trim() != VFIO_NOIOMMU_GROUP_NAME)
        })
    })
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
    /// Refused: not an NVMe controller (what it is).
    NotNvme(PciAddress, String),
    /// Give back to nvme.
    Reset(PciAddress),
    /// Not given back: processes hold it through VFIO (who).
    ResetRefused(PciAddress, Vec<String>),
}

/// The processes that hold the controller at `addr` through VFIO: its group node
/// `/dev/vfio/<group>` or its device node `/dev/vfio/devices/vfio<N>`, under `proc`.
pub fn vfio_holders(paths: &SysPaths, proc: &Path, addr: &PciAddress) -> Vec<holders::Holder> {
    use std::os::unix::fs::MetadataExt;
    let mut nodes = Vec::new();
    if let Ok(g) = pci_sysfs::iommu_group(paths, addr) {
        nodes.push(paths.vfio_group(g));
    }
    if let Ok(d) = std::fs::read_dir(paths.pci_device(addr).join("vfio-dev")) {
        for e in d.filter_map(|e| e.ok()) {
            nodes.push(paths.dev_vfio.join("devices").join(e.file_name()));
        }
    }
    let wanted = holders::Wanted {
        paths: nodes.iter().map(|n| n.display().to_string()).collect(),
        block_devs: Vec::new(),
        char_devs: nodes
            .iter()
            .filter_map(|n| std::fs::metadata(n).ok())
            .map(|m| m.rdev())
            .filter(|r| *r != 0)
            .collect(),
    };
    if wanted.paths.is_empty() {
        return Vec::new();
    }
    holders::processes_holding(proc, &wanted)
}

/// Decides what to do for `args` on the system under `paths` and `proc` (normally `/proc`)
/// with `mounts` (/proc/mounts).
pub fn plan(args: &SetupArgs, paths: &SysPaths, proc: &Path, mounts: &str) -> Result<Vec<Action>> {
    let binder = pci_bind::PciBinder::new(paths.clone());
    let mut actions = Vec::new();
    for r in &args.reset {
        let addr = PciAddress::parse(r)?;
        let info = pci_sysfs::device_info(paths, &addr)?;
        if let (Some(e), false) = (pci_sysfs::not_nvme_error(&info), args.force) {
            actions.push(Action::NotNvme(addr, e.to_string()));
            continue;
        }
        let held: Vec<String> = if info.driver.as_deref() == Some(pci_sysfs::VFIO_PCI) {
            vfio_holders(paths, proc, &addr)
                .into_iter()
                .map(|h| h.to_string())
                .collect()
        } else {
            Vec::new()
        };
        if !held.is_empty() && !args.force {
            actions.push(Action::ResetRefused(addr, held));
        } else {
            actions.push(Action::Reset(addr));
        }
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
    let forced = named && args.force;
    for addr in targets {
        let info = pci_sysfs::device_info(paths, &addr)?;
        if info.driver.as_deref() == Some(target_driver(paths, args.no_iommu)) {
            actions.push(Action::AlreadyBound(addr));
            continue;
        }
        if let (Some(e), false) = (pci_sysfs::not_nvme_error(&info), forced) {
            actions.push(Action::NotNvme(addr, e.to_string()));
            continue;
        }
        let why = kernel_nvme::in_use(paths, proc, &addr, mounts);
        if !why.is_empty() && !forced {
            actions.push(Action::InUse(addr, why));
        } else {
            actions.push(Action::Bind(addr, info.driver));
        }
    }
    Ok(actions)
}

/// How long `setup --reset` waits for the kernel to unbind a controller before it leaves the
/// rest to a helper process (the unbind waits for the device's user to let go).
const RESET_WAIT: Duration = Duration::from_secs(5);

/// Runs `vfnvme setup`.
pub fn run(args: &SetupArgs) -> Result<()> {
    use crate::setup_sh::{self, Mode};
    let paths = SysPaths::default();
    let env = setup_sh::Env::from_process()?;
    let mut args = args.clone();
    match setup_sh::mode_of(&args.bdfs) {
        Some(Mode::Status) => {
            crate::output::text(&setup_sh::status(&paths)?);
            return Ok(());
        }
        Some(Mode::Cleanup) => {
            crate::output::text(&setup_sh::cleanup(&paths)?);
            return Ok(());
        }
        Some(Mode::Reset) => {
            args.bdfs.clear();
            let ours = [pci_sysfs::VFIO_PCI, noiommu::UIO_PCI_GENERIC];
            args.reset = pci_bind::PciBinder::new(paths.clone())
                .list_nvme_devices()
                .context("listing NVMe controllers")?
                .into_iter()
                .filter(|d| d.driver.as_deref().is_some_and(|dr| ours.contains(&dr)))
                .filter(|d| env.admits(&d.address))
                .map(|d| d.address.to_string())
                .collect();
            if args.reset.is_empty() {
                say!("no controller on vfio-pci or uio_pci_generic to give back");
                return Ok(());
            }
        }
        Some(Mode::Config) => args.bdfs.clear(),
        None => {}
    }
    if args.hugepages.is_none() {
        args.hugepages = env.hugepages;
    }
    if args.user.is_none() {
        args.user = env.user.clone();
    }
    let user = args
        .user
        .as_deref()
        .map(crate::setup_user::TargetUser::resolve)
        .transpose()?;
    if user.is_some() && args.no_iommu {
        bail!("--user with --no-iommu: uio_pci_generic and physical addresses need root; run as root, or use an IOMMU");
    }
    let args = &args;
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut actions = plan(args, &paths, Path::new("/proc"), &mounts)?;
    // PCI_ALLOWED / PCI_BLOCKED, as setup.sh applies them.
    actions.retain(|a| {
        let addr = action_address(a);
        let ok = env.admits(addr);
        if !ok {
            say!("{addr}: skipped (PCI_ALLOWED / PCI_BLOCKED)");
        }
        ok
    });
    // A hugepage count that would starve the system fails before anything is bound.
    precheck_hugepages(args)?;
    let iommu = iommu_enabled(&paths);
    let target = target_driver(&paths, args.no_iommu);
    if args.no_iommu {
        noiommu::warn_once();
        if let (_, Some(note)) = no_iommu_binding(&paths) {
            say!("note: {note}");
        }
    }
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
                    let r = binder
                        .bind_to_driver_nonblocking(addr, "nvme", RESET_WAIT)
                        .with_context(|| format!("binding {addr} to nvme"))?;
                    if let Rebind::StillWaiting { helper } = r {
                        say!(
                            "{addr}: the kernel is waiting for the process using it to let go; the rebind to nvme finishes when it does (helper pid {helper}); check with `vfnvme list`"
                        );
                    }
                }
            }
            Action::ResetRefused(addr, who) => {
                say!(
                    "{addr}: NOT giving it back to the kernel, a process holds it through VFIO: {}",
                    who.join("; ")
                );
                refused.push(*addr);
            }
            Action::NotNvme(addr, what) => {
                say!("{addr}: NOT binding it: {what}");
                refused.push(*addr);
            }
            Action::AlreadyBound(addr) => {
                say!("{addr}: already on {target}");
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
                if !iommu && !args.no_iommu {
                    bail!(
                        "cannot bind {addr} to vfio-pci: {IOMMU_ADVICE}\n{}",
                        noiommu::OPT_IN
                    );
                }
                if let Ok(Some(e)) =
                    pci_sysfs::device_info(&paths, addr).map(|i| pci_sysfs::not_nvme_error(&i))
                {
                    say!("{addr}: warning (--force): {e}");
                }
                say!(
                    "{addr}: {} {target} (was {})",
                    if args.dry_run {
                        "would bind it to"
                    } else {
                        "binding to"
                    },
                    from.as_deref().unwrap_or("unbound")
                );
                if !args.dry_run && args.no_iommu {
                    binder
                        .bind_for_no_iommu(addr, no_iommu_binding(&paths).0)
                        .with_context(|| format!("binding {addr} to {target}"))?;
                } else if !args.dry_run {
                    binder
                        .bind_to_vfio(addr)
                        .with_context(|| format!("binding {addr} to vfio-pci"))?;
                }
                bound.push(*addr);
            }
        }
    }
    for addr in bound.iter().filter(|_| !args.no_iommu) {
        match pci_sysfs::iommu_group(&paths, addr) {
            Ok(g) => say!("{addr}: IOMMU group {g}, {}", paths.vfio_group(g).display()),
            Err(e) => say!("{addr}: {e}"),
        }
    }
    if !iommu && !args.no_iommu {
        say!("warning: {IOMMU_ADVICE}\n{}", noiommu::OPT_IN);
    }
    if env.nodes.is_empty() {
        check_hugepages(args)?;
    } else {
        let count = args.hugepages.unwrap_or(DEFAULT_HUGEPAGES);
        crate::setup_sh::reserve_on_nodes(&paths, &env.nodes, count, args.dry_run)?;
    }
    if let Some(u) = &user {
        crate::setup_user::grant(&paths, &bound, u, args.dry_run)?;
    }
    check_memlock()?;
    if !refused.is_empty() && args.bdfs.is_empty() && args.reset.is_empty() {
        say!(
            "skipped {} controller(s) in use; to take one anyway (its data stays, the kernel loses it): vfnvme setup --force BDF",
            refused.len()
        );
    } else if !refused.is_empty() {
        bail!(
            "refused {}: see the reasons above; stop what uses them (unmount, swapoff, close, stop the process) or add --force",
            refused
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let (Some(addr), true) = (bound.first(), args.no_iommu) {
        say!("next: vfnvme identify --no-iommu {addr}; vfnvme perf --no-iommu --device {addr} --qd 32 --time 5");
        say!("undo: vfnvme setup --reset {addr}");
    } else if let Some(addr) = bound.first() {
        say!("next: vfnvme identify {addr}; vfnvme perf --device {addr} --qd 32 --time 5");
        say!("undo: vfnvme setup --reset {addr}");
    }
    Ok(())
}

/// The controller an action is about.
fn action_address(a: &Action) -> &PciAddress {
    match a {
        Action::Bind(addr, _)
        | Action::AlreadyBound(addr)
        | Action::InUse(addr, _)
        | Action::NotNvme(addr, _)
        | Action::Reset(addr)
        | Action::ResetRefused(addr, _) => addr,
    }
}

/// Fails if `--hugepages` asks for more than the memory floor allows (see
/// [`hugepages::check_count`]).
fn precheck_hugepages(args: &SetupArgs) -> Result<()> {
    let Some(wanted) = args.hugepages else {
        return Ok(());
    };
    let total = hugepages::status(PageSize::Huge2M)?.map_or(0, |s| s.total);
    if wanted > total {
        hugepages::check_count(
            &hugepages::MemInfo::read()?,
            PageSize::Huge2M,
            total,
            wanted,
        )?;
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
    let mem = hugepages::MemInfo::read()?;
    if wanted > total {
        // Checked in a dry run too, so that it shows what the real run would refuse.
        hugepages::check_count(&mem, PageSize::Huge2M, total, wanted)?;
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
    let count = wanted.max(total);
    if args.persist {
        let dir = Path::new(SYSCTL_DIR);
        if args.dry_run {
            say!(
                "hugepages: would write vm.nr_hugepages = {count} to {}",
                dir.join(SYSCTL_FILE).display()
            );
        } else {
            let file = persist_hugepages(dir, count)?;
            say!(
                "hugepages: {} reserves {count} x 2 MiB at every boot",
                file.display()
            );
        }
    } else if wanted > total {
        say!(
            "hugepages: not kept across reboots; add --persist to write {SYSCTL_DIR}/{SYSCTL_FILE}"
        );
    }
    if args.persist || wanted > total {
        say!("hugepages: for 1 GiB pages (reserved at boot only), add `default_hugepagesz=1G hugepagesz=1G hugepages=N` to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot)");
    }
    Ok(())
}

/// Where `--persist` writes the hugepage count: the distributions' sysctl.d folder.
pub const SYSCTL_DIR: &str = "/etc/sysctl.d";

/// The file `--persist` writes in [`SYSCTL_DIR`].
pub const SYSCTL_FILE: &str = "60-vfnvme-hugepages.conf";

/// Writes `vm.nr_hugepages = count` to [`SYSCTL_FILE`] in `dir` (creating `dir`); returns the
/// file's path.
pub fn persist_hugepages(dir: &Path, count: u64) -> Result<std::path::PathBuf> {
    let file = dir.join(SYSCTL_FILE);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(
        &file,
        format!(
            "# Written by `vfnvme setup --persist`: 2 MiB hugepages for vfnvme's DMA memory.\n\
             # Applied at boot by systemd-sysctl (or `sysctl --system`); delete this file to stop.\n\
             vm.nr_hugepages = {count}\n"
        ),
    )
    .with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
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
        fn proc(&self) -> PathBuf {
            self.0.join("proc")
        }
        /// A process `pid` named `comm` with a descriptor on `target`.
        fn process(&self, pid: u32, comm: &str, target: &str) {
            let d = self.proc().join(pid.to_string());
            std::fs::create_dir_all(d.join("fd")).unwrap();
            std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
            std::os::unix::fs::symlink(target, d.join("fd/3")).unwrap();
        }
        fn class(&self, bdf: &str, class: &str) {
            std::fs::write(self.0.join("sys/devices").join(bdf).join("class"), class).unwrap();
        }
        fn group(&self, bdf: &str, group: u32) {
            let g = self
                .0
                .join("sys/kernel/iommu_groups")
                .join(group.to_string());
            std::fs::create_dir_all(&g).unwrap();
            std::os::unix::fs::symlink(
                &g,
                self.0.join("sys/devices").join(bdf).join("iommu_group"),
            )
            .unwrap();
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
            persist: false,
            dry_run: true,
            no_iommu: false,
            user: None,
        }
    }

    fn no_iommu_args(bdfs: &[&str], force: bool) -> SetupArgs {
        SetupArgs {
            no_iommu: true,
            ..args(bdfs, force)
        }
    }

    #[test]
    fn no_iommu_binds_to_uio_with_the_same_refusals() {
        let f = Fake::new("noiommu");
        f.device("0000:00:10.0", "nvme", Some("nvme0n1"));
        f.device("0000:00:11.0", "uio_pci_generic", None);
        f.device("0000:00:12.0", "nvme", None);
        f.device("0000:00:13.0", "vfio-pci", None);
        f.device("0000:00:02.0", "e1000", None);
        f.class("0000:00:02.0", "0x020000\n");
        let mounts = "/dev/nvme0n1 / ext4 rw 0 0\n";
        let p = plan(&no_iommu_args(&[], false), &f.paths(), &f.proc(), mounts).unwrap();
        assert!(
            matches!(&p[0], Action::InUse(x, _) if *x == a("0000:00:10.0")),
            "{p:?}"
        );
        assert_eq!(p[1], Action::AlreadyBound(a("0000:00:11.0")));
        assert_eq!(p[2], Action::Bind(a("0000:00:12.0"), Some("nvme".into())));
        assert_eq!(
            p[3],
            Action::Bind(a("0000:00:13.0"), Some("vfio-pci".into())),
            "vfio-pci is not the no-IOMMU binding"
        );
        let p = plan(
            &no_iommu_args(&["0000:00:02.0"], false),
            &f.paths(),
            &f.proc(),
            "",
        )
        .unwrap();
        assert!(matches!(&p[0], Action::NotNvme(..)), "{p:?}");
        assert_eq!(target_driver(&f.paths(), true), "uio_pci_generic");
        assert_eq!(target_driver(&f.paths(), false), "vfio-pci");
    }

    #[test]
    fn no_iommu_binding_is_vfio_noiommu_where_the_kernel_has_it_else_uio() {
        let f = Fake::new("noiommu-binding");
        assert_eq!(
            no_iommu_binding(&f.paths()),
            (NoIommuBinding::UioPciGeneric, None)
        );
        assert_eq!(target_driver(&f.paths(), true), "uio_pci_generic");
        let param = noiommu::vfio_noiommu_param(&f.paths());
        std::fs::create_dir_all(param.parent().unwrap()).unwrap();
        std::fs::write(&param, "N\n").unwrap();
        let (b, note) = no_iommu_binding(&f.paths());
        assert_eq!(b, NoIommuBinding::VfioNoIommu);
        assert!(
            note.is_some_and(|n| n.contains("VFIO's no-IOMMU mode")),
            "{note:?}"
        );
        assert_eq!(target_driver(&f.paths(), true), "vfio-pci");
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
        let p = plan(&args(&[], false), &f.paths(), &f.proc(), mounts).unwrap();
        assert!(
            matches!(&p[0], Action::InUse(x, why) if *x == a("0000:00:10.0") && why[0].contains("mounted on /")),
            "{p:?}"
        );
        assert_eq!(p[1], Action::AlreadyBound(a("0000:00:11.0")));
        assert_eq!(p[2], Action::Bind(a("0000:00:12.0"), Some("nvme".into())));
        // --force does not apply without names.
        let p = plan(&args(&[], true), &f.paths(), &f.proc(), mounts).unwrap();
        assert!(matches!(&p[0], Action::InUse(..)), "{p:?}");
    }

    #[test]
    fn a_named_mounted_device_needs_force() {
        let f = Fake::new("force");
        f.device("0000:00:10.0", "nvme", Some("nvme0n1"));
        let mounts = "/dev/nvme0n1 /data xfs rw 0 0\n";
        let p = plan(
            &args(&["0000:00:10.0"], false),
            &f.paths(),
            &f.proc(),
            mounts,
        )
        .unwrap();
        assert!(matches!(&p[0], Action::InUse(..)), "{p:?}");
        let p = plan(
            &args(&["0000:00:10.0"], true),
            &f.paths(),
            &f.proc(),
            mounts,
        )
        .unwrap();
        assert_eq!(p[0], Action::Bind(a("0000:00:10.0"), Some("nvme".into())));
    }

    #[test]
    fn a_device_that_is_not_nvme_is_refused_unless_forced() {
        let f = Fake::new("class");
        f.device("0000:00:02.0", "e1000", None);
        f.class("0000:00:02.0", "0x020000\n");
        let p = plan(&args(&["0000:00:02.0"], false), &f.paths(), &f.proc(), "").unwrap();
        assert!(
            matches!(&p[0], Action::NotNvme(_, what) if what.contains("not an NVMe controller")
                && what.contains("an Ethernet controller")
                && what.contains("1b36:0010")
                && what.contains("driver e1000")),
            "{p:?}"
        );
        let p = plan(&args(&["0000:00:02.0"], true), &f.paths(), &f.proc(), "").unwrap();
        assert_eq!(p[0], Action::Bind(a("0000:00:02.0"), Some("e1000".into())));
        // --reset of it is refused too.
        let mut r = args(&[], false);
        r.reset = vec!["0000:00:02.0".into()];
        let p = plan(&r, &f.paths(), &f.proc(), "").unwrap();
        assert!(matches!(&p[0], Action::NotNvme(..)), "{p:?}");
    }

    #[test]
    fn a_block_device_open_in_a_process_is_in_use() {
        let f = Fake::new("open");
        f.device("0000:00:10.0", "nvme", Some("nvme0n1"));
        f.process(4321, "sleep", "/dev/nvme0n1");
        let p = plan(&args(&["0000:00:10.0"], false), &f.paths(), &f.proc(), "").unwrap();
        assert!(
            matches!(&p[0], Action::InUse(_, why) if why == &["pid 4321 (sleep) has /dev/nvme0n1 open".to_string()]),
            "{p:?}"
        );
        let p = plan(&args(&["0000:00:10.0"], true), &f.paths(), &f.proc(), "").unwrap();
        assert!(matches!(&p[0], Action::Bind(..)), "{p:?}");
    }

    #[test]
    fn reset_of_a_controller_held_through_vfio_names_the_process() {
        let f = Fake::new("reset");
        f.device("0000:00:10.0", "vfio-pci", None);
        f.group("0000:00:10.0", 7);
        let mut r = args(&[], false);
        r.reset = vec!["0000:00:10.0".into()];
        let p = plan(&r, &f.paths(), &f.proc(), "").unwrap();
        assert_eq!(p, vec![Action::Reset(a("0000:00:10.0"))]);
        let node = f.0.join("dev/vfio/7").display().to_string();
        f.process(999, "vfnvme", &node);
        let p = plan(&r, &f.paths(), &f.proc(), "").unwrap();
        assert_eq!(
            p,
            vec![Action::ResetRefused(
                a("0000:00:10.0"),
                vec![format!("pid 999 (vfnvme) has {node} open")]
            )]
        );
        r.force = true;
        let p = plan(&r, &f.paths(), &f.proc(), "").unwrap();
        assert_eq!(p, vec![Action::Reset(a("0000:00:10.0"))]);
    }

    #[test]
    fn persist_writes_a_sysctl_file() {
        let f = Fake::new("persist");
        let dir = f.0.join("etc/sysctl.d");
        let file = persist_hugepages(&dir, 512).unwrap();
        assert_eq!(file, dir.join(SYSCTL_FILE));
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.lines().any(|l| l == "vm.nr_hugepages = 512"), "{text}");
    }

    #[test]
    fn bad_and_absent_addresses_are_errors() {
        let f = Fake::new("bad");
        let e = plan(&args(&["nonsense"], false), &f.paths(), &f.proc(), "").unwrap_err();
        assert!(e.to_string().contains("DDDD:BB:DD.F"), "{e}");
        let e = plan(&args(&["0000:00:1f.0"], false), &f.paths(), &f.proc(), "").unwrap_err();
        assert!(e.to_string().contains("no PCI device"), "{e}");
    }

    #[test]
    fn iommu_detection() {
        let f = Fake::new("iommu");
        assert!(!iommu_enabled(&f.paths()));
        // A group of VFIO's no-IOMMU mode is no IOMMU.
        let noiommu = f.0.join("sys/kernel/iommu_groups/7");
        std::fs::create_dir_all(&noiommu).unwrap();
        std::fs::write(noiommu.join("name"), "vfio-noiommu\n").unwrap();
        assert!(!iommu_enabled(&f.paths()));
        std::fs::create_dir_all(f.0.join("sys/kernel/iommu_groups/0")).unwrap();
        assert!(iommu_enabled(&f.paths()));
        let _ = Path::new("/");
    }
}
