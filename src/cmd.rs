//! Running an external command (`gh`, `git`) with a deadline.
//!
//! The child gets its own process group so that a timeout kills everything it started
//! (gh spawns helpers; git spawns ssh and hooks), not just the direct child. Output is
//! drained on threads so a chatty child can never block on a full pipe, and the deadline
//! covers those pipes too: a helper left running in the background cannot hold a call open.

use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

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

/// What the threads watching one child report.
enum Event {
    Exited(std::io::Result<ExitStatus>),
    /// One of the two output pipes reached end of file.
    Eof,
}

/// Runs `argv` to completion or until `timeout`, whichever comes first. A non-zero exit is
/// not an error here: callers classify it from the status and stderr.
///
/// The deadline covers the output pipes too: a child that exits but leaves a background
/// process holding stdout or stderr (`helper & exit 0`) would otherwise keep the readers
/// waiting for that process. At the deadline the whole process group is killed; a child
/// that had already exited keeps its status, returned with the output read so far.
pub fn run(argv: &Argv, timeout: Duration, opts: &RunOpts) -> Result<Output, RunError> {
    let deadline = crate::timeutil::deadline(Instant::now(), timeout);
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
    let (tx, rx) = mpsc::channel();
    let out = drain(child.stdout.take(), tx.clone());
    let err = drain(child.stderr.take(), tx.clone());
    thread::spawn(move || {
        let _ = tx.send(Event::Exited(child.wait()));
    });

    let mut status = None;
    let mut open_pipes = 2;
    while status.is_none() || open_pipes > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Event::Exited(s)) => status = Some(s),
            Ok(Event::Eof) => open_pipes -= 1,
            Err(_) => break,
        }
    }
    let timed_out = status.is_none();
    if timed_out || open_pipes > 0 {
        let _ = killpg(pgid, Signal::SIGKILL);
        // The kill closes the pipes of everything left in the group: take what is still
        // buffered, but never wait on a holder that escaped the group.
        let grace = Instant::now() + PIPE_GRACE;
        while status.is_none() || open_pipes > 0 {
            let left = if status.is_none() {
                // Reaping the killed child is prompt; it must be reaped all the same.
                Duration::MAX
            } else {
                grace.saturating_duration_since(Instant::now())
            };
            match rx.recv_timeout(left) {
                Ok(Event::Exited(s)) => status = Some(s),
                Ok(Event::Eof) => open_pipes -= 1,
                Err(_) => break,
            }
        }
    }
    let stdout = take(&out);
    let stderr = take(&err);
    if timed_out {
        return Err(RunError::Timeout {
            argv: argv.clone(),
            timeout,
            stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
        });
    }
    let status = status
        .unwrap_or_else(|| Err(std::io::Error::other("the waiter thread ended")))
        .map_err(|source| RunError::Spawn {
            argv: argv.clone(),
            source,
        })?;
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// How long the output of a killed group is still collected.
const PIPE_GRACE: Duration = Duration::from_millis(200);

type Buffer = Arc<Mutex<Vec<u8>>>;

/// Reads `pipe` to its end on a thread, into a buffer that can be taken at any time.
fn drain<R: Read + Send + 'static>(pipe: Option<R>, tx: mpsc::Sender<Event>) -> Buffer {
    let buf: Buffer = Arc::default();
    let sink = Arc::clone(&buf);
    thread::spawn(move || {
        if let Some(mut p) = pipe {
            let mut chunk = [0u8; 8192];
            loop {
                match p.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => lock(&sink).extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        let _ = tx.send(Event::Eof);
    });
    buf
}

fn lock(buf: &Buffer) -> std::sync::MutexGuard<'_, Vec<u8>> {
    buf.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn take(buf: &Buffer) -> Vec<u8> {
    std::mem::take(&mut *lock(buf))
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

    /// The pid a script wrote to `file`, waiting for the write with a deadline.
    fn pid_from(file: &std::path::Path) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
            assert!(
                Instant::now() < deadline,
                "{} never written",
                file.display()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `pid` is gone (or at most an unreaped zombie of init).
    fn assert_gone(pid: i32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while crate::pidfile::process_start_time(pid).is_some() {
            assert!(Instant::now() < deadline, "process {pid} survived");
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// A script that starts a background `sleep` holding the pipes and records its pid
    /// (written to a temp name and renamed, so a reader never sees half of it).
    fn with_background_sleep(pidf: &std::path::Path, then: &str) -> Argv {
        let p = pidf.display();
        let script = format!("sleep 1000 & echo $! > {p}.tmp; mv {p}.tmp {p}; {then}");
        Argv::new("sh", ["-c", script.as_str()])
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidf = dir.path().join("grandchild");
        let argv = with_background_sleep(&pidf, "wait");
        let err = run(&argv, Duration::from_secs(2), &RunOpts::default()).unwrap_err();
        assert!(matches!(err, RunError::Timeout { .. }), "{err}");
        assert_gone(pid_from(&pidf));
    }

    #[test]
    fn a_background_process_holding_the_pipes_does_not_outlast_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let pidf = dir.path().join("grandchild");
        let argv = with_background_sleep(&pidf, "echo before; exit 0");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(run(&argv, Duration::from_secs(1), &RunOpts::default()));
        });
        let gc = pid_from(&pidf);
        let Ok(result) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = nix::sys::signal::kill(Pid::from_raw(gc), Signal::SIGKILL);
            panic!("run waited for the background process holding its pipes");
        };
        // The direct child finished: its status and the output read so far are the result.
        let o = result.unwrap();
        assert!(o.status.success());
        assert_eq!(o.stdout_str(), "before\n");
        assert_gone(gc);
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
