//! `vfnvme list`: the NVMe controllers (PCI class 0x010802), their drivers, and for those on
//! vfio-pci the serial, model and namespace count (each is opened briefly).

use crate::output::say;
use crate::{kernel_nvme, open};
use anyhow::Result;
use clap::Args;
use serde_json::{json, Value};
use vfnvme::dma::{pci_bind, pci_sysfs::VFIO_PCI, SysPaths};
use vfnvme::ControllerOptions;

/// Arguments of `vfnvme list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
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
            "serial": null,
            "model": null,
            "namespaces": null,
            "namespaces_refused": null,
            "block_devices": null,
            "error": null,
        });
        if dev.driver.as_deref() == Some(VFIO_PCI) {
            let opts = ControllerOptions {
                io_queues: 1,
                ..ControllerOptions::default()
            };
            match open::open_controller(&addr.to_string(), opts) {
                Ok(ctrl) => {
                    v["serial"] = json!(ctrl.identify().serial());
                    v["model"] = json!(ctrl.identify().model());
                    let all = ctrl.namespaces();
                    v["namespaces"] = json!(all.len());
                    // Namespaces whose format has metadata: listed, but I/O is refused.
                    let refused: Vec<Value> = all
                        .iter()
                        .filter(|n| n.io_refused())
                        .map(|n| {
                            json!({
                                "nsid": n.nsid(),
                                "metadata": n.identity().metadata_format().short(),
                            })
                        })
                        .collect();
                    v["namespaces_refused"] = json!(refused);
                }
                Err(e) => v["error"] = json!(format!("{e:#}")),
            }
        } else {
            if let Some((serial, model)) = kernel_nvme::serial_and_model(&paths, &addr) {
                v["serial"] = json!(serial);
                v["model"] = json!(model);
            }
            let devs: Vec<String> = kernel_nvme::block_devices(&paths, &addr)
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            v["block_devices"] = json!(devs);
        }
        out.push(v);
    }
    Ok(out)
}

/// The table form.
pub fn table(list: &[Value]) -> String {
    if list.is_empty() {
        return "no NVMe controllers (PCI class 0x010802) found\n".to_string();
    }
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let mut out = format!(
        "{:<13} {:<9} {:<9} {:<20} {:<28} {}\n",
        "address", "id", "driver", "serial", "model", "namespaces"
    );
    for d in list {
        let ns = match (&d["namespaces"], &d["block_devices"], &d["error"]) {
            (_, _, Value::String(e)) => format!("(could not open: {e})"),
            (Value::Number(n), _, _) => match d["namespaces_refused"].as_array() {
                Some(r) if !r.is_empty() => {
                    let which: Vec<String> = r
                        .iter()
                        .map(|x| format!("ns {} metadata {}", s(&x["nsid"]), s(&x["metadata"])))
                        .collect();
                    format!("{n} (no I/O: {}; reformat)", which.join(", "))
                }
                _ => n.to_string(),
            },
            (_, Value::Array(b), _) if !b.is_empty() => {
                b.iter().map(s).collect::<Vec<_>>().join(" ")
            }
            _ => "-".into(),
        };
        out.push_str(&format!(
            "{:<13} {:<9} {:<9} {:<20} {:<28} {}\n",
            s(&d["address"]),
            format!("{}:{}", s(&d["vendor"]), s(&d["device"])),
            s(&d["driver"]),
            s(&d["serial"]),
            s(&d["model"]),
            ns
        ));
    }
    out
}

/// Runs `vfnvme list`.
pub fn run(args: &ListArgs) -> Result<()> {
    let list = collect()?;
    if args.json {
        say!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        crate::output::text(&table(&list));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_each_kind() {
        let list = vec![
            json!({"address": "0000:00:10.0", "vendor": "1b36", "device": "0010", "driver": "vfio-pci",
                   "serial": "S1", "model": "QEMU NVMe Ctrl", "namespaces": 1, "block_devices": null, "error": null}),
            json!({"address": "0000:00:11.0", "vendor": "1b36", "device": "0010", "driver": "nvme",
                   "serial": "S2", "model": "M", "namespaces": null, "block_devices": ["nvme0n1"], "error": null}),
            json!({"address": "0000:00:12.0", "vendor": "1b36", "device": "0010", "driver": "vfio-pci",
                   "serial": null, "model": null, "namespaces": null, "block_devices": null, "error": "busy"}),
        ];
        let t = table(&list);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[1].contains("1b36:0010") && lines[1].ends_with(" 1"),
            "{t}"
        );
        assert!(lines[2].contains("nvme0n1"), "{t}");
        assert!(lines[3].contains("could not open: busy"), "{t}");
        assert!(table(&[]).contains("no NVMe controllers"));
        let md = vec![
            json!({"address": "0000:00:10.0", "vendor": "1b36", "device": "0010",
            "driver": "vfio-pci", "serial": "S1", "model": "M", "namespaces": 3,
            "namespaces_refused": [{"nsid": 2, "metadata": "8 ext"}, {"nsid": 3, "metadata": "16 sep"}],
            "block_devices": null, "error": null}),
        ];
        let t = table(&md);
        assert!(
            t.contains("3 (no I/O: ns 2 metadata 8 ext, ns 3 metadata 16 sep; reformat)"),
            "{t}"
        );
    }
}
