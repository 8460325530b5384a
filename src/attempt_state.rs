//! The attempt state file `afk.state.json` (`docs/SPEC.md` §3).
//!
//! Other tools write this file too, so reading is lenient about what may be missing and
//! strict about what is there: a field of the wrong type makes the file corrupt, and a
//! corrupt file is an error naming the file (sweeps keep such a dir rather than guess).
//! Fields this tool does not know are carried through a rewrite untouched.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fsutil::{SmallFileError, atomic_write, read_small_file};
use crate::pidfile::{self, Liveness};

/// The file name inside an attempt dir.
pub const FILE_NAME: &str = "afk.state.json";

/// Left in an attempt dir by the supervisor just before it stops a worker that made no
/// progress (`docs/SPEC.md` §11.10): the worker, interrupted, then records its attempt as
/// `stalled` (a failure) instead of `given-back`, so an issue whose agent always hangs
/// reaches quarantine.
pub const STALL_KILLED_FILE: &str = "stall-killed";

/// Whether the supervisor marked the attempt in `dir` as stopped for a stall (a regular
/// file, never followed through a link).
pub fn stall_killed(dir: &std::path::Path) -> bool {
    std::fs::symlink_metadata(dir.join(STALL_KILLED_FILE)).is_ok_and(|m| m.is_file())
}

/// What a stall mark says: empty, the slot's own stall; `fleet-wide: <why>`, most busy
/// slots stalled at once and the supervisor judged it the provider's (`docs/SPEC.md`
/// §11.13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StallMark {
    Own,
    FleetWide(String),
}

const FLEET_WIDE_PREFIX: &str = "fleet-wide: ";

impl StallMark {
    /// The mark's content for a stall (`fleet_wide`: the supervisor's reason).
    pub fn text(fleet_wide: Option<&str>) -> String {
        fleet_wide.map_or(String::new(), |why| format!("{FLEET_WIDE_PREFIX}{why}\n"))
    }

    /// The mark in `dir`, when there is one (a regular file up to 4 KiB, never through a
    /// link; an unreadable one is the slot's own stall).
    pub fn read(dir: &std::path::Path) -> Option<StallMark> {
        if !stall_killed(dir) {
            return None;
        }
        let text = crate::fsutil::read_small_text(&dir.join(STALL_KILLED_FILE), 4096)
            .ok()
            .flatten()
            .unwrap_or_default();
        Some(match text.trim_end().strip_prefix(FLEET_WIDE_PREFIX) {
            Some(why) if !why.is_empty() => StallMark::FleetWide(why.to_string()),
            _ => StallMark::Own,
        })
    }
}

/// A state file larger than this is not a state file.
const MAX_BYTES: u64 = 1 << 20;

/// `<attempt dir>/afk.state.json`.
pub fn state_path(attempt_dir: &Path) -> PathBuf {
    attempt_dir.join(FILE_NAME)
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: corrupt state file: {why}")]
    Corrupt { path: PathBuf, why: String },
}

