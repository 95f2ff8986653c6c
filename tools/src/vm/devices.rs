//! Turns a scenario into QEMU device arguments, creating its fresh image files.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::scenarios::{Backing, Namespace, Scenario};

/// QEMU arguments for a scenario's controllers and namespaces.
///
/// Raw images are created sparse (zero-filled) in `image_dir`, which must be fresh for the run.
pub fn qemu_device_args(scenario: &Scenario, image_dir: &Path) -> Result<Vec<String>> {
    let mut args = Vec::new();
    if let Some(subsys) = &scenario.subsystem {
        args.push("-device".into());
        args.push(format!("nvme-subsys,id=ss0,nqn={}", subsys.nqn));
    }
    for (i, c) in scenario.controllers.iter().enumerate() {
        let id = format!("c{i}");
        let mut dev = format!(
            "nvme,id={id},serial={},addr=0x{:02x}",
            qemu_escape(c.serial),
            c.slot
        );
        if scenario.subsystem.is_some() {
            dev.push_str(",subsys=ss0");
        }
        if let Some(mdts) = c.mdts {
            dev.push_str(&format!(",mdts={mdts}"));
        }
        if let Some(n) = c.max_ioqpairs {
            dev.push_str(&format!(",max_ioqpairs={n}"));
        }
        args.push("-device".into());
        args.push(dev);
        for ns in c.namespaces.expand() {
            let drive = format!("{id}n{}", ns.nsid);
            push_namespace(&mut args, &ns, &drive, Some(&id), image_dir)?;
        }
    }
    // Shared namespaces come after every controller: without bus= QEMU attaches them to all
    // controllers of the subsystem.
    if let Some(subsys) = &scenario.subsystem {
        for ns in subsys.namespaces.expand() {
            let drive = format!("ssn{}", ns.nsid);
            push_namespace(&mut args, &ns, &drive, None, image_dir)?;
        }
    }
    for d in scenario.other_devices() {
        args.push("-device".into());
        args.push(format!("{},addr=0x{:02x}", d.qemu, d.slot));
    }
    Ok(args)
}

fn push_namespace(
    args: &mut Vec<String>,
    ns: &Namespace,
    drive: &str,
    bus: Option<&str>,
    image_dir: &Path,
) -> Result<()> {
    let drive_arg = match ns.backing {
        Backing::Raw => {
            let path = create_image(image_dir, drive, ns.bytes)?;
            format!(
                "if=none,id={drive},format=raw,file={}",
                qemu_escape(&path.to_string_lossy())
            )
        }
        Backing::Null => format!(
            "if=none,id={drive},driver=null-co,read-zeroes=on,size={}",
            ns.bytes
        ),
    };
    args.push("-drive".into());
    args.push(drive_arg);
    let mut dev = format!(
        "nvme-ns,drive={drive},nsid={},logical_block_size={lba},physical_block_size={lba}",
        ns.nsid,
        lba = ns.lba_size
    );
    if ns.ms != 0 {
        dev.push_str(&format!(",ms={},mset={}", ns.ms, u8::from(ns.mset)));
    }
    if ns.pi != 0 {
        dev.push_str(&format!(",pi={}", ns.pi));
    }
    match bus {
        Some(bus) => dev.push_str(&format!(",bus={bus}")),
        None => dev.push_str(",shared=on"),
    }
    args.push("-device".into());
    args.push(dev);
    Ok(())
}

/// Creates a sparse, zero-filled image file of `bytes` bytes (replacing any old one).
fn create_image(dir: &Path, name: &str, bytes: u64) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating image folder {}", dir.display()))?;
    let path = dir.join(format!("{name}.img"));
    let file = File::create(&path).with_context(|| {
        format!(
            "creating image {} (is the disk full or read-only?)",
            path.display()
        )
    })?;
    file.set_len(bytes)
        .with_context(|| format!("sizing image {} to {bytes} bytes", path.display()))?;
    Ok(path)
}

/// Escapes a value for a QEMU option list (a comma is written twice).
fn qemu_escape(value: &str) -> String {
    value.replace(',', ",,")
}

#[cfg(test)]
mod tests {
    use super::super::scenarios::find;
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vfnvme-devices-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn metadata_namespaces_get_ms_mset_and_pi() {
        let dir = temp_dir("meta");
        let joined = qemu_device_args(find("meta").unwrap(), &dir)
            .unwrap()
            .join(" ");
        assert!(joined.contains("nsid=1,logical_block_size=512,physical_block_size=512,bus=c0"));
        assert!(joined
            .contains("nsid=2,logical_block_size=512,physical_block_size=512,ms=8,mset=1,bus=c0"));
        assert!(joined.contains(
            "nsid=3,logical_block_size=4096,physical_block_size=4096,ms=16,mset=0,bus=c0"
        ));
        assert!(joined.contains("ms=8,mset=1,pi=1,bus=c0"));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn controller_limits_reach_qemu() {
        let dir = temp_dir("shapes");
        let joined = qemu_device_args(find("shapes").unwrap(), &dir)
            .unwrap()
            .join(" ");
        assert!(
            joined.contains("nvme,id=c0,serial=VFNVME-SHAPES,addr=0x10,mdts=2,max_ioqpairs=1"),
            "{joined}"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn data_scenario_has_slot_serial_and_sparse_image() {
        let dir = temp_dir("data");
        let args = qemu_device_args(find("data").unwrap(), &dir).unwrap();
        let joined = args.join(" ");
        assert!(joined.contains("nvme,id=c0,serial=VFNVME-DATA,addr=0x10"));
        assert!(joined.contains("nvme-ns,drive=c0n1,nsid=1,logical_block_size=512"));
        let img = dir.join("c0n1.img");
        assert_eq!(fs::metadata(&img).unwrap().len(), 64 * 1024 * 1024);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn multipath_declares_subsystem_first_and_shared_namespaces_last() {
        let dir = temp_dir("mp");
        let args = qemu_device_args(find("multipath").unwrap(), &dir).unwrap();
        assert!(args[1].starts_with("nvme-subsys,"));
        let last = args.last().unwrap();
        assert!(last.contains("shared=on") && !last.contains("bus="));
        let ctrls = args.iter().filter(|a| a.starts_with("nvme,")).count();
        assert_eq!(ctrls, 2);
        assert!(args
            .iter()
            .filter(|a| a.starts_with("nvme,"))
            .all(|a| a.contains("subsys=ss0")));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn null_backing_makes_no_file_and_commas_are_escaped() {
        let dir = temp_dir("null");
        let args = qemu_device_args(find("null").unwrap(), &dir).unwrap();
        assert!(args
            .iter()
            .any(|a| a.contains("driver=null-co,read-zeroes=on")));
        assert!(!dir.exists());
        assert_eq!(qemu_escape("a,b"), "a,,b");
    }
}
