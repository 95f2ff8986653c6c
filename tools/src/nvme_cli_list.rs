//! nvme-cli 2.x's JSON shapes for `list` and `list-subsys`, made from the controller objects
//! of [`crate::list`]: nvme-cli's keys with their value formats, then the keys vfnvme adds
//! (the PCI address, the driver, the format, who drives the namespace). Scripts written for
//! `nvme list -o json` and `nvme list-subsys -o json` read them unchanged.
//!
//! A namespace driven by vfnvme has no block device: its `DevicePath` is the controller's
//! address and the namespace, `0000:01:00.0/n1`, which the admin commands take as
//! `BDF -n NSID`.

use serde::Serialize;
use serde_json::Value;

/// One namespace of `nvme list -o json`'s `Devices` array.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct ListDevice {
    /// The namespace ID.
    #[serde(rename = "NameSpace")]
    pub name_space: u32,
    /// `/dev/nvmeXnY` for the kernel's, `BDF/nNSID` for vfnvme's.
    pub device_path: String,
    /// Firmware revision (Identify Controller FR).
    pub firmware: String,
    /// Model number (MN).
    pub model_number: String,
    /// Serial number (SN).
    pub serial_number: String,
    /// NUSE in bytes.
    pub used_bytes: u64,
    /// NSZE in logical blocks.
    #[serde(rename = "MaximumLBA")]
    pub maximum_lba: u64,
    /// NSZE in bytes.
    pub physical_size: u64,
    /// The LBA data size in bytes.
    pub sector_size: u32,
    /// vfnvme: the controller's PCI address.
    pub address: String,
    /// vfnvme: the controller's driver (vfio-pci, uio_pci_generic, nvme, model).
    pub driver: Option<String>,
    /// vfnvme: the format as storage engineers write it, e.g. `4096+8, PI type 1, first`.
    pub format: Option<String>,
    /// vfnvme: who drives the namespace.
    pub driven_by: Option<String>,
    /// Metadata bytes per block (in the text form's Format column only, as nvme-cli).
    #[serde(skip)]
    pub metadata_size: u64,
}

/// One controller of a subsystem in `nvme list-subsys -o json`.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct SubsysPath {
    /// `nvme0` for the kernel's, the PCI address for vfnvme's.
    pub name: String,
    /// Always `pcie`.
    pub transport: String,
    /// The PCI address.
    pub address: String,
    /// `live`, or the kernel's state, or `dead` when vfnvme could not open it.
    pub state: String,
    /// The ANA state of the controller's first namespace, when it reports ANA.
    #[serde(rename = "ANAState", skip_serializing_if = "Option::is_none")]
    pub ana_state: Option<String>,
    /// vfnvme: the driver.
    pub driver: Option<String>,
    /// vfnvme: the controller ID.
    pub cntlid: Option<u16>,
    /// vfnvme: why the controller could not be opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One subsystem in `nvme list-subsys -o json`.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct Subsys {
    /// The kernel's `nvme-subsysN`, or `vfnvme-subsysN` for a subsystem only vfnvme drives.
    pub name: String,
    /// The subsystem NQN.
    #[serde(rename = "NQN")]
    pub nqn: String,
    /// Its controllers.
    pub paths: Vec<SubsysPath>,
}

