//! Scenario `multins` (in the QEMU guest): every nvme-cli style admin command of `vfnvme` that
//! QEMU 7.2 implements, on its controller with 4 namespaces in an nvme-subsys, and the clear
//! refusals for what it does not implement (Namespace Management, Sanitize, Firmware Download /
//! Commit) and for a controller another process holds.

use std::process::{Child, Command};
use vfnvme_tests::guest;
use vfnvme_tests::vfnvme_cli::{fails, ok};

fn json(args: &[&str]) -> serde_json::Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("vfnvme {args:?}: not JSON ({e}): {out}"))
}

/// A shell holding the controller's VFIO group open, as a vfnvme process would.
struct Holder(Child);

impl Holder {
    fn new(bdf: &str) -> Self {
        let group = std::fs::read_link(format!("/sys/bus/pci/devices/{bdf}/iommu_group"))
            .expect("iommu_group link");
        let group = group
            .file_name()
            .expect("group number")
            .to_string_lossy()
            .into_owned();
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "exec 3</dev/vfio/{group}; echo held; exec sleep 600"
            ))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the holder");
        let mut h = Holder(child);
        let mut line = String::new();
        use std::io::BufRead;
        let out = h.0.stdout.take().expect("stdout");
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .expect("holder output");
        assert_eq!(
            line.trim(),
            "held",
            "the holder could not open /dev/vfio/{group}"
        );
        h
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn nvme_cli_admin_commands_on_qemu() {
    if !guest::in_guest("guest_multins_admincli::nvme_cli_admin_commands_on_qemu") {
        return;
    }
    let bdf = guest::vfio_devices()[0].clone();
    let b = bdf.as_str();
    let expected = guest::expected_namespaces(None);

    // Identify.
    let id = json(&["id-ctrl", b, "--json"]);
    assert_eq!(id["vid"], 0x1b36, "QEMU's vendor id");
    assert_eq!(
        id["sn"].as_str().map(str::trim_end),
        Some(guest::expect_var("VFNVME_EXPECT_SERIAL").as_str())
    );
    assert!(ok(&["id-ctrl", b]).contains("NVME Identify Controller:"));
    let cntlid = id["cntlid"].as_u64().expect("cntlid");
    for ns in &expected {
        let n = ns.nsid.to_string();
        let v = json(&["id-ns", b, "-n", &n, "-o", "json"]);
        assert_eq!(v["nsze"], ns.blocks, "nsid {n}");
        let flbas = v["flbas"].as_u64().unwrap() as usize & 0xf;
        assert_eq!(
            1u64 << v["lbafs"][flbas]["ds"].as_u64().unwrap(),
            u64::from(ns.lba_size)
        );
    }
    fails(&["id-ns", b, "-n", "999"], "out of range");

    // Logs.
    let smart = json(&["smart-log", b, "--json"]);
    assert!(smart["temperature"].as_u64().unwrap() > 200, "{smart}");
    assert!(ok(&["smart-log", b]).contains("critical_warning"));
    assert!(json(&["error-log", b, "--json"])["errors"].is_array());
    // QEMU 7.2 reports slot 1 as "1.0" (not its FR), active.
    let fw = json(&["fw-log", b, "--json"]);
    assert_eq!(fw["fw_log"]["afi"].as_u64().unwrap() & 7, 1, "{fw}");
    assert!(
        fw["fw_log"]["frs1"].as_str().is_some_and(|s| !s.is_empty()),
        "{fw}"
    );
    assert!(ok(&["get-log", b, "--log-id", "2", "--log-len", "512"]).contains("0000: "));
    fails(
        &["get-log", b, "--log-id", "2", "--log-len", "3"],
        "multiple of 4",
    );

    // Features.
    ok(&[
        "set-feature",
        b,
        "-f",
        "async-event-configuration",
        "-V",
        "0x100",
    ]);
    assert_eq!(
        json(&["get-feature", b, "-f", "0x0b", "--json"])["value"],
        0x100
    );
    assert!(ok(&["get-feature", b, "-f", "number-of-queues"]).contains("Number of Queues"));
    fails(&["get-feature", b, "-f", "0"], "out of range");

    // Namespaces and controllers of the subsystem.
    let all = json(&["list-ns", b, "--all", "--json"]);
    assert_eq!(
        all["nsid_list"].as_array().unwrap().len(),
        expected.len(),
        "{all}"
    );
    let ctrls = json(&["list-ctrl", b, "--json"]);
    assert_eq!(ctrls["ctrl_list"][0]["ctrl_id"], cntlid, "{ctrls}");
    assert!(ok(&["detach-ns", b, "-n", "2"]).contains("detach-ns: Success, nsid:2"));
    let active = json(&["list-ns", b, "--json"]);
    assert!(!active["nsid_list"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["nsid"] == 2));
    fails(&["detach-ns", b, "-n", "2"], "Namespace Attachment");
    ok(&["attach-ns", b, "-n", "2", "-c", &cntlid.to_string()]);
    assert_eq!(json(&["list-ns", b, "--json"]), all);
    assert_eq!(json(&["list-ctrl", b, "-n", "2", "--json"])["num_ctrl"], 1);

    // Format NVM (QEMU 7.2 implements it): checks first, then asks, then erases.
    let last = expected.last().expect("namespaces").nsid.to_string();
    fails(
        &["format", b, "-n", &last, "--lbaf", "63", "--yes"],
        "does not exist",
    );
    fails(&["format", b, "-n", "77", "--yes"], "does not exist");
    assert!(ok(&["format", b, "-n", &last, "--yes"]).contains("Success formatting"));

    // Passthrough and reset.
    let dir = std::env::temp_dir().join("vfnvme-admincli");
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("in"), dir.join("out"));
    std::fs::write(&input, vec![0x6bu8; 4096]).unwrap();
    let lba_blocks = (4096 / expected[0].lba_size - 1).to_string();
    let i = input.to_string_lossy().into_owned();
    let o = output.to_string_lossy().into_owned();
    ok(&[
        "io-passthru",
        b,
        "-O",
        "1",
        "-n",
        "1",
        "--cdw12",
        &lba_blocks,
        "-l",
        "4096",
        "-w",
        "-i",
        &i,
    ]);
    ok(&[
        "io-passthru",
        b,
        "-O",
        "2",
        "-n",
        "1",
        "--cdw12",
        &lba_blocks,
        "-l",
        "4096",
        "-r",
        "--output-file",
        &o,
    ]);
    assert_eq!(std::fs::read(&output).unwrap(), vec![0x6bu8; 4096]);
    fails(
        &["io-passthru", b, "-O", "0x99", "-n", "1"],
        "can't tell how many bytes",
    );
    ok(&[
        "admin-passthru",
        b,
        "-O",
        "6",
        "--cdw10",
        "1",
        "-l",
        "4096",
        "-r",
        "--output-file",
        &o,
    ]);
    assert_eq!(&std::fs::read(&output).unwrap()[0..2], &[0x36, 0x1b]);
    assert!(ok(&["reset", b]).contains("controller reset done"));
    assert_eq!(json(&["id-ctrl", b, "--json"])["sn"], id["sn"]);

    // What QEMU 7.2 lacks: said plainly.
    fails(
        &["create-ns", b, "--nsze", "1000"],
        "this controller doesn't support Namespace Management",
    );
    fails(
        &["delete-ns", b, "-n", "1", "--yes"],
        "this controller doesn't support Namespace Management",
    );
    fails(
        &["sanitize", b, "-a", "block-erase", "--yes"],
        "this controller doesn't support Sanitize",
    );
    fails(
        &["fw-download", b, "--fw", &i],
        "this controller doesn't support Firmware Image Download",
    );
    fails(
        &["fw-commit", b, "--slot", "1", "--action", "1", "--yes"],
        "this controller doesn't support Firmware Commit",
    );

    // A controller another process holds: named, and nothing is sent.
    let holder = Holder::new(b);
    let pid = holder.0.id().to_string();
    fails(
        &["format", b, "-n", "1", "--yes"],
        &format!("in use by PID {pid} (sleep)"),
    );
    fails(
        &["delete-ns", b, "-n", "1", "--yes"],
        &format!("in use by PID {pid}"),
    );
    drop(holder);
    ok(&["id-ctrl", b]);
}
