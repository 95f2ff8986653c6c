//! Scenario `noiommu` (a guest without an IOMMU): fio with the vfnvme engine and `no_iommu=1`.
//! - Without `no_iommu=1` the engine refuses the controller with the opt-in line.
//! - One controller: random writes of 4 KiB to 1 MiB (above MDTS, 512 KiB: split) over 8 MiB of
//!   namespace 1 at QD 1 (fio's buffers, 1 MiB, fit one 2 MiB hugepage: zero-copy), then 256 KiB
//!   at QD 16 (4 MiB of buffers: ordinary memory, a DMA bounce buffer per I/O, said once),
//!   `verify=crc32c`: fio exits 0, every byte written and verified.
//! - The multipath head of both controllers (`traddr=A+B`, round-robin) on namespace 2 with
//!   `verify=crc32c`: no error, both paths carry I/Os.
//!
//! The engine comes from `VFNVME_FIO_ENGINE` (scripts/test-all.sh builds it for guest tests
//! named `*fio*`).

use std::process::Command;

use serde_json::Value;
use vfnvme_tests::guest;
use vfnvme_tests::guest_fio::{engine, num, per_path};
use vfnvme_tests::guest_noiommu::{self as noiommu, OPT_IN};

/// Runs fio with the engine and `args`; its status, its JSON (if any) and its stderr.
fn fio(name: &str, args: &[String]) -> (std::process::ExitStatus, Option<Value>, String) {
    let out_dir = guest::expect_var("VFNVME_OUT_DIR");
    let json_path = format!("{out_dir}/noiommu-{name}.json");
    let _ = std::fs::remove_file(&json_path);
    let o = Command::new("fio")
        .arg(format!("--ioengine=external:{}", engine()))
        .args([
            "--thread=1",
            "--output-format=json",
            "--verify_state_save=0",
        ])
        .arg(format!("--output={json_path}"))
        .arg(format!("--name={name}"))
        .args(args)
        .output()
        .expect("starting fio");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    eprintln!("fio {name}: {}\n{stderr}", o.status);
    let text = std::fs::read_to_string(&json_path).unwrap_or_default();
    let json = text
        .find('{')
        .and_then(|s| serde_json::from_str(&text[s..]).ok());
    (o.status, json, stderr)
}

fn filename(bdfs: &[&str], nsid: u32) -> String {
    let addrs: Vec<String> = bdfs.iter().map(|b| b.replace(':', ".")).collect();
    format!(
        "--filename=trtype=PCIe traddr={} ns={nsid}",
        addrs.join("+")
    )
}

#[test]
fn the_engine_refuses_without_no_iommu_and_verifies_with_it() {
    if !guest::in_guest(
        "guest_noiommu_fio::the_engine_refuses_without_no_iommu_and_verifies_with_it",
    ) {
        return;
    }
    noiommu::ensure_bound();
    let b = noiommu::staying();
    let a = noiommu::removable();

    // Without no_iommu=1: refused, with the opt-in line.
    let (status, _, stderr) = fio(
        "refused",
        &[
            filename(&[&b], 1),
            "--rw=read".into(),
            "--bs=4k".into(),
            "--size=1m".into(),
        ],
    );
    assert!(!status.success(), "fio without no_iommu=1 must fail");
    assert!(stderr.contains(OPT_IN), "no opt-in line:\n{stderr}");

    // One controller, requests up to 1 MiB (split at MDTS), verified.
    let size: u64 = 8 << 20;
    let (status, json, stderr) = fio(
        "verify",
        &[
            filename(&[&b], 1),
            "--no_iommu=1".into(),
            "--rw=randwrite".into(),
            "--bsrange=4k-1m".into(),
            // fio's buffers are one allocation of iodepth * max bs: here within one 2 MiB
            // hugepage, so I/O is zero-copy.
            "--iodepth=1".into(),
            format!("--size={size}"),
            "--verify=crc32c".into(),
            "--do_verify=1".into(),
        ],
    );
    assert!(status.success(), "fio verify failed:\n{stderr}");
    let j = json.expect("fio's JSON");
    let job = &j["jobs"][0];
    assert_eq!(num(job, "error", None), 0, "{job}");
    assert_eq!(num(job, "write", Some("io_bytes")), size, "{job}");
    assert_eq!(
        num(job, "read", Some("io_bytes")),
        size,
        "every byte verified: {job}"
    );
    assert!(
        stderr.contains("no-IOMMU"),
        "the process warns once:\n{stderr}"
    );

    // fio's buffers larger than one hugepage (QD 16 x 256 KiB = 4 MiB): ordinary memory and a
    // DMA bounce buffer per I/O, said once; still verified.
    let (status, json, stderr) = fio(
        "bounce",
        &[
            filename(&[&b], 1),
            "--no_iommu=1".into(),
            "--rw=randwrite".into(),
            "--bs=256k".into(),
            "--iodepth=16".into(),
            format!("--size={size}"),
            "--verify=crc32c".into(),
            "--do_verify=1".into(),
        ],
    );
    assert!(
        status.success(),
        "fio with bounce buffers failed:\n{stderr}"
    );
    assert!(
        stderr.contains("goes through a bounce buffer"),
        "no note:\n{stderr}"
    );
    let j = json.expect("fio's JSON");
    let job = &j["jobs"][0];
    assert_eq!(num(job, "error", None), 0, "{job}");
    assert_eq!(num(job, "write", Some("io_bytes")), size, "{job}");
    assert_eq!(num(job, "read", Some("io_bytes")), size, "{job}");

    // The multipath head of both controllers.
    let size: u64 = 4 << 20;
    let (status, json, stderr) = fio(
        "head",
        &[
            filename(&[&a, &b], 2),
            "--no_iommu=1".into(),
            "--mp_policy=round-robin".into(),
            "--rw=randwrite".into(),
            "--bs=4k".into(),
            "--iodepth=16".into(),
            format!("--size={size}"),
            "--verify=crc32c".into(),
            "--do_verify=1".into(),
        ],
    );
    assert!(status.success(), "fio on the head failed:\n{stderr}");
    let j = json.expect("fio's JSON");
    let job = &j["jobs"][0];
    assert_eq!(num(job, "error", None), 0, "{job}");
    assert_eq!(num(job, "write", Some("io_bytes")), size, "{job}");
    assert_eq!(num(job, "read", Some("io_bytes")), size, "{job}");
    let paths = per_path(&stderr);
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(
        paths.iter().all(|(_, n)| *n > 0),
        "both paths used: {paths:?}"
    );
    println!("NOIOMMU-FIO verify 8 MiB (4k-1m, and 256k through bounce buffers) and the head's 4 MiB: I/Os per path {paths:?}");
}
