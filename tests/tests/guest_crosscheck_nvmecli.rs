//! Scenario `crosscheck`: vfnvme's `id-ctrl`, `id-ns`, `smart-log`, `error-log`, `list` and
//! `list-subsys` (`-o json`) on vfio-pci report what Debian's nvme-cli reports for the same
//! controller once it is bound back to the kernel's nvme driver: the same keys, types and
//! values (id-ctrl and id-ns equal in full).
//!
//! nvme-cli runs from the host's root file system (installed by `vfnvme vm --prepare`).
//! Counters that the kernel's probe moves (reads of the partition table, power-on hours) may
//! only have grown between the two reads; everything else must be equal.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use vfnvme::hal::pci::bind as pci_bind;
use vfnvme::hal::PciAddress;
use vfnvme_tests::guest;
use vfnvme_tests::vfnvme_cli::ok;

/// SMART fields that must be equal.
const SMART_EQUAL: &[&str] = &[
    "critical_warning",
    "temperature",
    "avail_spare",
    "spare_thresh",
    "percent_used",
    "media_errors",
    "num_err_log_entries",
    "warning_temp_time",
    "critical_comp_time",
];
/// SMART counters that may only have grown while the kernel took over.
const SMART_GROWING: &[&str] = &[
    "data_units_read",
    "data_units_written",
    "host_read_commands",
    "host_write_commands",
    "controller_busy_time",
    "power_cycles",
    "power_on_hours",
    "unsafe_shutdowns",
];
const KERNEL_DEADLINE: Duration = Duration::from_secs(60);

struct BackToVfio(PciAddress);

impl Drop for BackToVfio {
    fn drop(&mut self) {
        if let Err(e) = pci_bind::bind_to_vfio(&self.0) {
            eprintln!("could not rebind {} to vfio-pci: {e}", self.0);
        }
    }
}

/// A JSON value as something comparable: numbers as u64 (nvme-cli prints some as strings),
/// strings without their padding.
fn norm(v: &Value) -> String {
    match v {
        // nvme-cli 2.x prints 128-bit counters as floats.
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().map(|f| f as u64))
            .map_or_else(|| n.to_string(), |v| v.to_string()),
        Value::String(s) => {
            let t = s.trim_end_matches(['\0', ' ']);
            t.parse::<u64>()
                .map_or_else(|_| t.to_string(), |n| n.to_string())
        }
        other => other.to_string(),
    }
}

fn number(v: &Value, key: &str, who: &str) -> u64 {
    norm(&v[key])
        .parse()
        .unwrap_or_else(|_| panic!("{who}: {key} is not a number: {}", v[key]))
}

