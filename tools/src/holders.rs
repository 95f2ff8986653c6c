//! Who holds a device: processes with an open file descriptor on it (found through
//! `/proc/<pid>/fd`), swap areas (`/proc/swaps`). The proc root is a parameter so that tests
//! can use a fake tree.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// A process with a file descriptor open on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The process ID.
    pub pid: u32,
    /// Its command name (`/proc/<pid>/comm`).
    pub command: String,
    /// The device it has open, as `/proc/<pid>/fd` shows it.
    pub path: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} ({}) has {} open",
            self.pid, self.command, self.path
        )
    }
}

/// What to look for: device node paths, and device numbers (`dev_t`) of block or character
/// devices (which catch nodes opened under another name).
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    /// Paths such as `/dev/nvme0n1` or `/dev/vfio/12`.
    pub paths: Vec<String>,
    /// Block device numbers (from sysfs `dev` files, `MAJ:MIN`).
    pub block_devs: Vec<u64>,
    /// Character device numbers.
    pub char_devs: Vec<u64>,
}

/// Parses a sysfs `dev` attribute (`259:0`) into a `dev_t`.
pub fn parse_dev(text: &str) -> Option<u64> {
    let (maj, min) = text.trim().split_once(':')?;
    Some(libc::makedev(maj.parse().ok()?, min.parse().ok()?))
}

/// Every process under `proc` (normally `/proc`) except this one with a file descriptor on
/// one of `wanted`, sorted by pid. Processes that vanish or can't be read are skipped.
pub fn processes_holding(proc: &Path, wanted: &Wanted) -> Vec<Holder> {
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(proc) else {
        return out;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.filter_map(|e| e.ok()) {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy().into_owned();
            let by_path = wanted.paths.contains(&target);
            let by_number = !by_path
                && std::fs::metadata(fd.path()).is_ok_and(|m| {
                    let t = m.file_type();
                    (t.is_block_device() && wanted.block_devs.contains(&m.rdev()))
                        || (t.is_char_device() && wanted.char_devs.contains(&m.rdev()))
                });
            if by_path || by_number {
                let command = std::fs::read_to_string(entry.path().join("comm"))
                    .map(|c| c.trim().to_string())
                    .unwrap_or_else(|_| "?".to_string());
                out.push(Holder {
                    pid,
                    command,
                    path: target,
                });
                break;
            }
        }
    }
    out.sort_by_key(|h| h.pid);
    out
}

/// The names (`nvme0n1p2`) among `devs` that `swaps` (the text of `/proc/swaps`) lists as
/// active swap areas.
pub fn swapping(devs: &[String], swaps: &str) -> Vec<String> {
    swaps
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|src| src.strip_prefix("/dev/"))
        .filter(|name| devs.iter().any(|d| d == name))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_processes_by_the_path_of_their_descriptors() {
        let root = std::env::temp_dir().join(format!("vfnvme-holders-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let proc_ = |pid: u32, comm: &str, fds: &[&str]| {
            let d = root.join(pid.to_string());
            std::fs::create_dir_all(d.join("fd")).unwrap();
            std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
            for (i, t) in fds.iter().enumerate() {
                std::os::unix::fs::symlink(t, d.join("fd").join(i.to_string())).unwrap();
            }
        };
        proc_(4242, "dd", &["/dev/null", "/dev/nvme0n1"]);
        proc_(77, "qemu", &["/dev/vfio/vfio", "/dev/vfio/12"]);
        proc_(88, "bash", &["/dev/pts/0", "/dev/nvme0n10"]);
        proc_(std::process::id(), "me", &["/dev/nvme0n1"]);
        std::fs::create_dir_all(root.join("self")).unwrap();
        let find = |paths: &[&str]| {
            processes_holding(
                &root,
                &Wanted {
                    paths: paths.iter().map(|s| s.to_string()).collect(),
                    ..Wanted::default()
                },
            )
        };
        let h = find(&["/dev/nvme0n1", "/dev/nvme0n1p1"]);
        assert_eq!(
            h,
            vec![Holder {
                pid: 4242,
                command: "dd".into(),
                path: "/dev/nvme0n1".into()
            }]
        );
        assert_eq!(h[0].to_string(), "pid 4242 (dd) has /dev/nvme0n1 open");
        let h = find(&["/dev/vfio/12"]);
        assert_eq!(h.len(), 1);
        assert_eq!((h[0].pid, h[0].command.as_str()), (77, "qemu"));
        assert!(find(&["/dev/nvme1n1"]).is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn finds_this_process_by_device_number() {
        // /dev/null is a character device every system has: open it and look for it by
        // number in the real /proc, from a fake "other" process linking to our descriptor.
        let f = std::fs::File::open("/dev/null").unwrap();
        let rdev = std::fs::metadata("/dev/null").unwrap().rdev();
        let root = std::env::temp_dir().join(format!("vfnvme-holders-n-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let d = root.join("1");
        std::fs::create_dir_all(d.join("fd")).unwrap();
        std::fs::write(d.join("comm"), "init\n").unwrap();
        use std::os::fd::AsRawFd;
        std::os::unix::fs::symlink(format!("/proc/self/fd/{}", f.as_raw_fd()), d.join("fd/3"))
            .unwrap();
        let h = processes_holding(
            &root,
            &Wanted {
                char_devs: vec![rdev],
                ..Wanted::default()
            },
        );
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[0].pid, 1);
        let h = processes_holding(
            &root,
            &Wanted {
                block_devs: vec![rdev],
                ..Wanted::default()
            },
        );
        assert!(
            h.is_empty(),
            "a block device number must not match a char device"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn dev_numbers_and_swaps() {
        assert_eq!(parse_dev("259:3\n"), Some(libc::makedev(259, 3)));
        assert_eq!(parse_dev("nonsense"), None);
        let swaps = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                     /dev/nvme0n1p2                          partition\t8388604\t\t0\t\t-2\n\
                     /swapfile                               file\t\t1048572\t\t0\t\t-3\n";
        let devs = vec!["nvme0n1".to_string(), "nvme0n1p2".to_string()];
        assert_eq!(swapping(&devs, swaps), vec!["nvme0n1p2".to_string()]);
        assert!(swapping(&["nvme1n1".to_string()], swaps).is_empty());
    }
}
