//! The supervisor lane `.red/tmp/supervisors/default/` (SPEC §4): the lock that makes one
//! supervisor per repo, the pid file with its start token, and the control files.

use std::fs::{self, File, TryLockError};
use std::io;
use std::path::PathBuf;

use crate::fsutil::{open_lock_file, remove_file_if_exists};
use crate::layout::Layout;
use crate::pidfile::{self, DeadReason, Liveness, MissingStart, NotLive, PidContent};

#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// Another supervisor holds the lock; nothing was changed.
    #[error("supervisor already running for this project (pid={})", pid.map_or("unknown".to_string(), |p| p.to_string()))]
    Busy { pid: Option<i32> },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// The held lane. The lock lives as long as this value (the descriptor is close-on-exec,
/// so no worker inherits it and outlives the supervisor holding it).
#[derive(Debug)]
pub struct Lane {
    layout: Layout,
    _lock: File,
    pub pid: i32,
    pub start: u64,
}

impl Lane {
    /// Takes the lock; on success writes the pid file and removes stale control files.
    /// Returns the lane and notes worth logging (a corrupt previous pid file, for one).
    pub fn acquire(layout: &Layout) -> Result<(Lane, Vec<String>), LaneError> {
        let lock_path = layout.supervisor_lock();
        let io_err = |path: PathBuf| move |source| LaneError::Io { path, source };
        fs::create_dir_all(layout.supervisor_lane()).map_err(io_err(layout.supervisor_lane()))?;
        let lock = open_lock_file(&lock_path).map_err(|e| io_err(lock_path.clone())(e.into()))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let pid = match pidfile::read_pid_file(&layout.supervisor_pid()) {
                    Ok(PidContent::Pid(p)) => Some(p),
                    _ => None,
                };
                return Err(LaneError::Busy { pid });
            }
            Err(TryLockError::Error(e)) => return Err(io_err(lock_path)(e)),
        }
        let mut notes = Vec::new();
        let pid_path = layout.supervisor_pid();
        match pidfile::liveness(&pid_path, MissingStart::Dead) {
            Liveness::Dead {
                reason: DeadReason::Corrupt(why),
            } => notes.push(format!(
                "{}: previous pid file corrupt ({why}); replaced",
                pid_path.display()
            )),
            Liveness::Live { pid, .. } => notes.push(format!(
                "{}: previous pid {pid} is live but does not hold the lock; replaced",
                pid_path.display()
            )),
            // The lock, not the pid file, says who runs: this process holds it.
            Liveness::Unknown { reason } => notes.push(format!(
                "previous pid file cannot be judged ({reason}); replaced"
            )),
            _ => {}
        }
        let me = std::process::id() as i32;
        let start = pidfile::write_pid_file(&pid_path, me).map_err(io_err(pid_path.clone()))?;
        for stale in [layout.supervisor_stop(), layout.resize_file()] {
            // Looked at, never followed: a symlink goes as a link. A directory is not ours
            // to remove; the loop then reports it once as not a regular file.
            match fs::symlink_metadata(&stale) {
                Ok(m) if m.is_dir() => notes.push(format!(
                    "{}: is a directory, not a control file; left in place and ignored",
                    stale.display()
                )),
                Ok(_) => {
                    remove_file_if_exists(&stale).map_err(io_err(stale.clone()))?;
                    notes.push(format!("{}: stale file removed", stale.display()));
                }
                Err(_) => {}
            }
        }
        Ok((
            Lane {
                layout: layout.clone(),
                _lock: lock,
                pid: me,
                start,
            },
            notes,
        ))
    }

    /// A clean stop: the pid files and the stop request go; the lock is released on drop.
    pub fn release(self) -> io::Result<()> {
        pidfile::remove_pid_file(&self.layout.supervisor_pid())?;
        remove_file_if_exists(&self.layout.supervisor_stop())
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
        let (lane, notes) = Lane::acquire(&layout).unwrap();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("previous pid file corrupt"))
        );
        assert!(!layout.resize_file().exists());
        let me = std::process::id() as i32;
        assert_eq!(running_supervisor(&layout), Ok((me, lane.start)));
        let before = fs::read(layout.supervisor_pid()).unwrap();
        let err = Lane::acquire(&layout).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("supervisor already running for this project (pid={me})")
        );
        assert_eq!(fs::read(layout.supervisor_pid()).unwrap(), before);
        lane.release().unwrap();
        assert!(!layout.supervisor_pid().exists());
        assert!(running_supervisor(&layout).is_err());
        let (again, _) = Lane::acquire(&layout).unwrap();
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
}
