//! `vfnvme list`: the NVMe controllers (PCI class 0x010802) grouped by NVM subsystem (SUBNQN),
//! each with its driver, serial and model, and per namespace its size, LBA format and who
//! drives it. Controllers on vfio-pci are opened briefly; the kernel's are read from sysfs.

use crate::output::say;
use crate::{kernel_nvme, open};
use anyhow::Result;
use clap::Args;
use serde_json::{json, Value};
use std::path::Path;
use vfnvme::hal::pci::bind as pci_bind;
use vfnvme::hal::pci::sysfs::VFIO_PCI;
use vfnvme::hal::{PciAddress, SysPaths};
use vfnvme::multipath::{PathState, UniqueId};
use vfnvme::platform::Platform;
use vfnvme::{Controller, ControllerOptions};

/// Arguments of `vfnvme list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    /// Print JSON as `nvme list -o json` does: {"Devices": [...]} with nvme-cli's keys (and
    /// vfnvme's own per namespace), plus "Controllers", one object per controller with its
    /// subsystem and namespaces (with --subsystems: {"subsystems": [...]}).
    #[arg(long)]
    pub json: bool,
    /// Output format (nvme-cli's `-o`): json as --json; normal prints nvme-cli's table (one
    /// row per namespace) instead of vfnvme's grouped view.
    #[arg(short = 'o', long = "output-format", value_parser = ["normal", "json"])]
    pub output_format: Option<String>,
    /// Show only the subsystems (as nvme-cli's list-subsys): per subsystem NQN its
    /// controllers (address, cntlid), its heads (nsid, NGUID/EUI64/UUID, size) and per head
    /// its paths with ANA group and state.
    #[arg(long)]
    pub subsystems: bool,
    /// List the in-memory model instead of the machine's controllers: one subsystem of two
    /// controllers sharing two namespaces, with ANA groups in different states.
    #[arg(long)]
    pub model: bool,
}

fn read_trimmed(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The kernel's view of a controller it drives: SUBNQN and namespaces from sysfs.
fn kernel_view(paths: &SysPaths, addr: &PciAddress, v: &mut Value) {
    if let Some((serial, model)) = kernel_nvme::serial_and_model(paths, addr) {
        v["serial"] = json!(serial);
        v["model"] = json!(model);
    }
    let ctrl_dir = std::fs::read_dir(paths.pci_device(addr).join("nvme"))
        .ok()
        .and_then(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).min());
    if let Some(c) = &ctrl_dir {
        v["subnqn"] = json!(read_trimmed(&c.join("subsysnqn")));
        v["cntlid"] = json!(read_trimmed(&c.join("cntlid")).and_then(|s| s.parse::<u16>().ok()));
        v["firmware"] = json!(read_trimmed(&c.join("firmware_rev")));
        v["name"] = json!(c.file_name().map(|n| n.to_string_lossy().into_owned()));
        v["state"] = json!(read_trimmed(&c.join("state")));
        // The kernel's subsystem folder, e.g. nvme-subsys0 (the `subsystem` link).
        v["subsys_name"] = json!(std::fs::read_link(c.join("subsystem"))
            .ok()
            .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned())));
    }
    let mut namespaces = Vec::new();
    for d in kernel_nvme::block_devices(paths, addr) {
        // The namespace's folder: under the controller, or a native-multipath head.
        let dir = ctrl_dir
            .as_ref()
            .map(|c| c.join(&d.name))
            .filter(|p| p.exists())
            .unwrap_or_else(|| paths.sys.join("block").join(&d.name));
        // Namespaces only (partitions have a `partition` attribute).
        if dir.join("partition").exists() || !dir.exists() {
            continue;
        }
        let sectors: Option<u64> = read_trimmed(&dir.join("size")).and_then(|s| s.parse().ok());
        let lba: Option<u64> =
            read_trimmed(&dir.join("queue/logical_block_size")).and_then(|s| s.parse().ok());
        let blocks = sectors.zip(lba).map(|(s, l)| s * 512 / l.max(1));
        // NUSE: newer kernels show it in sysfs; otherwise the namespace counts as full.
        let nuse: Option<u64> = read_trimmed(&dir.join("nuse"))
            .and_then(|s| s.parse().ok())
            .or(blocks);
        namespaces.push(json!({
            "nsid": read_trimmed(&dir.join("nsid")).and_then(|s| s.parse::<u32>().ok()),
            "device_path": format!("/dev/{}", d.name),
            "blocks": blocks,
            "nuse_blocks": nuse,
            "size_bytes": sectors.map(|s| s * 512),
            "lba_size": lba,
            "metadata_size": null,
            "metadata": null,
            "format": null,
            "io_refused": null,
            "driven_by": format!("kernel nvme: /dev/{}", d.name),
        }));
    }
    v["namespaces"] = json!(namespaces);
}

