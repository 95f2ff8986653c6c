//! Scenario `pair`: `vfnvme perf` on two controllers in one run: a row per device, and the
//! Total their sum.

use std::process::Command;

#[test]
fn perf_two_devices_in_one_run() {
    if std::env::var_os("VFNVME_GUEST").is_none() {
        println!(
            "SKIPPED (host): guest_pair_perf runs in the guest (scripts/test-all.sh pair_perf)"
        );
        return;
    }
    let bdfs: Vec<String> = std::env::var("VFNVME_VFIO_DEVICES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(bdfs.len(), 2, "{bdfs:?}");
    let args = [
        "perf",
        "--device",
        &bdfs[0],
        "--device",
        &bdfs[1],
        "--qd",
        "2",
        "--io-size",
        "4k",
        "--time",
        "60",
        "--ios",
        "1000",
        "--json",
        "-",
    ];
    let o = Command::new(env!("CARGO_BIN_EXE_vfnvme"))
        .args(args)
        .output()
        .expect("run vfnvme");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    println!(
        "$ vfnvme {}\n{out}{err}(status {:?})",
        args.join(" "),
        o.status.code()
    );
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is JSON");
    let rows = v["rows"].as_array().expect("rows");
    let mut targets: Vec<&str> = rows.iter().map(|r| r["target"].as_str().unwrap()).collect();
    targets.sort_unstable();
    let mut want: Vec<&str> = bdfs.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(targets, want, "{v}");
    for r in rows {
        assert_eq!(r["ios"], 1000, "{r}");
    }
    assert_eq!(v["total"]["ios"], 2000, "{v}");
    for b in &bdfs {
        // spdk_nvme_perf's row: `PCIE (BDF) NSID 1 from core N:`.
        assert!(
            err.contains(&format!("PCIE ({b}) NSID 1 from core ")),
            "{err}"
        );
    }
}
