//! Starting a worker and learning when it ends.
//!
//! Each worker leads a new session (so its own process group, and no controlling
//! terminal: a Ctrl-C meant for the supervisor never reaches it directly), with stdin
//! closed and stdout+stderr appended to its slot log. The supervisor is a child subreaper,
//! so whatever a worker leaves behind is reparented to it and reaped, never left a zombie.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process;

pub use crate::process::ExitKind;

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("{path}: cannot open slot log: {source}")]
    Log { path: PathBuf, source: io::Error },
    #[error("cannot start `{program}`: {source}")]
    Start { program: String, source: io::Error },
}

/// How a child ends that lost its supervisor before it became a worker.
const EXIT_ORPHANED: i32 = 111;

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
    crate::afk_env::slot_vars(slot, worker_id, runner, retire_file)
}

pub fn spawn(spec: &SpawnSpec<'_>) -> Result<Spawned, SpawnError> {
    spawn_in(spec, None)
}

/// [`spawn`], with the child moved into `cgroup` before it runs anything of its own: it
/// writes itself into the cgroup between `fork` and `exec`, so no process of the worker
/// ever runs outside it, and a child that cannot join it never becomes a worker.
pub fn spawn_in(
    spec: &SpawnSpec<'_>,
    cgroup: Option<&crate::cgroup::Cgroup>,
) -> Result<Spawned, SpawnError> {
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
        if crate::afk_env::is_ours(&k.to_string_lossy()) {
            cmd.env_remove(k);
        }
    }
    // The service manager's channel is the supervisor's alone: a worker must not speak
    // for the unit (nor believe a watchdog is watching it).
    for k in super::notify::SERVICE_MANAGER_VARS {
        cmd.env_remove(k);
    }
    cmd.envs(
        spec.env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    // A child whose supervisor died between the fork and here is not recorded anywhere and
    // does not carry the worker environment yet (that comes with `execve`), so a successor
    // could neither adopt it nor count it: it ends instead of becoming a worker. With that
    // check as the last step before `execve`, a worker exists only while its supervisor
    // does or once it carries the environment that lets a successor find it.
    let parent = std::process::id() as i32;
    let procs = cgroup
        .map(|c| c.open_procs())
        .transpose()
        .map_err(|e| SpawnError::Start {
            program: program.to_string(),
            source: io::Error::other(e.to_string()),
        })?;
    let procs_fd = procs.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    // SAFETY: setsid, getppid, write and _exit are async-signal-safe and touch no memory
    // of the parent; `procs` outlives the spawn, so its descriptor is open in the child.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setsid().map_err(io::Error::from)?;
            if nix::unistd::getppid().as_raw() != parent {
                libc::_exit(EXIT_ORPHANED);
            }
            if let Some(fd) = procs_fd {
                crate::cgroup::join_from_child(fd)?;
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|source| SpawnError::Start {
        program: program.to_string(),
        source,
    })?;
    drop(procs);
    let pid = child.id() as i32;
    // The child is not reaped before its watcher reports it, so even one that already
    // exited still shows its start time (as a zombie).
    let start = process::read(pid).map_or(0, |p| p.start);
    // Dropping `Child` neither kills nor waits; the watcher owns waiting from here.
    drop(child);
    Ok(Spawned { pid, start })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let s = spawn(&spec).unwrap();
        let p = process::read(s.pid).unwrap();
        assert_eq!(p.pgid, s.pid, "own process group");
        assert_eq!(p.sid, s.pid, "own session");
        let fd = process::Pidfd::open(s.pid).unwrap();
        let mut fds = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(&fd),
            nix::poll::PollFlags::POLLIN,
        )];
        nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(20_000u16)).unwrap();
        // Seen without reaping: still a zombie until it is reaped.
        assert_eq!(process::child_exit(s.pid, false), Some(ExitKind::Code(7)));
        assert!(process::read(s.pid).unwrap().is_zombie());
        assert_eq!(process::child_exit(s.pid, true), Some(ExitKind::Code(7)));
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
