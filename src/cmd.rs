//! Running an external command (`gh`, `git`) with a deadline.
//!
//! The child gets its own process group so that a timeout kills everything it started
//! (gh spawns helpers; git spawns ssh and hooks), not just the direct child. Output is
//! drained on threads so a chatty child can never block on a full pipe, and the deadline
//! covers those pipes too: a helper left running in the background cannot hold a call open.

use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use nix::sys::signal::Signal;

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
    /// Printed more than the cap on one of its pipes: killed with its group at once, rather
    /// than read into memory until the deadline.
    #[error("`{argv}` printed more than {limit} bytes and was killed")]
    TooLarge { argv: Argv, limit: usize },
}

/// The most [`run`] keeps of one pipe of a child: far above any answer a command we run
/// gives (a `gh issue list` of 1000 issues with their bodies is a few MiB).
pub const MAX_CAPTURE_BYTES: usize = 64 << 20;

/// Options for one run.
#[derive(Debug, Clone, Default)]
pub struct RunOpts {
    pub cwd: Option<PathBuf>,
    pub env: Vec<(OsString, OsString)>,
    pub stdin: Option<Vec<u8>>,
}

/// One output pipe being read, and what it gave so far.
struct Pipe<R> {
    pipe: Option<R>,
    buf: Vec<u8>,
    /// The most `buf` keeps; past it the pipe is over its cap.
    limit: usize,
    over: bool,
}

impl<R: Read + AsFd> Pipe<R> {
    fn new(pipe: Option<R>, limit: usize) -> Self {
        if let Some(p) = &pipe {
            set_nonblocking(p.as_fd());
        }
        Pipe {
            pipe,
            buf: Vec::new(),
            limit,
            over: false,
        }
    }

    fn open(&self) -> bool {
        self.pipe.is_some()
    }

    /// Reads what is there without blocking; the pipe is closed at end of file or error.
    fn drain(&mut self) {
        let Some(p) = &mut self.pipe else {
            return;
        };
        let mut chunk = [0u8; 16384];
        loop {
            match p.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    let room = self.limit.saturating_sub(self.buf.len());
                    self.buf.extend_from_slice(&chunk[..n.min(room)]);
                    if n > room {
                        self.over = true;
                        self.pipe = None;
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => break,
            }
        }
        self.pipe = None;
    }
}

fn set_nonblocking(fd: BorrowedFd<'_>) {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    if let Ok(bits) = fcntl(fd, FcntlArg::F_GETFL) {
        let flags = OFlag::from_bits_truncate(bits) | OFlag::O_NONBLOCK;
        let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
    }
}

/// Runs `argv` to completion or until `timeout`, whichever comes first. A non-zero exit is
/// not an error here: callers classify it from the status and stderr.
///
/// One thread does it all: `poll` on the output pipes, the input pipe and a pidfd of the
/// child (where the kernel has pidfds; elsewhere a short re-check of the child), so a call
/// costs no thread of its own however many run at once.
///
/// The deadline covers the output pipes too: a child that exits but leaves a background
/// process holding stdout or stderr (`helper & exit 0`) would otherwise keep the readers
/// waiting for that process. At the deadline the whole process group is killed; a child
/// that had already exited keeps its status, returned with the output read so far.
pub fn run(argv: &Argv, timeout: Duration, opts: &RunOpts) -> Result<Output, RunError> {
    run_capped(argv, timeout, opts, MAX_CAPTURE_BYTES)
}

