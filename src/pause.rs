//! The fleet-wide pause: GitHub said "rate limited", so every process of this checkout
//! (the supervisor, its workers, the sweeps) holds back what costs API calls until the
//! reset (`docs/SPEC.md` §11.11).
//!
//! The processes are separate, so the pause is a file, `.red/state/fleet-pause.toon`,
//! written atomically by whichever process met the limit and read with the safe-open
//! rules of [`crate::fsutil`]. It is never removed: a pause whose `until_epoch` has passed
//! is over, so a crash can never leave the fleet paused for good, and no two processes
//! race over deleting it. A file that cannot be read (a FIFO, garbage) pauses nothing:
//! a planted file must not stop the fleet, and the caller reports it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::{atomic_write, read_small_text};
use crate::timeutil::{now_epoch, rfc3339};

/// The file's name under `.red/state/`.
pub const FILE_NAME: &str = "fleet-pause.toon";

/// Largest pause file read (it holds one short record).
const MAX_BYTES: u64 = 16 << 10;

/// Longest pause honoured: GitHub's primary window is an hour; a reset further away is
/// someone else's clock or a bad file, and the fleet retries after this.
pub const MAX_PAUSE_S: u64 = 3700;

/// A pause when GitHub names no reset (a secondary limit): it asks for "a few minutes".
pub const DEFAULT_PAUSE_S: u64 = 60;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// One line: what GitHub said, e.g. `rate limited: API rate limit exceeded for user ID 1`.
    pub reason: String,
    /// When the fleet resumes by itself (epoch seconds).
    pub until_epoch: u64,
    /// When it was recorded (epoch seconds).
    pub since_epoch: u64,
}

impl Pause {
    /// Whether the pause still holds at `now` (epoch seconds).
    pub fn active_at(&self, now: u64) -> bool {
        now < self.until_epoch
    }

    /// `until 2026-12-01T12:00:00Z (rate limited: …)`, for log lines and errors.
    pub fn describe(&self) -> String {
        let until = std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.until_epoch);
        format!("until {} ({})", rfc3339(until), self.reason)
    }
}

/// `.red/state/fleet-pause.toon` of the checkout whose state dir is `state_dir`.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE_NAME)
}

/// Why the pause file could not be read; both name the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PauseFileError {
    /// Not read safely (a link, not a regular file, too large) or not readable.
    #[error("{}: {why}", path.display())]
    Unreadable { path: PathBuf, why: String },
    #[error("{}: not a pause record: {}", path.display(), crate::text::clip_quoted(why))]
    NotAPause { path: PathBuf, why: String },
}

/// The pause recorded under `state_dir`, whether or not it is over; `Ok(None)` when none
/// was ever recorded. Its end is clamped as it is read, not only as it is written: a
/// planted or hand-edited file, or a clock stepped back since the write, must not hold
/// the fleet longer than [`MAX_PAUSE_S`] past its record or past now.
pub fn read(state_dir: &Path) -> Result<Option<Pause>, PauseFileError> {
    let p = path(state_dir);
    let text = match read_small_text(&p, MAX_BYTES) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(PauseFileError::Unreadable {
                path: p,
                why: e.to_string(),
            });
        }
    };
    let mut pause =
        reddb_io_toon::from_str::<Pause>(&text).map_err(|e| PauseFileError::NotAPause {
            path: p,
            why: e.to_string(),
        })?;
    pause.until_epoch = pause
        .until_epoch
        .min(pause.since_epoch.saturating_add(MAX_PAUSE_S))
        .min(now_epoch().saturating_add(MAX_PAUSE_S));
    Ok(Some(pause))
}

/// The pause holding now, if any; an unreadable file holds nothing.
pub fn active(state_dir: &Path) -> Option<Pause> {
    read(state_dir)
        .ok()
        .flatten()
        .filter(|p| p.active_at(now_epoch()))
}

/// How long [`record`] tries for its lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The lock [`record`] holds while it reads and replaces the pause: `fleet-pause.lock`
/// beside the file (the pause itself is replaced by rename, so it cannot carry the lock),
/// released when the returned file is dropped. Tried for at most [`LOCK_WAIT`]; a lock
/// that cannot be had (held that long, or a hostile file there) gives `None` and the pause
/// is recorded without it, since a lost pause costs more than a race.
fn record_lock(state_dir: &Path) -> Option<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    let file = state_dir.join("fleet-pause.lock");
    let f = crate::fsutil::open_regular(&file, opts, crate::fsutil::Links::Refuse).ok()??;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match f.try_lock() {
            Ok(()) => return Some(f),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(_) => return None,
        }
    }
}

