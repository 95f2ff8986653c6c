//! Scenario `noiommu` (a guest without an IOMMU), the `vfnvme` binary itself:
//! - without `--no-iommu`, every command that opens a controller refuses with the opt-in line
//!   (how to opt in, what it risks), first while the controllers are on the kernel's nvme
//!   driver (`setup` too, and nothing changes), then once they are on uio_pci_generic;
//! - `setup --no-iommu` binds both to uio_pci_generic (one warning);
//! - `identify`/`list` with `--no-iommu` name the mode; `perf --no-iommu` on one controller and on
//!   the multipath head of both (round-robin: each path gets half the I/Os).
//!
//! The first test of the scenario's shared boot: the later ones find the controllers bound.

use vfnvme_tests::guest;
use vfnvme_tests::guest_noiommu::{self as noiommu, OPT_IN, RISK, UIO};
use vfnvme_tests::vfnvme_cli::{fails, ok, run};

fn json(args: &[&str]) -> serde_json::Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("vfnvme {args:?}: not JSON ({e}): {out}"))
}

/// Every command that opens a controller, on `a` (and the head `a+b`), refused with the opt-in
/// line and the risk, without a panic.
fn all_refuse(a: &str, b: &str) {
    let head = format!("{a}+{b}");
    let commands: Vec<Vec<&str>> = vec![
        vec!["identify", a],
        vec!["id-ctrl", a],
        vec!["id-ns", a, "-n", "1"],
        vec!["smart-log", a],
        vec!["get-feature", a, "-f", "number-of-queues"],
        vec!["list-ns", a],
        vec!["reset", a],
        vec!["perf", "--device", a, "--time", "1"],
        vec!["perf", "--head", &head, "--nsid", "1", "--time", "1"],
    ];
    for args in commands {
        let r = run(&args);
        assert_eq!(r.code, 1, "vfnvme {args:?}: expected a refusal: {r:?}");
        assert!(
            r.err.contains(OPT_IN),
            "vfnvme {args:?}: no opt-in line: {}",
            r.err
        );
        assert!(r.err.contains(RISK), "vfnvme {args:?}: no risk: {}", r.err);
        assert!(!r.err.contains("panicked"), "vfnvme {args:?}: {}", r.err);
    }
}

#[test]
fn refused_without_the_flag_then_bound_to_uio_and_measured_with_it() {
    if !guest::in_guest(
        "guest_noiommu_cli::refused_without_the_flag_then_bound_to_uio_and_measured_with_it",
    ) {
        return;
    }
    noiommu::assert_no_iommu();
    let devices = noiommu::devices();
    assert_eq!(devices.len(), 2);
    let (a, b) = (devices[0].as_str(), devices[1].as_str());

    if devices
        .iter()
        .all(|d| noiommu::driver_of(d).as_deref() == Some("nvme"))
    {
        // On the kernel's driver: setup without the flag refuses and leaves it there.
        fails(&["setup", a], OPT_IN);
        fails(&["setup", a], "the IOMMU is off");
        assert_eq!(noiommu::driver_of(a).as_deref(), Some("nvme"));
        all_refuse(a, b);
        assert_eq!(noiommu::driver_of(a).as_deref(), Some("nvme"));
        // --dry-run says what it would do and does nothing.
        let r = run(&["setup", "--no-iommu", "--dry-run", a]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.out.contains("would bind it to uio_pci_generic"), "{r:?}");
        assert_eq!(noiommu::driver_of(a).as_deref(), Some("nvme"));
    } else {
        eprintln!("note: the controllers were bound before this test: the nvme-driver refusals are skipped");
    }

    // setup --no-iommu binds both (one warning per process).
    for d in [a, b] {
        if noiommu::driver_of(d).as_deref() == Some(UIO) {
            continue;
        }
        let r = run(&["setup", "--no-iommu", d]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(
            r.out.contains("binding to uio_pci_generic (was nvme)"),
            "{r:?}"
        );
        assert_eq!(r.err.matches("WARNING: no-IOMMU mode").count(), 1, "{r:?}");
        assert_eq!(noiommu::driver_of(d).as_deref(), Some(UIO), "{d}");
    }
    let r = run(&["setup", "--no-iommu", a]);
    assert!(
        r.code == 0 && r.out.contains("already on uio_pci_generic"),
        "{r:?}"
    );

    // On uio_pci_generic, without the flag: still refused, with the same line.
    all_refuse(a, b);

    // With it: the mode is named.
    let text = ok(&["--no-iommu", "identify", b]);
    assert!(
        text.contains("DMA mode no-iommu (uio_pci_generic)"),
        "{text}"
    );
    let v = json(&["identify", "--no-iommu", b, "--json"]);
    assert_eq!(v["mode"], "no-iommu (uio_pci_generic)", "{v}");
    assert_eq!(
        v["serial"].as_str().map(str::trim),
        Some("VFNVME-NOIOMMU"),
        "{v}"
    );
    let list = ok(&["list", "--no-iommu"]);
    assert!(list.contains("no-iommu (uio_pci_generic)"), "{list}");

    // perf on one controller: random reads and writes, exactly the I/Os asked, no error.
    let n = 3000u64;
    let v = json(&[
        "perf",
        "--no-iommu",
        "--device",
        b,
        "--qd",
        "32",
        "--io-size",
        "4k",
        "--pattern",
        "randrw",
        "--ios",
        "3000",
        "--time",
        "120",
        "--json",
        "-",
    ]);
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["ios"], n, "{v}");
    println!(
        "NOIOMMU-PERF randrw QD 32 4 KiB on {b}: {} IOPS",
        v["iops"].as_f64().unwrap_or(0.0).round()
    );

    // perf on the multipath head of both controllers: one physical pool, both paths used.
    let head = format!("{a}+{b}");
    let v = json(&[
        "perf",
        "--no-iommu",
        "--head",
        &head,
        "--nsid",
        "2",
        "--policy",
        "round-robin",
        "--qd",
        "8",
        "--pattern",
        "randrw",
        "--ios",
        "2000",
        "--time",
        "120",
        "--json",
        "-",
    ]);
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["ios"], 2000, "{v}");
    let counts: Vec<u64> = v["multipath"]["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| p["ios"].as_u64().expect("ios"))
        .collect();
    assert_eq!(counts.len(), 2, "{v}");
    assert_eq!(counts.iter().sum::<u64>(), 2000, "{v}");
    assert!(
        counts[0].abs_diff(counts[1]) <= 8,
        "round-robin: {counts:?}"
    );

    // The processes gave the controllers back bound as they were.
    for d in [a, b] {
        assert_eq!(
            noiommu::driver_of(d).as_deref(),
            Some(UIO),
            "{d} stays bound"
        );
    }
}
