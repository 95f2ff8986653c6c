//! The `vfnvme` binary's argument parsing and validation, and `perf --model` end to end.
//! Bad input must end with a clear message and exit status 1 or 2, never a panic (101).

use std::process::{Command, Output};

fn vfnvme(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vfnvme"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run vfnvme")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `args`, expects failure with `status` and `needle` in stderr.
fn fails_with(args: &[&str], status: i32, needle: &str) {
    let o = vfnvme(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(status), "{args:?}: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: expected {needle:?} in: {err}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("vfnvme-cli-{}-{name}", std::process::id()))
}

#[test]
fn perf_model_short_run_reports_iops_and_json() {
    let json = temp_path("perf.json");
    let o = vfnvme(&[
        "perf",
        "--model",
        "--qd",
        "8",
        "--time",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(out.contains("IOPS") && out.contains("p99"), "{out}");
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_file(&json);
    let v: serde_json::Value = serde_json::from_str(&text).expect("perf JSON parses");
    assert!(v["iops"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["ios"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["qd"], 8);
    assert_eq!(v["io_size"], 4096);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["targets"][0], "model");
    let lat = &v["latency_ns"];
    assert!(lat["p50"].as_u64().unwrap() > 0, "{v}");
    assert!(lat["p99"].as_u64() >= lat["p50"].as_u64(), "{v}");
    assert!(lat["max"].as_u64() >= lat["p99_9"].as_u64(), "{v}");
}

#[test]
fn perf_model_mixed_writes_and_threads() {
    let o = vfnvme(&[
        "perf",
        "--model",
        "--qd",
        "4",
        "--time",
        "1",
        "--threads",
        "2",
        "--pattern",
        "randrw",
        "--rwmix-read",
        "50",
        "--io-size",
        "16k",
        "--json",
        "-",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    // With --json -, standard output is only the JSON; the text report goes to stderr.
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is JSON");
    assert!(stderr(&o).contains("IOPS"), "{}", stderr(&o));
    assert_eq!(v["queue_pairs"], 2);
    assert_eq!(v["io_size"], 16384);
    assert!(
        v["reads"].as_u64().unwrap() > 0 && v["writes"].as_u64().unwrap() > 0,
        "{v}"
    );
}

#[test]
fn perf_rejects_bad_input_clearly() {
    fails_with(&["perf"], 1, "--device BDF");
    fails_with(&["perf", "--model", "--qd", "0"], 1, "--qd 0");
    fails_with(
        &["perf", "--model", "--qd", "5000", "--time", "1"],
        1,
        "use --qd 1023 or less",
    );
    fails_with(
        &["perf", "--model", "--io-size", "1000"],
        1,
        "multiple of 4096",
    );
    fails_with(&["perf", "--model", "--io-size", "16m"], 1, "8m or less");
    fails_with(&["perf", "--model", "--io-size", "4q"], 2, "not a size");
    fails_with(
        &["perf", "--model", "--nsid", "9"],
        1,
        "namespace 9 is not active",
    );
    fails_with(&["perf", "--model", "--time", "0"], 1, "--time 0");
    fails_with(&["perf", "--model", "--threads", "0"], 1, "--threads 0");
    fails_with(&["perf", "--model", "--threads", "64"], 1, "use --threads");
    fails_with(
        &["perf", "--model", "--rwmix-read", "70"],
        1,
        "only applies to --pattern rw or randrw",
    );
    fails_with(
        &[
            "perf",
            "--model",
            "--pattern",
            "randrw",
            "--rwmix-read",
            "101",
        ],
        1,
        "0 to 100",
    );
    fails_with(
        &["perf", "--model", "--pattern", "sideways"],
        2,
        "invalid value",
    );
    fails_with(
        &["perf", "--model", "--qd", "1024", "--io-size", "1m"],
        1,
        "lower --qd or --io-size",
    );
    fails_with(
        &["perf", "--model", "--device", "0000:00:10.0"],
        2,
        "cannot be used with",
    );
    fails_with(&["perf", "--device", "bogus"], 1, "DDDD:BB:DD.F");
    fails_with(&["perf", "--device", "ffff:ff:1f.7"], 1, "no PCI device");
    fails_with(
        &["perf", "--model", "--io-size", "0"],
        1,
        "--io-size 0: an I/O moves",
    );
    fails_with(
        &["perf", "--model", "--time", "18446744073709551615"],
        1,
        "--time 18446744073709551615: that is more than a year",
    );
    fails_with(
        &["perf", "--model", "--ramp", "99999999999"],
        1,
        "--ramp 99999999999",
    );
    fails_with(
        &["perf", "--model", "--lat-sample", "0"],
        1,
        "--lat-sample 0",
    );
}

#[test]
fn a_bad_json_path_fails_before_the_run() {
    let o = vfnvme(&[
        "perf",
        "--model",
        "--time",
        "1",
        "--json",
        "/nonexistent-dir/perf.json",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("opening the JSON report file /nonexistent-dir/perf.json"),
        "{err}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains("IOPS"),
        "the run happened before the failure: {out}"
    );
}

/// Whether process `pid` has a handler for SIGINT (bit 2 of SigCgt in /proc/PID/status).
fn catches_sigint(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << (2 - 1)) != 0)
}

#[test]
fn ctrl_c_on_perf_prints_the_partial_results() {
    use std::process::Stdio;
    let json = temp_path("interrupted.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vfnvme"))
        .args(["perf", "--model", "--qd", "4", "--time", "3600", "--json"])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vfnvme");
    // Wait until the handler is installed (bounded: an old perf without one would run for
    // an hour), then interrupt it as a terminal's Ctrl-C would.
    let start = std::time::Instant::now();
    while !catches_sigint(child.id()) {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("perf installed no SIGINT handler within 60 s");
        }
        assert!(child.try_wait().unwrap().is_none(), "perf ended early");
        std::thread::yield_now();
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success());
    let o = child.wait_with_output().expect("wait for vfnvme");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(
        out.contains("IOPS") && out.contains("interrupted (Ctrl-C)"),
        "{out}"
    );
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_file(&json);
    let v: serde_json::Value = serde_json::from_str(&text).expect("perf JSON parses");
    assert_eq!(v["interrupted"], true, "{v}");
    assert!(v["time_s"].as_f64().unwrap() < 3600.0, "{v}");
}

#[test]
fn a_closed_stdout_is_not_a_panic() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_vfnvme"))
        .args(["perf", "--model", "--qd", "1", "--time", "1", "--json", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vfnvme");
    drop(child.stdout.take()); // the reader goes away before anything is written
    let o = child.wait_with_output().expect("wait for vfnvme");
    assert_ne!(o.status.code(), Some(101), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

#[test]
fn identify_list_and_setup_fail_cleanly() {
    fails_with(&["identify", "nonsense"], 1, "DDDD:BB:DD.F");
    fails_with(&["identify", "ffff:ff:1f.7"], 1, "no PCI device");
    // --model: the controller the admin commands' --model use.
    let o = vfnvme(&["identify", "--model", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("identify JSON");
    let id: serde_json::Value =
        serde_json::from_slice(&vfnvme(&["id-ctrl", "--model", "-o", "json"]).stdout)
            .expect("id-ctrl JSON");
    assert_eq!(
        v["serial"].as_str(),
        id["sn"].as_str().map(str::trim_end),
        "{v}"
    );
    fails_with(&["identify"], 2, "BDF");
    fails_with(&["setup", "--dry-run", "nonsense"], 1, "DDDD:BB:DD.F");
    fails_with(&["setup", "--dry-run", "--reset", "x"], 1, "DDDD:BB:DD.F");
    // `list` works or fails with a message, on any host.
    let o = vfnvme(&["list", "--json"]);
    assert_ne!(o.status.code(), Some(101), "{}", stderr(&o));
    if o.status.success() {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("list JSON parses");
        assert!(
            v["Devices"].is_array() && v["Controllers"].is_array(),
            "{v}"
        );
    }
}

#[test]
fn admin_commands_run_on_the_model_and_check_their_input() {
    let o = vfnvme(&["smart-log", "--model", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("smart-log JSON");
    assert_eq!(v["temperature"], 313);
    let o = vfnvme(&["id-ctrl", "--model", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("id-ctrl JSON");
    assert_eq!(v["sn"], "MODEL0001           ");
    assert_eq!(v["tnvmcap"], "0");
    assert!(v["fguid"].as_str().is_some_and(|g| g.len() == 36), "{v}");
    assert!(v["psds"][0].get("active_scale").is_some(), "{v}");
    fails_with(&["id-ctrl"], 2, "<BDF>");
    fails_with(&["id-ns", "--model", "-n", "0"], 1, "out of range");
    fails_with(
        &["get-feature", "--model", "-f", "0x100"],
        2,
        "out of range",
    );
    let o = vfnvme(&["format", "--model", "-n", "1", "--force"]);
    assert!(
        o.status.success(),
        "--force is --yes, as nvme-cli: {}",
        stderr(&o)
    );
    fails_with(&["id-ctrl", "0000:ff:1f.7"], 1, "0000:ff:1f.7");
}

/// Runs `vfnvme perf --model … --json -` and returns the JSON (stdout) and the text (stderr).
fn perf_json(extra: &[&str]) -> (serde_json::Value, String) {
    let mut args = vec!["perf", "--model", "--json", "-"];
    args.extend_from_slice(extra);
    let o = vfnvme(&args);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{args:?}: {out}\n{}", stderr(&o));
    let v = serde_json::from_str(&out).expect("stdout is JSON");
    (v, stderr(&o))
}

#[test]
fn perf_rows_per_namespace_and_thread_add_up_to_the_total() {
    const IOS: u64 = 3000;
    let (v, text) = perf_json(&[
        "--nsid",
        "1",
        "--nsid",
        "2",
        "--threads",
        "2",
        "--qd",
        "4",
        "--time",
        "60",
        "--ios",
        "3000",
        "-LL",
        "--transport-stats",
    ]);
    let rows = v["rows"].as_array().expect("rows");
    let mut ids: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| (r["nsid"].as_u64().unwrap(), r["thread"].as_u64().unwrap()))
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [(1, 0), (1, 1), (2, 0), (2, 1)], "{v}");
    assert_eq!(v["queue_pairs"], 4);
    // --ios: exactly that many per queue pair; the Total row is the rows' sum.
    for r in rows {
        assert_eq!(r["ios"], IOS, "{r}");
        // -LL: the histogram's counts add up to the row's I/Os (every I/O is timed).
        let h = r["histogram"].as_array().expect("histogram");
        assert_eq!(
            h.iter().map(|b| b["count"].as_u64().unwrap()).sum::<u64>(),
            IOS
        );
        let last = h.last().unwrap()["cumulative_pct"].as_f64().unwrap();
        assert!((last - 100.0).abs() < 1e-6, "{last}");
        assert_eq!(r["percentiles"].as_array().map(Vec::len), Some(15));
        // Transport statistics: completions equal the I/Os.
        assert_eq!(r["transport"]["completions"], IOS, "{r}");
        assert_eq!(r["transport"]["submitted_requests"], IOS, "{r}");
    }
    let sum: u64 = rows.iter().map(|r| r["ios"].as_u64().unwrap()).sum();
    assert_eq!(v["total"]["ios"], sum);
    assert_eq!(v["ios"], 4 * IOS);
    let iops: f64 = rows.iter().map(|r| r["iops"].as_f64().unwrap()).sum();
    let total = v["total"]["iops"].as_f64().unwrap();
    assert!((iops - total).abs() <= 1e-6 * total, "{iops} vs {total}");
    let h = v["histogram"].as_array().expect("histogram of all");
    assert_eq!(
        h.iter().map(|b| b["count"].as_u64().unwrap()).sum::<u64>(),
        4 * IOS
    );
    let p: Vec<f64> = v["percentiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["percentile"].as_f64().unwrap())
        .collect();
    assert_eq!(
        p,
        [
            1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.5, 99.9, 99.99, 99.999,
            99.9999, 99.99999
        ]
    );
    assert_eq!(v["transport_stats"].as_array().map(Vec::len), Some(4));
    // The text: a row per namespace and thread, the Total, -L and -LL sections, transport.
    for needle in [
        "model NSID 2 thread 1",
        "\nTotal ",
        "99.99999%",
        "Range in us",
        "submitted_requests: 3000",
        "clock ",
    ] {
        assert!(text.contains(needle), "no {needle:?} in: {text}");
    }
    assert!(v["clock"].as_str().unwrap().contains("clocksource"), "{v}");
}

#[test]
fn perf_pins_threads_to_the_cores_given() {
    let (v, text) = perf_json(&["--cpus", "0", "--qd", "2", "--time", "60", "--ios", "500"]);
    assert_eq!(v["rows"][0]["cpu"], 0, "{v}");
    // The spdk_nvme_perf-format row names the core it was pinned to.
    assert!(text.contains("model NSID 1 from core  0: "), "{text}");
    fails_with(
        &["perf", "--model", "--cpus", "0,1000"],
        1,
        "core 1000 does not exist or is not available",
    );
    fails_with(&["perf", "--model", "--cpus", "1-0"], 2, "not a core list");
}

#[test]
fn perf_queue_size_small_queues_hold_ios_back() {
    let (v, _) = perf_json(&[
        "--queue-size",
        "4",
        "--qd",
        "8",
        "--time",
        "60",
        "--ios",
        "2000",
        "--transport-stats",
    ]);
    assert_eq!(v["queue_size"], 4);
    assert_eq!(v["ios"], 2000);
    let t = &v["transport_stats"][0];
    assert!(t["queued_requests"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(t["completions"], 2000);
    fails_with(
        &["perf", "--model", "--queue-size", "100000"],
        1,
        "use --queue-size 2 to 1024",
    );
    fails_with(
        &["perf", "--model", "--queue-size", "1"],
        1,
        "--queue-size 1:",
    );
}

#[test]
fn perf_zipf_and_io_count_options_are_checked() {
    let (v, _) = perf_json(&[
        "--zipf", "1.2", "--qd", "4", "--time", "60", "--ios", "1000",
    ]);
    assert_eq!(v["zipf"], 1.2);
    assert_eq!(v["ios"], 1000);
    fails_with(&["perf", "--model", "--zipf", "1"], 1, "--zipf 1:");
    fails_with(
        &["perf", "--model", "--zipf", "0.9", "--pattern", "read"],
        1,
        "random patterns",
    );
    fails_with(&["perf", "--model", "--ios", "0"], 1, "--ios 0");
}

#[test]
fn perf_prints_no_progress_lines_when_piped() {
    let o = vfnvme(&["perf", "--model", "--qd", "4", "--time", "2"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        out.starts_with("=====") && out.contains("\nDevice Information"),
        "{out}"
    );
    assert!(!out.contains(" s] IOPS"), "{out}");
}

#[test]
fn perf_prints_a_line_per_second_on_a_terminal() {
    // util-linux's `script` gives perf a pseudo-terminal as standard output.
    let run = Command::new("script")
        .args([
            "-qec",
            &format!(
                "{} perf --model --qd 4 --time 3",
                env!("CARGO_BIN_EXE_vfnvme")
            ),
            "/dev/null",
        ])
        .output();
    let Ok(o) = run else {
        println!("SKIPPED: no `script` (util-linux) to run perf on a terminal");
        return;
    };
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(" s] IOPS")).collect();
    // About one a second; a loaded host may stretch or merge one.
    assert!((1..=5).contains(&lines.len()), "{out}");
    assert!(
        lines[0].starts_with("[   1 s]") && lines[0].contains("MiB/s"),
        "{out}"
    );
    // The report follows the progress lines.
    assert!(
        out.contains("Device Information") && out.contains("\nTotal "),
        "{out}"
    );
}

/// `vfnvme reset --model`: the controller is reset through the driver and the output says how
/// long it took, the state before and after, and the events; `--json` gives the same as
/// fields. A malformed address fails cleanly.
#[test]
fn reset_on_the_model_reports_time_state_and_events() {
    let o = vfnvme(&["reset", "--model"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("model: controller reset done in "), "{text}");
    assert!(text.contains("after:  CSTS 0x1: RDY=1 CFS=0"), "{text}");
    assert!(text.contains("events: ResetStarted, ResetDone"), "{text}");
    assert!(text.contains("namespaces after the rescan: 2"), "{text}");
    let o = vfnvme(&["reset", "--model", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("reset JSON");
    assert_eq!(v["reset"], "done");
    assert_eq!(v["ready"], true);
    assert_eq!(v["fatal"], false);
    assert_eq!(
        v["events"],
        serde_json::json!(["ResetStarted", "ResetDone"])
    );
    assert!(v["duration_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{v}");
    fails_with(&["reset"], 2, "<BDF>");
    fails_with(&["reset", "not-a-bdf"], 1, "not-a-bdf");
}

fn json_out(args: &[&str]) -> serde_json::Value {
    let o = vfnvme(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

#[test]
fn list_model_shows_one_subsystem_with_heads_paths_and_ana_states() {
    let o = vfnvme(&["list", "--model"]);
    let t = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{t}{}", stderr(&o));
    assert_eq!(t.matches("subsystem ").count(), 1, "{t}");
    assert_eq!(t.matches("head ns ").count(), 2, "{t}");
    assert_eq!(t.matches("    path model:").count(), 4, "{t}");
    assert!(t.contains("ANA group 1  non-optimized"), "{t}");
    assert!(t.contains("ANA group 2  inaccessible"), "{t}");

    let v = json_out(&["list", "--model", "--subsystems", "--json"]);
    let subs = v["subsystems"].as_array().expect("subsystems");
    assert_eq!(subs.len(), 1, "{v}");
    let s = &subs[0];
    assert_eq!(s["nqn"], "nqn.2024-01.io.vfnvme:model-subsystem");
    assert_eq!(s["multipath"], true);
    let ctrls = s["controllers"].as_array().unwrap();
    assert_eq!(ctrls.len(), 2);
    assert_eq!(
        (ctrls[0]["cntlid"].as_u64(), ctrls[1]["cntlid"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(ctrls.iter().all(|c| c["ana"] == true), "{v}");
    let heads = s["heads"].as_array().unwrap();
    assert_eq!(heads.len(), 2, "{v}");
    let want = [
        (1, ["optimized", "non-optimized"]),
        (2, ["inaccessible", "optimized"]),
    ];
    for (h, (nsid, states)) in heads.iter().zip(want) {
        assert_eq!(h["nsid"], nsid, "{h}");
        assert!(
            h["unique_id"].as_str().unwrap().starts_with("nguid:"),
            "{h}"
        );
        assert_eq!(h["size_bytes"], 4096u64 << 28);
        let paths = h["paths"].as_array().unwrap();
        assert_eq!(paths.len(), 2, "{h}");
        for (p, (cntlid, state)) in paths.iter().zip([(1, states[0]), (2, states[1])]) {
            assert_eq!(p["cntlid"], cntlid, "{p}");
            assert_eq!(p["ana_group"], nsid, "{p}");
            assert_eq!(p["ana_state"], state, "{p}");
            assert_eq!(p["state"], state, "{p}");
        }
    }
    assert!(s["warnings"].as_array().unwrap().is_empty());

    // nvme-cli's shape ({"Devices": [...]}, one per namespace), with vfnvme's per-controller
    // view under "Controllers"; -o json is --json.
    let v = json_out(&["list", "--model", "-o", "json"]);
    let d = v["Devices"].as_array().expect("Devices");
    assert_eq!(d.len(), 4, "{v}");
    assert_eq!(d[1]["NameSpace"], 2, "{v}");
    assert_eq!(d[1]["SectorSize"], 4096, "{v}");
    assert_eq!(d[1]["PhysicalSize"], 4096u64 << 28, "{v}");
    assert_eq!(d[1]["MaximumLBA"], 1u64 << 28, "{v}");
    assert_eq!(d[1]["Firmware"], "1.0", "{v}");
    let c = v["Controllers"]
        .as_array()
        .expect("an array of controllers");
    assert_eq!(c.len(), 2);
    assert_eq!(c[1]["namespaces"][0]["ana_state"], "non-optimized");
    assert_eq!(c[0]["namespaces"][1]["anagrpid"], 2);
    assert_eq!(json_out(&["list", "--model", "--json"]), v);

    // list-subsys: nvme-cli's host / subsystems / paths, with the ANA state per path.
    let v = json_out(&["list-subsys", "--model", "-o", "json"]);
    let s = &v[0]["Subsystems"];
    assert_eq!(s.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(s[0]["NQN"], "nqn.2024-01.io.vfnvme:model-subsystem");
    let p = s[0]["Paths"].as_array().expect("Paths");
    assert_eq!(p.len(), 2, "{v}");
    assert_eq!(
        (&p[0]["State"], &p[0]["Transport"]),
        (&"live".into(), &"pcie".into())
    );
    assert_eq!(
        (&p[0]["ANAState"], &p[1]["ANAState"]),
        (&"optimized".into(), &"non-optimized".into())
    );
    let o = vfnvme(&["list-subsys", "--model"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.starts_with("vfnvme-subsys0 - NQN=nqn.2024-01.io.vfnvme:model-subsystem\n\\\n +- "),
        "{t}"
    );
}

/// `perf --model --paths 2 --policy POLICY` for exactly `ios` I/Os: the JSON report.
fn perf_head(policy: &str, ios: u64, extra: &[&str]) -> serde_json::Value {
    let ios = ios.to_string();
    let mut args = vec![
        "perf", "--model", "--paths", "2", "--policy", policy, "--qd", "8", "--ios", &ios,
        "--time", "60", "--json", "-",
    ];
    args.extend_from_slice(extra);
    json_out(&args)
}

/// Per-path I/Os of a report, checking that they add up to every I/O done.
fn per_path(v: &serde_json::Value, policy: &str, total: u64) -> Vec<u64> {
    let mp = &v["multipath"];
    assert_eq!(mp["policy"], policy, "{v}");
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["ios"], total, "{v}");
    let counts: Vec<u64> = mp["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ios"].as_u64().unwrap())
        .collect();
    assert_eq!(counts.len(), 2, "{v}");
    assert_eq!(counts.iter().sum::<u64>(), total, "{v}");
    assert_eq!(mp["total"], total, "{v}");
    counts
}

#[test]
fn perf_on_a_model_head_reports_ios_per_path_by_policy() {
    let n = 4000;
    let rr = per_path(&perf_head("round-robin", n, &[]), "round-robin", n);
    // Round-robin alternates: an even split, to within the queue depth.
    assert!(rr[0].abs_diff(rr[1]) <= 8, "{rr:?}");
    let qd = per_path(&perf_head("queue-depth", n, &[]), "queue-depth", n);
    // Equal paths: the fewest-outstanding rule uses both, neither starves.
    assert!(qd.iter().all(|&c| c >= n / 4), "{qd:?}");
    // One NUMA node (none known): numa sends everything to the first optimized path.
    let numa = per_path(&perf_head("numa", n, &[]), "numa", n);
    assert_eq!(numa, [n, 0]);
    // Two threads, two namespaces: four channels, each its own `n` I/Os.
    let v = perf_head(
        "round-robin",
        1000,
        &["--threads", "2", "--nsid", "1", "--nsid", "2"],
    );
    assert_eq!(v["queue_pairs"], 4, "{v}");
    let rr = per_path(&v, "round-robin", 4000);
    assert!(rr[0].abs_diff(rr[1]) <= 32, "{rr:?}");
    // The text report has the per-path table.
    let o = vfnvme(&[
        "perf",
        "--model",
        "--paths",
        "2",
        "--policy",
        "round-robin",
        "--ios",
        "100",
        "--time",
        "60",
        "--qd",
        "2",
    ]);
    let t = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{t}{}", stderr(&o));
    assert!(t.contains("I/Os per path (policy round-robin"), "{t}");
    assert!(
        t.contains("model:VFNVME-MODEL-1") && t.contains("50.0%"),
        "{t}"
    );
}

#[test]
fn perf_on_a_head_refuses_bad_input_clearly() {
    fails_with(
        &["perf", "--model", "--paths", "2", "--policy", "fastest"],
        2,
        "use numa, round-robin or queue-depth",
    );
    fails_with(
        &["perf", "--model", "--policy", "round-robin"],
        1,
        "applies to a multipath head",
    );
    fails_with(&["perf", "--paths", "2"], 2, "--model");
    fails_with(
        &["perf", "--model", "--paths", "2", "--nsid", "7", "--time", "1"],
        1,
        "namespace 7 has no multipath head in subsystem nqn.2024-01.io.vfnvme:model-subsystem: its heads are 1,2",
    );
    fails_with(
        &["perf", "--model", "--paths", "0"],
        1,
        "1 to 8 controllers",
    );
    fails_with(&["perf", "--head", "nonsense"], 1, "joined by +");
    fails_with(
        &["perf", "--head", "ffff:ff:1f.7+ffff:ff:1f.6"],
        1,
        "no PCI device",
    );
    fails_with(
        &["perf", "--head", "0000:00:10.0", "--model"],
        2,
        "cannot be used",
    );
}
