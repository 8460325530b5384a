//! The `RED_AFK_*` contract (`docs/SPEC.md` §6, §10, §11.2): every variable's name, and the
//! reading of the ones the supervisor hands a worker. The supervisor writes them
//! ([`slot_vars`]), the worker and the config read them, the worker passes the issue's to
//! its agent; one list keeps the writer and the readers spelling each the same.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::config::{self, Config, ConfigError};

/// What every variable of the contract starts with: the supervisor strips the caller's from
/// a worker's environment, the demo from its supervisor's.
pub const PREFIX: &str = "RED_AFK_";

// Supervisor → worker (SPEC §6).
pub const SWEEPS_DONE: &str = "RED_AFK_SWEEPS_DONE";
pub const SLOT: &str = "RED_AFK_SLOT";
pub const WORKER_ID: &str = "RED_AFK_WORKER_ID";
pub const RUNNER: &str = "RED_AFK_RUNNER";
pub const RETIRE_FILE: &str = "RED_AFK_RETIRE_FILE";
/// Seconds between a worker's liveness records while its agent runs (default 30).
pub const LIVENESS_S: &str = "RED_AFK_LIVENESS_S";

// Worker → agent (SPEC §6, §11.2).
pub const ISSUE: &str = "RED_AFK_ISSUE";
pub const BRANCH: &str = "RED_AFK_BRANCH";
pub const WORKTREE: &str = "RED_AFK_WORKTREE";
pub const ATTEMPT_DIR: &str = "RED_AFK_ATTEMPT_DIR";
pub const RESUME_BRANCH: &str = "RED_AFK_RESUME_BRANCH";
pub const ISSUE_TITLE: &str = "RED_AFK_ISSUE_TITLE";
pub const ISSUE_BODY: &str = "RED_AFK_ISSUE_BODY";
pub const ISSUE_TITLE_FILE: &str = "RED_AFK_ISSUE_TITLE_FILE";
pub const ISSUE_BODY_FILE: &str = "RED_AFK_ISSUE_BODY_FILE";
pub const ISSUE_TITLE_TRUNCATED: &str = "RED_AFK_ISSUE_TITLE_TRUNCATED";
pub const ISSUE_BODY_TRUNCATED: &str = "RED_AFK_ISSUE_BODY_TRUNCATED";

// Operator → config (SPEC §10).
pub const TRUNK: &str = "RED_AFK_TRUNK";

/// The numeric config variables and the key each sets; they pass the file's bound check.
pub const NUMERIC: [(&str, &str); 11] = [
    ("RED_AFK_TARGET", "fleet.workers"),
    ("RED_AFK_POLL_S", "timing.tick_s"),
    ("RED_AFK_FAST_DEATH_S", "timing.fast_death_s"),
    ("RED_AFK_CIRCUIT_K", "timing.circuit_k"),
    ("RED_AFK_CIRCUIT_WINDOW_S", "timing.circuit_window_s"),
    ("RED_AFK_HALF_OPEN_BASE_S", "timing.half_open_base_s"),
    ("RED_AFK_HALF_OPEN_CAP_S", "timing.half_open_cap_s"),
    ("RED_AFK_STOP_GRACE_S", "timing.stop_grace_s"),
    ("RED_AFK_STALL_THRESHOLD_S", "timing.stall_s"),
    ("RED_AFK_STALL_KILL_THRESHOLD_S", "timing.stall_kill_s"),
    (
        "RED_AFK_UNBLOCK_SWEEP_INTERVAL_S",
        "timing.unblock_interval_s",
    ),
];

/// Whether `name` belongs to the contract.
pub fn is_ours(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// The SPEC §6 variables of one slot, as the supervisor sets them.
pub fn slot_vars(
    slot: usize,
    worker_id: &str,
    runner: &str,
    retire_file: &Path,
) -> Vec<(String, String)> {
    vec![
        (SWEEPS_DONE.into(), "1".into()),
        (SLOT.into(), slot.to_string()),
        (WORKER_ID.into(), worker_id.into()),
        (RUNNER.into(), runner.into()),
        (RETIRE_FILE.into(), retire_file.display().to_string()),
    ]
}

/// What the supervisor tells a worker through `RED_AFK_*` (`docs/SPEC.md` §6).
#[derive(Debug, Clone)]
pub struct WorkerEnv {
    pub sweeps_done: bool,
    pub slot: Option<usize>,
    pub worker_id: String,
    /// `RED_AFK_RUNNER` as the config already read it (its one reader): the variable wins
    /// over the file there, so the worker and `status` name the same runner.
    pub runner: String,
    pub retire_file: Option<PathBuf>,
    /// Seconds between liveness records while an agent runs (`RED_AFK_LIVENESS_S`, default 30).
    pub liveness_s: u64,
}

impl WorkerEnv {
    /// Reads the variables; an out-of-range number is a configuration error (exit 78),
    /// found before anything is claimed.
    pub fn from_env(env: &HashMap<String, String>, config: &Config) -> Result<Self, ConfigError> {
        let get = |k: &str| {
            env.get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        Ok(WorkerEnv {
            sweeps_done: get(SWEEPS_DONE).as_deref() == Some("1"),
            slot: get(SLOT).and_then(|s| s.parse().ok()),
            worker_id: get(WORKER_ID)
                .filter(|id| valid_worker_id(id))
                .unwrap_or_else(|| format!("solo-{}", std::process::id())),
            runner: config.worker.runner.clone(),
            retire_file: get(RETIRE_FILE).map(PathBuf::from),
            liveness_s: config::env_seconds(env, LIVENESS_S, "liveness_s", 1)?.unwrap_or(30),
        })
    }

    pub fn retire_requested(&self) -> bool {
        self.retire_file.as_ref().is_some_and(|f| f.exists())
    }
}

/// A worker id becomes a directory and a branch component (`afk/<id>/<N>-<slug>`): keep it
/// to a safe alphabet and to what git accepts as one ref component (no `..`, no `.lock`
/// ending), so an id that would make an illegal branch is refused before anything is
/// claimed.
fn valid_worker_id(id: &str) -> bool {
    id.len() <= 64
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && crate::git::ref_component_problem(id).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_ids() {
        assert!(valid_worker_id("sup-12-slot-0-3"));
        for bad in [
            "", "../x", "a/b", "-x", ".x", "a b", "a..b", "x.lock", "w.lock",
        ] {
            assert!(!valid_worker_id(bad), "{bad}");
        }
    }

    #[test]
    fn every_name_carries_the_prefix() {
        let names = [
            SWEEPS_DONE,
            SLOT,
            WORKER_ID,
            RUNNER,
            RETIRE_FILE,
            LIVENESS_S,
            ISSUE,
            BRANCH,
            WORKTREE,
            ATTEMPT_DIR,
            RESUME_BRANCH,
            ISSUE_TITLE,
            ISSUE_BODY,
            ISSUE_TITLE_FILE,
            ISSUE_BODY_FILE,
            ISSUE_TITLE_TRUNCATED,
            ISSUE_BODY_TRUNCATED,
            TRUNK,
        ];
        for n in names.into_iter().chain(NUMERIC.iter().map(|(v, _)| *v)) {
            assert!(is_ours(n), "{n}");
        }
        assert_eq!(ISSUE_TITLE_FILE, format!("{ISSUE_TITLE}_FILE"));
        assert_eq!(ISSUE_BODY_TRUNCATED, format!("{ISSUE_BODY}_TRUNCATED"));
    }
}
