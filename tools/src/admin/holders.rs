//! Who holds a controller's VFIO device: the processes with `/dev/vfio/<group>` (or the
//! group's `/dev/vfio/devices/vfioN` cdev) open, found by scanning `/proc/*/fd`.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use vfnvme::hal::PciAddress;

/// The device nodes through which a process can use `addr` via VFIO.
fn vfio_nodes(addr: &PciAddress) -> Vec<PathBuf> {
    let dev = PathBuf::from(format!("/sys/bus/pci/devices/{addr}"));
    let mut nodes = Vec::new();
    if let Ok(group) = std::fs::read_link(dev.join("iommu_group")) {
        if let Some(n) = group.file_name() {
            nodes.push(Path::new("/dev/vfio").join(n));
        }
    }
    if let Ok(entries) = std::fs::read_dir(dev.join("vfio-dev")) {
        for e in entries.flatten() {
            nodes.push(Path::new("/dev/vfio/devices").join(e.file_name()));
        }
    }
    nodes
}

/// Processes (pid, command name) other than this one with one of `nodes` open.
pub fn processes_holding(nodes: &[PathBuf]) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .any(|target| nodes.contains(&target));
        if holds {
            let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
            found.push((pid, comm.trim().to_string()));
        }
    }
    found
}

/// Fails when another process holds `addr` through VFIO, naming it.
pub fn refuse_if_held(addr: &PciAddress) -> Result<()> {
    let held = processes_holding(&vfio_nodes(addr));
    if held.is_empty() {
        return Ok(());
    }
    let who: Vec<String> = held
        .iter()
        .map(|(pid, comm)| format!("PID {pid} ({comm})"))
        .collect();
    bail!(
        "{addr} is in use by {} through VFIO: stop that process first (a controller has one user at a time)",
        who.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::processes_holding;
    use std::process::{Command, Stdio};

    #[test]
    fn finds_the_process_holding_a_file_by_pid_and_name() {
        let path = std::env::temp_dir().join(format!("vfnvme-holder-{}", std::process::id()));
        std::fs::write(&path, b"x").unwrap();
        // `spawn` returns once `exec` has succeeded, so the child is `sleep` from here on and
        // holds the file as its standard input (a shell that `exec`s sleep later raced with
        // the check below: its comm could still read "sh").
        let mut child = Command::new("sleep")
            .arg("60")
            .stdin(Stdio::from(std::fs::File::open(&path).unwrap()))
            .spawn()
            .unwrap();
        let found = processes_holding(std::slice::from_ref(&path));
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&path);
        assert_eq!(found, vec![(child.id(), "sleep".to_string())]);
    }
}
