//! Chooses the accelerator: KVM when a probe guest boots with it, else TCG.
//!
//! On some hosts `/dev/kvm` exists but a KVM guest spins at boot. The probe boots a bare guest
//! with KVM, bounded by [`PROBE_TIMEOUT`], and caches the answer under `target/vm/`.

use std::fs;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use super::console::Outcome;
use super::qemu::QEMU;
use super::{AccelChoice, Boot, Guest};

/// How long a KVM guest may take to boot and run `true`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// The accelerator name for QEMU's `-accel`.
pub fn choose(choice: AccelChoice, guest: &Guest<'_>) -> Result<&'static str> {
    match choice {
        AccelChoice::Tcg => Ok("tcg"),
        AccelChoice::Kvm => Ok("kvm"),
        AccelChoice::Auto => auto(guest),
    }
}

/// Size and modification time of the QEMU binary found in PATH (changes when QEMU is updated).
fn qemu_stamp() -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(QEMU))
        .find_map(|p| fs::metadata(p).ok())
        .map(|m| {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            format!("{}-{mtime}", m.len())
        })
        .unwrap_or_else(|| "none".into())
}

fn auto(guest: &Guest<'_>) -> Result<&'static str> {
    if !Path::new("/dev/kvm").exists() {
        return Ok("tcg");
    }
    let cache = guest.dirs.root.join("accel-probe");
    // KVM working or not is a property of the host, its QEMU and the guest kernel.
    let key = format!("{}:{}", guest.kernel.display(), qemu_stamp());
    if let Ok(text) = fs::read_to_string(&cache) {
        if let Some((cached_key, accel)) = text.trim().rsplit_once(' ') {
            if cached_key == key {
                return Ok(if accel == "kvm" { "kvm" } else { "tcg" });
            }
        }
    }
    eprintln!(
        "vfnvme vm: probing KVM (a bare guest, at most {} s; the answer is cached in {})",
        PROBE_TIMEOUT.as_secs(),
        cache.display()
    );
    let run = guest.dirs.new_run()?;
    let command = vec!["/bin/true".to_string()];
    let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
    let result = guest.boot(
        &run,
        &Boot {
            accel: "kvm",
            devices: &[],
            extra_qemu: &[],
            vfio: &[],
            kernel_devices: &[],
            env: &env,
            command: &command,
            timeout: PROBE_TIMEOUT,
            echo: false,
            iommu: true,
        },
    );
    run.remove_images();
    let accel = match result.map(|r| r.outcome) {
        Ok(Outcome::Exited(0)) => "kvm",
        _ => "tcg",
    };
    if accel == "tcg" {
        eprintln!("vfnvme vm: KVM did not boot the probe guest; using TCG (software emulation)");
    }
    fs::write(&cache, format!("{key} {accel}\n"))?;
    Ok(accel)
}