/// [`run`], keeping at most `limit` bytes of each output pipe: a child that prints more is
/// killed with its group at once ([`RunError::TooLarge`]).
pub fn run_capped(
    argv: &Argv,
    timeout: Duration,
    opts: &RunOpts,
    limit: usize,
) -> Result<Output, RunError> {
    let started = Instant::now();
    let deadline = started.checked_add(timeout);
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
    // Registered before anyone can see it end: the supervisor's orphan reaper must leave
    // this child to its waiter here (see [`is_running_then`]).
    let mut running = lock_running();
    let mut child = cmd.spawn().map_err(|source| RunError::Spawn {
        argv: argv.clone(),
        source,
    })?;
    let pid = child.id() as i32;
    running.insert(pid);
    drop(running);
    let _registered = Registered(pid);
    let pidfd = crate::process::pidfd_open(pid);
    let mut input = opts
        .stdin
        .clone()
        .map(|bytes| (child.stdin.take(), bytes, 0usize));
    if let Some((Some(stdin), _, _)) = &input {
        set_nonblocking(stdin.as_fd());
    }
    let mut out = Pipe::new(child.stdout.take(), limit);
    let mut err = Pipe::new(child.stderr.take(), limit);
    let mut too_large = false;

    let mut status: Option<std::io::Result<ExitStatus>> = None;
    let mut killed_at: Option<Instant> = None;
    // The child itself had not ended at the deadline (not merely a pipe holder).
    let mut timed_out = false;
    loop {
        if status.is_none() {
            match child.try_wait() {
                Ok(Some(s)) => status = Some(Ok(s)),
                Ok(None) => {}
                Err(e) => status = Some(Err(e)),
            }
        }
        if status.is_some() && !out.open() && !err.open() {
            break;
        }
        let now = Instant::now();
        if killed_at.is_none() && (out.over || err.over) {
            crate::process::signal_own_group(pid, Signal::SIGKILL);
            killed_at = Some(now);
            too_large = true;
        }
        if killed_at.is_none() && deadline.is_some_and(|d| now >= d) {
            crate::process::signal_own_group(pid, Signal::SIGKILL);
            killed_at = Some(now);
            timed_out = status.is_none();
        }
        if let Some(k) = killed_at
            && status.is_some()
            && now >= k + PIPE_GRACE
        {
            // Never wait on a pipe holder that escaped the group.
            break;
        }
        // How long to wait: until the deadline, the pipe grace after a kill, or briefly
        // when there is no pidfd to say the child ended.
        let mut wait = match (killed_at, deadline) {
            (Some(k), _) => (k + PIPE_GRACE).saturating_duration_since(now),
            (None, Some(d)) => d.saturating_duration_since(now),
            (None, None) => Duration::from_secs(3600),
        };
        if pidfd.is_none() && status.is_none() {
            wait = wait.min(Duration::from_millis(20));
        }
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(4);
        let watch_in = match &input {
            Some((Some(stdin), _, _)) => {
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLOUT));
                true
            }
            _ => false,
        };
        if let Some(p) = &out.pipe {
            fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        }
        if let Some(p) = &err.pipe {
            fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        }
        if let (Some(fd), None) = (&pidfd, &status) {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        }
        let ms = u16::try_from(wait.as_millis().max(1)).unwrap_or(u16::MAX);
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
        drop(fds);
        if watch_in {
            feed(&mut input);
        }
        out.drain();
        err.drain();
    }
    drop(input);
    if status.is_none() {
        // Killed: reaping it is prompt, and it must be reaped all the same.
        status = Some(child.wait());
    }
    let too_large = too_large || out.over || err.over;
    let (stdout, stderr) = (out.buf, err.buf);
    tracing::debug!(
        target: "afk_supervisor::cmd",
        argv = %argv,
        elapsed_ms = started.elapsed().as_millis() as u64,
        // A number (or absent when killed by a signal or never reaped), never debug text.
        status = status
            .as_ref()
            .and_then(|s| s.as_ref().ok())
            .and_then(ExitStatus::code),
        timed_out,
        "command finished"
    );
    // The child may have died of the closed pipe before the loop saw the cap reached.
    if too_large {
        return Err(RunError::TooLarge {
            argv: argv.clone(),
            limit,
        });
    }
    if timed_out {
        return Err(RunError::Timeout {
            argv: argv.clone(),
            timeout,
            stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
        });
    }
    let status = status
        .unwrap_or_else(|| Err(std::io::Error::other("the child was never reaped")))
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

/// Writes what the child's stdin pipe takes now; closes it once everything is written or
/// the child stopped reading.
fn feed(input: &mut Option<(Option<std::process::ChildStdin>, Vec<u8>, usize)>) {
    use std::io::Write;
    let Some((stdin, bytes, done)) = input else {
        return;
    };
    let Some(pipe) = stdin else {
        return;
    };
    while *done < bytes.len() {
        match pipe.write(&bytes[*done..]) {
            Ok(n) => *done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(_) => break,
        }
    }
    *stdin = None;
}

/// Called once a command has been reaped (see [`is_running_then`]).
type Waker = Box<dyn FnOnce() + Send>;

/// The commands this process is running through [`run`], by pid, until each is reaped,
/// with whatever waits for that.
static RUNNING: std::sync::Mutex<Option<std::collections::HashMap<i32, Vec<Waker>>>> =
    std::sync::Mutex::new(None);

struct RunningSet<'a>(
    std::sync::MutexGuard<'a, Option<std::collections::HashMap<i32, Vec<Waker>>>>,
);

impl RunningSet<'_> {
    fn insert(&mut self, pid: i32) {
        self.0
            .get_or_insert_with(Default::default)
            .insert(pid, Vec::new());
    }
}

