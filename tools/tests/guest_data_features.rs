//! Scenario `data`: `vfnvme get-feature` / `set-feature` (nvme-cli's names and output shape) on
//! QEMU's NVMe controller: values read and changed, and each refusal with its advice.

use std::process::{Command, Output};

fn in_guest(test: &str) -> bool {
    if std::env::var_os("VFNVME_GUEST").is_none() {
        println!("SKIPPED (host): {test} runs in the guest (scripts/test-all.sh data_features)");
        return false;
    }
    true
}

fn bdf() -> String {
    std::env::var("VFNVME_VFIO_DEVICES")
        .unwrap_or_default()
        .split(',')
        .next()
        .unwrap_or_default()
        .to_string()
}

fn vfnvme(args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_vfnvme"))
        .args(args)
        .output()
        .expect("run vfnvme");
    println!(
        "$ vfnvme {}\n{}{}(status {:?})",
        args.join(" "),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        o.status.code()
    );
    o
}

/// Runs `args`, expects exit status `status` and `needle` in the output; returns stdout.
fn expect(args: &[&str], status: i32, needle: &str) -> String {
    let o = vfnvme(args);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let all = format!("{out}{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(status), "vfnvme {args:?}: {all}");
    assert!(
        all.contains(needle),
        "vfnvme {args:?}: no {needle:?} in: {all}"
    );
    assert!(!all.contains("panicked"), "{all}");
    out
}

/// The value get-feature prints (`..., Current value:0x00000157`).
fn value(out: &str) -> u32 {
    let hex = out.trim().rsplit("value:0x").next().expect("a value");
    u32::from_str_radix(hex, 16).expect("a hex value")
}

#[test]
fn get_and_set_features_that_fit_in_the_command() {
    if !in_guest("guest_data_features::get_and_set_features_that_fit_in_the_command") {
        return;
    }
    let b = bdf();
    let b = b.as_str();
    let q = expect(
        &["get-feature", b, "-f", "7"],
        0,
        "get-feature:0x07 (Number of Queues), Current value:0x",
    );
    // 0's based counts: at least one SQ and one CQ.
    let _ = value(&q);

    expect(
        &["set-feature", b, "-f", "6", "-v", "0"],
        0,
        "set-feature:0x06 (Volatile Write Cache), value:0x00000000",
    );
    let off = expect(
        &["get-feature", b, "-f", "6"],
        0,
        "get-feature:0x06 (Volatile Write Cache), Current value:",
    );
    expect(
        &["set-feature", b, "-f", "6", "-v", "1"],
        0,
        "value:0x00000001",
    );
    let on = expect(&["get-feature", b, "-f", "6"], 0, "Current value:");
    assert_eq!((value(&off), value(&on)), (0, 1));

    let default = value(&expect(
        &["get-feature", b, "-f", "4", "-s", "1"],
        0,
        "Default value:0x",
    ));
    let changed = default.wrapping_sub(7) & 0xffff;
    let arg = format!("{changed:#x}");
    expect(
        &["set-feature", b, "-f", "0x04", "-v", &arg],
        0,
        "Temperature Threshold",
    );
    let now = value(&expect(
        &["get-feature", b, "-f", "4"],
        0,
        "Current value:0x",
    ));
    assert_eq!(now, changed);
    let back = format!("{default}");
    expect(
        &["set-feature", b, "-f", "4", "-v", &back],
        0,
        "Temperature Threshold",
    );

    let j = expect(&["get-feature", b, "-f", "0x0b", "--json"], 0, "\"name\"");
    let v: serde_json::Value = serde_json::from_str(&j).expect("JSON");
    assert_eq!(v["feature_id"], 11);
    assert_eq!(v["name"], "Async Event Configuration");
    assert_eq!(v["sel"], "current");
    assert!(v["value"].is_u64(), "{v}");
}

#[test]
fn refusals_say_what_to_do() {
    if !in_guest("guest_data_features::refusals_say_what_to_do") {
        return;
    }
    let b = bdf();
    let b = b.as_str();
    expect(
        &["get-feature", b, "-f", "0"],
        2,
        "feature identifier 0 is reserved",
    );
    expect(&["get-feature", b, "-f", "256"], 2, "out of range");
    expect(&["get-feature", b, "-f", "6", "-s", "4"], 2, "0..=3");
    expect(
        &["get-feature", b, "-f", "5", "-n", "9"],
        1,
        "namespace 9 is not active",
    );
    expect(
        &["get-feature", b, "-f", "0x0e"],
        1,
        "0x0e (Timestamp) moves a data buffer",
    );
    expect(
        &["get-feature", b, "-f", "0x7f"],
        1,
        "this controller doesn't support feature 0x7f",
    );
    expect(
        &["set-feature", b, "-f", "6", "-v", "1", "--save"],
        1,
        "leave out --save",
    );
    expect(
        &["set-feature", b, "-f", "0x0a", "-v", "1"],
        1,
        "can't be changed on this controller",
    );
    expect(
        &["set-feature", b, "-f", "7", "-v", "1"],
        1,
        "only be set while the controller is brought up",
    );
}
