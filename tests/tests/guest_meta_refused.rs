//! Scenario `meta`: QEMU namespaces formatted with metadata next to plain ones on one controller
//! (ns 2: 512+8 extended, ns 3: 4096+16 separate, ns 4: 512+8 extended with PI type 1; ns 1 and
//! 5 plain). vfnvme reports their format and refuses I/O to them before a command is built, on
//! every submission path; the plain namespaces on the same controller keep working; and the
//! guest's IOMMU logs no DMA fault meanwhile. Without the refusal, a large write to ns 2 makes
//! QEMU read past the PRPs (`DMAR: [DMA Read NO_PASID] ... fault addr 0x0`) and every read of
//! ns 3 sends metadata to MPTR = 0.

use std::path::PathBuf;
use std::process::Command;

use vfnvme::namespace::MetadataFormat;
use vfnvme::queue::Op;
use vfnvme::spec::command::DsmRange;
use vfnvme::{Error, SubmitErrorKind};
use vfnvme_tests::guest_io::{self, Ctrl};
use vfnvme_tests::guest_metadata::{assert_no_new_dmar_faults, dmar_faults, expected_metadata};
use vfnvme_tests::{guest, guest_io::Qpair};

fn assert_refused(kind: &SubmitErrorKind, nsid: u32, md: MetadataFormat, what: &str) {
    match kind {
        SubmitErrorKind::MetadataUnsupported {
            nsid: n,
            metadata: m,
        } if *n == nsid && *m == md => {
            let msg = kind.to_string();
            assert!(
                msg.contains("vfnvme format") && msg.contains("nothing was sent"),
                "{msg}"
            );
        }
        other => panic!("ns {nsid} {what}: expected MetadataUnsupported({md}), got {other:?}"),
    }
}

/// Every way to submit I/O to `nsid` is refused; nothing reaches the controller.
fn every_path_refused(ctrl: &Ctrl, qp: &mut Qpair, nsid: u32, md: MetadataFormat) {
    let ns = guest_io::namespace(ctrl, nsid);
    // 64 KiB: a PRP list, the transfer QEMU ran past before.
    let len = 64 << 10;
    let blocks = (len >> ns.lba_shift()) as u32;
    let buf = ctrl.dma().alloc(len).expect("DMA buffer");
    let e = qp.write(&ns, 0, blocks, buf, 1).unwrap_err();
    assert_refused(&e.kind, nsid, md, "write");
    let e = qp.read(&ns, 8, blocks, e.buffer.unwrap(), 2).unwrap_err();
    assert_refused(&e.kind, nsid, md, "read");
    let buf = e.buffer.unwrap();
    for dir in [Op::Read, Op::Write] {
        // SAFETY: `buf` is DMA memory of this controller and outlives the call, which is
        // refused before a command is built.
        let e = unsafe {
            vfnvme::queue::Request::borrowed(dir, &ns, 0, blocks, buf.span(), 3)
                .and_then(|r| qp.submit(r))
        }
        .unwrap_err();
        assert_refused(&e.kind, nsid, md, "raw submit (C ABI path)");
    }
    assert_refused(&qp.flush(&ns, 4).unwrap_err().kind, nsid, md, "flush");
    let e = qp.write_zeroes(&ns, 0, 8, 5).unwrap_err();
    assert_refused(&e.kind, nsid, md, "write zeroes");
    let r = DsmRange {
        slba: 0,
        blocks: 8,
        ..DsmRange::default()
    };
    let e = qp.deallocate(&ns, &[r], 6).unwrap_err();
    assert_refused(&e.kind, nsid, md, "deallocate");
    match qp.read_sync(&ns, 0, 1, buf) {
        Err(Error::Submit(k)) => assert_refused(&k, nsid, md, "read_sync"),
        other => panic!("ns {nsid} read_sync: {other:?}"),
    }
    assert_eq!(qp.outstanding(), 0);
    assert_eq!(qp.poll(usize::MAX, |_| {}), 0, "nothing was submitted");
}

