//! What the kernel's nvme driver shows of a controller in sysfs: its block devices, its serial
//! and model, and whether any of them is mounted or held (LVM, RAID, dm).

use crate::holders;
use std::path::Path;
use vfnvme::hal::{PciAddress, SysPaths};

/// The kernel's controllers (`nvme0`, ...) under a PCI device's sysfs directory.
fn controllers(paths: &SysPaths, addr: &PciAddress) -> Vec<std::path::PathBuf> {
    let dir = paths.pci_device(addr).join("nvme");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn read_trimmed(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Serial and model as the kernel driver reports them, if it has the controller.
pub fn serial_and_model(paths: &SysPaths, addr: &PciAddress) -> Option<(String, String)> {
    let c = controllers(paths, addr).into_iter().next()?;
    Some((
        read_trimmed(&c.join("serial"))?,
        read_trimmed(&c.join("model"))?,
    ))
}

/// A block device of a kernel-driven controller: a namespace or one of its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDevice {
    /// Its name, e.g. `nvme0n1` or `nvme0n1p2`.
    pub name: String,
    /// Its device number (`dev_t`), from sysfs.
    pub dev: Option<u64>,
    /// The devices stacked on it (`holders/`), each named with what it is, e.g.
    /// `dm-0 (device-mapper vg-data)`.
    pub holders: Vec<String>,
}

/// The block devices (namespaces and their partitions, e.g. `nvme0n1`, `nvme0n1p2`) of the
/// controller at `addr`, with what holds each one (dm, md).
pub fn block_devices(paths: &SysPaths, addr: &PciAddress) -> Vec<BlockDevice> {
    let mut out = Vec::new();
    for c in controllers(paths, addr) {
        let cname = c
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Ok(entries) = std::fs::read_dir(&c) else {
            continue;
        };
        let mut names: Vec<_> = entries.filter_map(|e| e.ok()).collect();
        names.sort_by_key(|e| e.file_name());
        for ns in names {
            let name = ns.file_name().to_string_lossy().into_owned();
            // Namespaces: nvme<C>n<N> (the controller's own attributes have other names).
            if !name.starts_with(&cname) || name == cname {
                continue;
            }
            // A native-multipath path (nvme0c0n1) has no node of its own: its head does.
            if ns.path().join("dev").exists() {
                out.push(block_device(paths, &ns.path(), name.clone()));
            }
            push_partitions(paths, &ns.path(), &name, &mut out);
        }
    }
    for head in multipath_heads(paths, addr) {
        if !out.iter().any(|d| d.name == head) {
            let dir = paths.sys.join("block").join(&head);
            out.push(block_device(paths, &dir, head.clone()));
            push_partitions(paths, &dir, &head, &mut out);
        }
    }
    out
}

/// Adds the partitions (`<name>p<N>`, with a `partition` attribute) in the disk folder `dir`.
fn push_partitions(paths: &SysPaths, dir: &Path, name: &str, out: &mut Vec<BlockDevice>) {
    let Ok(parts) = std::fs::read_dir(dir) else {
        return;
    };
    let mut parts: Vec<_> = parts
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(name) && e.path().join("partition").exists()
        })
        .collect();
    parts.sort_by_key(|e| e.file_name());
    for p in parts {
        let pname = p.file_name().to_string_lossy().into_owned();
        out.push(block_device(paths, &p.path(), pname));
    }
}

/// Native-multipath head devices (`/sys/block/nvmeXnY` with a `multipath/` folder) that have
/// a path through the controller at `addr`: taking the controller away takes that path.
fn multipath_heads(paths: &SysPaths, addr: &PciAddress) -> Vec<String> {
    let Ok(dev) = std::fs::canonicalize(paths.pci_device(addr)) else {
        return Vec::new();
    };
    let Ok(blocks) = std::fs::read_dir(paths.sys.join("block")) else {
        return Vec::new();
    };
    let mut heads: Vec<String> = blocks
        .filter_map(|e| e.ok())
        .filter(|b| {
            std::fs::read_dir(b.path().join("multipath")).is_ok_and(|d| {
                d.filter_map(|e| e.ok()).any(|p| {
                    std::fs::canonicalize(p.path()).is_ok_and(|real| real.starts_with(&dev))
                })
            })
        })
        .map(|b| b.file_name().to_string_lossy().into_owned())
        .collect();
    heads.sort();
    heads
}

