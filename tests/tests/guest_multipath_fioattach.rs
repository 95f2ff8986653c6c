//! Scenario `multipath`: fio with the vfnvme engine on the multipath head of namespace 1
//! (`traddr=0000.00.10.0+0000.00.11.0`, round-robin), writing and verifying (`crc32c`) the
//! whole namespace several times, while namespace 1 is detached from controller 00:10.0 by
//! Namespace Attachment and attached to it again later (the engine's test hooks
//! `mp_detach_after_ms` / `mp_attach_after_ms`, sent by its subsystem poller thread: the
//! controllers belong to the fio process, so no other process can send admin commands to
//! them). QEMU ends I/O still sent to 00:10.0 with Invalid Field until the driver has
//! rescanned; the channel sends it again on 00:11.0. No error reaches fio, every block is
//! written and verified in each pass, and the I/Os per path show the shift. Prints
//! `MULTIPATH-ATTACH-FIO` figures (also in `multipath-attach-fio.txt` of the run's output).
//!
//! The engine comes from `VFNVME_FIO_ENGINE` (scripts/test-all.sh builds it for guest tests
//! named `*fio*`).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;
use vfnvme_tests::guest_fio::{engine, per_path};

use serde_json::Value;
use vfnvme_tests::guest;

/// Passes over the namespace (each writes and verifies all of it).
const LOOPS: u64 = 24;
/// When the engine detaches namespace 1 from 00:10.0, and attaches it again (ms after it
/// opened the subsystem).
const DETACH_MS: u64 = 2000;
const ATTACH_MS: u64 = 4000;

#[test]
fn namespace_detached_from_one_path_under_fio_verify_fails_over_without_an_error() {
    if !guest::in_guest(
        "guest_multipath_fioattach::namespace_detached_from_one_path_under_fio_verify_fails_over_without_an_error",
    ) {
        return;
    }
    let devices = guest::vfio_devices();
    assert_eq!(
        devices.len(),
        2,
        "the multipath scenario has two vfio controllers"
    );
    let first = devices
        .iter()
        .find(|d| d.ends_with(":10.0"))
        .expect("controller 00:10.0")
        .clone();
    let second = devices
        .iter()
        .find(|d| **d != first)
        .expect("controller 00:11.0")
        .clone();
    let ns = guest::expected_namespaces(Some(0x10))[0];
    let size = ns.blocks * u64::from(ns.lba_size);
    let out_dir = guest::expect_var("VFNVME_OUT_DIR");
    let json_path = format!("{out_dir}/multipath-attach-fio.json");
    let traddr = format!("{}+{}", first.replace(':', "."), second.replace(':', "."));
    let started = Instant::now();
    let mut child = Command::new("fio")
        .arg(format!("--ioengine=external:{}", engine()))
        .args([
            "--thread=1",
            "--output-format=json",
            "--verify_state_save=0",
            "--iodepth=16",
            "--bs=4k",
            "--name=head",
            "--rw=randwrite",
            "--verify=crc32c",
            "--do_verify=1",
            "--mp_policy=round-robin",
        ])
        .arg(format!("--mp_detach_after_ms={DETACH_MS}"))
        .arg(format!("--mp_attach_after_ms={ATTACH_MS}"))
        .arg(format!("--output={json_path}"))
        .arg(format!(
            "--filename=trtype=PCIe traddr={traddr} ns={}",
            ns.nsid
        ))
        .arg(format!("--size={size}"))
        .arg(format!("--loops={LOOPS}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting fio (installed by vfnvme vm)");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .expect("fio's stderr");
    let status = child.wait().expect("waiting for fio");
    let took = started.elapsed();
    let text = std::fs::read_to_string(&json_path).unwrap_or_default();
    let start = text
        .find('{')
        .unwrap_or_else(|| panic!("no JSON from fio (status {status}): {text}\n{stderr}"));
    let all: Value = serde_json::from_str(&text[start..]).expect("fio's JSON");
    let job = &all["jobs"][0];
    let num = |a: &str, b: &str| job[a][b].as_u64().unwrap_or(u64::MAX);
    let counts = per_path(&stderr);
    let count = |bdf: &str| {
        counts
            .iter()
            .find(|(k, _)| k == bdf)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no count for {bdf} in {counts:?}"))
    };
    let (n_first, n_second) = (count(&first), count(&second));
    let removed = stderr.contains("ns 1: path through controller 0 removed");
    let added = stderr.contains("ns 1: path through controller 0 added");
    let summary = format!(
        "MULTIPATH-ATTACH-FIO fio status {status} after {took:?}; error {}, written {} KiB, verified {} KiB; I/Os per path: {first}={n_first} {second}={n_second}; path 0 removed event {removed}, added again event {added}",
        job["error"],
        num("write", "io_bytes") >> 10,
        num("read", "io_bytes") >> 10,
    );
    println!("{summary}");
    eprintln!("fio stderr:\n{stderr}");
    let _ = std::fs::write(
        format!("{out_dir}/multipath-attach-fio.txt"),
        format!("{summary}\n{stderr}"),
    );
    let hook_failed = stderr
        .lines()
        .any(|l| l.contains("test hook") && l.ends_with("FAILED"));
    assert!(
        stderr.contains("namespace 1 detached from controller 0")
            && stderr.contains("namespace 1 attached to controller 0")
            && !hook_failed,
        "the engine detached namespace 1 from controller 0 and attached it again:\n{stderr}"
    );
    assert!(status.success(), "fio succeeded:\n{stderr}");
    assert_eq!(job["error"].as_u64(), Some(0), "no error reached fio");
    assert_eq!(
        num("write", "io_bytes"),
        LOOPS * size,
        "every block written in each pass"
    );
    assert_eq!(
        num("read", "io_bytes"),
        LOOPS * size,
        "every block read back and verified in each pass"
    );
    assert!(removed, "the path through 00:10.0 left the head:\n{stderr}");
    assert!(added, "and came back after the re-attach:\n{stderr}");
    assert!(
        n_first > 0 && n_second > n_first,
        "{first}={n_first} {second}={n_second}"
    );
}
