//! SPDK's `setup.sh` interface on `vfnvme setup`: the words `status`, `reset`, `cleanup` and
//! `config`, and the environment setup.sh reads (`HUGEMEM`, `NRHUGE`, `HUGENODE`,
//! `PCI_ALLOWED`, `PCI_BLOCKED`, `TARGET_USER`), so scripts written for setup.sh run unchanged.

use crate::output::say;
use crate::{kernel_nvme, setup};
use anyhow::{bail, Context, Result};
use std::path::Path;
use vfnvme::hal::pci::{bind as pci_bind, sysfs as pci_sysfs};
use vfnvme::hal::{PciAddress, SysPaths};

/// What `vfnvme setup WORD` does (setup.sh's first argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Bind and reserve (setup.sh `config`, the default).
    Config,
    /// Show controllers, drivers, NUMA nodes, block devices and hugepages per node.
    Status,
    /// Give every controller on vfio-pci (or uio_pci_generic) back to the kernel.
    Reset,
    /// What a crashed process left behind.
    Cleanup,
}

/// The mode named by `bdfs` (setup.sh's word as the only argument), or None: addresses.
pub fn mode_of(bdfs: &[String]) -> Option<Mode> {
    match bdfs {
        [w] => match w.as_str() {
            "config" => Some(Mode::Config),
            "status" => Some(Mode::Status),
            "reset" => Some(Mode::Reset),
            "cleanup" => Some(Mode::Cleanup),
            _ => None,
        },
        _ => None,
    }
}

/// setup.sh's environment, read once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    /// `NRHUGE` (pages), or `HUGEMEM` (MiB) in 2 MiB pages (NRHUGE wins, as in setup.sh).
    pub hugepages: Option<u64>,
    /// `HUGENODE`: the NUMA nodes to reserve on (each gets the count), e.g. "0,1".
    pub nodes: Vec<u32>,
    /// `PCI_ALLOWED`: only these controllers (empty: all).
    pub allowed: Vec<PciAddress>,
    /// `PCI_BLOCKED`: never these.
    pub blocked: Vec<PciAddress>,
    /// `TARGET_USER`: who may use the controllers bound.
    pub user: Option<String>,
}

fn addresses(name: &str, v: &str) -> Result<Vec<PciAddress>> {
    v.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|s| !s.is_empty())
        .map(|s| PciAddress::parse(s).with_context(|| format!("{name}={v:?}")))
        .collect()
}

impl Env {
    /// Reads setup.sh's variables through `get` (the process environment in `from_process`).
    pub fn read(get: impl Fn(&str) -> Option<String>) -> Result<Env> {
        let num = |name: &str| -> Result<Option<u64>> {
            get(name)
                .filter(|v| !v.trim().is_empty())
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .with_context(|| format!("{name}={v:?}: give a number"))
                })
                .transpose()
        };
        let hugepages = match (num("NRHUGE")?, num("HUGEMEM")?) {
            (Some(n), _) => Some(n),
            (None, Some(mib)) => Some(mib.div_ceil(2)),
            (None, None) => None,
        };
        let nodes = match get("HUGENODE").filter(|v| !v.trim().is_empty()) {
            None => Vec::new(),
            Some(v) => v
                .split(',')
                .map(|n| {
                    n.trim().parse::<u32>().with_context(|| {
                        format!(
                            "HUGENODE={v:?}: give NUMA node numbers separated by commas, e.g. 0,1"
                        )
                    })
                })
                .collect::<Result<_>>()?,
        };
        Ok(Env {
            hugepages,
            nodes,
            allowed: addresses("PCI_ALLOWED", &get("PCI_ALLOWED").unwrap_or_default())?,
            blocked: addresses("PCI_BLOCKED", &get("PCI_BLOCKED").unwrap_or_default())?,
            user: get("TARGET_USER").filter(|u| !u.trim().is_empty()),
        })
    }

    /// Reads them from the process environment.
    pub fn from_process() -> Result<Env> {
        Env::read(|k| std::env::var(k).ok())
    }

    /// Whether `addr` may be touched.
    pub fn admits(&self, addr: &PciAddress) -> bool {
        (self.allowed.is_empty() || self.allowed.contains(addr)) && !self.blocked.contains(addr)
    }
}

