//! Turns a scenario into QEMU device arguments, creating its fresh image files.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

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
        let id = qemu_id(i);
        let mut dev = if c.bus == 0 {
            format!(
                "nvme,id={id},serial={},addr=0x{:02x}",
                qemu_escape(c.serial),
                c.slot
            )
        } else {
            // Alone behind its own root port, so that QMP device_del can hot-unplug it.
            args.push("-device".into());
            args.push(format!(
                "pcie-root-port,id=rp{i},bus=pcie.0,chassis={},slot={},addr=0x{:02x}",
                i + 1,
                i + 1,
                c.slot
            ));
            format!("nvme,id={id},serial={},bus=rp{i}", qemu_escape(c.serial))
        };
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

/// The QEMU device id of the scenario's `index`-th controller (`c0`, `c1`, ...): what QMP
/// `device_del` takes.
pub fn qemu_id(index: usize) -> String {
    format!("c{index}")
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
        Backing::FaultyRaw {
            read_error_sector,
            write_error_sector,
        } => {
            let image = create_image(image_dir, drive, ns.bytes)?;
            let rules = image_dir.join(format!("{drive}.blkdebug.cfg"));
            fs::write(
                &rules,
                blkdebug_rules(read_error_sector, write_error_sector),
            )
            .with_context(|| format!("writing blkdebug rules {}", rules.display()))?;
            let (rules, image) = (rules.to_string_lossy(), image.to_string_lossy());
            if rules.contains(':') || image.contains(':') {
                bail!(
                    "blkdebug takes `blkdebug:RULES:IMAGE`, so the image folder {} must not \
                     contain ':'; move the project or set VFNVME_VM_DIR",
                    image_dir.display()
                );
            }
            format!(
                "if=none,id={drive},format=raw,file={}",
                qemu_escape(&format!("blkdebug:{rules}:{image}"))
            )
        }
        Backing::SlowNull { latency_ms } => format!(
            "if=none,id={drive},driver=null-co,read-zeroes=on,size={},latency-ns={}",
            ns.bytes,
            u64::from(latency_ms) * 1_000_000
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
    if ns.pil {
        dev.push_str(",pil=1");
    }
    match bus {
        Some(bus) => dev.push_str(&format!(",bus={bus}")),
        // A shared namespace gets an EUI64 (QEMU 7.2 reports none by default, and no UUID
        // reaches the driver): multipath heads merge a namespace's paths by its identifier.
        None => dev.push_str(&format!(
            ",shared=on,eui64={}",
            SHARED_EUI64_BASE | u64::from(ns.nsid)
        )),
    }
    args.push("-device".into());
    args.push(dev);
    Ok(())
}

/// The EUI64 of shared namespace N is this | N (the OUI 52:54:00 of QEMU's own devices).
pub const SHARED_EUI64_BASE: u64 = 0x5254_0056_4e00_0000;

/// QEMU `blkdebug` rules: EIO (errno 5) for every read covering `read_sector` and every write
/// covering `write_sector` (512-byte sectors), each time (`once = "off"`).
pub fn blkdebug_rules(read_sector: u64, write_sector: u64) -> String {
    let rule = |event: &str, sector: u64| {
        format!(
            "[inject-error]\nevent = \"{event}\"\nerrno = \"5\"\nsector = \"{sector}\"\nonce = \"off\"\nimmediately = \"off\"\n"
        )
    };
    format!(
        "{}\n{}",
        rule("read_aio", read_sector),
        rule("write_aio", write_sector)
    )
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
    fn pi_namespaces_get_pil() {
        let dir = temp_dir("pi");
        let joined = qemu_device_args(find("pi").unwrap(), &dir)
            .unwrap()
            .join(" ");
        assert!(
            joined.contains(
                "nsid=1,logical_block_size=512,physical_block_size=512,ms=8,mset=1,pi=1,bus=c0"
            ),
            "{joined}"
        );
        assert!(joined.contains("nsid=2,logical_block_size=512,physical_block_size=512,ms=8,mset=0,pi=1,pil=1,bus=c0"), "{joined}");
        assert!(
            joined.contains(
                "nsid=7,logical_block_size=512,physical_block_size=512,ms=16,mset=0,bus=c0"
            ),
            "{joined}"
        );
        assert_eq!(fs::metadata(dir.join("c0n6.img")).unwrap().len(), 8 << 20);
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
        // Each shared namespace has its own EUI64 (multipath heads merge paths by it).
        let eui = |nsid: u64| format!(",eui64={}", SHARED_EUI64_BASE | nsid);
        assert!(args
            .iter()
            .any(|a| a.contains("nsid=1,") && a.ends_with(&eui(1))));
        assert!(args
            .iter()
            .any(|a| a.contains("nsid=2,") && a.ends_with(&eui(2))));
        let ctrls = args.iter().filter(|a| a.starts_with("nvme,")).count();
        assert_eq!(ctrls, 2);
        assert!(args
            .iter()
            .filter(|a| a.starts_with("nvme,"))
            .all(|a| a.contains("subsys=ss0")));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn slow_null_backing_sets_latency_ns_beside_a_raw_namespace() {
        let dir = temp_dir("slowns");
        let args = qemu_device_args(find("slowns").unwrap(), &dir).unwrap();
        let drives: Vec<&String> = args.iter().filter(|a| a.starts_with("if=none")).collect();
        assert_eq!(drives.len(), 2, "{args:?}");
        assert!(drives[0].contains("format=raw"), "{args:?}");
        assert!(
            drives[1].contains("driver=null-co,read-zeroes=on,size=67108864,latency-ns=3000000000"),
            "{args:?}"
        );
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn hotplug_controller_sits_behind_its_own_root_port() {
        let dir = temp_dir("hotplug");
        let args = qemu_device_args(find("hotplug").unwrap(), &dir).unwrap();
        let rp = args
            .iter()
            .position(|a| a.starts_with("pcie-root-port,"))
            .expect("a root port");
        assert_eq!(
            args[rp],
            "pcie-root-port,id=rp0,bus=pcie.0,chassis=1,slot=1,addr=0x10"
        );
        let c0 = args
            .iter()
            .position(|a| a.starts_with("nvme,id=c0,"))
            .unwrap();
        assert!(rp < c0);
        assert_eq!(args[c0], "nvme,id=c0,serial=VFNVME-HOTPLUG,bus=rp0");
        assert!(args.contains(&"nvme,id=c1,serial=VFNVME-STAYS,addr=0x11".to_string()));
        assert_eq!(
            args.iter()
                .filter(|a| a.starts_with("pcie-root-port"))
                .count(),
            1
        );
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn mphotplug_root_port_controller_joins_the_subsystem_and_namespaces_stay_shared() {
        let dir = temp_dir("mphotplug");
        let args = qemu_device_args(find("mphotplug").unwrap(), &dir).unwrap();
        assert_eq!(args[1], "nvme-subsys,id=ss0,nqn=vfnvme-mphp");
        let rp = args
            .iter()
            .position(|a| a.starts_with("pcie-root-port,"))
            .expect("a root port");
        assert_eq!(
            args[rp],
            "pcie-root-port,id=rp0,bus=pcie.0,chassis=1,slot=1,addr=0x10"
        );
        let c0 = args
            .iter()
            .position(|a| a.starts_with("nvme,id=c0,"))
            .unwrap();
        assert!(rp < c0);
        assert_eq!(args[c0], "nvme,id=c0,serial=VFNVME-MPHP,bus=rp0,subsys=ss0");
        assert!(args.contains(&"nvme,id=c1,serial=VFNVME-MPHP,addr=0x11,subsys=ss0".to_string()));
        // The shared namespaces come after both controllers, on no controller's bus (QEMU puts
        // them on the subsystem's, so removing c0 leaves them to c1), each with its EUI64.
        let c1 = args
            .iter()
            .position(|a| a.starts_with("nvme,id=c1,"))
            .unwrap();
        let ns: Vec<usize> = args
            .iter()
            .enumerate()
            .filter(|(_, a)| a.starts_with("nvme-ns,"))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(ns.len(), 2, "{args:?}");
        for (k, &i) in ns.iter().enumerate() {
            assert!(i > c1, "{args:?}");
            assert!(!args[i].contains("bus="), "{}", args[i]);
            assert!(
                args[i].ends_with(&format!(
                    ",shared=on,eui64={}",
                    SHARED_EUI64_BASE | (k as u64 + 1)
                )),
                "{}",
                args[i]
            );
        }
        assert_eq!(fs::metadata(dir.join("ssn1.img")).unwrap().len(), 16 << 20);
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn faulty_raw_namespace_is_blkdebug_over_an_image_with_generated_rules() {
        let dir = temp_dir("media");
        let args = qemu_device_args(find("media").unwrap(), &dir).unwrap();
        let drive = args
            .iter()
            .find(|a| a.starts_with("if=none,id=c0n1,"))
            .unwrap();
        let rules = dir.join("c0n1.blkdebug.cfg");
        let image = dir.join("c0n1.img");
        assert_eq!(
            drive,
            &format!(
                "if=none,id=c0n1,format=raw,file=blkdebug:{}:{}",
                rules.display(),
                image.display()
            )
        );
        assert_eq!(fs::metadata(&image).unwrap().len(), 16 * 1024 * 1024);
        let text = fs::read_to_string(&rules).unwrap();
        assert_eq!(text, blkdebug_rules(2048, 4096));
        assert_eq!(text.matches("[inject-error]").count(), 2);
        assert!(text.contains("event = \"read_aio\"\nerrno = \"5\"\nsector = \"2048\""));
        assert!(text.contains("event = \"write_aio\"\nerrno = \"5\"\nsector = \"4096\""));
        // ns 2 is a plain raw image.
        assert!(args
            .iter()
            .any(|a| a.starts_with("if=none,id=c0n2,format=raw,file=/")));
        fs::remove_dir_all(&dir).ok();
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
