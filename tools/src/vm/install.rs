//! Installs what the guest needs (once, idempotently) and finds the guest kernel.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Debian packages the guest harness needs.
pub const PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "fio",
    "linux-image-amd64",
    // The kernel's nvme-cli, which the crosscheck scenario compares `vfnvme smart-log` and
    // `id-ctrl` with.
    "nvme-cli",
];

/// Fails with a clear message unless running as root.
pub fn require_root() -> Result<()> {
    let status = fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let euid = effective_uid(&status).context("no Uid line in /proc/self/status")?;
    if euid != 0 {
        bail!(
            "`vfnvme vm` must run as root (it installs packages and starts QEMU with the host's \
             root shared into the guest); rerun it with sudo"
        );
    }
    Ok(())
}

/// The effective UID from the text of `/proc/self/status` (`Uid: real effective saved fs`).
fn effective_uid(status: &str) -> Option<u32> {
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Installs the missing packages with apt-get, saying what it does. Does nothing when all are
/// installed.
pub fn ensure_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|p| !is_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "vfnvme vm: installing missing packages: {} (apt-get update + apt-get install -y)",
        missing.join(" ")
    );
    run_apt(&["-q", "update"])?;
    let mut args = vec!["-q", "install", "-y"];
    args.extend(missing.iter().copied());
    run_apt(&args)?;
    for p in &missing {
        if !is_installed(p) {
            bail!("package {p} is still not installed after apt-get install; install it by hand");
        }
    }
    Ok(())
}

fn is_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).ends_with(" installed"))
        .unwrap_or(false)
}

fn run_apt(args: &[&str]) -> Result<()> {
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("running apt-get (this needs a Debian-like host)")?;
    if !status.success() {
        bail!(
            "`apt-get {}` failed ({status}); fix the package sources and retry",
            args.join(" ")
        );
    }
    Ok(())
}

/// The guest kernel: an image and its module folder.
#[derive(Debug, Clone)]
pub struct GuestKernel {
    /// Kernel release, e.g. `6.1.0-57-amd64`.
    pub version: String,
    /// `/boot/vmlinuz-<version>`.
    pub image: PathBuf,
    /// `/lib/modules/<version>`.
    pub modules: PathBuf,
}

/// The newest `/boot/vmlinuz-*` that has a matching `/lib/modules/<version>` folder.
pub fn find_kernel() -> Result<GuestKernel> {
    find_kernel_in(Path::new("/boot"), Path::new("/lib/modules"))
}

fn find_kernel_in(boot: &Path, modules: &Path) -> Result<GuestKernel> {
    let mut found: Vec<GuestKernel> = Vec::new();
    let entries = fs::read_dir(boot).with_context(|| format!("reading {}", boot.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(version) = name.strip_prefix("vmlinuz-") else {
            continue;
        };
        let module_dir = modules.join(version);
        if module_dir.join("modules.dep").is_file() {
            found.push(GuestKernel {
                version: version.to_string(),
                image: entry.path(),
                modules: module_dir,
            });
        }
    }
    found.sort_by_key(|k| version_key(&k.version));
    found.pop().with_context(|| {
        format!(
            "no guest kernel: no {}/vmlinuz-* with a matching {}/<version>/modules.dep; \
             install one with `apt-get install linux-image-amd64`",
            boot.display(),
            modules.display()
        )
    })
}

/// Orders kernel versions numerically: `6.1.0-57` after `6.1.0-9`.
fn version_key(version: &str) -> Vec<u64> {
    version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or(0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_newest_kernel_with_modules() {
        let root = std::env::temp_dir().join(format!("vfnvme-kernel-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let boot = root.join("boot");
        let mods = root.join("modules");
        fs::create_dir_all(&boot).unwrap();
        for v in ["6.1.0-9-amd64", "6.1.0-57-amd64", "6.12.0-1-amd64"] {
            fs::write(boot.join(format!("vmlinuz-{v}")), b"").unwrap();
        }
        // 6.12 has no modules: it must be skipped.
        for v in ["6.1.0-9-amd64", "6.1.0-57-amd64"] {
            fs::create_dir_all(mods.join(v)).unwrap();
            fs::write(mods.join(v).join("modules.dep"), b"").unwrap();
        }
        let k = find_kernel_in(&boot, &mods).unwrap();
        assert_eq!(k.version, "6.1.0-57-amd64");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn effective_uid_is_the_second_number() {
        assert_eq!(effective_uid("Name:\tx\nUid:\t1000\t0\t0\t0\n"), Some(0));
        assert_eq!(effective_uid("Name:\tx\n"), None);
    }

    #[test]
    fn no_kernel_is_a_clear_error() {
        let root = std::env::temp_dir().join(format!("vfnvme-nokernel-{}", std::process::id()));
        fs::create_dir_all(&root).unwrap();
        let err = find_kernel_in(&root, &root).unwrap_err().to_string();
        assert!(err.contains("linux-image-amd64"), "{err}");
        fs::remove_dir_all(&root).unwrap();
    }
}
