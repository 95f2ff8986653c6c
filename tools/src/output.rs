//! Writing to standard output without panicking when it is closed (e.g. `vfnvme list | head`):
//! `println!` panics on a broken pipe, these ignore write errors.

use std::io::Write;

/// Writes `text` and a newline to standard output, ignoring write errors.
pub fn line(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Writes `text` to standard output as is, ignoring write errors.
pub fn text(text: &str) {
    let _ = write!(std::io::stdout().lock(), "{text}");
}

/// `println!` that ignores a closed standard output.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::line(&format!($($arg)*))
    };
}
pub(crate) use say;