/// The host object `nvme list-subsys -o json` prints a list of.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct SubsysHost {
    /// The host NQN (`/etc/nvme/hostnqn`, empty without it).
    #[serde(rename = "HostNQN")]
    pub host_nqn: String,
    /// The host ID (`/etc/nvme/hostid`), when there is one.
    #[serde(rename = "HostID", skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// The subsystems.
    #[serde(rename = "Subsystems")]
    pub subsystems: Vec<Subsys>,
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn opt_text(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

/// Every namespace of `controllers` as `nvme list -o json` shows it (namespaces whose size
/// or block size are unknown are left out, as nvme-cli leaves out what it can't identify).
pub fn devices(controllers: &[Value]) -> Vec<ListDevice> {
    let mut out = Vec::new();
    for c in controllers {
        let Some(namespaces) = c["namespaces"].as_array() else {
            continue;
        };
        for ns in namespaces {
            let (Some(nsid), Some(lba), Some(blocks)) = (
                ns["nsid"].as_u64(),
                ns["lba_size"].as_u64(),
                ns["blocks"].as_u64(),
            ) else {
                continue;
            };
            let nuse = ns["nuse_blocks"].as_u64().unwrap_or(blocks);
            out.push(ListDevice {
                name_space: u32::try_from(nsid).unwrap_or(u32::MAX),
                device_path: text(&ns["device_path"]),
                firmware: text(&c["firmware"]),
                model_number: text(&c["model"]),
                serial_number: text(&c["serial"]),
                used_bytes: nuse.saturating_mul(lba),
                maximum_lba: blocks,
                physical_size: blocks.saturating_mul(lba),
                sector_size: u32::try_from(lba).unwrap_or(u32::MAX),
                address: text(&c["address"]),
                driver: opt_text(&c["driver"]),
                format: opt_text(&ns["format"]),
                driven_by: opt_text(&ns["driven_by"]),
                metadata_size: ns["metadata_size"].as_u64().unwrap_or(0),
            });
        }
    }
    out
}

/// `nvme list -o json`: `{"Devices": [...]}`, with vfnvme's per-controller view under
/// `Controllers`.
pub fn list_json(controllers: &[Value]) -> Value {
    serde_json::json!({
        "Devices": devices(controllers),
        "Controllers": controllers,
    })
}

/// The subsystems of `controllers` in nvme-cli's shape, under one host.
pub fn subsystems(controllers: &[Value], host_nqn: String, host_id: Option<String>) -> SubsysHost {
    let mut subs: Vec<Subsys> = Vec::new();
    let mut ours = 0;
    for c in controllers {
        let Some(nqn) = c["subnqn"].as_str().filter(|n| !n.is_empty()) else {
            continue;
        };
        let ana_state = c["namespaces"]
            .as_array()
            .and_then(|n| n.first())
            .and_then(|n| n["ana_state"].as_str())
            .filter(|_| c["ana"] == Value::Bool(true))
            .map(str::to_string);
        let error = opt_text(&c["error"]);
        let path = SubsysPath {
            name: opt_text(&c["name"]).unwrap_or_else(|| text(&c["address"])),
            transport: "pcie".into(),
            address: text(&c["address"]),
            state: match (&error, opt_text(&c["state"])) {
                (Some(_), _) => "dead".into(),
                (None, Some(s)) => s,
                (None, None) => "unknown".into(),
            },
            ana_state,
            driver: opt_text(&c["driver"]),
            cntlid: c["cntlid"].as_u64().and_then(|v| u16::try_from(v).ok()),
            error,
        };
        match subs.iter_mut().find(|s| s.nqn == nqn) {
            Some(s) => s.paths.push(path),
            None => {
                let name = opt_text(&c["subsys_name"]).unwrap_or_else(|| {
                    ours += 1;
                    format!("vfnvme-subsys{}", ours - 1)
                });
                subs.push(Subsys {
                    name,
                    nqn: nqn.to_string(),
                    paths: vec![path],
                });
            }
        }
    }
    SubsysHost {
        host_nqn,
        host_id,
        subsystems: subs,
    }
}

/// nvme-cli's text form of `list-subsys`.
pub fn subsystems_text(host: &SubsysHost) -> String {
    let mut out = String::new();
    for s in &host.subsystems {
        out.push_str(&format!("{} - NQN={}\n\\\n", s.name, s.nqn));
        for p in &s.paths {
            out.push_str(&format!(
                " +- {} {} {} {}",
                p.name, p.transport, p.address, p.state
            ));
            if let Some(a) = &p.ana_state {
                out.push_str(&format!(" {a}"));
            }
            out.push('\n');
        }
    }
    out
}

/// A size in SI units as nvme-cli's `list` prints it: `%6.2f %2sB`, e.g. `  1.05  MB`.
fn si_size(bytes: u64) -> String {
    const SI: [(f64, &str); 7] = [
        (1e18, "E"),
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1e0, ""),
    ];
    let v = bytes as f64;
    let (m, suffix) = SI
        .iter()
        .copied()
        .find(|(m, _)| v >= *m)
        .unwrap_or((1.0, ""));
    format!("{:6.2} {suffix:>2}B", v / m)
}

