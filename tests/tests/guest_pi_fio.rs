//! Scenario `pi`: fio with the vfnvme engine and `verify=crc32c` on namespaces with metadata and
//! protection information, with SPDK's option names (`pi_act`, `pi_chk`, `apptag`,
//! `apptag_mask`, `md_per_io_size`): PRACT on and off, extended and separate metadata, PI types
//! 1, 2 and 3, first and last, and metadata without PI. fio sees data only (the engine keeps the
//! metadata in its own buffers), so its verify checks every byte of data; with `pi_act=0` the
//! engine generates the PI, the controller checks it (PRCHK) and the engine checks each read's
//! PI too; a `verify_only` pass with `pi_act=1` then has the controller check and strip the PI
//! the engine wrote. Combinations that can't work are refused before any I/O, with a message,
//! and a wrong expected application tag fails the reads with the controller's status.
//!
//! The engine comes from `VFNVME_FIO_ENGINE` (scripts/test-all.sh builds it for tests named
//! *fio*).

use std::process::Command;

use vfnvme_tests::guest;
use vfnvme_tests::guest_fio::engine;
use vfnvme_tests::guest_metadata::{assert_no_new_dmar_faults, dmar_faults};

fn engine_args() -> Vec<String> {
    vec![
        format!("--ioengine=external:{}", engine()),
        "--thread=1".into(),
        "--verify_state_save=0".into(),
    ]
}

/// The filename of namespace `nsid` of the first controller.
fn filename(nsid: u32) -> String {
    let bdf = guest::vfio_devices()[0].replace(':', ".");
    format!("--filename=trtype=PCIe traddr={bdf} ns={nsid}")
}

