//! The supervisor lock in `.red/tmp/supervisors/default/` (`docs/SPEC.md` §4): the lock that
//! makes one supervisor per repo, the pid file with its start token, and the control files.

use std::fs::{self, File, TryLockError};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::event_log::Kind;
use crate::fsutil::{open_lock_file, remove_file_if_exists};
use crate::layout::Layout;
use crate::pidfile::{self, DeadReason, Liveness, MissingStart, NotLive};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another supervisor holds the lock; nothing was changed.
    #[error("supervisor already running for this project (pid={})", pid.map_or("unknown".to_string(), |p| p.to_string()))]
    Busy { pid: Option<i32> },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// Something [`SupervisorLock::acquire`] found worth logging: routine housekeeping (a regular
/// control file a previous run left, removed) or a problem (a corrupt or hostile file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockNote {
    Housekeeping(String),
    Problem(String),
}

impl LockNote {
    /// The event-log kind: `supervisor.housekeeping` or `supervisor.error`.
    pub fn kind(&self) -> Kind {
        match self {
            LockNote::Housekeeping(_) => Kind::SupervisorHousekeeping,
            LockNote::Problem(_) => Kind::SupervisorError,
        }
    }

    pub fn text(&self) -> &str {
        match self {
            LockNote::Housekeeping(t) | LockNote::Problem(t) => t,
        }
    }

    pub fn contains(&self, needle: &str) -> bool {
        self.text().contains(needle)
    }
}

/// Every `afk-supervisor-slot-<N>.retire` in the supervisor lane (none when it cannot be
/// read).
fn retire_files(layout: &Layout) -> Vec<PathBuf> {
    let Ok(dir) = fs::read_dir(layout.supervisor_lane()) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter_map(|name| {
            let slot = name
                .strip_prefix("afk-supervisor-slot-")?
                .strip_suffix(".retire")?;
            crate::layout::parse_positive(slot)
                .map(|n| n as usize)
                .or((slot == "0").then_some(0))
        })
        .map(|slot| layout.retire_file(slot))
        .collect()
}

/// The held lock. The lock lives as long as this value (the descriptor is close-on-exec,
/// so no worker inherits it and outlives the supervisor holding it), and dropping it
/// removes the pid files, so no return path of the supervisor can leave them naming a
/// process that no longer holds the lock.
#[derive(Debug)]
pub struct SupervisorLock {
    layout: Layout,
    _lock: File,
    pub pid: i32,
    pub start: u64,
}

impl SupervisorLock {
    /// Takes the lock; on success writes the pid file and removes stale control files.
    /// Returns the held lock and notes worth logging (a corrupt previous pid file, for one).
    pub fn acquire(layout: &Layout) -> Result<(SupervisorLock, Vec<LockNote>), LockError> {
        let lock_path = layout.supervisor_lock();
        let io_err = |path: PathBuf| move |source| LockError::Io { path, source };
        fs::create_dir_all(layout.supervisor_lane()).map_err(io_err(layout.supervisor_lane()))?;
        let lock = open_lock_file(&lock_path).map_err(|e| io_err(lock_path.clone())(e.into()))?;
        let deadline = Instant::now() + HOLDER_WAIT;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    // Who holds it is the kernel's word: the pid file may not be written yet
                    // (two supervisors started together) or may name a dead predecessor.
                    if let Some(pid) = lock_holder(&lock) {
                        return Err(LockError::Busy { pid: Some(pid) });
                    }
                    if Instant::now() >= deadline {
                        return Err(LockError::Busy {
                            pid: live_pid_file(layout),
                        });
                    }
                    // Released between the two looks, or /proc/locks unreadable: try again.
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(TryLockError::Error(e)) => return Err(io_err(lock_path)(e)),
            }
        }
        let mut notes = Vec::new();
        let pid_path = layout.supervisor_pid();
        match pidfile::liveness(&pid_path, MissingStart::Dead) {
            Liveness::Dead {
                reason: DeadReason::Corrupt(why),
            } => notes.push(LockNote::Problem(format!(
                "{}: previous pid file corrupt ({why}); replaced",
                pid_path.display()
            ))),
            Liveness::Live { pid, .. } => notes.push(LockNote::Problem(format!(
                "{}: previous pid {pid} is live but does not hold the lock; replaced",
                pid_path.display()
            ))),
            // The lock, not the pid file, says who runs: this process holds it.
            Liveness::Unknown { reason } => notes.push(LockNote::Problem(format!(
                "previous pid file cannot be judged ({reason}); replaced"
            ))),
            _ => {}
        }
        let me = std::process::id() as i32;
        let start = pidfile::write_pid_file(&pid_path, me).map_err(io_err(pid_path.clone()))?;
        // A retire file belongs to the run that wrote it (it carries that run's start
        // token): one a stopped drain left would idle its slot in every later run.
        let mut stale_files = vec![layout.supervisor_stop(), layout.resize_file()];
        stale_files.extend(retire_files(layout));
        for stale in stale_files {
            // Looked at, never followed: a symlink goes as a link. A directory is not ours
            // to remove; the loop then reports it once as not a regular file.
            match fs::symlink_metadata(&stale) {
                Ok(m) if m.is_dir() => notes.push(LockNote::Problem(format!(
                    "{}: is a directory, not a control file; left in place and ignored",
                    stale.display()
                ))),
                Ok(m) => {
                    remove_file_if_exists(&stale).map_err(io_err(stale.clone()))?;
                    let text = format!("{}: stale file removed", stale.display());
                    // A regular file a previous run left is routine; a FIFO or a link
                    // planted there is not.
                    notes.push(if m.is_file() {
                        LockNote::Housekeeping(text)
                    } else {
                        LockNote::Problem(text)
                    });
                }
                Err(_) => {}
            }
        }
        Ok((
            SupervisorLock {
                layout: layout.clone(),
                _lock: lock,
                pid: me,
                start,
            },
            notes,
        ))
    }

    fn remove_files(&mut self) -> io::Result<()> {
        pidfile::remove_pid_file(&self.layout.supervisor_pid())?;
        remove_file_if_exists(&self.layout.supervisor_stop())
    }
}

