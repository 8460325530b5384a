//! The fleet-wide pauses: GitHub said "rate limited", so every process of this checkout
//! (the supervisor, its workers, the sweeps) holds back what costs API calls until the
//! reset (`docs/SPEC.md` §11.11); and the agent's account ran out, so nothing claims until
//! its reset (`.red/state/agent-pause.toon`, §11.13, below).
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
    let Some(mut pause) = read_record::<Pause>(path(state_dir))? else {
        return Ok(None);
    };
    pause.until_epoch = pause
        .until_epoch
        .min(pause.since_epoch.saturating_add(MAX_PAUSE_S))
        .min(now_epoch().saturating_add(MAX_PAUSE_S));
    Ok(Some(pause))
}

/// One pause record of either kind read with the safe-open rules; `Ok(None)` when the file
/// does not exist.
fn read_record<T: serde::de::DeserializeOwned>(p: PathBuf) -> Result<Option<T>, PauseFileError> {
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
    reddb_io_toon::from_str::<T>(&text)
        .map(Some)
        .map_err(|e| PauseFileError::NotAPause {
            path: p,
            why: e.to_string(),
        })
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
    lock_beside(state_dir, "fleet-pause.lock")
}

/// [`record_lock`]'s lock under any name in `state_dir`.
fn lock_beside(state_dir: &Path, name: &str) -> Option<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    let file = state_dir.join(name);
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

// ---- the agent pause (`docs/SPEC.md` §11.13) ----
//
// The agent's account (not the tracker) cannot run any issue: a usage limit, a missing or
// expired login, exhausted credit, an overloaded provider. Its own file, beside the rate
// limit's and with the same rules (written atomically under a lock, never removed, over by
// time, an unreadable file pauses nothing), so neither pause's format changes the other's.

/// The agent pause's file name under `.red/state/`.
pub const AGENT_FILE_NAME: &str = "agent-pause.toon";

/// Longest agent pause honoured: a weekly plan window, and a day of slack.
pub const MAX_AGENT_PAUSE_S: u64 = 8 * 86_400;

/// The first pause when the agent names no reset; each consecutive one doubles it.
pub const AGENT_BACKOFF_BASE_S: u64 = 60;

/// The longest pause of the doubling backoff.
pub const AGENT_BACKOFF_CAP_S: u64 = 3600;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentPause {
    /// What kind of condition, in words: `usage limit`, `login missing or expired`,
    /// `credit exhausted`, `provider overloaded`.
    pub kind: String,
    /// The agent's own words, one line.
    pub reason: String,
    /// When the fleet probes again (epoch seconds).
    pub until_epoch: u64,
    pub since_epoch: u64,
    /// Consecutive pauses without a known reset (the backoff's step); 0 once an attempt
    /// ran the agent without an account-wide end.
    pub step: u32,
}

impl AgentPause {
    pub fn active_at(&self, now: u64) -> bool {
        now < self.until_epoch
    }

    /// `usage limit until 2026-12-01T17:00:00Z (Claude AI usage limit reached|…)`.
    pub fn describe(&self) -> String {
        let until = std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.until_epoch);
        format!("{} until {} ({})", self.kind, rfc3339(until), self.reason)
    }
}

pub fn agent_path(state_dir: &Path) -> PathBuf {
    state_dir.join(AGENT_FILE_NAME)
}

/// The agent pause recorded under `state_dir`, over or not; clamped as it is read.
pub fn agent_read(state_dir: &Path) -> Result<Option<AgentPause>, PauseFileError> {
    let Some(mut pause) = read_record::<AgentPause>(agent_path(state_dir))? else {
        return Ok(None);
    };
    pause.until_epoch = pause
        .until_epoch
        .min(pause.since_epoch.saturating_add(MAX_AGENT_PAUSE_S))
        .min(now_epoch().saturating_add(MAX_AGENT_PAUSE_S));
    Ok(Some(pause))
}

