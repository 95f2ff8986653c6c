//! Instructions per I/O from valgrind's callgrind: this benchmark binary re-run under it with
//! `child_args`, collecting only inside `measured_loop`, split into the model's part (the
//! inclusive cost of [`in_model`](super::in_model)) and the rest (the driver's).

/// Instructions per I/O.
#[derive(Debug, Clone, Copy)]
pub struct PerIo {
    /// Outside the model: the driver (and the benchmark's own loop).
    pub driver: f64,
    /// Inside the model's entry points.
    pub model: f64,
    /// Inside the benchmark's `submit_one` (its submission step, where it has one; 0 if not).
    pub submit: f64,
}

/// Runs this binary under callgrind with `child_args` (which must make it run `ios` I/Os
/// through `measured_loop` and exit); `None` with a message if valgrind is missing or fails.
pub fn callgrind_per_io(tag: &str, child_args: &[String], ios: u64) -> Option<PerIo> {
    let exe = std::env::current_exe().ok()?;
    let dir = std::env::temp_dir().join(format!("vfnvme-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let out = dir.join(format!("callgrind.{tag}"));
    let status = std::process::Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--toggle-collect=*measured_loop*")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .args(child_args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    if !status.success() {
        eprintln!("valgrind failed ({tag}): install valgrind to count instructions");
        return None;
    }
    let annotate = std::process::Command::new("callgrind_annotate")
        .args(["--inclusive=yes", "--threshold=100"])
        .arg(&out)
        .output()
        .ok()?;
    let _ = std::fs::remove_dir_all(&dir);
    let (total, model, submit) = split(&String::from_utf8_lossy(&annotate.stdout))?;
    let n = ios as f64;
    Some(PerIo {
        driver: (total - model) as f64 / n,
        model: model as f64 / n,
        submit: submit as f64 / n,
    })
}

/// The program total, the model's inclusive cost and `submit_one`'s inclusive cost from
/// `callgrind_annotate --inclusive=yes`.
fn split(text: &str) -> Option<(u64, u64, u64)> {
    let cost = |line: &str| -> Option<u64> {
        line.split_whitespace()
            .next()?
            .replace(',', "")
            .parse()
            .ok()
    };
    let (mut total, mut model, mut submit) = (None, 0u64, 0u64);
    for line in text.lines() {
        if line.contains("PROGRAM TOTALS") {
            total = cost(line);
        } else if line.contains("common::marked::in_model [") {
            model += cost(line).unwrap_or(0);
        } else if line.contains("::submit_one [") {
            submit += cost(line).unwrap_or(0);
        }
    }
    Some((total?, model, submit))
}