impl Drop for SupervisorLock {
    /// The one release: a clean stop, an early return and a panic alike drop the lock, and
    /// its pid files and stop request go with it. A failure is one line on stderr (never a
    /// panic, even with stderr gone), as there is no caller left to tell.
    fn drop(&mut self) {
        if let Err(e) = self.remove_files() {
            report_release_failure(&e);
        }
    }
}

/// The one line a failed release prints.
fn report_release_failure(e: &io::Error) {
    use std::io::Write;
    let _ = writeln!(io::stderr(), "afk-supervisor: removing pid files: {e}");
}

/// How long a losing supervisor looks for the lock's holder before saying it is unknown.
const HOLDER_WAIT: Duration = Duration::from_secs(2);

/// The pid holding an `flock` on `file`, from `/proc/locks` (matched by device and inode).
/// `None` when no holder is listed or the table cannot be read.
fn lock_holder(file: &File) -> Option<i32> {
    let meta = file.metadata().ok()?;
    let locks = fs::read_to_string("/proc/locks").ok()?;
    holder_in(
        &locks,
        nix::sys::stat::major(meta.dev()),
        nix::sys::stat::minor(meta.dev()),
        meta.ino(),
    )
}

/// The holder of a granted `FLOCK` in a `/proc/locks` text, for the file at device
/// `major:minor` (hex in the table) and inode `ino`. Waiters (`->` lines) are skipped.
fn holder_in(locks: &str, major: u64, minor: u64, ino: u64) -> Option<i32> {
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(1) != Some(&"FLOCK") {
            return None;
        }
        let mut dev = f.get(5)?.split(':');
        let maj = u64::from_str_radix(dev.next()?, 16).ok()?;
        let min = u64::from_str_radix(dev.next()?, 16).ok()?;
        let i: u64 = dev.next()?.parse().ok()?;
        ((maj, min, i) == (major, minor, ino))
            .then(|| f.get(4)?.parse().ok())
            .flatten()
    })
}

/// The pid in the supervisor pid file when that process is live and its start token
/// matches; never a dead predecessor's pid that the kernel may have handed to another.
fn live_pid_file(layout: &Layout) -> Option<i32> {
    match pidfile::liveness(&layout.supervisor_pid(), MissingStart::Dead) {
        Liveness::Live {
            pid,
            start: Some(_),
        } => Some(pid),
        _ => None,
    }
}

