//! Helpers of the guest tests that run fio with the vfnvme engine.

use serde_json::Value;
use std::path::Path;

/// The fio engine's path, from `VFNVME_FIO_ENGINE` (set by `scripts/test-all.sh` for guest
/// tests named *fio*).
pub fn engine() -> String {
    let path = std::env::var("VFNVME_FIO_ENGINE").unwrap_or_else(|_| {
        panic!(
            "VFNVME_FIO_ENGINE is not set: build the engine with ffi/fio/build.sh and pass its \
             path (scripts/test-all.sh does both for guest tests named *fio*)"
        )
    });
    assert!(
        Path::new(&path).is_file(),
        "VFNVME_FIO_ENGINE={path} does not exist: run ffi/fio/build.sh"
    );
    path
}

/// The engine's `I/Os per path:` counts, by controller name.
pub fn per_path(stderr: &str) -> Vec<(String, u64)> {
    let line = stderr
        .lines()
        .find(|l| l.contains("I/Os per path:"))
        .unwrap_or_else(|| panic!("no per-path line from the engine:\n{stderr}"));
    let rest = &line[line.find("I/Os per path:").unwrap() + "I/Os per path:".len()..];
    let rest = rest.split(" (").next().unwrap_or("");
    rest.split_whitespace()
        .map(|kv| {
            let (k, v) = kv
                .rsplit_once('=')
                .unwrap_or_else(|| panic!("per-path item {kv:?}"));
            (k.to_string(), v.parse().expect("a count"))
        })
        .collect()
}

/// The number at `j[a]` or `j[a][b]` of fio's JSON.
pub fn num(j: &Value, a: &str, b: Option<&str>) -> u64 {
    let v = match b {
        Some(b) => &j[a][b],
        None => &j[a],
    };
    v.as_u64()
        .unwrap_or_else(|| panic!("no {a}.{b:?} in fio's JSON: {j}"))
}
