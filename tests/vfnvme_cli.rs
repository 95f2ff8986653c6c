//! Running the `vfnvme` binary from a guest test: it sits next to the test binaries' `deps/`
//! folder (build it with `cargo build -p vfnvme-tools` first).

use std::path::PathBuf;
use std::process::Command;

/// The `vfnvme` binary of the same build as the running test.
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("vfnvme"))
        .expect("the test binary sits in target/<profile>/deps");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p vfnvme-tools` (same profile as the tests)",
        bin.display()
    );
    bin
}

/// The outcome of one `vfnvme` run.
#[derive(Debug)]
pub struct Run {
    /// Exit status (-1 if killed).
    pub code: i32,
    /// Standard output.
    pub out: String,
    /// Standard error.
    pub err: String,
}

/// Runs `vfnvme ARGS` and prints what it did (the guest log shows every step).
pub fn run(args: &[&str]) -> Run {
    let o = Command::new(binary())
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run vfnvme");
    let r = Run {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
        err: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    println!(
        "$ vfnvme {}\n{}{}[exit {}]",
        args.join(" "),
        r.out,
        r.err,
        r.code
    );
    r
}

/// Runs `vfnvme ARGS`, expects success and returns standard output.
pub fn ok(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "vfnvme {args:?} failed: {}", r.err);
    r.out
}

/// Runs `vfnvme ARGS`, expects exit status 1 (or 2, clap's for a bad argument) with `needle`
/// in standard error.
pub fn fails(args: &[&str], needle: &str) {
    let r = run(args);
    assert!(
        r.code == 1 || r.code == 2,
        "vfnvme {args:?}: expected failure, got {r:?}"
    );
    assert!(
        r.err.contains(needle),
        "vfnvme {args:?}: no {needle:?} in {}",
        r.err
    );
    assert!(
        !r.err.contains("panicked"),
        "vfnvme {args:?} panicked: {}",
        r.err
    );
}