/// Records a pause until `until_epoch` (clamped to [`MAX_PAUSE_S`] from now), unless one
/// already holds at least that long. Returns the pause in force.
pub fn record(state_dir: &Path, reason: &str, until_epoch: u64) -> std::io::Result<Pause> {
    // Read, compare and write under one lock: two processes meeting limits at once must
    // not let a short pause (a secondary limit's minute) overwrite a long one.
    let _lock = record_lock(state_dir);
    let now = now_epoch();
    let until = until_epoch.clamp(now + 1, now + MAX_PAUSE_S);
    if let Some(p) = active(state_dir)
        && p.until_epoch >= until
    {
        return Ok(p);
    }
    let pause = Pause {
        reason: crate::text::excerpt(&crate::text::one_line(reason)),
        until_epoch: until,
        since_epoch: now,
    };
    let text =
        reddb_io_toon::to_string(&pause).map_err(|e| std::io::Error::other(e.to_string()))?;
    atomic_write(&path(state_dir), format!("{text}\n").as_bytes())?;
    Ok(pause)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_recorded_extended_never_shortened_and_ends_by_time() {
        let dir = tempfile::tempdir().unwrap();
        let now = now_epoch();
        assert_eq!(read(dir.path()), Ok(None));
        assert!(active(dir.path()).is_none());
        let p = record(
            dir.path(),
            "rate limited: API rate limit exceeded",
            now + 30,
        )
        .unwrap();
        assert_eq!(p.until_epoch, now + 30);
        assert_eq!(active(dir.path()), Some(p.clone()));
        // A shorter one keeps the longer; a longer one replaces it.
        assert_eq!(record(dir.path(), "other", now + 10).unwrap(), p);
        assert_eq!(
            record(dir.path(), "later", now + 50).unwrap().until_epoch,
            now + 50
        );
        // Absurd resets are clamped.
        let far = record(dir.path(), "far", now + 1_000_000).unwrap();
        assert!(far.until_epoch <= now_epoch() + MAX_PAUSE_S);
        // An expired pause holds nothing.
        let old = Pause {
            reason: "old".into(),
            until_epoch: now - 1,
            since_epoch: now - 100,
        };
        let text = reddb_io_toon::to_string(&old).unwrap();
        std::fs::write(path(dir.path()), text).unwrap();
        assert!(active(dir.path()).is_none());
        assert_eq!(read(dir.path()).unwrap(), Some(old));
    }

    #[test]
    fn a_far_future_pause_is_clamped_as_it_is_read_and_a_later_pause_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let now = now_epoch();
        let planted = Pause {
            reason: "planted".into(),
            until_epoch: now + 1_000_000_000,
            since_epoch: now,
        };
        let text = reddb_io_toon::to_string(&planted).unwrap();
        std::fs::write(path(dir.path()), format!("{text}\n")).unwrap();
        let read_back = read(dir.path()).unwrap().unwrap();
        assert_eq!(read_back.until_epoch, now + MAX_PAUSE_S);
        // Recorded long ago (a clock stepped back, or an old file): over already.
        let stale = Pause {
            since_epoch: now - 2 * MAX_PAUSE_S,
            ..planted
        };
        let text = reddb_io_toon::to_string(&stale).unwrap();
        std::fs::write(path(dir.path()), format!("{text}\n")).unwrap();
        assert!(active(dir.path()).is_none());
        let p = record(dir.path(), "rate limited", now + 60).unwrap();
        assert_eq!(p.until_epoch, now + 60);
    }

    #[test]
    fn a_hostile_pause_file_pauses_nothing_and_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), "garbage {{{").unwrap();
        assert!(active(dir.path()).is_none());
        let e = read(dir.path()).unwrap_err();
        assert!(e.to_string().contains(FILE_NAME), "{e}");
        std::fs::remove_file(path(dir.path())).unwrap();
        nix::unistd::mkfifo(&path(dir.path()), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(active(dir.path()).is_none());
        assert!(
            read(dir.path())
                .unwrap_err()
                .to_string()
                .contains(FILE_NAME)
        );
    }
}