/// The running supervisor of a repo, identified by pid AND start token, or why there is
/// none. Control commands signal nothing that fails this check, an unjudgeable pid file
/// included.
pub fn running_supervisor(layout: &Layout) -> Result<(i32, u64), NotLive> {
    match pidfile::liveness(&layout.supervisor_pid(), MissingStart::Dead) {
        Liveness::Live {
            pid,
            start: Some(start),
        } => Ok((pid, start)),
        Liveness::Live { pid, start: None } => Err(NotLive::Dead(DeadReason::NoStartToken(pid))),
        Liveness::Dead { reason } => Err(NotLive::Dead(reason)),
        Liveness::Unknown { reason } => Err(NotLive::Unknown(reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        fs::create_dir_all(layout.supervisor_lane()).unwrap();
        fs::write(layout.supervisor_pid(), "garbage").unwrap();
        fs::write(layout.resize_file(), "target: 3\n").unwrap();
        let (lock, notes) = SupervisorLock::acquire(&layout).unwrap();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("previous pid file corrupt"))
        );
        assert!(!layout.resize_file().exists());
        // A routine leftover is housekeeping, not an error.
        assert!(notes.contains(&LockNote::Housekeeping(format!(
            "{}: stale file removed",
            layout.resize_file().display()
        ))));
        let me = std::process::id() as i32;
        assert_eq!(running_supervisor(&layout), Ok((me, lock.start)));
        let before = fs::read(layout.supervisor_pid()).unwrap();
        let err = SupervisorLock::acquire(&layout).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("supervisor already running for this project (pid={me})")
        );
        assert_eq!(fs::read(layout.supervisor_pid()).unwrap(), before);
        drop(lock);
        assert!(!layout.supervisor_pid().exists());
        assert!(running_supervisor(&layout).is_err());
        let (again, _) = SupervisorLock::acquire(&layout).unwrap();
        drop(again);
    }

    /// What `run_fleet` relies on: an early `?` after the lock is taken leaves no pid file
    /// and no stop request behind, and the next supervisor takes the lock at once.
    #[test]
    fn an_early_question_mark_releases_the_lock() {
        fn start_then_fail(layout: &Layout) -> Result<(), LockError> {
            let (lock, _) = SupervisorLock::acquire(layout)?;
            assert!(layout.supervisor_pid().exists());
            fs::write(layout.supervisor_stop(), "1\n").unwrap();
            let _in_the_way =
                fs::File::open(layout.repo().join("no such file")).map_err(|source| {
                    LockError::Io {
                        path: layout.repo().join("no such file"),
                        source,
                    }
                })?;
            drop(lock);
            Ok(())
        }
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert!(matches!(
            start_then_fail(&layout),
            Err(LockError::Io { .. })
        ));
        assert!(!layout.supervisor_pid().exists());
        assert!(!crate::layout::start_file(&layout.supervisor_pid()).exists());
        assert!(!layout.supervisor_stop().exists());
        assert!(running_supervisor(&layout).is_err());
        let (again, _) = SupervisorLock::acquire(&layout).unwrap();
        assert_eq!(
            running_supervisor(&layout),
            Ok((std::process::id() as i32, again.start))
        );
        // A drop after the files went by hand is quiet.
        pidfile::remove_pid_file(&layout.supervisor_pid()).unwrap();
        drop(again);
    }

    #[test]
    fn a_pid_file_that_cannot_be_judged_is_no_running_supervisor() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        fs::create_dir_all(layout.supervisor_pid()).unwrap();
        assert!(matches!(
            running_supervisor(&layout),
            Err(NotLive::Unknown(_))
        ));
    }

    #[test]
    fn holder_is_read_from_the_kernel_lock_table() {
        let table = "1: POSIX  ADVISORY  WRITE 11 fd:01:77 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 22 fd:01:78 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 33 fd:01:77 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 44 fd:01:77 0 EOF\n";
        assert_eq!(holder_in(table, 0xfd, 1, 77), Some(44));
        assert_eq!(holder_in(table, 0xfd, 1, 78), Some(22));
        assert_eq!(holder_in(table, 0xfd, 2, 77), None);
        assert_eq!(holder_in("garbage\n1: FLOCK\n", 0xfd, 1, 77), None);
    }

    /// The loser names the lock's holder, not a pid file that is missing (the winner has
    /// not written it yet) or left by a dead predecessor whose pid may have been reused.
    #[test]
    fn the_loser_names_the_lock_holder_whatever_the_pid_file_says() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        fs::create_dir_all(layout.supervisor_lane()).unwrap();
        let holder = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(layout.supervisor_lock())
            .unwrap();
        holder.try_lock().unwrap();
        let me = std::process::id();
        let busy = format!("supervisor already running for this project (pid={me})");
        // No pid file at all.
        assert_eq!(
            SupervisorLock::acquire(&layout).unwrap_err().to_string(),
            busy
        );
        // A predecessor's pid file naming a live process that is not the holder (pid 1).
        fs::write(layout.supervisor_pid(), "1\n").unwrap();
        fs::write(crate::layout::start_file(&layout.supervisor_pid()), "1\n").unwrap();
        assert_eq!(
            SupervisorLock::acquire(&layout).unwrap_err().to_string(),
            busy
        );
        assert_eq!(fs::read(layout.supervisor_pid()).unwrap(), b"1\n");
    }
}