/// A block size in binary units, rounded, as nvme-cli's `list` prints it: `%3.0f %2sB`.
fn binary_size(bytes: u64) -> String {
    for (shift, suffix) in [(40u32, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if bytes >= 1 << shift {
            let v = (bytes + (1 << (shift - 1))) >> shift;
            return format!("{v:3} {suffix:>2}B");
        }
    }
    format!("{bytes:3} {:>2}B", "")
}

/// nvme-cli's text form of `list`: one row per namespace, its columns and formats (`Generic`
/// is `-` for a namespace without a block device).
pub fn devices_text(devices: &[ListDevice]) -> String {
    let dash = "-".repeat(40);
    let mut out = format!(
        "{:<21} {:<21} {:<20} {:<40} {:<9} {:<26} {:<16} {:<8}\n",
        "Node", "Generic", "SN", "Model", "Namespace", "Usage", "Format", "FW Rev"
    );
    out.push_str(&format!(
        "{:.21} {:.21} {:.20} {:.40} {:.9} {:.26} {:.16} {:.8}\n",
        dash, dash, dash, dash, dash, dash, dash, dash
    ));
    for d in devices {
        let generic = d
            .device_path
            .strip_prefix("/dev/nvme")
            .and_then(|rest| rest.split_once('n'))
            .map_or("-".to_string(), |(c, n)| format!("/dev/ng{c}n{n}"));
        let usage = format!("{} / {}", si_size(d.used_bytes), si_size(d.physical_size));
        let format = format!(
            "{} + {:2} B",
            binary_size(u64::from(d.sector_size)),
            d.metadata_size
        );
        out.push_str(&format!(
            "{:<21} {:<21} {:<20} {:<40} {:<9} {:<26} {:<16} {:<8}\n",
            d.device_path,
            generic,
            d.serial_number,
            d.model_number,
            d.name_space,
            usage,
            format,
            d.firmware
        ));
    }
    out
}

/// The host NQN and ID as nvme-cli reads them (`/etc/nvme/hostnqn`, `/etc/nvme/hostid`).
pub fn host_identity() -> (String, Option<String>) {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    (
        read("/etc/nvme/hostnqn").unwrap_or_default(),
        read("/etc/nvme/hostid"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn controllers() -> Vec<Value> {
        vec![
            json!({"address": "0000:00:10.0", "driver": "vfio-pci", "subnqn": "nqn.x:mp",
                   "cntlid": 1, "ana": true, "serial": "S1", "model": "QEMU NVMe Ctrl",
                   "firmware": "8.0.0", "state": "live", "error": null,
                   "namespaces": [{"nsid": 1, "device_path": "0000:00:10.0/n1", "blocks": 32768,
                                   "nuse_blocks": 100, "lba_size": 512, "format": "512",
                                   "driven_by": "vfnvme (vfio-pci)", "ana_state": "optimized"}]}),
            json!({"address": "0000:00:11.0", "driver": "nvme", "subnqn": "nqn.x:k",
                   "cntlid": 0, "ana": null, "serial": "S2", "model": "M", "firmware": "1.0",
                   "name": "nvme0", "state": "live", "subsys_name": "nvme-subsys0", "error": null,
                   "namespaces": [{"nsid": 1, "device_path": "/dev/nvme0n1", "blocks": 256,
                                   "nuse_blocks": 256, "lba_size": 4096, "format": null,
                                   "driven_by": "kernel nvme: /dev/nvme0n1"}]}),
            json!({"address": "0000:00:12.0", "driver": "vfio-pci", "subnqn": "nqn.x:mp",
                   "cntlid": null, "error": "busy", "namespaces": []}),
        ]
    }

    #[test]
    fn list_json_has_nvme_clis_keys_and_values() {
        let v = list_json(&controllers());
        let d = v["Devices"].as_array().expect("Devices");
        assert_eq!(d.len(), 2, "{v}");
        let keys: Vec<&str> = d[0]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        for k in [
            "NameSpace",
            "DevicePath",
            "Firmware",
            "ModelNumber",
            "SerialNumber",
            "UsedBytes",
            "MaximumLBA",
            "PhysicalSize",
            "SectorSize",
        ] {
            assert!(keys.contains(&k), "{k} missing: {keys:?}");
        }
        assert_eq!(d[0]["UsedBytes"], 100 * 512);
        assert_eq!(d[0]["MaximumLBA"], 32768);
        assert_eq!(d[0]["PhysicalSize"], 32768 * 512);
        assert_eq!(d[0]["DevicePath"], "0000:00:10.0/n1");
        assert_eq!(d[1]["DevicePath"], "/dev/nvme0n1");
        assert_eq!(d[1]["SectorSize"], 4096);
        assert_eq!(d[1]["Firmware"], "1.0");
        assert_eq!(v["Controllers"].as_array().unwrap().len(), 3);
        let t = devices_text(&devices(&controllers()));
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("Node                  Generic "),
            "{t}"
        );
        assert!(lines[1].starts_with("--------------------- -----"), "{t}");
        assert!(
            lines[3].starts_with("/dev/nvme0n1          /dev/ng0n1 "),
            "{t}"
        );
        assert!(lines[3].contains("  1.05  MB /   1.05  MB"), "{t}");
        assert!(lines[3].contains("  4 KiB +  0 B"), "{t}");
        assert!(lines[2].contains(" 51.20  kB /  16.78  MB"), "{t}");
        assert!(lines[2].contains("512   B +  0 B"), "{t}");
    }

    #[test]
    fn list_subsys_groups_paths_by_nqn_in_nvme_clis_shape() {
        let host = subsystems(&controllers(), "nqn.host".into(), None);
        let v = serde_json::to_value(&host).unwrap();
        assert_eq!(v["HostNQN"], "nqn.host");
        assert!(v.get("HostID").is_none(), "{v}");
        let s = v["Subsystems"].as_array().unwrap();
        assert_eq!(s.len(), 2, "{v}");
        assert_eq!(s[0]["Name"], "vfnvme-subsys0");
        assert_eq!(s[0]["NQN"], "nqn.x:mp");
        let p = s[0]["Paths"].as_array().unwrap();
        assert_eq!(p.len(), 2, "{v}");
        assert_eq!(p[0]["Name"], "0000:00:10.0");
        assert_eq!(p[0]["Transport"], "pcie");
        assert_eq!(p[0]["State"], "live");
        assert_eq!(p[0]["ANAState"], "optimized");
        assert_eq!(p[1]["State"], "dead");
        assert_eq!(p[1]["Error"], "busy");
        assert_eq!(s[1]["Name"], "nvme-subsys0");
        assert_eq!(s[1]["Paths"][0]["Name"], "nvme0");
        assert!(s[1]["Paths"][0].get("ANAState").is_none());
        let t = subsystems_text(&host);
        assert!(t.starts_with("vfnvme-subsys0 - NQN=nqn.x:mp\n\\\n +- 0000:00:10.0 pcie 0000:00:10.0 live optimized\n"), "{t}");
    }
}
