//! Runs QEMU, streams the guest console, finds the exit marker, enforces the timeout.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::init_script::parse_marker;

/// Lines of console kept for the report after a timeout or crash.
pub const TAIL_LINES: usize = 200;

/// How long QEMU may take to exit after the guest reported its status.
const POWEROFF_GRACE: Duration = Duration::from_secs(30);

/// How long a guest may print nothing at all after QEMU starts. The guest's `/init` prints a
/// line as soon as it runs, early in the boot, so silence this long is a boot that hung, not a
/// slow test.
const BOOT_SILENCE: Duration = Duration::from_secs(240);

/// How a guest run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The guest reported the command's exit status.
    Exited(u8),
    /// QEMU ended without the marker: the guest crashed or QEMU failed.
    NoMarker,
    /// The timeout struck; QEMU was killed.
    TimedOut,
    /// Nothing at all came on the console within [`BOOT_SILENCE`] (or the timeout, if
    /// shorter): the boot hung; QEMU was killed.
    NoBoot,
}

/// The result of one run: the outcome plus the console's last lines.
pub struct RunResult {
    /// How it ended.
    pub outcome: Outcome,
    /// The last [`TAIL_LINES`] console lines.
    pub tail: Vec<String>,
}

/// Lowers this thread's timer slack to 1 ns, so that QEMU, started from it, inherits that value.
///
/// QEMU's NVMe device processes a doorbell and posts completions from main-loop timers armed
/// 500 ns ahead; with Linux's default 50 µs timer slack those fire up to 50 µs late, which
/// dominates the emulated device's latency at queue depth 1 for every driver alike.
fn set_low_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        log::warn!(
            "could not lower the timer slack: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Starts `qemu` with `args`, streams its console (if `echo`) and writes it to `log_path`.
///
/// With `low_timer_slack`, QEMU gets a 1 ns timer slack (see [`set_low_timer_slack`]); without,
/// it inherits this thread's (Linux's default is 50 µs), as a QEMU started from a shell would.
pub fn run_guest(
    qemu: &str,
    args: &[String],
    nonce: &str,
    timeout: Duration,
    log_path: &Path,
    echo: bool,
    low_timer_slack: bool,
) -> Result<RunResult> {
    let mut log = File::create(log_path)
        .with_context(|| format!("creating console log {}", log_path.display()))?;
    if low_timer_slack {
        set_low_timer_slack();
    }
    let mut child = Command::new(qemu)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!("starting {qemu}; install it with `apt-get install qemu-system-x86`")
        })?;
    let stdout = child
        .stdout
        .take()
        .context("QEMU's console pipe is missing")?;
    let stderr = child
        .stderr
        .take()
        .context("QEMU's error pipe is missing")?;
    let errors = thread::spawn(move || forward_stderr(stderr, echo));
    let (tx, rx) = mpsc::channel::<String>();
    let reader = thread::spawn(move || {
        let mut lines = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match lines.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&buf);
                    let line = text.trim_end_matches(['\n', '\r']).replace('\r', "");
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });

    let started = Instant::now();
    let mut deadline = started + timeout;
    let boot_deadline = started + BOOT_SILENCE.min(timeout);
    let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES);
    let mut status: Option<u8> = None;
    let mut timed_out = false;
    let mut silent = true;
    let stdout = std::io::stdout();
    loop {
        let now = Instant::now();
        let limit = if silent {
            deadline.min(boot_deadline)
        } else {
            deadline
        };
        if now >= limit {
            timed_out = status.is_none();
            let _ = child.kill();
            break;
        }
        match rx.recv_timeout(limit - now) {
            Ok(line) => {
                silent = false;
                let _ = writeln!(log, "{line}");
                if status.is_none() {
                    if let Some(code) = parse_marker(&line, nonce) {
                        status = Some(code);
                        // The guest powers off next; don't wait long if it hangs doing so.
                        deadline = deadline.min(Instant::now() + POWEROFF_GRACE);
                        continue;
                    }
                }
                if echo {
                    let mut out = stdout.lock();
                    let _ = writeln!(out, "{line}");
                    let _ = out.flush();
                }
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.wait();
    let _ = reader.join();
    let _ = errors.join();
    let outcome = match (timed_out, status) {
        (true, _) if silent => Outcome::NoBoot,
        (true, _) => Outcome::TimedOut,
        (false, Some(code)) => Outcome::Exited(code),
        (false, None) => Outcome::NoMarker,
    };
    Ok(RunResult {
        outcome,
        tail: tail.into(),
    })
}

/// Forwards QEMU's messages to our stderr (if `echo`), less the warning our own `-fw_cfg`
/// option causes.
fn forward_stderr(stderr: impl std::io::Read, echo: bool) {
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        if echo && !line.contains("etc/sercon-port") {
            eprintln!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("vfnvme-console-{tag}-{}.log", std::process::id()))
    }

    /// Runs `sh -c script` as the guest (the console logic only sees a process and its
    /// output), with timer slack lowered, and removes the console log.
    fn run_sh(script: &str, timeout: Duration, tag: &str) -> RunResult {
        let path = log(tag);
        let args = vec!["-c".to_string(), script.to_string()];
        let r = run_guest("sh", &args, "n1", timeout, &path, false, true).unwrap();
        let _ = std::fs::remove_file(path);
        r
    }

    #[test]
    fn marker_gives_status_and_is_stripped() {
        let r = run_sh(
            "echo hello; echo 'VFNVME-GUEST-EXIT nonce=n1 status=7'",
            Duration::from_secs(30),
            "marker",
        );
        assert!(matches!(r.outcome, Outcome::Exited(7)));
        assert_eq!(r.tail, ["hello"]);
    }

    #[test]
    fn missing_marker_and_timeout() {
        let r = run_sh("echo crashed", Duration::from_secs(30), "none");
        assert!(matches!(r.outcome, Outcome::NoMarker));
        // A process that never ends is killed at the deadline.
        let r = run_sh(
            "echo start; exec sleep 60",
            Duration::from_millis(300),
            "none",
        );
        assert!(matches!(r.outcome, Outcome::TimedOut));
        assert_eq!(r.tail, ["start"]);
    }

    #[test]
    fn a_guest_that_prints_nothing_is_a_boot_hang() {
        let r = run_sh("exec sleep 60", Duration::from_millis(300), "silent");
        assert!(matches!(r.outcome, Outcome::NoBoot));
        assert!(r.tail.is_empty());
    }

    /// The timer slack `sh` (standing in for QEMU) runs with, read from /proc.
    fn child_timer_slack(low: bool, tag: &str) -> u64 {
        let args = vec![
            "-c".to_string(),
            "echo slack=$(cat /proc/$$/timerslack_ns); echo 'VFNVME-GUEST-EXIT nonce=n1 status=0'"
                .to_string(),
        ];
        let path = log(tag);
        let r = run_guest(
            "sh",
            &args,
            "n1",
            Duration::from_secs(30),
            &path,
            false,
            low,
        )
        .unwrap();
        let _ = std::fs::remove_file(path);
        let line = r.tail.iter().find(|l| l.starts_with("slack=")).unwrap();
        line["slack=".len()..].parse().unwrap()
    }

    // Each test runs on its own thread, which inherits the harness's slack, not another test's.
    #[test]
    fn qemu_gets_low_timer_slack_only_when_asked() {
        // SAFETY: PR_GET_TIMERSLACK takes no pointer and returns this thread's slack.
        let ours = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        assert!(ours > 1, "this thread's slack is {ours}");
        assert_eq!(child_timer_slack(false, "slack-default"), ours as u64);
        assert_eq!(child_timer_slack(true, "slack-low"), 1);
    }
}
