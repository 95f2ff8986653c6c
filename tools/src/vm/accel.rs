//! Chooses the accelerator: KVM when a probe guest boots with it, else TCG.
//!
//! On some hosts `/dev/kvm` exists but a KVM guest spins at boot. The probe boots a bare guest
//! with KVM, bounded by [`PROBE_TIMEOUT`], and caches the answer under `target/vm/`.

use std::fs;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use super::console::Outcome;
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

fn auto(guest: &Guest<'_>) -> Result<&'static str> {
    if !Path::new("/dev/kvm").exists() {
        return Ok("tcg");
    }
    let cache = guest.dirs.root.join("accel-probe");
    let key = guest.initramfs.to_string_lossy().into_owned();
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
    let command = vec!["true".to_string()];
    let result = guest.boot(
        &run,
        &Boot {
            accel: "kvm",
            devices: &[],
            extra_qemu: &[],
            vfio: &[],
            kernel_devices: &[],
            env: &[],
            command: &command,
            timeout: PROBE_TIMEOUT,
            echo: false,
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
