//! Scenario `media`: media errors through fio and the vfnvme engine. Namespace 1
//! sits on `blkdebug`: reads covering one 512-byte sector and writes covering another fail
//! (`VFNVME_EXPECT_MEDIA_ERRORS`). fio writes the whole area with `verify=crc32c` and
//! `continue_on_error=io`: exactly the write over the write-error sector and the verify read
//! over the read-error sector fail (2 errors), the engine prints each with its NVMe status
//! (SCT 2h / SC 80h Write Fault, SC 81h Unrecovered Read Error), and every other block passes
//! verify: a checksum mismatch stays fatal (continue_on_error=io covers only read and write
//! errors), so fio would exit non-zero on one.
//!
//! The engine comes from `VFNVME_FIO_ENGINE` (scripts/test-all.sh builds it with
//! ffi/fio/build.sh for guest tests whose name contains `fio`).

use std::process::Command;

use serde_json::Value;
use vfnvme_tests::guest;

/// `(nsid, read_error_sector, write_error_sector)` of the scenario's blkdebug namespace.
fn faulty() -> (u32, u64, u64) {
    let text = guest::expect_var("VFNVME_EXPECT_MEDIA_ERRORS");
    let v: Vec<u64> = text
        .split(',')
        .next()
        .unwrap_or_default()
        .split(':')
        .map(|x| {
            x.parse()
                .unwrap_or_else(|_| panic!("VFNVME_EXPECT_MEDIA_ERRORS={text:?}"))
        })
        .collect();
    assert_eq!(v.len(), 3, "VFNVME_EXPECT_MEDIA_ERRORS={text:?}");
    (v[0] as u32, v[1], v[2])
}

fn engine() -> String {
    let path = std::env::var("VFNVME_FIO_ENGINE").unwrap_or_else(|_| {
        panic!(
            "VFNVME_FIO_ENGINE is not set: build the engine with ffi/fio/build.sh and pass its \
             path (scripts/test-all.sh does both for guest tests named *fio*)"
        )
    });
    assert!(
        std::path::Path::new(&path).is_file(),
        "VFNVME_FIO_ENGINE={path} does not exist: run ffi/fio/build.sh"
    );
    path
}

/// What one fio run gave.
struct Run {
    job: Value,
    stderr: String,
}

/// Runs fio with the engine on `file` plus `args`; fails the test if fio exits non-zero.
fn fio(name: &str, file: &str, args: &[&str]) -> Run {
    let out_dir = guest::expect_var("VFNVME_OUT_DIR");
    let json = format!("{out_dir}/{name}.json");
    let output = Command::new("fio")
        .arg(format!("--ioengine=external:{}", engine()))
        // No verify state file: the working folder is read-only in the guest.
        .args([
            "--thread=1",
            "--output-format=json",
            "--verify_state_save=0",
        ])
        .arg(format!("--name={name}"))
        .arg(format!("--filename={file}"))
        .arg(format!("--output={json}"))
        .args(args)
        .output()
        .expect("running fio (installed by vfnvme vm)");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    eprintln!("fio {name} stderr:\n{stderr}");
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    assert!(
        output.status.success(),
        "fio {name} exited with {}: a verify mismatch or a fatal error\n{stderr}\n{text}",
        output.status
    );
    // fio may print notes before the JSON object.
    let start = text
        .find('{')
        .unwrap_or_else(|| panic!("no JSON from fio {name}: {text}"));
    let v: Value = serde_json::from_str(&text[start..])
        .unwrap_or_else(|e| panic!("fio {name} JSON: {e}: {text}"));
    Run {
        job: v["jobs"][0].clone(),
        stderr,
    }
}

fn count(job: &Value, path: &[&str]) -> u64 {
    let mut v = job;
    for p in path {
        v = &v[*p];
    }
    v.as_u64()
        .unwrap_or_else(|| panic!("no {path:?} in fio's JSON: {job}"))
}

/// The engine's report of a failed `op` at byte `offset` with SCT 2h and `sc`.
fn reported(stderr: &str, op: &str, offset: u64, sc: u8, name: &str) -> bool {
    stderr.lines().any(|l| {
        l.contains(&format!("{op} of "))
            && l.contains(&format!("at offset {offset} failed: NVMe status 0x02{sc:02x} (sct 0x2 sc 0x{sc:02x} dnr 0 more 0: {name})"))
    })
}