/// The agent pause holding at `now`, if any; an unreadable file holds nothing.
pub fn agent_active_at(state_dir: &Path, now: u64) -> Option<AgentPause> {
    agent_read(state_dir)
        .ok()
        .flatten()
        .filter(|p| p.active_at(now))
}

/// Records that the agent's account stopped a run: until `reset_epoch` when the agent
/// named it, else for the next step of the doubling backoff ([`AGENT_BACKOFF_BASE_S`] …
/// [`AGENT_BACKOFF_CAP_S`]). A pause already holding longer is kept. Returns the pause in
/// force.
pub fn agent_record(
    state_dir: &Path,
    kind: &str,
    reason: &str,
    reset_epoch: Option<u64>,
) -> std::io::Result<AgentPause> {
    let _lock = lock_beside(state_dir, "agent-pause.lock");
    let now = now_epoch();
    let before = agent_read(state_dir).ok().flatten();
    if let Some(p) = before.as_ref().filter(|p| p.active_at(now))
        && reset_epoch.is_none_or(|r| p.until_epoch >= r)
    {
        return Ok(p.clone());
    }
    let (until, step) = match reset_epoch {
        Some(r) => (r.clamp(now + 1, now + MAX_AGENT_PAUSE_S), 0),
        None => {
            let step = before
                .as_ref()
                .map_or(0, |p| p.step.saturating_add(1).min(16));
            let backoff = AGENT_BACKOFF_BASE_S
                .saturating_mul(1u64 << (step.saturating_sub(1)).min(16))
                .min(AGENT_BACKOFF_CAP_S);
            (now + backoff, step.max(1))
        }
    };
    let pause = AgentPause {
        kind: crate::text::excerpt(&crate::text::one_line(kind)),
        reason: crate::text::excerpt(&crate::text::one_line(reason)),
        until_epoch: until,
        since_epoch: now,
        step,
    };
    write_agent(state_dir, &pause)?;
    Ok(pause)
}

/// Takes `other` (another host's agent pause, `[cluster]`) when it holds longer than the
/// one recorded here; whether it was taken.
pub fn agent_adopt(state_dir: &Path, other: &AgentPause) -> std::io::Result<bool> {
    let _lock = lock_beside(state_dir, "agent-pause.lock");
    let here = agent_read(state_dir).ok().flatten();
    if here.is_some_and(|p| p.until_epoch >= other.until_epoch) {
        return Ok(false);
    }
    write_agent(state_dir, other)?;
    Ok(true)
}

/// An attempt ran the agent to an end that was not account-wide: the backoff starts
/// over. Writes only when a pause with a step is recorded, so a healthy fleet costs no
/// write.
pub fn agent_clear(state_dir: &Path) -> std::io::Result<()> {
    let _lock = lock_beside(state_dir, "agent-pause.lock");
    match agent_read(state_dir) {
        Ok(Some(p)) if p.step > 0 && !p.active_at(now_epoch()) => {
            write_agent(state_dir, &AgentPause { step: 0, ..p })
        }
        _ => Ok(()),
    }
}

fn write_agent(state_dir: &Path, pause: &AgentPause) -> std::io::Result<()> {
    let text = reddb_io_toon::to_string(pause).map_err(|e| std::io::Error::other(e.to_string()))?;
    atomic_write(&agent_path(state_dir), format!("{text}\n").as_bytes())
}

// ---- the operator pause ----
//
// A second, independent fleet-wide pause beside the rate-limit one: an operator (or a
// program through `afk-supervisor mcp`) said "no new claims until I say so, or until a
// time". Its own file, `.red/state/operator-pause.toon`, so neither pause's writer can
// shorten or lift the other's. Unlike the rate-limit pause it has no upper bound (the
// operator lifts it), and `resume` replaces it with a record that holds nothing rather
// than deleting it, so the last word (and who said it) stays readable.

