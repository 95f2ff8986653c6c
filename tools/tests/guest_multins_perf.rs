//! Scenario `multins`: `vfnvme perf` on QEMU's NVMe controller with two namespaces, threads
//! pinned to both vCPUs, the percentile list, transport statistics and a fixed I/O count, all
//! checked in the JSON report.

use std::process::Command;

fn in_guest(test: &str) -> bool {
    if std::env::var_os("VFNVME_GUEST").is_none() {
        println!("SKIPPED (host): {test} runs in the guest (scripts/test-all.sh multins_perf)");
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

#[test]
fn perf_two_namespaces_two_cores_percentiles_and_transport_stats() {
    if !in_guest(
        "guest_multins_perf::perf_two_namespaces_two_cores_percentiles_and_transport_stats",
    ) {
        return;
    }
    const IOS: u64 = 2000;
    let bdf = bdf();
    let args = [
        "perf",
        "--device",
        &bdf,
        "--nsid",
        "1",
        "--nsid",
        "2",
        "--cpus",
        "0,1",
        "--qd",
        "4",
        "--io-size",
        "4k",
        "--time",
        "60",
        "--ios",
        "2000",
        "-L",
        "--transport-stats",
        "--json",
        "-",
    ];
    let o = Command::new(env!("CARGO_BIN_EXE_vfnvme"))
        .args(args)
        .output()
        .expect("run vfnvme");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    println!(
        "$ vfnvme {}\n{out}{err}(status {:?})",
        args.join(" "),
        o.status.code()
    );
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is JSON");
    // Two namespaces × two threads, thread i on core i.
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "{v}");
    let mut seen: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| (r["nsid"].as_u64().unwrap(), r["cpu"].as_u64().unwrap()))
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, [(1, 0), (1, 1), (2, 0), (2, 1)], "{v}");
    // Each queue pair did exactly --ios I/Os, and the Total is their sum.
    for r in rows {
        assert_eq!(r["ios"], IOS, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
        assert_eq!(r["percentiles"].as_array().map(Vec::len), Some(15), "{r}");
    }
    assert_eq!(v["total"]["ios"], 4 * IOS, "{v}");
    assert_eq!(v["ios"], 4 * IOS, "{v}");
    let iops_sum: f64 = rows.iter().map(|r| r["iops"].as_f64().unwrap()).sum();
    let total = v["total"]["iops"].as_f64().unwrap();
    assert!(
        (iops_sum - total).abs() <= total * 1e-9,
        "{iops_sum} vs {total}"
    );
    // The percentiles climb, and p50 lies between min and max.
    let p = v["percentiles"].as_array().expect("percentiles");
    assert_eq!(p.len(), 15);
    let ns: Vec<f64> = p.iter().map(|e| e["ns"].as_f64().unwrap()).collect();
    assert!(ns.windows(2).all(|w| w[0] <= w[1]), "{ns:?}");
    assert_eq!(p[14]["percentile"], 99.99999);
    // Transport statistics: every submitted I/O completed, on its own queue pair, and the
    // doorbells were MMIO writes (shadow doorbells are off by default).
    let t = v["transport_stats"].as_array().expect("transport_stats");
    assert_eq!(t.len(), 4);
    let mut qids: Vec<u64> = t.iter().map(|q| q["qid"].as_u64().unwrap()).collect();
    qids.sort_unstable();
    qids.dedup();
    assert_eq!(qids.len(), 4, "{v}");
    for q in t {
        assert_eq!(q["completions"], IOS, "{q}");
        assert_eq!(q["submitted_requests"], IOS, "{q}");
        assert_eq!(q["queued_requests"], 0, "{q}");
        let polls = q["polls"].as_u64().unwrap();
        assert!(polls >= q["idle_polls"].as_u64().unwrap(), "{q}");
        let sq = q["sq_mmio_doorbell_updates"].as_u64().unwrap();
        assert!((1..=IOS).contains(&sq), "{q}");
        assert_eq!(q["sq_shadow_doorbell_updates"], 0, "{q}");
    }
    assert!(v["clock"].as_str().unwrap().contains("clocksource"), "{v}");
}