#[test]
fn fio_reports_media_errors_with_their_status_and_verify_passes_for_the_rest() {
    if !guest::in_guest(
        "guest_media_fio::fio_reports_media_errors_with_their_status_and_verify_passes_for_the_rest",
    ) {
        return;
    }
    let (nsid, read_sector, write_sector) = faulty();
    let bdf = guest::vfio_devices()[0].replace(':', ".");
    let file = format!("trtype=PCIe traddr={bdf} ns={nsid}");
    let (read_off, write_off) = (read_sector * 512, write_sector * 512);
    // 4 KiB blocks: the bad sectors lie in the blocks at these offsets.
    let (read_block, write_block) = (read_off & !4095, write_off & !4095);
    let size = (write_off.max(read_off) + 1024 * 1024).next_multiple_of(1024 * 1024);

    // Sequential: every 4 KiB block written once, then read back and checked.
    let seq = fio(
        "media-seq",
        &file,
        &[
            "--rw=write",
            "--bs=4k",
            "--iodepth=16",
            &format!("--size={size}"),
            "--verify=crc32c",
            "--do_verify=1",
            "--continue_on_error=io",
        ],
    );
    let blocks = size / 4096;
    let j = &seq.job;
    println!(
        "MEDIA-FIO seq: size {size}, error {}, total_err {}, first_error {}, written {} KiB, verified (read) {} KiB",
        j["error"], j["total_err"], j["first_error"],
        count(j, &["write", "io_bytes"]) >> 10,
        count(j, &["read", "io_bytes"]) >> 10
    );
    // fio exited 0 (checked in fio()), so no error was fatal: no checksum mismatch. With
    // continue_on_error, fio's "error" is the first non-fatal one.
    assert_eq!(
        count(j, &["total_err"]),
        2,
        "one write and one verify read failed"
    );
    assert_eq!(count(j, &["first_error"]), 5, "EIO");
    assert_eq!(count(j, &["error"]), 5, "EIO, not a verify error");
    assert_eq!(
        count(j, &["write", "io_bytes"]),
        (blocks - 1) * 4096,
        "every block written but the one on the write-error sector"
    );
    assert_eq!(
        count(j, &["read", "io_bytes"]),
        (blocks - 2) * 4096,
        "every written block read back and verified, but the unreadable one"
    );
    assert!(
        reported(&seq.stderr, "write", write_block, 0x80, "Write Fault"),
        "the engine reported the write fault at {write_block}:\n{}",
        seq.stderr
    );
    assert!(
        reported(
            &seq.stderr,
            "read",
            read_block,
            0x81,
            "Unrecovered Read Error"
        ),
        "the engine reported the read error at {read_block}:\n{}",
        seq.stderr
    );

    // Random sizes and order over the same area (each block once: fio's random map).
    let rand = fio(
        "media-rand",
        &file,
        &[
            "--rw=randwrite",
            "--bsrange=512-64k",
            "--iodepth=16",
            &format!("--size={size}"),
            "--verify=crc32c",
            "--do_verify=1",
            "--continue_on_error=io",
            "--randseed=11",
        ],
    );
    let j = &rand.job;
    println!(
        "MEDIA-FIO rand: error {}, total_err {}, written {} KiB, verified (read) {} KiB",
        j["error"],
        j["total_err"],
        count(j, &["write", "io_bytes"]) >> 10,
        count(j, &["read", "io_bytes"]) >> 10
    );
    assert!(
        count(j, &["read", "io_bytes"]) > size / 2,
        "most of the area was verified"
    );
    assert_eq!(
        count(j, &["total_err"]),
        2,
        "one write and one verify read failed"
    );
    assert_eq!(count(j, &["error"]), 5, "EIO, not a verify error");
    let errors = rand
        .stderr
        .lines()
        .filter(|l| l.contains("failed: NVMe status"))
        .collect::<Vec<_>>();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors
        .iter()
        .any(|l| l.contains("write of") && l.contains("sc 0x80")));
    assert!(errors
        .iter()
        .any(|l| l.contains("read of") && l.contains("sc 0x81")));
}
