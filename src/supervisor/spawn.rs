//! Starting a worker and learning when it ends.
//!
//! Each worker leads a new session (so its own process group, and no controlling
//! terminal: a Ctrl-C meant for the supervisor never reaches it directly), with stdin
//! closed and stdout+stderr appended to its slot log. The supervisor is a child subreaper,
//! so whatever a worker leaves behind is reparented to it and reaped, never left a zombie.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use super::procs;

/// How a worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    Code(i32),
    Signal(i32),
    /// An adopted worker is not our child: that it ended is known, not how.
    Unknown,
}

impl std::fmt::Display for ExitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitKind::Code(c) => write!(f, "exit {c}"),
            ExitKind::Signal(s) => {
                let name = nix::sys::signal::Signal::try_from(*s)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {s}"));
                write!(f, "killed by {name}")
            }
            ExitKind::Unknown => write!(f, "ended (exit status unknown)"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("{path}: cannot open slot log: {source}")]
    Log { path: PathBuf, source: io::Error },
    #[error("cannot start `{program}`: {source}")]
    Start { program: String, source: io::Error },
}

/// What a slot runs.
#[derive(Debug, Clone)]
pub struct SpawnSpec<'a> {
    pub argv: &'a [String],
    pub cwd: &'a Path,
    pub log: &'a Path,
    /// Added to the inherited environment, after every `RED_AFK_*` was removed from it.
    pub env: Vec<(String, String)>,
}

/// A started worker: its pid and the start token that, with the pid, identifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spawned {
    pub pid: i32,
    pub start: u64,
}

/// Makes this process the reaper of its descendants' orphans.
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// The SPEC §6 variables of one slot.
pub fn worker_env(
    slot: usize,
    worker_id: &str,
    runner: &str,
    retire_file: &Path,
) -> Vec<(String, String)> {
    vec![
        ("RED_AFK_SWEEPS_DONE".into(), "1".into()),
        ("RED_AFK_SLOT".into(), slot.to_string()),
        ("RED_AFK_WORKER_ID".into(), worker_id.into()),
        ("RED_AFK_RUNNER".into(), runner.into()),
        (
            "RED_AFK_RETIRE_FILE".into(),
            retire_file.display().to_string(),
        ),
    ]
}

pub fn spawn(spec: &SpawnSpec<'_>) -> Result<Spawned, SpawnError> {
    let log_err = |source| SpawnError::Log {
        path: spec.log.to_path_buf(),
        source,
    };
    if let Some(dir) = spec.log.parent() {
        fs::create_dir_all(dir).map_err(log_err)?;
    }
    // Never through a symlink, into a FIFO (which would block) or anything but a file.
    let out = crate::fsutil::open_append(spec.log).map_err(|e| log_err(e.into()))?;
    let err = out.try_clone().map_err(log_err)?;
    let program = spec.argv.first().map(String::as_str).unwrap_or_default();
    let mut cmd = Command::new(program);
    cmd.args(spec.argv.iter().skip(1))
        .current_dir(spec.cwd)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("RED_AFK_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(
        spec.env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(io::Error::from));
    }
    let child = cmd.spawn().map_err(|source| SpawnError::Start {
        program: program.to_string(),
        source,
    })?;
    let pid = child.id() as i32;
    // The child is not reaped before its watcher reports it, so even one that already
    // exited still shows its start time (as a zombie).
    let start = procs::read(pid).map_or(0, |p| p.start);
    // Dropping `Child` neither kills nor waits; the watcher owns waiting from here.
    drop(child);
    Ok(Spawned { pid, start })
}

const WATCH_STACK: usize = 64 * 1024;

/// Reports the end of our own child `pid` as soon as it happens, without reaping it: the
/// zombie keeps the pid (and so the process group id) from being reused until the loop
/// has cleaned up the group and reaps it.
pub fn watch_child(pid: i32, on_exit: impl FnOnce(ExitKind) + Send + 'static) -> io::Result<()> {
    thread::Builder::new()
        .name(format!("watch-{pid}"))
        .stack_size(WATCH_STACK)
        .spawn(move || {
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
            let kind = loop {
                match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
                    Ok(WaitStatus::Exited(_, code)) => break ExitKind::Code(code),
                    Ok(WaitStatus::Signaled(_, sig, _)) => break ExitKind::Signal(sig as i32),
                    Ok(_) | Err(Errno::EINTR) => continue,
                    Err(_) => break ExitKind::Unknown,
                }
            };
            on_exit(kind);
        })
        .map(|_| ())
}

/// Reports the end of a process that is not our child (a worker adopted from a previous
/// supervisor): through a pidfd, or by polling its identity where pidfds are missing.
pub fn watch_adopted(
    pid: i32,
    start: u64,
    on_exit: impl FnOnce(ExitKind) + Send + 'static,
) -> io::Result<()> {
    let pidfd = procs::pidfd_open(pid);
    // The pidfd must refer to the process we verified, not a successor with the same pid.
    let same = procs::read(pid).is_some_and(|p| p.start == start && !p.is_zombie());
    thread::Builder::new()
        .name(format!("adopt-{pid}"))
        .stack_size(WATCH_STACK)
        .spawn(move || {
            match pidfd {
                Some(fd) if same => loop {
                    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                    match poll(&mut fds, PollTimeout::NONE) {
                        Ok(n) if n > 0 => break,
                        Ok(_) | Err(Errno::EINTR) => continue,
                        Err(_) => break,
                    }
                },
                _ => {
                    while procs::read(pid).is_some_and(|p| p.start == start && !p.is_zombie()) {
                        thread::sleep(Duration::from_millis(200));
                    }
                }
            }
            on_exit(ExitKind::Unknown);
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn spawned_worker_gets_env_group_log_and_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/slot-0.log");
        let argv: Vec<String> = vec![
            "sh".into(),
            "-c".into(),
            "echo slot=$RED_AFK_SLOT id=$RED_AFK_WORKER_ID; echo err >&2; exit 7".into(),
        ];
        let env = worker_env(0, "w-1", "claude", &dir.path().join("r"));
        let spec = SpawnSpec {
            argv: &argv,
            cwd: dir.path(),
            log: &log,
            env,
        };
        let (tx, rx) = mpsc::channel();
        let s = spawn(&spec).unwrap();
        let p = procs::read(s.pid).unwrap();
        assert_eq!(p.pgid, s.pid, "own process group");
        assert_eq!(p.sid, s.pid, "own session");
        watch_child(s.pid, move |k| tx.send(k).unwrap()).unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(20)).unwrap(),
            ExitKind::Code(7)
        );
        // Not reaped by the watcher: still a zombie until someone waits.
        assert!(procs::read(s.pid).unwrap().is_zombie());
        nix::sys::wait::waitpid(Pid::from_raw(s.pid), None).unwrap();
        let text = fs::read_to_string(&log).unwrap();
        assert_eq!(text, "slot=0 id=w-1\nerr\n");
    }

    #[test]
    fn missing_program_is_a_start_error() {
        let dir = tempfile::tempdir().unwrap();
        let argv = vec!["/nonexistent/worker".to_string()];
        let spec = SpawnSpec {
            argv: &argv,
            cwd: dir.path(),
            log: &dir.path().join("l.log"),
            env: vec![],
        };
        let err = spawn(&spec).unwrap_err().to_string();
        assert!(err.contains("cannot start `/nonexistent/worker`"), "{err}");
    }
}