/// The operator pause file's name under `.red/state/`.
pub const OPERATOR_FILE_NAME: &str = "operator-pause.toon";

/// An operator's pause: no new claims or spawns; workers in flight finish their issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorPause {
    /// What the operator gave as the reason (one line), or `operator pause`.
    pub reason: String,
    /// When it was recorded (epoch seconds).
    pub since_epoch: u64,
    /// When the fleet resumes by itself; absent: until `resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_epoch: Option<u64>,
    /// Who asked: `cli` or `mcp`.
    #[serde(default)]
    pub via: String,
    /// A `resume` wrote this record: it holds nothing.
    #[serde(default)]
    pub resumed: bool,
}

impl OperatorPause {
    pub fn active_at(&self, now: u64) -> bool {
        !self.resumed && self.until_epoch.is_none_or(|t| now < t)
    }

    /// `until 2026-12-01T12:00:00Z (release freeze, via=cli)` or `until resumed (release
    /// freeze, via=mcp)`.
    pub fn describe(&self) -> String {
        format!("until {} ({}, via={})", self.until(), self.reason, self.via)
    }

    /// [`OperatorPause::describe`] without who asked, for a line that says it already
    /// (`control.request`'s `(via=…)`): `until resumed (release freeze)`.
    pub fn span(&self) -> String {
        format!("until {} ({})", self.until(), self.reason)
    }

    fn until(&self) -> String {
        match self.until_epoch {
            Some(t) => rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t)),
            None => "resumed".into(),
        }
    }
}

/// `.red/state/operator-pause.toon` under `state_dir`.
pub fn operator_path(state_dir: &Path) -> PathBuf {
    state_dir.join(OPERATOR_FILE_NAME)
}

/// The operator's last record, in force or not; `Ok(None)` when there never was one.
pub fn read_operator(state_dir: &Path) -> Result<Option<OperatorPause>, PauseFileError> {
    read_record(operator_path(state_dir))
}

/// The operator pause holding now; an unreadable file holds nothing (a planted file must
/// not stop the fleet; [`read_operator`] says why).
pub fn operator_active(state_dir: &Path) -> Option<OperatorPause> {
    read_operator(state_dir)
        .ok()
        .flatten()
        .filter(|p| p.active_at(now_epoch()))
}