fn block_device(paths: &SysPaths, dir: &Path, name: String) -> BlockDevice {
    BlockDevice {
        name,
        dev: read_trimmed(&dir.join("dev")).and_then(|d| holders::parse_dev(&d)),
        holders: stacked_on(paths, dir),
    }
}

/// The devices in `dir/holders`, named with their kind (device-mapper name, MD RAID).
fn stacked_on(paths: &SysPaths, dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("holders")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|h| {
            let block = paths.sys.join("block").join(&h);
            if let Some(dm) = read_trimmed(&block.join("dm/name")) {
                format!("{h} (device-mapper {dm}: LVM, dm-crypt or multipath)")
            } else if h.starts_with("md") {
                format!("{h} (MD RAID)")
            } else {
                h
            }
        })
        .collect()
}

/// The mount points in `mounts` (the text of `/proc/mounts`) of `/dev/<dev>` for each of
/// `devs`: (device, mount point).
pub fn mounted(devs: &[String], mounts: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(source), Some(target)) = (fields.next(), fields.next()) else {
            continue;
        };
        if let Some(name) = source.strip_prefix("/dev/") {
            if devs.iter().any(|d| d == name) {
                out.push((name.to_string(), target.to_string()));
            }
        }
    }
    out
}

/// Why the kernel's controller at `addr` must not be taken away: block devices that are
/// mounted (`mounts`, the text of `/proc/mounts`), used as swap (`<proc>/swaps`), stacked under
/// dm/MD/LVM (sysfs `holders/`), or open in a process (`<proc>/<pid>/fd`). `proc` is normally
/// `/proc`.
pub fn in_use(paths: &SysPaths, proc: &Path, addr: &PciAddress, mounts: &str) -> Vec<String> {
    let devs = block_devices(paths, addr);
    let names: Vec<String> = devs.iter().map(|d| d.name.clone()).collect();
    let mut why: Vec<String> = mounted(&names, mounts)
        .into_iter()
        .map(|(d, m)| format!("/dev/{d} is mounted on {m}"))
        .collect();
    let swaps = std::fs::read_to_string(proc.join("swaps")).unwrap_or_default();
    why.extend(
        holders::swapping(&names, &swaps)
            .into_iter()
            .map(|d| format!("/dev/{d} is a swap area (swapoff /dev/{d})")),
    );
    for d in &devs {
        for h in &d.holders {
            why.push(format!("/dev/{} is held by {h}", d.name));
        }
    }
    let wanted = holders::Wanted {
        paths: names.iter().map(|n| format!("/dev/{n}")).collect(),
        block_devs: devs.iter().filter_map(|d| d.dev).collect(),
        char_devs: Vec::new(),
    };
    why.extend(
        holders::processes_holding(proc, &wanted)
            .into_iter()
            .map(|h| h.to_string()),
    );
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_mounts_of_the_devices_only() {
        let mounts = "/dev/nvme0n1p2 / ext4 rw 0 0\n\
                      /dev/nvme10n1 /data xfs rw 0 0\n\
                      proc /proc proc rw 0 0\n\
                      /dev/nvme0n1p1 /boot/efi vfat rw 0 0\n";
        let devs = vec![
            "nvme0n1".to_string(),
            "nvme0n1p1".into(),
            "nvme0n1p2".into(),
        ];
        let m = mounted(&devs, mounts);
        assert_eq!(
            m,
            vec![
                ("nvme0n1p2".to_string(), "/".to_string()),
                ("nvme0n1p1".to_string(), "/boot/efi".to_string())
            ]
        );
        assert!(mounted(&["nvme1n1".to_string()], mounts).is_empty());
    }

    #[test]
    fn a_multipath_head_through_the_controller_counts() {
        let dir = std::env::temp_dir().join(format!("vfnvme-knvme-mp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let real = dir.join("sys/devices/pci0000:00/0000:01:00.0");
        let path = real.join("nvme/nvme1/nvme0c1n1");
        std::fs::create_dir_all(&path).unwrap();
        std::fs::create_dir_all(dir.join("sys/bus/pci/devices")).unwrap();
        std::os::unix::fs::symlink(&real, dir.join("sys/bus/pci/devices/0000:01:00.0")).unwrap();
        let head = dir.join("sys/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1");
        std::fs::create_dir_all(head.join("multipath")).unwrap();
        std::fs::create_dir_all(head.join("holders")).unwrap();
        std::fs::write(head.join("dev"), "259:4\n").unwrap();
        std::fs::create_dir_all(head.join("nvme0n1p1")).unwrap();
        std::fs::write(head.join("nvme0n1p1/partition"), "1\n").unwrap();
        std::fs::write(head.join("nvme0n1p1/dev"), "259:5\n").unwrap();
        std::os::unix::fs::symlink(&path, head.join("multipath/nvme0c1n1")).unwrap();
        std::fs::create_dir_all(dir.join("sys/block")).unwrap();
        std::os::unix::fs::symlink(&head, dir.join("sys/block/nvme0n1")).unwrap();
        let paths = SysPaths::new(dir.join("sys"), dir.join("dev/vfio"));
        let addr = PciAddress::parse("0000:01:00.0").unwrap();
        let devs = block_devices(&paths, &addr);
        assert_eq!(devs.len(), 2, "{devs:?}");
        assert_eq!(devs[0].name, "nvme0n1");
        assert_eq!(devs[0].dev, Some(libc::makedev(259, 4)));
        assert_eq!(devs[1].name, "nvme0n1p1");
        let why = in_use(
            &paths,
            &dir.join("proc"),
            &addr,
            "/dev/nvme0n1p1 /srv xfs rw 0 0\n",
        );
        assert_eq!(why, vec!["/dev/nvme0n1p1 is mounted on /srv".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn block_devices_from_a_fake_sysfs() {
        let dir = std::env::temp_dir().join(format!("vfnvme-knvme-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let dev = dir.join("sys/bus/pci/devices/0000:01:00.0/nvme/nvme0");
        let ns = dev.join("nvme0n1");
        let part = ns.join("nvme0n1p1");
        std::fs::create_dir_all(part.join("holders")).unwrap();
        std::fs::create_dir_all(ns.join("holders")).unwrap();
        std::fs::write(ns.join("dev"), "259:0\n").unwrap();
        std::fs::write(part.join("dev"), "259:1\n").unwrap();
        std::fs::write(part.join("partition"), "1\n").unwrap();
        std::fs::create_dir_all(part.join("holders/dm-0")).unwrap();
        std::fs::create_dir_all(dir.join("sys/block/dm-0/dm")).unwrap();
        std::fs::write(dir.join("sys/block/dm-0/dm/name"), "vg-data\n").unwrap();
        std::fs::write(dev.join("serial"), "S1  \n").unwrap();
        std::fs::write(dev.join("model"), "Disk\n").unwrap();
        let paths = SysPaths::new(dir.join("sys"), dir.join("dev/vfio"));
        let addr = PciAddress::parse("0000:01:00.0").unwrap();
        let devs = block_devices(&paths, &addr);
        assert_eq!(devs.len(), 2, "{devs:?}");
        assert_eq!(devs[0].name, "nvme0n1");
        assert_eq!(devs[0].dev, Some(libc::makedev(259, 0)));
        assert!(devs[0].holders.is_empty());
        assert_eq!(devs[1].name, "nvme0n1p1");
        assert_eq!(
            devs[1].holders,
            vec!["dm-0 (device-mapper vg-data: LVM, dm-crypt or multipath)".to_string()]
        );
        assert_eq!(
            serial_and_model(&paths, &addr),
            Some(("S1".to_string(), "Disk".to_string()))
        );
        // A fake /proc: a process holding the namespace open, and a swap area.
        let proc_ = dir.join("proc");
        std::fs::create_dir_all(proc_.join("4242/fd")).unwrap();
        std::fs::write(proc_.join("4242/comm"), "sleep\n").unwrap();
        std::os::unix::fs::symlink("/dev/nvme0n1", proc_.join("4242/fd/5")).unwrap();
        std::fs::write(
            proc_.join("swaps"),
            "Filename Type Size Used Priority\n/dev/nvme0n1p1 partition 100 0 -2\n",
        )
        .unwrap();
        let why = in_use(&paths, &proc_, &addr, "/dev/nvme0n1 /mnt ext4 rw 0 0\n");
        assert_eq!(
            why,
            vec![
                "/dev/nvme0n1 is mounted on /mnt".to_string(),
                "/dev/nvme0n1p1 is a swap area (swapoff /dev/nvme0n1p1)".into(),
                "/dev/nvme0n1p1 is held by dm-0 (device-mapper vg-data: LVM, dm-crypt or multipath)".into(),
                "pid 4242 (sleep) has /dev/nvme0n1 open".into(),
            ]
        );
        // Nothing of it: not in use.
        assert!(in_use(
            &paths,
            &dir.join("noproc"),
            &PciAddress::parse("0000:01:00.1").unwrap(),
            ""
        )
        .is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
