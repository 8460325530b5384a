//! Starting a worker and learning when it ends.
//!
//! Each worker leads a new session (so its own process group, and no controlling
//! terminal: a Ctrl-C meant for the supervisor never reaches it directly), with stdin
//! closed and stdout+stderr appended to its slot log. The supervisor is a child subreaper,
//! so whatever a worker leaves behind is reparented to it and reaped, never left a zombie.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process;

pub use crate::process::ExitKind;

mod environ;
mod vfork;

use vfork::EXIT_ORPHANED;

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

/// A started worker: its pid and the start token that, with the pid, identifies it, and
/// its pidfd (none where the kernel has no pidfds).
#[derive(Debug)]
pub struct Spawned {
    pub pid: i32,
    pub start: u64,
    pub pidfd: Option<process::Pidfd>,
}

/// Makes this process the reaper of its descendants' orphans.
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

pub fn spawn(spec: &SpawnSpec<'_>) -> Result<Spawned, SpawnError> {
    spawn_in(spec, None)
}

/// [`spawn`], with the child started inside `cgroup`: no process of the worker ever runs
/// outside it, and a child that cannot join it never becomes a worker.
///
/// The slot log is opened here for this spawn alone; the loop's spawns keep each slot's
/// log open from one attempt to the next (`children::Os`), which costs their clones
/// nothing: the child copies the supervisor's descriptor table itself (`CLONE_FILES`, then
/// `unshare` in the child), so the descriptors the supervisor holds are not copied inside
/// its own `clone`.
///
/// The worker is started as [`vfork`] explains, copying nothing of the supervisor's
/// memory; where that cannot be done (not x86-64, an old kernel) it is forked and joins the
/// cgroup between `fork` and `exec`.
pub fn spawn_in(
    spec: &SpawnSpec<'_>,
    cgroup: Option<&crate::cgroup::Cgroup>,
) -> Result<Spawned, SpawnError> {
    begin_in(spec, cgroup, false)?.finish()
}

/// A worker on its way to its `execve` ([`begin_in`]), to be [`Pending::finish`]ed.
pub struct Pending {
    /// The clone's child, or the forked one (already past its `execve`).
    child: Child,
    start: u64,
    program: String,
    // What the child copies before its `execve`: open until then.
    _log: std::sync::Arc<fs::File>,
    _cgroup_dir: Option<fs::File>,
}

enum Child {
    Flying(vfork::InFlight),
    Forked(i32, Option<process::Pidfd>),
}

impl Child {
    fn pid(&self) -> i32 {
        match self {
            Child::Flying(f) => f.pid(),
            Child::Forked(pid, _) => *pid,
        }
    }
}

impl Pending {
    pub fn pid(&self) -> i32 {
        self.child.pid()
    }

    /// Waits for the child's `execve`: the worker, or why it could not start.
    pub fn finish(self) -> Result<Spawned, SpawnError> {
        let (pid, pidfd) = match self.child {
            Child::Flying(f) => {
                let (pid, fd) = f.land().map_err(|source| SpawnError::Start {
                    program: self.program,
                    source,
                })?;
                (pid, Some(process::Pidfd::from_fd(fd)))
            }
            Child::Forked(pid, pidfd) => (pid, pidfd),
        };
        Ok(Spawned {
            pid,
            start: self.start,
            pidfd,
        })
    }

    /// The worker at once, without waiting for its `execve` where the child is still on
    /// its way to it: that wait put the supervisor to sleep at every respawn, and woke it
    /// again when the child had loaded its program, for an answer that is nearly always
    /// "it ran". The rest comes as the [`Detached`], asked later. A child that already
    /// let go (or a forked one) is answered in full here, as [`Pending::finish`] does.
    pub fn finish_detached(mut self) -> Result<(Spawned, Option<Detached>), SpawnError> {
        if let Child::Flying(f) = self.child {
            match f.detach() {
                Ok((pid, fd, aloft)) => {
                    let spawned = Spawned {
                        pid,
                        start: self.start,
                        pidfd: Some(process::Pidfd::from_fd(fd)),
                    };
                    let detached = Detached {
                        aloft,
                        program: self.program,
                        _log: self._log,
                        _cgroup_dir: self._cgroup_dir,
                    };
                    return Ok((spawned, Some(detached)));
                }
                // Already past its `execve` (or its exit): landed in full below.
                Err(f) => self.child = Child::Flying(f),
            }
        }
        self.finish().map(|s| (s, None))
    }
}