#[test]
fn metadata_namespaces_are_reported_and_refused_without_dma_faults() {
    if !guest::in_guest(
        "guest_meta_refused::metadata_namespaces_are_reported_and_refused_without_dma_faults",
    ) {
        return;
    }
    let faults_before = dmar_faults();
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let expected = guest::expected_namespaces(None);
    let metadata = expected_metadata();
    assert_eq!(
        metadata.iter().map(|m| m.0).collect::<Vec<_>>(),
        [2, 3, 4],
        "the scenario's metadata namespaces"
    );
    assert_eq!(ctrl.namespaces().len(), expected.len());
    for e in &expected {
        let ns = guest_io::namespace(&ctrl, e.nsid);
        assert_eq!(
            (ns.lba_size(), ns.blocks()),
            (e.lba_size, e.blocks),
            "ns {}: LBA size and block count (QEMU keeps metadata after the data)",
            e.nsid
        );
        let want = metadata
            .iter()
            .find(|m| m.0 == e.nsid)
            .map(|m| m.1)
            .unwrap_or_default();
        assert_eq!(ns.identity().metadata_format(), want, "ns {}", e.nsid);
        assert_eq!(
            ns.io_refused(),
            want != MetadataFormat::default(),
            "ns {}",
            e.nsid
        );
    }

    let mut qp = guest_io::qpair(&ctrl, 64);
    for &(nsid, md) in &metadata {
        every_path_refused(&ctrl, &mut qp, nsid, md);
    }
    // The plain namespaces of the same controller: small, PRP-list and split (MDTS 512 KiB)
    // transfers, verified byte for byte.
    for (nsid, seed) in [(1u32, 0x3e7a_0001u64), (5, 0x3e7a_0005)] {
        let ns = guest_io::namespace(&ctrl, nsid);
        for (lba, len) in [(0u64, 4096usize), (64, 64 << 10), (1024, 1 << 20)] {
            let data = guest_io::random_bytes(len, seed ^ lba);
            guest_io::write_read_verify(&ctrl, &mut qp, &ns, lba, &data);
        }
    }
    drop(qp);
    drop(ctrl);
    assert_no_new_dmar_faults(&faults_before);
}

/// `target/<profile>/vfnvme` next to this test binary (`target/<profile>/deps/`).
fn vfnvme_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("vfnvme"))
        .expect("target folder");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p vfnvme-tools`",
        bin.display()
    );
    bin
}

#[test]
fn perf_runs_on_and_identify_reports_metadata_namespaces() {
    if !guest::in_guest("guest_meta_refused::perf_runs_on_and_identify_reports_metadata_namespaces")
    {
        return;
    }
    let faults_before = dmar_faults();
    let bdf = guest::vfio_devices()[0].clone();
    let bin = vfnvme_bin();
    // perf moves the metadata of these formats (as it is: no PI action or check).
    for nsid in ["2", "3", "4"] {
        let out = Command::new(&bin)
            .args(["perf", &bdf, "--nsid", nsid, "--time", "1", "--qd", "4"])
            .output()
            .expect("running vfnvme perf");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "perf on ns {nsid}: {err}");
    }
    let out = Command::new(&bin)
        .args(["identify", &bdf])
        .output()
        .expect("running vfnvme identify");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("8 B metadata per block (extended LBA)")
            && text.contains("16 B metadata per block (separate buffer)")
            && text.contains("protection information type 1")
            && text.matches("plain I/O refused").count() == 3
            && text.contains(&format!("`vfnvme format {bdf} --nsid 3 --yes`")),
        "{text}"
    );
    assert_no_new_dmar_faults(&faults_before);
}

/// Runs last (libtest orders tests by name; RUST_TEST_THREADS=1): it reformats ns 2.
#[test]
fn vfnvme_format_makes_a_metadata_namespace_usable() {
    if !guest::in_guest("guest_meta_refused::vfnvme_format_makes_a_metadata_namespace_usable") {
        return;
    }
    let faults_before = dmar_faults();
    let bdf = guest::vfio_devices()[0].clone();
    let bin = vfnvme_bin();
    let run = |args: &[&str]| {
        Command::new(&bin)
            .args(args)
            .output()
            .expect("running vfnvme")
    };
    // The command line `vfnvme list` shows for ns 2 is the one that makes it usable.
    let out = run(&["list"]);
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{list}");
    let row = list
        .lines()
        .find(|l| l.trim_start().starts_with("ns 2 "))
        .unwrap_or_else(|| panic!("no row for ns 2 in: {list}"));
    let (_, line) = row
        .split_once("plain I/O refused: metadata 8 ext; reformat with ")
        .unwrap_or_else(|| panic!("ns 2 row without the reformat hint: {row}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..2], ["vfnvme", "format"], "{row}");
    assert!(
        words.contains(&bdf.as_str()) && words.contains(&"--yes"),
        "{row}"
    );
    let without_yes: Vec<&str> = words[1..]
        .iter()
        .copied()
        .filter(|w| *w != "--yes")
        .collect();
    // Without --yes and without a terminal: nvme-cli's 10 s countdown, then the format.
    let out = run(&without_yes);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("Press Ctrl-C within 10 s"),
        "without --yes: the countdown, then the format: {err}"
    );
    let out = run(&words[1..]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("no metadata"), "{text}");
    let ctrl = guest_io::open(&bdf);
    let ns = guest_io::namespace(&ctrl, 2);
    assert!(
        !ns.io_refused(),
        "ns 2 after the format: {}",
        ns.identity().metadata_format()
    );
    assert_eq!(ns.lba_size(), 512);
    let mut qp = guest_io::qpair(&ctrl, 64);
    for (lba, len) in [(0u64, 4096usize), (100, 64 << 10), (1000, 1 << 20)] {
        let data = guest_io::random_bytes(len, 0xf0_0002 ^ lba);
        guest_io::write_read_verify(&ctrl, &mut qp, &ns, lba, &data);
    }
    drop(qp);
    drop(ctrl);
    assert_no_new_dmar_faults(&faults_before);
}