/// Fills `v` from a controller vfnvme brought up: serial, model, SUBNQN, CNTLID, CMIC, whether
/// it reports ANA, and per namespace its size, format, unique identifier, ANA group and state
/// (from the ANA log page read at bring-up) and the state a multipath path would have.
pub fn describe_controller<P: Platform>(
    ctrl: &Controller<P>,
    device: &str,
    driven_by: &str,
    v: &mut Value,
) {
    let info = ctrl.identify();
    let id = &info.identify;
    v["serial"] = json!(info.serial());
    v["model"] = json!(info.model());
    v["firmware"] = json!(info.firmware());
    v["state"] = json!("live");
    v["subnqn"] = json!(id.subnqn);
    v["cntlid"] = json!(id.cntlid);
    v["cmic"] = json!(id.cmic);
    v["ana"] = json!(ctrl.reports_ana());
    let ns: Vec<Value> = ctrl
        .namespaces()
        .iter()
        .map(|n| {
            let ident = n.identity();
            let md = ident.metadata_format();
            // A format with metadata: plain reads and writes are refused (they must carry it).
            let refused = n.io_refused().then(|| {
                format!(
                    "formatted with {md}: plain reads and writes are refused, requests must carry the metadata; or reformat with `{}` (erases its data)",
                    crate::admin::reformat_command(device, n.nsid())
                )
            });
            let uid = match UniqueId::of(ident, 0) {
                UniqueId::Unidentified(_) => format!("unidentified ({device})"),
                known => known.to_string(),
            };
            // As the multipath layer sees the path: no ANA counts as optimized; a group
            // missing from the log page as inaccessible.
            let (ana_state, path) = if ctrl.reports_ana() {
                match ctrl.ana_state(ident.anagrpid) {
                    Some(s) => (json!(s.name()), PathState::from_ana(Some(s))),
                    None => (json!("not reported"), PathState::Inaccessible),
                }
            } else {
                (Value::Null, PathState::from_ana(None))
            };
            // NUSE from Identify Namespace (the namespace counts as full if that fails).
            let nuse = ctrl
                .identify_namespace(n.nsid())
                .map_or(n.blocks(), |id| id.nuse);
            json!({
                "nsid": n.nsid(),
                "device_path": format!("{device}/n{}", n.nsid()),
                "blocks": n.blocks(),
                "nuse_blocks": nuse,
                "size_bytes": n.size_bytes(),
                "lba_size": n.lba_size(),
                "metadata_size": ident.metadata_size,
                "metadata": md.short(),
                "format": ident.format_label(),
                "io_refused": refused,
                "driven_by": driven_by,
                "unique_id": uid,
                "anagrpid": (ident.anagrpid != 0).then_some(ident.anagrpid),
                "ana_state": ana_state,
                "path_state": path.name(),
            })
        })
        .collect();
    v["namespaces"] = json!(ns);
}