/// A worker started by [`Pending::finish_detached`] whose `execve` was not yet seen: what
/// it reads and the descriptors it copies stay open until it let go.
pub struct Detached {
    aloft: vfork::Aloft,
    program: String,
    _log: std::sync::Arc<fs::File>,
    _cgroup_dir: Option<fs::File>,
}

impl Detached {
    /// `None` while the child may still be before its `execve`; then whether it ran. A
    /// failed one's child exits 127 and its end arrives as any worker's does. No system
    /// call.
    pub fn landed(&self) -> Option<Result<(), SpawnError>> {
        self.aloft.landed().map(|r| {
            r.map_err(|source| SpawnError::Start {
                program: self.program.clone(),
                source,
            })
        })
    }

    /// Returns once [`Detached::landed`] has its answer.
    pub fn wait(&self) {
        self.aloft.wait();
    }

    /// Lets go of what the child read, without waiting: for a child known to have ended.
    pub fn ended(self) -> Option<SpawnError> {
        let failed = self.landed().and_then(Result::err);
        self.aloft.ended();
        failed
    }
}

/// [`spawn_in`] up to the clone: with `overlap`, returns while the child is still on its
/// way to its `execve`, so that several workers' `execve`s overlap ([`vfork::launch`]);
/// without, once it has run it. The fork this falls back to waits for the `execve` here.
pub fn begin_in(
    spec: &SpawnSpec<'_>,
    cgroup: Option<&crate::cgroup::Cgroup>,
    overlap: bool,
) -> Result<Pending, SpawnError> {
    let log = std::sync::Arc::new(open_log(spec.log)?);
    begin_with_log(spec, log, cgroup, overlap)
}

/// Opens a slot log for appending, as a worker's stdout and stderr: never through a
/// symlink, into a FIFO (which would block) or anything but a file. The day's folder is
/// made only when the log cannot be opened without it: once a day, not once a spawn.
pub fn open_log(path: &Path) -> Result<fs::File, SpawnError> {
    let log_err = |source| SpawnError::Log {
        path: path.to_path_buf(),
        source,
    };
    let out = match crate::fsutil::open_append(path) {
        Err(crate::fsutil::SmallFileError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir).map_err(log_err)?;
            }
            crate::fsutil::open_append(path)
        }
        other => other,
    };
    let out = out.map_err(|e| log_err(e.into()))?;
    above_stdio(out).map_err(log_err)
}

/// [`begin_in`] with the slot log already open ([`open_log`]): held until the child's
/// `execve`, which copies it.
pub fn begin_with_log(
    spec: &SpawnSpec<'_>,
    out: std::sync::Arc<fs::File>,
    cgroup: Option<&crate::cgroup::Cgroup>,
    overlap: bool,
) -> Result<Pending, SpawnError> {
    let program = spec.argv.first().map(String::as_str).unwrap_or_default();
    let start_err = |source| SpawnError::Start {
        program: program.to_string(),
        source,
    };
    let env = environ::WorkerEnv::new(&spec.env).map_err(start_err)?;
    let cgroup_dir = cgroup
        .map(|c| {
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
                .open(c.dir())
        })
        .transpose()
        .map_err(|e| start_err(io::Error::other(format!("cannot open its cgroup: {e}"))))?;
    let plan = vfork::Plan {
        argv: spec.argv,
        cwd: spec.cwd,
        env: &env,
        log: out.as_raw_fd(),
        cgroup: cgroup_dir.as_ref().map(AsRawFd::as_raw_fd),
        overlap,
    };
    let window = process::StartWindow::open();
    let child = match vfork::launch(&plan).map_err(start_err)? {
        vfork::Launched::Flying(f) => Child::Flying(f),
        // Our child cannot be reaped by anyone else, so this pidfd is its.
        vfork::Launched::Unsupported => {
            let pid = forked(spec, env.pairs(), &out, cgroup)?;
            Child::Forked(pid, process::Pidfd::open(pid))
        }
    };
    let pid = child.pid();
    // The kernel stamped the start inside the clone. The child is not reaped before its
    // watcher reports it, so even one that already exited still shows its start time (as
    // a zombie) where the clock cannot tell it.
    let start = window.close(pid);
    Ok(Pending {
        child,
        start,
        program: program.to_string(),
        _log: out,
        _cgroup_dir: cgroup_dir,
    })
}

