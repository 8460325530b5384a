//! Running an external command (`gh`, `git`) with a deadline.
//!
//! The child gets its own process group so that a timeout kills everything it started
//! (gh spawns helpers; git spawns ssh and hooks), not just the direct child. Output is
//! drained on threads so a chatty child can never block on a full pipe.

use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A command line, kept as data so errors can name it exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argv {
    pub program: OsString,
    pub args: Vec<OsString>,
}

impl Argv {
    pub fn new<I, S>(program: impl Into<OsString>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Argv {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }
}

impl fmt::Display for Argv {
    /// Shell-like rendering for messages; never executed through a shell.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", quote(&self.program.to_string_lossy()))?;
        for a in &self.args {
            write!(f, " {}", quote(&a.to_string_lossy()))?;
        }
        Ok(())
    }
}

fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+%#".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The finished run of a command.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_string()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("`{argv}` could not start: {source}")]
    Spawn { argv: Argv, source: std::io::Error },
    #[error("`{argv}` timed out after {}s and was killed", timeout.as_secs_f64())]
    Timeout {
        argv: Argv,
        timeout: Duration,
        stderr: String,
    },
}

/// Options for one run.
#[derive(Debug, Clone, Default)]
pub struct RunOpts {
    pub cwd: Option<PathBuf>,
    pub env: Vec<(OsString, OsString)>,
    pub stdin: Option<Vec<u8>>,
}

/// Runs `argv` to completion or until `timeout`, whichever comes first. A non-zero exit is
/// not an error here: callers classify it from the status and stderr.
pub fn run(argv: &Argv, timeout: Duration, opts: &RunOpts) -> Result<Output, RunError> {
    let mut cmd = Command::new(&argv.program);
    cmd.args(&argv.args)
        .stdin(if opts.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(cwd) = &opts.cwd {
        cmd.current_dir(cwd);
    }
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|source| RunError::Spawn {
        argv: argv.clone(),
        source,
    })?;
    let pgid = Pid::from_raw(child.id() as i32);

    if let (Some(input), Some(mut stdin)) = (opts.stdin.clone(), child.stdin.take()) {
        thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(&input);
        });
    }
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());

    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send(());
        status
    });
    let timed_out = rx.recv_timeout(timeout).is_err();
    if timed_out {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    let status = waiter
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("waiter panicked")));
    // A grandchild may still hold the pipes open; the group kill above closes them on timeout.
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if timed_out {
        return Err(RunError::Timeout {
            argv: argv.clone(),
            timeout,
            stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
        });
    }
    let status = status.map_err(|source| RunError::Spawn {
        argv: argv.clone(),
        source,
    })?;
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_status() {
        let argv = Argv::new("sh", ["-c", "echo out; echo err >&2; exit 3"]);
        let o = run(&argv, Duration::from_secs(10), &RunOpts::default()).unwrap();
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(o.stdout_str(), "out\n");
        assert_eq!(o.stderr_str(), "err");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidf = dir.path().join("grandchild");
        let script = format!("sleep 30 & echo $! > {}; wait", pidf.display());
        let argv = Argv::new("sh", ["-c", script.as_str()]);
        let err = run(&argv, Duration::from_millis(300), &RunOpts::default()).unwrap_err();
        assert!(matches!(err, RunError::Timeout { .. }), "{err}");
        let gc: i32 = std::fs::read_to_string(&pidf)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild was killed with the group; it is gone or at most an unreaped zombie
        // of init, never still sleeping.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while crate::pidfile::process_start_time(gc).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "grandchild {gc} survived the timeout"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn spawn_failure_names_the_command() {
        let argv = Argv::new("/nonexistent/prog", ["a b"]);
        let err = run(&argv, Duration::from_secs(1), &RunOpts::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("`/nonexistent/prog 'a b'` could not start"),
            "{err}"
        );
    }
}