/// Every NVMe controller as JSON objects.
pub fn collect() -> Result<Vec<Value>> {
    let paths = SysPaths::default();
    let mut out = Vec::new();
    for dev in pci_bind::list_nvme_devices()? {
        let addr = dev.address;
        let mut v = json!({
            "address": addr.to_string(),
            "vendor": format!("{:04x}", dev.vendor),
            "device": format!("{:04x}", dev.device),
            "driver": dev.driver,
            "subnqn": null,
            "cntlid": null,
            "cmic": null,
            "ana": null,
            "serial": null,
            "model": null,
            "namespaces": [],
            "error": null,
            "mode": vfnvme::hal::pci::noiommu::mode_of(&paths, &addr).map(|m| m.to_string()),
        });
        let ours = dev.driver.as_deref() == Some(VFIO_PCI) && !open::no_iommu()
            || dev.driver.as_deref() == Some(vfnvme::hal::pci::noiommu::UIO_PCI_GENERIC)
                && open::no_iommu();
        if ours {
            let opts = ControllerOptions {
                io_queues: 1,
                ..ControllerOptions::default()
            };
            match open::open_controller(&addr.to_string(), opts) {
                Ok(ctrl) => {
                    let by = format!("vfnvme ({})", dev.driver.as_deref().unwrap_or("-"));
                    describe_controller(&ctrl, &addr.to_string(), &by, &mut v)
                }
                Err(e) => v["error"] = json!(format!("{e:#}")),
            }
        } else if dev.driver.as_deref() == Some("nvme") {
            kernel_view(&paths, &addr, &mut v);
        }
        out.push(v);
    }
    Ok(out)
}

/// `--model`: the model subsystem's two controllers, namespace 1 (ANA group 1) optimized
/// through controller 0 and non-optimized through controller 1, namespace 2 (group 2)
/// inaccessible through controller 0 and optimized through controller 1.
#[cfg(feature = "model")]
pub fn collect_model() -> Result<Vec<Value>> {
    use vfnvme_model::AnaState;
    let model = crate::model_subsys::build(
        2,
        &[
            (1, 1, AnaState::NonOptimized),
            (0, 2, AnaState::Inaccessible),
        ],
    )?;
    let opts = ControllerOptions {
        io_queues: 1,
        ..ControllerOptions::default()
    };
    let ctrls = crate::model_subsys::bring_up(&model, &opts)?;
    Ok(ctrls
        .iter()
        .map(|c| {
            let name = c.platform().name();
            let mut v = json!({
                "address": name,
                "vendor": format!("{:04x}", c.identify().identify.vid),
                "device": "model",
                "driver": "model",
                "error": null,
            });
            describe_controller(c, &name, "vfnvme (model)", &mut v);
            v
        })
        .collect())
}

/// `--model` in a build without the model: a typed refusal saying how to get it.
#[cfg(not(feature = "model"))]
pub fn collect_model() -> Result<Vec<Value>> {
    anyhow::bail!(
        "--model: this vfnvme was built without the in-memory model; rebuild with \
         `cargo build -p vfnvme-tools --features model` (on by default)"
    )
}