/// The log as the child's stdout and stderr copy it. A descriptor among 0-2 (a supervisor
/// started with one of them closed) would be overwritten by the child's own set-up before
/// it is copied, so such a log is moved above them first.
fn above_stdio(out: fs::File) -> io::Result<fs::File> {
    if out.as_raw_fd() > 2 {
        return Ok(out);
    }
    // F_DUPFD_CLOEXEC from 3: never among 0-2, and never leaked into a worker.
    let fd = nix::fcntl::fcntl(&out, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))
        .map_err(io::Error::from)?;
    // SAFETY: `fd` was just returned by fcntl and is owned by nothing else.
    Ok(fs::File::from(unsafe {
        std::os::fd::OwnedFd::from_raw_fd(fd)
    }))
}

/// Starts the worker by `fork` and `exec`, joining `cgroup` in between.
fn forked(
    spec: &SpawnSpec<'_>,
    env: Vec<(OsString, OsString)>,
    log: &fs::File,
    cgroup: Option<&crate::cgroup::Cgroup>,
) -> Result<i32, SpawnError> {
    let program = spec.argv.first().map(String::as_str).unwrap_or_default();
    let start_err = |source| SpawnError::Start {
        program: program.to_string(),
        source,
    };
    let log_err = |source| SpawnError::Log {
        path: spec.log.to_path_buf(),
        source,
    };
    let out = log.try_clone().map_err(log_err)?;
    let err = log.try_clone().map_err(log_err)?;
    let mut cmd = Command::new(program);
    cmd.args(spec.argv.iter().skip(1))
        .current_dir(spec.cwd)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .env_clear()
        .envs(env);
    // A child whose supervisor died between the fork and here is not recorded anywhere and
    // does not carry the worker environment yet (that comes with `execve`), so a successor
    // could neither adopt it nor count it: it ends instead of becoming a worker. With that
    // check as the last step before `execve`, a worker exists only while its supervisor
    // does or once it carries the environment that lets a successor find it.
    let parent = std::process::id() as i32;
    let procs = cgroup
        .map(|c| c.open_procs())
        .transpose()
        .map_err(|e| start_err(io::Error::other(e.to_string())))?;
    let procs_fd = procs.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    let nofile = crate::process::open_files_for_children();
    // SAFETY: setsid, getppid, setrlimit, write and _exit are async-signal-safe and touch
    // no memory of the parent; `procs` outlives the spawn, so its descriptor is open in
    // the child.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setsid().map_err(io::Error::from)?;
            if let Some(lim) = nofile
                && libc::setrlimit(libc::RLIMIT_NOFILE, lim) < 0
            {
                return Err(io::Error::last_os_error());
            }
            if nix::unistd::getppid().as_raw() != parent {
                libc::_exit(EXIT_ORPHANED);
            }
            if let Some(fd) = procs_fd {
                crate::cgroup::join_from_child(fd)?;
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(start_err)?;
    drop(procs);
    // Dropping `Child` neither kills nor waits; the watcher owns waiting from here.
    Ok(child.id() as i32)
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
        let env = crate::afk_env::slot_vars(0, "w-1", "claude", &dir.path().join("r"));
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
        assert_eq!(s.start, p.start, "the start token /proc shows");
        // The pidfd the spawn hands back names this child, and no worker inherits it.
        let pidfd = s.pidfd.as_ref().expect("a pidfd for the child");
        let fd = pidfd.as_raw_fd();
        let info = fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        assert!(
            info.lines().any(|l| l == format!("Pid:\t{}", s.pid)),
            "{info}"
        );
        let flags = nix::fcntl::fcntl(pidfd, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        wait_for_end(s.pid);
        // Seen without reaping: still a zombie until it is reaped.
        assert_eq!(process::child_exit(s.pid, false), Some(ExitKind::Code(7)));
        assert!(process::read(s.pid).unwrap().is_zombie());
        assert_eq!(process::child_exit(s.pid, true), Some(ExitKind::Code(7)));
        let text = fs::read_to_string(&log).unwrap();
        assert_eq!(text, "slot=0 id=w-1\nerr\n");
    }

    /// Waits (20 s at most) until our child `pid` has ended, without reaping it.
    fn wait_for_end(pid: i32) {
        let fd = process::Pidfd::open(pid).unwrap();
        let mut fds = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(&fd),
            nix::poll::PollFlags::POLLIN,
        )];
        nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(20_000u16)).unwrap();
    }

    /// Spawns `argv` with its log in `dir` and waits for its end (reaped); returns the
    /// exit and the log's text.
    fn run_to_end(dir: &Path, argv: &[&str]) -> (ExitKind, String) {
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        let log = dir.join("run.log");
        let _ = fs::remove_file(&log);
        let spec = SpawnSpec {
            argv: &argv,
            cwd: dir,
            log: &log,
            env: vec![],
        };
        let s = spawn(&spec).unwrap();
        wait_for_end(s.pid);
        let exit = process::child_exit(s.pid, true).unwrap();
        (exit, fs::read_to_string(&log).unwrap())
    }

    /// A worker holds none of the supervisor's descriptors but its stdin, stdout and
    /// stderr, however the clone shared the supervisor's table (what the test's own parent
    /// left open to it is not the supervisor's to close); and its own set-up of 0-2 (done
    /// after its `unshare` where the table was shared) left the supervisor's 0-2 as they
    /// were.
    #[test]
    fn a_worker_holds_only_its_stdio_and_leaves_the_supervisors_alone() {
        let dir = tempfile::tempdir().unwrap();
        let ours = || -> Vec<_> {
            (0..3)
                .map(|fd| fs::read_link(format!("/proc/self/fd/{fd}")).ok())
                .collect()
        };
        let before = ours();
        // Descriptors the supervisor holds (not close-on-exec ones would leak; these are).
        let held: Vec<fs::File> = (0..8)
            .map(|_| fs::File::open("/dev/null").unwrap())
            .collect();
        let (exit, text) = run_to_end(dir.path(), &["sh", "-c", "ls /proc/$$/fd"]);
        let numbers: Vec<String> = held.iter().map(|f| f.as_raw_fd().to_string()).collect();
        drop(held);
        assert_eq!(exit, ExitKind::Code(0));
        let fds: Vec<&str> = text.split_whitespace().collect();
        assert!(["0", "1", "2"].iter().all(|n| fds.contains(n)), "{text}");
        for n in &numbers {
            assert!(!fds.contains(&n.as_str()), "fd {n} leaked: {text}");
        }
        assert_eq!(ours(), before, "the supervisor's stdio untouched");
    }

    /// The mask of `/proc/self/status` line `key` (hex), as the child saw it.
    fn mask(status: &str, key: &str) -> u64 {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    }

    #[test]
    fn a_worker_starts_in_its_cwd_with_stdin_null_no_signal_blocked_and_sigpipe_default() {
        let dir = tempfile::tempdir().unwrap();
        // Blocked here (and SIGPIPE ignored by the Rust runtime): neither reaches the worker.
        let mut usr2 = nix::sys::signal::SigSet::empty();
        usr2.add(nix::sys::signal::Signal::SIGUSR2);
        usr2.thread_block().unwrap();
        let (exit, text) = run_to_end(
            dir.path(),
            &[
                "sh",
                "-c",
                "pwd; readlink /proc/self/fd/0; cat /proc/self/status",
            ],
        );
        usr2.thread_unblock().unwrap();
        assert_eq!(exit, ExitKind::Code(0), "{text}");
        let mut lines = text.lines();
        assert_eq!(
            lines.next().map(std::path::PathBuf::from),
            Some(dir.path().canonicalize().unwrap())
        );
        assert_eq!(lines.next(), Some("/dev/null"));
        assert_eq!(mask(&text, "SigBlk:"), 0, "{text}");
        let pipe_bit = 1u64 << (libc::SIGPIPE - 1);
        assert_eq!(mask(&text, "SigIgn:") & pipe_bit, 0, "{text}");
    }

    #[test]
    fn a_script_without_a_shebang_runs_under_sh_and_one_not_executable_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("plain");
        fs::write(&script, "echo plain \"$1\"\nexit 3\n").unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        let path = script.to_string_lossy().into_owned();
        let (exit, text) = run_to_end(dir.path(), &[&path, "arg"]);
        assert_eq!((exit, text.as_str()), (ExitKind::Code(3), "plain arg\n"));

        fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
        let err = start_error(dir.path(), &path);
        assert!(err.contains("Permission denied"), "{err}");
    }

    /// The error of spawning `program` (which must fail), as one line.
    fn start_error(dir: &Path, program: &str) -> String {
        let argv = vec![program.to_string()];
        let spec = SpawnSpec {
            argv: &argv,
            cwd: dir,
            log: &dir.join("l.log"),
            env: vec![],
        };
        spawn(&spec).unwrap_err().to_string()
    }

    #[test]
    fn missing_program_is_a_start_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = start_error(dir.path(), "/nonexistent/worker");
        assert!(err.contains("cannot start `/nonexistent/worker`"), "{err}");
        // Looked up in PATH, as execvp does: not found anywhere is the same error.
        let err = start_error(dir.path(), "afk-no-such-program-anywhere");
        assert!(err.contains("No such file or directory"), "{err}");
        let spec = SpawnSpec {
            argv: &[],
            cwd: dir.path(),
            log: &dir.path().join("l.log"),
            env: vec![],
        };
        let err = spawn(&spec).unwrap_err().to_string();
        assert!(err.contains("the command is empty"), "{err}");
    }

    /// The child of a clone runs on the supervisor's memory and thread-local storage while
    /// the supervisor's thread goes on: each of its failed calls (here a PATH search past
    /// missing directories, ending in a failed exec) must leave that thread's `errno`
    /// alone, which mio reads after every would-block.
    #[test]
    fn a_child_on_its_way_to_exec_never_writes_the_supervisors_errno() {
        let dir = tempfile::tempdir().unwrap();
        let argv = vec!["afk-no-such-program-anywhere".to_string()];
        let path = "/nonexistent/a:/nonexistent/b:/nonexistent/c".to_string();
        let spec = SpawnSpec {
            argv: &argv,
            cwd: dir.path(),
            log: &dir.path().join("l.log"),
            env: vec![("PATH".into(), path)],
        };
        fs::write(spec.log, "").unwrap();
        // Set before the clone: the parent's own calls up to the check all succeed (the log
        // and its folder are there), and a call that succeeds leaves errno as it is.
        const SENTINEL: i32 = 4242;
        // SAFETY: this thread's own errno.
        unsafe { *libc::__errno_location() = SENTINEL };
        let pending = begin_in(&spec, None, true).unwrap();
        // Until the child has exited (after its failed calls), with calls that succeed and
        // so leave errno as it is.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL;
            // SAFETY: fills `info`, a valid siginfo_t.
            let r =
                unsafe { libc::waitid(libc::P_PID, pending.pid() as libc::id_t, &mut info, flags) };
            assert_eq!(r, 0);
            // SAFETY: waitid filled it.
            if unsafe { info.si_pid() } != 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the child never ended"
            );
            std::hint::spin_loop();
        }
        // SAFETY: this thread's own errno.
        assert_eq!(unsafe { *libc::__errno_location() }, SENTINEL);
        let err = pending.finish().unwrap_err().to_string();
        assert!(err.contains("No such file or directory"), "{err}");
    }
}