fn read_trimmed(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The NUMA nodes of the machine, from sysfs (`node0`, `node1`, ...).
pub fn numa_nodes(paths: &SysPaths) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(paths.sys.join("devices/system/node"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

fn node_hugepages_dir(paths: &SysPaths, node: u32) -> std::path::PathBuf {
    paths.sys.join(format!(
        "devices/system/node/node{node}/hugepages/hugepages-2048kB"
    ))
}

/// 2 MiB hugepages on `node`: (reserved, free).
pub fn node_hugepages(paths: &SysPaths, node: u32) -> Option<(u64, u64)> {
    let d = node_hugepages_dir(paths, node);
    let n = |f: &str| read_trimmed(&d.join(f)).and_then(|s| s.parse().ok());
    Some((n("nr_hugepages")?, n("free_hugepages")?))
}

/// Makes sure `count` 2 MiB hugepages are reserved on each of `nodes` (never fewer than now).
pub fn reserve_on_nodes(paths: &SysPaths, nodes: &[u32], count: u64, dry_run: bool) -> Result<()> {
    for &node in nodes {
        let dir = node_hugepages_dir(paths, node);
        let Some((now, _)) = node_hugepages(paths, node) else {
            bail!(
                "HUGENODE: NUMA node {node} has no {} (nodes here: {:?})",
                dir.display(),
                numa_nodes(paths)
            );
        };
        if now >= count {
            say!("node {node}: {now} hugepages of 2 MiB reserved (at least {count} asked)");
            continue;
        }
        if dry_run {
            say!("node {node}: would reserve {count} hugepages of 2 MiB (now {now})");
            continue;
        }
        let f = dir.join("nr_hugepages");
        std::fs::write(&f, count.to_string())
            .with_context(|| format!("writing {count} to {}", f.display()))?;
        let got = node_hugepages(paths, node).map_or(0, |(n, _)| n);
        say!("node {node}: {got} hugepages of 2 MiB reserved (asked {count})");
        if got < count {
            bail!("node {node}: only {got} of {count} hugepages could be reserved (memory is fragmented or short on that node); ask for fewer or reserve at boot (hugepages= on the kernel command line)");
        }
    }
    Ok(())
}

/// `setup status`: every NVMe controller with its driver, NUMA node and block devices (and who
/// holds them), then the hugepages per NUMA node.
pub fn status(paths: &SysPaths) -> Result<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut t = String::from(
        "NVMe controllers\nBDF           Vendor Device NUMA  Driver           Block devices\n",
    );
    let devices = pci_bind::PciBinder::new(paths.clone())
        .list_nvme_devices()
        .context("listing NVMe controllers")?;
    if devices.is_empty() {
        t.push_str("(none: no PCI class 0x010802 device)\n");
    }
    for d in &devices {
        let numa = read_trimmed(&paths.pci_device(&d.address).join("numa_node"))
            .unwrap_or_else(|| "-".into());
        let block: Vec<String> = kernel_nvme::block_devices(paths, &d.address)
            .iter()
            .map(|b| b.name.clone())
            .collect();
        let why = kernel_nvme::in_use(paths, Path::new("/proc"), &d.address, &mounts);
        let mut blocks = if block.is_empty() {
            "-".to_string()
        } else {
            block.join(" ")
        };
        if !why.is_empty() {
            blocks.push_str(&format!(" (in use: {})", why.join("; ")));
        }
        if d.driver.as_deref() == Some(pci_sysfs::VFIO_PCI) {
            let who = setup::vfio_holders(paths, Path::new("/proc"), &d.address);
            if !who.is_empty() {
                let who: Vec<String> = who.iter().map(|h| h.to_string()).collect();
                blocks.push_str(&format!(" (held by {})", who.join("; ")));
            }
        }
        t.push_str(&format!(
            "{:<13} {:04x}   {:04x}   {:<5} {:<16} {}\n",
            d.address.to_string(),
            d.vendor,
            d.device,
            numa,
            d.driver.as_deref().unwrap_or("-"),
            blocks
        ));
    }
    t.push_str("\nHugepages (2 MiB)\nnode  reserved  free\n");
    let nodes = numa_nodes(paths);
    if nodes.is_empty() {
        t.push_str("(no NUMA information in sysfs)\n");
    }
    for n in nodes {
        match node_hugepages(paths, n) {
            Some((total, free)) => t.push_str(&format!("{n:<5} {total:<9} {free}\n")),
            None => t.push_str(&format!("{n:<5} -         -\n")),
        }
    }
    Ok(t)
}

/// `setup cleanup`: what a crashed process can leave, and what to do about it. vfnvme keeps
/// its DMA memory in anonymous hugepage mappings and its devices open through file
/// descriptors, which the kernel frees when a process dies; what stays is the binding.
pub fn cleanup(paths: &SysPaths) -> Result<String> {
    let mut t = String::from(
        "vfnvme keeps no files: a process's hugepage memory, VFIO groups and device mappings are freed by the kernel when it exits or crashes.\n",
    );
    let devices = pci_bind::PciBinder::new(paths.clone())
        .list_nvme_devices()
        .context("listing NVMe controllers")?;
    let ours: Vec<&pci_sysfs::PciDeviceInfo> = devices
        .iter()
        .filter(|d| {
            matches!(
                d.driver.as_deref(),
                Some(pci_sysfs::VFIO_PCI) | Some(vfnvme::hal::pci::noiommu::UIO_PCI_GENERIC)
            )
        })
        .collect();
    for d in &ours {
        let who = if d.driver.as_deref() == Some(pci_sysfs::VFIO_PCI) {
            setup::vfio_holders(paths, Path::new("/proc"), &d.address)
        } else {
            Vec::new()
        };
        if who.is_empty() {
            t.push_str(&format!(
                "{}: on {}, no process holds it: free for the next run, or give it back with `vfnvme setup reset`\n",
                d.address,
                d.driver.as_deref().unwrap_or("-")
            ));
        } else {
            let who: Vec<String> = who.iter().map(|h| h.to_string()).collect();
            t.push_str(&format!(
                "{}: held by {}: stop that process to free it\n",
                d.address,
                who.join("; ")
            ));
        }
    }
    if ours.is_empty() {
        t.push_str("no controller is bound to vfio-pci or uio_pci_generic: nothing left\n");
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> Result<Env> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Env::read(|k| m.get(k).cloned())
    }

    #[test]
    fn setup_sh_words_and_environment() {
        assert_eq!(mode_of(&["status".into()]), Some(Mode::Status));
        assert_eq!(mode_of(&["reset".into()]), Some(Mode::Reset));
        assert_eq!(mode_of(&["cleanup".into()]), Some(Mode::Cleanup));
        assert_eq!(mode_of(&["0000:01:00.0".into()]), None);
        assert_eq!(mode_of(&["status".into(), "reset".into()]), None);
        assert_eq!(env(&[]).unwrap(), Env::default());
        assert_eq!(env(&[("HUGEMEM", "2048")]).unwrap().hugepages, Some(1024));
        assert_eq!(env(&[("HUGEMEM", "3")]).unwrap().hugepages, Some(2));
        assert_eq!(
            env(&[("HUGEMEM", "2048"), ("NRHUGE", "10")])
                .unwrap()
                .hugepages,
            Some(10)
        );
        assert_eq!(env(&[("HUGENODE", "0,1")]).unwrap().nodes, vec![0, 1]);
        assert!(env(&[("HUGENODE", "zero")])
            .unwrap_err()
            .to_string()
            .contains("HUGENODE"));
        assert!(env(&[("NRHUGE", "lots")])
            .unwrap_err()
            .to_string()
            .contains("NRHUGE"));
        let e = env(&[
            ("PCI_ALLOWED", "0000:01:00.0 0000:02:00.0"),
            ("PCI_BLOCKED", "0000:02:00.0"),
        ])
        .unwrap();
        let a = |s: &str| PciAddress::parse(s).unwrap();
        assert!(e.admits(&a("0000:01:00.0")));
        assert!(!e.admits(&a("0000:02:00.0")), "blocked wins");
        assert!(!e.admits(&a("0000:03:00.0")), "not allowed");
        assert!(env(&[("PCI_BLOCKED", "nope")]).is_err());
    }

    #[test]
    fn hugepages_per_node_from_a_fake_sysfs() {
        let root = std::env::temp_dir().join(format!("vfnvme-setup-sh-{}", std::process::id()));
        let paths = SysPaths::new(root.join("sys"), root.join("dev/vfio"));
        for (n, total) in [(0u32, 8u64), (1, 0)] {
            let d = node_hugepages_dir(&paths, n);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("nr_hugepages"), total.to_string()).unwrap();
            std::fs::write(d.join("free_hugepages"), total.to_string()).unwrap();
        }
        assert_eq!(numa_nodes(&paths), vec![0, 1]);
        assert_eq!(node_hugepages(&paths, 0), Some((8, 8)));
        reserve_on_nodes(&paths, &[1], 4, false).unwrap();
        assert_eq!(node_hugepages(&paths, 1).map(|h| h.0), Some(4));
        // Never fewer than reserved; an absent node is an error naming the nodes there are.
        reserve_on_nodes(&paths, &[0], 2, false).unwrap();
        assert_eq!(node_hugepages(&paths, 0).map(|h| h.0), Some(8));
        let e = reserve_on_nodes(&paths, &[7], 1, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("node 7") && e.contains("[0, 1]"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