/// Bytes in binary units, e.g. `64.00 MiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// The table form: controllers grouped by subsystem, namespaces under each controller.
pub fn table(list: &[Value]) -> String {
    if list.is_empty() {
        return "no NVMe controllers (PCI class 0x010802) found\n".to_string();
    }
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    // Subsystems in the order of their first controller (controllers come sorted by address).
    let mut groups: Vec<(String, Vec<&Value>)> = Vec::new();
    for d in list {
        let nqn = match &d["subnqn"] {
            Value::String(n) if !n.is_empty() => n.clone(),
            _ => "(subsystem unknown: controller not readable)".to_string(),
        };
        match groups.iter_mut().find(|(n, _)| *n == nqn) {
            Some((_, members)) => members.push(d),
            None => groups.push((nqn, vec![d])),
        }
    }
    let subsystems = crate::subsys::subsystems(list);
    let mut out = String::new();
    for (nqn, members) in groups {
        out.push_str(&format!("subsystem {nqn}\n"));
        // A multipath subsystem: its heads and paths after its controllers.
        let heads = subsystems
            .iter()
            .find(|s| s["nqn"] == nqn.as_str() && s["multipath"] == Value::Bool(true))
            .map(|s| crate::subsys::heads_text(s, 2))
            .unwrap_or_default();
        for d in members {
            out.push_str(&format!(
                "  {:<13} {:<9} {:<9} {:<20} {}\n",
                s(&d["address"]),
                format!("{}:{}", s(&d["vendor"]), s(&d["device"])),
                s(&d["driver"]),
                s(&d["serial"]),
                s(&d["model"]),
            ));
            if let Value::String(m) = &d["mode"] {
                if m.starts_with("no-iommu") {
                    out.push_str(&format!(
                        "    DMA mode: {m}: physical addresses, no IOMMU checks them\n"
                    ));
                }
            }
            if let Value::String(e) = &d["error"] {
                out.push_str(&format!("    (could not open: {e})\n"));
                continue;
            }
            let empty = Vec::new();
            let namespaces = d["namespaces"].as_array().unwrap_or(&empty);
            if namespaces.is_empty() {
                out.push_str("    no namespaces\n");
            }
            for ns in namespaces {
                let size = ns["size_bytes"]
                    .as_u64()
                    .map_or("-".to_string(), human_size);
                let format = match (ns["lba_size"].as_u64(), ns["metadata_size"].as_u64()) {
                    (Some(l), Some(m)) => format!("{l} B + {m} B metadata"),
                    (Some(l), None) => format!("{l} B"),
                    _ => "-".to_string(),
                };
                // I/O refused for the format's metadata: say so, and how to reformat.
                let refused = match (&ns["io_refused"], &ns["nsid"]) {
                    (Value::String(_), nsid) => format!(
                        "; plain I/O refused: metadata {}; reformat with {}",
                        s(&ns["metadata"]),
                        crate::admin::reformat_command(&s(&d["address"]), s(nsid))
                    ),
                    _ => String::new(),
                };
                out.push_str(&format!(
                    "    ns {:<4} {:>11}  LBA {:<22} {}{refused}\n",
                    s(&ns["nsid"]),
                    size,
                    format,
                    s(&ns["driven_by"]),
                ));
            }
        }
        out.push_str(&heads);
    }
    out
}

/// The controllers `list` and `list-subsys` show: the model's or the machine's.
fn controllers(model: bool) -> Result<Vec<Value>> {
    if model {
        collect_model()
    } else {
        collect()
    }
}

/// Arguments of `vfnvme list-subsys`.
#[derive(Args, Debug)]
pub struct ListSubsysArgs {
    /// Output format (nvme-cli's `-o`): normal or json.
    #[arg(short = 'o', long = "output-format", value_parser = ["normal", "json"], default_value = "normal")]
    pub output_format: String,
    /// List the in-memory model's subsystem instead of the machine's.
    #[arg(long)]
    pub model: bool,
}

/// Runs `vfnvme list-subsys`: nvme-cli's `list-subsys`, its text and JSON shapes, with every
/// NVMe controller of the machine (the kernel's and vfnvme's) as a path.
pub fn run_subsys(args: &ListSubsysArgs) -> Result<()> {
    let list = controllers(args.model)?;
    let (nqn, id) = crate::nvme_cli_list::host_identity();
    let host = crate::nvme_cli_list::subsystems(&list, nqn, id);
    if args.output_format == "json" {
        say!("{}", serde_json::to_string_pretty(&[host])?);
    } else {
        crate::output::text(&crate::nvme_cli_list::subsystems_text(&host));
    }
    Ok(())
}

