//! The commands' standard output. A reader that goes away (`afk-supervisor list | head -1`)
//! ends the output, never the command: what is left to print is dropped and the command
//! ends with its own code, as `logs` and `status` do. `println!` would panic there (exit
//! 101, `failed printing to stdout: Broken pipe`), since Rust ignores SIGPIPE. Any other
//! failed write (a full disk under a redirect) is said once at the end, and fails the
//! command.

use std::fmt;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The reader went away: nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// The first write that failed otherwise.
static FAILED: Mutex<Option<String>> = Mutex::new(None);

/// Writes `args` to stdout unless its reader went away.
pub fn write(args: fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        note(e);
    }
}

fn note(e: std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CLOSED.store(true, Ordering::Relaxed);
        return;
    }
    if let Ok(mut first) = FAILED.lock() {
        first.get_or_insert_with(|| e.to_string());
    }
}

/// At the end of a command: what is buffered is written, and a write that failed for
/// another reason than a closed pipe is the command's failure.
pub fn finish() -> Result<(), String> {
    if !CLOSED.load(Ordering::Relaxed)
        && let Err(e) = std::io::stdout().lock().flush()
    {
        note(e);
    }
    match FAILED.lock().ok().and_then(|mut f| f.take()) {
        Some(e) => Err(format!("stdout: {e}")),
        None => Ok(()),
    }
}

/// `println!` for the commands ([`write`]).
macro_rules! outln {
    () => {
        $crate::cli::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for the commands ([`write`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!($($arg)*))
    };
}