/// Why a state file's text is not a state.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("not a JSON object")]
    NotAnObject,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AttemptState {
    #[serde(default = "default_version")]
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// The process working this attempt. Signed so a stray negative is "no process", not
    /// a parse failure of the whole file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i64>,
    /// Field 22 of `/proc/<pid>/stat` when the writer recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start_time: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Written out as `null` when idle, as the other writers do.
    #[serde(default)]
    pub current: Option<Current>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<Envelope>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn default_version() -> u64 {
    1
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Current {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slug: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<Stage>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Where an attempt is (`current.stage`, and `last.stage` once it ended), written to disk
/// as the same words as before it was a type. Other tools write this file too: a stage
/// this tool does not know is kept as [`Stage::Other`] with its word, so reading never
/// fails on it and a rewrite carries it through unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Stage {
    /// The attempt dir and the worktree are being made.
    Worktree,
    /// The agent runs.
    Agent,
    /// The agent finished and the checks (`checks.command`) run.
    Checks,
    /// The work is being pushed and handed on.
    Publish,
    /// Handed on: the attempt is over.
    Done,
    /// The agent failed or hit the wall-clock cap: the attempt is over.
    Failed,
    /// The agent ran into an account-wide limit; the issue goes back to the queue.
    AccountLimited,
    /// The issue's own data cannot start an agent: handed to a person, the attempt over.
    SetAside,
    /// The sandbox refused the attempt's work: nothing pushed, the attempt over.
    Refused,
    /// Stopped before it finished; the issue went back to the queue.
    Interrupted,
    /// The hand-on after the agent's work failed part way.
    HandoffFailed,
    /// A word another writer used that this tool does not know.
    Other(String),
}

impl Stage {
    const KNOWN: [Stage; 11] = [
        Stage::Worktree,
        Stage::Agent,
        Stage::Checks,
        Stage::Publish,
        Stage::Done,
        Stage::Failed,
        Stage::AccountLimited,
        Stage::SetAside,
        Stage::Refused,
        Stage::Interrupted,
        Stage::HandoffFailed,
    ];

    /// The word on disk.
    pub fn as_str(&self) -> &str {
        match self {
            Stage::Worktree => "worktree",
            Stage::Agent => "agent",
            Stage::Checks => "checks",
            Stage::Publish => "publish",
            Stage::Done => "done",
            Stage::Failed => "failed",
            Stage::AccountLimited => "account-limited",
            Stage::SetAside => "set-aside",
            Stage::Refused => "refused",
            Stage::Interrupted => "interrupted",
            Stage::HandoffFailed => "handoff-failed",
            Stage::Other(word) => word,
        }
    }

    /// The attempt is over: the file then says `current: null` and keeps the stage under
    /// `last` only.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Stage::Done | Stage::Failed | Stage::Interrupted | Stage::SetAside | Stage::Refused
        )
    }

    /// The issue is past the point of going back to the queue: the agent's work is being
    /// handed on, or the issue was handed to a person. A failure from here on must not
    /// give it back, or the work would be done twice.
    pub fn keeps_issue(&self) -> bool {
        matches!(
            self,
            Stage::Publish | Stage::Done | Stage::SetAside | Stage::Refused
        )
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for Stage {
    fn from(word: String) -> Stage {
        Stage::KNOWN
            .into_iter()
            .find(|s| s.as_str() == word)
            .unwrap_or(Stage::Other(word))
    }
}

impl From<Stage> for String {
    fn from(stage: Stage) -> String {
        match stage {
            Stage::Other(word) => word,
            known => known.as_str().to_string(),
        }
    }
}

/// The terminal-event envelope: whether the issue thread already carries the record.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub posted: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AttemptState {
    /// Reads the state file of `attempt_dir`: `Ok(None)` when there is none. The file is
    /// opened without following a symlink: a link in its place is corrupt, not a pointer.
    pub fn read(attempt_dir: &Path) -> Result<Option<AttemptState>, StateError> {
        let path = state_path(attempt_dir);
        let bytes = match read_small_file(&path, MAX_BYTES) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(SmallFileError::Io(source)) => return Err(StateError::Io { path, source }),
            Err(e) => {
                return Err(StateError::Corrupt {
                    path,
                    why: e.to_string(),
                });
            }
        };
        Self::parse(&bytes)
            .map(Some)
            .map_err(|why| StateError::Corrupt {
                path,
                why: why.to_string(),
            })
    }

    /// Parses the JSON text of a state file; the error is serde's one-line description.
    pub fn parse(bytes: &[u8]) -> Result<AttemptState, ParseError> {
        let value: Value = serde_json::from_slice(bytes)?;
        if !value.is_object() {
            return Err(ParseError::NotAnObject);
        }
        Ok(serde_json::from_value(value)?)
    }

    /// Writes the state file of `attempt_dir` atomically, unknown fields included.
    pub fn write(&self, attempt_dir: &Path) -> Result<(), StateError> {
        let path = state_path(attempt_dir);
        let mut text = serde_json::to_vec_pretty(self).map_err(|e| StateError::Corrupt {
            path: path.clone(),
            why: e.to_string(),
        })?;
        text.push(b'\n');
        atomic_write(&path, &text).map_err(|e| StateError::Io { path, source: e })
    }

    /// `envelope.posted`; missing means not posted (`docs/SPEC.md` §3).
    pub fn envelope_posted(&self) -> bool {
        self.envelope
            .as_ref()
            .and_then(|e| e.posted)
            .unwrap_or(false)
    }

    /// Whether the recorded process still runs: with `pid_start_time` the identity must
    /// match, without it existence decides. No pid, or one that is not a pid, is `None`.
    pub fn owner_liveness(&self) -> Option<Liveness> {
        let pid = i32::try_from(self.pid?).ok().filter(|p| *p > 0)?;
        Some(pidfile::judge_pid(pid, self.pid_start_time))
    }

    /// True when the recorded process is live.
    pub fn owner_is_live(&self) -> bool {
        self.owner_liveness().is_some_and(|l| l.is_live())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_stall_mark_says_whose_stall_it_was() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(StallMark::read(dir.path()), None);
        let mark = dir.path().join(STALL_KILLED_FILE);
        std::fs::write(&mark, StallMark::text(None)).unwrap();
        assert_eq!(StallMark::read(dir.path()), Some(StallMark::Own));
        std::fs::write(&mark, StallMark::text(Some("2 of 2 busy slots"))).unwrap();
        assert_eq!(
            StallMark::read(dir.path()),
            Some(StallMark::FleetWide("2 of 2 busy slots".into()))
        );
        // A link is no mark.
        std::fs::remove_file(&mark).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &mark).unwrap();
        assert_eq!(StallMark::read(dir.path()), None);
    }

    use super::*;
    use std::fs;

    #[test]
    fn reads_minimal_and_full_files() {
        let dir = tempfile::tempdir().unwrap();
        assert!(AttemptState::read(dir.path()).unwrap().is_none());
        fs::write(state_path(dir.path()), "{}").unwrap();
        let s = AttemptState::read(dir.path()).unwrap().unwrap();
        assert_eq!(s.version, 1);
        assert!(!s.envelope_posted());
        assert!(s.owner_liveness().is_none());

        fs::write(
            state_path(dir.path()),
            r#"{"version":1,"worker_id":"w1","pid":4242,"pid_start_time":9,
                "started_at":"2025-01-01T00:00:00Z",
                "current":{"number":7,"title":"t","slug":"s","worktree":"wt","started_at":"x","stage":"code"},
                "envelope":{"posted":true}}"#,
        )
        .unwrap();
        let s = AttemptState::read(dir.path()).unwrap().unwrap();
        assert!(s.envelope_posted());
        assert_eq!(s.current.as_ref().unwrap().number, Some(7));
        assert_eq!(s.pid, Some(4242));
        // Another writer's stage word is kept, not an error.
        assert_eq!(
            s.current.as_ref().unwrap().stage,
            Some(Stage::Other("code".into()))
        );
    }

    #[test]
    fn stages_are_the_same_words_on_disk() {
        for stage in Stage::KNOWN {
            let json = serde_json::to_string(&stage).unwrap();
            assert_eq!(json, format!("\"{}\"", stage.as_str()));
            assert_eq!(serde_json::from_str::<Stage>(&json).unwrap(), stage);
        }
        assert_eq!(
            serde_json::from_str::<Stage>(r#""account-limited""#).unwrap(),
            Stage::AccountLimited
        );
        let odd: Stage = serde_json::from_str(r#""reviewing""#).unwrap();
        assert_eq!(odd, Stage::Other("reviewing".into()));
        assert_eq!(serde_json::to_string(&odd).unwrap(), r#""reviewing""#);
        // A stage of the wrong type is still a corrupt file.
        assert!(AttemptState::parse(br#"{"current":{"stage":3}}"#).is_err());
    }

    #[test]
    fn unknown_fields_survive_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            state_path(dir.path()),
            r#"{"version":1,"pid":5,"heartbeat_pid":77,"notes":["a",{"b":1}],
                "current":{"number":3,"retries":2},"envelope":{"posted":false,"url":"u"}}"#,
        )
        .unwrap();
        let mut s = AttemptState::read(dir.path()).unwrap().unwrap();
        s.envelope.as_mut().unwrap().posted = Some(true);
        s.write(dir.path()).unwrap();
        let v: Value =
            serde_json::from_str(&fs::read_to_string(state_path(dir.path())).unwrap()).unwrap();
        assert_eq!(v["heartbeat_pid"], 77);
        assert_eq!(v["notes"][1]["b"], 1);
        assert_eq!(v["current"]["retries"], 2);
        assert_eq!(v["envelope"]["url"], "u");
        assert_eq!(v["envelope"]["posted"], true);
        assert_eq!(v["pid"], 5);
        let again = AttemptState::read(dir.path()).unwrap().unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn corrupt_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        for bad in [
            "{not json",
            "[]",
            "42",
            r#"{"pid":"abc"}"#,
            r#"{"envelope":{"posted":"yes"}}"#,
            "",
        ] {
            fs::write(state_path(dir.path()), bad).unwrap();
            let err = AttemptState::read(dir.path()).unwrap_err();
            assert!(matches!(err, StateError::Corrupt { .. }), "{bad}");
            assert!(err.to_string().contains(FILE_NAME), "{err}");
        }
    }

    #[test]
    fn a_symlinked_state_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere.json");
        fs::write(&target, r#"{"envelope":{"posted":true}}"#).unwrap();
        std::os::unix::fs::symlink(&target, state_path(dir.path())).unwrap();
        let err = AttemptState::read(dir.path()).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
    }

    #[test]
    fn owner_liveness_uses_the_start_time() {
        let me = std::process::id() as i64;
        let start = pidfile::process_start_time(me as i32).unwrap();
        let mut s = AttemptState {
            pid: Some(me),
            ..Default::default()
        };
        assert!(s.owner_is_live());
        s.pid_start_time = Some(start);
        assert!(s.owner_is_live());
        s.pid_start_time = Some(start + 1);
        assert!(!s.owner_is_live());
        s.pid = Some(-3);
        assert!(s.owner_liveness().is_none());
    }
}