fn lock_running() -> RunningSet<'static> {
    RunningSet(RUNNING.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Removes the pid from the running set when the call ends, however it ends (the child
/// reaped, or left to the supervisor's reaper), and then calls what waited for that.
struct Registered(i32);

impl Drop for Registered {
    fn drop(&mut self) {
        let wakers = lock_running()
            .0
            .as_mut()
            .and_then(|set| set.remove(&self.0));
        for wake in wakers.into_iter().flatten() {
            wake();
        }
    }
}

/// Whether `pid` is a command [`run`] started and will reap itself; if it is, `wake` is
/// called once it has been (from the command's thread). A zombie child of this process
/// that is not one (a command's own child, reparented to a supervisor that is a child
/// subreaper) is nobody's to wait for, and is reaped by the supervisor.
///
/// The check and the registration are one step, so no reaping falls between them: the
/// supervisor's SIGCHLD pass, which reads its zombie children in the kernel's order and
/// must stop at a command's, is asked for again once that command is gone, and the zombies
/// behind it are read then.
pub fn is_running_then(pid: i32, wake: impl FnOnce() + Send + 'static) -> bool {
    let mut running = lock_running();
    match running.0.as_mut().and_then(|set| set.get_mut(&pid)) {
        Some(wakers) => {
            wakers.push(Box::new(wake));
            true
        }
        None => false,
    }
}

/// How long the output of a killed group is still collected.
const PIPE_GRACE: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread;

    #[test]
    fn a_waiter_registered_while_a_command_runs_is_called_once_it_is_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!("echo $$ > '{}'; sleep 0.3", pid_file.display());
        let call = thread::spawn(move || {
            let argv = Argv::new("sh", ["-c", script.as_str()]);
            run(&argv, Duration::from_secs(10), &RunOpts::default()).map(|o| o.status.code())
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let pid: i32 = loop {
            let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
            if let Ok(p) = text.trim().parse() {
                break p;
            }
            assert!(Instant::now() < deadline, "the command never started");
            thread::sleep(Duration::from_millis(5));
        };
        let (tx, rx) = mpsc::channel();
        for n in 0..2 {
            let tx = tx.clone();
            assert!(is_running_then(pid, move || tx.send(n).unwrap()));
        }
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
        assert_eq!(call.join().unwrap().unwrap(), Some(0));
        // Both were called by the time `run` returned, and only once each.
        let mut got: Vec<i32> = rx.try_iter().collect();
        got.sort_unstable();
        assert_eq!(got, [0, 1]);
        // Once reaped it is no command of ours: nothing is registered, nothing called.
        assert!(!is_running_then(pid, move || tx.send(9).unwrap()));
        assert_eq!(rx.try_iter().count(), 0);
    }

    #[test]
    fn captures_output_and_status() {
        let argv = Argv::new("sh", ["-c", "echo out; echo err >&2; exit 3"]);
        let o = run(&argv, Duration::from_secs(10), &RunOpts::default()).unwrap();
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(o.stdout_str(), "out\n");
        assert_eq!(o.stderr_str(), "err");
    }

    /// A child that prints without end is killed at the cap, not read into memory until its
    /// deadline (#22); its group goes with it. At the default cap, a 100 MB answer is refused.
    #[test]
    fn output_past_the_cap_kills_the_child_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let argv = Argv::new(
            "sh",
            [
                "-c".to_string(),
                "echo $$ > \"$0\"; exec yes".to_string(),
                pidfile.display().to_string(),
            ],
        );
        let began = Instant::now();
        let e = run_capped(
            &argv,
            Duration::from_secs(600),
            &RunOpts::default(),
            1 << 20,
        )
        .unwrap_err();
        assert!(
            matches!(e, RunError::TooLarge { limit, .. } if limit == 1 << 20),
            "{e}"
        );
        assert!(
            e.to_string().contains("printed more than 1048576 bytes"),
            "{e}"
        );
        assert!(began.elapsed() < Duration::from_secs(300));
        assert_gone(pid_from(&pidfile));
        let big = Argv::new("sh", ["-c", "head -c 100000000 /dev/zero"]);
        let Err(e) = run(&big, Duration::from_secs(600), &RunOpts::default()) else {
            panic!("100 MB were read whole");
        };
        assert!(matches!(e, RunError::TooLarge { .. }), "{e}");
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
        while crate::process::read(pid).is_some_and(|p| !p.is_zombie()) {
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
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(gc), Signal::SIGKILL);
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

    /// Input and output larger than a pipe's buffer both ways, through one thread: neither
    /// side can block the other.
    #[test]
    fn large_input_and_output_flow_both_ways() {
        let input: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let opts = RunOpts {
            stdin: Some(input.clone()),
            ..RunOpts::default()
        };
        let o = run(
            &Argv::new("cat", Vec::<String>::new()),
            Duration::from_secs(30),
            &opts,
        )
        .unwrap();
        assert!(o.status.success());
        assert_eq!(o.stdout, input);
        // A child that never reads its input still ends the call.
        let o = run(
            &Argv::new("true", Vec::<String>::new()),
            Duration::from_secs(30),
            &opts,
        )
        .unwrap();
        assert!(o.status.success());
    }
}