/// Runs one fio process with `args` (global options, then `--name=` sections).
fn run(args: &[String]) -> (bool, String) {
    let out = Command::new("fio")
        .args(engine_args())
        .args(args)
        .output()
        .expect("running fio (installed by vfnvme vm)");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// One job on namespace `nsid` with `args`, must fail saying `why` (before any I/O, or, with
/// `why` an NVMe status, when the controller's check fails).
fn fio_fails(name: &str, nsid: u32, args: &[&str], why: &str) {
    let mut all: Vec<String> = WRITE_VERIFY.iter().map(|s| s.to_string()).collect();
    all.push(format!("--name={name}"));
    all.push(filename(nsid));
    all.extend(args.iter().map(|s| s.to_string()));
    let (ok, text) = run(&all);
    assert!(!ok, "fio {name} must fail:\n{text}");
    assert!(
        text.contains(why),
        "fio {name}: expected {why:?} in:\n{text}"
    );
}

/// The job of a write-then-verify pass over 1 MiB from 256 KiB on.
const WRITE_VERIFY: &[&str] = &[
    "--rw=randwrite",
    "--bs=8k",
    "--offset=256k",
    "--size=1m",
    "--iodepth=8",
    "--verify=crc32c",
    "--do_verify=1",
];
const ALL_CHECKS: &str = "--pi_chk=GUARD,REFTAG,APPTAG";
const NO_REF: &str = "--pi_chk=GUARD,APPTAG";

#[test]
fn fio_verifies_data_with_pract_on_and_off_on_every_format() {
    if !guest::in_guest("guest_pi_fio::fio_verifies_data_with_pract_on_and_off_on_every_format") {
        return;
    }
    let faults_before = dmar_faults();
    // (nsid, job, options), one job after the other in one fio process (one bring-up): ns 1
    // 512+8 ext PI1 last, 2 512+8 sep PI1 first, 3 4096+16 ext PI2 first, 4 4096+16 sep PI2
    // last, 5 512+64 ext PI3 last, 6 4096+64 sep PI3 first, 7 512+16 sep without PI. The last
    // three read back with PRACT what the engine's own PI (pi_act=0) protects: the controller
    // checks and strips it, and the data verifies again.
    let jobs: &[(u32, &str, &[&str])] = &[
        (1, "ext8-act", &["--pi_act=1", ALL_CHECKS]),
        (1, "ext8-host", &["--pi_act=0", ALL_CHECKS, "--apptag=0x77"]),
        (2, "sep8-act", &["--pi_act=1", ALL_CHECKS]),
        (
            2,
            "sep8-host",
            &["--pi_act=0", ALL_CHECKS, "--md_per_io_size=128"],
        ),
        (3, "ext16-act", &["--pi_act=1", ALL_CHECKS]),
        (3, "ext16-host", &["--pi_act=0", ALL_CHECKS]),
        (
            4,
            "sep16-host",
            &["--pi_act=0", NO_REF, "--apptag_mask=0xff00"],
        ),
        (5, "ext64-host", &["--pi_act=0", NO_REF]),
        (6, "sep64-act", &["--pi_act=1", NO_REF]),
        (7, "sep16-nopi", &["--md_per_io_size=4096"]),
        (
            1,
            "ext8-host-read-act",
            &["--pi_act=1", ALL_CHECKS, "--apptag=0x77", "--verify_only=1"],
        ),
        (
            2,
            "sep8-host-read-act",
            &["--pi_act=1", ALL_CHECKS, "--verify_only=1"],
        ),
        (
            3,
            "ext16-host-read-act",
            &["--pi_act=1", ALL_CHECKS, "--verify_only=1"],
        ),
    ];
    let mut args: Vec<String> = WRITE_VERIFY.iter().map(|s| s.to_string()).collect();
    for (nsid, name, opts) in jobs {
        args.push(format!("--name={name}"));
        args.push("--stonewall".into());
        args.push(filename(*nsid));
        args.extend(opts.iter().map(|s| s.to_string()));
    }
    let (ok, text) = run(&args);
    assert!(ok, "fio failed:\n{text}");
    assert!(
        !text.contains("verify: bad") && !text.contains("PI check failed"),
        "{text}"
    );
    for (_, name, _) in jobs {
        assert!(
            text.contains(&format!("{name}: (groupid=")),
            "job {name} did not run:\n{text}"
        );
    }
    assert_no_new_dmar_faults(&faults_before);
}

#[test]
fn combinations_that_cant_work_are_refused_before_any_io() {
    if !guest::in_guest("guest_pi_fio::combinations_that_cant_work_are_refused_before_any_io") {
        return;
    }
    fio_fails(
        "small-md",
        2,
        &["--md_per_io_size=64"],
        "md_per_io_size=64 is too small",
    );
    fio_fails(
        "type3-ref",
        5,
        &[ALL_CHECKS],
        "PI type 3, which has no reference tag",
    );
    fio_fails("nopi-act", 7, &["--pi_act=1"], "no protection information");
    fio_fails("bad-chk", 1, &["--pi_chk=GUARD,CRC"], "unknown check 'CRC'");
    // A wrong expected application tag: written with PRACT and the default tag (0x1234), read
    // back expecting 0x78: the controller's check fails each read (SC 83h), which the engine
    // reports with its status, and fio fails.
    let mut args: Vec<String> = WRITE_VERIFY.iter().map(|s| s.to_string()).collect();
    for (name, tag) in [
        ("write-1234", "--apptag=0x1234"),
        ("expect-78", "--apptag=0x78"),
    ] {
        args.extend([
            format!("--name={name}"),
            "--stonewall".into(),
            filename(3),
            "--pi_act=1".into(),
            NO_REF.into(),
            tag.into(),
        ]);
    }
    args.push("--verify_only=1".into());
    let (ok, text) = run(&args);
    assert!(
        !ok,
        "reads expecting the wrong application tag must fail:\n{text}"
    );
    assert!(
        text.contains("sct 0x2 sc 0x83 dnr 0 more 0: End-to-end Application Tag Check Error"),
        "{text}"
    );
    assert!(
        !text.contains("sc 0x82") && !text.contains("sc 0x84"),
        "only the application tag is wrong:\n{text}"
    );
}
