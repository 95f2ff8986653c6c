//! What the kernel's nvme driver shows of a controller in sysfs: its block devices, its serial
//! and model, and whether any of them is mounted or held (LVM, RAID, dm).

use std::path::Path;
use vfnvme::dma::{PciAddress, SysPaths};

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

/// The block devices (namespaces and their partitions, e.g. `nvme0n1`, `nvme0n1p2`) of the
/// controller at `addr`, with whether something holds each one (dm, md).
pub fn block_devices(paths: &SysPaths, addr: &PciAddress) -> Vec<(String, bool)> {
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
            if !name.starts_with(&cname) || name == cname || !ns.path().join("dev").exists() {
                continue;
            }
            out.push((name.clone(), held(&ns.path())));
            if let Ok(parts) = std::fs::read_dir(ns.path()) {
                let mut parts: Vec<_> = parts
                    .filter_map(|e| e.ok())
                    .filter(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.starts_with(&name) && e.path().join("partition").exists()
                    })
                    .collect();
                parts.sort_by_key(|e| e.file_name());
                for p in parts {
                    out.push((
                        p.file_name().to_string_lossy().into_owned(),
                        held(&p.path()),
                    ));
                }
            }
        }
    }
    out
}

fn held(dir: &Path) -> bool {
    std::fs::read_dir(dir.join("holders")).is_ok_and(|mut d| d.next().is_some())
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

/// Why the kernel's controller at `addr` must not be taken away: mounted or held block devices.
pub fn in_use(paths: &SysPaths, addr: &PciAddress, mounts: &str) -> Vec<String> {
    let devs = block_devices(paths, addr);
    let names: Vec<String> = devs.iter().map(|(n, _)| n.clone()).collect();
    let mut why: Vec<String> = mounted(&names, mounts)
        .into_iter()
        .map(|(d, m)| format!("/dev/{d} is mounted on {m}"))
        .collect();
    why.extend(
        devs.iter()
            .filter(|(_, h)| *h)
            .map(|(d, _)| format!("/dev/{d} is held by another device (LVM, RAID or dm)")),
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
        std::fs::write(dev.join("serial"), "S1  \n").unwrap();
        std::fs::write(dev.join("model"), "Disk\n").unwrap();
        let paths = SysPaths::new(dir.join("sys"), dir.join("dev/vfio"));
        let addr = PciAddress::parse("0000:01:00.0").unwrap();
        assert_eq!(
            block_devices(&paths, &addr),
            vec![
                ("nvme0n1".to_string(), false),
                ("nvme0n1p1".to_string(), true)
            ]
        );
        assert_eq!(
            serial_and_model(&paths, &addr),
            Some(("S1".to_string(), "Disk".to_string()))
        );
        let why = in_use(&paths, &addr, "/dev/nvme0n1 /mnt ext4 rw 0 0\n");
        assert_eq!(why.len(), 2, "{why:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
