//! Scenario `pi`: fio with the vfnvme engine and `verify=crc32c` on namespaces with metadata and
//! protection information, with SPDK's option names (`pi_act`, `pi_chk`, `apptag`,
//! `apptag_mask`, `md_per_io_size`): PRACT on and off, extended and separate metadata, PI types
//! 1, 2 and 3, first and last, and metadata without PI. fio sees data only (the engine keeps the
//! metadata in its own buffers), so its verify checks every byte of data; with `pi_act=0` the
//! engine generates the PI, the controller checks it (PRCHK) and the engine checks each read's
//! PI too; a `verify_only` pass with `pi_act=1` then has the controller check and strip the PI
//! the engine wrote. Combinations that can't work are refused before any I/O, with a message.
//!
//! The engine comes from `VFNVME_FIO_ENGINE` (scripts/test-all.sh builds it for tests named
//! *fio*).

use std::process::{Command, Output};

use vfnvme_tests::guest;
use vfnvme_tests::guest_fio::engine;
use vfnvme_tests::guest_metadata::{assert_no_new_dmar_faults, dmar_faults};

/// Runs fio on namespace `nsid` of the first controller with `args`.
fn fio(name: &str, nsid: u32, args: &[&str]) -> Output {
    let bdf = guest::vfio_devices()[0].replace(':', ".");
    Command::new("fio")
        .arg(format!("--ioengine=external:{}", engine()))
        .args(["--thread=1", "--verify_state_save=0", "--group_reporting"])
        .arg(format!("--name={name}"))
        .arg(format!("--filename=trtype=PCIe traddr={bdf} ns={nsid}"))
        .args(args)
        .output()
        .expect("running fio (installed by vfnvme vm)")
}

/// fio must succeed: written, read back and verified.
fn fio_ok(name: &str, nsid: u32, args: &[&str]) {
    let out = fio(name, nsid, args);
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "fio {name} on ns {nsid} {args:?} failed ({}):\n{text}",
        out.status
    );
    assert!(
        !text.contains("verify: bad") && !text.contains("PI check failed"),
        "{name}: {text}"
    );
    eprintln!("fio {name} on ns {nsid} {args:?}: OK");
}

/// fio must refuse before any I/O, saying `why`.
fn fio_refused(name: &str, nsid: u32, args: &[&str], why: &str) {
    let out = fio(name, nsid, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "fio {name} must fail: {err}");
    assert!(err.contains(why), "fio {name}: expected {why:?} in:\n{err}");
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
    "--norandommap=0",
];
const ALL_CHECKS: &str = "--pi_chk=GUARD,REFTAG,APPTAG";
const NO_REF: &str = "--pi_chk=GUARD,APPTAG";

fn with(extra: &[&'static str]) -> Vec<&'static str> {
    WRITE_VERIFY.iter().chain(extra).copied().collect()
}

#[test]
fn fio_verifies_data_with_pract_on_and_off_on_every_format() {
    if !guest::in_guest("guest_pi_fio::fio_verifies_data_with_pract_on_and_off_on_every_format") {
        return;
    }
    let faults_before = dmar_faults();
    // (nsid, what, options): ns 1 512+8 ext PI1 last, 2 512+8 sep PI1 first, 3 4096+16 ext PI2
    // first, 4 4096+16 sep PI2 last, 5 512+64 ext PI3 last, 6 4096+64 sep PI3 first, 7 512+16
    // sep without PI.
    let runs: &[(u32, &str, Vec<&str>)] = &[
        (1, "ext8-act", with(&["--pi_act=1", ALL_CHECKS])),
        (
            1,
            "ext8-host",
            with(&["--pi_act=0", ALL_CHECKS, "--apptag=0x77"]),
        ),
        (2, "sep8-act", with(&["--pi_act=1", ALL_CHECKS])),
        (
            2,
            "sep8-host",
            with(&["--pi_act=0", ALL_CHECKS, "--md_per_io_size=128"]),
        ),
        (3, "ext16-act", with(&["--pi_act=1", ALL_CHECKS])),
        (3, "ext16-host", with(&["--pi_act=0", ALL_CHECKS])),
        (
            4,
            "sep16-host",
            with(&["--pi_act=0", NO_REF, "--apptag_mask=0xff00"]),
        ),
        (5, "ext64-host", with(&["--pi_act=0", NO_REF])),
        (6, "sep64-act", with(&["--pi_act=1", NO_REF])),
        (7, "sep16-nopi", with(&["--md_per_io_size=4096"])),
    ];
    for (nsid, name, args) in runs {
        fio_ok(name, *nsid, args);
    }
    // The PI the engine generated (pi_act=0 above) passes the controller's checks on reads
    // with PRACT, which strips it: the data verifies again.
    for (nsid, name) in [(1u32, "ext8-host"), (3, "ext16-host"), (2, "sep8-host")] {
        let mut args = with(&["--pi_act=1", ALL_CHECKS, "--verify_only=1"]);
        if nsid == 1 {
            args.push("--apptag=0x77");
        }
        fio_ok(name, nsid, &args);
    }
    assert_no_new_dmar_faults(&faults_before);
}

#[test]
fn combinations_that_cant_work_are_refused_before_any_io() {
    if !guest::in_guest("guest_pi_fio::combinations_that_cant_work_are_refused_before_any_io") {
        return;
    }
    fio_refused(
        "small-md",
        2,
        &with(&["--md_per_io_size=64"]),
        "md_per_io_size=64 is too small",
    );
    fio_refused(
        "type3-ref",
        5,
        &with(&[ALL_CHECKS]),
        "PI type 3, which has no reference tag",
    );
    fio_refused(
        "nopi-act",
        7,
        &with(&["--pi_act=1"]),
        "no protection information",
    );
    fio_refused(
        "bad-chk",
        1,
        &with(&["--pi_chk=GUARD,CRC"]),
        "unknown check 'CRC'",
    );
}