/// Why an operator pause was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum OperatorPauseError {
    #[error("--until is in the past")]
    InThePast,
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn write_operator(state_dir: &Path, p: &OperatorPause) -> Result<(), OperatorPauseError> {
    let path = operator_path(state_dir);
    let text = reddb_io_toon::to_string(p).map_err(|e| OperatorPauseError::Write {
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    std::fs::create_dir_all(state_dir).map_err(|source| OperatorPauseError::Write {
        path: path.clone(),
        source,
    })?;
    atomic_write(&path, format!("{text}\n").as_bytes())
        .map_err(|source| OperatorPauseError::Write { path, source })
}

/// Pauses the fleet for the operator until `until_epoch` (or until [`resume_operator`]);
/// a pause already in force is replaced (the operator's latest word counts).
pub fn pause_operator(
    state_dir: &Path,
    reason: Option<&str>,
    until_epoch: Option<u64>,
    via: &str,
) -> Result<OperatorPause, OperatorPauseError> {
    let now = now_epoch();
    if until_epoch.is_some_and(|t| t <= now) {
        return Err(OperatorPauseError::InThePast);
    }
    let reason = reason
        .map(|r| crate::text::excerpt(&crate::text::one_line(r)))
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "operator pause".into());
    let p = OperatorPause {
        reason,
        since_epoch: now,
        until_epoch,
        via: via.to_string(),
        resumed: false,
    };
    write_operator(state_dir, &p)?;
    Ok(p)
}

/// Lifts the operator pause; returns the one that held, if any.
pub fn resume_operator(
    state_dir: &Path,
    via: &str,
) -> Result<Option<OperatorPause>, OperatorPauseError> {
    let was = operator_active(state_dir);
    let p = OperatorPause {
        reason: "resumed".into(),
        since_epoch: now_epoch(),
        until_epoch: None,
        via: via.to_string(),
        resumed: true,
    };
    write_operator(state_dir, &p)?;
    Ok(was)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_pause_takes_the_reset_or_a_doubling_backoff_and_pauses_nothing_when_hostile() {
        let dir = tempfile::tempdir().unwrap();
        let now = now_epoch();
        assert_eq!(agent_read(dir.path()), Ok(None));
        let p = agent_record(dir.path(), "usage limit", "limit|x", Some(now + 20)).unwrap();
        assert_eq!((p.until_epoch, p.step), (now + 20, 0));
        assert_eq!(agent_active_at(dir.path(), now), Some(p.clone()));
        assert!(agent_active_at(dir.path(), now + 20).is_none());
        // A second worker meeting the same limit keeps the one in force.
        assert_eq!(
            agent_record(dir.path(), "usage limit", "again", None).unwrap(),
            p
        );
        // Over: an unknown reset backs off 60 s, then 120 s.
        let over = AgentPause {
            until_epoch: now - 1,
            ..p
        };
        write_agent(dir.path(), &over).unwrap();
        let a = agent_record(dir.path(), "login missing or expired", "x", None).unwrap();
        assert_eq!((a.until_epoch, a.step), (now_epoch() + 60, 1));
        write_agent(
            dir.path(),
            &AgentPause {
                until_epoch: now - 1,
                ..a
            },
        )
        .unwrap();
        let b = agent_record(dir.path(), "login missing or expired", "x", None).unwrap();
        assert_eq!((b.until_epoch - b.since_epoch, b.step), (120, 2));
        write_agent(
            dir.path(),
            &AgentPause {
                until_epoch: now - 1,
                ..b
            },
        )
        .unwrap();
        agent_clear(dir.path()).unwrap();
        assert_eq!(agent_read(dir.path()).unwrap().unwrap().step, 0);
        // The rate-limit pause is untouched by all of it.
        assert_eq!(read(dir.path()), Ok(None));
        std::fs::write(agent_path(dir.path()), "garbage {{{").unwrap();
        assert!(agent_active_at(dir.path(), now).is_none());
        assert!(
            agent_read(dir.path())
                .unwrap_err()
                .to_string()
                .contains(AGENT_FILE_NAME)
        );
    }

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
    #[test]
    fn an_operator_pause_holds_until_resumed_or_its_time_and_leaves_the_rate_limit_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let now = now_epoch();
        assert!(operator_active(dir.path()).is_none());
        let p = pause_operator(dir.path(), Some("release\nfreeze"), None, "cli").unwrap();
        assert_eq!(p.reason, "release | freeze");
        assert_eq!(operator_active(dir.path()), Some(p.clone()));
        assert!(
            read(dir.path()).unwrap().is_none(),
            "rate-limit file untouched"
        );
        assert_eq!(resume_operator(dir.path(), "mcp").unwrap(), Some(p));
        assert!(operator_active(dir.path()).is_none());
        assert!(read_operator(dir.path()).unwrap().unwrap().resumed);
        assert!(matches!(
            pause_operator(dir.path(), None, Some(now - 1), "cli"),
            Err(OperatorPauseError::InThePast)
        ));
        let timed = pause_operator(dir.path(), None, Some(now + 60), "cli").unwrap();
        assert_eq!(timed.reason, "operator pause");
        assert!(timed.active_at(now + 59) && !timed.active_at(now + 60));
        std::fs::write(operator_path(dir.path()), "garbage {{{").unwrap();
        assert!(operator_active(dir.path()).is_none());
        assert!(
            read_operator(dir.path())
                .unwrap_err()
                .to_string()
                .contains(OPERATOR_FILE_NAME)
        );
    }
}
