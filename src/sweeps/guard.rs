//! The liveness judgements orphan cleanup and the attempt cap share: what a worker's
//! `worker.pid` says about its dir, and the re-check right before a removal (`docs/SPEC.md` §1:
//! liveness is judged again right before deleting, and what cannot be judged is kept).

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::attempt_state::{AttemptState, StateError};
use crate::pidfile::{DeadReason, Liveness, MissingStart, liveness};
use crate::rescue::{Keeper, Rescued};
use crate::safe_delete::DeleteError;
use crate::sweeps::worker_tree::{age, worker_pid};

/// A worker dir or claim without a pid file younger than this may still be being created.
pub const CREATION_GRACE: Duration = Duration::from_secs(60);

/// What a pid file says about the dir it guards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// A live process owns the dir.
    Live(i32),
    /// No pid file, in a dir modified within [`CREATION_GRACE`]: its owner may be between
    /// `mkdir` and writing the pid.
    Unborn,
    /// The pid file cannot be judged: the dir is kept.
    Unknown(String),
    Dead(DeadReason),
}

impl Guard {
    /// Judges `pid_file` (written by other tools: existence decides without a `.start`)
    /// as the guard of `dir`.
    pub fn of(pid_file: &Path, dir: &Path, now: SystemTime) -> Guard {
        match liveness(pid_file, MissingStart::ExistenceDecides) {
            Liveness::Live { pid, .. } => Guard::Live(pid),
            Liveness::Unknown { reason } => Guard::Unknown(reason),
            Liveness::Dead {
                reason: DeadReason::Missing,
            } if age(dir, now).is_ok_and(|a| a < CREATION_GRACE) => Guard::Unborn,
            Liveness::Dead { reason } => Guard::Dead(reason),
        }
    }

    /// The guard of a worker dir, from its `worker.pid`.
    pub fn of_worker(dir: &Path, now: SystemTime) -> Guard {
        Guard::of(&worker_pid(dir), dir, now)
    }
}

/// Why a removal did not happen: the re-check right before it found a reason to keep the
/// path, or the delete root refused or failed. The text is the decision's reason.
#[derive(Debug, thiserror::Error)]
pub enum NotRemoved {
    #[error("{what} {pid} became live")]
    BecameLive { what: &'static str, pid: i32 },
    #[error("{what} cannot be judged: {reason}")]
    Unjudgeable { what: &'static str, reason: String },
    #[error("state file now names a live pid")]
    StateNamesLive,
    #[error("cannot judge: {0}")]
    StateUnreadable(StateError),
    /// A dead worker's shell that gained content since it was judged.
    #[error("the shell gained content since it was judged")]
    ShellChanged,
    #[error("{0}")]
    Survey(std::io::Error),
    #[error("{0}")]
    Delete(#[from] DeleteError),
    /// The tree holds work no other ref has, and the rescue failed: it is kept.
    #[error("{0}; the tree is kept")]
    RescueFailed(String),
}

/// Before an attempt dir is removed: its work (uncommitted changes, commits no other ref
/// holds) is rescued onto a ref ([`crate::rescue`]); a rescue that fails keeps the dir. A
/// dry run rescues nothing.
pub fn rescue_first(
    keeper: &Keeper,
    attempt: &Path,
    why: &str,
    dry_run: bool,
) -> Result<Option<Rescued>, NotRemoved> {
    if dry_run {
        return Ok(None);
    }
    keeper
        .rescue(attempt, why)
        .map_err(|e| NotRemoved::RescueFailed(e.to_string()))
}

/// The note a sweep's line gets for a rescue it made.
pub fn rescue_note(rescued: &Option<Rescued>) -> String {
    match rescued {
        Some(r) if !r.already => format!("; {}", r.comment_line()),
        _ => String::new(),
    }
}

/// Judges `pid_file` again right before a removal: a process that became live, or a file
/// that can no longer be judged, stops it. `what` names the file in the reason.
pub fn recheck_pid_file(pid_file: &Path, what: &'static str) -> Result<(), NotRemoved> {
    match liveness(pid_file, MissingStart::ExistenceDecides) {
        Liveness::Live { pid, .. } => Err(NotRemoved::BecameLive { what, pid }),
        Liveness::Unknown { reason } => Err(NotRemoved::Unjudgeable { what, reason }),
        Liveness::Dead { .. } => Ok(()),
    }
}

/// Right before an attempt dir is removed: its worker must still not be live, and its own
/// state file must still be readable and name no live process.
pub fn recheck_attempt(worker: &Path, attempt: &Path) -> Result<(), NotRemoved> {
    recheck_pid_file(&worker_pid(worker), "worker.pid")?;
    match AttemptState::read(attempt) {
        Ok(Some(s)) if s.owner_is_live() => Err(NotRemoved::StateNamesLive),
        Err(e) => Err(NotRemoved::StateUnreadable(e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn guards_of_a_worker_dir() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join("w1");
        fs::create_dir(&w).unwrap();
        let now = SystemTime::now();
        assert_eq!(Guard::of_worker(&w, now), Guard::Unborn);
        assert!(matches!(
            Guard::of_worker(&w, now + 2 * CREATION_GRACE),
            Guard::Dead(DeadReason::Missing)
        ));
        let me = std::process::id() as i32;
        fs::write(worker_pid(&w), me.to_string()).unwrap();
        assert_eq!(Guard::of_worker(&w, now), Guard::Live(me));
        assert!(recheck_attempt(&w, &w.join("5-a1")).is_err());
        fs::remove_file(worker_pid(&w)).unwrap();
        fs::create_dir(worker_pid(&w)).unwrap();
        assert!(matches!(Guard::of_worker(&w, now), Guard::Unknown(_)));
        let err = recheck_pid_file(&worker_pid(&w), "worker.pid")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot be judged"), "{err}");
    }

    #[test]
    fn an_attempt_is_rechecked_by_its_own_state_too() {
        let dir = tempfile::tempdir().unwrap();
        let (w, a) = (dir.path().join("w1"), dir.path().join("w1/5-a1"));
        fs::create_dir_all(&a).unwrap();
        assert!(recheck_attempt(&w, &a).is_ok());
        let me = std::process::id();
        fs::write(a.join("afk.state.json"), format!("{{\"pid\": {me}}}")).unwrap();
        assert!(
            recheck_attempt(&w, &a)
                .unwrap_err()
                .to_string()
                .contains("live pid")
        );
        fs::write(a.join("afk.state.json"), "{").unwrap();
        assert!(
            recheck_attempt(&w, &a)
                .unwrap_err()
                .to_string()
                .contains("cannot judge")
        );
    }
}