fn nvme_cli(args: &[&str]) -> Value {
    let o = Command::new("nvme")
        .args(args)
        .output()
        .expect("run nvme-cli (installed on the host by `vfnvme vm --prepare`)");
    let out = String::from_utf8_lossy(&o.stdout);
    println!(
        "$ nvme {}\n{out}{}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "nvme {args:?} failed");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("nvme {args:?}: not JSON ({e})"))
}

/// The kernel's character device of the controller at `bdf` (`/dev/nvmeN`), once probed.
fn wait_for_char_device(bdf: &str) -> String {
    let start = Instant::now();
    loop {
        let dir = format!("/sys/bus/pci/devices/{bdf}/nvme");
        let found = std::fs::read_dir(&dir).ok().and_then(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| n.starts_with("nvme"))
        });
        if let Some(name) = found {
            let dev = format!("/dev/{name}");
            let live = std::fs::read_to_string(format!("{dir}/{name}/state"))
                .is_ok_and(|s| s.trim() == "live");
            if live && Path::new(&dev).exists() {
                return dev;
            }
        }
        assert!(
            start.elapsed() < KERNEL_DEADLINE,
            "the kernel did not bring up {bdf}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every key of nvme-cli's object `theirs` is in `ours` with an equal value.
fn compare_all(what: &str, ours: &Value, theirs: &Value, differ: &mut Vec<String>) {
    for (key, value) in theirs.as_object().into_iter().flatten() {
        if ours.get(key) != Some(value) {
            differ.push(format!(
                "{what} {key}: vfnvme {:?}, nvme-cli {value}",
                ours.get(key)
            ));
        }
    }
}

/// Every key of nvme-cli's object `theirs` is in `ours` with a value of the same JSON type.
fn compare_types(what: &str, ours: &Value, theirs: &Value, differ: &mut Vec<String>) {
    for (key, value) in theirs.as_object().into_iter().flatten() {
        match ours.get(key) {
            Some(v) if std::mem::discriminant(v) == std::mem::discriminant(value) => {}
            other => differ.push(format!(
                "{what} {key}: vfnvme {other:?}, nvme-cli {value} (missing or another type)"
            )),
        }
    }
}

#[test]
fn vfnvme_and_nvme_cli_agree_on_id_ctrl_and_smart_log() {
    if !guest::in_guest(
        "guest_crosscheck_nvmecli::vfnvme_and_nvme_cli_agree_on_id_ctrl_and_smart_log",
    ) {
        return;
    }
    let bdf = guest::vfio_devices()[0].clone();
    let addr = PciAddress::parse(&bdf).expect("a PCI address");
    let id: Value = serde_json::from_str(&ok(&["id-ctrl", &bdf, "--json"])).expect("JSON");
    let smart: Value = serde_json::from_str(&ok(&["smart-log", &bdf, "--json"])).expect("JSON");
    let idns: Value =
        serde_json::from_str(&ok(&["id-ns", &bdf, "-n", "1", "-o", "json"])).expect("JSON");
    let errlog: Value =
        serde_json::from_str(&ok(&["error-log", &bdf, "-o", "json"])).expect("JSON");
    let fwlog: Value = serde_json::from_str(&ok(&["fw-log", &bdf, "-o", "json"])).expect("JSON");
    let list: Value = serde_json::from_str(&ok(&["list", "-o", "json"])).expect("JSON");
    let subsys: Value = serde_json::from_str(&ok(&["list-subsys", "-o", "json"])).expect("JSON");

    let _guard = BackToVfio(addr);
    pci_bind::bind_to_driver(&addr, "nvme")
        .unwrap_or_else(|e| panic!("binding {bdf} to nvme: {e}"));
    let dev = wait_for_char_device(&bdf);
    let kid = nvme_cli(&["id-ctrl", &dev, "-o", "json"]);
    let ksmart = nvme_cli(&["smart-log", &dev, "-o", "json"]);
    let kidns = nvme_cli(&["id-ns", &dev, "-n", "1", "-o", "json"]);
    let kerrlog = nvme_cli(&["error-log", &dev, "-o", "json"]);
    let kfwlog = nvme_cli(&["fw-log", &dev, "-o", "json"]);
    let klist = nvme_cli(&["list", "-o", "json"]);
    let ksubsys = nvme_cli(&["list-subsys", "-o", "json"]);

    let mut differ = Vec::new();
    for key in SMART_EQUAL {
        let (a, b) = (
            number(&smart, key, "vfnvme"),
            number(&ksmart, key, "nvme-cli"),
        );
        if a != b {
            differ.push(format!("smart-log {key}: vfnvme {a}, nvme-cli {b}"));
        }
    }
    for key in SMART_GROWING {
        let (a, b) = (
            number(&smart, key, "vfnvme"),
            number(&ksmart, key, "nvme-cli"),
        );
        if b < a {
            differ.push(format!(
                "smart-log {key}: vfnvme {a}, then nvme-cli {b} (went down)"
            ));
        }
    }
    // id-ctrl and id-ns: every key nvme-cli prints, with the same JSON value (padding,
    // 128-bit strings, power states and LBA formats included).
    compare_all("id-ctrl", &id, &kid, &mut differ);
    compare_all("id-ns", &idns, &kidns, &mut differ);
    // error-log: the same keys and types per entry (the kernel's probe may add entries).
    compare_types(
        "error-log",
        &errlog["errors"][0],
        &kerrlog["errors"][0],
        &mut differ,
    );
    // fw-log: nvme-cli's object under the device's name (nvme0 there, the address here).
    let dev_name = dev.trim_start_matches("/dev/");
    compare_all(
        "fw-log",
        &fwlog[bdf.as_str()],
        &kfwlog[dev_name],
        &mut differ,
    );
    if kfwlog[dev_name].as_object().is_none_or(|o| o.is_empty()) {
        differ.push(format!("fw-log: nvme-cli printed no {dev_name}: {kfwlog}"));
    }
    // smart-log: every key nvme-cli prints, with the same JSON type (the 128-bit counters
    // are decimal strings in both).
    compare_types("smart-log", &smart, &ksmart, &mut differ);
    // list -o json: the namespace's entry has every nvme-cli key, with equal values except
    // the device path (a block device for the kernel, the address and nsid for vfnvme).
    let entry = |v: &Value, want: &dyn Fn(&Value) -> bool| {
        v["Devices"]
            .as_array()
            .and_then(|d| d.iter().find(|e| want(e)).cloned())
    };
    let ours = entry(&list, &|e| e["DevicePath"] == format!("{bdf}/n1").as_str());
    let theirs = entry(&klist, &|e| {
        e["DevicePath"]
            .as_str()
            .is_some_and(|p| p.starts_with(&dev) && p.ends_with("n1"))
    });
    match (ours, theirs) {
        (Some(a), Some(b)) => {
            for (key, value) in b.as_object().into_iter().flatten() {
                if key != "DevicePath" && a.get(key) != Some(value) {
                    differ.push(format!(
                        "list {key}: vfnvme {:?}, nvme-cli {value}",
                        a.get(key)
                    ));
                }
            }
        }
        (a, b) => differ.push(format!(
            "list: namespace 1 of {bdf} not found (vfnvme {a:?}, nvme-cli {b:?})\n{list}\n{klist}"
        )),
    }
    // list-subsys -o json: the same shape, host, subsystem NQN and path keys.
    let subsys_of = |v: &Value| {
        v[0]["Subsystems"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["NQN"] == id["subnqn"]).cloned())
    };
    if subsys[0]["HostNQN"] != ksubsys[0]["HostNQN"] {
        differ.push(format!(
            "list-subsys HostNQN: vfnvme {}, nvme-cli {}",
            subsys[0]["HostNQN"], ksubsys[0]["HostNQN"]
        ));
    }
    match (subsys_of(&subsys), subsys_of(&ksubsys)) {
        (Some(a), Some(b)) => {
            let (pa, pb) = (&a["Paths"][0], &b["Paths"][0]);
            for key in pb.as_object().into_iter().flatten().map(|(k, _)| k) {
                if pa.get(key).is_none() {
                    differ.push(format!("list-subsys: vfnvme's path has no {key}"));
                }
            }
            for key in ["Transport", "Address", "State"] {
                if pa[key] != pb[key] {
                    differ.push(format!(
                        "list-subsys {key}: vfnvme {}, nvme-cli {}",
                        pa[key], pb[key]
                    ));
                }
            }
        }
        (a, b) => differ.push(format!(
            "list-subsys: subsystem {} not found (vfnvme {a:?}, nvme-cli {b:?})",
            id["subnqn"]
        )),
    }
    assert!(
        differ.is_empty(),
        "vfnvme and nvme-cli disagree:\n{}",
        differ.join("\n")
    );
}
