//! Progress of long admin operations on standard error, while it is a terminal (scripts and
//! logs get only the final line on standard output): a ticker of elapsed seconds for one long
//! command (Format NVM), and a fraction done (firmware download bytes, sanitize progress).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Prints `what: N s` once a second until dropped (nothing when stderr is not a terminal).
pub struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    /// Starts the ticker for `what`.
    pub fn start(what: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::io::stderr().is_terminal().then(|| {
            let (stop, what) = (stop.clone(), what.to_string());
            std::thread::spawn(move || {
                let start = Instant::now();
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(200));
                    let s = start.elapsed().as_secs();
                    let _ = write!(std::io::stderr(), "\r{what}: {s} s");
                }
                let _ = writeln!(std::io::stderr());
            })
        });
        Ticker { stop, thread }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `done` of `total` `unit`s, as a progress line (`\r`-rewritten on a terminal).
pub fn fraction(what: &str, done: usize, total: usize, unit: &str) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let pct = (done as u128 * 100) / (total.max(1) as u128);
    let end = if done >= total { "\n" } else { "" };
    let _ = write!(
        std::io::stderr(),
        "\r{what}: {done}/{total} {unit} ({pct}%){end}"
    );
}
