//! Scenario `multipath` (in the QEMU guest): the command line on a subsystem of two
//! controllers sharing two namespaces. `vfnvme list` shows one subsystem, both controllers,
//! a head for each namespace with two paths (QEMU 7.2 has no ANA: every path optimized);
//! `vfnvme perf --head A+B` opens both in one VFIO container and spreads the I/O by policy.

use vfnvme_tests::guest;
use vfnvme_tests::vfnvme_cli::{fails, ok};

fn json(args: &[&str]) -> serde_json::Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("vfnvme {args:?}: not JSON ({e}): {out}"))
}

#[test]
fn list_shows_the_subsystem_heads_and_paths() {
    if !guest::in_guest("guest_multipath_cli::list_shows_the_subsystem_heads_and_paths") {
        return;
    }
    let devices = guest::vfio_devices();
    assert_eq!(devices.len(), 2, "{devices:?}");
    let nqn = guest::expect_var("VFNVME_EXPECT_SUBNQN");
    let v = json(&["list", "--subsystems", "--json"]);
    let subs = v["subsystems"].as_array().expect("subsystems");
    assert_eq!(subs.len(), 1, "one subsystem: {v}");
    let s = &subs[0];
    assert_eq!(s["nqn"].as_str().map(str::trim), Some(nqn.as_str()), "{s}");
    assert_eq!(s["multipath"], true, "CMIC multi-controller: {s}");
    let ctrls = s["controllers"].as_array().expect("controllers");
    let addrs: Vec<&str> = ctrls.iter().filter_map(|c| c["address"].as_str()).collect();
    assert_eq!(addrs, devices, "{s}");
    assert_ne!(ctrls[0]["cntlid"], ctrls[1]["cntlid"], "{s}");
    assert!(
        ctrls.iter().all(|c| c["ana"] == false),
        "QEMU 7.2 has no ANA: {s}"
    );
    let heads = s["heads"].as_array().expect("heads");
    let expected = guest::expected_namespaces(Some(0x10));
    assert_eq!(heads.len(), expected.len(), "{s}");
    for (h, exp) in heads.iter().zip(&expected) {
        assert_eq!(h["nsid"], exp.nsid, "{h}");
        assert_eq!(h["size_bytes"], exp.blocks * u64::from(exp.lba_size), "{h}");
        assert_ne!(h["unique_id"].as_str().unwrap_or("unidentified"), "", "{h}");
        assert!(
            !h["unique_id"]
                .as_str()
                .unwrap_or("")
                .starts_with("unidentified"),
            "a shared namespace has an identifier: {h}"
        );
        let paths = h["paths"].as_array().expect("paths");
        assert_eq!(paths.len(), 2, "{h}");
        for (p, addr) in paths.iter().zip(&devices) {
            assert_eq!(p["controller"], addr.as_str(), "{p}");
            assert!(p["ana_state"].is_null(), "{p}");
            assert_eq!(p["state"], "optimized", "{p}");
        }
    }
    assert!(
        s["warnings"].as_array().is_some_and(|w| w.is_empty()),
        "{s}"
    );

    let t = ok(&["list"]);
    assert_eq!(t.matches("head ns ").count(), 2, "{t}");
    assert_eq!(t.matches("no ANA -> optimized").count(), 4, "{t}");
    let t = ok(&["list", "--subsystems"]);
    assert!(t.contains("(2 controllers, multipath)"), "{t}");
}

#[test]
fn perf_on_the_head_spreads_io_by_policy() {
    if !guest::in_guest("guest_multipath_cli::perf_on_the_head_spreads_io_by_policy") {
        return;
    }
    let devices = guest::vfio_devices();
    let head = devices.join("+");
    let n: u64 = 2000;
    let run = |policy: &str, nsid: &str| {
        let v = json(&[
            "perf",
            "--head",
            &head,
            "--nsid",
            nsid,
            "--policy",
            policy,
            "--qd",
            "8",
            "--ios",
            "2000",
            "--time",
            "120",
            "--pattern",
            "randrw",
            "--json",
            "-",
        ]);
        assert_eq!(v["errors"], 0, "{v}");
        assert_eq!(v["ios"], n, "{v}");
        let mp = &v["multipath"];
        assert_eq!(mp["policy"], policy, "{v}");
        let counts: Vec<u64> = mp["paths"]
            .as_array()
            .expect("paths")
            .iter()
            .map(|p| p["ios"].as_u64().expect("ios"))
            .collect();
        assert_eq!(counts.iter().sum::<u64>(), n, "{v}");
        assert_eq!(mp["paths"][1]["controller"], devices[1].as_str(), "{v}");
        counts
    };
    let rr = run("round-robin", "1");
    assert!(rr[0].abs_diff(rr[1]) <= 8, "round-robin: {rr:?}");
    let qd = run("queue-depth", "2");
    assert!(qd.iter().all(|&c| c > 0), "queue-depth uses both: {qd:?}");
    assert_eq!(run("numa", "1"), [n, 0], "numa: the first optimized path");

    fails(
        &["perf", "--head", &head, "--nsid", "9", "--time", "1"],
        "namespace 9 has no multipath head",
    );
    fails(
        &["perf", "--head", &format!("{}+{}", devices[0], devices[0])],
        "was given twice",
    );
}