/// Runs `vfnvme list`.
pub fn run(args: &ListArgs) -> Result<()> {
    let list = controllers(args.model)?;
    let json = args.json || args.output_format.as_deref() == Some("json");
    if args.subsystems {
        let subs = crate::subsys::subsystems(&list);
        if json {
            say!(
                "{}",
                serde_json::to_string_pretty(&json!({ "subsystems": subs }))?
            );
        } else {
            crate::output::text(&crate::subsys::text(&subs));
        }
    } else if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&crate::nvme_cli_list::list_json(&list))?
        );
    } else if args.output_format.as_deref() == Some("normal") {
        let devices = crate::nvme_cli_list::devices(&list);
        crate::output::text(&crate::nvme_cli_list::devices_text(&devices));
    } else {
        crate::output::text(&table(&list));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_groups_by_subsystem_and_shows_namespaces() {
        let ns = |nsid: u32, bytes: u64, lba: u32, by: &str| json!({"nsid": nsid, "size_bytes": bytes, "lba_size": lba, "metadata_size": 0, "driven_by": by});
        let list = vec![
            json!({"address": "0000:00:10.0", "vendor": "1b36", "device": "0010", "driver": "vfio-pci",
                   "subnqn": "nqn.2019-08.org.qemu:mp", "serial": "S1", "model": "QEMU NVMe Ctrl",
                   "namespaces": [ns(1, 64 << 20, 512, "vfnvme (vfio-pci)")], "error": null}),
            json!({"address": "0000:00:11.0", "vendor": "1b36", "device": "0010", "driver": "nvme",
                   "subnqn": "nqn.2019-08.org.qemu:other", "serial": "S2", "model": "M",
                   "namespaces": [{"nsid": 1, "size_bytes": 1u64 << 30, "lba_size": 4096, "metadata_size": null, "driven_by": "kernel nvme: /dev/nvme0n1"}], "error": null}),
            json!({"address": "0000:00:12.0", "vendor": "1b36", "device": "0010", "driver": "vfio-pci",
                   "subnqn": "nqn.2019-08.org.qemu:mp", "serial": "S1", "model": "QEMU NVMe Ctrl",
                   "namespaces": [ns(1, 64 << 20, 512, "vfnvme (vfio-pci)"), ns(2, 8 << 20, 4096, "vfnvme (vfio-pci)")], "error": null}),
            json!({"address": "0000:00:13.0", "vendor": "1b36", "device": "0010", "driver": "vfio-pci",
                   "subnqn": null, "serial": null, "model": null, "namespaces": [], "error": "busy"}),
        ];
        let t = table(&list);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "subsystem nqn.2019-08.org.qemu:mp", "{t}");
        assert!(
            lines[1].contains("0000:00:10.0") && lines[1].contains("1b36:0010"),
            "{t}"
        );
        assert!(
            lines[2].contains("ns 1")
                && lines[2].contains("64.00 MiB")
                && lines[2].contains("LBA 512 B + 0 B metadata")
                && lines[2].ends_with("vfnvme (vfio-pci)"),
            "{t}"
        );
        // The second controller of the same subsystem comes under it, before the other one.
        assert!(lines[3].contains("0000:00:12.0"), "{t}");
        assert!(
            lines[5].contains("ns 2") && lines[5].contains("8.00 MiB"),
            "{t}"
        );
        assert_eq!(lines[6], "subsystem nqn.2019-08.org.qemu:other", "{t}");
        assert!(
            lines[8].contains("1.00 GiB") && lines[8].contains("kernel nvme: /dev/nvme0n1"),
            "{t}"
        );
        assert!(lines[9].starts_with("subsystem (subsystem unknown"), "{t}");
        assert!(lines[11].contains("could not open: busy"), "{t}");
        assert!(table(&[]).contains("no NVMe controllers"));
        let ns_md = |nsid: u32, md: &str, refused: bool| {
            json!({"nsid": nsid, "size_bytes": 16u64 << 20,
            "lba_size": 512, "metadata_size": 8, "metadata": md,
            "io_refused": if refused { json!("formatted with 8 B metadata per block") } else { Value::Null },
            "driven_by": "vfnvme (vfio-pci)"})
        };
        let md = vec![
            json!({"address": "0000:00:10.0", "vendor": "1b36", "device": "0010",
            "driver": "vfio-pci", "subnqn": "nqn.x", "serial": "S1", "model": "M",
            "namespaces": [ns(1, 16 << 20, 512, "vfnvme (vfio-pci)"), ns_md(2, "8 ext", true)],
            "error": null}),
        ];
        let t = table(&md);
        let lines: Vec<&str> = t.lines().collect();
        assert!(!lines[2].contains("I/O refused"), "{t}");
        assert!(
            lines[3].contains("ns 2")
                && lines[3].contains("LBA 512 B + 8 B metadata")
                && lines[3].ends_with(
                    "vfnvme (vfio-pci); plain I/O refused: metadata 8 ext; reformat with vfnvme format 0000:00:10.0 --nsid 2 --yes"
                ),
            "{t}"
        );
    }

    #[test]
    fn sizes_in_binary_units() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(64 << 20), "64.00 MiB");
        assert_eq!(human_size(3 << 40), "3.00 TiB");
    }
}
